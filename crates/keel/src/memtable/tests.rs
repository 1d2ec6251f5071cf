use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use proptest::prelude::*;
use rand::{Rng, SeedableRng};

use super::{Lsn, MemTable};

/// The model: each key's versions, oldest first.
type Model = BTreeMap<Vec<u8>, Vec<(Lsn, Option<Vec<u8>>)>>;

fn model_at(model: &Model, key: &[u8], at: Lsn) -> Option<Option<Vec<u8>>> {
    model
        .get(key)?
        .iter()
        .rev()
        .find(|(l, _)| *l <= at)
        .map(|(_, v)| v.clone())
}

fn model_range(
    model: &Model,
    s: Bound<&[u8]>,
    e: Bound<&[u8]>,
    at: Lsn,
) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    model
        .range::<[u8], _>((s, e))
        .filter_map(|(k, _)| model_at(model, k, at).map(|v| (k.clone(), v)))
        .collect()
}

fn mem_range(
    mem: &MemTable,
    s: Bound<&[u8]>,
    e: Bound<&[u8]>,
    at: Lsn,
) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    mem.range(s, e, at)
        .map(|(k, v)| (k.to_vec(), v.map(|v| v.to_vec())))
        .collect()
}

fn mem_range_rev(
    mem: &MemTable,
    s: Bound<&[u8]>,
    e: Bound<&[u8]>,
    at: Lsn,
) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    mem.range_rev(s, e, at)
        .map(|(k, v)| (k.to_vec(), v.map(|v| v.to_vec())))
        .collect()
}

/// Keys that share long heads, differ only past the head, and are
/// prefixes of each other, so that every comparison path is taken.
fn key_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(0u8..4, 0..6),
        (0u8..3, proptest::collection::vec(0u8..3, 0..4)).prop_map(|(a, tail)| {
            let mut k = vec![a; 24];
            k.extend(tail);
            k
        }),
        proptest::collection::vec(any::<u8>(), 1..40),
    ]
}

fn bound_strategy() -> impl Strategy<Value = Bound<Vec<u8>>> {
    prop_oneof![
        Just(Bound::Unbounded),
        key_strategy().prop_map(Bound::Included),
        key_strategy().prop_map(Bound::Excluded),
    ]
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    b.as_ref().map(|k| k.as_slice())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn matches_a_model(
        ops in proptest::collection::vec((key_strategy(), proptest::option::of(any::<u8>()), any::<bool>()), 1..700),
        probes in proptest::collection::vec((key_strategy(), any::<u16>()), 1..50),
        ranges in proptest::collection::vec((bound_strategy(), bound_strategy(), any::<u16>()), 1..20),
    ) {
        let mem = MemTable::new();
        let mut model = Model::new();
        let mut lsn = 0;
        for (key, value, next_lsn) in ops {
            // Several changes share an LSN (one commit), or not.
            lsn += u64::from(next_lsn);
            let value = value.map(|b| vec![b; usize::from(b % 7)]);
            mem.writer().insert(&key, lsn, value.as_deref());
            let versions = model.entry(key).or_default();
            // A commit's last change to a key is what it leaves.
            if versions.last().is_some_and(|(l, _)| *l == lsn) {
                versions.pop();
            }
            versions.push((lsn, value));
        }
        prop_assert_eq!(mem.len(), model.len() as u64);
        for (key, at) in probes {
            let at = u64::from(at) % (lsn + 2);
            let got = mem.get(&key, at).map(|v| v.map(|v| v.to_vec()));
            prop_assert_eq!(got, model_at(&model, &key, at), "key {:?} at {}", key, at);
        }
        for (s, e, at) in ranges {
            let at = u64::from(at) % (lsn + 2);
            if let (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) = (&s, &e) {
                if a > b || (a == b && !matches!((&s, &e), (Bound::Included(_), Bound::Included(_)))) {
                    // No key between them (and `BTreeMap::range`, the
                    // model, panics on most such bounds).
                    prop_assert!(mem_range(&mem, as_ref(&s), as_ref(&e), at).is_empty());
                    prop_assert!(mem_range_rev(&mem, as_ref(&s), as_ref(&e), at).is_empty());
                    continue;
                }
            }
            let want = model_range(&model, as_ref(&s), as_ref(&e), at);
            prop_assert_eq!(mem_range(&mem, as_ref(&s), as_ref(&e), at), want.clone());
            let mut back = mem_range_rev(&mem, as_ref(&s), as_ref(&e), at);
            back.reverse();
            prop_assert_eq!(back, want);
        }
    }
}

#[test]
fn a_large_random_fill_keeps_order_and_every_key() {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let mem = MemTable::new();
    let mut model = BTreeMap::new();
    for lsn in 1..=2_000u64 {
        let mut w = mem.writer();
        for _ in 0..50 {
            let key: [u8; 20] = rng.random();
            let key = &key[..rng.random_range(1..=20)];
            w.insert(key, lsn, Some(&lsn.to_be_bytes()[..]));
            model.insert(key.to_vec(), lsn);
        }
    }
    let all: Vec<(Vec<u8>, Lsn)> = mem
        .range(Bound::Unbounded, Bound::Unbounded, Lsn::MAX)
        .map(|(k, v)| {
            let v = v.expect("a value");
            (k.to_vec(), u64::from_be_bytes(v[..].try_into().unwrap()))
        })
        .collect();
    let want: Vec<(Vec<u8>, Lsn)> = model.into_iter().collect();
    assert_eq!(all.len(), want.len());
    assert!(all == want);
    // Half way through, only what was there then.
    let half = mem.range(Bound::Unbounded, Bound::Unbounded, 1_000).count();
    assert!(half > 0 && half < all.len());
}

/// `insert_all` leaves the memtable as inserting each put in turn does:
/// with keys repeated inside a group (the later value wins), groups whose
/// first key splits a leaf or the root (the others then descend again),
/// and a tree four levels deep (100,000 keys; a node holds 32).
#[test]
fn insert_all_equals_inserting_one_by_one() {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
    let (grouped, single) = (MemTable::new(), MemTable::new());
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut keys: Vec<Vec<u8>> = Vec::new();
    for lsn in 1..=1_000u64 {
        let n = rng.random_range(1..=200);
        let mut puts: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(n);
        for i in 0..n {
            let key = if !keys.is_empty() && rng.random_ratio(1, 5) {
                // An older key, or one of this batch (a repeat in a group).
                if i > 0 && rng.random_bool(0.5) {
                    puts[rng.random_range(0..i)].0.clone()
                } else {
                    keys[rng.random_range(0..keys.len())].clone()
                }
            } else {
                let k: [u8; 12] = rng.random();
                k[..rng.random_range(1..=12)].to_vec()
            };
            let value = format!("{lsn}/{i}").into_bytes();
            puts.push((key, value));
        }
        let refs: Vec<(&[u8], Option<&[u8]>)> =
            puts.iter().map(|(k, v)| (&k[..], Some(&v[..]))).collect();
        grouped.writer().insert_all(lsn, refs);
        let mut w = single.writer();
        for (k, v) in &puts {
            w.insert(k, lsn, Some(v));
        }
        for (k, v) in puts {
            if !model.contains_key(&k) {
                keys.push(k.clone());
            }
            model.insert(k, v);
        }
    }
    let all = |m: &MemTable| -> Vec<(Vec<u8>, Vec<u8>)> {
        m.range(Bound::Unbounded, Bound::Unbounded, Lsn::MAX)
            .map(|(k, v)| (k.to_vec(), v.expect("a value").to_vec()))
            .collect()
    };
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.into_iter().collect();
    assert!(want.len() > 50_000, "{}", want.len());
    assert!(all(&grouped) == want);
    assert!(all(&single) == want);
    assert_eq!(grouped.len(), single.len());
    for (k, v) in want.iter().step_by(97) {
        assert_eq!(grouped.get(k, Lsn::MAX), Some(Some(&v[..])));
    }
}

/// Readers scanning and getting while the writer inserts: at a published
/// LSN, every key inserted at or below it is found, in order, and none
/// above it.
#[test]
fn readers_see_every_published_key_while_the_writer_inserts() {
    let mem = MemTable::new();
    let published = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    // Key i is inserted at LSN i + 1; its bytes scatter it.
    let key = |i: u64| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_be_bytes();
    let total = 60_000u64;
    std::thread::scope(|s| {
        let readers: Vec<_> = (0..2)
            .map(|r| {
                let (mem, published, stop) = (&mem, &published, &stop);
                s.spawn(move || {
                    let mut rng = rand::rngs::SmallRng::seed_from_u64(r);
                    let mut checks = 0u64;
                    while !stop.load(Ordering::Acquire) {
                        let at = published.load(Ordering::Acquire);
                        if at == 0 {
                            continue;
                        }
                        let i = rng.random_range(0..at);
                        assert!(mem.get(&key(i), at).is_some(), "key {i} missing at {at}");
                        if checks % 64 == 0 {
                            let mut n = 0;
                            let mut last: Option<Vec<u8>> = None;
                            for (k, _) in mem.range(Bound::Unbounded, Bound::Unbounded, at) {
                                assert!(last.as_deref() < Some(k), "out of order");
                                last = Some(k.to_vec());
                                n += 1;
                            }
                            assert!(n >= at, "a scan at {at} found {n} keys");
                        }
                        checks += 1;
                    }
                    checks
                })
            })
            .collect();
        for i in 0..total {
            mem.writer().insert(&key(i), i + 1, Some(&b"v"[..]));
            published.store(i + 1, Ordering::Release);
        }
        stop.store(true, Ordering::Release);
        for r in readers {
            assert!(r.join().unwrap() > 0);
        }
    });
    assert_eq!(mem.len(), total);
}

/// Values larger than an arena chunk's share get chunks of their own, and
/// read back whole beside small ones; versions of one key at the same LSN
/// read as the last one inserted.
#[test]
fn large_values_and_same_lsn_versions_read_back() {
    let mem = MemTable::new();
    let big: Vec<u8> = (0..3 * super::CHUNK_BYTES / 2)
        .map(|i| (i % 251) as u8)
        .collect();
    {
        let mut w = mem.writer();
        w.insert(b"a", 1, Some(&big));
        w.insert(b"b", 1, Some(b"small"));
        w.insert(b"b", 2, Some(&big[..super::BIG_BYTES + 1]));
        w.insert(b"c", 3, Some(b"first"));
        w.insert(b"c", 3, Some(b"second"));
    }
    assert_eq!(mem.get(b"a", 1), Some(Some(&big[..])));
    assert_eq!(mem.get(b"b", 1), Some(Some(&b"small"[..])));
    assert_eq!(mem.get(b"b", 2), Some(Some(&big[..super::BIG_BYTES + 1])));
    assert_eq!(mem.get(b"c", 3), Some(Some(&b"second"[..])));
    let keys: Vec<_> = mem_range(&mem, Bound::Unbounded, Bound::Unbounded, 3);
    assert_eq!(keys.len(), 3);
    assert_eq!(keys[2].1.as_deref(), Some(&b"second"[..]));
}

/// A memtable's chunks go back to its pool when it drops, up to what the
/// pool keeps, and the next memtable takes them; `prepare` faults chunks
/// in ahead, once at a time.
#[test]
fn chunks_go_back_to_the_pool_and_are_reused() {
    let pool = super::ChunkPool::new(4 * super::CHUNK_BYTES as u64);
    let fill = |mem: &MemTable, n: u64| {
        let mut w = mem.writer();
        for i in 0..n {
            w.insert(&i.to_be_bytes(), 1, Some(&[7u8; 1000]));
        }
    };
    let mem = MemTable::with_pool(Some(Arc::clone(&pool)));
    fill(&mem, 3000); // ~3 MiB: 3 or 4 chunks
    assert_eq!(pool.free_bytes(), 0);
    drop(mem);
    let kept = pool.free_bytes();
    assert!(kept >= 3 * super::CHUNK_BYTES as u64, "kept {kept}");
    assert!(kept <= 4 * super::CHUNK_BYTES as u64, "kept {kept}");
    let mem = MemTable::with_pool(Some(Arc::clone(&pool)));
    fill(&mem, 500);
    assert_eq!(pool.free_bytes(), kept - super::CHUNK_BYTES as u64);
    drop(mem);
    assert!(pool.wants(8 * super::CHUNK_BYTES as u64) == (kept < 4 * super::CHUNK_BYTES as u64));
    let pool = super::ChunkPool::new(4 * super::CHUNK_BYTES as u64);
    assert!(pool.wants(2 * super::CHUNK_BYTES as u64));
    assert!(
        !pool.wants(2 * super::CHUNK_BYTES as u64),
        "one prepare at a time"
    );
    let pauses = std::cell::Cell::new(0);
    assert_eq!(
        pool.prepare(2 * super::CHUNK_BYTES as u64, &|| pauses
            .set(pauses.get() + 1)),
        2 * super::CHUNK_BYTES as u64
    );
    // Faulting a chunk in pauses every step, for more urgent work.
    assert_eq!(pauses.get(), 2 * super::CHUNK_BYTES / super::TOUCH_STEP);
    assert!(!pool.wants(2 * super::CHUNK_BYTES as u64));
    assert!(pool.wants(3 * super::CHUNK_BYTES as u64));
}

/// Insert time at a million keys, against the B+tree's copy-on-write
/// apply of the same changes:
/// `cargo test --release -p keel --lib memtable::tests::measure -- --ignored --nocapture`
#[test]
#[ignore]
fn measure_inserts_at_a_million_keys() {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    let value = vec![7u8; 100];
    // Memory faulted in beforehand, as a store's pool keeps it: what is
    // timed is the inserts, not the kernel backing fresh pages.
    let table = || {
        let pool = super::ChunkPool::new(512 << 20);
        pool.prepare(400 << 20, &|| {});
        MemTable::with_pool(Some(pool))
    };
    // The same keys into two memtables, one `insert` at a time and with
    // `insert_all`, in turns of 100 transactions (the machine's noise
    // falls on both).
    let (mem, grouped) = (table(), table());
    let mut lsn = 0;
    let mut grouped_ns = [0u128; 2];
    // Transactions of 100 random keys.
    let mut batch = |n: usize, rng: &mut rand::rngs::SmallRng, part: usize| {
        let mut ns = 0;
        for _ in 0..n / 100 {
            lsn += 1;
            let mut keys = [[0u8; 20]; 100];
            for key in &mut keys {
                key[3] = 1;
                rng.fill(&mut key[4..]);
            }
            let t = std::time::Instant::now();
            let mut w = mem.writer();
            for key in &keys {
                w.insert(key, lsn, Some(&value));
            }
            drop(w);
            ns += t.elapsed().as_nanos();
            let puts: Vec<(&[u8], Option<&[u8]>)> =
                keys.iter().map(|k| (&k[..], Some(&value[..]))).collect();
            let t = std::time::Instant::now();
            grouped.writer().insert_all(lsn, puts);
            grouped_ns[part] += t.elapsed().as_nanos();
        }
        ns as f64 / n as f64
    };
    let first = batch(900_000, &mut rng, 0);
    let last = batch(100_000, &mut rng, 1);
    let (g_first, g_last) = (
        grouped_ns[0] as f64 / 900_000.0,
        grouped_ns[1] as f64 / 100_000.0,
    );
    let t = std::time::Instant::now();
    let mut found = 0;
    for _ in 0..100_000 {
        let mut key = [0u8; 20];
        key[3] = 1;
        rng.fill(&mut key[4..]);
        found += usize::from(mem.get(&key, Lsn::MAX).is_some());
    }
    let miss_ns = t.elapsed().as_nanos() as f64 / 100_000.0;
    let t = std::time::Instant::now();
    let n = mem
        .range(Bound::Unbounded, Bound::Unbounded, Lsn::MAX)
        .count();
    let scan_ns = t.elapsed().as_nanos() as f64 / n as f64;
    println!(
        "memtable: insert {first:.0} ns (first 900k), {last:.0} ns (900k..1M); insert_all \
         {g_first:.0} and {g_last:.0} ns; get (absent) {miss_ns:.0} ns; scan {scan_ns:.0} ns \
         per key; {} MiB counted; {found} found",
        mem.bytes() >> 20
    );
}

/// Backward scans while the writer inserts (splitting leaves and inner
/// nodes under them): at a published LSN, every key inserted at or below
/// it, in descending order.
#[test]
fn backward_scans_see_every_published_key_while_the_writer_inserts() {
    let mem = MemTable::new();
    let published = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let key = |i: u64| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_be_bytes();
    let total = 30_000u64;
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut scans = 0u64;
            while !stop.load(Ordering::Acquire) {
                let at = published.load(Ordering::Acquire);
                let mut n = 0;
                let mut last: Option<Vec<u8>> = None;
                for (k, _) in mem.range_rev(Bound::Unbounded, Bound::Unbounded, at) {
                    assert!(last.as_deref().is_none_or(|l| k < l), "out of order");
                    last = Some(k.to_vec());
                    n += 1;
                }
                assert_eq!(n, at, "a backward scan at {at} found {n} keys");
                scans += 1;
            }
            scans
        });
        for i in 0..total {
            mem.writer().insert(&key(i), i + 1, Some(&b"v"[..]));
            published.store(i + 1, Ordering::Release);
        }
        stop.store(true, Ordering::Release);
        assert!(reader.join().unwrap() > 0);
    });
}

/// Writers on several threads insert at once, each commit's puts under an
/// LSN taken from a shared counter, so that the versions of one key come
/// in out of LSN order and leaves split under concurrent appends: every
/// key ends with every version, in LSN order (a read at each LSN finds
/// that version), and scans see each key once, in order, while it goes
/// on.
#[test]
fn writers_on_several_threads_insert_at_once_and_keep_lsn_order() {
    let mem = MemTable::new();
    let next_lsn = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    const KEYS: u64 = 4000;
    const COMMITS_PER_WRITER: u64 = 6000;
    // Scattered keys, a quarter of them sharing a head longer than the
    // memtable's inline one.
    let key = |i: u64| {
        let mut k = Vec::new();
        if i % 4 == 0 {
            k.extend_from_slice(&[7u8; super::HEAD_BYTES]);
        }
        k.extend_from_slice(&i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes());
        k
    };
    let logs: Vec<Vec<(u64, Lsn)>> = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut scans = 0u64;
            while !stop.load(Ordering::Acquire) {
                let mut last: Option<Vec<u8>> = None;
                for (k, v) in mem.range(Bound::Unbounded, Bound::Unbounded, Lsn::MAX) {
                    assert!(last.as_deref() < Some(k), "out of order or twice");
                    assert!(v.is_some_and(|v| v.ends_with(k)), "a value of another key");
                    last = Some(k.to_vec());
                }
                scans += 1;
            }
            scans
        });
        let writers: Vec<_> = (0..4u64)
            .map(|t| {
                let (mem, next_lsn) = (&mem, &next_lsn);
                s.spawn(move || {
                    let mut rng = rand::rngs::SmallRng::seed_from_u64(100 + t);
                    let mut log = Vec::new();
                    for c in 0..COMMITS_PER_WRITER {
                        let lsn = next_lsn.fetch_add(1, Ordering::Relaxed) + 1;
                        let n = rng.random_range(1..=6);
                        let mut picked: Vec<u64> = Vec::new();
                        while picked.len() < n {
                            let i = rng.random_range(0..KEYS);
                            if !picked.contains(&i) {
                                picked.push(i);
                            }
                        }
                        let puts: Vec<(Vec<u8>, Vec<u8>)> = picked
                            .iter()
                            .map(|&i| {
                                let mut v = lsn.to_be_bytes().to_vec();
                                v.extend_from_slice(&key(i));
                                (key(i), v)
                            })
                            .collect();
                        let mut w = mem.writer();
                        if c % 2 == 0 {
                            w.insert_all(lsn, puts.iter().map(|(k, v)| (&k[..], Some(&v[..]))));
                        } else {
                            for (k, v) in &puts {
                                w.insert(k, lsn, Some(v));
                            }
                        }
                        drop(w);
                        log.extend(picked.iter().map(|&i| (i, lsn)));
                    }
                    log
                })
            })
            .collect();
        let logs = writers.into_iter().map(|h| h.join().unwrap()).collect();
        stop.store(true, Ordering::Release);
        assert!(reader.join().unwrap() > 0);
        logs
    });
    let mut model: Model = BTreeMap::new();
    let mut versions = 0u64;
    for (i, lsn) in logs.into_iter().flatten() {
        let mut v = lsn.to_be_bytes().to_vec();
        v.extend_from_slice(&key(i));
        model.entry(key(i)).or_default().push((lsn, Some(v)));
        versions += 1;
    }
    for vs in model.values_mut() {
        vs.sort_by_key(|&(lsn, _)| lsn);
    }
    assert_eq!(mem.len(), model.len() as u64);
    assert_eq!(mem.versions(), versions);
    for (k, vs) in &model {
        for &(lsn, _) in vs {
            for at in [lsn - 1, lsn] {
                let got = mem.get(k, at).map(|v| v.map(<[u8]>::to_vec));
                assert_eq!(got, model_at(&model, k, at), "key {k:?} at {at}");
            }
        }
    }
    let last = next_lsn.load(Ordering::Relaxed);
    for at in [1, last / 3, last / 2, last] {
        assert_eq!(
            mem_range(&mem, Bound::Unbounded, Bound::Unbounded, at),
            model_range(&model, Bound::Unbounded, Bound::Unbounded, at)
        );
    }
}
