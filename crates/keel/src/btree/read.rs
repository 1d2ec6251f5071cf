//! Reading a tree: point lookups and range scans (forward, backward, or
//! both ends at once), across nodes in memory and nodes read through the
//! [`PageSource`].

use std::marker::PhantomData;
use std::ops::Bound;
use std::sync::Arc;

use crossbeam_epoch::{self as epoch, Guard};

use super::cache::{InPlace, LeafLookup, Lent, NodeRef, PageSource};
use super::leaf::{OverflowValue, ValueRef};
use super::node::{Body, Branch, Node};
use super::{BtreeError, Location};
use crate::era::Pin;

/// Whether `node`, read at `loc`, is at the `level` its parent implies.
fn check_level(node: &Node, loc: Location, level: u8) -> Result<(), BtreeError> {
    if node.level() != level {
        return Err(BtreeError::Corrupt {
            page: loc.page,
            reason: "a child at another level than its parent implies",
        });
    }
    Ok(())
}

/// Load the node at `loc`, which its parent says is at `level`.
pub(crate) fn load_at_level(
    src: &dyn PageSource,
    loc: Location,
    level: u8,
) -> Result<Arc<Node>, BtreeError> {
    let node = src.load(loc)?;
    check_level(&node, loc, level)?;
    Ok(node)
}

/// The node at `loc`, which its parent says is at `level`, for a writer
/// that will replace it ([`PageSource::load_to_change`]).
pub(crate) fn load_to_change_at_level(
    src: &dyn PageSource,
    loc: Location,
    level: u8,
) -> Result<Arc<Node>, BtreeError> {
    let node = src.load_to_change(loc)?;
    check_level(&node, loc, level)?;
    Ok(node)
}

/// Child `i` of `branch`: the in-memory node, or the page loaded.
pub(crate) fn child_node(
    branch: &Branch,
    i: usize,
    src: &dyn PageSource,
) -> Result<Arc<Node>, BtreeError> {
    match branch.child_or_location(i) {
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
/// inline value are not copied), or a copy of the entry taken from a page
/// searched in place, and the bytes of an overflow value.
#[derive(Clone, Debug)]
pub struct Entry {
    held: Held,
    overflow: Option<Arc<[u8]>>,
}

#[derive(Clone, Debug)]
enum Held {
    /// The leaf and the entry's index in it.
    Leaf(Arc<Node>, usize),
    /// The key, then an inline value; and the key's length.
    Copied(Arc<[u8]>, usize),
}

impl Entry {
    fn new(leaf: Arc<Node>, index: usize, src: &dyn PageSource) -> Result<Entry, BtreeError> {
        let overflow = match leaf.as_leaf().expect("a leaf").value(index) {
            ValueRef::Inline(_) => None,
            ValueRef::Overflow(o) => Some(overflow_bytes(o, src)?),
        };
        Ok(Entry {
            held: Held::Leaf(leaf, index),
            overflow,
        })
    }

    fn copied(found: InPlace, src: &dyn PageSource) -> Result<Entry, BtreeError> {
        let overflow = match &found.overflow {
            Some(o) => Some(overflow_bytes(o, src)?),
            None => None,
        };
        Ok(Entry {
            held: Held::Copied(found.bytes, found.key_len),
            overflow,
        })
    }

    /// The key.
    pub fn key(&self) -> &[u8] {
        match &self.held {
            Held::Leaf(leaf, i) => leaf.as_leaf().expect("a leaf").key(*i),
            Held::Copied(bytes, key_len) => &bytes[..*key_len],
        }
    }

    /// The value.
    pub fn value(&self) -> &[u8] {
        if let Some(bytes) = &self.overflow {
            return bytes;
        }
        match &self.held {
            Held::Leaf(leaf, i) => match leaf.as_leaf().expect("a leaf").value(*i) {
                ValueRef::Inline(v) => v,
                ValueRef::Overflow(_) => unreachable!("overflow bytes are loaded with the entry"),
            },
            Held::Copied(bytes, key_len) => &bytes[*key_len..],
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
    match branch.child_or_location(i) {
        Ok(node) => Ok(NodeRef::Owned(node)),
        Err(loc) => {
            let node = src.load_pinned(loc, guard)?;
            check_level(&node, loc, branch.level() - 1)?;
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
    let mut node = NodeRef::Borrowed(Lent::of(root));
    loop {
        let next = match node.body() {
            Body::Leaf(l) => return Ok(l.search(key).ok().map(|i| (node.to_arc(), i))),
            Body::Branch(b) => child_pinned(b, b.child_index(key), src, &guard)?,
        };
        node = next;
    }
}

/// Where [`get`]'s descent ended.
enum Lookup<'g> {
    /// In a leaf, at this index.
    Leaf(NodeRef<'g>, usize),
    /// In a page the source searched in place.
    Copied(InPlace),
}

/// The entry for `key`, if present. As [`find`], but a leaf on disk is
/// searched through [`PageSource::search_leaf`] (in place in a mapped
/// page, with nothing decoded).
pub(crate) fn get(
    root: Option<&Arc<Node>>,
    src: &dyn PageSource,
    key: &[u8],
) -> Result<Option<Entry>, BtreeError> {
    let found = {
        let guard = epoch::pin();
        match lookup(root, src, key, &guard)? {
            Some(Lookup::Leaf(leaf, i)) => Some(Ok((leaf.to_arc(), i))),
            Some(Lookup::Copied(found)) => Some(Err(found)),
            None => None,
        }
    };
    // The epoch's pin ends before an overflow value is read.
    match found {
        Some(Ok((leaf, i))) => Entry::new(leaf, i, src).map(Some),
        Some(Err(found)) => Entry::copied(found, src).map(Some),
        None => Ok(None),
    }
}

/// What `Tree::get_pinned` found.
#[derive(Debug)]
pub enum Got<'r> {
    /// An inline value borrowed where it lies, with no reference count
    /// taken: in a leaf the page cache held (kept by the reader era's
    /// pin, `crate::era`) or in the root (kept by its holder for `'r`).
    Borrowed(Borrowed<'r>),
    /// An entry holding its bytes: a leaf in memory (changed since the
    /// last checkpoint) or just read from the file, an entry copied out of
    /// a page searched in place, or an overflow value.
    Entry(Entry),
}

/// An inline value of a cached leaf or of the root, borrowed in place.
#[derive(Clone)]
pub struct Borrowed<'r> {
    ptr: *const u8,
    len: usize,
    _pin: Pin,
    _root: PhantomData<&'r Node>,
}

// SAFETY: `Borrowed` is a shared borrow of immutable bytes (a node is
// never changed once a cache or another tree can reach it: see
// `write.rs`), kept alive by a pin any thread may drop (`Pin` is `Send`
// and `Sync`) or by the root's borrow.
#[allow(unsafe_code)]
unsafe impl Send for Borrowed<'_> {}
// SAFETY: as above; `&Borrowed` only reads the bytes.
#[allow(unsafe_code)]
unsafe impl Sync for Borrowed<'_> {}

impl Borrowed<'_> {
    /// The value's bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` and `len` are those of an inline value's slice in
        // a leaf that `get_pinned` reached either as the root (borrowed
        // for `'r`, which outlives `self`) or in the page cache while this
        // pin was held; a node leaves the cache only through
        // `crate::era::retire` (`pagetable.rs`), which keeps it, and so
        // its bytes, until every pin taken before is dropped. The bytes
        // never change (the node is shared, so copy-on-write copies it).
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts(self.ptr, self.len)
        }
    }
}

impl std::fmt::Debug for Borrowed<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Borrowed").field("len", &self.len).finish()
    }
}

/// The value for `key`, if present: as [`get`], but an inline value in a
/// cached leaf (or in the root) is borrowed in place under a reader-era
/// pin instead of holding a reference to its leaf.
pub(crate) fn get_pinned<'r>(
    root: Option<&'r Arc<Node>>,
    src: &dyn PageSource,
    key: &[u8],
) -> Result<Option<Got<'r>>, BtreeError> {
    // Taken before the epoch's pin: see `crate::era`.
    let pin = Pin::new();
    let found = {
        let guard = epoch::pin();
        match lookup(root, src, key, &guard)? {
            Some(Lookup::Leaf(NodeRef::Borrowed(leaf), i)) => {
                match leaf.as_leaf().expect("a leaf").value(i) {
                    ValueRef::Inline(v) => {
                        return Ok(Some(Got::Borrowed(Borrowed {
                            ptr: v.as_ptr(),
                            len: v.len(),
                            _pin: pin,
                            _root: PhantomData,
                        })))
                    }
                    ValueRef::Overflow(_) => Some(Ok((leaf.to_arc(), i))),
                }
            }
            Some(Lookup::Leaf(NodeRef::Owned(leaf), i)) => Some(Ok((leaf, i))),
            Some(Lookup::Copied(found)) => Some(Err(found)),
            None => None,
        }
    };
    drop(pin);
    let entry = match found {
        Some(Ok((leaf, i))) => Entry::new(leaf, i, src)?,
        Some(Err(found)) => Entry::copied(found, src)?,
        None => return Ok(None),
    };
    Ok(Some(Got::Entry(entry)))
}

fn lookup<'g>(
    root: Option<&'g Arc<Node>>,
    src: &'g dyn PageSource,
    key: &[u8],
    guard: &'g Guard,
) -> Result<Option<Lookup<'g>>, BtreeError> {
    let Some(root) = root else {
        return Ok(None);
    };
    let mut node = NodeRef::Borrowed(Lent::of(root));
    loop {
        let next = match node.body() {
            Body::Leaf(l) => return Ok(l.search(key).ok().map(|i| Lookup::Leaf(node, i))),
            Body::Branch(b) if b.level() == 1 => {
                let i = b.child_index_to_descend(key);
                match b.child_or_location(i) {
                    Ok(leaf) => NodeRef::Owned(leaf),
                    Err(loc) => match src.search_leaf(loc, key, guard)? {
                        LeafLookup::Node(leaf) => {
                            check_level(&leaf, loc, 0)?;
                            leaf
                        }
                        LeafLookup::Searched(found) => return Ok(found.map(Lookup::Copied)),
                    },
                }
            }
            Body::Branch(b) => child_pinned(b, b.child_index_to_descend(key), src, guard)?,
        };
        node = next;
    }
}

fn own(b: Bound<&[u8]>) -> Bound<Arc<[u8]>> {
    b.map(Arc::from)
}

/// Whether `key` lies past the end bound.
fn past_end(key: &[u8], end: &Bound<Arc<[u8]>>) -> bool {
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

/// Whether `key` lies before the start bound.
fn before_start(key: &[u8], start: &Bound<Arc<[u8]>>) -> bool {
    match start {
        Bound::Unbounded => false,
        Bound::Included(s) => key < &s[..],
        Bound::Excluded(s) => key <= &s[..],
    }
}

/// The position in a leaf after the last key at or before the end bound.
fn leaf_end(leaf: &super::leaf::Leaf, end: Bound<&[u8]>) -> usize {
    match end {
        Bound::Unbounded => leaf.len(),
        Bound::Included(k) => leaf.search(k).map_or_else(|i| i, |i| i + 1),
        Bound::Excluded(k) => leaf.search(k).unwrap_or_else(|i| i),
    }
}

/// The root and start bound of a scan that has not descended yet.
type Seek = (Arc<Node>, Bound<Arc<[u8]>>);

/// A scan over a key range, in key order (`next`) or from its end
/// (`next_back`), or from both ends at once: the two meet in the middle,
/// and no entry comes out twice. It descends lazily: one leaf and the
/// path to it are held at a time per end (as `Arc`s, so the snapshot it
/// reads stays intact whatever writers do meanwhile). After an error it
/// ends.
///
/// Each leaf it moves to must begin after the last key of the one before
/// (going backward: end before the first key of the one after): on a
/// damaged file where branches share a subtree, a scan would otherwise
/// read it once per path to it (2^depth times) and return its keys again.
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
    /// Whether `next` returned an entry: then the last one is `leaf`'s
    /// at `pos - 1`, where the backward end stops.
    front_moved: bool,
    start: Bound<Arc<[u8]>>,
    end: Bound<Arc<[u8]>>,
    back: Back,
    done: bool,
}

/// The backward end of a [`Range`]: a path and a leaf of its own.
struct Back {
    /// The root, until the first `next_back` descends (from the end).
    seek: Option<Arc<Node>>,
    stack: Vec<(Arc<Node>, usize)>,
    leaf: Option<Arc<Node>>,
    /// The leaf's entries below `pos` are still ahead (the next one is at
    /// `pos - 1`); once one was returned, it is the one at `pos`.
    pos: usize,
    /// The last leaf left that held a key.
    ahead: Option<Arc<Node>>,
    /// Whether `next_back` returned an entry (see `pos`).
    moved: bool,
}

impl<'a> Range<'a> {
    pub(crate) fn new(
        root: Option<&Arc<Node>>,
        src: &'a dyn PageSource,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
    ) -> Range<'a> {
        let (start, end) = (own(start), own(end));
        Range {
            src,
            seek: root.map(|r| (Arc::clone(r), start.clone())),
            stack: Vec::new(),
            leaf: None,
            behind: None,
            pos: 0,
            front_moved: false,
            start,
            end,
            back: Back {
                seek: root.cloned(),
                stack: Vec::new(),
                leaf: None,
                pos: 0,
                ahead: None,
                moved: false,
            },
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
                let key = l.key(self.pos);
                if past_end(key, &self.end) || self.back_mark().is_some_and(|b| key >= b) {
                    return Ok(None);
                }
                self.pos += 1;
                self.front_moved = true;
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

    /// The last key `next` returned, if any. (Between calls the front
    /// stands just after it in its leaf: a call that moves on either
    /// returns another entry or ends the scan.)
    fn front_mark(&self) -> Option<&[u8]> {
        let leaf = self
            .leaf
            .as_ref()
            .filter(|_| self.front_moved && self.pos > 0)?;
        Some(leaf.as_leaf().expect("a leaf").key(self.pos - 1))
    }

    /// The last key `next_back` returned, if any (as `front_mark`).
    fn back_mark(&self) -> Option<&[u8]> {
        let leaf = self.back.leaf.as_ref().filter(|_| self.back.moved)?;
        let l = leaf.as_leaf().expect("a leaf");
        (self.back.pos < l.len()).then(|| l.key(self.back.pos))
    }

    /// Descend from `root` to the leaf holding `end`'s last key at or
    /// before it.
    fn descend_back(&mut self, root: Arc<Node>) -> Result<(), BtreeError> {
        let mut node = root;
        loop {
            let end = self.end.as_ref().map(|k| &k[..]);
            let (i, child) = match node.body() {
                Body::Leaf(l) => {
                    self.back.pos = leaf_end(l, end);
                    self.back.leaf = Some(node);
                    return Ok(());
                }
                Body::Branch(b) => {
                    let i = match end {
                        Bound::Unbounded => b.len() - 1,
                        Bound::Included(k) | Bound::Excluded(k) => b.child_index(k),
                    };
                    (i, child_node(b, i, self.src)?)
                }
            };
            self.back.stack.push((node, i));
            node = child;
        }
    }

    /// Move to the end of the previous leaf; false at the tree's start.
    fn prev_leaf(&mut self) -> Result<bool, BtreeError> {
        self.back.leaf = None;
        while let Some((branch, i)) = self.back.stack.last_mut() {
            if *i > 0 {
                *i -= 1;
                let b = branch.as_branch().expect("a branch");
                let mut node = child_node(b, *i, self.src)?;
                // Down the rightmost path.
                loop {
                    let child = match node.body() {
                        Body::Leaf(l) => {
                            self.back.pos = l.len();
                            self.back.leaf = Some(node);
                            return Ok(true);
                        }
                        Body::Branch(b) => child_node(b, b.len() - 1, self.src)?,
                    };
                    let last = node.as_branch().expect("a branch").len() - 1;
                    self.back.stack.push((node, last));
                    node = child;
                }
            }
            self.back.stack.pop();
        }
        Ok(false)
    }

    /// The previous position in the range, from its end (leaf and index),
    /// without loading the value.
    pub(crate) fn prev_position(&mut self) -> Result<Option<(Arc<Node>, usize)>, BtreeError> {
        if let Some(root) = self.back.seek.take() {
            self.descend_back(root)?;
        }
        loop {
            let Some(leaf) = self.back.leaf.clone() else {
                return Ok(None);
            };
            let l = leaf.as_leaf().expect("a leaf");
            if self.back.pos > 0 {
                let key = l.key(self.back.pos - 1);
                if before_start(key, &self.start) || self.front_mark().is_some_and(|f| key <= f) {
                    return Ok(None);
                }
                self.back.pos -= 1;
                self.back.moved = true;
                return Ok(Some((leaf, self.back.pos)));
            }
            if !l.is_empty() {
                self.back.ahead = Some(Arc::clone(&leaf));
            }
            if !self.prev_leaf()? {
                return Ok(None);
            }
            self.check_order_back()?;
        }
    }

    /// The leaf just entered going backward ends before the first key of
    /// the one left behind it.
    fn check_order_back(&self) -> Result<(), BtreeError> {
        let (Some(ahead), Some(leaf)) = (&self.back.ahead, &self.back.leaf) else {
            return Ok(());
        };
        let a = ahead.as_leaf().expect("a leaf");
        let l = leaf.as_leaf().expect("a leaf");
        if l.is_empty() || l.key(l.len() - 1) < a.key(0) {
            return Ok(());
        }
        Err(match leaf.location() {
            Some(loc) => BtreeError::Corrupt {
                page: loc.page,
                reason: "a leaf whose keys do not precede the next leaf's (a subtree reached \
                         twice?)",
            },
            None => BtreeError::Invariant("a backward scan met keys out of order in memory".into()),
        })
    }

    fn step_back(&mut self) -> Result<Option<Entry>, BtreeError> {
        match self.prev_position()? {
            Some((leaf, i)) => Entry::new(leaf, i, self.src).map(Some),
            None => Ok(None),
        }
    }

    /// End the scan, at both ends.
    fn finish(&mut self) {
        self.done = true;
        self.stack.clear();
        self.leaf = None;
        self.behind = None;
        self.back.stack.clear();
        self.back.leaf = None;
        self.back.ahead = None;
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
            self.finish();
        }
        item
    }
}

/// From the range's end: the entries in descending key order. Mixed with
/// `next`, each entry comes out once: the two ends stop where they meet.
impl DoubleEndedIterator for Range<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.step_back().transpose();
        if !matches!(item, Some(Ok(_))) {
            self.finish();
        }
        item
    }
}
