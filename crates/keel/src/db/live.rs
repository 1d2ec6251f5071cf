//! Reading a store that another process (or another `Database` of this
//! one) has open: a **live snapshot**, taken without the store's lock and
//! without writing anything (docs/store.md, "Reading a store in use";
//! docs/format.md, "The store directory" for `LIVE`).
//!
//! The writer publishes how far its journal is durable in `LIVE`, a small
//! file both map shared (`io::SharedMap`): once when it opens the store,
//! then one store to memory by the group-commit leader after each durable
//! group, before that group's commits are acknowledged (`publish`). A
//! reader (`open_read_only`):
//!
//! 1. reads that LSN *D* — at least every commit acknowledged before it
//!    looked, and nothing that was not durable;
//! 2. reads the data file's newest valid meta page (checkpoint *C*, the
//!    root and its CRC), and the journal's records from *C* + 1 up to *D*,
//!    which it replays into memory in LSN order: the snapshot is at
//!    max(*C*, *D*);
//! 3. reads tree pages only through references that record their CRC.
//!
//! What a concurrent checkpoint does shows as a failure, never as a wrong
//! answer: a recycled journal segment leaves records missing or stale, a
//! reused page fails its CRC. The open then tries again from step 1, a
//! bounded number of times ([`LIVE_ATTEMPTS`]); a read that fails later,
//! once the writer has checkpointed since the snapshot
//! ([`super::Database::live_snapshot_stale`]), is retried the same way by
//! its caller (`keel db`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::error::{DbError, Result};
use super::files::{DATA_FILE, LOCK_FILE};
use super::holder;
use super::meta;
use super::options::Options;
use super::state::{Access, Shared};
use crate::io::{DurableMirror, NotLocked, OpenMode, OpenOptions, Vfs};
use crate::journal::{Journal, Lsn};

/// The file in the store directory where the writer publishes its durable
/// LSN for live readers (docs/format.md, "The store directory").
pub const LIVE_FILE: &str = "LIVE";

/// `LIVE` word 0: ASCII `KEELLIVE`, as a little-endian word.
const MAGIC: u64 = u64::from_le_bytes(*b"KEELLIVE");
/// `LIVE` word 1, low half: the version of `LIVE`'s layout.
const VERSION: u64 = 1;

/// `LIVE`'s words: magic, version and writer's pid, the journal's store
/// id, the durable LSN. Words 4 to 7 are zeros.
const W_MAGIC: usize = 0;
const W_OWNER: usize = 1;
const W_STORE_ID: usize = 2;
const W_DURABLE: usize = 3;

/// How many times a live snapshot is tried before giving up with
/// [`DbError::SnapshotUnavailable`]; between tries the reader sleeps 1,
/// 2, 4, … up to 100 ms (about 0.7 s in all).
pub const LIVE_ATTEMPTS: u32 = 12;

/// The pause before attempt `attempt + 1`.
pub(crate) fn backoff(attempt: u32) -> Duration {
    Duration::from_millis((1u64 << attempt.min(7)).min(100))
}

/// The writer's side: make `LIVE` say that this process holds the store
/// and how far `journal` is durable, and keep it so from now on. Called
/// once the journal is recovered, before the store takes any commit.
/// Where the file system has no shared memory (the simulated one) or the
/// file cannot be made, nothing is published: live readers then refuse
/// the store as locked, as before.
pub(crate) fn publish(vfs: &dyn Vfs, dir: &Path, journal: &Journal) {
    let Ok(Some(map)) = vfs.shared_map(&dir.join(LIVE_FILE), true) else {
        return;
    };
    let map = Arc::new(map);
    // No owner while the words are rewritten: a reader that reads this
    // process's id afterwards reads them as this writer left them.
    map.store(W_OWNER, 0);
    map.store(W_MAGIC, MAGIC);
    map.store(W_STORE_ID, journal.store_id());
    for w in W_DURABLE + 1..crate::io::SHARED_MAP_WORDS {
        map.store(w, 0);
    }
    journal.mirror_durable_lsn(DurableMirror::new(Arc::clone(&map), W_DURABLE));
    map.store(W_OWNER, VERSION | u64::from(std::process::id()) << 32);
}

/// What one look at `LIVE` found: the durable LSN its writer published,
/// or why there is none to trust.
fn durable_lsn(vfs: &dyn Vfs, dir: &Path) -> std::result::Result<(Lsn, u64), String> {
    let map = match vfs.shared_map(&dir.join(LIVE_FILE), false) {
        Ok(Some(map)) => map,
        Ok(None) => return Err(no_publisher("there is no LIVE file")),
        Err(e) => return Err(format!("reading {LIVE_FILE}: {e}")),
    };
    let owner = map.load(W_OWNER);
    let holder = holder::lock_file_pid(vfs, &dir.join(LOCK_FILE));
    if map.load(W_MAGIC) != MAGIC || owner & 0xffff_ffff != VERSION {
        return Err(no_publisher("its LIVE file is not one this Keel reads"));
    }
    if holder != Some((owner >> 32) as u32) {
        return Err(no_publisher(&format!(
            "LIVE names process {}, LOCK {}",
            owner >> 32,
            holder.map_or("nobody".into(), |p| p.to_string())
        )));
    }
    let store_id = map.load(W_STORE_ID);
    let durable = map.load(W_DURABLE);
    // Read again: the owner may have gone and another come meanwhile.
    if map.load(W_OWNER) != owner {
        return Err(no_publisher("its writer changed while it was read"));
    }
    Ok((durable, store_id))
}

fn no_publisher(why: &str) -> String {
    format!(
        "the process that has it open publishes no durable LSN for readers ({why}): a Keel \
         without live readers, or one still opening the store"
    )
}

/// The newest valid meta page's generation, read now (`None`: neither
/// slot is valid, or the file cannot be read).
pub(crate) fn newest_generation(vfs: &dyn Vfs, dir: &Path) -> Option<u64> {
    let data = vfs
        .open(
            &dir.join(DATA_FILE),
            OpenOptions::new(OpenMode::Buffered).read_only(true),
        )
        .ok()?;
    let (a, b) = meta::read_metas(data.as_ref()).ok()?;
    meta::choose(&a, &b).ok().map(|(m, _)| m.generation)
}

/// Why one attempt failed.
enum Miss {
    /// The store's lock is free now: open it as usual.
    Unlocked(Box<dyn crate::io::LockGuard>),
    /// Not retried: no store, another format, bad options.
    Fatal(DbError),
    /// Retried: the writer publishes nothing (yet).
    NoPublisher(String),
    /// Retried: what the writer changed under the reader (or damage).
    Moved(DbError),
}

/// Open the store in `dir` read-only: with its lock when it is free (as
/// before live readers), else a live snapshot beside its writer (see the
/// module's documentation); `Ok((shared, live, attempts))`. Each attempt tries the
/// lock once, without `Vfs::lock`'s 100 ms of retries: a lock held for a
/// moment by a child process between its fork and its exec fails the
/// live attempt (`LOCK` and `LIVE` name different processes) and the
/// next attempt takes it.
pub(crate) fn open_read_only(dir: &Path, options: Options) -> Result<(Arc<Shared>, bool, u32)> {
    let vfs = Arc::clone(&options.vfs);
    if !vfs.exists(&dir.join(DATA_FILE))? {
        return Err(DbError::NotAStore {
            path: dir.to_path_buf(),
            reason: format!("no {DATA_FILE} in it"),
        });
    }
    let mut misses: Vec<(Option<u64>, String)> = Vec::new();
    let mut moved = false;
    for attempt in 0..LIVE_ATTEMPTS {
        if attempt > 0 {
            std::thread::sleep(backoff(attempt - 1));
        }
        let generation = newest_generation(vfs.as_ref(), dir);
        match attempt_live(dir, &options) {
            Ok(shared) => return Ok((shared, true, attempt + 1)),
            Err(Miss::Unlocked(guard)) => return locked(dir, options, guard, attempt + 1),
            Err(Miss::Fatal(e)) => return Err(e),
            Err(Miss::NoPublisher(why)) => misses.push((generation, why)),
            Err(Miss::Moved(e)) => {
                moved = true;
                misses.push((generation, e.to_string()));
                // The same failure every time while no checkpoint ran is
                // damage, not the writer: report it as such.
                let steady = misses.len() == LIVE_ATTEMPTS as usize
                    && misses.iter().all(|m| m == &misses[0])
                    && newest_generation(vfs.as_ref(), dir) == generation;
                if steady {
                    return Err(e);
                }
            }
        }
    }
    if !moved {
        // The holder never published: refused as locked, as before.
        return Err(holder::refused(vfs.as_ref(), dir));
    }
    Err(DbError::SnapshotUnavailable {
        path: dir.to_path_buf(),
        attempts: LIVE_ATTEMPTS,
        reason: misses.pop().map(|m| m.1).unwrap_or_default(),
    })
}

fn locked(
    dir: &Path,
    options: Options,
    guard: Box<dyn crate::io::LockGuard>,
    attempts: u32,
) -> Result<(Arc<Shared>, bool, u32)> {
    Shared::open_read_only(dir, options, guard, Access::ReadOnly).map(|s| (s, false, attempts))
}

/// One try at a live snapshot.
fn attempt_live(dir: &Path, options: &Options) -> std::result::Result<Arc<Shared>, Miss> {
    let vfs = options.vfs.as_ref();
    match holder::try_lock_store(vfs, dir) {
        Ok(guard) => return Err(Miss::Unlocked(guard)),
        Err(DbError::Locked { .. }) => {}
        Err(e) => return Err(Miss::Fatal(e)),
    }
    let (durable, store_id) = durable_lsn(vfs, dir).map_err(Miss::NoPublisher)?;
    let access = Access::Live { durable };
    let shared = match Shared::open_read_only(dir, options.clone(), Box::new(NotLocked), access) {
        Ok(s) => s,
        Err(
            e @ (DbError::NotAStore { .. }
            | DbError::UnsupportedFormat { .. }
            | DbError::BadOptions(_)),
        ) => return Err(Miss::Fatal(e)),
        Err(e) => return Err(Miss::Moved(e)),
    };
    if shared.journal.store_id() != store_id {
        return Err(Miss::NoPublisher(format!(
            "LIVE names journal {store_id:#x}, the store's is {:#x}",
            shared.journal.store_id()
        )));
    }
    Ok(shared)
}

#[cfg(test)]
mod tests {
    use super::super::{Database, DbError, LockHolder};

    fn get(db: &Database, key: &[u8]) -> Option<Vec<u8>> {
        let read = db.begin_read();
        let t = read.open_table("t").ok()?;
        t.get(key).unwrap().map(|v| v.to_vec())
    }

    fn commit(db: &Database, key: &[u8], value: &[u8]) {
        let txn = db.begin_write().unwrap();
        txn.open_table("t").unwrap().insert(key, value).unwrap();
        txn.commit().unwrap();
    }

    /// Beside a writer of this process, `open_read_only` opens a live
    /// snapshot: every acknowledged commit, fixed at the open, refreshed by
    /// reopening, through checkpoints that recycle the journal; writes
    /// are refused; the writer's files are not written.
    #[test]
    fn a_live_snapshot_beside_a_writer_holds_what_was_acknowledged() {
        let dir = std::env::temp_dir().join(format!("keel-live-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let writer = Database::builder()
            .background_checkpoints(false)
            .create(&dir)
            .unwrap();
        commit(&writer, b"a", b"1");
        let live = Database::open_read_only(&dir).unwrap();
        assert!(live.is_live());
        assert_eq!(live.open_attempts(), 1);
        assert_eq!(get(&live, b"a").as_deref(), Some(&b"1"[..]));
        // The holder is still the writer, whom a refused opener names.
        match Database::open(&dir) {
            Err(DbError::Locked { holder, .. }) => {
                assert_eq!(holder, LockHolder::OpenDatabase { read_only: false })
            }
            other => panic!("{other:?}"),
        }
        commit(&writer, b"b", b"2");
        assert_eq!(get(&live, b"b"), None, "a snapshot at the open");
        assert!(matches!(live.begin_write(), Err(DbError::ReadOnly(_))));
        assert!(matches!(live.checkpoint(), Err(DbError::ReadOnly(_))));
        assert!(!live.live_snapshot_stale());
        writer.checkpoint().unwrap();
        assert!(live.live_snapshot_stale());
        drop(live);
        for i in 0..200u32 {
            commit(&writer, &i.to_be_bytes(), &[7; 200]);
            if i % 50 == 49 {
                writer.checkpoint().unwrap();
            }
        }
        let live = Database::open_read_only(&dir).unwrap();
        assert_eq!(get(&live, b"b").as_deref(), Some(&b"2"[..]));
        assert_eq!(
            get(&live, &199u32.to_be_bytes()).as_deref(),
            Some(&[7; 200][..])
        );
        assert_eq!(live.stats().published_lsn, writer.stats().published_lsn);
        live.check().unwrap();
        drop(live);
        writer.close().unwrap();
        // With the writer gone, the lock is taken as before.
        let alone = Database::open_read_only(&dir).unwrap();
        assert!(!alone.is_live());
        drop(alone);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Records in the journal past the LSN the writer published durable
    /// (written, their `O_DSYNC` write not yet returned, as far as a
    /// reader can tell) are left out of a live snapshot.
    #[test]
    fn a_live_snapshot_stops_at_the_published_durable_lsn() {
        let dir = std::env::temp_dir().join(format!("keel-live-bound-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let writer = Database::builder()
            .background_checkpoints(false)
            .create(&dir)
            .unwrap();
        for i in 0..10u8 {
            commit(&writer, &[i], b"v");
        }
        let last = writer.stats().published_lsn;
        let live = Database::open_read_only(&dir).unwrap();
        assert_eq!(live.stats().published_lsn, last);
        drop(live);
        // As if the last 4 records' writes had not returned yet.
        let map = crate::io::SharedMap::create(&dir.join(super::LIVE_FILE)).unwrap();
        assert_eq!(map.load(super::W_DURABLE), last);
        map.store(super::W_DURABLE, last - 4);
        let live = Database::open_read_only(&dir).unwrap();
        assert_eq!(live.stats().published_lsn, last - 4);
        assert_eq!(get(&live, &[5]).as_deref(), Some(&b"v"[..]));
        assert_eq!(get(&live, &[6]), None, "commit 7 of 10 was not durable");
        drop(live);
        // The writer's next durable group publishes again.
        commit(&writer, b"next", b"v");
        let live = Database::open_read_only(&dir).unwrap();
        assert_eq!(get(&live, &[9]).as_deref(), Some(&b"v"[..]));
        drop(live);
        drop(writer);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
