//! Progress bars: always on stderr, so stdout stays clean for a table or a
//! JSON object that another program reads.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Update the bar every this many operations: a bar update costs an atomic
/// add and a clock read, which we keep out of all but a tiny share of the
/// timed loop.
pub const PROGRESS_STEP: u64 = 256;

/// A bar for `len` operations labelled `prefix` (e.g. `fdatasync/fallocate`).
/// Hidden when stderr is not a terminal (pipes, CI logs, test harnesses) or
/// when `quiet` is set.
pub fn bar(len: u64, prefix: impl Into<String>, quiet: bool) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let style = ProgressStyle::with_template(
        "{prefix:<32} [{bar:30}] {pos:>8}/{len:8} {per_sec:>12} eta {eta}",
    )
    .expect("valid progress template")
    .progress_chars("=> ");
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    bar.set_style(style);
    bar.set_prefix(prefix.into());
    bar
}
