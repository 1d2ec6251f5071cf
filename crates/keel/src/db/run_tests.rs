//! Tests of the store's commits published as runs before their insert
//! (`super::pending`) and of the table ids a writer keeps for blind
//! transactions.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;

use super::tests::{builder, get};
use super::*;
use crate::io::SimVfs;

/// A writer keeps the table ids blind transactions looked up; dropping
/// the table must make it look again, or a blind transaction that
/// re-creates the table would write under the dropped id (and its puts
/// would be invisible).
#[test]
fn a_blind_transaction_after_a_drop_writes_the_table_made_again() {
    let vfs = SimVfs::new(31);
    let db = builder(&vfs).create(Path::new("/store")).unwrap();
    let put = |key: &str, value: &str| {
        let w = db.begin_write().unwrap();
        w.open_table("t").unwrap().insert(key, value).unwrap();
        w.commit().unwrap();
    };
    put("a", "1");
    put("b", "2");
    let mut w = db.begin_write().unwrap();
    assert!(w.delete_table("t").unwrap());
    w.commit().unwrap();
    put("c", "3");
    assert_eq!(get(&db, "t", b"a"), None);
    assert_eq!(get(&db, "t", b"c").as_deref(), Some(&b"3"[..]));
    let r = db.begin_read();
    assert_eq!(r.open_table("t").unwrap().iter().count(), 1);
    drop(r);
    db.check().unwrap();
    db.close().unwrap();
}

/// A lone large commit returns once durable, before its changes are in
/// the memtable: readers find them in its published run. Here the helper
/// is kept from inserting the runs, so that readers must: gets and scans
/// see every run merged with the memtable (a later run's value winning, a
/// key put twice in one transaction keeping its last value), and a writer
/// that reads inserts them first, in order.
#[test]
fn readers_see_commits_published_before_their_insert() {
    let vfs = SimVfs::new(29);
    let db = builder(&vfs).create(Path::new("/store")).unwrap();
    let w = db.begin_write().unwrap();
    let mut t = w.open_table("t").unwrap();
    for k in (0..60u32).step_by(3) {
        t.insert(format!("k{k:03}"), "mem").unwrap();
    }
    w.commit().unwrap();
    db.shared.faults.hold_runs.store(true, Relaxed);
    for c in 0..3u32 {
        let w = db.begin_write().unwrap();
        let mut t = w.open_table("t").unwrap();
        for k in (c..60).step_by(2) {
            t.insert(format!("k{k:03}"), format!("run{c}")).unwrap();
        }
        t.insert("twice", format!("first{c}")).unwrap();
        t.insert("twice", format!("last{c}")).unwrap();
        w.commit().unwrap();
        let r = db.begin_read();
        let t = r.open_table("t").unwrap();
        assert_eq!(
            t.get("twice").unwrap().as_deref(),
            Some(format!("last{c}").as_bytes())
        );
    }
    assert_eq!(db.stats().run_commits, 0, "the runs are not inserted yet");
    let model = model_of_three_runs();
    assert_reads(&db, &model);
    assert_eq!(writer_get(&db, "k001").as_deref(), Some(&b"run1"[..]));
    assert_eq!(db.stats().run_commits, 3);
    assert_reads(&db, &model);
    db.checkpoint().unwrap();
    assert_reads(&db, &model);
    db.check().unwrap();
    db.close().unwrap();
}

/// A reader holding a snapshot with runs keeps seeing exactly that state
/// while later runs are published (the list it took is copied, not
/// changed: the published list changes in place only when no reader
/// holds it), then inserted and taken out of the published list, and the
/// emptied list is used again.
#[test]
fn a_reader_keeps_its_runs_while_later_ones_come_and_go() {
    let vfs = SimVfs::new(41);
    let db = builder(&vfs).create(Path::new("/store")).unwrap();
    // The table first: a transaction that creates one is not a run.
    let w = db.begin_write().unwrap();
    w.open_table("t").unwrap();
    w.commit().unwrap();
    db.shared.faults.hold_runs.store(true, Relaxed);
    let commit_run = |c: u32| {
        let w = db.begin_write().unwrap();
        let mut t = w.open_table("t").unwrap();
        for k in 0..20u32 {
            t.insert(format!("k{k:02}"), format!("v{c}")).unwrap();
        }
        t.insert(format!("only{c}"), "x").unwrap();
        w.commit().unwrap();
    };
    let seen = |r: &ReadTxn| -> BTreeMap<String, String> {
        let t = r.open_table("t").unwrap();
        let s = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
        t.iter()
            .map(|kv| {
                let kv = kv.unwrap();
                (s(kv.0.as_bytes()), s(kv.1.as_bytes()))
            })
            .collect()
    };
    commit_run(0);
    let held = db.begin_read();
    let before = seen(&held);
    assert_eq!(before.len(), 21);
    assert!(before
        .values()
        .filter(|v| v.starts_with('v'))
        .all(|v| v == "v0"));
    for c in 1..4 {
        commit_run(c);
    }
    assert_eq!(seen(&held), before, "runs published after the snapshot");
    assert_eq!(seen(&db.begin_read()).len(), 24);
    // Which takes the runs out of the published list.
    assert_eq!(writer_get(&db, "k00").as_deref(), Some(&b"v3"[..]));
    assert_eq!(db.stats().run_commits, 4);
    assert_eq!(seen(&held), before, "runs inserted after the snapshot");
    commit_run(4);
    assert_eq!(seen(&held), before, "a list emptied and used again");
    let now = seen(&db.begin_read());
    assert_eq!(now.len(), 25);
    assert_eq!(now["k07"], "v4");
    drop(held);
    db.check().unwrap();
    db.close().unwrap();
}

/// `key`'s value in table `t` as a write transaction reads it: taking
/// the writer slot to read inserts every waiting run first.
fn writer_get(db: &Database, key: &str) -> Option<Vec<u8>> {
    let w = db.begin_write().unwrap();
    let v = w.open_table("t").unwrap().get(key).unwrap();
    v.map(|v| v.to_vec())
}

/// What `readers_see_commits_published_before_their_insert` committed: the
/// newest put of each key.
fn model_of_three_runs() -> BTreeMap<String, String> {
    let mut model = BTreeMap::new();
    for k in (0..60u32).step_by(3) {
        model.insert(format!("k{k:03}"), "mem".to_string());
    }
    for c in 0..3u32 {
        for k in (c..60).step_by(2) {
            model.insert(format!("k{k:03}"), format!("run{c}"));
        }
        model.insert("twice".into(), format!("last{c}"));
    }
    model
}

/// A new reader of table `t` sees `model` through every kind of read.
fn assert_reads(db: &Database, model: &BTreeMap<String, String>) {
    assert_eq!(&table_t(db), model);
    let r = db.begin_read();
    let t = r.open_table("t").unwrap();
    assert_eq!(t.range("k010".."k020").count(), 10);
    let (above, through) = (Bound::Excluded("k010"), Bound::Included("k020"));
    assert_eq!(t.range((above, through)).count(), 10);
    assert_eq!(t.range(.."k005").count(), 5);
    assert_eq!(t.range(..="k005").count(), 6);
    assert_eq!(t.prefix("k05").count(), 10);
    for (k, v) in model {
        assert_eq!(t.get(k).unwrap().as_deref(), Some(v.as_bytes()), "{k}");
    }
}

/// Past the bound of runs waiting, a committer inserts the oldest itself,
/// one per commit down to the bound, not all of them; readers still see
/// every commit; and a spare emptied by an insert starts the next
/// transaction empty.
#[test]
fn a_committer_past_the_bound_inserts_only_down_to_it() {
    let vfs = SimVfs::new(37);
    let db = builder(&vfs).create(Path::new("/store")).unwrap();
    let w = db.begin_write().unwrap();
    w.open_table("t").unwrap().insert("seed", "0").unwrap();
    w.commit().unwrap();
    db.shared.faults.hold_runs.store(true, Relaxed);
    let bound = super::pending::MAX_UNAPPLIED_RUNS as u64;
    let commits = bound + 9;
    let mut model = BTreeMap::new();
    model.insert("seed".to_string(), "0".to_string());
    for c in 0..commits {
        let w = db.begin_write().unwrap();
        let mut t = w.open_table("t").unwrap();
        for k in 0..20 {
            let (key, value) = (format!("c{c:03}k{k:02}"), format!("v{c}"));
            t.insert(&key, &value).unwrap();
            model.insert(key, value);
        }
        w.commit().unwrap();
    }
    let s = db.stats();
    assert_eq!(
        s.run_commits,
        commits - bound,
        "one per commit past the bound"
    );
    assert_eq!(s.run_commits_by_committers, commits - bound);
    assert_eq!(table_t(&db), model);
    db.close().unwrap();
}

/// Table `t` as a new reader scans it, in key order (keys and values
/// as text).
fn table_t(db: &Database) -> BTreeMap<String, String> {
    let r = db.begin_read();
    let t = r.open_table("t").unwrap();
    let s = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
    let mut all = BTreeMap::new();
    let mut last = None;
    for kv in t.iter() {
        let kv = kv.unwrap();
        let key = s(kv.0.as_bytes());
        assert!(
            last.as_ref() < Some(&key),
            "a scan in key order, each key once"
        );
        last = Some(key.clone());
        all.insert(key, s(kv.1.as_bytes()));
    }
    all
}
