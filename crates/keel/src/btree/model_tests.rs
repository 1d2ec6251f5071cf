//! Random sequences of operations against a `BTreeMap` model: inserts
//! (small, inline-limit and overflow values), removes, range removals,
//! scans and lookups, snapshots taken and held, and checkpoints in the
//! middle that write the tree to a simulated file and drop it from memory,
//! so that later operations read through a page cache far smaller than the
//! tree. Every checkpoint also checks that the pages the writer reported
//! freed are exactly those the tree stopped using. Batches of puts and
//! removes go through `TreeMut::apply` on two threads or one, some sorted
//! with each key once (as a checkpoint's fold gives them: leaves are then
//! rebuilt by merging, `Leaf::merged`).
//!
//! Pages are read through a map of the file or with `pread` (a parameter
//! of each run); every lookup and scan is also made through a cache that
//! reads the other way, and both must give the model's answer.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound::{self, Excluded, Included, Unbounded};
use std::sync::Arc;

use proptest::prelude::*;

use super::test_disk::{Disk, TwoThreads};
use super::*;

const KEYS: u16 = 400;
const CACHE_BYTES: usize = 24 * 1024;

#[derive(Debug, Clone)]
enum Op {
    Insert {
        key: u16,
        len: usize,
    },
    /// Insert a run of keys with small values: grows the tree quickly.
    Fill {
        start: u16,
        count: u16,
    },
    Remove {
        key: u16,
    },
    RemoveRange {
        lo: u16,
        hi: u16,
        inclusive: bool,
    },
    Scan {
        lo: u16,
        hi: u16,
    },
    Get {
        key: u16,
    },
    /// Puts (`Some(len)`) and removes (`None`), applied at once on two
    /// threads, or on one (shared out down the tree); a key may appear
    /// more than once, unless `sorted` (then in key order, each once).
    Batch {
        changes: Vec<(u16, Option<usize>)>,
        one_thread: bool,
        sorted: bool,
    },
    Snapshot,
    DropSnapshot,
    Checkpoint {
        reopen: bool,
    },
}

fn value_len() -> impl Strategy<Value = usize> {
    prop_oneof![
        8 => 0..120usize,
        1 => 1000..1050usize,
        1 => 1050..9000usize,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        40 => (0..KEYS, value_len()).prop_map(|(key, len)| Op::Insert { key, len }),
        3 => (0..KEYS, 1..80u16).prop_map(|(start, count)| Op::Fill { start, count }),
        15 => (0..KEYS).prop_map(|key| Op::Remove { key }),
        2 => (0..KEYS, 0..KEYS / 2, any::<bool>())
            .prop_map(|(lo, w, inclusive)| Op::RemoveRange { lo, hi: lo.saturating_add(w), inclusive }),
        5 => (0..KEYS, 0..KEYS).prop_map(|(lo, hi)| Op::Scan { lo, hi }),
        5 => (0..KEYS).prop_map(|key| Op::Get { key }),
        4 => (
                proptest::collection::vec(
                    (0..KEYS, proptest::option::weighted(0.7, value_len())),
                    0..120,
                ),
                any::<bool>(),
                any::<bool>(),
            )
            .prop_map(|(changes, one_thread, sorted)| Op::Batch { changes, one_thread, sorted }),
        2 => Just(Op::Snapshot),
        2 => Just(Op::DropSnapshot),
        3 => any::<bool>().prop_map(|reopen| Op::Checkpoint { reopen }),
    ]
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

struct Run {
    ps: PageSize,
    pad: usize,
    disk: Disk,
    /// A cache that reads pages the other way (`pread` or a map).
    other: PageCache,
    tm: TreeMut,
    model: Model,
    snapshots: Vec<(Tree, Model)>,
    /// The pages the tree used at the last checkpoint.
    live: BTreeSet<PageNo>,
    seq: u32,
}

impl Run {
    fn new(ps: PageSize, pad: usize, mapped: bool) -> Run {
        let disk = Disk::reading(ps, CACHE_BYTES, mapped);
        Run {
            ps,
            pad,
            other: disk.other_cache(CACHE_BYTES),
            disk,
            tm: Tree::new(ps).edit(),
            model: Model::new(),
            snapshots: Vec::new(),
            live: BTreeSet::new(),
            seq: 0,
        }
    }

    fn key(&self, id: u16) -> Vec<u8> {
        let mut k = vec![b'p'; self.pad];
        k.extend_from_slice(format!("{id:05}").as_bytes());
        k
    }

    fn apply(&mut self, op: &Op) {
        self.seq += 1;
        let src = &self.disk.cache;
        match *op {
            Op::Insert { key, len } => {
                let k = self.key(key);
                let v: Vec<u8> = (0..len)
                    .map(|j| (self.seq as usize + j * 7) as u8)
                    .collect();
                self.tm.insert(src, &k, &v).unwrap();
                self.model.insert(k, v);
            }
            Op::Fill { start, count } => {
                for key in start..start.saturating_add(count).min(KEYS) {
                    let k = self.key(key);
                    let v = vec![key as u8; usize::from(key % 50)];
                    self.tm.insert(src, &k, &v).unwrap();
                    self.model.insert(k, v);
                }
            }
            Op::Remove { key } => {
                let k = self.key(key);
                let had = self.tm.remove(src, &k).unwrap();
                assert_eq!(had, self.model.remove(&k).is_some());
            }
            Op::RemoveRange { lo, hi, inclusive } => {
                let (lo, hi) = (self.key(lo), self.key(hi));
                let end = if inclusive {
                    Included(&hi[..])
                } else {
                    Excluded(&hi[..])
                };
                let n = self.tm.remove_range(src, Included(&lo[..]), end).unwrap();
                let doomed: Vec<Vec<u8>> = self
                    .model
                    .range::<[u8], _>((Included(&lo[..]), end))
                    .map(|(k, _)| k.clone())
                    .collect();
                assert_eq!(n, doomed.len() as u64);
                for k in doomed {
                    self.model.remove(&k);
                }
            }
            Op::Scan { lo, hi } => {
                let (lo, hi) = (self.key(lo), self.key(hi));
                let t = self.tm.snapshot();
                compare_range(&t, src, &self.model, Excluded(&lo), Included(&hi));
            }
            Op::Get { key } => {
                let k = self.key(key);
                self.check_get(&self.tm.snapshot(), &k, &self.model);
            }
            Op::Batch {
                ref changes,
                one_thread,
                sorted,
            } => {
                if sorted {
                    // Each key's last change, in key order.
                    let last: BTreeMap<u16, Option<usize>> = changes.iter().copied().collect();
                    let changes: Vec<(u16, Option<usize>)> = last.into_iter().collect();
                    self.batch(&changes, one_thread)
                } else {
                    self.batch(changes, one_thread)
                }
            }
            Op::Snapshot => {
                if self.snapshots.len() < 3 {
                    self.snapshots
                        .push((self.tm.snapshot(), self.model.clone()));
                }
            }
            Op::DropSnapshot => {
                if !self.snapshots.is_empty() {
                    let (t, m) = self.snapshots.remove(0);
                    compare_range(&t, src, &m, Unbounded, Unbounded);
                }
            }
            Op::Checkpoint { reopen } => self.checkpoint(reopen),
        }
    }

    fn batch(&mut self, changes: &[(u16, Option<usize>)], one_thread: bool) {
        let owned: Vec<(Vec<u8>, Option<Vec<u8>>)> = changes
            .iter()
            .enumerate()
            .map(|(i, &(key, len))| {
                let v = len.map(|len| {
                    (0..len)
                        .map(|j| (self.seq as usize + i + j * 5) as u8)
                        .collect()
                });
                (self.key(key), v)
            })
            .collect();
        let shared: Vec<Option<Arc<[u8]>>> = owned
            .iter()
            .enumerate()
            .map(|(i, (_, v))| v.as_ref().filter(|_| i % 2 == 0).map(|v| Arc::from(&v[..])))
            .collect();
        let batch: Vec<Change<'_>> = owned
            .iter()
            .zip(&shared)
            .map(|((k, v), s)| match v {
                Some(v) => Change::Put {
                    key: k,
                    value: v,
                    shared: s.as_ref(),
                },
                None => Change::Remove(k),
            })
            .collect();
        let fork: Option<&dyn Fork> = (!one_thread).then_some(&TwoThreads);
        self.tm.apply(&self.disk.cache, &batch, fork).unwrap();
        for (k, v) in owned {
            match v {
                Some(v) => self.model.insert(k, v),
                None => self.model.remove(&k),
            };
        }
    }

    fn checkpoint(&mut self, reopen: bool) {
        let freed = self.tm.take_freed();
        let snap = self.tm.snapshot();
        let cp = self.disk.checkpoint(&snap);
        let stats = check_tree(&snap, &self.disk.cache).unwrap();
        assert_eq!(stats.dirty_nodes, 0);
        let now: BTreeSet<PageNo> = stats.pages.into_iter().collect();
        let freed_set: BTreeSet<PageNo> = freed.iter().copied().collect();
        assert_eq!(
            freed_set.len(),
            freed.len(),
            "a page freed twice: {freed:?}"
        );
        let expected: BTreeSet<PageNo> = self.live.difference(&now).copied().collect();
        assert_eq!(
            freed_set, expected,
            "freed pages differ from the pages dropped"
        );
        self.live = now;
        compare_range(&snap, &self.disk.cache, &self.model, Unbounded, Unbounded);
        if reopen {
            self.disk.cache = self.disk.cold_cache(CACHE_BYTES);
            self.tm = Tree::open(self.ps, &self.disk.cache, cp.root)
                .unwrap()
                .edit();
        }
    }

    /// `key` looked up in `t` through both caches, against `model`.
    fn check_get(&self, t: &Tree, key: &[u8], model: &Model) {
        let want = model.get(key);
        for src in [&self.disk.cache, &self.other] {
            let got = t.get(src, key).unwrap();
            if let Some(e) = &got {
                assert_eq!(e.key(), key);
            }
            assert_eq!(got.as_ref().map(|e| e.value()), want.map(|v| &v[..]));
        }
    }

    fn check_all(&self) {
        let t = self.tm.snapshot();
        let stats = check_tree(&t, &self.disk.cache).unwrap();
        assert_eq!(stats.entries, self.model.len() as u64);
        compare_range(&t, &self.disk.cache, &self.model, Unbounded, Unbounded);
        compare_range(&t, &self.other, &self.model, Unbounded, Unbounded);
        for id in (0..KEYS).step_by(3) {
            self.check_get(&t, &self.key(id), &self.model);
        }
        for (t, m) in &self.snapshots {
            check_tree(t, &self.disk.cache).unwrap();
            compare_range(t, &self.disk.cache, m, Unbounded, Unbounded);
            for id in (0..KEYS).step_by(7) {
                self.check_get(t, &self.key(id), m);
            }
        }
        let held = self.disk.cache.stats().cached_bytes as usize;
        assert!(held <= CACHE_BYTES, "cache holds {held} bytes");
    }
}

fn compare_range(
    t: &Tree,
    src: &dyn PageSource,
    model: &Model,
    lo: Bound<&Vec<u8>>,
    hi: Bound<&Vec<u8>>,
) {
    let lo_b = lo.map(|k| &k[..]);
    let hi_b = hi.map(|k| &k[..]);
    if let (Included(a) | Excluded(a), Included(b) | Excluded(b)) = (lo_b, hi_b) {
        if a > b {
            assert_eq!(t.range(src, lo_b, hi_b).count(), 0);
            return;
        }
    }
    let got: Vec<(Vec<u8>, Vec<u8>)> = t
        .range(src, lo_b, hi_b)
        .map(|e| {
            let e = e.unwrap();
            (e.key().to_vec(), e.value().to_vec())
        })
        .collect();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model
        .range::<[u8], _>((lo_b, hi_b))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(got.len(), want.len());
    assert!(got == want, "scan differs from the model");
    let entry = |e: Result<Entry, BtreeError>| {
        let e = e.unwrap();
        (e.key().to_vec(), e.value().to_vec())
    };
    let mut back: Vec<(Vec<u8>, Vec<u8>)> = t.range(src, lo_b, hi_b).rev().map(entry).collect();
    back.reverse();
    assert!(back == want, "a backward scan differs from the model");
    // Both ends at once: they meet in the middle, each entry once. Taking
    // turns, each end asks again right after the other took the last
    // entry; the third pattern changes with the range.
    let len = want.len();
    let patterns: [&dyn Fn(usize) -> bool; 3] = [&|i| i % 2 == 0, &|i| i % 2 == 1, &|i| {
        (i * 7 + len) % 3 == 0
    }];
    for front_at in patterns {
        let mut both = t.range(src, lo_b, hi_b);
        let mut model = std::collections::VecDeque::from(want.clone());
        for i in 0usize.. {
            let front = front_at(i);
            let (got, want) = match front {
                true => (both.next().map(entry), model.pop_front()),
                false => (both.next_back().map(entry), model.pop_back()),
            };
            let end = if front { "front" } else { "back" };
            assert!(got == want, "step {i} from the {end} differs");
            if want.is_none() {
                assert!(both.next().is_none() && both.next_back().is_none());
                break;
            }
        }
    }
}

fn run(ps: PageSize, pad: usize, mapped: bool, ops: &[Op]) {
    let mut r = Run::new(ps, pad, mapped);
    for (i, op) in ops.iter().enumerate() {
        r.apply(op);
        if i % 25 == 24 {
            r.check_all();
        }
    }
    r.check_all();
    r.checkpoint(true);
    r.check_all();
}

/// 48 cases unless `PROPTEST_CASES` asks for more (a longer local run).
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(48)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn tree_matches_a_btreemap(
        pad in prop_oneof![Just(0usize), Just(150), Just(700)],
        page_bytes in prop_oneof![4 => Just(4096usize), 1 => Just(8192)],
        mapped in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..300),
    ) {
        run(PageSize::new(page_bytes).unwrap(), pad, mapped, &ops);
    }
}

/// Long runs that make the tree deep and empty it again.
#[test]
fn fill_and_drain_with_checkpoints() {
    for mapped in [true, false] {
        fill_and_drain(mapped);
    }
}

fn fill_and_drain(mapped: bool) {
    let mut r = Run::new(PageSize::DEFAULT, 700, mapped);
    for round in 0..3u16 {
        for i in 0..KEYS {
            let key = (i * 7 + round) % KEYS;
            r.apply(&Op::Insert {
                key,
                len: usize::from(i % 200),
            });
            if i % 97 == 0 {
                r.apply(&Op::Checkpoint { reopen: i % 2 == 0 });
            }
        }
        r.check_all();
        assert!(check_tree(&r.tm.snapshot(), &r.disk.cache).unwrap().depth >= 3);
        r.apply(&Op::Snapshot);
        for i in 0..KEYS {
            r.apply(&Op::Remove {
                key: (i * 13) % KEYS,
            });
            if i % 89 == 0 {
                r.apply(&Op::Checkpoint { reopen: i % 2 == 1 });
            }
        }
        r.check_all();
        assert!(r.tm.is_empty());
    }
    // The pread cache never searches in place; the mapped one did.
    let searched = r.disk.cache.stats().searched_in_place + r.other.stats().searched_in_place;
    assert!(searched > 100, "{searched} lookups searched in place");
}
