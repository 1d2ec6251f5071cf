//! Damaged structures with valid checksums, for tests: pages that refer to
//! themselves or to an ancestor, which a checksum alone cannot catch.
//!
//! A page that records its own checksum (or a cycle of pages, each
//! recording the next one's) needs a checksum `x` with `crc(page(x)) = x`.
//! CRC32C over bytes of a fixed length is affine over GF(2) in those bytes,
//! and so is a chain of them, each holding the previous one's CRC: such
//! an `x` is the solution of 32 linear equations ([`fixed_point`]).

use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use super::leaf::{Leaf, ValueRef};
use super::node::{Body, Branch, Node};
use super::page::{encode_node, page_crc};
use super::{Child, Location, PageNo, PageSize};

/// How long a walk over a damaged structure may take before the test
/// calls it a loop; a bounded one answers in milliseconds.
pub(crate) const WALK_TIMEOUT: Duration = Duration::from_secs(20);

/// Run `f` on a thread of its own and return its result, or fail the test
/// if it takes longer than [`WALK_TIMEOUT`]: a regression that loops fails
/// instead of hanging the test run.
pub(crate) fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(WALK_TIMEOUT) {
        Ok(v) => v,
        Err(RecvTimeoutError::Timeout) => {
            panic!("{what}: no answer in {WALK_TIMEOUT:?}, the walk does not end")
        }
        Err(RecvTimeoutError::Disconnected) => panic!("{what}: the walk panicked"),
    }
}

/// The `x` with `f(x) == x`, for an `f` affine over GF(2) (a CRC32C of
/// bytes in which `x` is written), if there is one.
pub(crate) fn fixed_point(f: impl Fn(u32) -> u32) -> Option<u32> {
    // f(x) = M·x ⊕ c, so f(x) = x exactly when (M ⊕ I)·x = c.
    let c = f(0);
    let column = |i: usize| f(1 << i) ^ c ^ (1 << i);
    let columns: Vec<u32> = (0..32).map(column).collect();
    // Row r: the coefficients of equation r in bits 0..32, its right-hand
    // side in bit 32.
    let mut rows: Vec<u64> = (0..32)
        .map(|r| {
            let coefficients = (0..32)
                .filter(|&i| columns[i] >> r & 1 == 1)
                .fold(0u64, |row, i| row | 1 << i);
            coefficients | u64::from(c >> r & 1) << 32
        })
        .collect();
    let mut pivots = Vec::new();
    for col in 0..32 {
        let r = pivots.len();
        let Some(p) = (r..32).find(|&k| rows[k] >> col & 1 == 1) else {
            continue;
        };
        rows.swap(r, p);
        for k in 0..32 {
            if k != r && rows[k] >> col & 1 == 1 {
                rows[k] ^= rows[r];
            }
        }
        pivots.push(col);
    }
    if rows[pivots.len()..].iter().any(|row| row >> 32 & 1 == 1) {
        return None;
    }
    let x = pivots
        .iter()
        .enumerate()
        .filter(|&(r, _)| rows[r] >> 32 & 1 == 1)
        .fold(0u32, |x, (_, &col)| x | 1 << col);
    (f(x) == x).then_some(x)
}

/// Pages that refer back to the first of them: `build(variant, x)` returns
/// the pages when the first one's checksum is `x`. A checksum that is its
/// own page's CRC does not always exist: CRC32C's polynomial has the
/// factor x + 1, so one exists only for one parity of the page's other
/// bits. `build` changes them with `variant` (a byte of a key or of a
/// value); this tries variants until one has a checksum, and returns the
/// pages and the first page's location.
pub(crate) fn cycle(
    variants: impl IntoIterator<Item = u8>,
    build: impl Fn(u8, u32) -> Vec<(PageNo, Vec<u8>)>,
) -> (Vec<(PageNo, Vec<u8>)>, Location) {
    for v in variants {
        if let Some(crc) = fixed_point(|x| page_crc(&build(v, x)[0].1)) {
            let pages = build(v, crc);
            let page = pages[0].0;
            return (pages, Location { page, crc });
        }
    }
    panic!("no variant gives a checksum that refers to itself")
}

/// A leaf page at `page` holding `entries` in order.
pub(crate) fn leaf_page(
    ps: PageSize,
    page: PageNo,
    entries: &[(&[u8], ValueRef<'_>)],
) -> (Location, Vec<u8>) {
    let mut leaf = Leaf::default();
    for (key, value) in entries {
        leaf.push(key, *value);
    }
    sealed(ps, page, &Node::new(Body::Leaf(leaf)))
}

/// A branch page at `page` and `level` over `children`, separated by
/// `separators` (one fewer).
pub(crate) fn branch_page(
    ps: PageSize,
    page: PageNo,
    level: u8,
    children: &[Location],
    separators: &[&[u8]],
) -> (Location, Vec<u8>) {
    assert_eq!(children.len(), separators.len() + 1);
    let mut b = Branch::new(level, Child::on_disk(children[0]));
    for (sep, &child) in separators.iter().zip(&children[1..]) {
        b.push(sep, Child::on_disk(child));
    }
    sealed(ps, page, &Node::new(Body::Branch(b)))
}

fn sealed(ps: PageSize, page: PageNo, node: &Node) -> (Location, Vec<u8>) {
    let bytes = encode_node(node, page, ps);
    let crc = page_crc(&bytes);
    (Location { page, crc }, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_points_of_crcs_are_found_and_checked() {
        let mut found = 0;
        for seed in 0u8..16 {
            let page = |x: u32| {
                let mut b = vec![seed; 64];
                b[20..24].copy_from_slice(&x.to_le_bytes());
                b
            };
            if let Some(x) = fixed_point(|x| crc32c::crc32c(&page(x))) {
                assert_eq!(crc32c::crc32c(&page(x)), x);
                found += 1;
            }
        }
        assert!(found >= 4, "only {found} of 16 seeds had a fixed point");
        assert_eq!(fixed_point(|x| x ^ 1), None, "x ⊕ 1 has none");
        assert_eq!(fixed_point(|x| !x & 0xffff_0000 | x & 0xffff), None);
    }
}
