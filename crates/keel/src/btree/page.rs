//! The data file's page format: encoding and decoding of branch, leaf and
//! overflow pages. `docs/format.md` ("The data file: pages") is the
//! specification; this file follows it and derives every offset from the
//! one before. Decoding treats every byte as untrusted: each read is
//! bounds-checked and every rule of the format is checked, with a
//! [`PageError`] for the first one broken.

use crate::le::{get_u16, get_u32, get_u64, put_u16, put_u32, put_u64};
use std::sync::Arc;

use super::children::Child;
use super::leaf::{Leaf, OverflowValue, ValueRef};
use super::limits::{FIRST_TREE_PAGE, MAX_VALUE_BYTES};
use super::node::{Body, Branch, Node};
use super::{Location, PageError, PageNo, PageSize};

/// A branch page's type byte. Page type 0 is never written: a page of
/// zeros is not a page.
pub const PAGE_TYPE_BRANCH: u8 = 1;
/// A leaf page's type byte.
pub const PAGE_TYPE_LEAF: u8 = 2;
/// An overflow page's type byte.
pub const PAGE_TYPE_OVERFLOW: u8 = 3;
/// Reserved for the store's meta pages.
pub const PAGE_TYPE_META: u8 = 4;
/// Reserved for the store's free-list pages.
pub const PAGE_TYPE_FREELIST: u8 = 5;

// Common page header (little-endian), at the start of every page.
const H_CRC: usize = 0;
const H_TYPE: usize = H_CRC + 4;
const H_LEVEL: usize = H_TYPE + 1;
const H_COUNT: usize = H_LEVEL + 1;
const H_PAGE_NO: usize = H_COUNT + 2;
/// Size of the common page header; branch and leaf cells follow it.
pub const PAGE_HEADER_BYTES: usize = H_PAGE_NO + 8;
const _: () = assert!(PAGE_HEADER_BYTES == 16);

// Overflow page fields, after the common header.
const O_NEXT_PAGE: usize = PAGE_HEADER_BYTES;
const O_NEXT_CRC: usize = O_NEXT_PAGE + 8;
const O_DATA_LEN: usize = O_NEXT_CRC + 4;
/// Size of an overflow page's header; the value bytes follow it.
pub const OVERFLOW_HEADER_BYTES: usize = O_DATA_LEN + 4;
const _: () = assert!(OVERFLOW_HEADER_BYTES == 32);

// Branch cell, one per child.
const BC_CHILD_PAGE: usize = 0;
const BC_CHILD_CRC: usize = BC_CHILD_PAGE + 8;
const BC_KEY_LEN: usize = BC_CHILD_CRC + 4;
/// A branch cell's bytes before its separator key.
pub const BRANCH_CELL_FIXED_BYTES: usize = BC_KEY_LEN + 2;
const _: () = assert!(BRANCH_CELL_FIXED_BYTES == 14);

// Leaf cell: key length and value kind, then the kind's own layout.
const LC_KEY_LEN: usize = 0;
const LC_KIND: usize = LC_KEY_LEN + 2;
// Inline value: its length, then the key, then the value.
const LC_INLINE_VALUE_LEN: usize = LC_KIND + 1;
/// An inline leaf cell's bytes besides its key and value.
pub const LEAF_INLINE_CELL_FIXED_BYTES: usize = LC_INLINE_VALUE_LEN + 2;
const _: () = assert!(LEAF_INLINE_CELL_FIXED_BYTES == 5);
// Overflow value: the key right after the kind, then the reference.
const LC_OVERFLOW_KEY: usize = LC_KIND + 1;
const OR_FIRST_PAGE: usize = 0;
const OR_FIRST_CRC: usize = OR_FIRST_PAGE + 8;
const OR_VALUE_LEN: usize = OR_FIRST_CRC + 4;
const OVERFLOW_REF_BYTES: usize = OR_VALUE_LEN + 8;
/// An overflow leaf cell's bytes besides its key.
pub const LEAF_OVERFLOW_CELL_FIXED_BYTES: usize = LC_OVERFLOW_KEY + OVERFLOW_REF_BYTES;
const _: () = assert!(LEAF_OVERFLOW_CELL_FIXED_BYTES == 23);

/// Leaf value kinds (0 is never written).
const KIND_INLINE: u8 = 1;
const KIND_OVERFLOW: u8 = 2;

/// One overflow page, decoded: the next page of the chain and this page's
/// share of the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverflowPage<'a> {
    /// The next page and its checksum; `None` on the last page.
    pub next: Option<Location>,
    /// This page's share of the value.
    pub data: &'a [u8],
}

/// Any tree page, decoded.
// A node is large (a leaf's slots are inline, `leaf.rs`); a decoded page
// is a short-lived value, moved once, so boxing it would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Page<'a> {
    /// A branch or a leaf.
    Node(Node),
    /// A page of an overflow chain.
    Overflow(OverflowPage<'a>),
}

/// The checksum a page's header must hold: CRC32C of everything after the
/// checksum field.
pub fn page_crc(page: &[u8]) -> u32 {
    crc32c::crc32c(&page[H_TYPE..])
}

/// Encode a node as page `page_no`. Every child of a branch must already
/// have a location.
///
/// # Panics
/// If the node does not fit a page or a child has no location: the tree
/// never builds such a node, and it must not reach the disk.
pub fn encode_node(node: &Node, page_no: PageNo, page_size: PageSize) -> Vec<u8> {
    let mut page = vec![0u8; page_size.bytes()];
    encode_node_into(node, page_no, &mut page);
    page
}

/// [`encode_node`] into `page` (a whole page, of the tree's page size),
/// overwriting every byte of it. Returns the page's checksum.
///
/// # Panics
/// As [`encode_node`].
pub fn encode_node_into(node: &Node, page_no: PageNo, page: &mut [u8]) -> u32 {
    let size = node.encoded_bytes();
    assert!(
        size <= page.len(),
        "a node of {size} bytes does not fit a {}-byte page",
        page.len()
    );
    // Bytes no field covers read as zeros, whatever the buffer held.
    page.fill(0);
    let (kind, end) = match node.body() {
        Body::Leaf(l) => (PAGE_TYPE_LEAF, encode_leaf_cells(l, page)),
        Body::Branch(b) => (PAGE_TYPE_BRANCH, encode_branch_cells(b, page)),
    };
    assert_eq!(end, size, "tracked node size differs from its encoding");
    let count = u16::try_from(node.len()).expect("cell count fits a page");
    put_header(page, kind, node.level(), count, page_no);
    seal(page)
}

fn encode_leaf_cells(leaf: &Leaf, page: &mut [u8]) -> usize {
    let mut at = PAGE_HEADER_BYTES;
    for i in 0..leaf.len() {
        let key = leaf.key(i);
        put_u16(page, at + LC_KEY_LEN, key.len() as u16);
        match leaf.value(i) {
            ValueRef::Inline(v) => {
                page[at + LC_KIND] = KIND_INLINE;
                put_u16(page, at + LC_INLINE_VALUE_LEN, v.len() as u16);
                at += LEAF_INLINE_CELL_FIXED_BYTES;
                page[at..at + key.len()].copy_from_slice(key);
                at += key.len();
                page[at..at + v.len()].copy_from_slice(v);
                at += v.len();
            }
            ValueRef::Overflow(o) => {
                let first = o.location().expect("overflow value placed before its leaf");
                page[at + LC_KIND] = KIND_OVERFLOW;
                at += LC_OVERFLOW_KEY;
                page[at..at + key.len()].copy_from_slice(key);
                at += key.len();
                put_u64(page, at + OR_FIRST_PAGE, first.page);
                put_u32(page, at + OR_FIRST_CRC, first.crc);
                put_u64(page, at + OR_VALUE_LEN, o.len());
                at += OVERFLOW_REF_BYTES;
            }
        }
    }
    at
}

fn encode_branch_cells(branch: &Branch, page: &mut [u8]) -> usize {
    let mut at = PAGE_HEADER_BYTES;
    for i in 0..branch.len() {
        let loc = branch
            .child_location(i)
            .expect("child placed before its parent");
        let key: &[u8] = if i == 0 { &[] } else { branch.separator(i - 1) };
        put_u64(page, at + BC_CHILD_PAGE, loc.page);
        put_u32(page, at + BC_CHILD_CRC, loc.crc);
        put_u16(page, at + BC_KEY_LEN, key.len() as u16);
        at += BRANCH_CELL_FIXED_BYTES;
        page[at..at + key.len()].copy_from_slice(key);
        at += key.len();
    }
    at
}

/// Encode overflow page `page_no` holding `data`, followed by `next`.
pub fn encode_overflow(
    page_no: PageNo,
    next: Option<Location>,
    data: &[u8],
    page_size: PageSize,
) -> Vec<u8> {
    let mut page = vec![0u8; page_size.bytes()];
    encode_overflow_into(page_no, next, data, &mut page);
    page
}

/// [`encode_overflow`] into `page` (a whole page), overwriting every byte
/// of it. Returns the page's checksum.
pub fn encode_overflow_into(
    page_no: PageNo,
    next: Option<Location>,
    data: &[u8],
    page: &mut [u8],
) -> u32 {
    assert!(!data.is_empty() && OVERFLOW_HEADER_BYTES + data.len() <= page.len());
    page.fill(0);
    put_header(page, PAGE_TYPE_OVERFLOW, 0, 0, page_no);
    if let Some(n) = next {
        put_u64(page, O_NEXT_PAGE, n.page);
        put_u32(page, O_NEXT_CRC, n.crc);
    }
    put_u32(page, O_DATA_LEN, data.len() as u32);
    page[OVERFLOW_HEADER_BYTES..OVERFLOW_HEADER_BYTES + data.len()].copy_from_slice(data);
    seal(page)
}

fn put_header(page: &mut [u8], kind: u8, level: u8, count: u16, page_no: PageNo) {
    page[H_TYPE] = kind;
    page[H_LEVEL] = level;
    put_u16(page, H_COUNT, count);
    put_u64(page, H_PAGE_NO, page_no);
}

fn seal(page: &mut [u8]) -> u32 {
    let crc = page_crc(page);
    put_u32(page, H_CRC, crc);
    crc
}

/// The header fields every page type shares, once the frame is checked.
struct Header {
    kind: u8,
    level: u8,
    count: u16,
    crc: u32,
}

/// Check what every page must satisfy: its size, its own checksum, the
/// checksum its referrer expects (if given) and its page number.
fn check_frame(
    bytes: &[u8],
    page_size: PageSize,
    page_no: PageNo,
    expected_crc: Option<u32>,
) -> Result<Header, PageError> {
    if bytes.len() != page_size.bytes() {
        return Err(PageError::WrongSize {
            page: page_no,
            len: bytes.len(),
            page_bytes: page_size.bytes(),
        });
    }
    let stored = get_u32(bytes, H_CRC);
    let computed = page_crc(bytes);
    if stored != computed {
        return Err(PageError::BadChecksum {
            page: page_no,
            stored,
            computed,
        });
    }
    if let Some(expected) = expected_crc.filter(|&e| e != stored) {
        return Err(PageError::UnexpectedChecksum {
            page: page_no,
            expected,
            found: stored,
        });
    }
    let found = get_u64(bytes, H_PAGE_NO);
    if found != page_no {
        return Err(PageError::WrongPageNo {
            expected: page_no,
            found,
        });
    }
    Ok(Header {
        kind: bytes[H_TYPE],
        level: bytes[H_LEVEL],
        count: get_u16(bytes, H_COUNT),
        crc: stored,
    })
}

/// Decode the branch or leaf at `expect`, which a parent (or the meta page)
/// recorded with its checksum.
pub fn decode_node(bytes: &[u8], page_size: PageSize, expect: Location) -> Result<Node, PageError> {
    let h = check_frame(bytes, page_size, expect.page, Some(expect.crc))?;
    node_from_frame(bytes, page_size, expect.page, &h)
}

/// Decode the overflow page at `expect`.
pub fn decode_overflow(
    bytes: &[u8],
    page_size: PageSize,
    expect: Location,
) -> Result<OverflowPage<'_>, PageError> {
    let h = check_frame(bytes, page_size, expect.page, Some(expect.crc))?;
    if h.kind != PAGE_TYPE_OVERFLOW {
        return Err(PageError::WrongType {
            page: expect.page,
            expected: "overflow",
            found: h.kind,
        });
    }
    overflow_from_frame(bytes, page_size, expect.page, &h)
}

/// Decode any tree page found at `page_no`, trusting its own checksum (for
/// inspection tools and fuzzing; the tree reads through [`decode_node`] and
/// [`decode_overflow`], which also check the referrer's checksum).
pub fn decode_page(
    bytes: &[u8],
    page_size: PageSize,
    page_no: PageNo,
) -> Result<Page<'_>, PageError> {
    let h = check_frame(bytes, page_size, page_no, None)?;
    if h.kind == PAGE_TYPE_OVERFLOW {
        overflow_from_frame(bytes, page_size, page_no, &h).map(Page::Overflow)
    } else {
        node_from_frame(bytes, page_size, page_no, &h).map(Page::Node)
    }
}

fn node_from_frame(
    bytes: &[u8],
    page_size: PageSize,
    page: PageNo,
    h: &Header,
) -> Result<Node, PageError> {
    let body = match h.kind {
        PAGE_TYPE_LEAF => Body::Leaf(decode_leaf(bytes, page_size, page, h)?),
        PAGE_TYPE_BRANCH => Body::Branch(decode_branch(bytes, page_size, page, h)?),
        found => {
            return Err(PageError::WrongType {
                page,
                expected: "branch or leaf",
                found,
            })
        }
    };
    let node = Node::loaded(body, Location { page, crc: h.crc });
    debug_assert!(node.encoded_bytes() <= page_size.bytes());
    Ok(node)
}

fn layout(page: PageNo, reason: &'static str) -> PageError {
    PageError::BadLayout { page, reason }
}

/// `bytes[at..at + len]`, or a layout error if it runs past the page.
fn field(bytes: &[u8], page: PageNo, at: usize, len: usize) -> Result<&[u8], PageError> {
    at.checked_add(len)
        .and_then(|end| bytes.get(at..end))
        .ok_or_else(|| layout(page, "a cell runs past the end of the page"))
}

/// The bytes after the last cell must be zero, so that a page decodes to
/// one content and encodes back to the same bytes.
fn check_zero_tail(bytes: &[u8], page: PageNo, end: usize) -> Result<(), PageError> {
    if !all_zero(&bytes[end..]) {
        return Err(layout(page, "nonzero bytes after the last cell"));
    }
    Ok(())
}

/// Whether every byte is zero: 64 bytes at a time, ORed as words, which
/// the compiler turns into vector instructions (a byte-at-a-time loop
/// that stops at the first nonzero byte is not: it was ~8 % of a lookup
/// that searches a mapped leaf in place, whose tail is often half the
/// page).
fn all_zero(bytes: &[u8]) -> bool {
    let mut chunks = bytes.chunks_exact(64);
    for chunk in &mut chunks {
        let mut acc = 0u64;
        for word in chunk.chunks_exact(8) {
            acc |= u64::from_ne_bytes(word.try_into().expect("8 bytes"));
        }
        if acc != 0 {
            return false;
        }
    }
    chunks.remainder().iter().all(|&b| b == 0)
}

fn decode_leaf(
    bytes: &[u8],
    page_size: PageSize,
    page: PageNo,
    h: &Header,
) -> Result<Leaf, PageError> {
    let mut leaf = Leaf::with_capacity(usize::from(h.count), bytes.len());
    let end = walk_leaf(bytes, page_size, page, h, |key, value| match value {
        Cell::Inline(v) => leaf.push(key, ValueRef::Inline(v)),
        Cell::Overflow(o) => leaf.push(key, ValueRef::Overflow(&Arc::new(o))),
    })?;
    debug_assert_eq!(leaf.encoded_bytes(), end);
    leaf.shrink_to_fit();
    Ok(leaf)
}

/// A leaf cell's value, as [`walk_leaf`] hands it on.
enum Cell<'a> {
    Inline(&'a [u8]),
    Overflow(OverflowValue),
}

/// Check a leaf page's cells against every rule of the format, handing
/// each to `visit` in key order; returns where the cells end. The one
/// check of a leaf's layout, shared by [`decode_node`] and
/// [`search_leaf`], so that both refuse exactly the same pages.
fn walk_leaf<'a>(
    bytes: &'a [u8],
    page_size: PageSize,
    page: PageNo,
    h: &Header,
    mut visit: impl FnMut(&'a [u8], Cell<'a>),
) -> Result<usize, PageError> {
    if h.level != 0 {
        return Err(layout(page, "a leaf with a nonzero level"));
    }
    if h.count == 0 {
        return Err(layout(page, "an empty leaf"));
    }
    let mut at = PAGE_HEADER_BYTES;
    let mut prev: Option<&[u8]> = None;
    for _ in 0..h.count {
        let fixed = field(bytes, page, at, LC_KIND + 1)?;
        let key_len = usize::from(get_u16(fixed, LC_KEY_LEN));
        if key_len > page_size.max_key_bytes() {
            return Err(layout(page, "a key longer than the page size allows"));
        }
        let (key, next) = match fixed[LC_KIND] {
            KIND_INLINE => {
                let len_field = field(bytes, page, at + LC_INLINE_VALUE_LEN, 2)?;
                let value_len = usize::from(get_u16(len_field, 0));
                if value_len > page_size.max_inline_value_bytes() {
                    return Err(layout(page, "an inline value longer than the inline limit"));
                }
                let key_at = at + LEAF_INLINE_CELL_FIXED_BYTES;
                let key = field(bytes, page, key_at, key_len)?;
                let value = field(bytes, page, key_at + key_len, value_len)?;
                check_order(prev, key, page)?;
                visit(key, Cell::Inline(value));
                (key, key_at + key_len + value_len)
            }
            KIND_OVERFLOW => {
                let key = field(bytes, page, at + LC_OVERFLOW_KEY, key_len)?;
                let ref_at = at + LC_OVERFLOW_KEY + key_len;
                let r = field(bytes, page, ref_at, OVERFLOW_REF_BYTES)?;
                let value = decode_overflow_ref(r, page_size, page)?;
                check_order(prev, key, page)?;
                visit(key, Cell::Overflow(value));
                (key, ref_at + OVERFLOW_REF_BYTES)
            }
            _ => return Err(layout(page, "an unknown value kind")),
        };
        prev = Some(key);
        at = next;
    }
    check_zero_tail(bytes, page, at)?;
    Ok(at)
}

/// A cell [`search_leaf`] found, borrowed from the page.
#[derive(Debug)]
pub enum FoundCell<'a> {
    /// The key and its inline value.
    Inline(&'a [u8], &'a [u8]),
    /// The key and its overflow value's reference.
    Overflow(&'a [u8], OverflowValue),
}

/// What [`search_leaf`] found at a page its referrer expects to be a leaf.
#[derive(Debug)]
pub enum LeafSearch<'a> {
    /// The key's cell.
    Found(FoundCell<'a>),
    /// A valid leaf without the key.
    Absent,
    /// A valid page of another type: its checksum and page number are
    /// right, but it is not a leaf (decode it to say what is wrong).
    NotALeaf,
}

/// Look `key` up in the leaf at `expect` without decoding it: the page is
/// checked exactly as [`decode_node`] checks it (its frame, and every cell
/// of the leaf, however early the key is found), and nothing is
/// allocated.
pub fn search_leaf<'a>(
    bytes: &'a [u8],
    page_size: PageSize,
    expect: Location,
    key: &[u8],
) -> Result<LeafSearch<'a>, PageError> {
    let h = check_frame(bytes, page_size, expect.page, Some(expect.crc))?;
    if h.kind != PAGE_TYPE_LEAF {
        return Ok(LeafSearch::NotALeaf);
    }
    let mut found = LeafSearch::Absent;
    walk_leaf(bytes, page_size, expect.page, &h, |k, value| {
        if k == key {
            found = LeafSearch::Found(match value {
                Cell::Inline(v) => FoundCell::Inline(k, v),
                Cell::Overflow(o) => FoundCell::Overflow(k, o),
            });
        }
    })?;
    Ok(found)
}

fn check_order(prev: Option<&[u8]>, key: &[u8], page: PageNo) -> Result<(), PageError> {
    if prev.is_some_and(|p| p >= key) {
        return Err(layout(page, "keys not in strictly increasing order"));
    }
    Ok(())
}

fn decode_overflow_ref(
    r: &[u8],
    page_size: PageSize,
    page: PageNo,
) -> Result<OverflowValue, PageError> {
    let first = Location {
        page: get_u64(r, OR_FIRST_PAGE),
        crc: get_u32(r, OR_FIRST_CRC),
    };
    let len = get_u64(r, OR_VALUE_LEN);
    if len <= page_size.max_inline_value_bytes() as u64 || len > MAX_VALUE_BYTES {
        return Err(layout(
            page,
            "an overflow value of a length that is not stored so",
        ));
    }
    if first.page < FIRST_TREE_PAGE {
        return Err(layout(page, "an overflow reference to a meta page"));
    }
    Ok(OverflowValue::on_disk(first, len))
}

fn decode_branch(
    bytes: &[u8],
    page_size: PageSize,
    page: PageNo,
    h: &Header,
) -> Result<Branch, PageError> {
    if h.level == 0 {
        return Err(layout(page, "a branch at level 0"));
    }
    if h.count < 2 {
        return Err(layout(page, "a branch with fewer than two children"));
    }
    let mut branch: Option<Branch> = None;
    let mut at = PAGE_HEADER_BYTES;
    for i in 0..h.count {
        let fixed = field(bytes, page, at, BRANCH_CELL_FIXED_BYTES)?;
        let child = Location {
            page: get_u64(fixed, BC_CHILD_PAGE),
            crc: get_u32(fixed, BC_CHILD_CRC),
        };
        if child.page < FIRST_TREE_PAGE {
            return Err(layout(page, "a child reference to a meta page"));
        }
        let key_len = usize::from(get_u16(fixed, BC_KEY_LEN));
        let key = field(bytes, page, at + BRANCH_CELL_FIXED_BYTES, key_len)?;
        at += BRANCH_CELL_FIXED_BYTES + key_len;
        match branch.as_mut() {
            None if key_len != 0 => return Err(layout(page, "a key in a branch's first cell")),
            None => branch = Some(Branch::new(h.level, Child::on_disk(child))),
            Some(_) if key_len == 0 || key_len > page_size.max_key_bytes() => {
                return Err(layout(page, "a separator that is empty or too long"))
            }
            Some(b) => {
                if i >= 2 && b.separator(usize::from(i) - 2) >= key {
                    return Err(layout(page, "separators not in strictly increasing order"));
                }
                b.push(key, Child::on_disk(child));
            }
        }
    }
    check_zero_tail(bytes, page, at)?;
    let branch = branch.expect("count >= 2");
    debug_assert_eq!(branch.encoded_bytes(), at);
    Ok(branch)
}

fn overflow_from_frame<'a>(
    bytes: &'a [u8],
    page_size: PageSize,
    page: PageNo,
    h: &Header,
) -> Result<OverflowPage<'a>, PageError> {
    if h.level != 0 || h.count != 0 {
        return Err(layout(page, "an overflow page with a level or a count"));
    }
    let next_page = get_u64(bytes, O_NEXT_PAGE);
    let next_crc = get_u32(bytes, O_NEXT_CRC);
    let next = match next_page {
        0 if next_crc != 0 => return Err(layout(page, "a checksum for no next page")),
        0 => None,
        p if p < FIRST_TREE_PAGE => return Err(layout(page, "a next page that is a meta page")),
        p => Some(Location {
            page: p,
            crc: next_crc,
        }),
    };
    let len = get_u32(bytes, O_DATA_LEN) as usize;
    if len == 0 || len > page_size.overflow_data_bytes() {
        return Err(layout(page, "an overflow data length out of range"));
    }
    let end = OVERFLOW_HEADER_BYTES + len;
    check_zero_tail(bytes, page, end)?;
    Ok(OverflowPage {
        next,
        data: &bytes[OVERFLOW_HEADER_BYTES..end],
    })
}

#[cfg(test)]
#[path = "page_tests.rs"]
mod tests;
