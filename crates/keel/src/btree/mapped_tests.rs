//! Pages read through a map of the data file are checked exactly as pages
//! read with `pread`: the same damage gives the same error, whether the
//! page is decoded (a load) or a leaf is searched in place (a lookup that
//! misses a full cache).

use std::sync::Arc;

use crossbeam_epoch as epoch;

use super::forge::{branch_page, leaf_page};
use super::page::{page_crc, PAGE_HEADER_BYTES};
use super::test_disk::Disk;
use super::*;
use crate::io::test_files::{real_file, sim_file, sim_vfs_file};
use crate::io::VfsFile;

const PS: PageSize = PageSize::DEFAULT;

fn write(f: &dyn VfsFile, page: PageNo, bytes: &[u8]) {
    f.write_at(bytes, page * PS.bytes() as u64).unwrap();
}

/// The three ways a cache reads: `pread`, a map (decoding what it
/// reads), and a map with no room (searching leaves in place).
fn caches(f: &Arc<dyn VfsFile>) -> [(&'static str, PageCache); 3] {
    let cache = |budget, mapped| {
        PageCache::new(Arc::clone(f), PS, budget)
            .with_mapped_reads(mapped)
            .unwrap()
    };
    [
        ("pread", cache(1 << 20, false)),
        ("mapped", cache(1 << 20, true)),
        ("in place", cache(0, true)),
    ]
}

/// What each way of reading answers for `key` in the leaf at `loc`, by a
/// load and by a lookup: values found, or errors, as text.
fn answers(f: &Arc<dyn VfsFile>, loc: Location, key: &[u8]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (how, cache) in caches(f) {
        let loaded = match cache.load(loc) {
            Ok(node) => format!("{:?}", node.as_leaf().map(|l| l.search(key))),
            Err(e) => format!("{e:?}"),
        };
        let guard = epoch::pin();
        let searched = match cache.search_leaf(loc, key, &guard) {
            Ok(LeafLookup::Node(node)) => {
                format!("node {:?}", node.as_leaf().map(|l| l.search(key).is_ok()))
            }
            Ok(LeafLookup::Searched(found)) => {
                format!("in place {:?}", found.map(|f| f.bytes))
            }
            Err(e) => format!("{e:?}"),
        };
        let in_place = u64::from(searched.starts_with("in place"));
        assert_eq!(
            cache.stats().searched_in_place,
            in_place,
            "{how}: {searched}"
        );
        out.push((format!("{how}: load"), loaded));
        out.push((format!("{how}: search"), searched));
    }
    out
}

/// Every answer of `answers` is an error, the same for every way.
fn same_error(f: &Arc<dyn VfsFile>, loc: Location, key: &[u8], want: &str) {
    let got = answers(f, loc, key);
    let (loads, searches): (Vec<_>, Vec<_>) =
        got.iter().partition(|(how, _)| how.ends_with("load"));
    for set in [loads, searches] {
        for (how, answer) in &set {
            assert_eq!(answer, &set[0].1, "{how} differs from {}", set[0].0);
        }
    }
    for (how, answer) in &got {
        assert!(answer.contains(want), "{how}: {answer}, not {want}");
    }
}

fn value() -> Vec<u8> {
    (0..100u8).collect()
}

fn good_leaf(page: PageNo) -> (Location, Vec<u8>) {
    let v = value();
    leaf_page(
        PS,
        page,
        &[
            (b"a", ValueRef::Inline(b"1")),
            (b"key", ValueRef::Inline(&v)),
            (b"z", ValueRef::Inline(b"26")),
        ],
    )
}

#[test]
fn a_good_leaf_reads_the_same_every_way() {
    let f = sim_file(11);
    let (loc, bytes) = good_leaf(3);
    write(&*f, 3, &bytes);
    for key in [&b"key"[..], b"a", b"z", b"b", b"", b"zz"] {
        let found = [&b"key"[..], b"a", b"z"].contains(&key);
        let got = answers(&f, loc, key);
        let show = String::from_utf8_lossy(key);
        // Loads: the same node every way.
        assert!(got[0]
            .1
            .starts_with(&format!("Some({}(", if found { "Ok" } else { "Err" })));
        assert_eq!(got[2].1, got[0].1, "{show}");
        assert_eq!(got[4].1, got[0].1, "{show}");
        // Lookups: decoded with room in the cache, in place without.
        assert_eq!(got[1].1, format!("node Some({found})"), "{show}");
        assert_eq!(got[3].1, got[1].1, "{show}");
        assert_eq!(got[5].1.starts_with("in place Some("), found, "{show}");
        assert_eq!(got[5].1 == "in place None", !found, "{show}");
    }
    let got = answers(&f, loc, b"key");
    let mut want = b"key".to_vec();
    want.extend_from_slice(&value());
    assert_eq!(got[5].1, format!("in place Some({:?})", &want[..]));
}

#[test]
fn a_damaged_page_is_the_same_error_however_it_is_read() {
    let f = sim_file(11);
    let (loc, bytes) = good_leaf(3);

    // A flipped bit: the page's own checksum.
    let mut flipped = bytes.clone();
    flipped[PAGE_HEADER_BYTES + 7] ^= 0x10;
    write(&*f, 3, &flipped);
    same_error(&f, loc, b"key", "BadChecksum");

    // An older valid version in place: the referrer's checksum.
    let (_, old) = leaf_page(PS, 3, &[(b"key", ValueRef::Inline(b"old"))]);
    write(&*f, 3, &old);
    same_error(&f, loc, b"key", "UnexpectedChecksum");

    // A valid page at another page's place.
    write(&*f, 4, &bytes);
    same_error(&f, Location { page: 4, ..loc }, b"key", "WrongPageNo");

    // A page whose checksums hold but whose layout does not: a byte past
    // the last cell, sealed again (the referrer recorded that checksum).
    let mut tail = bytes.clone();
    tail[PS.bytes() - 1] = 1;
    let crc = page_crc(&tail);
    tail[..4].copy_from_slice(&crc.to_le_bytes());
    write(&*f, 5, &{
        let mut t = tail.clone();
        t[8..16].copy_from_slice(&5u64.to_le_bytes());
        let crc = page_crc(&t);
        t[..4].copy_from_slice(&crc.to_le_bytes());
        t
    });
    let t5 = {
        let mut b = vec![0u8; PS.bytes()];
        f.read_exact_at(&mut b, 5 * PS.bytes() as u64).unwrap();
        b
    };
    same_error(
        &f,
        Location {
            page: 5,
            crc: page_crc(&t5),
        },
        b"key",
        "nonzero bytes after the last cell",
    );

    // Keys out of order, sealed: found by the walk wherever the key is.
    let mut swapped = bytes.clone();
    let a_at = PAGE_HEADER_BYTES + 5;
    swapped[a_at] = b'y';
    let crc = page_crc(&swapped);
    swapped[..4].copy_from_slice(&crc.to_le_bytes());
    write(&*f, 3, &swapped);
    let loc_swapped = Location { page: 3, crc };
    same_error(
        &f,
        loc_swapped,
        b"a",
        "keys not in strictly increasing order",
    );
    same_error(
        &f,
        loc_swapped,
        b"key",
        "keys not in strictly increasing order",
    );

    // A page past the end of the file: a map has no bytes there, and a
    // `pread` reports the end of the file.
    same_error(&f, Location { page: 1000, ..loc }, b"key", "UnexpectedEof");
}

/// A branch where its parent expects a leaf: not searched in place, but
/// decoded and handed back, as a load would (the caller checks levels).
#[test]
fn a_branch_where_a_leaf_belongs_is_handed_back() {
    let f = sim_file(11);
    let (l1, b1) = good_leaf(3);
    let (l2, b2) = leaf_page(PS, 4, &[(b"zz", ValueRef::Inline(b"x"))]);
    let (br, bb) = branch_page(PS, 5, 1, &[l1, l2], &[b"zz"]);
    for (page, bytes) in [(3, &b1), (4, &b2), (5, &bb)] {
        write(&*f, page, bytes);
    }
    for (how, answer) in answers(&f, br, b"key") {
        assert!(
            answer.contains("None"),
            "{how}: {answer} (a branch is not a leaf)"
        );
    }
}

/// A leaf overwritten or torn under the map after a lookup read it: the
/// next lookup sees the new bytes and refuses them (real map, and the
/// simulated one).
#[test]
fn a_page_torn_under_the_map_is_caught() {
    let (real, dir) = real_file("mapped-torn");
    for f in [real, sim_file(11)] {
        let (loc, bytes) = good_leaf(3);
        write(&*f, 3, &bytes);
        let [_, _, (_, in_place)] = caches(&f);
        let guard = epoch::pin();
        assert!(matches!(
            in_place.search_leaf(loc, b"key", &guard),
            Ok(LeafLookup::Searched(Some(_)))
        ));
        drop(guard);
        // Another version lands on it, all but its first sector (which
        // holds the checksum).
        let (_, other) = leaf_page(PS, 3, &[(b"key", ValueRef::Inline(b"new"))]);
        f.write_at(&other[512..], 3 * PS.bytes() as u64 + 512)
            .unwrap();
        f.write_at(&other[PAGE_HEADER_BYTES..512], 3 * PS.bytes() as u64 + 16)
            .unwrap();
        same_error(&f, loc, b"key", "BadChecksum");
        let guard = epoch::pin();
        assert!(matches!(
            in_place.search_leaf(loc, b"key", &guard),
            Err(BtreeError::Page(PageError::BadChecksum { page: 3, .. }))
        ));
        assert_eq!(in_place.stats().searched_in_place, 1);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// Snapshots taken early stay readable while checkpoints grow the file
/// far past the first map: lookups and scans of the old snapshot and the
/// new tree, with most leaves searched in place.
#[test]
fn old_snapshots_read_across_remaps() {
    let mut disk = Disk::new(PS, 0);
    let mut tm = Tree::new(PS).edit();
    let key = |i: u32| format!("key{i:08}").into_bytes();
    let value = |i: u32, round: u32| vec![(i + round) as u8; 100];
    let mut snapshots = Vec::new();
    for round in 0..6u32 {
        for i in 0..2000 {
            tm.insert(&disk.cache, &key(i), &value(i, round)).unwrap();
        }
        disk.checkpoint(&tm.snapshot());
        snapshots.push((round, tm.snapshot()));
        // Each old snapshot, read through whatever map is current now.
        for (r, t) in &snapshots {
            for i in (0..2000).step_by(37) {
                let e = t.get(&disk.cache, &key(i)).unwrap().unwrap();
                assert_eq!(e.value(), value(i, *r), "round {r} key {i}");
                assert_eq!(e.key(), key(i));
            }
            assert!(t.get(&disk.cache, b"key9").unwrap().is_none());
        }
    }
    let (r, t) = &snapshots[0];
    let scanned: Vec<_> = t
        .range(
            &disk.cache,
            std::ops::Bound::Unbounded,
            std::ops::Bound::Unbounded,
        )
        .map(|e| e.unwrap().value().to_vec())
        .collect();
    assert_eq!(scanned.len(), 2000);
    assert_eq!(scanned[5], value(5, *r));
    let s = disk.cache.stats();
    assert!(
        s.remaps >= 2,
        "the file grew from {} past 64 KiB steps: {s:?}",
        disk.file.len().unwrap()
    );
    assert!(s.searched_in_place > 1000, "{s:?}");
}

/// A writer's loads (a checkpoint's fold) go neither into the cache nor
/// through the map: the fold replaces every node it loads, so caching the
/// old versions would only evict what readers use, and mapping them would
/// leave the whole tree resident after each checkpoint. Readers still
/// read through the map and the cache.
#[test]
fn a_writers_loads_skip_the_cache_and_the_map() {
    let (vfs, file) = sim_vfs_file(5);
    let cache = || {
        PageCache::new(Arc::clone(&file), PS, 64 << 20)
            .with_mapped_reads(true)
            .unwrap()
    };
    let key = |i: u32| format!("key{i:08}").into_bytes();
    // A tree of many leaves, written out and read back cold.
    let mut tm = Tree::new(PS).edit();
    let warm = cache();
    for i in 0..3000 {
        tm.insert(&warm, &key(i), &[1u8; 100]).unwrap();
    }
    let cp = assign_pages(&tm.snapshot(), &mut {
        let mut next = FIRST_TREE_PAGE;
        move || {
            next += 1;
            next - 1
        }
    })
    .unwrap();
    for (page, bytes) in &cp.pages {
        write(file.as_ref(), *page, bytes);
    }
    let cold = cache();
    let tree = Tree::open(PS, &cold, cp.root).unwrap();
    let (cached0, mapped0) = (cold.stats().cached_bytes, vfs.stats().mapped_reads);
    // Change a key in every leaf.
    let mut tm = tree.edit();
    for i in (0..3000).step_by(20) {
        tm.insert(&cold, &key(i), &[2u8; 100]).unwrap();
    }
    let s = cold.stats();
    assert!(
        s.misses > 50,
        "the writer loaded the leaves it changed: {s:?}"
    );
    assert_eq!(
        s.cached_bytes, cached0,
        "nothing the writer loaded was cached"
    );
    assert_eq!(
        vfs.stats().mapped_reads,
        mapped0,
        "nor read through the map"
    );
    // A reader of the old tree reads through the map, and caches.
    assert_eq!(
        tree.get(&cold, &key(40)).unwrap().unwrap().value(),
        [1u8; 100]
    );
    assert!(vfs.stats().mapped_reads > mapped0);
    assert!(cold.stats().cached_bytes > cached0);
    assert_eq!(
        tm.snapshot().get(&cold, &key(40)).unwrap().unwrap().value(),
        [2u8; 100]
    );
}

/// Leaves on pages `pages` of `f`, each as full as a store's (30 keys
/// with 100-byte values) and holding the key `b"key"`.
fn many_leaves(f: &dyn VfsFile, pages: std::ops::Range<PageNo>) -> Vec<Location> {
    let v = value();
    let keys: Vec<Vec<u8>> = (0..29u8)
        .map(|i| vec![b'a', i])
        .chain([b"key".to_vec()])
        .collect();
    let cells: Vec<(&[u8], ValueRef<'_>)> = keys
        .iter()
        .map(|k| (&k[..], ValueRef::Inline(&v)))
        .collect();
    pages
        .map(|page| {
            let (loc, bytes) = leaf_page(PS, page, &cells);
            write(f, page, &bytes);
            loc
        })
        .collect()
}

/// Whether a lookup of `loc` found its leaf decoded in the cache.
fn cached(cache: &PageCache, loc: Location) -> bool {
    let guard = epoch::pin();
    matches!(
        cache.search_leaf(loc, b"key", &guard).unwrap(),
        LeafLookup::Node(NodeRef::Borrowed(_))
    )
}

/// Bytes of a mapped cache with room for a few dozen leaves in one shard
/// (a shard per 32 nodes of twice the page size), so that one hand
/// sweeps them all.
const ONE_SHARD: usize = 32 * 2 * PS.bytes();

/// Full leaves on pages 10..100 and 8 more on 500..508 of a new file, and
/// an empty mapped cache of [`ONE_SHARD`] over it.
fn leaves_and_cache() -> (Arc<dyn VfsFile>, Vec<Location>, Vec<Location>, PageCache) {
    let f = sim_file(11);
    let first = many_leaves(&*f, 10..100);
    let other = many_leaves(&*f, 500..508);
    let cache = PageCache::new(Arc::clone(&f), PS, ONE_SHARD)
        .with_mapped_reads(true)
        .unwrap();
    (f, first, other, cache)
}

/// `cache` filled by lookups of `first`: which of them it holds.
fn filled(cache: &PageCache, first: &[Location]) -> Vec<Location> {
    for &loc in first {
        cached(cache, loc);
    }
    let held: Vec<Location> = first
        .iter()
        .copied()
        .filter(|&l| cached(cache, l))
        .collect();
    assert!(
        held.len() >= 16 && held.len() < first.len(),
        "{}",
        held.len()
    );
    held
}

#[test]
fn a_full_cache_takes_in_the_leaves_readers_move_to() {
    let (_f, first, hot, cache) = leaves_and_cache();
    let held = filled(&cache, &first);
    // Only the hot leaves from now on: searched in place at first, then
    // let in as the hand finds the leaves read first unused. The hand
    // clears every held leaf's mark in one sweep and finds them unused
    // in the next: within two sweeps' worth of tries, all are in.
    let bound = (2 * held.len() + hot.len()) as u64 * u64::from(cache::ADMIT_EVERY);
    while !hot.iter().all(|&loc| cached(&cache, loc)) {
        let in_place = cache.stats().searched_in_place;
        assert!(
            in_place <= bound,
            "{in_place} in-place lookups, hot leaves still out"
        );
    }
    assert!(held.iter().any(|&l| !cached(&cache, l)));
}

#[test]
fn leaves_readers_use_are_not_traded_for_others() {
    let (_f, first, other, cache) = leaves_and_cache();
    let held = filled(&cache, &first);
    // The held leaves are read between any two tries at letting another
    // in: the hand finds each marked, and passes it.
    for _ in 0..200 {
        for &loc in &held {
            assert!(cached(&cache, loc), "held leaf {} evicted", loc.page);
        }
        for &loc in other.iter().cycle().take(cache::ADMIT_EVERY as usize) {
            assert!(!cached(&cache, loc));
        }
    }
    assert_eq!(cache.stats().evictions, 0);
}

#[test]
fn a_leaf_just_loaded_gets_a_turn_of_the_hand() {
    let (_f, first, other, cache) = leaves_and_cache();
    // Each read once, the first ones decoded until the cache is full.
    for &loc in &first {
        cached(&cache, loc);
    }
    assert!(cache.stats().searched_in_place > 0);
    let at = cache.stats().searched_in_place;
    for &loc in other.iter().cycle().take(cache::ADMIT_EVERY as usize) {
        assert!(!cached(&cache, loc));
    }
    assert!(cache.stats().searched_in_place > at);
    assert_eq!(cache.stats().evictions, 0);
}

#[test]
fn a_leaf_a_scan_loaded_is_among_the_first_to_go() {
    let (_f, first, other, cache) = leaves_and_cache();
    // Loaded as a scan loads them (decoded), once each, until the cache
    // has no room for another.
    for &loc in &first {
        if cache.stats().cached_bytes as usize + 2 * PS.bytes() > ONE_SHARD {
            break;
        }
        let guard = epoch::pin();
        cache.load_pinned(loc, &guard).unwrap();
    }
    let evicted = cache.stats().evictions;
    assert_eq!(evicted, 0);
    let tries: Vec<bool> = other
        .iter()
        .cycle()
        .take(cache::ADMIT_EVERY as usize)
        .map(|&loc| cached(&cache, loc))
        .collect();
    // The first try at admission finds an unmarked node under the hand,
    // and lets its leaf in.
    assert!(tries.iter().all(|&hit| !hit));
    let last = other[(cache::ADMIT_EVERY as usize - 1) % other.len()];
    assert!(cached(&cache, last));
}
