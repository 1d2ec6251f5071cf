//! `keel db backup STORE --to DIR`: a consistent, checked copy of a store
//! into a new store (`Database::backup`). STORE is opened read-only.

use std::path::Path;
use std::process::ExitCode;

use keel::db::{BackupProgress, BackupReport, Database, DbError, LIVE_ATTEMPTS};
use serde::Serialize;

use super::args::BackupArgs;
use super::failure::{check_store_dir, Failure, Kind};
use super::live::{again, no_snapshot, pause_first, say_live};
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
    let report = copy(&a.store, &a.to)?;
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

/// Back the store up into `to`. A store another process has open is
/// copied from a live snapshot; when a read of it fails once the writer
/// has checkpointed since it was taken (it may have reused the pages
/// read), the partial copy is emptied out of `to` (which was empty or
/// missing: `Database::backup` refuses anything else) and a new snapshot
/// copied, up to `LIVE_ATTEMPTS` in all (then exit 3).
fn copy(store: &Path, to: &Path) -> Result<BackupReport, Failure> {
    let mut said = false;
    let mut attempt = 0;
    loop {
        let db = open_source(store, "backup", "", true)?;
        say_live(&db, store, &mut said);
        pause_first(&db, attempt);
        let progress = Progress::new("backing up");
        let copied = db.backup_with_progress(to, |p: &BackupProgress| progress.set(p.entries));
        progress.clear();
        let e = match copied {
            Ok(report) => return Ok(report),
            Err(e) => e,
        };
        let refused = matches!(e, DbError::BackupTarget { .. });
        if refused || !db.live_snapshot_stale() {
            return Err(backup_failure(e, store, to));
        }
        attempt += 1;
        if attempt >= LIVE_ATTEMPTS {
            return Err(no_snapshot(store, attempt, &e.to_string()));
        }
        drop(db);
        empty_out(to)?;
        again(attempt, &e.to_string());
    }
}

/// Remove everything inside `dir` (a partial copy), leaving `dir`.
fn empty_out(dir: &Path) -> Result<(), Failure> {
    let fail = |e: std::io::Error| {
        Failure::internal(format!(
            "removing the partial copy in {}: {e} (remove it before trying again)",
            dir.display()
        ))
    };
    for entry in std::fs::read_dir(dir).map_err(fail)? {
        let path = entry.map_err(fail)?.path();
        match path.is_dir() && !path.is_symlink() {
            true => std::fs::remove_dir_all(&path).map_err(fail)?,
            false => std::fs::remove_file(&path).map_err(fail)?,
        }
    }
    Ok(())
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

/// Open `store` read-only for `keel db COMMAND`. A store another process
/// has open is a live snapshot when `live` is allowed; otherwise it is
/// refused, saying why and what to do (`advice`).
pub fn open_source(
    store: &Path,
    command: &str,
    advice: &str,
    live: bool,
) -> Result<Database, Failure> {
    check_store_dir(store)?;
    let db = Database::builder()
        .background_checkpoints(false)
        .open_read_only(store)
        .map_err(|e| match e {
            DbError::Locked { .. } => Failure::new(
                Kind::Locked,
                format!("{e}: `keel db {command}` cannot run beside it. {advice}"),
            ),
            e => Failure::from_db(e, store),
        })?;
    if db.is_live() && !live {
        let holder = keel::db::LockHolder::OtherProcess {
            pid: super::live::lock_pid(store),
        };
        return Err(Failure::new(
            Kind::Locked,
            format!(
                "store {} is in use by {holder}: `keel db {command}` must hold the store's lock \
                 to the end, which a process that has it open keeps. {advice}",
                store.display()
            ),
        ));
    }
    Ok(db)
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
