//! Reading a tree: point lookups and forward range scans, across nodes in
//! memory and nodes read through the [`PageSource`].

use std::ops::Bound;
use std::sync::Arc;

use crossbeam_epoch::{self as epoch, Guard};

use super::cache::{NodeRef, PageSource};
use super::leaf::{OverflowValue, ValueRef};
use super::node::{Body, Branch, Node};
use super::{BtreeError, Location};

/// Load the node at `loc`, which its parent says is at `level`.
pub(crate) fn load_at_level(
    src: &dyn PageSource,
    loc: Location,
    level: u8,
) -> Result<Arc<Node>, BtreeError> {
    let node = src.load(loc)?;
    if node.level() != level {
        return Err(BtreeError::Corrupt {
            page: loc.page,
            reason: "a child at another level than its parent implies",
        });
    }
    Ok(node)
}

/// Child `i` of `branch`: the in-memory node, or the page loaded.
pub(crate) fn child_node(
    branch: &Branch,
    i: usize,
    src: &dyn PageSource,
) -> Result<Arc<Node>, BtreeError> {
    if let Some(loc) = branch.child_only_on_disk(i) {
        return load_at_level(src, loc, branch.level() - 1);
    }
    match branch.child(i).resolve() {
        Ok(node) => Ok(node),
        Err(loc) => load_at_level(src, loc, branch.level() - 1),
    }
}

/// The bytes of an overflow value: from memory, else from its chain (whose
/// pages are then remembered, for freeing it later).
pub(crate) fn overflow_bytes(
    value: &OverflowValue,
    src: &dyn PageSource,
) -> Result<Arc<[u8]>, BtreeError> {
    if let Some(bytes) = value.bytes_in_memory() {
        return Ok(bytes);
    }
    // A value leaves memory only once it has a location.
    let first = value
        .location()
        .expect("an overflow value not in memory is on disk");
    let data = src.load_overflow(first, value.len())?;
    value.remember_pages(data.pages.into_boxed_slice());
    Ok(data.bytes)
}

/// One entry of a tree, holding the leaf it was found in (so the key and an
/// inline value are not copied) and the bytes of an overflow value.
#[derive(Clone, Debug)]
pub struct Entry {
    leaf: Arc<Node>,
    index: usize,
    overflow: Option<Arc<[u8]>>,
}

impl Entry {
    fn new(leaf: Arc<Node>, index: usize, src: &dyn PageSource) -> Result<Entry, BtreeError> {
        let overflow = match leaf.as_leaf().expect("a leaf").value(index) {
            ValueRef::Inline(_) => None,
            ValueRef::Overflow(o) => Some(overflow_bytes(o, src)?),
        };
        Ok(Entry {
            leaf,
            index,
            overflow,
        })
    }

    /// The key.
    pub fn key(&self) -> &[u8] {
        self.leaf.as_leaf().expect("a leaf").key(self.index)
    }

    /// The value.
    pub fn value(&self) -> &[u8] {
        if let Some(bytes) = &self.overflow {
            return bytes;
        }
        match self.leaf.as_leaf().expect("a leaf").value(self.index) {
            ValueRef::Inline(v) => v,
            ValueRef::Overflow(_) => unreachable!("overflow bytes are loaded with the entry"),
        }
    }
}

/// Child `i` of `branch` for a reader pinned by `guard`: the in-memory
/// node, or the page (borrowed from the cache on a hit).
fn child_pinned<'g>(
    branch: &Branch,
    i: usize,
    src: &'g dyn PageSource,
    guard: &'g Guard,
) -> Result<NodeRef<'g>, BtreeError> {
    let on_disk = match branch.child_only_on_disk(i) {
        Some(loc) => Err(loc),
        None => branch.child(i).resolve(),
    };
    match on_disk {
        Ok(node) => Ok(NodeRef::Owned(node)),
        Err(loc) => {
            let node = src.load_pinned(loc, guard)?;
            if node.level() != branch.level() - 1 {
                return Err(BtreeError::Corrupt {
                    page: loc.page,
                    reason: "a child at another level than its parent implies",
                });
            }
            Ok(node)
        }
    }
}

/// The leaf and position holding `key`, if present. The descent borrows
/// the nodes the cache holds (pinned for its length) and takes a
/// reference only to the leaf it returns.
pub(crate) fn find(
    root: Option<&Arc<Node>>,
    src: &dyn PageSource,
    key: &[u8],
) -> Result<Option<(Arc<Node>, usize)>, BtreeError> {
    let Some(root) = root else {
        return Ok(None);
    };
    let guard = epoch::pin();
    let mut node = NodeRef::Borrowed(root);
    loop {
        let next = match node.body() {
            Body::Leaf(l) => return Ok(l.search(key).ok().map(|i| (Arc::clone(&node), i))),
            Body::Branch(b) => child_pinned(b, b.child_index(key), src, &guard)?,
        };
        node = next;
    }
}

/// The entry for `key`, if present.
pub(crate) fn get(
    root: Option<&Arc<Node>>,
    src: &dyn PageSource,
    key: &[u8],
) -> Result<Option<Entry>, BtreeError> {
    match find(root, src, key)? {
        Some((leaf, i)) => Entry::new(leaf, i, src).map(Some),
        None => Ok(None),
    }
}

fn own(b: Bound<&[u8]>) -> Bound<Box<[u8]>> {
    b.map(Box::from)
}

/// Whether `key` lies past the end bound.
fn past_end(key: &[u8], end: &Bound<Box<[u8]>>) -> bool {
    match end {
        Bound::Unbounded => false,
        Bound::Included(e) => key > &e[..],
        Bound::Excluded(e) => key >= &e[..],
    }
}

/// The first position in a leaf at or after the start bound.
pub(crate) fn leaf_start(leaf: &super::leaf::Leaf, start: Bound<&[u8]>) -> usize {
    match start {
        Bound::Unbounded => 0,
        Bound::Included(k) => leaf.search(k).unwrap_or_else(|i| i),
        Bound::Excluded(k) => leaf.search(k).map_or_else(|i| i, |i| i + 1),
    }
}

/// The root and start bound of a scan that has not descended yet.
type Seek = (Arc<Node>, Bound<Box<[u8]>>);

/// A forward scan over a key range. It descends lazily: one leaf and the
/// path to it are held at a time (as `Arc`s, so the snapshot it reads
/// stays intact whatever writers do meanwhile). After an error it ends.
///
/// Each leaf it moves to must begin after the last key of the one before:
/// on a damaged file where branches share a subtree, a scan would
/// otherwise read it once per path to it (2^depth times) and return its
/// keys again.
pub struct Range<'a> {
    src: &'a dyn PageSource,
    /// Where to start, until the first call descends.
    seek: Option<Seek>,
    /// The branches on the path to `leaf`, each with the child taken.
    stack: Vec<(Arc<Node>, usize)>,
    leaf: Option<Arc<Node>>,
    /// The last leaf left that held a key.
    behind: Option<Arc<Node>>,
    pos: usize,
    end: Bound<Box<[u8]>>,
    done: bool,
}

impl<'a> Range<'a> {
    pub(crate) fn new(
        root: Option<&Arc<Node>>,
        src: &'a dyn PageSource,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
    ) -> Range<'a> {
        Range {
            src,
            seek: root.map(|r| (Arc::clone(r), own(start))),
            stack: Vec::new(),
            leaf: None,
            behind: None,
            pos: 0,
            end: own(end),
            done: false,
        }
    }

    fn descend(&mut self, root: Arc<Node>, start: Bound<&[u8]>) -> Result<(), BtreeError> {
        let mut node = root;
        loop {
            let (i, child) = match node.body() {
                Body::Leaf(l) => {
                    self.pos = leaf_start(l, start);
                    self.leaf = Some(node);
                    return Ok(());
                }
                Body::Branch(b) => {
                    let i = match start {
                        Bound::Unbounded => 0,
                        Bound::Included(k) | Bound::Excluded(k) => b.child_index(k),
                    };
                    (i, child_node(b, i, self.src)?)
                }
            };
            self.stack.push((node, i));
            node = child;
        }
    }

    /// Move to the first entry of the next leaf; false at the end.
    fn next_leaf(&mut self) -> Result<bool, BtreeError> {
        self.leaf = None;
        while let Some((branch, i)) = self.stack.last_mut() {
            let b = branch.as_branch().expect("a branch");
            if *i + 1 < b.len() {
                *i += 1;
                let child = child_node(b, *i, self.src)?;
                self.descend(child, Bound::Unbounded)?;
                return Ok(true);
            }
            self.stack.pop();
        }
        Ok(false)
    }

    /// The next position in the range (leaf and index), without loading
    /// the value.
    pub(crate) fn next_position(&mut self) -> Result<Option<(Arc<Node>, usize)>, BtreeError> {
        if let Some((root, start)) = self.seek.take() {
            self.descend(root, start.as_ref().map(|k| &k[..]))?;
        }
        loop {
            let Some(leaf) = &self.leaf else {
                return Ok(None);
            };
            let l = leaf.as_leaf().expect("a leaf");
            if self.pos < l.len() {
                if past_end(l.key(self.pos), &self.end) {
                    return Ok(None);
                }
                self.pos += 1;
                return Ok(Some((Arc::clone(leaf), self.pos - 1)));
            }
            if !l.is_empty() {
                self.behind = Some(Arc::clone(leaf));
            }
            if !self.next_leaf()? {
                return Ok(None);
            }
            self.check_order()?;
        }
    }

    /// The leaf just entered begins after the last key left behind.
    fn check_order(&self) -> Result<(), BtreeError> {
        let (Some(behind), Some(leaf)) = (&self.behind, &self.leaf) else {
            return Ok(());
        };
        let b = behind.as_leaf().expect("a leaf");
        let l = leaf.as_leaf().expect("a leaf");
        if l.is_empty() || b.key(b.len() - 1) < l.key(0) {
            return Ok(());
        }
        Err(match leaf.location() {
            Some(loc) => BtreeError::Corrupt {
                page: loc.page,
                reason: "a leaf whose keys do not follow the previous leaf's (a subtree \
                         reached twice?)",
            },
            None => BtreeError::Invariant("a scan met keys out of order in memory".into()),
        })
    }

    fn step(&mut self) -> Result<Option<Entry>, BtreeError> {
        match self.next_position()? {
            Some((leaf, i)) => Entry::new(leaf, i, self.src).map(Some),
            None => Ok(None),
        }
    }
}

impl Iterator for Range<'_> {
    type Item = Result<Entry, BtreeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.step().transpose();
        if !matches!(item, Some(Ok(_))) {
            self.done = true;
            self.stack.clear();
            self.leaf = None;
            self.behind = None;
        }
        item
    }
}
