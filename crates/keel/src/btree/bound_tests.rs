//! Damaged trees whose every page has a valid checksum: a branch pointing
//! back to itself or to an ancestor, a subtree shared by both children of
//! every branch (2⁴⁰ paths through 41 pages), overflow chains that come
//! back on themselves, and a value longer than the store's limit. Every
//! walk must end in `Corrupt` naming the page (or, where the damage is
//! off its path, in its right answer) within [`forge::WALK_TIMEOUT`],
//! never loop (`bound`).

use std::ops::Bound::{Included, Unbounded};
use std::sync::Arc;

use super::forge::{self, branch_page, leaf_page, within};
use super::test_disk::Disk;
use super::*;
use crate::io::VfsFile;

const PS: PageSize = PageSize::DEFAULT;

/// A data file holding forged pages, and the root they make.
#[derive(Clone)]
struct Forged {
    file: Arc<dyn VfsFile>,
    root: Location,
    max_value_bytes: u64,
}

impl Forged {
    fn new(pages: &[(PageNo, Vec<u8>)], root: Location) -> Forged {
        let disk = Disk::new(PS, 1 << 20);
        for (page, bytes) in pages {
            disk.file.write_at(bytes, page * PS.bytes() as u64).unwrap();
        }
        Forged {
            file: Arc::clone(&disk.file),
            root,
            max_value_bytes: MAX_VALUE_BYTES,
        }
    }

    /// Run `op` on the tree, read through a fresh cache, on a thread of its
    /// own: it must answer within the timeout.
    fn run<T: Send + 'static>(
        &self,
        what: &str,
        op: impl FnOnce(&Tree, &PageCache) -> Result<T, BtreeError> + Send + 'static,
    ) -> Result<T, BtreeError> {
        let f = self.clone();
        within(what, move || {
            let cache = PageCache::new(Arc::clone(&f.file), PS, 1 << 20)
                .with_max_value_bytes(f.max_value_bytes);
            let tree = Tree::open(PS, &cache, Some(f.root)).expect("the root page is valid");
            op(&tree, &cache)
        })
    }

    /// Every walk, by name: a lookup of `key`; scans from the start and
    /// from `key`; an insert and a removal of `key`, and a removal of
    /// everything, on a working copy; the full check.
    fn every_walk(&self, key: &'static [u8]) -> Vec<(&'static str, Result<(), BtreeError>)> {
        let first_error = |r: Range<'_>| match r.filter_map(Result::err).next() {
            Some(e) => Err(e),
            None => Ok(()),
        };
        vec![
            ("get", self.run("get", move |t, c| t.get(c, key).map(drop))),
            (
                "scan",
                self.run("scan", move |t, c| {
                    first_error(t.range(c, Unbounded, Unbounded))
                }),
            ),
            (
                "seek",
                self.run("seek", move |t, c| {
                    first_error(t.range(c, Included(key), Unbounded))
                }),
            ),
            (
                "insert",
                self.run("insert", move |t, c| t.edit().insert(c, key, b"v")),
            ),
            (
                "remove",
                self.run("remove", move |t, c| t.edit().remove(c, key).map(drop)),
            ),
            (
                "remove_range",
                self.run("remove_range", |t, c| {
                    t.edit().remove_range(c, Unbounded, Unbounded).map(drop)
                }),
            ),
            (
                "check",
                self.run("check", |t, c| check_tree(t, c).map(drop)),
            ),
        ]
    }
}

fn assert_corrupt_at<T: std::fmt::Debug>(what: &str, r: &Result<T, BtreeError>, page: PageNo) {
    match r {
        Err(BtreeError::Corrupt { page: p, .. }) if *p == page => {}
        other => panic!("{what}: expected Corrupt at page {page}, got {other:?}"),
    }
}

fn inline(v: &[u8]) -> ValueRef<'_> {
    ValueRef::Inline(v)
}

/// A root branch whose second child is the root itself: its own checksum
/// inside it. Every descent, scan, change and check that goes there is
/// `Corrupt` at the root's page, caught by the child's level.
#[test]
fn a_branch_pointing_to_itself_is_corrupt_not_a_loop() {
    let (l, leaf) = leaf_page(PS, 2, &[(b"a", inline(b"1"))]);
    let (pages, root) = forge::cycle(0..8, |v, crc| {
        let back = Location { page: 10, crc };
        vec![(10, branch_page(PS, 10, 1, &[l, back], &[&[b'm', v]]).1)]
    });
    let mut all = pages;
    all.push((2, leaf));
    let f = Forged::new(&all, root);
    for (what, r) in f.every_walk(b"q") {
        assert_corrupt_at(what, &r, root.page);
    }
}

/// A branch of level 1 whose second child is the root (of level 2) above
/// it, each page holding the other's checksum.
#[test]
fn a_branch_pointing_to_its_ancestor_is_corrupt_not_a_loop() {
    let (l2, leaf2) = leaf_page(PS, 2, &[(b"a", inline(b"1"))]);
    let (l3, leaf3) = leaf_page(PS, 3, &[(b"n", inline(b"2"))]);
    let (l4, leaf4) = leaf_page(PS, 4, &[(b"x", inline(b"3"))]);
    let (b2, branch2) = branch_page(PS, 5, 1, &[l3, l4], &[b"p"]);
    let (pages, root) = forge::cycle(0..8, |v, crc| {
        let back = Location { page: 10, crc };
        let (b1, branch1) = branch_page(PS, 6, 1, &[l2, back], &[&[b'c', v]]);
        let (_, top) = branch_page(PS, 10, 2, &[b1, b2], &[b"m"]);
        vec![(10, top), (6, branch1)]
    });
    let mut all = pages;
    all.extend([(2, leaf2), (3, leaf3), (4, leaf4), (5, branch2)]);
    let f = Forged::new(&all, root);
    for (what, r) in f.every_walk(b"d") {
        assert_corrupt_at(what, &r, root.page);
    }
}

/// Both children of every branch are the same page, 40 levels deep: 41
/// pages, 2⁴⁰ paths from the root to the leaf. A lookup reads one path;
/// a scan, a removal of everything and the check must stop where they
/// reach the shared subtree a second time instead of walking every path.
#[test]
fn a_subtree_shared_at_every_level_is_corrupt_not_an_exponential_walk() {
    let (mut child, leaf) = leaf_page(PS, 2, &[(b"a", inline(b"1")), (b"b", inline(b"2"))]);
    let mut pages = vec![(2, leaf)];
    for level in 1..=40u8 {
        let page = 2 + PageNo::from(level);
        let (loc, bytes) = branch_page(PS, page, level, &[child, child], &[b"m"]);
        pages.push((page, bytes));
        child = loc;
    }
    let f = Forged::new(&pages, child);
    for (what, r) in f.every_walk(b"a") {
        match what {
            // One path each: the shared subtree is harmless to them.
            "get" | "insert" | "remove" => r.unwrap(),
            // Level 1's separator lies outside the bounds of the first
            // path to it (the check does not read the subtree again).
            "check" => match r {
                Err(BtreeError::Invariant(m)) if m.starts_with("page 3: separators") => {}
                other => panic!("check: {other:?}"),
            },
            _ => assert_corrupt_at(what, &r, 2),
        }
    }
    let got = f.run("get", |t, c| t.get(c, b"b")).unwrap().unwrap();
    assert_eq!(got.value(), b"2");
    assert!(f.run("get", |t, c| t.get(c, b"z")).unwrap().is_none());
}

/// A leaf whose only value is `len` bytes in the chain at `first`.
fn leaf_over(first: Location, len: u64) -> (Location, Vec<u8>) {
    let value = Arc::new(OverflowValue::on_disk(first, len));
    leaf_page(PS, 2, &[(b"k", ValueRef::Overflow(&value))])
}

/// Overflow chains that come back to a page they hold (the page itself, or
/// the first of two), each page full. Reading, replacing or checking the
/// value is `Corrupt` at the chain's first page; and the walk stops where
/// it comes back, however long the value claims to be.
#[test]
fn an_overflow_chain_coming_back_on_itself_is_corrupt() {
    let full = PS.overflow_data_bytes();
    let data = |v: u8| {
        let mut d = vec![7u8; full];
        d[0] = v;
        d
    };
    let (self_loop, first) = forge::cycle(0..8, |v, crc| {
        let back = Location { page: 10, crc };
        vec![(10, encode_overflow(10, Some(back), &data(v), PS))]
    });
    let (two, first_of_two) = forge::cycle(0..8, |v, crc| {
        let back = Location { page: 20, crc };
        let second = encode_overflow(21, Some(back), &data(7), PS);
        let to_second = Location {
            page: 21,
            crc: page_crc(&second),
        };
        vec![
            (20, encode_overflow(20, Some(to_second), &data(v), PS)),
            (21, second),
        ]
    });
    for (mut pages, first, len) in [
        (self_loop, first, 3 * full as u64),
        (two, first_of_two, 5 * full as u64),
    ] {
        // A value claiming 4,096 pages: the walk stops at the page reached
        // again, not after reading (and keeping) 4,096 pages' worth.
        let mut reads = 0;
        let long = 4096 * full as u64;
        let r = read_overflow_chain(PS, first, long, |page, buf| {
            reads += 1;
            let (_, bytes) = pages.iter().find(|(p, _)| *p == page).unwrap();
            buf.copy_from_slice(bytes);
            Ok(())
        });
        assert_corrupt_at("a long chain", &r, first.page);
        assert!(reads <= 2, "{reads} pages read of a chain of 1 or 2");
        let (root, leaf) = leaf_over(first, len);
        pages.push((2, leaf));
        let f = Forged::new(&pages, root);
        // Each reads the value: a scan yields it, a change frees its pages.
        for (what, r) in f.every_walk(b"k") {
            assert_corrupt_at(what, &r, first.page);
        }
    }
}

/// A value longer than the store's value limit is `Corrupt` before any page
/// of it is read: its chain here lies past the end of the file, which a
/// read would report as an I/O error. A valid chain within the limit reads.
#[test]
fn an_overflow_value_over_the_value_limit_is_refused_before_reading() {
    let full = PS.overflow_data_bytes();
    let len = 3 * full as u64;
    let past_end = Location {
        page: 1 << 20,
        crc: 1,
    };
    let (root, leaf) = leaf_over(past_end, len);
    let mut f = Forged::new(&[(2, leaf)], root);
    f.max_value_bytes = len - 1;
    for (what, r) in f.every_walk(b"k") {
        assert_corrupt_at(what, &r, past_end.page);
    }
    // The same limit over a valid chain of that length, and one byte more.
    let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    let mut pages = Vec::new();
    let mut next = None;
    for (i, chunk) in data.chunks(full).enumerate().rev() {
        let page = 10 + i as PageNo;
        let bytes = encode_overflow(page, next, chunk, PS);
        next = Some(Location {
            page,
            crc: page_crc(&bytes),
        });
        pages.push((page, bytes));
    }
    let (root, leaf) = leaf_over(next.unwrap(), len);
    pages.push((2, leaf));
    let mut f = Forged::new(&pages, root);
    f.max_value_bytes = len;
    let got = f.run("get", |t, c| t.get(c, b"k")).unwrap().unwrap();
    assert_eq!(got.value(), &data[..]);
    f.max_value_bytes = len - 1;
    assert_corrupt_at("get", &f.run("get", |t, c| t.get(c, b"k")), 10);
}
