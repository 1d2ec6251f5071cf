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
use super::page::{decode_node, encode_node_into, encode_overflow_into};
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
    alloc: &'a mut dyn FnMut() -> PageNo,
    taken: HashSet<PageNo>,
    page_size: PageSize,
    items: Vec<Item>,
}

/// Something [`reserve_pages`] gave pages to, in the order to encode it.
#[derive(Debug)]
enum Item {
    Node(Arc<Node>),
    Overflow(Arc<OverflowValue>),
}

/// The pages [`reserve_pages`] gave, to be encoded by [`Plan::encode`].
#[derive(Debug)]
pub struct Plan {
    page_size: PageSize,
    root: Option<Arc<Node>>,
    items: Vec<Item>,
}

/// Give pages to the snapshot's nodes that are not on disk, in post-order
/// (children first, so each parent records its children's checksums), and
/// encode them: [`reserve_pages`], then [`Plan::encode`].
pub fn assign_pages(
    tree: &Tree,
    alloc: &mut dyn FnMut() -> PageNo,
) -> Result<Checkpoint, BtreeError> {
    Ok(reserve_pages(tree, alloc)?.encode())
}

/// Reserve a page for every node (and every page of every overflow value)
/// the snapshot holds only in memory. Pages come from `alloc`, which must
/// return page numbers that no live page uses.
///
/// Run one checkpoint at a time, while no writer copies nodes of this
/// snapshot: a writer that copies a node after its page is reserved
/// reports that page freed, one that copied it before would not. Once
/// this returns, writers may run again while [`Plan::encode`] encodes the
/// pages (the costly part: a checkpoint of 64 MiB of values held writers
/// for 167 ms when it encoded them in this step).
///
/// From the reservation on, the nodes count as on disk: if the caller then
/// fails to write and sync the pages, the store must be poisoned and
/// reopened, as after any failed write.
pub fn reserve_pages(tree: &Tree, alloc: &mut dyn FnMut() -> PageNo) -> Result<Plan, BtreeError> {
    let mut p = Placer {
        alloc,
        taken: HashSet::new(),
        page_size: tree.page_size(),
        items: Vec::new(),
    };
    if let Some(root) = tree.root() {
        p.reserve(root)?;
    }
    Ok(Plan {
        page_size: p.page_size,
        root: tree.root().cloned(),
        items: p.items,
    })
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

    fn reserve(&mut self, node: &Arc<Node>) -> Result<(), BtreeError> {
        if node.page().is_some() {
            return Ok(());
        }
        match node.body() {
            Body::Branch(b) => {
                for i in 0..b.len() {
                    if let Ok(mem) = b.child(i).resolve() {
                        self.reserve(&mem)?;
                    }
                }
            }
            Body::Leaf(l) => {
                for value in l.overflow_values() {
                    if value.location().is_none() && value.pages().is_none() {
                        let pages = (0..self.page_size.overflow_pages(value.len()))
                            .map(|_| self.allocate())
                            .collect::<Result<Box<[PageNo]>, _>>()?;
                        value.reserve_pages(pages);
                        self.items.push(Item::Overflow(Arc::clone(value)));
                    }
                }
            }
        }
        node.reserve_page(self.allocate()?);
        self.items.push(Item::Node(Arc::clone(node)));
        Ok(())
    }
}

/// Where [`Plan::encode_with`] hands each page: its number and bytes.
pub type PageSink<'s, E> = dyn FnMut(PageNo, &[u8]) -> Result<(), E> + 's;

/// What [`Plan::encode_with`] placed, besides the pages it handed out.
#[derive(Debug, Default)]
pub struct Placed {
    /// The root's place (`None`: the tree is empty).
    pub root: Option<Location>,
    /// The nodes just placed, for the caller's page cache once the pages
    /// are durable.
    pub nodes: Vec<(Location, Arc<Node>)>,
    /// Pages handed to the sink.
    pub pages: u64,
}

impl Plan {
    /// Encode every page reserved, in post-order, setting each node's and
    /// each value's location. Writers may run meanwhile. Holds every page
    /// in memory at once: [`Plan::encode_with`] hands them out one by one.
    pub fn encode(self) -> Checkpoint {
        let mut pages = Vec::new();
        let placed = self
            .encode_with(&mut |page, bytes| {
                pages.push((page, bytes.to_vec()));
                Ok::<(), std::convert::Infallible>(())
            })
            .unwrap_or_else(|never| match never {});
        pages.sort_unstable_by_key(|(page, _)| *page);
        Checkpoint {
            root: placed.root,
            pages,
            nodes: placed.nodes,
        }
    }

    /// [`Plan::encode`], handing each page to `sink` as it is encoded
    /// (page number, whole page; in no particular page order) instead of
    /// keeping them: a checkpoint's memory is then one page, not all of
    /// them. Stops at the sink's first error; the store is then poisoned
    /// (some nodes already count as placed).
    pub fn encode_with<E>(self, sink: &mut PageSink<'_, E>) -> Result<Placed, E> {
        let ps = self.page_size;
        let mut buf = vec![0u8; ps.bytes()];
        let mut out = Placed::default();
        for item in &self.items {
            match item {
                Item::Overflow(value) => {
                    out.pages += encode_value(value, ps, &mut buf, sink)?;
                }
                Item::Node(node) => {
                    let page = node.page().expect("a reserved node");
                    let crc = encode_node_into(node, page, &mut buf);
                    let loc = Location { page, crc };
                    // The page must read back as the node it was made from.
                    debug_assert!(
                        decode_node(&buf, ps, loc).is_ok_and(|back| same_content(node, &back)),
                        "page {page} does not decode to the node it encodes"
                    );
                    sink(page, &buf)?;
                    out.pages += 1;
                    node.set_location(loc);
                    out.nodes.push((loc, Arc::clone(node)));
                }
            }
        }
        out.root = self
            .root
            .as_ref()
            .map(|r| r.location().expect("the root is placed"));
        Ok(out)
    }
}

/// Encode a value's chain last page first, so each page can hold the next
/// one's checksum, handing each page to `sink`. Returns the pages encoded.
fn encode_value<E>(
    value: &OverflowValue,
    ps: PageSize,
    buf: &mut [u8],
    sink: &mut PageSink<'_, E>,
) -> Result<u64, E> {
    let bytes = value
        .bytes_in_memory()
        .expect("an overflow value not on disk is in memory");
    let pages = value.pages().expect("a reserved value");
    let chunks = bytes.chunks(ps.overflow_data_bytes());
    assert_eq!(chunks.len(), pages.len());
    let mut next = None;
    for (&page, chunk) in pages.iter().zip(chunks).rev() {
        let crc = encode_overflow_into(page, next, chunk, buf);
        sink(page, buf)?;
        next = Some(Location { page, crc });
    }
    value.set_location(next.expect("a value past the inline limit has pages"));
    Ok(pages.len() as u64)
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

/// How many nodes of `tree` below its root are held in memory by their
/// parents: what a reader of `tree` would reach without the page cache
/// (each such child taking its chunk's lock and a reference count). Zero
/// after [`detach_clean`] once every node has a page.
pub fn children_in_memory(tree: &Tree) -> usize {
    fn below(node: &Node) -> usize {
        let Body::Branch(b) = node.body() else {
            return 0;
        };
        (0..b.len())
            .filter_map(|i| b.child_or_location(i).ok())
            .map(|child| 1 + below(&child))
            .sum()
    }
    tree.root().map_or(0, |root| below(root))
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
