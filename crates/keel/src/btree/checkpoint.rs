//! Checkpoint serialization: give a page to every node (and overflow value)
//! a snapshot holds only in memory, encode it, and, once the caller has
//! made those pages durable, let go of the in-memory copies of what is on
//! disk.
//!
//! A node without a location has a parent without one too (a writer copies
//! the whole path to a node it changes), so the walk stops at the first
//! clean node of every path and visits only what changed since the last
//! checkpoint.

use std::collections::HashSet;
use std::sync::Arc;

use super::leaf::{OverflowValue, ValueRef};
use super::limits::FIRST_TREE_PAGE;
use super::node::{Body, Node};
use super::page::{decode_node, encode_node, encode_overflow, page_crc};
use super::{BtreeError, Location, PageNo, PageSize, Tree};

/// What [`assign_pages`] produced.
#[derive(Debug, Default)]
pub struct Checkpoint {
    /// The root's place (`None`: the tree is empty).
    pub root: Option<Location>,
    /// Every page to write, whole, sorted by page number.
    pub pages: Vec<(PageNo, Vec<u8>)>,
    /// The nodes just placed, for the caller's page cache once the pages
    /// are durable.
    pub nodes: Vec<(Location, Arc<Node>)>,
}

struct Placer<'a> {
    page_size: PageSize,
    alloc: &'a mut dyn FnMut() -> PageNo,
    taken: HashSet<PageNo>,
    out: Checkpoint,
}

/// Give pages to the snapshot's nodes that are not on disk, in post-order
/// (children first, so each parent records its children's checksums), and
/// encode them. Pages come from `alloc`, which must return page numbers
/// that no live page uses.
///
/// Each placed node gets its location at once: from then on it counts as
/// clean. So if this returns an error, or the caller fails to write and
/// sync the pages, nodes are marked clean that are not on disk: the store
/// must be poisoned and reopened, as after any failed write. Run one
/// checkpoint at a time, while no writer copies nodes of this snapshot (a
/// node placed while a writer copies it would not be reported freed).
pub fn assign_pages(
    tree: &Tree,
    alloc: &mut dyn FnMut() -> PageNo,
) -> Result<Checkpoint, BtreeError> {
    let mut p = Placer {
        page_size: tree.page_size(),
        alloc,
        taken: HashSet::new(),
        out: Checkpoint::default(),
    };
    if let Some(root) = tree.root() {
        p.out.root = Some(p.place(root)?);
    }
    p.out.pages.sort_unstable_by_key(|(page, _)| *page);
    Ok(p.out)
}

impl Placer<'_> {
    fn allocate(&mut self) -> Result<PageNo, BtreeError> {
        let page = (self.alloc)();
        if page < FIRST_TREE_PAGE {
            return Err(BtreeError::BadAllocation {
                page,
                reason: "a meta page",
            });
        }
        if !self.taken.insert(page) {
            return Err(BtreeError::BadAllocation {
                page,
                reason: "twice in one checkpoint",
            });
        }
        Ok(page)
    }

    fn place(&mut self, node: &Arc<Node>) -> Result<Location, BtreeError> {
        if let Some(loc) = node.location() {
            return Ok(loc);
        }
        match node.body() {
            Body::Branch(b) => {
                for i in 0..b.len() {
                    if let Ok(mem) = b.child(i).resolve() {
                        self.place(&mem)?;
                    }
                }
            }
            Body::Leaf(l) => {
                for value in l.overflow_values() {
                    if value.location().is_none() {
                        self.place_overflow(value)?;
                    }
                }
            }
        }
        let page = self.allocate()?;
        let bytes = encode_node(node, page, self.page_size);
        let loc = Location {
            page,
            crc: page_crc(&bytes),
        };
        // The page must read back as the node it was made from.
        debug_assert!(
            decode_node(&bytes, self.page_size, loc).is_ok_and(|back| same_content(node, &back)),
            "page {page} does not decode to the node it encodes"
        );
        node.set_location(loc);
        self.out.pages.push((page, bytes));
        self.out.nodes.push((loc, Arc::clone(node)));
        Ok(loc)
    }

    /// Encode a value's chain last page first, so each page can hold the
    /// next one's checksum (the caller writes the pages in page order).
    fn place_overflow(&mut self, value: &OverflowValue) -> Result<(), BtreeError> {
        let bytes = value
            .bytes_in_memory()
            .expect("an overflow value not on disk is in memory");
        let chunks: Vec<&[u8]> = bytes.chunks(self.page_size.overflow_data_bytes()).collect();
        assert_eq!(
            chunks.len() as u64,
            self.page_size.overflow_pages(value.len())
        );
        let pages = (0..chunks.len())
            .map(|_| self.allocate())
            .collect::<Result<Vec<_>, _>>()?;
        let mut next = None;
        for (&page, chunk) in pages.iter().zip(&chunks).rev() {
            let encoded = encode_overflow(page, next, chunk, self.page_size);
            next = Some(Location {
                page,
                crc: page_crc(&encoded),
            });
            self.out.pages.push((page, encoded));
        }
        value.set_location(
            next.expect("a value past the inline limit has pages"),
            pages.into(),
        );
        Ok(())
    }
}

/// Whether two nodes hold the same entries or children.
fn same_content(a: &Node, b: &Node) -> bool {
    let same = match (a.body(), b.body()) {
        (Body::Leaf(x), Body::Leaf(y)) => {
            x.len() == y.len()
                && (0..x.len()).all(|i| x.key(i) == y.key(i) && same_value(x.value(i), y.value(i)))
        }
        (Body::Branch(x), Body::Branch(y)) => {
            x.level() == y.level()
                && x.len() == y.len()
                && (0..x.len()).all(|i| x.child_location(i) == y.child_location(i))
                && (1..x.len()).all(|i| x.separator(i - 1) == y.separator(i - 1))
        }
        _ => false,
    };
    same && a.encoded_bytes() == b.encoded_bytes()
}

fn same_value(a: ValueRef<'_>, b: ValueRef<'_>) -> bool {
    match (a, b) {
        (ValueRef::Inline(x), ValueRef::Inline(y)) => x == y,
        (ValueRef::Overflow(x), ValueRef::Overflow(y)) => {
            x.len() == y.len() && x.location() == y.location()
        }
        _ => false,
    }
}

/// Let go of the in-memory copies of everything in `tree` that is on disk,
/// after the caller wrote and synced the pages of [`assign_pages`] (and put
/// the nodes in its cache): each branch forgets its clean children, each
/// leaf the bytes of its clean overflow values. Readers then load them
/// through their page source. Nodes without a location stay. Every node
/// still in memory is walked, clean ones too: a clean node kept alive by a
/// cache must not pin its subtree.
pub fn detach_clean(tree: &Tree) {
    if let Some(root) = tree.root() {
        detach(root);
    }
}

fn detach(node: &Node) {
    match node.body() {
        Body::Branch(b) => {
            for child in b.detach_clean() {
                detach(&child);
            }
        }
        Body::Leaf(l) => {
            for value in l.overflow_values() {
                value.detach();
            }
        }
    }
}
