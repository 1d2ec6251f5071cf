//! In-memory nodes of the persistent tree: [`Node`], branches and their
//! [`Child`] references (leaves are in `leaf.rs`).
//!
//! A node is immutable once shared: writers copy it (see `write.rs`). The
//! separators of a branch live in one byte arena beside plain span
//! records, so that copying a branch is a few `memcpy`s rather than an
//! allocation per key. Each node tracks the bytes it takes in a page
//! ([`Node::encoded_bytes`]), updated on every change, so splits and
//! merges are decided by bytes without encoding.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use super::arena::{key_prefix, warm, Arena, KeySpan};
use super::children::{Child, Children};
use super::leaf::Leaf;
use super::page::{BRANCH_CELL_FIXED_BYTES, PAGE_HEADER_BYTES};
use super::spare;
use super::{Location, PageNo};

/// Lock a mutex that guards a plain `Option` swap: no panic can leave it
/// half-updated, so a poisoned lock is still consistent.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A branch's separators: spans into one arena. Shared (`Arc`) between
/// the versions of a branch until one of them changes a separator: a
/// writer changes a child of its copy of a branch at every insert below
/// it, a separator only when a child splits or merges (about one insert in
/// fifteen, for keys of 16 bytes with values of 100), so most copies of a
/// branch share these 4 KiB instead of copying them.
#[derive(Debug, Default)]
struct Separators {
    spans: Vec<KeySpan>,
    arena: Arena,
}

impl Clone for Separators {
    /// A copy with room for a few more separators (a split below adds
    /// one) without reallocating.
    fn clone(&self) -> Separators {
        let mut spans = spare::take_keys((self.spans.len() + 2).next_power_of_two());
        spans.extend_from_slice(&self.spans);
        Separators {
            spans,
            arena: self
                .arena
                .copy_with_capacity((self.arena.len() + 64).next_power_of_two()),
        }
    }
}

impl Drop for Separators {
    fn drop(&mut self) {
        spare::give_keys(std::mem::take(&mut self.spans));
    }
}

impl Separators {
    fn len(&self) -> usize {
        self.spans.len()
    }

    fn get(&self, i: usize) -> &[u8] {
        self.arena.key(self.spans[i])
    }

    /// How many separators are `<= key`.
    fn rank(&self, key: &[u8]) -> usize {
        let prefix = key_prefix(key);
        warm(&self.spans, |s| s.prefix);
        self.spans
            .partition_point(|s| self.arena.cmp_key(*s, key, prefix).is_le())
    }

    fn insert(&mut self, i: usize, key: &[u8]) {
        let span = self.arena.push_key(key);
        self.spans.insert(i, span);
    }

    fn push(&mut self, key: &[u8]) {
        let span = self.arena.push_key(key);
        self.spans.push(span);
    }

    /// Remove separator `i`; returns its length.
    fn remove(&mut self, i: usize) -> usize {
        let len = self.spans.remove(i).span.len as usize;
        self.arena.release(len);
        self.compact_if_needed();
        len
    }

    /// Remove separators `at..`; returns their total length.
    fn truncate(&mut self, at: usize) -> usize {
        let mut bytes = 0;
        for key in self.spans.drain(at..) {
            bytes += key.span.len as usize;
        }
        self.arena.release(bytes);
        self.compact_if_needed();
        bytes
    }

    fn compact_if_needed(&mut self) {
        if !self.arena.needs_compaction() {
            return;
        }
        let live = self.arena.len() - self.arena.garbage;
        let mut fresh = Arena::with_capacity(live);
        for key in &mut self.spans {
            key.span = fresh.push_span(self.arena.key(*key));
        }
        self.arena = fresh;
    }

    fn heap_bytes(&self) -> usize {
        self.arena.heap_bytes() + self.spans.capacity() * std::mem::size_of::<KeySpan>()
    }
}

/// Children and the separators between them: every key under child `i` is
/// `>= separator(i - 1)` and `< separator(i)`.
#[derive(Clone, Debug)]
pub struct Branch {
    /// Height above the leaves: 1 for a branch of leaves.
    level: u8,
    keys: Arc<Separators>,
    children: Children,
    encoded_bytes: usize,
}

impl Branch {
    /// A branch with one child (the first cell has no separator).
    pub(crate) fn new(level: u8, first: Child) -> Branch {
        assert!(level >= 1, "a branch is above the leaves");
        let mut children = Children::default();
        children.push(first);
        Branch {
            level,
            keys: Arc::default(),
            children,
            encoded_bytes: PAGE_HEADER_BYTES + BRANCH_CELL_FIXED_BYTES,
        }
    }

    /// A copy for a writer to change: the separators and the chunks of
    /// children are shared until the writer changes them.
    pub(crate) fn copy_for_write(&self) -> Branch {
        self.clone()
    }

    fn keys_mut(&mut self) -> &mut Separators {
        Arc::make_mut(&mut self.keys)
    }

    /// Height above the leaves (1: the children are leaves).
    pub fn level(&self) -> u8 {
        self.level
    }

    /// The number of children.
    pub fn len(&self) -> usize {
        self.children.len()
    }

    /// Whether the branch has no children (only ever transiently).
    pub fn is_empty(&self) -> bool {
        self.children.len() == 0
    }

    /// The separator between child `i` and child `i + 1`.
    pub fn separator(&self, i: usize) -> &[u8] {
        self.keys.get(i)
    }

    /// Child `i` (a copy of the reference, taken under the branch's lock:
    /// a checkpoint may be detaching children meanwhile).
    pub fn child(&self, i: usize) -> Child {
        self.children.get(i)
    }

    /// Where child `i` is on disk, if it is.
    pub fn child_location(&self, i: usize) -> Option<Location> {
        self.children.location(i)
    }

    /// Child `i` in memory, or else the place to load it from: known
    /// without a lock or a write when the child is only on disk (the
    /// chunk's lock-free copy of its locations), else as
    /// [`Branch::child`] finds it.
    #[inline]
    pub(crate) fn child_or_location(&self, i: usize) -> Result<Arc<Node>, Location> {
        match self.children.only_on_disk(i) {
            Some(loc) => Err(loc),
            None => self.child(i).resolve(),
        }
    }

    /// Drop the in-memory children that are on disk; returns the children
    /// that were in memory, for the caller to walk.
    pub(crate) fn detach_clean(&self) -> Vec<Arc<Node>> {
        self.children.detach_clean()
    }

    pub(crate) fn child_mut(&mut self, i: usize) -> &mut Child {
        self.children.get_mut(i)
    }

    /// The child whose key range holds `key`.
    pub fn child_index(&self, key: &[u8]) -> usize {
        self.keys.rank(key)
    }

    /// [`Branch::child_index`], with the list of where children are
    /// requested from memory before the search (see
    /// `Children::prefetch`): for a lookup that goes on to the child.
    #[inline]
    pub(crate) fn child_index_to_descend(&self, key: &[u8]) -> usize {
        self.children.prefetch();
        self.keys.rank(key)
    }

    /// The bytes the branch takes in a page, header included.
    pub fn encoded_bytes(&self) -> usize {
        self.encoded_bytes
    }

    /// Append a child after every other, with the separator before it.
    pub(crate) fn push(&mut self, separator: &[u8], child: Child) {
        debug_assert!(self.keys.len() == 0 || self.separator(self.keys.len() - 1) < separator);
        self.encoded_bytes += BRANCH_CELL_FIXED_BYTES + separator.len();
        self.keys_mut().push(separator);
        self.children.push(child);
    }

    /// Insert `child` at position `i + 1`, `separator` between it and
    /// child `i`.
    pub(crate) fn insert_after(&mut self, i: usize, separator: &[u8], child: Child) {
        self.encoded_bytes += BRANCH_CELL_FIXED_BYTES + separator.len();
        self.keys_mut().insert(i, separator);
        self.children.insert(i + 1, child);
    }

    /// Remove child `i` with the separator on its left (on its right for
    /// the first child).
    pub(crate) fn remove_child(&mut self, i: usize) -> Child {
        let child = self.children.remove(i);
        self.encoded_bytes -= BRANCH_CELL_FIXED_BYTES;
        if self.keys.len() > 0 {
            self.encoded_bytes -= self.keys_mut().remove(i.saturating_sub(1));
        }
        child
    }

    /// Move children `at..` into a new branch; returns the separator that
    /// was between child `at - 1` and child `at` (it moves up) and the new
    /// branch.
    pub(crate) fn split_off(&mut self, at: usize) -> (Vec<u8>, Branch) {
        assert!(at >= 1 && at < self.len());
        let promoted = self.separator(at - 1).to_vec();
        let moved = self.children.split_off(at);
        let mut right = Branch {
            level: self.level,
            keys: Arc::default(),
            encoded_bytes: PAGE_HEADER_BYTES + moved.len() * BRANCH_CELL_FIXED_BYTES,
            children: moved,
        };
        let right_keys = right.keys_mut();
        for k in at..self.keys.len() {
            right_keys.push(self.keys.get(k));
        }
        let moved_keys = self.keys.len() - (at - 1);
        let bytes = self.keys_mut().truncate(at - 1);
        self.encoded_bytes -= moved_keys * BRANCH_CELL_FIXED_BYTES + bytes;
        right.encoded_bytes += bytes - promoted.len();
        (promoted, right)
    }

    /// Append every child of `right`, `separator` between our last child
    /// and its first.
    pub(crate) fn append(&mut self, separator: &[u8], right: Branch) {
        assert_eq!(self.level, right.level, "merging branches of two levels");
        assert!(!self.is_empty(), "merging into an empty branch");
        let mut right = right;
        self.encoded_bytes += right.encoded_bytes - PAGE_HEADER_BYTES + separator.len();
        let keys = self.keys_mut();
        keys.push(separator);
        for k in 0..right.keys.len() {
            keys.push(right.keys.get(k));
        }
        self.children.append(std::mem::take(&mut right.children));
    }

    fn heap_bytes(&self) -> usize {
        // Shared separators are counted by every holder, as chunks are.
        self.keys.heap_bytes() + self.children.heap_bytes()
    }
}

/// What a node holds.
// A leaf keeps up to 32 slots inline (`leaf.rs`), so a branch's body is
// far smaller than a leaf's; boxing the leaf would put back the load a
// lookup saves by finding the slots in the node. Branches are about one
// node in a hundred.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum Body {
    /// Keys and their values.
    Leaf(Leaf),
    /// Separator keys and children.
    Branch(Branch),
}

/// A tree node. `location` is set once a checkpoint has given the node a
/// page (or when it was read from one): a node with a location is clean,
/// its page holds exactly this content. A checkpoint first reserves the
/// page (`reserved`, while writers wait), then encodes the node and sets
/// its location (while writers run): a writer that copies the node in
/// between reports the reserved page freed.
#[derive(Debug)]
pub struct Node {
    location: OnceLock<Location>,
    reserved: OnceLock<PageNo>,
    /// The page cache's CLOCK bit: set by readers (only when clear, so a
    /// hit on a node read recently writes nothing), cleared by the hand.
    /// Kept in the node, not beside it, so that a hit's first load is
    /// the node itself (`pagetable.rs`).
    referenced: AtomicBool,
    /// Whether a checkpoint that writes this node keeps it in the page
    /// cache (see [`Node::keep_cached`]).
    keep_cached: AtomicBool,
    body: Body,
}

impl Node {
    /// A node not yet on disk.
    pub(crate) fn new(body: Body) -> Node {
        Node {
            location: OnceLock::new(),
            reserved: OnceLock::new(),
            referenced: AtomicBool::new(false),
            keep_cached: AtomicBool::new(false),
            body,
        }
    }

    /// A node read from `loc`.
    pub(crate) fn loaded(body: Body, loc: Location) -> Node {
        Node {
            location: OnceLock::from(loc),
            reserved: OnceLock::new(),
            referenced: AtomicBool::new(false),
            keep_cached: AtomicBool::new(false),
            body,
        }
    }

    /// The node's page and checksum, if it is on disk.
    pub fn location(&self) -> Option<Location> {
        self.location.get().copied()
    }

    /// Mark the node used (the page cache's CLOCK), writing only if it
    /// was not marked.
    #[inline]
    pub(crate) fn touch(&self) {
        if !self.referenced.load(Ordering::Relaxed) {
            self.referenced.store(true, Ordering::Relaxed);
        }
    }

    /// Whether a checkpoint that writes this node should keep it in the
    /// page cache: a branch always; a leaf if the page cache held the
    /// version it was made from (set by the cache when it takes a node in,
    /// and passed on to copies, merges and the pieces of a split), so
    /// that a checkpoint keeps cached what readers had cached and adds
    /// nothing else. Before, every leaf a checkpoint wrote went into the
    /// cache: a fold of scattered keys writes nearly every leaf, so the
    /// cache filled with leaves no reader had asked for. A 10M-key fill
    /// (w3's shape, no reads) held its whole budget of them.
    pub(crate) fn keep_cached(&self) -> bool {
        matches!(self.body, Body::Branch(_)) || self.keep_cached.load(Ordering::Relaxed)
    }

    /// Note that the page cache holds this node (see [`Node::keep_cached`]).
    pub(crate) fn note_cached(&self) {
        if !self.keep_cached.load(Ordering::Relaxed) {
            self.keep_cached.store(true, Ordering::Relaxed);
        }
    }

    /// Whether the node, or the one it was made from, was in the page
    /// cache (see [`Node::keep_cached`]).
    pub(crate) fn was_cached(&self) -> bool {
        self.keep_cached.load(Ordering::Relaxed)
    }

    /// Mark the node to be kept cached when written, or not (see
    /// [`Node::keep_cached`]).
    pub(crate) fn set_kept(&self, keep: bool) {
        self.keep_cached.store(keep, Ordering::Relaxed);
    }

    /// The same node, to be kept cached when written if `keep` (see
    /// [`Node::keep_cached`]).
    pub(crate) fn kept_if(self, keep: bool) -> Node {
        self.keep_cached.store(keep, Ordering::Relaxed);
        self
    }

    /// Clear the CLOCK mark; returns whether it was set.
    pub(crate) fn take_referenced(&self) -> bool {
        self.referenced.swap(false, Ordering::Relaxed)
    }

    pub(crate) fn set_location(&self, loc: Location) {
        debug_assert!(
            self.reserved.get().is_none_or(|&p| p == loc.page),
            "node placed on a page it did not reserve"
        );
        assert!(
            self.location.set(loc).is_ok(),
            "node placed twice: two checkpoints ran at once"
        );
    }

    /// The node's page: where it is on disk, or the page a checkpoint in
    /// progress reserved for it.
    pub(crate) fn page(&self) -> Option<PageNo> {
        self.location()
            .map(|l| l.page)
            .or_else(|| self.reserved.get().copied())
    }

    /// Reserve `page` for the node (a checkpoint, before encoding it).
    pub(crate) fn reserve_page(&self, page: PageNo) {
        assert!(
            self.reserved.set(page).is_ok(),
            "node reserved twice: two checkpoints ran at once"
        );
    }

    /// Forget the page of a node this writer owns and is about to change;
    /// returns it.
    pub(crate) fn take_page(&mut self) -> Option<PageNo> {
        let placed = self.location.take().map(|l| l.page);
        let reserved = self.reserved.take();
        placed.or(reserved)
    }

    /// The node's contents.
    pub fn body(&self) -> &Body {
        &self.body
    }

    pub(crate) fn body_mut(&mut self) -> &mut Body {
        &mut self.body
    }

    pub(crate) fn into_body(self) -> Body {
        self.body
    }

    /// The leaf, if this is one.
    pub fn as_leaf(&self) -> Option<&Leaf> {
        match &self.body {
            Body::Leaf(l) => Some(l),
            Body::Branch(_) => None,
        }
    }

    /// The branch, if this is one.
    pub fn as_branch(&self) -> Option<&Branch> {
        match &self.body {
            Body::Branch(b) => Some(b),
            Body::Leaf(_) => None,
        }
    }

    /// Height above the leaves: 0 for a leaf.
    pub fn level(&self) -> u8 {
        match &self.body {
            Body::Leaf(_) => 0,
            Body::Branch(b) => b.level,
        }
    }

    /// Entries of a leaf, children of a branch.
    pub fn len(&self) -> usize {
        match &self.body {
            Body::Leaf(l) => l.len(),
            Body::Branch(b) => b.len(),
        }
    }

    /// Whether the node holds nothing (only ever transiently).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes the node takes in a page, header included.
    pub fn encoded_bytes(&self) -> usize {
        match &self.body {
            Body::Leaf(l) => l.encoded_bytes(),
            Body::Branch(b) => b.encoded_bytes,
        }
    }

    /// Approximate memory the node holds (what a cache charges for it).
    pub fn heap_bytes(&self) -> usize {
        std::mem::size_of::<Node>()
            + match &self.body {
                Body::Leaf(l) => l.heap_bytes(),
                Body::Branch(b) => b.heap_bytes(),
            }
    }

    /// A copy for a writer to change: same contents, no location (the copy
    /// is not on disk), room to grow to a page of `page_bytes`.
    pub(crate) fn copy_dirty(&self, page_bytes: usize) -> Node {
        Node::new(match &self.body {
            Body::Leaf(l) => Body::Leaf(l.copy_for_write(page_bytes)),
            Body::Branch(b) => Body::Branch(b.copy_for_write()),
        })
        .kept_if(self.was_cached())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btree::leaf::ValueRef;

    fn leaf_child(k: &[u8]) -> Child {
        let mut l = Leaf::default();
        l.push(k, ValueRef::Inline(b"value"));
        Child::in_memory(Arc::new(Node::new(Body::Leaf(l))))
    }
    #[test]
    fn branch_split_append_and_remove() {
        let mut b = Branch::new(1, leaf_child(b"a"));
        for k in [b"b", b"c", b"d", b"e"] {
            b.push(k, leaf_child(k));
        }
        assert_eq!(b.child_index(b"a"), 0);
        assert_eq!(b.child_index(b"bz"), 1);
        assert_eq!(b.child_index(b"z"), 4);
        let total = b.encoded_bytes();
        let (up, right) = b.split_off(2);
        assert_eq!(up, b"c");
        assert_eq!((b.len(), right.len()), (2, 3));
        assert_eq!(right.separator(0), b"d");
        b.append(&up, right);
        assert_eq!(b.encoded_bytes(), total);
        assert_eq!(b.separator(1), b"c");
        b.remove_child(0);
        assert_eq!(b.separator(0), b"c");
        b.remove_child(3);
        assert_eq!(b.len(), 3);
        assert_eq!(b.separator(1), b"d");
        assert_eq!(
            b.encoded_bytes(),
            PAGE_HEADER_BYTES + 3 * BRANCH_CELL_FIXED_BYTES + 2
        );
    }
}
