//! Tests of the store's edges: key ranges that name no key, a failure the
//! committer knows of before `commit` returns.

use std::ops::Bound::{self, Excluded, Included, Unbounded};
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;

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
    it.map(|kv| String::from_utf8(kv.unwrap().key().to_vec()).unwrap())
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
        let mut w = db.begin_write().unwrap();
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

    let mut w = db.begin_write().unwrap();
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
