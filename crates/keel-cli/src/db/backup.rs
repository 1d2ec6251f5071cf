//! `keel db backup STORE --to DIR`: a consistent, checked copy of a store
//! into a new store (`Database::backup`). STORE is opened read-only.

use std::path::Path;
use std::process::ExitCode;

use keel::db::{BackupProgress, BackupReport, Database, DbError};
use serde::Serialize;

use super::args::BackupArgs;
use super::failure::{check_store_dir, Failure, Kind};
use super::print_json;
use super::progress::Progress;
use crate::util::format_size_approx;

#[derive(Serialize)]
struct BackedUp {
    store: String,
    to: String,
    lsn: u64,
    tables: u64,
    entries: u64,
    key_value_bytes: u64,
    page_size_bytes: usize,
    data_file_bytes: u64,
}

pub fn run(a: BackupArgs) -> Result<ExitCode, Failure> {
    let db = open_source(
        &a.store,
        "backup",
        "Stop the process that has it open, or back it up from inside that process \
         (Database::backup copies a store while other threads commit)",
    )?;
    let progress = Progress::new("backing up");
    let report = db
        .backup_with_progress(&a.to, |p: &BackupProgress| progress.set(p.entries))
        .map_err(|e| backup_failure(e, &a.store, &a.to))?;
    progress.clear();
    let out = BackedUp {
        store: a.store.display().to_string(),
        to: a.to.display().to_string(),
        lsn: report.lsn,
        tables: report.tables,
        entries: report.entries,
        key_value_bytes: report.key_value_bytes,
        page_size_bytes: report.page_size,
        data_file_bytes: report.data_file_bytes,
    };
    if a.out.json {
        print_json(&out)?;
    } else {
        outln!(
            "backed up store {} (lsn {}) into {}",
            out.store,
            out.lsn,
            out.to
        )?;
        outln!("  {}", summary(&report))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// One line of what a backup copied.
pub fn summary(r: &BackupReport) -> String {
    format!(
        "{} tables, {} entries ({} of keys and values); data file {}; checked",
        r.tables,
        r.entries,
        format_size_approx(r.key_value_bytes),
        format_size_approx(r.data_file_bytes)
    )
}

/// Open `store` read-only for `keel db COMMAND`: a store another process
/// has open is refused, saying why and what to do (`advice`).
pub fn open_source(store: &Path, command: &str, advice: &str) -> Result<Database, Failure> {
    check_store_dir(store)?;
    Database::builder()
        .background_checkpoints(false)
        .open_read_only(store)
        .map_err(|e| match e {
            DbError::Locked { .. } => Failure::new(
                Kind::Locked,
                format!(
                    "{e}: `keel db {command}` must open the store, and a store's lock is \
                     exclusive: a copy taken from another process needs read-only access beside \
                     the writer, which Keel does not have yet. {advice}"
                ),
            ),
            e => Failure::from_db(e, store),
        })
}

fn backup_failure(e: DbError, store: &Path, to: &Path) -> Failure {
    let refused = matches!(e, DbError::BackupTarget { .. });
    let mut f = Failure::from_db(e, store);
    if !refused && to.exists() {
        f.message += &format!(
            " ({} is left without its data file, so it never opens as a store: remove it \
             before trying again)",
            to.display()
        );
    }
    f
}
