//! Scans from both ends against a `BTreeMap` model, over every layer a
//! scan merges: a tree of many leaves on disk (after a checkpoint, read
//! through a small cache; the tree's own nodes in memory are
//! `btree::model_tests`'), memtables whose deletions
//! hide the tree's keys, a run published before its insert, and a write
//! transaction's own puts and deletions. Each range is read forward,
//! backward (`rev`) and from both ends in a pattern (`next`/`next_back`
//! meeting in the middle), in a read and in a write transaction.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;

use proptest::prelude::*;

use super::tests::builder;
use super::*;
use crate::io::SimVfs;

const KEYS: u16 = 700;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Key `n`: its digits (so keys sort by `n`), then filler of a length
/// that varies with `n`: ~700 keys of up to 250 bytes span many leaves.
fn key(n: u16) -> Vec<u8> {
    let mut k = format!("{n:04}").into_bytes();
    k.resize(k.len() + usize::from(n % 5) * 60, b'.');
    k
}

/// A value whose bytes say where it came from; `big` ones take overflow
/// pages.
fn value(n: u16, tag: u8, big: bool) -> Vec<u8> {
    let len = if big { 5000 } else { usize::from(n % 40) };
    let mut v = vec![tag; len];
    v.extend_from_slice(&n.to_be_bytes());
    v
}

fn bound() -> impl Strategy<Value = Bound<u16>> {
    prop_oneof![
        1 => Just(Bound::Unbounded),
        3 => (0..KEYS).prop_map(Bound::Included),
        3 => (0..KEYS).prop_map(Bound::Excluded),
    ]
}

/// A change: a put (with a tag for its value, big or not) or a delete.
fn change() -> impl Strategy<Value = (u16, Option<(u8, bool)>)> {
    (
        0..KEYS,
        proptest::option::weighted(0.6, (any::<u8>(), proptest::bool::weighted(0.03))),
    )
}

fn apply(model: &mut Model, t: &mut TableMut<'_>, changes: &[(u16, Option<(u8, bool)>)]) {
    for &(n, put) in changes {
        match put {
            Some((tag, big)) => {
                let v = value(n, tag, big);
                t.insert(key(n), &v).unwrap();
                model.insert(key(n), v);
            }
            None => {
                assert_eq!(t.remove(key(n)).unwrap(), model.remove(&key(n)).is_some());
            }
        }
    }
}

/// The entries of `model` in `(s, e)`, in order.
fn expect(model: &Model, s: Bound<u16>, e: Bound<u16>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let (s, e) = (s.map(key), e.map(key));
    if read::names_no_key(read::as_ref(&s), read::as_ref(&e)) {
        return Vec::new();
    }
    model
        .range::<Vec<u8>, _>((s, e))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn pair(kv: Result<KeyValue>) -> (Vec<u8>, Vec<u8>) {
    let (k, v) = kv.unwrap();
    (k.to_vec(), v.to_vec())
}

/// Read `(s, e)` with `scan` forward, backward and from both ends (in the
/// pattern of `pattern`'s bits: 1 takes from the back) and compare each
/// with `model`.
fn check<'a>(
    scan: impl Fn((Bound<Vec<u8>>, Bound<Vec<u8>>)) -> Iter<'a>,
    model: &Model,
    (s, e, pattern): (Bound<u16>, Bound<u16>, u32),
    what: &str,
) {
    let want = expect(model, s, e);
    let range = || (s.map(key), e.map(key));
    let got: Vec<_> = scan(range()).map(pair).collect();
    assert!(got == want, "{what}: forward {s:?}..{e:?}");
    let mut back: Vec<_> = scan(range()).rev().map(pair).collect();
    back.reverse();
    assert!(back == want, "{what}: backward {s:?}..{e:?}");
    // Taking turns (each end asks again right after the other took the
    // last entry), and in `pattern`.
    for pattern in [0x5555_5555, 0xaaaa_aaaa, pattern] {
        let mut both = scan(range());
        let mut model = VecDeque::from(want.clone());
        for i in 0.. {
            let from_back = pattern.rotate_right(i % 32) & 1 == 1;
            let (got, want) = match from_back {
                false => (both.next().map(pair), model.pop_front()),
                true => (both.next_back().map(pair), model.pop_back()),
            };
            let step = format!("{what}: step {i} (back: {from_back}) of {s:?}..{e:?}");
            assert!(got == want, "{step}");
            if want.is_none() {
                assert!(both.next().is_none() && both.next_back().is_none());
                break;
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn run(
    tree: &[(u16, Option<(u8, bool)>)],
    folded: &[(u16, Option<(u8, bool)>)],
    mem: &[(u16, Option<(u8, bool)>)],
    run_puts: &[u16],
    own: &[(u16, Option<(u8, bool)>)],
    scans: &[(Bound<u16>, Bound<u16>, u32)],
) {
    let vfs = SimVfs::new(61);
    let db = builder(&vfs)
        .cache_bytes(64 << 10)
        .create(Path::new("/store"))
        .unwrap();
    let mut model = Model::new();
    let commit = |model: &mut Model, changes: &[(u16, Option<(u8, bool)>)]| {
        for part in changes.chunks(50) {
            let w = db.begin_write().unwrap();
            apply(model, &mut w.open_table("t").unwrap(), part);
            // A neighbour whose keys the table's scans must not see.
            w.open_table("u").unwrap().insert(b"", b"u").unwrap();
            w.commit().unwrap();
        }
    };
    // The tree, on disk (read back through a cache of 16 pages); then
    // changes folded into it (its changed nodes, copied in memory, are
    // written too); then changes in the memtable.
    commit(&mut model, tree);
    db.checkpoint().unwrap();
    commit(&mut model, folded);
    db.checkpoint().unwrap();
    let stats = db.tree_stats().unwrap();
    commit(&mut model, mem);
    // A blind commit of 16 puts or more is published as a run above the
    // memtable; the helper is kept from inserting it.
    db.shared.faults.hold_runs.store(true, Relaxed);
    if run_puts.len() >= 16 {
        let w = db.begin_write().unwrap();
        let mut t = w.open_table("t").unwrap();
        for &n in run_puts {
            t.insert(key(n), value(n, 0xee, false)).unwrap();
            model.insert(key(n), value(n, 0xee, false));
        }
        w.commit().unwrap();
    }
    let r = db.begin_read();
    let t = r.open_table("t").unwrap();
    for &scan in scans {
        check(|range| t.range(range), &model, scan, "read");
    }
    assert_eq!(t.len().unwrap(), model.len() as u64);
    assert_eq!(pair_of(t.first().unwrap()), first(&model));
    assert_eq!(pair_of(t.last().unwrap()), last(&model));
    drop(r);
    let w = db.begin_write().unwrap();
    let mut t = w.open_table("t").unwrap();
    apply(&mut model, &mut t, own);
    for &scan in scans {
        check(|range| t.range(range), &model, scan, "write");
    }
    assert_eq!(t.len().unwrap(), model.len() as u64);
    assert_eq!(pair_of(t.last().unwrap()), last(&model));
    drop(w);
    // Many leaves, some on disk: what the test is for.
    assert!(tree.len() < 300 || stats.leaves > 8, "{stats:?}");
}

fn pair_of(kv: Option<KeyValue>) -> Option<(Vec<u8>, Vec<u8>)> {
    kv.map(|(k, v)| (k.to_vec(), v.to_vec()))
}

fn first(model: &Model) -> Option<(Vec<u8>, Vec<u8>)> {
    model.iter().next().map(|(k, v)| (k.clone(), v.clone()))
}

fn last(model: &Model) -> Option<(Vec<u8>, Vec<u8>)> {
    model
        .iter()
        .next_back()
        .map(|(k, v)| (k.clone(), v.clone()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn scans_from_both_ends_match_a_model(
        tree in proptest::collection::vec(change(), 0..700),
        folded in proptest::collection::vec(change(), 0..200),
        mem in proptest::collection::vec(change(), 0..200),
        run_puts in proptest::collection::vec(0..KEYS, 0..40),
        own in proptest::collection::vec(change(), 0..100),
        scans in proptest::collection::vec((bound(), bound(), any::<u32>()), 1..6),
    ) {
        run(&tree, &folded, &mem, &run_puts, &own, &scans);
    }
}

/// A tree of several levels, all of it scanned from both ends after
/// deletions in every layer: the deterministic case the property test
/// covers at random.
#[test]
fn a_deep_tree_scans_from_both_ends() {
    let puts = |tag: u8| -> Vec<(u16, Option<(u8, bool)>)> {
        (0..KEYS).map(|n| (n, Some((tag, n % 97 == 0)))).collect()
    };
    let deletes = |from: u16, step: usize| -> Vec<(u16, Option<(u8, bool)>)> {
        (from..KEYS).step_by(step).map(|n| (n, None)).collect()
    };
    let scans = [
        (Bound::Unbounded, Bound::Unbounded, 0b0101_1011),
        (Bound::Included(10), Bound::Excluded(650), 0xdead_beef),
        (Bound::Excluded(3), Bound::Included(3), 1),
    ];
    let run_puts: Vec<u16> = (0..KEYS).step_by(17).collect();
    run(
        &puts(1),
        &deletes(0, 3),
        &deletes(1, 5),
        &run_puts,
        &deletes(2, 7),
        &scans,
    );
}
