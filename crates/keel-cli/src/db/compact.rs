//! `keel db compact STORE`: rewrite the store into a fresh, compact data
//! file and put it in the store's place, crash-safe at every step
//! (`swap.rs` says how), then report the sizes before and after.
//!
//! `KEEL_COMPACT_CRASH_AT=STEP` (not in `--help`; docs/testing.md) makes
//! the command kill itself with `SIGKILL` at that step, for the crash
//! tests: `opened`, `copying`, `copied`, `synced`, `marked`,
//! `half-swapped`, `swapped`, `swap-synced`, `removing`, `done`.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::ExitCode;

use serde::Serialize;

use super::args::StoreArgs;
use super::backup::{open_source, summary};
use super::failure::Failure;
use super::print_json;
use super::progress::Progress;
use super::swap::{self, Paths, Protocol};
use crate::util::format_size_approx;

/// The environment variable naming the step to crash at.
pub const CRASH_ENV: &str = "KEEL_COMPACT_CRASH_AT";

/// A store's size on disk.
#[derive(Debug, Clone, Copy, Default, Serialize)]
struct Sizes {
    /// The data file's length.
    data_file_bytes: u64,
    /// The blocks the file system gave it (`st_blocks`).
    data_file_allocated_bytes: u64,
    journal_segments: u64,
    /// The blocks of the journal's segment files (preallocated: a new
    /// store's two segments take two segment sizes).
    journal_allocated_bytes: u64,
    /// Every file of the store directory.
    allocated_bytes: u64,
}

#[derive(Serialize)]
struct Compacted {
    store: String,
    lsn: u64,
    tables: u64,
    entries: u64,
    before: Sizes,
    after: Sizes,
    /// The data file's allocated bytes after over before.
    data_file_ratio: f64,
    swap: Protocol,
    leftovers_removed: Vec<String>,
    leftovers_kept: Vec<String>,
}

/// Kill this process with `SIGKILL` if `KEEL_COMPACT_CRASH_AT` names
/// `step`.
fn crash_point(step: &str) {
    if std::env::var(CRASH_ENV).is_ok_and(|v| v == step) {
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    }
}

pub fn run(a: StoreArgs) -> Result<ExitCode, Failure> {
    let db = open_source(
        &a.store,
        "compact",
        "Stop the process that has it open, then compact it.",
        false,
    )?;
    let io = |what: &str| {
        let what = what.to_owned();
        move |e: std::io::Error| Failure::internal(format!("{what}: {e}"))
    };
    let paths = Paths::of(&a.store).map_err(io(&format!("{}", a.store.display())))?;
    crash_point("opened");
    let cleaned = swap::clean(&paths).map_err(io("removing what an earlier compact left"))?;
    for left in &cleaned.removed {
        errln!("note: removed {left}, left by a compact that did not finish");
    }
    for left in &cleaned.kept {
        errln!("note: left {left} alone: the compact that made it is still running");
    }
    let before = measure(&paths.store).map_err(io("measuring the store"))?;
    let copy = paths.copy();
    let progress = Progress::new("copying");
    let report = db.backup_with_progress(&copy, |p| {
        progress.set(p.entries);
        crash_point("copying");
    });
    progress.clear();
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            let _ = swap::remove_tree(&copy);
            return Err(Failure::from_db(e, &a.store));
        }
    };
    crash_point("copied");
    let unchanged = |what: &str| {
        let what = what.to_owned();
        let copy = copy.clone();
        move |e: std::io::Error| {
            let _ = swap::remove_tree(&copy);
            Failure::internal(format!("{what}: {e}; the store is unchanged"))
        }
    };
    swap::sync_tree(&copy).map_err(unchanged("syncing the copy"))?;
    swap::sync_dir(&paths.parent).map_err(unchanged("syncing the store's parent directory"))?;
    crash_point("synced");
    let protocol =
        swap::swap(&paths, &crash_point).map_err(unchanged("putting the copy in place"))?;
    swap::sync_dir(&paths.parent).map_err(io(
        "syncing the store's parent directory after the swap (the store is the compacted one)",
    ))?;
    crash_point("swap-synced");
    // The old store's lock is held to here: nothing committed to it since
    // it was copied.
    drop(db);
    if let Err(e) = swap::remove_old(&paths, protocol, &crash_point) {
        errln!(
            "warning: the store is compacted, but removing the old one, {}, failed: {e} (the \
             next compact removes it)",
            swap::old_store(&paths, protocol).display()
        );
    }
    let after = measure(&paths.store).map_err(io("measuring the compacted store"))?;
    crash_point("done");
    let out = Compacted {
        store: a.store.display().to_string(),
        lsn: report.lsn,
        tables: report.tables,
        entries: report.entries,
        data_file_ratio: after.data_file_allocated_bytes as f64
            / before.data_file_allocated_bytes.max(1) as f64,
        before,
        after,
        swap: protocol,
        leftovers_removed: cleaned.removed,
        leftovers_kept: cleaned.kept,
    };
    print(&out, &report, a.out.json)?;
    Ok(ExitCode::SUCCESS)
}

fn print(out: &Compacted, report: &keel::db::BackupReport, json: bool) -> Result<(), Failure> {
    if json {
        return print_json(out);
    }
    let line = |s: &Sizes| {
        format!(
            "data file {} ({} allocated), journal {} in {} segment file(s); {} in all",
            format_size_approx(s.data_file_bytes),
            format_size_approx(s.data_file_allocated_bytes),
            format_size_approx(s.journal_allocated_bytes),
            s.journal_segments,
            format_size_approx(s.allocated_bytes)
        )
    };
    outln!("compacted store {} (lsn {})", out.store, out.lsn)?;
    outln!("  copied   {}", summary(report))?;
    outln!("  before   {}", line(&out.before))?;
    outln!("  after    {}", line(&out.after))?;
    let how = match out.swap {
        Protocol::Exchange => "one renameat2(RENAME_EXCHANGE)",
        Protocol::Renames => {
            "two renames behind a marker file (the file system refused an exchange)"
        }
    };
    outln!(
        "  data file {:.1} % of its allocated size before; swapped in with {how}",
        out.data_file_ratio * 100.0
    )?;
    Ok(())
}

/// The sizes of the store at `dir`.
fn measure(dir: &Path) -> std::io::Result<Sizes> {
    let mut s = Sizes::default();
    let data = std::fs::metadata(dir.join(keel::db::DATA_FILE))?;
    s.data_file_bytes = data.len();
    s.data_file_allocated_bytes = data.blocks() * 512;
    for entry in std::fs::read_dir(dir.join(keel::db::JOURNAL_DIR))? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().ends_with(".seg") {
            s.journal_segments += 1;
            s.journal_allocated_bytes += entry.metadata()?.blocks() * 512;
        }
    }
    s.allocated_bytes = allocated(dir)?;
    Ok(s)
}

/// The blocks of every file under `dir`, in bytes.
fn allocated(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            allocated(&entry.path())?
        } else {
            meta.blocks() * 512
        };
    }
    Ok(total)
}
