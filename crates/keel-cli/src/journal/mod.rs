//! `keel journal dump` and `keel journal check`: look inside a journal
//! directory without opening it — no lock is taken and nothing is written,
//! so both are safe to run next to a live process, and on a copy of a
//! damaged journal before anything tries to recover it.
//!
//! Both read the directory with `keel::journal::inspect`, the same scan
//! recovery runs, so "where recovery would stop" is what recovery does.
//! The format is specified in `docs/format.md`.

mod print;
mod report;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use keel::io::{RealVfs, Vfs};

/// Exit codes, the same for both commands.
const EXIT_CODES: &str = "Exit codes:\n  \
    0  the journal is clean, or ends in a torn tail that recovery discards (a write cut short \
       by a crash: no acknowledged record is lost)\n  \
    1  the journal is corrupt: damage followed by valid records, a damaged segment header in \
       or below the chain, a segment file of the wrong length, or a file that cannot be read\n  \
    2  nothing to inspect: the directory is missing, is not a directory, or holds no segment \
       files; or the command line is wrong";

#[derive(Subcommand, Debug)]
pub enum JournalCommand {
    /// List a journal's segments (and records), and where recovery would
    /// stop and why. Read-only: takes no lock, writes nothing.
    #[command(after_help = EXIT_CODES)]
    Dump(DumpArgs),
    /// Check a journal: print a summary and exit non-zero if it is corrupt
    /// (rather than merely torn at its tail by a crash). Read-only: takes no
    /// lock, writes nothing.
    #[command(after_help = EXIT_CODES)]
    Check(CheckArgs),
}

#[derive(Args, Debug)]
pub struct DumpArgs {
    /// The journal directory (holding `NNNNNNNNNNNNNNNNNNNN.seg` files).
    dir: PathBuf,
    /// List the records of the recovered chain, one per line.
    #[arg(long)]
    records: bool,
    /// List records from this LSN on (implies --records).
    #[arg(long, value_name = "LSN")]
    from: Option<u64>,
    /// List at most this many records (implies --records).
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// Print the first BYTES bytes of each record's payload in hex
    /// (implies --records).
    #[arg(long, value_name = "BYTES", num_args = 0..=1, default_missing_value = "32")]
    payload: Option<usize>,
    /// Print one JSON object on stdout instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The journal directory (holding `NNNNNNNNNNNNNNNNNNNN.seg` files).
    dir: PathBuf,
    /// Print one JSON object on stdout instead of text.
    #[arg(long)]
    json: bool,
}

/// Which records a dump lists.
#[derive(Debug, Clone, Copy)]
pub struct RecordFilter {
    pub from: u64,
    pub limit: usize,
    /// Payload bytes to show in hex (0: none).
    pub payload_bytes: usize,
}

pub fn run(cmd: JournalCommand) -> anyhow::Result<ExitCode> {
    let vfs = RealVfs::shared();
    match cmd {
        JournalCommand::Dump(a) => {
            let filter =
                (a.records || a.from.is_some() || a.limit.is_some() || a.payload.is_some()).then(
                    || RecordFilter {
                        from: a.from.unwrap_or(0),
                        limit: a.limit.unwrap_or(usize::MAX),
                        payload_bytes: a.payload.unwrap_or(0),
                    },
                );
            inspect_and_print(vfs.as_ref(), &a.dir, filter, a.json)
        }
        JournalCommand::Check(a) => inspect_and_print(vfs.as_ref(), &a.dir, None, a.json),
    }
}

/// Inspect `dir`, print the report (text or JSON), and return the exit
/// code of its status.
fn inspect_and_print(
    vfs: &dyn Vfs,
    dir: &Path,
    filter: Option<RecordFilter>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let exists = std::fs::metadata(dir);
    match exists {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            errln!("error: {}: no such directory", dir.display());
            return Ok(ExitCode::from(2));
        }
        Ok(m) if !m.is_dir() => {
            errln!("error: {} is not a directory", dir.display());
            return Ok(ExitCode::from(2));
        }
        // Other errors (permissions) surface, with the path, when the scan
        // reads the directory.
        _ => {}
    }
    let report = match report::build(vfs, dir, filter) {
        Ok(r) => r,
        Err(e) => {
            errln!("error: {e:#}");
            return Ok(ExitCode::from(2));
        }
    };
    if json {
        outln!("{}", serde_json::to_string(&report)?)?;
    } else {
        print::print(&report)?;
    }
    if let Some(e) = &report.error {
        errln!("error: {e}");
    }
    Ok(ExitCode::from(report.status.exit_code()))
}
