//! Tests of the store on the simulated file system.

use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::io::{CrashMode, SimVfs};

fn small_journal() -> JournalOptions {
    JournalOptions {
        segment_size_bytes: 256 << 10,
        ..JournalOptions::default()
    }
}

pub(super) fn builder(vfs: &Arc<SimVfs>) -> Builder {
    Database::builder()
        .vfs(Arc::clone(vfs) as Arc<dyn Vfs>)
        .journal(small_journal())
        .background_checkpoints(false)
}

pub(super) fn get(db: &Database, table: &str, key: &[u8]) -> Option<Vec<u8>> {
    let r = db.begin_read();
    let t = r.open_table(table).ok()?;
    t.get(key).unwrap().map(|v| v.to_vec())
}

#[test]
fn commit_reopen_checkpoint_and_reopen() {
    let vfs = SimVfs::new(1);
    let dir = Path::new("/s");
    let db = builder(&vfs).create(dir).unwrap();
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table("a").unwrap();
        t.insert(b"k1", b"v1").unwrap();
        t.insert(b"k2", vec![7u8; 10_000]).unwrap();
        assert_eq!(t.get(b"k1").unwrap().as_deref(), Some(&b"v1"[..]));
    }
    w.commit().unwrap();
    assert_eq!(get(&db, "a", b"k1").as_deref(), Some(&b"v1"[..]));
    drop(db);
    let db = builder(&vfs).open(dir).unwrap();
    assert_eq!(get(&db, "a", b"k2"), Some(vec![7u8; 10_000]));
    assert_eq!(db.checkpoint().unwrap(), Some(1));
    db.check().unwrap();
    db.close().unwrap();
    vfs.crash(CrashMode::PowerLoss);
    let db = builder(&vfs).open(dir).unwrap();
    assert_eq!(get(&db, "a", b"k1").as_deref(), Some(&b"v1"[..]));
    assert_eq!(get(&db, "a", b"k2"), Some(vec![7u8; 10_000]));
    db.check().unwrap();
}

/// A blind transaction putting one key twice (written as both puts, in
/// order: format.md) leaves the second value, before and after a power
/// cut replays its record; in a table created by an earlier commit and in
/// one the same transaction creates (the replayed, sorted record).
#[test]
fn a_key_put_twice_in_a_blind_transaction_keeps_its_last_value() {
    let vfs = SimVfs::new(11);
    let dir = Path::new("/s");
    let db = builder(&vfs).create(dir).unwrap();
    let w = db.begin_write().unwrap();
    w.open_table("old").unwrap();
    w.commit().unwrap();
    for table in ["old", "new"] {
        let w = db.begin_write().unwrap();
        let mut t = w.open_table(table).unwrap();
        for i in 0..40u8 {
            t.insert([i % 7], [i]).unwrap();
        }
        w.commit().unwrap();
    }
    let expect = |db: &Database| {
        for table in ["old", "new"] {
            for k in 0..7u8 {
                let last = (0..40u8).filter(|i| i % 7 == k).max().unwrap();
                assert_eq!(get(db, table, &[k]), Some(vec![last]), "{table} {k}");
            }
        }
    };
    expect(&db);
    drop(db);
    vfs.crash(CrashMode::PowerLoss);
    let db = builder(&vfs).open(dir).unwrap();
    expect(&db);
    db.check().unwrap();
}

/// Readers see only durable commits: a commit whose journal write fails is
/// never visible, even one not waited for (`Eventual`).
#[test]
fn a_reader_never_sees_a_commit_that_is_not_durable() {
    let vfs = SimVfs::new(2);
    let dir = Path::new("/s");
    let db = builder(&vfs).create(dir).unwrap();
    let w = db.begin_write().unwrap();
    w.open_table("t").unwrap().insert(b"a", b"1").unwrap();
    w.commit().unwrap();
    // The next journal write fails.
    vfs.fail_after(crate::io::OpKind::Write, 0, libc::EIO);
    let mut w = db.begin_write().unwrap();
    w.set_durability(Durability::Eventual);
    w.open_table("t").unwrap().insert(b"b", b"2").unwrap();
    let _ = w.commit();
    for _ in 0..100 {
        assert_eq!(get(&db, "t", b"b"), None, "a failed commit became visible");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(get(&db, "t", b"a").as_deref(), Some(&b"1"[..]));
    // The store stopped accepting writes.
    assert!(matches!(db.begin_write(), Err(DbError::Poisoned(_))));
    drop(db);
    vfs.crash(CrashMode::PowerLoss);
    let db = builder(&vfs).open(dir).unwrap();
    assert_eq!(get(&db, "t", b"b"), None);
    assert_eq!(get(&db, "t", b"a").as_deref(), Some(&b"1"[..]));
}

/// Bad input to the API gives clear errors and changes nothing.
#[test]
fn oversized_keys_values_and_transactions_are_refused_before_submit() {
    let vfs = SimVfs::new(3);
    let db = builder(&vfs).create("/s").unwrap();
    let limits = db.limits();
    let w = db.begin_write().unwrap();
    let mut t = w.open_table("t").unwrap();
    let long = vec![1u8; limits.max_key_bytes + 1];
    assert!(matches!(
        t.insert(&long, b"x"),
        Err(DbError::KeyTooLong { .. })
    ));
    t.insert(vec![1u8; limits.max_key_bytes], b"ok").unwrap();
    // A value past what one record can hold is refused as a value, for
    // any key; one that fits alone but not beside its key, as the
    // transaction's size.
    let max_value = usize::try_from(limits.max_value_bytes).unwrap();
    assert!(max_value < limits.max_transaction_bytes);
    match t.insert(b"", vec![0u8; max_value + 1]) {
        Err(DbError::ValueTooLong { len, max }) => {
            assert_eq!((len, max), (max_value as u64 + 1, limits.max_value_bytes))
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        t.insert(b"k", vec![0u8; max_value]),
        Err(DbError::TransactionTooLarge { .. })
    ));
    w.commit().unwrap();
    // The longest value does fit, alone in its transaction.
    let w = db.begin_write().unwrap();
    w.open_table("t")
        .unwrap()
        .insert(b"", vec![7u8; max_value])
        .unwrap();
    assert_eq!(w.record_bytes().unwrap(), limits.max_transaction_bytes);
    w.commit().unwrap();
    assert_eq!(get(&db, "t", b"").map(|v| v.len()), Some(max_value));
    let w = db.begin_write().unwrap();
    w.open_table("t").unwrap().remove(b"").unwrap();
    w.commit().unwrap();
    let r = db.begin_read();
    assert_eq!(r.open_table("t").unwrap().iter().count(), 1);
    assert!(matches!(r.open_table("nope"), Err(DbError::NoSuchTable(_))));
    assert!(matches!(
        r.open_table(""),
        Err(DbError::BadTableName { .. })
    ));
}

#[test]
fn a_second_open_of_a_store_in_use_is_refused_and_a_missing_store_is_not_a_store() {
    let vfs = SimVfs::new(4);
    let db = builder(&vfs).create("/s").unwrap();
    assert!(matches!(
        builder(&vfs).open("/s"),
        Err(DbError::Locked { .. })
    ));
    assert!(matches!(
        builder(&vfs).open("/nothing"),
        Err(DbError::NotAStore { .. })
    ));
    drop(db);
    builder(&vfs).open("/s").unwrap();
}

fn commit_one(db: &Database, k: &[u8], v: &[u8]) -> Result<()> {
    let w = db.begin_write()?;
    w.open_table("t")?.insert(k, v)?;
    w.commit()
}

/// Fail-stop: after an I/O error in a commit's journal write, nothing more
/// is acknowledged; reopening recovers every acknowledged commit.
#[test]
fn a_failed_journal_write_stops_the_store_and_reopen_recovers() {
    for errno in [libc::EIO, libc::ENOSPC] {
        let vfs = SimVfs::new(5);
        let db = builder(&vfs).create("/s").unwrap();
        for i in 0..20u8 {
            commit_one(&db, &[i], b"v").unwrap();
        }
        vfs.fail_after(crate::io::OpKind::Write, 0, errno);
        assert!(matches!(
            commit_one(&db, b"x", b"v"),
            Err(DbError::CommitFailed(_))
        ));
        for _ in 0..3 {
            assert!(
                commit_one(&db, b"y", b"v").is_err(),
                "acknowledged after a failure"
            );
        }
        assert!(db.checkpoint().is_err());
        assert!(db.close().is_err(), "close reports the failure");
        vfs.crash(CrashMode::PowerLoss);
        let db = builder(&vfs).open("/s").unwrap();
        for i in 0..20u8 {
            assert_eq!(get(&db, "t", &[i]).as_deref(), Some(&b"v"[..]));
        }
        assert_eq!(get(&db, "t", b"y"), None);
        db.check().unwrap();
        commit_one(&db, b"z", b"after").unwrap();
    }
}

/// Fail-stop: an I/O error while a checkpoint writes the data file (a page
/// write, its sync, or the meta page) stops the store; reopening recovers
/// every acknowledged commit from the older meta page and the journal.
#[test]
fn a_failed_checkpoint_stops_the_store_and_reopen_recovers() {
    for (kind, nth, errno) in [
        (crate::io::OpKind::Write, 0, libc::ENOSPC),
        (crate::io::OpKind::Write, 1, libc::EIO),
        (crate::io::OpKind::Sync, 0, libc::EIO),
        (crate::io::OpKind::Sync, 1, libc::EIO),
    ] {
        let vfs = SimVfs::new(6);
        let db = builder(&vfs).create("/s").unwrap();
        for i in 0..50u8 {
            commit_one(&db, &[i], &[i; 300]).unwrap();
        }
        db.checkpoint().unwrap();
        for i in 50..100u8 {
            commit_one(&db, &[i], &[i; 300]).unwrap();
        }
        // Aimed at the data file: the journal may still be preparing its
        // next segment on another thread, and its sync must not take the
        // fault meant for the checkpoint.
        let data = Path::new("/s").join(super::DATA_FILE);
        vfs.fail_after_on(&data, kind, nth, errno);
        assert!(db.checkpoint().is_err(), "{kind:?} {nth}");
        assert!(matches!(
            commit_one(&db, b"late", b"v"),
            Err(DbError::Poisoned(_))
        ));
        drop(db);
        vfs.crash(CrashMode::PowerLoss);
        let db = builder(&vfs).open("/s").unwrap();
        for i in 0..100u8 {
            assert_eq!(get(&db, "t", &[i]), Some(vec![i; 300]), "{kind:?} {nth}");
        }
        assert_eq!(get(&db, "t", b"late"), None);
        db.check().unwrap();
        db.checkpoint().unwrap();
        db.check().unwrap();
    }
}

/// A store ten times larger than its page cache opens without reading it
/// all, and reading it keeps the cache within its budget.
#[test]
fn a_store_larger_than_the_cache_opens_lazily_and_stays_in_budget() {
    let vfs = SimVfs::new(7);
    let db = builder(&vfs).create("/s").unwrap();
    for b in 0..40u32 {
        let w = db.begin_write().unwrap();
        let mut t = w.open_table("t").unwrap();
        for i in 0..100u32 {
            t.insert((b * 100 + i).to_be_bytes(), [b as u8; 600])
                .unwrap();
        }
        w.commit().unwrap();
    }
    db.close().unwrap();
    let budget = 256 << 10;
    let db = builder(&vfs).cache_bytes(budget).open("/s").unwrap();
    let file_bytes = db.stats().page_count * 4096;
    assert!(file_bytes > 10 * budget as u64, "{file_bytes}");
    let opened = db.stats().cache;
    assert!(opened.misses <= 2, "open read {} pages", opened.misses);
    let r = db.begin_read();
    let t = r.open_table("t").unwrap();
    for k in (0..4000u32).step_by(7) {
        assert_eq!(t.get(k.to_be_bytes()).unwrap().unwrap().len(), 600);
    }
    let s = db.stats().cache;
    assert!(s.cached_bytes <= budget as u64, "{s:?}");
    assert!(s.evictions > 0, "{s:?}");
}

/// Commit `len` bytes of `value` under each of `keys` and checkpoint.
fn put_all(db: &Database, keys: impl Iterator<Item = u32>, value: u8, len: usize) {
    let keys: Vec<u32> = keys.collect();
    for part in keys.chunks(100) {
        let w = db.begin_write().unwrap();
        {
            let mut t = w.open_table("t").unwrap();
            for k in part {
                t.insert(k.to_be_bytes(), vec![value; len]).unwrap();
            }
        }
        w.commit().unwrap();
    }
    db.checkpoint().unwrap();
}

/// Page-cache misses while reading `keys`, checking their value.
fn misses_reading(db: &Database, keys: impl Iterator<Item = u32>, value: u8, len: usize) -> u64 {
    let before = db.stats().cache.misses;
    let r = db.begin_read();
    let t = r.open_table("t").unwrap();
    for k in keys {
        assert_eq!(
            &*t.get(k.to_be_bytes()).unwrap().unwrap(),
            &vec![value; len][..]
        );
    }
    db.stats().cache.misses - before
}

/// A checkpoint keeps in the page cache the new versions of the leaves
/// the cache held (the pieces of one it split too), and adds no others: a
/// fold that rewrites every leaf leaves the cache as readers filled it,
/// not full of what it wrote.
#[test]
fn a_checkpoint_caches_what_readers_had_cached_and_nothing_else() {
    let vfs = SimVfs::new(7);
    let db = builder(&vfs)
        .cache_bytes(32 << 20)
        .read_mapped(false)
        .create("/s")
        .unwrap();
    // Even keys, 600-byte values: loaded in order, leaves of three.
    let even = |n: u32| (0..n).map(|k| 2 * k);
    put_all(&db, even(4000), 1, 600);
    assert!(
        misses_reading(&db, even(200), 1, 600) > 40,
        "the checkpoint cached leaves no reader had read"
    );
    assert_eq!(misses_reading(&db, even(200), 1, 600), 0);
    put_all(&db, even(4000), 2, 600);
    assert_eq!(
        misses_reading(&db, even(200), 2, 600),
        0,
        "the new versions of the cached leaves were not kept"
    );
    // The rewrite packed the leaves five or six to a page: 35 misses.
    assert!(
        misses_reading(&db, even(1200).skip(1000), 2, 600) > 20,
        "leaves no reader had cached were kept"
    );
    // Every key between them too, 1,000-byte values: six to a leaf of
    // three, so every leaf splits.
    put_all(&db, 0..8000, 3, 1000);
    assert_eq!(
        misses_reading(&db, 0..400, 3, 1000),
        0,
        "the pieces of a cached leaf that split were not kept"
    );
    // Counted last: it reads every leaf. No page holds four 1,000-byte
    // values.
    let leaves = db.tree_stats().unwrap().leaves;
    assert!(leaves >= 2000, "{leaves} leaves: the leaves did not split");
}

/// A damaged record in the middle of the journal (not a torn tail) makes
/// the open fail with a clear error instead of dropping acknowledged
/// commits.
#[test]
fn damage_inside_the_journal_is_an_error_at_open() {
    let vfs = SimVfs::new(8);
    let db = builder(&vfs).create("/s").unwrap();
    // More than the reach of a torn write (the largest write, 1 MiB)
    // follows the damage, so it cannot be a torn tail.
    for i in 0..40u8 {
        commit_one(&db, &[i], &vec![i; 60_000]).unwrap();
    }
    drop(db);
    let jdir = Path::new("/s/journal");
    let seg = vfs
        .read_dir(jdir)
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".seg"))
        .min()
        .expect("a segment");
    // Block 0 is the header; damage the first record's payload.
    vfs.corrupt(&jdir.join(seg), 4096 + 1000, &[0xAA; 8])
        .unwrap();
    let err = builder(&vfs).open("/s").unwrap_err();
    assert!(
        matches!(
            err,
            DbError::Journal(crate::journal::JournalError::Corrupt { .. })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("corrupt"), "{err}");
}

/// A table whose creation is refused for the transaction's size leaves no
/// half-made catalog entry: the next table gets an id of its own, and the
/// two never share keys.
#[test]
fn a_refused_table_creation_never_gives_an_id_twice() {
    let vfs = SimVfs::new(9);
    let db = builder(&vfs).create("/s").unwrap();
    commit_one(&db, b"seed", b"x").unwrap();
    let max = db.limits().max_transaction_bytes;
    let w = db.begin_write().unwrap();
    let before = w.record_bytes().unwrap();
    // Leave room for either of the two catalog updates (the name's entry:
    // 18 bytes; the id counter's: 15) but not for both.
    let fill = max - before - (7 + 4 + 1) - 20;
    w.open_table("t")
        .unwrap()
        .insert(b"k", vec![0u8; fill])
        .unwrap();
    assert!(matches!(
        w.open_table("new"),
        Err(DbError::TransactionTooLarge { .. })
    ));
    w.commit().unwrap();
    let w = db.begin_write().unwrap();
    w.open_table("other")
        .unwrap()
        .insert(b"mine", b"1")
        .unwrap();
    assert!(w.open_table("new").unwrap().get(b"mine").unwrap().is_none());
    w.commit().unwrap();
    let r = db.begin_read();
    assert_eq!(r.open_table("new").unwrap().iter().count(), 0);
    assert_eq!(r.open_table("other").unwrap().iter().count(), 1);
}

/// Checkpoints encode their pages while writers run: a writer copying,
/// overwriting or deleting what a checkpoint in progress is placing frees
/// the pages it reserved, so that every page stays accounted for exactly
/// once (`check`), in memory and after a power cut.
#[test]
fn writers_running_during_checkpoints_keep_every_page_accounted_for() {
    let vfs = SimVfs::new(7);
    let dir = Path::new("/s");
    let db = builder(&vfs).create(dir).unwrap();
    let mut model = std::collections::BTreeMap::new();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let taken = std::sync::atomic::AtomicU64::new(0);
    let checkpoints = std::thread::scope(|s| {
        let ckpt = s.spawn(|| {
            while !stop.load(Relaxed) {
                if db.checkpoint().unwrap().is_some() {
                    taken.fetch_add(1, Relaxed);
                }
            }
            taken.load(Relaxed)
        });
        // A writer that panics (its commit failed) must still stop the
        // checkpointer: the scope waits for it, and the test would hang
        // instead of failing.
        let _stop = StopOnDrop(&stop);
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        // At least 400 transactions, and on until 5 checkpoints ran
        // among them (on a busy machine the checkpointer can lag).
        for round in 0..100_000u32 {
            if round >= 400 && taken.load(Relaxed) >= 5 {
                break;
            }
            let w = db.begin_write().unwrap();
            random_changes(&mut w.open_table("t").unwrap(), &mut rng, round, &mut model);
            w.commit().unwrap();
        }
        stop.store(true, Relaxed);
        ckpt.join().unwrap()
    });
    assert!(checkpoints >= 5, "only {checkpoints} checkpoints ran");
    db.check().unwrap();
    db.checkpoint().unwrap();
    db.check().unwrap();
    drop(db);
    vfs.crash(CrashMode::PowerLoss);
    let db = builder(&vfs).open(dir).unwrap();
    db.check().unwrap();
    let r = db.begin_read();
    let t = r.open_table("t").unwrap();
    let got: Vec<(Vec<u8>, Vec<u8>)> = t
        .iter()
        .map(|kv| {
            let kv = kv.unwrap();
            (kv.0.as_bytes().to_vec(), kv.1.as_bytes().to_vec())
        })
        .collect();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.into_iter().map(|(k, v)| (k.to_vec(), v)).collect();
    assert_eq!(got, want);
}

/// Sets its flag when dropped, on a panic's unwinding too.
struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Relaxed);
    }
}

/// Make 20 changes of transaction `round` to `t` and to `model`: among
/// 3,000 keys, a delete, a value of 9,000 bytes (overflow pages) or one of
/// 100 bytes.
fn random_changes(
    t: &mut TableMut<'_>,
    rng: &mut u64,
    round: u32,
    model: &mut std::collections::BTreeMap<[u8; 8], Vec<u8>>,
) {
    for _ in 0..20 {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        let k = (*rng % 3000).to_be_bytes();
        match *rng >> 60 {
            0 => {
                t.remove(k).unwrap();
                model.remove(&k);
            }
            1 => {
                let v = vec![round as u8; 9000];
                t.insert(k, &v).unwrap();
                model.insert(k, v);
            }
            _ => {
                let v = round.to_le_bytes().repeat(25);
                t.insert(k, &v).unwrap();
                model.insert(k, v);
            }
        }
    }
}

/// `n` puts of random 8-byte keys (xorshift from `rng`) with 100-byte
/// values into table `t`.
fn put_random(w: &WriteTxn, rng: &mut u64, n: usize) {
    let mut t = w.open_table("t").unwrap();
    for _ in 0..n {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        t.insert(rng.to_be_bytes(), [1u8; 100]).unwrap();
    }
}

/// Changed pages in memory are bounded: past `backpressure_dirty_bytes`,
/// the next writer checkpoints, whatever the journal bytes; and a
/// checkpoint starts the count afresh.
#[test]
fn writers_checkpoint_when_changed_pages_reach_their_budget() {
    let vfs = SimVfs::new(8);
    let budget = 256 << 10;
    let db = builder(&vfs)
        .journal(JournalOptions {
            segment_size_bytes: 8 << 20,
            ..JournalOptions::default()
        })
        .checkpoint_journal_bytes(1 << 40)
        .backpressure_journal_bytes(1 << 40)
        .backpressure_dirty_bytes(budget)
        .create(Path::new("/s"))
        .unwrap();
    let mut rng = 7u64;
    let mut peak = 0;
    for _ in 0..600 {
        let w = db.begin_write().unwrap();
        peak = peak.max(db.stats().dirty_bytes);
        put_random(&w, &mut rng, 20);
        w.commit().unwrap();
    }
    let s = db.stats();
    assert!(s.checkpoints >= 3, "{} checkpoints", s.checkpoints);
    // A writer begins under the budget; one transaction of 20 puts
    // changes at most a few dozen pages.
    assert!(peak < budget, "{peak} bytes changed at a writer's start");
    assert!(s.dirty_bytes < budget + (64 << 12));
    db.check().unwrap();
}

/// Past `backpressure_dirty_bytes` with a background checkpoint under
/// way, a writer waits for that checkpoint and goes on once its memtable
/// is gone, instead of then running the next checkpoint itself (which
/// held up its commits for a whole checkpoint while the next memtable had
/// room).
#[test]
fn a_writer_past_the_budget_waits_for_the_checkpoint_under_way() {
    let vfs = SimVfs::new(9);
    let budget = 256 << 10;
    let db = builder(&vfs)
        .background_checkpoints(true)
        .checkpoint_journal_bytes(1 << 40)
        .backpressure_journal_bytes(1 << 40)
        .checkpoint_dirty_bytes(budget / 2)
        .backpressure_dirty_bytes(budget)
        .create(Path::new("/s"))
        .unwrap();
    let faults = &db.shared.faults;
    faults.fold_delay_ms.store(300, Relaxed);
    let mut rng = 7u64;
    let mut commit = || {
        let w = db.begin_write().unwrap();
        put_random(&w, &mut rng, 20);
        w.commit().unwrap();
    };
    // Up to the checkpoint's start, then until it is in its fold's delay.
    while db.stats().dirty_bytes < budget / 2 {
        commit();
    }
    for _ in 0..10_000 {
        if faults.fold_delay_ms.load(Relaxed) == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(faults.fold_delay_ms.load(Relaxed), 0, "no checkpoint began");
    while db.stats().backpressure_waits == 0 {
        commit();
    }
    let s = db.stats();
    assert_eq!(s.backpressure_checkpoints, 0, "{s:?}");
    assert!(s.checkpoints >= 1, "{s:?}");
    assert!(s.dirty_bytes < budget, "{s:?}");
    db.check().unwrap();
}

/// A fold that changes more than `fold_bytes` of pages is written in
/// parts, each dropped from memory before the fold goes on; the parts'
/// pages that later batches copy again (the path to where the fold stood,
/// leaves merged with a neighbour) are freed, and the store reads, checks
/// and reopens as the model says, with no page leaked or listed twice.
#[test]
fn a_fold_larger_than_fold_bytes_is_written_in_parts() {
    let vfs = SimVfs::new(10);
    let open = || {
        builder(&vfs)
            .fold_bytes(64 << 10)
            .cache_bytes(128 << 10)
            .checkpoint_journal_bytes(1 << 40)
            .backpressure_journal_bytes(1 << 40)
    };
    let db = open().create(Path::new("/s")).unwrap();
    let mut model = std::collections::BTreeMap::new();
    let mut rng = 11u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for round in 0..3 {
        for c in 0..6u64 {
            let w = db.begin_write().unwrap();
            let mut t = w.open_table("t").unwrap();
            for i in c * 1000..c * 1000 + 1000 {
                let k = (next() % 20_000).to_be_bytes();
                if round > 0 && i % 3 == 0 {
                    t.remove(k).unwrap();
                    model.remove(&k);
                } else {
                    let v = vec![(i % 251) as u8; 40 + (i as usize % 90)];
                    t.insert(k, &v).unwrap();
                    model.insert(k, v);
                }
            }
            w.commit().unwrap();
        }
        if round == 2 {
            // Empty whole leaves in the middle: merges behind the fold.
            let w = db.begin_write().unwrap();
            let mut t = w.open_table("t").unwrap();
            for k in 5_000u64..9_000 {
                t.remove(k.to_be_bytes()).unwrap();
                model.remove(&k.to_be_bytes());
            }
            w.commit().unwrap();
        }
        let before = db.stats().fold_parts;
        db.checkpoint().unwrap();
        let parts = db.stats().fold_parts - before;
        assert!(parts >= 3, "round {round}: {parts} parts");
        db.check().unwrap();
    }
    let read_all = |db: &Database| -> Vec<(Vec<u8>, Vec<u8>)> {
        let r = db.begin_read();
        let t = r.open_table("t").unwrap();
        t.iter()
            .map(|kv| {
                let kv = kv.unwrap();
                (kv.0.as_bytes().to_vec(), kv.1.as_bytes().to_vec())
            })
            .collect()
    };
    let want: Vec<(Vec<u8>, Vec<u8>)> =
        model.iter().map(|(k, v)| (k.to_vec(), v.clone())).collect();
    assert_eq!(read_all(&db), want);
    db.close().unwrap();
    let db = open().open(Path::new("/s")).unwrap();
    db.check().unwrap();
    assert_eq!(read_all(&db), want);
}

/// A long read transaction holds back only the pages of its own snapshot:
/// pages written by checkpoints after it began are reused once freed, so
/// the data file stays near its size without the reader, and the reader
/// still reads its snapshot.
#[test]
fn a_long_reader_holds_back_only_its_own_pages() {
    let run = |hold: bool| -> u64 {
        let vfs = SimVfs::new(9);
        let db = builder(&vfs).create(Path::new("/s")).unwrap();
        let w = db.begin_write().unwrap();
        let mut t = w.open_table("t").unwrap();
        for k in 0..500u32 {
            t.insert(k.to_be_bytes(), [0u8; 50]).unwrap();
        }
        w.commit().unwrap();
        db.checkpoint().unwrap();
        let reader = hold.then(|| db.begin_read());
        for round in 1..=60u32 {
            let w = db.begin_write().unwrap();
            let mut t = w.open_table("t").unwrap();
            for k in 0..500u32 {
                t.insert(k.to_be_bytes(), round.to_le_bytes().repeat(12))
                    .unwrap();
            }
            w.commit().unwrap();
            db.checkpoint().unwrap();
        }
        if let Some(r) = &reader {
            let t = r.open_table("t").unwrap();
            for k in 0..500u32 {
                assert_eq!(t.get(k.to_be_bytes()).unwrap().unwrap().to_vec(), [0u8; 50]);
            }
        }
        db.check().unwrap();
        db.stats().page_count
    };
    let (without, with) = (run(false), run(true));
    assert!(
        with <= without * 2 + 20,
        "a reader grew the file from {without} to {with} pages"
    );
}

/// Old read transactions expire once the replaced memtables they keep
/// alive pass `reader_pinned_bytes`, the oldest first: each call on one
/// then fails with `SnapshotTooOld` (a scan under way too), newer readers
/// keep reading their snapshots, and dropping the expired one frees its
/// share.
#[test]
fn old_readers_expire_past_their_memory_budget() {
    let vfs = SimVfs::new(11);
    // A round of 1,000 puts makes a memtable of ~230 KB (keys, 100-byte
    // values, bookkeeping): one such pinned fits, two do not.
    let db = builder(&vfs)
        .reader_pinned_bytes(350 << 10)
        .create(Path::new("/s"))
        .unwrap();
    let round = |n: u32, v: u8| {
        let w = db.begin_write().unwrap();
        let mut t = w.open_table("t").unwrap();
        for k in 0..n {
            t.insert(k.to_be_bytes(), [v; 100]).unwrap();
        }
        w.commit().unwrap();
    };
    let value = |r: &ReadTxn, k: u32| -> Result<Option<Vec<u8>>> {
        Ok(r.open_table("t")?.get(k.to_be_bytes())?.map(|v| v.to_vec()))
    };
    round(1000, 1);
    let r0 = db.begin_read();
    let t0 = r0.open_table("t").unwrap();
    let mut scan = t0.iter();
    assert_eq!(scan.next().unwrap().unwrap().1.as_bytes(), [1u8; 100]);
    round(10, 2);
    db.checkpoint().unwrap();
    let one = db.stats().reader_pinned_bytes;
    assert!(
        one > 100 << 10 && one <= 350 << 10,
        "one round pins {one} bytes"
    );
    assert_eq!(value(&r0, 5).unwrap(), Some(vec![1u8; 100]));
    let r1 = db.begin_read();
    round(1000, 3);
    db.checkpoint().unwrap();
    // r0 would keep both folded memtables alive: it expires; r1 one.
    let stats = db.stats();
    assert_eq!(stats.snapshots_expired, 1);
    assert!(stats.reader_pinned_bytes <= 350 << 10);
    let too_old = |e: DbError| matches!(e, DbError::SnapshotTooOld { .. });
    assert!(value(&r0, 5).is_err_and(too_old));
    assert!(scan.next().unwrap().is_err_and(too_old));
    assert!(scan.next().is_none());
    assert!(r0.list_tables().is_err_and(too_old));
    assert_eq!(value(&r1, 5).unwrap(), Some(vec![2u8; 100]));
    assert_eq!(value(&r1, 500).unwrap(), Some(vec![1u8; 100]));
    drop(scan);
    drop(r0);
    assert_eq!(db.stats().reader_pinned_bytes, stats.reader_pinned_bytes);
    drop(r1);
    assert_eq!(db.stats().reader_pinned_bytes, 0);
    assert_eq!(get(&db, "t", &5u32.to_be_bytes()), Some(vec![3u8; 100]));
    db.check().unwrap();
}

/// Every form of key range reads the keys it names, with keys of any
/// byte-like type.
#[test]
fn ranges_take_every_form_of_bounds() {
    use std::ops::Bound::{Excluded, Included, Unbounded};
    let vfs = SimVfs::new(10);
    let db = builder(&vfs).create(Path::new("/s")).unwrap();
    let w = db.begin_write().unwrap();
    for k in ["a", "b", "bb", "c", "d"] {
        w.open_table("t").unwrap().insert(k, b"v").unwrap();
    }
    // The writer's own view, through its overlay.
    let keys = |it: Iter<'_>| -> Vec<String> {
        it.map(|kv| String::from_utf8(kv.unwrap().0.as_bytes().to_vec()).unwrap())
            .collect()
    };
    {
        let t = w.open_table("t").unwrap();
        assert_eq!(keys(t.range(&b"b"[..]..&b"c"[..])), ["b", "bb"]);
        assert_eq!(keys(t.range("b"..="c")), ["b", "bb", "c"]);
    }
    w.commit().unwrap();
    let r = db.begin_read();
    let t = r.open_table("t").unwrap();
    assert_eq!(keys(t.range(..)), ["a", "b", "bb", "c", "d"]);
    assert_eq!(keys(t.range(&b"b"[..]..&b"c"[..])), ["b", "bb"]);
    assert_eq!(keys(t.range("b"..="c")), ["b", "bb", "c"]);
    assert_eq!(keys(t.range(b"c".to_vec()..)), ["c", "d"]);
    assert_eq!(keys(t.range(..b"b")), ["a"]);
    assert_eq!(keys(t.range(..="b")), ["a", "b"]);
    assert_eq!(keys(t.range((Excluded("b"), Included("c")))), ["bb", "c"]);
    assert_eq!(keys(t.range((Unbounded, Excluded(&b"bb"[..])))), ["a", "b"]);
    assert!(keys(t.range("x"..)).is_empty());
}

/// Blind transactions (tables opened, keys inserted, nothing read) from
/// many threads commit in groups, each its own record: every acknowledged
/// one survives a power loss, and recovery replays them in order.
#[test]
fn concurrent_blind_transactions_commit_in_groups_and_survive_power_loss() {
    for seed in 0..20 {
        blind_groups_round(seed);
    }
}

fn blind_groups_round(seed: u64) {
    let vfs = SimVfs::new(seed);
    let dir = Path::new("/s");
    let db = builder(&vfs).create(dir).unwrap();
    const THREADS: u32 = 8;
    const COMMITS: u32 = 60;
    // Per thread: the last commit acknowledged durable (`Immediate`).
    let acked: Vec<u32> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let db = &db;
                s.spawn(move || {
                    let mut acked = 0;
                    for c in 1..=COMMITS {
                        let mut w = db.begin_write().unwrap();
                        let eventual = c % 3 == 0;
                        if eventual {
                            w.set_durability(Durability::Eventual);
                        }
                        let mut tab = w.open_table("t").unwrap();
                        tab.insert(format!("{t}/{c}"), c.to_be_bytes()).unwrap();
                        w.commit().unwrap();
                        if !eventual {
                            acked = c;
                        }
                    }
                    acked
                })
            })
            .collect();
        threads.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let stats = db.stats();
    assert_eq!(stats.commits, u64::from(THREADS * COMMITS));
    assert!(stats.commit_groups >= 1 && stats.grouped_commits <= stats.commits);
    // Power loss at once: nothing more reaches the files (the journal's
    // last writes in flight, the close).
    vfs.crash_after_ops(0);
    drop(db);
    vfs.crash(CrashMode::PowerLoss);
    let db = builder(&vfs).open(dir).unwrap();
    for (t, &last) in acked.iter().enumerate() {
        for c in 1..=last {
            let v = get(&db, "t", format!("{t}/{c}").as_bytes());
            assert_eq!(
                v,
                Some(c.to_be_bytes().to_vec()),
                "{t}/{c} was acknowledged"
            );
        }
    }
    // The table was created once, by whichever transaction ran first.
    assert_eq!(
        db.begin_read().list_tables().unwrap(),
        vec!["t".to_string()]
    );
    db.check().unwrap();
}

/// `begin_write` does not wait; a transaction's first read takes the
/// writer slot. A blind transaction committed while another holds the slot
/// runs after it: its write wins.
#[test]
fn a_blind_transaction_queued_behind_a_reading_one_runs_after_it() {
    let vfs = SimVfs::new(9);
    let db = builder(&vfs).create("/s").unwrap();
    let first = db.begin_write().unwrap();
    let mut t = first.open_table("t").unwrap();
    assert!(t.get(b"k").unwrap().is_none()); // takes the slot
    t.insert(b"k", b"first").unwrap();
    std::thread::scope(|s| {
        let queued = s.spawn(|| {
            // Does not wait here...
            let w = db.begin_write().unwrap();
            w.open_table("t").unwrap().insert(b"k", b"second").unwrap();
            // ...but here, until `first` gives the slot back.
            w.commit().unwrap();
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !queued.is_finished(),
            "a blind commit ran while the slot was held"
        );
        first.commit().unwrap();
        queued.join().unwrap();
    });
    assert_eq!(get(&db, "t", b"k").as_deref(), Some(&b"second"[..]));
}

/// A blind transaction whose table is dropped before it runs creates the
/// table anew, as `open_table` would have at that moment.
#[test]
fn a_blind_transaction_recreates_a_table_dropped_before_it_ran() {
    let vfs = SimVfs::new(10);
    let db = builder(&vfs).create("/s").unwrap();
    let w = db.begin_write().unwrap();
    w.open_table("t").unwrap().insert(b"old", b"1").unwrap();
    w.commit().unwrap();
    let blind = db.begin_write().unwrap();
    blind.open_table("t").unwrap().insert(b"new", b"2").unwrap();
    let mut dropper = db.begin_write().unwrap();
    assert!(dropper.delete_table("t").unwrap());
    dropper.commit().unwrap();
    blind.commit().unwrap();
    assert_eq!(get(&db, "t", b"old"), None);
    assert_eq!(get(&db, "t", b"new").as_deref(), Some(&b"2"[..]));
    db.check().unwrap();
}

#[test]
fn a_lone_large_commit_counts_its_write_and_apply_legs() {
    let vfs = SimVfs::new(23);
    let path = Path::new("/store");
    let db = builder(&vfs).create(path).unwrap();
    // A small transaction (under 16 changes) applies before it writes: no
    // overlap counted.
    let w = db.begin_write().unwrap();
    w.open_table("t").unwrap().insert("k", "v").unwrap();
    w.commit().unwrap();
    assert_eq!(db.stats().overlapped_commits, 0);
    // `Immediate`: published as runs, inserted by the helper afterwards.
    // `Eventual`: written and applied side by side.
    for (c, durability) in [(0u32, Durability::Immediate), (1, Durability::Immediate)]
        .into_iter()
        .chain((2..5).map(|c| (c, Durability::Eventual)))
    {
        let mut w = db.begin_write().unwrap();
        w.set_durability(durability);
        let mut t = w.open_table("t").unwrap();
        for k in 0..100u32 {
            t.insert(format!("{c}/{k}"), [7u8; 100]).unwrap();
        }
        w.commit().unwrap();
    }
    db.checkpoint().unwrap();
    let s = db.stats();
    assert_eq!(s.run_commits, 2, "one per lone large Immediate commit");
    assert!(s.run_apply_ms > 0.0);
    assert_eq!(
        s.overlapped_commits, 3,
        "one per lone large Eventual commit"
    );
    assert!(s.overlapped_write_ms > 0.0 && s.overlapped_apply_ms > 0.0);
    assert!(s.applied_after_write <= 3);
    assert!(s.slow_overlapped_writes <= 3 && s.slow_overlapped_applies <= 3);
    assert_eq!(get(&db, "t", b"2/99").as_deref(), Some(&[7u8; 100][..]));
    db.close().unwrap();
}

/// A panic while the writer slot is held (a bug in the commit path,
/// injected into the apply) poisons the store instead of keeping the slot
/// forever: the panicking commit panics, every other committer and the
/// checkpointer get an error, `close` returns, and after a power cut a
/// reopen has every acknowledged commit.
#[test]
fn a_panic_in_the_commit_path_poisons_the_store_instead_of_hanging_it() {
    for blind in [true, false] {
        let vfs = SimVfs::new(11);
        let db = Arc::new(builder(&vfs).create(Path::new("/s")).unwrap());
        commit_one(&db, b"before", b"1").unwrap();
        // Without the poison the committers would wait for the lost slot
        // forever.
        let acked = run_until_refused(&db, 4, move |_| blind, true, || {});
        assert!(!db.shared.faults.panic_in_apply.load(Relaxed));
        assert!(matches!(db.checkpoint(), Err(DbError::Poisoned(_))));
        let e = commit_one(&db, b"after", b"2").unwrap_err();
        assert!(e.to_string().contains("a commit panicked"), "{e}");
        let _ = close_cut_and_check(&vfs, db, &acked);
    }
}

/// Commit key `t/c` for c = 0, 1, … (`blind`, or after a read of it) until
/// the store refuses; with `inject_apply`, committer 0 injects a panic into
/// the apply after its commit 20. Returns the keys acknowledged.
fn commit_until_refused(db: &Database, t: u32, blind: bool, inject_apply: bool) -> Vec<String> {
    let mut acked = Vec::new();
    for c in 0u32.. {
        let key = format!("{t}/{c}");
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let w = db.begin_write()?;
            let mut tab = w.open_table("t")?;
            if !blind {
                // A read takes the slot: not a blind commit.
                tab.get(&key)?;
            }
            tab.insert(&key, c.to_be_bytes())?;
            w.commit()
        }));
        match r {
            Ok(Ok(())) => acked.push(key),
            Ok(Err(DbError::Poisoned(_) | DbError::CommitFailed(_))) => break,
            Ok(Err(e)) => panic!("unexpected error: {e}"),
            Err(p) => {
                // The apply, or a checkpoint this writer ran itself
                // (backpressure).
                let what = p.downcast_ref::<&str>().copied().unwrap_or("");
                assert!(what.starts_with("injected: "), "{what}");
                break;
            }
        }
        if inject_apply && c == 20 && t == 0 {
            db.shared
                .faults
                .panic_in_apply
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    acked
}

/// Run `n` committers (`commit_until_refused`; committer `t` blind if
/// `blind(t)`, committer 0 injecting a panic into the apply with
/// `inject_apply`), call `meanwhile`, and wait for every committer to be
/// refused: 60 s at most, else one hangs. Returns the keys acknowledged.
fn run_until_refused(
    db: &Arc<Database>,
    n: u32,
    blind: impl Fn(u32) -> bool + Send + Copy + 'static,
    inject_apply: bool,
    meanwhile: impl FnOnce(),
) -> Vec<String> {
    let (done, finished) = std::sync::mpsc::channel();
    let committers: Vec<_> = (0..n)
        .map(|t| {
            let (db, done) = (Arc::clone(db), done.clone());
            std::thread::spawn(move || {
                let acked = commit_until_refused(&db, t, blind(t), inject_apply);
                done.send(()).unwrap();
                acked
            })
        })
        .collect();
    meanwhile();
    for _ in 0..n {
        finished
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("a committer hangs after the panic");
    }
    committers
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect()
}

/// Close the stopped store (its result), cut the power, reopen: `before`
/// and every key in `acked` must be there, and the store check clean.
fn close_cut_and_check(vfs: &Arc<SimVfs>, db: Arc<Database>, acked: &[String]) -> Result<()> {
    let Ok(db) = Arc::try_unwrap(db) else {
        panic!("the committers are done")
    };
    let closed = db.close();
    vfs.crash(CrashMode::PowerLoss);
    let db = builder(vfs).open(Path::new("/s")).unwrap();
    assert_eq!(get(&db, "t", b"before"), Some(b"1".to_vec()));
    for key in acked {
        assert!(
            get(&db, "t", key.as_bytes()).is_some(),
            "{key} was acknowledged"
        );
    }
    db.check().unwrap();
    closed
}

/// A panic in a checkpoint (a bug), at each of its steps — freezing the
/// memtable and adopting the folded tree under the writer slot, folding
/// without it — on the background checkpointer or on the thread that
/// asked for the checkpoint: the store is poisoned instead of hanging (a
/// lost writer slot, or a frozen memtable nobody folds), committers stop
/// with an error, and after a power cut a reopen has every acknowledged
/// commit.
#[test]
fn a_panic_in_a_checkpoint_poisons_the_store_instead_of_hanging_it() {
    use super::state::{CKPT_ADOPT, CKPT_FOLD, CKPT_FREEZE};
    for step in [CKPT_FREEZE, CKPT_FOLD, CKPT_ADOPT] {
        for background in [false, true] {
            let vfs = SimVfs::new(12);
            let db = builder(&vfs)
                .background_checkpoints(background)
                .checkpoint_interval(Some(Duration::from_millis(5)))
                .create(Path::new("/s"))
                .unwrap();
            let db = Arc::new(db);
            commit_one(&db, b"before", b"1").unwrap();
            let acked = run_until_refused(
                &db,
                3,
                |t| t != 1,
                false,
                || {
                    std::thread::sleep(Duration::from_millis(20));
                    db.shared.faults.panic_in_checkpoint.store(step, Relaxed);
                    if !background {
                        checkpoint_until_it_panics(&db);
                    }
                },
            );
            assert!(!acked.is_empty());
            let e = commit_one(&db, b"after", b"2").unwrap_err();
            assert!(e.to_string().contains("a checkpoint panicked"), "{e}");
            assert!(matches!(db.checkpoint(), Err(DbError::Poisoned(_))));
            assert!(close_cut_and_check(&vfs, db, &acked).is_err());
        }
    }
}

/// Checkpoint until one reaches the step a panic was injected at.
fn checkpoint_until_it_panics(db: &Database) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while db.shared.faults.panic_in_checkpoint.load(Relaxed) != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint panicked"
        );
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| db.checkpoint()));
        if let Err(p) = r {
            let what = p.downcast_ref::<&str>().copied().unwrap_or("");
            assert_eq!(what, "injected: the checkpoint failed");
        }
    }
}

/// A panic (an injected bug) while a group of blind commits is being told
/// its results — before anything is told, or publishing its LSN; on the
/// group's leader, on a leader going on to the next group with the slot
/// held, or on the journal's thread — poisons the store instead of
/// leaving the group's members (or every writer) waiting; after a power
/// cut a reopen has every acknowledged commit.
#[test]
fn a_panic_while_a_group_is_told_its_results_poisons_the_store() {
    for in_publish in [true, false] {
        for seed in 0..8u64 {
            let vfs = SimVfs::new(20 + seed);
            let db = Arc::new(builder(&vfs).create(Path::new("/s")).unwrap());
            commit_one(&db, b"before", b"1").unwrap();
            // Groups only: a direct commit is told nothing.
            db.shared.faults.no_direct.store(true, Relaxed);
            let fault = match in_publish {
                true => &db.shared.published.panic_in_publish,
                false => &db.shared.faults.panic_in_settle,
            };
            let acked = run_until_refused(
                &db,
                6,
                |_| true,
                false,
                || {
                    std::thread::sleep(Duration::from_millis(10 + 2 * seed));
                    fault.store(true, Relaxed);
                },
            );
            assert!(!fault.load(Relaxed));
            let e = commit_one(&db, b"after", b"2").unwrap_err();
            assert!(e.to_string().contains("panicked"), "{e}");
            assert!(close_cut_and_check(&vfs, db, &acked).is_err());
        }
    }
}

/// The `/proc/self/task` directories of this process's threads named
/// `name`.
fn threads_named(name: &str) -> Vec<std::path::PathBuf> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .filter(|task| {
            std::fs::read_to_string(task.join("comm")).is_ok_and(|comm| comm.trim() == name)
        })
        .collect()
}

/// The nice value of thread `tid`.
fn nice_of(tid: i32) -> Option<i32> {
    let pid = rustix::process::Pid::from_raw(tid)?;
    rustix::process::getpriority_process(Some(pid)).ok()
}

/// A store's helper runs `background_nice` levels below the thread that
/// opened it (the default, 5), its checkpointer twice as many; bad values
/// are refused.
#[test]
fn background_threads_run_below_the_opener() {
    let me = nice_of(rustix::thread::gettid().as_raw_nonzero().get()).unwrap();
    let (helper, checkpointer) = ((me + 5).min(19), (me + 10).min(19));
    let vfs = SimVfs::new(1);
    let db = builder(&vfs)
        .background_checkpoints(true)
        .create(Path::new("/s"))
        .unwrap();
    // Threads of other tests' stores are there too, with the same
    // default; each lowers its own priority once it runs.
    let threads = || {
        let mut found = Vec::new();
        for name in ["keel-helper", "keel-checkpoint"] {
            for task in threads_named(name) {
                let tid: i32 = task.file_name().unwrap().to_string_lossy().parse().unwrap();
                if let Some(nice) = nice_of(tid) {
                    found.push((name.to_string(), nice));
                }
            }
        }
        found
    };
    let mut last = Vec::new();
    for _ in 0..300 {
        last = threads();
        let both = ["keel-helper", "keel-checkpoint"]
            .iter()
            .all(|n| last.iter().any(|(c, _)| c == n));
        if both && last.iter().all(|(_, nice)| *nice >= helper) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        last.iter()
            .any(|(c, nice)| c == "keel-helper" && *nice == helper),
        "{last:?}, want {helper}"
    );
    assert!(
        last.iter()
            .any(|(c, nice)| c == "keel-checkpoint" && *nice == checkpointer),
        "{last:?}, want {checkpointer}"
    );
    db.close().unwrap();
    let bad = builder(&vfs).background_nice(20).open(Path::new("/s"));
    assert!(matches!(bad, Err(DbError::BadOptions(_))), "{bad:?}");
}

/// The CPUs each of this process's threads named `name` may run on.
fn cpus_of_threads(name: &str) -> Vec<Vec<usize>> {
    let mut found = Vec::new();
    for task in threads_named(name) {
        let status = std::fs::read_to_string(task.join("status")).unwrap_or_default();
        if let Some(list) = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        {
            found.push(crate::io::parse_cpu_list(list).unwrap());
        }
    }
    found
}

/// A store's helper and checkpointer keep to `background_cpus`; a list
/// of none of the opener's CPUs, or past the largest CPU number, is
/// refused before the store is touched.
#[test]
fn background_threads_keep_to_their_cpus() {
    let allowed = placement::allowed_cpus();
    assert!(!allowed.is_empty());
    // The last CPU alone: other tests' stores leave theirs on all the
    // CPUs (the default).
    let cpu = *allowed.last().unwrap();
    // A CPU the opener may not run on: left out.
    let absent = crate::io::MAX_CPU - 1;
    assert!(!allowed.contains(&absent));
    let vfs = SimVfs::new(1);
    let db = builder(&vfs)
        .background_checkpoints(true)
        .background_cpus(BackgroundCpus::Only(vec![cpu, absent]))
        .create(Path::new("/s"))
        .unwrap();
    assert_eq!(db.stats().background_cpus, Some(vec![cpu]));
    assert_eq!(Options::default().background_cpus, BackgroundCpus::Any);
    if allowed.len() > 1 {
        let mine = || {
            ["keel-helper", "keel-checkpoint"]
                .iter()
                .all(|n| cpus_of_threads(n).contains(&vec![cpu]))
        };
        let mut ok = false;
        for _ in 0..300 {
            ok = mine();
            if ok {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            ok,
            "helper {:?}, checkpointer {:?}, want [{cpu}]",
            cpus_of_threads("keel-helper"),
            cpus_of_threads("keel-checkpoint")
        );
    }
    db.close().unwrap();
    for cpus in [vec![], vec![crate::io::MAX_CPU], vec![absent]] {
        let vfs = SimVfs::new(1);
        let bad = builder(&vfs)
            .background_cpus(BackgroundCpus::Only(cpus.clone()))
            .create(Path::new("/t"));
        assert!(
            matches!(bad, Err(DbError::BadOptions(_))),
            "{cpus:?}: {bad:?}"
        );
        assert!(
            !vfs.exists(Path::new("/t")).unwrap(),
            "{cpus:?}: nothing made"
        );
    }
}

/// A clean close leaves its mark; the next open removes it, durably,
/// before anything else (a crash of that process leaves no mark).
#[test]
fn a_clean_close_is_marked_and_the_next_open_unmarks_it() {
    for seed in 0..16 {
        let vfs = SimVfs::new(11 + seed);
        let mark = Path::new("/s").join(super::CLEAN_FILE);
        let db = builder(&vfs).create("/s").unwrap();
        commit_one(&db, b"k", b"v").unwrap();
        db.close().unwrap();
        assert!(vfs.exists(&mark).unwrap());
        // A read-only open writes nothing: the mark stays.
        let ro = builder(&vfs).open_read_only("/s").unwrap();
        assert_eq!(get(&ro, "t", b"k"), Some(b"v".to_vec()));
        drop(ro);
        assert!(vfs.exists(&mark).unwrap());
        let db = builder(&vfs).open("/s").unwrap();
        assert!(!vfs.exists(&mark).unwrap());
        commit_one(&db, b"k2", b"v2").unwrap();
        vfs.crash(CrashMode::PowerLoss);
        drop(db); // no close: no mark
        assert!(
            !vfs.exists(&mark).unwrap(),
            "seed {seed}: the removal was durable"
        );
        let db = builder(&vfs).open("/s").unwrap();
        assert_eq!(get(&db, "t", b"k2"), Some(b"v2".to_vec()));
    }
}

/// After a data-file sync failed (its pages marked clean but never
/// written, as Linux does), the close fails and leaves no mark: the next
/// open evicts those pages and adopts only what the disk holds, so a
/// later power cut loses nothing it adopted.
#[test]
fn a_failed_sync_leaves_no_clean_mark_and_the_next_open_reads_the_disk() {
    for (seed, nth) in (0..12).map(|s| (s, s % 2)) {
        let vfs = SimVfs::new(100 + seed);
        vfs.set_failed_sync_drops(1.0);
        let db = builder(&vfs).create("/s").unwrap();
        for i in 0..50u8 {
            commit_one(&db, &[i], &[i; 300]).unwrap();
        }
        db.checkpoint().unwrap();
        let durable = db.stats().checkpoint_generation;
        for i in 50..100u8 {
            commit_one(&db, &[i], &[i; 300]).unwrap();
        }
        // The checkpoint's n-th sync of the data file fails (its pages,
        // or its meta page): what it wrote reads back until evicted.
        let data = Path::new("/s").join(super::DATA_FILE);
        vfs.fail_after_on(&data, crate::io::OpKind::Sync, nth, libc::EIO);
        assert!(db.checkpoint().is_err(), "nth {nth}");
        assert!(db.close().is_err(), "poisoned");
        assert!(!vfs
            .exists(&Path::new("/s").join(super::CLEAN_FILE))
            .unwrap());
        vfs.crash(CrashMode::Process);
        let db = builder(&vfs).open("/s").unwrap();
        assert_eq!(
            db.stats().checkpoint_generation,
            durable,
            "seed {seed} nth {nth}: adopted a meta page that is not on the disk"
        );
        drop(db);
        vfs.crash(CrashMode::PowerLoss);
        let db = builder(&vfs).open("/s").unwrap();
        for i in 0..100u8 {
            assert_eq!(get(&db, "t", &[i]), Some(vec![i; 300]), "seed {seed}");
        }
        db.check().unwrap();
    }
}

/// A thread's read transactions remember the table ids their snapshot's
/// catalog gave (`state::Lease::table_ids`): only for that snapshot. A
/// table deleted and made again (a new id) is the new one to a later
/// transaction of the same thread; an older transaction still open keeps
/// the old one, and one older than the table never finds it.
#[test]
fn a_read_transaction_opens_the_table_its_own_snapshot_holds() {
    let vfs = SimVfs::new(1);
    let db = builder(&vfs).create(Path::new("/s")).unwrap();
    let before = db.begin_read();
    commit_one(&db, b"old", b"1").unwrap();
    let old = db.begin_read();
    assert_eq!(get(&db, "t", b"old").as_deref(), Some(&b"1"[..]));
    let mut w = db.begin_write().unwrap();
    assert!(w.delete_table("t").unwrap());
    w.open_table("t").unwrap().insert(b"new", b"2").unwrap();
    w.commit().unwrap();
    for _ in 0..2 {
        // Twice: the second open finds the id remembered by the first.
        assert_eq!(get(&db, "t", b"new").as_deref(), Some(&b"2"[..]));
        assert_eq!(get(&db, "t", b"old"), None);
        let t = old.open_table("t").unwrap();
        assert_eq!(t.get(b"old").unwrap().as_deref(), Some(&b"1"[..]));
        assert_eq!(t.get(b"new").unwrap(), None);
        assert!(matches!(
            before.open_table("t"),
            Err(DbError::NoSuchTable(_))
        ));
    }
    drop((before, old));
    db.close().unwrap();
}

/// A value a point read borrows from a cached leaf stays whole while
/// the cache evicts that leaf and reuses its memory, on this thread and
/// others: the reader-era pin the value holds keeps the evicted node
/// (`crate::era`).
#[test]
fn values_borrowed_from_the_cache_outlive_the_eviction_of_their_leaves() {
    let value = |k: u32| -> Vec<u8> { (0..120u32).map(|i| (k * 31 + i) as u8).collect() };
    let vfs = SimVfs::new(9);
    let db = builder(&vfs).create("/s").unwrap();
    for b in 0..20u32 {
        let w = db.begin_write().unwrap();
        let mut t = w.open_table("t").unwrap();
        for k in b * 500..(b + 1) * 500 {
            t.insert(k.to_be_bytes(), value(k)).unwrap();
        }
        w.commit().unwrap();
    }
    db.close().unwrap();
    // Misses decode into a small cache (no map), evicting as they go.
    let db = builder(&vfs)
        .cache_bytes(128 << 10)
        .read_mapped(false)
        .open("/s")
        .unwrap();
    let r = db.begin_read();
    let t = r.open_table("t").unwrap();
    let mut held = Vec::new();
    for k in (0..10_000u32).step_by(97) {
        // The first get decodes the leaf into the cache; the second finds
        // it there and borrows the value.
        t.get(k.to_be_bytes()).unwrap().unwrap();
        let v = t.get(k.to_be_bytes()).unwrap().unwrap();
        if matches!(v.0, super::item::ValueInner::Pinned(_)) {
            held.push((k, v));
        }
    }
    assert!(held.len() > 50, "{} values borrowed", held.len());
    let before = db.stats().cache.evictions;
    std::thread::scope(|s| {
        for part in 0..2u32 {
            let db = &db;
            s.spawn(move || {
                for _ in 0..3 {
                    let r = db.begin_read();
                    let t = r.open_table("t").unwrap();
                    for k in (part..10_000).step_by(2) {
                        assert_eq!(t.get(k.to_be_bytes()).unwrap().unwrap(), value(k));
                    }
                }
            });
        }
        for _ in 0..3 {
            for k in 0..10_000u32 {
                assert_eq!(t.get(k.to_be_bytes()).unwrap().unwrap(), value(k));
            }
        }
    });
    assert!(db.stats().cache.evictions > before + 1000);
    for (k, v) in &held {
        assert_eq!(*v, value(*k), "key {k}");
    }
    drop(held);
    drop(r);
    db.close().unwrap();
}
