//! Where a long `dump`, `load`, `backup` or `compact` is, on stderr: a
//! spinner with the entries done and their rate while stderr is a
//! terminal, nothing otherwise (pipes, logs, tests); each command prints
//! its summary line when it ends.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A count of entries done, shown while stderr is a terminal.
pub struct Progress(ProgressBar);

impl Progress {
    /// A spinner saying `what` (`dumping`, `loading`, …).
    pub fn new(what: &str) -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress(ProgressBar::hidden());
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template("{spinner} {msg} {human_pos} entries ({per_sec})")
            .expect("valid progress template");
        bar.set_style(style);
        bar.set_message(what.to_owned());
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress(bar)
    }

    /// `entries` done so far.
    pub fn set(&self, entries: u64) {
        self.0.set_position(entries);
    }

    /// Remove the spinner (before the summary line is printed).
    pub fn clear(&self) {
        self.0.finish_and_clear();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}
