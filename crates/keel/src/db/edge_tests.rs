//! Tests of the store's edges: key ranges that name no key, a failure the
//! committer knows of before `commit` returns, a thread that would wait
//! for the writer slot it holds itself, a meta page whose count of free
//! pages is not its free list's.

use std::ops::Bound::{self, Excluded, Included, Unbounded};
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use super::tests::builder;
use super::*;
use crate::io::SimVfs;

/// Ranges that name no key: reversed (start above end), and empty
/// (`k..k`, or both ends excluded at one key).
fn empty_ranges() -> Vec<(Bound<&'static str>, Bound<&'static str>)> {
    vec![
        (Included("c"), Excluded("b")),
        (Included("c"), Included("b")),
        (Excluded("c"), Excluded("b")),
        (Excluded("c"), Included("b")),
        (Included("b"), Excluded("b")),
        (Excluded("b"), Excluded("b")),
        (Excluded("b"), Included("b")),
        (Excluded("bb"), Included("b")),
    ]
}

fn keys(it: Iter<'_>) -> Vec<String> {
    it.map(|kv| String::from_utf8(kv.unwrap().0.as_bytes().to_vec()).unwrap())
        .collect()
}

/// A range that names no key yields nothing, never a panic: through a
/// write transaction with changes of its own (its overlay, the memtable
/// and the tree) and through a reader (the published runs, the memtable
/// and the tree).
#[test]
fn empty_and_reversed_ranges_yield_nothing() {
    let vfs = SimVfs::new(41);
    let db = builder(&vfs).create(Path::new("/s")).unwrap();
    let commit = |keys: &[&str]| {
        let w = db.begin_write().unwrap();
        let mut t = w.open_table("t").unwrap();
        for k in keys {
            t.insert(k, b"v").unwrap();
        }
        w.commit().unwrap();
    };
    commit(&["a", "b", "bb"]);
    db.checkpoint().unwrap();
    commit(&["c"]);
    // A lone large commit, kept as a published run.
    db.shared.faults.hold_runs.store(true, Relaxed);
    let many: Vec<String> = (0..20).map(|i| format!("b{i:02}")).collect();
    commit(&many.iter().map(String::as_str).collect::<Vec<_>>());
    {
        let r = db.begin_read();
        let t = r.open_table("t").unwrap();
        for (s, e) in empty_ranges() {
            assert!(keys(t.range((s, e))).is_empty(), "{s:?}..{e:?}");
        }
        assert_eq!(keys(t.range((Included("b"), Included("b")))), ["b"]);
        assert_eq!(keys(t.range("b0".."b01")), ["b00"]);
    }

    let w = db.begin_write().unwrap();
    let mut t = w.open_table("t").unwrap();
    assert!(t.get("a").unwrap().is_some(), "the writer slot taken");
    t.insert("b", b"w").unwrap();
    t.insert("d", b"w").unwrap();
    for (s, e) in empty_ranges() {
        assert!(keys(t.range((s, e))).is_empty(), "{s:?}..{e:?}");
    }
    assert_eq!(keys(t.range((Included("b"), Included("b")))), ["b"]);
    assert_eq!(keys(t.range((Excluded("c"), Unbounded))), ["d"]);
    assert_eq!(keys(t.prefix("bb")), ["bb"]);
    w.commit().unwrap();
    db.close().unwrap();
}

/// A lone large blind `Eventual` commit has its record written by the
/// committing thread itself (beside the helper's insert): when that write
/// fails, `commit` knows it before it returns, and says so
/// (`CommitFailed`) instead of `Ok`. The store stops; reopening recovers
/// every acknowledged commit and not the failed one.
#[test]
fn a_lone_large_eventual_commit_whose_own_write_failed_is_an_error() {
    let vfs = SimVfs::new(43);
    let dir = Path::new("/s");
    let db = builder(&vfs).create(dir).unwrap();
    let large = |db: &Database, c: u32| {
        let mut w = db.begin_write().unwrap();
        w.set_durability(Durability::Eventual);
        let mut t = w.open_table("t").unwrap();
        for k in 0..100u32 {
            t.insert(format!("{c}/{k:03}"), [7u8; 100]).unwrap();
        }
        w.commit()
    };
    large(&db, 0).unwrap();
    assert_eq!(db.stats().overlapped_commits, 1, "written by its committer");
    vfs.fail_after(crate::io::OpKind::Write, 0, libc::EIO);
    let r = large(&db, 1);
    assert_eq!(db.stats().overlapped_commits, 2, "written by its committer");
    assert!(matches!(r, Err(DbError::CommitFailed(_))), "{r:?}");
    assert!(matches!(db.begin_write(), Err(DbError::Poisoned(_))));
    assert!(db.close().is_err(), "close reports the failure");
    vfs.crash(crate::io::CrashMode::PowerLoss);
    let db = builder(&vfs).open(dir).unwrap();
    let r = db.begin_read();
    let t = r.open_table("t").unwrap();
    assert_eq!(t.prefix("0/").count(), 100);
    assert_eq!(t.prefix("1/").count(), 0);
}

/// Run `body` on a thread of its own and return what it returns; fail,
/// instead of hanging the test, if it has not returned within a minute.
fn within_a_minute<T: Send + 'static>(body: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(body());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(t) => t,
        Err(RecvTimeoutError::Timeout) => panic!("hung: it waits for itself"),
        Err(RecvTimeoutError::Disconnected) => panic!("the body panicked"),
    }
}

fn would_deadlock<T: std::fmt::Debug>(r: Result<T>) {
    assert!(matches!(r, Err(DbError::WouldDeadlock(_))), "{r:?}");
}

/// A write transaction that has read holds the writer slot until it ends:
/// on its thread, whatever would wait for the slot — a second write
/// transaction's read or commit (blind or not), `checkpoint` — fails with
/// `WouldDeadlock` instead of waiting forever, and changes nothing; the
/// first transaction then commits, and the store goes on.
#[test]
fn a_thread_holding_the_writer_slot_gets_would_deadlock_not_a_hang() {
    within_a_minute(|| {
        let vfs = SimVfs::new(47);
        let db = builder(&vfs).create(Path::new("/s")).unwrap();
        let w = db.begin_write().unwrap();
        w.open_table("t").unwrap().insert("a", "1").unwrap();
        w.commit().unwrap();

        let first = db.begin_write().unwrap();
        assert!(first.open_table("t").unwrap().get("a").unwrap().is_some());
        // A blind second transaction, committed: it would queue for the
        // slot.
        let second = db.begin_write().unwrap();
        second.open_table("t").unwrap().insert("b", "2").unwrap();
        would_deadlock(second.commit());
        // One that reads, or commits nothing (an `Immediate` commit of
        // nothing still takes the slot).
        let third = db.begin_write().unwrap();
        would_deadlock(third.open_table("t").unwrap().get("a"));
        would_deadlock(third.list_tables());
        would_deadlock(db.begin_write().unwrap().commit());
        would_deadlock(db.checkpoint());
        drop(third);
        first.open_table("t").unwrap().insert("c", "3").unwrap();
        first.commit().unwrap();

        let w = db.begin_write().unwrap();
        w.open_table("t").unwrap().insert("d", "4").unwrap();
        w.commit().unwrap();
        db.checkpoint().unwrap();
        let r = db.begin_read();
        let keys: Vec<Vec<u8>> = r
            .open_table("t")
            .unwrap()
            .iter()
            .map(|kv| kv.unwrap().0.as_bytes().to_vec())
            .collect();
        assert_eq!(keys, [b"a", b"c", b"d"]);
        drop(r);
        db.close().unwrap();
    });
}

/// `close`, and `begin_write` when it would run a checkpoint
/// (backpressure), on a thread holding the writer slot: `WouldDeadlock`.
/// After the failed `close` the transaction still commits, and a reopen
/// finds it.
#[test]
fn close_and_backpressure_on_the_slot_holders_thread_get_would_deadlock() {
    within_a_minute(|| {
        let vfs = SimVfs::new(53);
        let dir = Path::new("/s");
        let db = builder(&vfs)
            .backpressure_journal_bytes(1)
            .create(dir)
            .unwrap();
        let first = db.begin_write().unwrap();
        let other = db.begin_write().unwrap();
        other.open_table("t").unwrap().insert("a", "1").unwrap();
        other.commit().unwrap();
        assert!(first.open_table("t").unwrap().get("a").unwrap().is_some());
        // Past the backpressure budget: `begin_write` would checkpoint.
        would_deadlock(db.begin_write());
        would_deadlock(db.close());
        first.open_table("t").unwrap().insert("b", "2").unwrap();
        first.commit().unwrap();
        vfs.crash(crate::io::CrashMode::PowerLoss);
        let db = builder(&vfs).open(dir).unwrap();
        let r = db.begin_read();
        let t = r.open_table("t").unwrap();
        assert_eq!(t.iter().count(), 2);
    });
}

/// A write transaction holding the slot, moved to another thread and used
/// there: that thread is the holder now (its `checkpoint` fails with
/// `WouldDeadlock`), and the first thread's writer waits for the slot as
/// any other thread's would.
#[test]
fn the_slot_holder_follows_a_transaction_moved_to_another_thread() {
    within_a_minute(|| {
        let vfs = SimVfs::new(59);
        let db = Arc::new(builder(&vfs).create(Path::new("/s")).unwrap());
        let first = db.begin_write().unwrap();
        first.open_table("t").unwrap().insert("a", "1").unwrap();
        assert!(first.open_table("t").unwrap().get("a").unwrap().is_some());
        let (used, go) = (mpsc::channel(), mpsc::channel::<()>());
        let moved = {
            let db = Arc::clone(&db);
            std::thread::spawn(move || {
                assert!(first.open_table("t").unwrap().get("a").unwrap().is_some());
                would_deadlock(db.checkpoint());
                used.0.send(()).unwrap();
                go.1.recv().unwrap();
                std::thread::sleep(Duration::from_millis(50));
                first.commit().unwrap();
            })
        };
        used.1.recv().unwrap();
        go.0.send(()).unwrap();
        // Waits until the other thread commits.
        let second = db.begin_write().unwrap();
        let got = second.open_table("t").unwrap().get("a").unwrap();
        assert_eq!(got.as_deref(), Some(&b"1"[..]));
        second.commit().unwrap();
        moved.join().unwrap();
        db.checkpoint().unwrap();
    });
}

/// `close` refused on the slot holder's thread drops the `Database` there,
/// while its background checkpointer waits for that slot: the drop does
/// not wait for the checkpointer (it would wait forever), which finishes
/// once the transaction ends.
#[test]
fn a_store_dropped_on_the_slot_holders_thread_does_not_wait_for_its_checkpointer() {
    within_a_minute(|| {
        let vfs = SimVfs::new(61);
        let dir = Path::new("/s");
        let db = builder(&vfs)
            .background_checkpoints(true)
            .checkpoint_journal_bytes(1)
            .create(dir)
            .unwrap();
        let first = db.begin_write().unwrap();
        let other = db.begin_write().unwrap();
        other.open_table("t").unwrap().insert("a", "1").unwrap();
        // Asks the background checkpointer for a checkpoint.
        other.commit().unwrap();
        assert!(first.open_table("t").unwrap().get("a").unwrap().is_some());
        // Time for the checkpointer to come to wait for the slot.
        std::thread::sleep(Duration::from_millis(200));
        would_deadlock(db.close());
        first.open_table("t").unwrap().insert("b", "2").unwrap();
        first.commit().unwrap();
        vfs.crash(crate::io::CrashMode::PowerLoss);
        let db = builder(&vfs).open(dir).unwrap();
        let r = db.begin_read();
        assert_eq!(r.open_table("t").unwrap().iter().count(), 2);
    });
}

/// Opening checks that the free list holds exactly the meta page's
/// `free_pages` entries (format.md, "Free-list page"): a meta page
/// rewritten with one more or one fewer, its checksum valid, makes the
/// open fail with `Corrupt`; the same meta page written back unchanged
/// opens.
#[test]
fn a_free_count_that_is_not_the_free_lists_is_refused_at_open() {
    use super::meta::META_BYTES;
    let vfs = SimVfs::new(67);
    let dir = Path::new("/s");
    let db = builder(&vfs).create(dir).unwrap();
    for round in 0..2u8 {
        let w = db.begin_write().unwrap();
        let mut t = w.open_table("t").unwrap();
        for k in 0..200u32 {
            t.insert(k.to_be_bytes(), [round; 300]).unwrap();
        }
        w.commit().unwrap();
        db.checkpoint().unwrap();
    }
    let meta = db.shared.meta();
    let page_bytes = db.shared.page_size.bytes() as u64;
    drop(db);
    assert!(meta.free_pages > 0, "{meta:?}");
    let data = dir.join("data.keel");
    let write_meta = |free_pages: u64| {
        let mut b = vec![0u8; META_BYTES];
        super::meta::Meta { free_pages, ..meta }.encode(&mut b);
        vfs.corrupt(&data, meta.slot() * page_bytes, &b).unwrap();
    };
    for free_pages in [meta.free_pages + 1, meta.free_pages - 1] {
        write_meta(free_pages);
        let err = builder(&vfs).open(dir).unwrap_err();
        assert!(matches!(err, DbError::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains("free list: "), "{err}");
    }
    write_meta(meta.free_pages);
    let db = builder(&vfs).open(dir).unwrap();
    db.check().unwrap();
}
