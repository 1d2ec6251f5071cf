//! The reading commands (`get`, `scan`, `tables`, `stats`, `check`) on a
//! store another process has open: a live snapshot
//! (`Database::open_read_only` beside the writer), taken again from the
//! start when the writer's checkpoint changed what it read (bounded:
//! exit 3 when no snapshot holds).

use std::path::Path;

use keel::db::{Database, DbError, LIVE_ATTEMPTS};

use super::failure::{check_store_dir, Failure, Kind};

/// The exit code of a store in use of which no consistent snapshot could
/// be read within the attempts.
pub const EXIT_NO_SNAPSHOT: u8 = 3;

/// Open the store at `store` for a reading command: read-only when
/// `read_only` (`--read-only`), else as usual (recovery may write, the
/// lock is taken) unless another process holds it, in which case read-only
/// too — and then, when its writer publishes its durable LSN, a live
/// snapshot, which stderr says.
pub fn open_for_reading(store: &Path, read_only: bool) -> Result<Database, Failure> {
    check_store_dir(store)?;
    let fail = |e| Failure::from_db(e, store);
    let builder = Database::builder().background_checkpoints(false);
    let db = match read_only {
        true => builder.open_read_only(store).map_err(fail)?,
        false => match builder.clone().open(store) {
            Ok(db) => db,
            Err(DbError::Locked { .. }) => builder.open_read_only(store).map_err(fail)?,
            Err(e) => return Err(fail(e)),
        },
    };
    Ok(db)
}

/// Say on stderr, once, that `db` is a live snapshot of a store in use.
pub fn say_live(db: &Database, store: &Path, said: &mut bool) {
    if !db.is_live() || std::mem::replace(said, true) {
        return;
    }
    let holder = match lock_pid(store) {
        Some(pid) => format!("process {pid}"),
        None => "another process".to_string(),
    };
    let tries = match db.open_attempts() {
        1 => String::new(),
        n => format!(
            "; taken at attempt {n}, the writer's checkpoints having changed what the earlier \
             ones read"
        ),
    };
    errln!(
        "note: store {} is in use by {holder}: reading a snapshot of it at lsn {} (every commit \
         acknowledged before this command began; nothing is written{tries})",
        store.display(),
        db.stats().published_lsn
    );
}

/// The process id in the store's `LOCK`, if any.
pub fn lock_pid(store: &Path) -> Option<u32> {
    std::fs::read_to_string(store.join(keel::db::LOCK_FILE))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Open the store for reading (see [`open_for_reading`]) and run `read`
/// on it. On a live snapshot, a failure (`Damaged` or `Failed`) once the
/// writer has checkpointed since the snapshot was taken is the snapshot
/// growing old, not damage: it is taken again and `read` run again, up to
/// `LIVE_ATTEMPTS` snapshots in all; then exit 3. `read` must print
/// nothing: its caller prints what it returns, once.
pub fn read_store<T>(
    store: &Path,
    read_only: bool,
    mut read: impl FnMut(&Database) -> Result<T, Failure>,
) -> Result<T, Failure> {
    let mut said = false;
    let mut attempt = 0;
    loop {
        let db = open_for_reading(store, read_only)?;
        say_live(&db, store, &mut said);
        pause_first(&db, attempt);
        let failure = match read(&db) {
            Ok(t) => return Ok(t),
            Err(f) => f,
        };
        let retry =
            matches!(failure.kind, Kind::Damaged | Kind::Failed) && db.live_snapshot_stale();
        if !retry {
            return Err(failure);
        }
        attempt += 1;
        if attempt >= LIVE_ATTEMPTS {
            return Err(no_snapshot(store, attempt, &failure.message));
        }
        drop(db);
        again(attempt, &failure.message);
    }
}

/// Say why the snapshot is taken again, and pause before attempt
/// `attempt + 1` (2, 4, … up to 64 ms).
pub fn again(attempt: u32, why: &str) {
    errln!(
        "note: a read of the snapshot failed while the writer went on ({why}): taking a new \
         snapshot"
    );
    std::thread::sleep(std::time::Duration::from_millis(1 << attempt.min(6)));
}

/// A fail point for tests (tests/db_live.rs): with
/// `KEEL_FAILPOINT_LIVE_PAUSE_MS=N` in the environment, sleep N ms
/// between taking the first live snapshot and reading it, long enough for
/// the writer's checkpoints to reuse the pages it is about to read.
pub fn pause_first(db: &Database, attempt: u32) {
    if !db.is_live() || attempt > 0 {
        return;
    }
    let pause = std::env::var("KEEL_FAILPOINT_LIVE_PAUSE_MS").ok();
    if let Some(ms) = pause.and_then(|v| v.parse().ok()) {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

/// The exit-3 failure: no consistent snapshot of a store in use.
pub fn no_snapshot(store: &Path, attempts: u32, last: &str) -> Failure {
    Failure::from_db(
        DbError::SnapshotUnavailable {
            path: store.to_path_buf(),
            attempts,
            reason: last.to_string(),
        },
        store,
    )
}
