//! In-memory nodes of the persistent tree.
//!
//! A node is immutable once shared: writers copy it (see `tree.rs`). Keys
//! and inline values of a node live in one byte arena, so that copying a
//! node for copy-on-write is two `memcpy`s and one pass over small slot
//! records rather than an allocation per key and value. Each node tracks
//! the bytes it takes in a page ([`Node::encoded_bytes`]), updated on every
//! change, so splits and merges are decided by bytes without encoding.

use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use super::children::Children;
use super::page::{
    BRANCH_CELL_FIXED_BYTES, LEAF_INLINE_CELL_FIXED_BYTES, LEAF_OVERFLOW_CELL_FIXED_BYTES,
    PAGE_HEADER_BYTES,
};
use super::{Location, PageNo};

/// Lock a mutex that guards a plain `Option` swap: no panic can leave it
/// half-updated, so a poisoned lock is still consistent.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A byte range inside an [`Arena`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Span {
    off: u32,
    len: u32,
}

/// A key in an [`Arena`], with its first 8 bytes (zero-padded, big-endian)
/// kept beside it: a binary search then compares most keys without
/// touching the arena (a cache miss each, measured as a fifth of an
/// insert).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct KeySpan {
    span: Span,
    prefix: u64,
}

fn key_prefix(k: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = k.len().min(8);
    b[..n].copy_from_slice(&k[..n]);
    u64::from_be_bytes(b)
}

/// The key and inline value bytes of one node. Removing bytes only counts
/// them as garbage; the arena is rebuilt when garbage dominates.
#[derive(Clone, Debug, Default)]
pub(crate) struct Arena {
    bytes: Vec<u8>,
    garbage: usize,
}

impl Arena {
    fn with_capacity(bytes: usize) -> Arena {
        Arena {
            bytes: Vec::with_capacity(bytes),
            garbage: 0,
        }
    }

    fn push(&mut self, b: &[u8]) -> Span {
        let off = self.bytes.len();
        self.bytes.extend_from_slice(b);
        // A node's arena stays below a few pages (see `needs_compaction`),
        // far below 4 GiB.
        Span {
            off: off as u32,
            len: b.len() as u32,
        }
    }

    fn get(&self, s: Span) -> &[u8] {
        &self.bytes[s.off as usize..(s.off + s.len) as usize]
    }

    fn push_key(&mut self, k: &[u8]) -> KeySpan {
        KeySpan {
            span: self.push(k),
            prefix: key_prefix(k),
        }
    }

    fn key(&self, k: KeySpan) -> &[u8] {
        self.get(k.span)
    }

    /// Compare a stored key with `key`, whose prefix is `prefix`. Differing
    /// prefixes order the keys as the bytes do: they differ at a byte both
    /// keys have, or one key ends there and the other has a nonzero byte.
    fn cmp_key(&self, k: KeySpan, key: &[u8], prefix: u64) -> std::cmp::Ordering {
        k.prefix
            .cmp(&prefix)
            .then_with(|| self.get(k.span).cmp(key))
    }

    fn release(&mut self, s: Span) {
        self.garbage += s.len as usize;
    }

    fn needs_compaction(&self) -> bool {
        self.garbage > 256 && self.garbage * 2 > self.bytes.len()
    }

    fn heap_bytes(&self) -> usize {
        self.bytes.capacity()
    }
}

/// A value stored in a chain of overflow pages. Shared (`Arc`) between the
/// versions of a leaf that hold it, so it is written once.
pub struct OverflowValue {
    len: u64,
    /// The chain's first page and that page's checksum, once on disk.
    location: OnceLock<Location>,
    /// Every page of the chain, once known (assigned by a checkpoint, or
    /// read when the chain was loaded).
    pages: OnceLock<Box<[PageNo]>>,
    /// The bytes, while in memory: always for a value not yet on disk.
    mem: Mutex<Option<Arc<[u8]>>>,
}

impl fmt::Debug for OverflowValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OverflowValue")
            .field("len", &self.len)
            .field("location", &self.location.get())
            .finish_non_exhaustive()
    }
}

impl OverflowValue {
    pub(crate) fn in_memory(bytes: &[u8]) -> OverflowValue {
        OverflowValue {
            len: bytes.len() as u64,
            location: OnceLock::new(),
            pages: OnceLock::new(),
            mem: Mutex::new(Some(Arc::from(bytes))),
        }
    }

    pub(crate) fn on_disk(first: Location, len: u64) -> OverflowValue {
        OverflowValue {
            len,
            location: OnceLock::from(first),
            pages: OnceLock::new(),
            mem: Mutex::new(None),
        }
    }

    /// The value's length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the value is empty (never: empty values are inline).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The chain's first page and its checksum, once on disk.
    pub fn location(&self) -> Option<Location> {
        self.location.get().copied()
    }

    /// Every page of the chain, if known.
    pub fn pages(&self) -> Option<&[PageNo]> {
        self.pages.get().map(|p| &p[..])
    }

    pub(crate) fn set_location(&self, first: Location, pages: Box<[PageNo]>) {
        assert!(
            self.location.set(first).is_ok(),
            "overflow value placed twice: two checkpoints ran at once"
        );
        let _ = self.pages.set(pages);
    }

    pub(crate) fn remember_pages(&self, pages: Box<[PageNo]>) {
        let _ = self.pages.set(pages);
    }

    pub(crate) fn bytes_in_memory(&self) -> Option<Arc<[u8]>> {
        lock(&self.mem).clone()
    }

    /// Drop the in-memory bytes of a value that is on disk.
    pub(crate) fn detach(&self) {
        if self.location.get().is_some() {
            *lock(&self.mem) = None;
        }
    }
}

/// A leaf value as stored in a node.
#[derive(Clone, Debug)]
enum SlotValue {
    Inline(Span),
    Overflow(Arc<OverflowValue>),
}

#[derive(Clone, Debug)]
struct Slot {
    key: KeySpan,
    value: SlotValue,
}

/// A value as a leaf holds it: the bytes, or a reference to an overflow
/// chain.
#[derive(Clone, Copy, Debug)]
pub enum ValueRef<'a> {
    Inline(&'a [u8]),
    Overflow(&'a Arc<OverflowValue>),
}

impl ValueRef<'_> {
    /// The bytes this value takes in its leaf cell, after the key.
    fn cell_bytes(self, key_len: usize) -> usize {
        match self {
            ValueRef::Inline(v) => LEAF_INLINE_CELL_FIXED_BYTES + key_len + v.len(),
            ValueRef::Overflow(_) => LEAF_OVERFLOW_CELL_FIXED_BYTES + key_len,
        }
    }
}

/// Entries sorted by key.
#[derive(Clone, Debug)]
pub struct Leaf {
    slots: Vec<Slot>,
    arena: Arena,
    encoded_bytes: usize,
}

impl Default for Leaf {
    fn default() -> Self {
        Leaf {
            slots: Vec::new(),
            arena: Arena::default(),
            encoded_bytes: PAGE_HEADER_BYTES,
        }
    }
}

impl Leaf {
    /// An empty leaf with room for `arena_bytes` of keys and values.
    pub(crate) fn with_capacity(entries: usize, arena_bytes: usize) -> Leaf {
        Leaf {
            slots: Vec::with_capacity(entries),
            arena: Arena::with_capacity(arena_bytes),
            encoded_bytes: PAGE_HEADER_BYTES,
        }
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the leaf has no entries.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The key of entry `i`.
    pub fn key(&self, i: usize) -> &[u8] {
        self.arena.key(self.slots[i].key)
    }

    /// The value of entry `i`.
    pub fn value(&self, i: usize) -> ValueRef<'_> {
        match &self.slots[i].value {
            SlotValue::Inline(s) => ValueRef::Inline(self.arena.get(*s)),
            SlotValue::Overflow(o) => ValueRef::Overflow(o),
        }
    }

    /// Binary search: `Ok(i)` if entry `i` has `key`, else `Err(i)` where
    /// it would go.
    pub fn search(&self, key: &[u8]) -> Result<usize, usize> {
        let prefix = key_prefix(key);
        self.slots
            .binary_search_by(|s| self.arena.cmp_key(s.key, key, prefix))
    }

    /// The bytes entry `i` takes in a page.
    pub(crate) fn cell_bytes(&self, i: usize) -> usize {
        let key_len = self.slots[i].key.span.len as usize;
        self.value(i).cell_bytes(key_len)
    }

    /// The bytes the leaf takes in a page, header included.
    pub fn encoded_bytes(&self) -> usize {
        self.encoded_bytes
    }

    fn make_slot(&mut self, key: &[u8], value: ValueRef<'_>) -> Slot {
        let key = self.arena.push_key(key);
        let value = match value {
            ValueRef::Inline(v) => SlotValue::Inline(self.arena.push(v)),
            ValueRef::Overflow(o) => SlotValue::Overflow(Arc::clone(o)),
        };
        Slot { key, value }
    }

    /// Append an entry whose key sorts after every key in the leaf.
    pub(crate) fn push(&mut self, key: &[u8], value: ValueRef<'_>) {
        debug_assert!(self.is_empty() || self.key(self.len() - 1) < key);
        self.encoded_bytes += value.cell_bytes(key.len());
        let slot = self.make_slot(key, value);
        self.slots.push(slot);
    }

    /// Insert an entry at position `i` (from [`Leaf::search`]).
    pub(crate) fn insert(&mut self, i: usize, key: &[u8], value: ValueRef<'_>) {
        self.encoded_bytes += value.cell_bytes(key.len());
        let slot = self.make_slot(key, value);
        self.slots.insert(i, slot);
    }

    /// Replace the value of entry `i`; returns the old value if it was an
    /// overflow chain.
    pub(crate) fn set_value(
        &mut self,
        i: usize,
        value: ValueRef<'_>,
    ) -> Option<Arc<OverflowValue>> {
        let key_len = self.slots[i].key.span.len as usize;
        self.encoded_bytes -= self.cell_bytes(i);
        self.encoded_bytes += value.cell_bytes(key_len);
        let new = match value {
            ValueRef::Inline(v) => SlotValue::Inline(self.arena.push(v)),
            ValueRef::Overflow(o) => SlotValue::Overflow(Arc::clone(o)),
        };
        let old = std::mem::replace(&mut self.slots[i].value, new);
        let freed = self.release_value(old);
        self.compact_if_needed();
        freed
    }

    fn release_value(&mut self, v: SlotValue) -> Option<Arc<OverflowValue>> {
        match v {
            SlotValue::Inline(s) => {
                self.arena.release(s);
                None
            }
            SlotValue::Overflow(o) => Some(o),
        }
    }

    /// Remove the entries in `range`; returns their overflow values.
    pub(crate) fn remove_range(&mut self, range: Range<usize>) -> Vec<Arc<OverflowValue>> {
        let mut overflow = Vec::new();
        for slot in self.slots.drain(range) {
            let key_len = slot.key.span.len as usize;
            self.arena.release(slot.key.span);
            self.encoded_bytes -= match slot.value {
                SlotValue::Inline(s) => {
                    self.arena.release(s);
                    LEAF_INLINE_CELL_FIXED_BYTES + key_len + s.len as usize
                }
                SlotValue::Overflow(o) => {
                    overflow.push(o);
                    LEAF_OVERFLOW_CELL_FIXED_BYTES + key_len
                }
            };
        }
        self.compact_if_needed();
        overflow
    }

    /// Move entries `at..` into a new leaf.
    pub(crate) fn split_off(&mut self, at: usize) -> Leaf {
        let mut right = Leaf::with_capacity(self.len() - at, self.arena.bytes.len() / 2);
        for i in at..self.len() {
            right.push(self.key(i), self.value(i));
        }
        self.remove_range(at..self.len());
        right
    }

    /// Give back the spare capacity (a leaf decoded from a page, whose
    /// arena was sized for a full page).
    pub(crate) fn shrink_to_fit(&mut self) {
        self.arena.bytes.shrink_to_fit();
        self.slots.shrink_to_fit();
    }

    /// Append every entry of `right`, whose keys all sort after ours.
    pub(crate) fn append(&mut self, right: &Leaf) {
        for i in 0..right.len() {
            self.push(right.key(i), right.value(i));
        }
    }

    fn compact_if_needed(&mut self) {
        if !self.arena.needs_compaction() {
            return;
        }
        let live = self.arena.bytes.len() - self.arena.garbage;
        let mut fresh = Arena::with_capacity(live);
        for slot in &mut self.slots {
            slot.key.span = fresh.push(self.arena.key(slot.key));
            if let SlotValue::Inline(s) = &mut slot.value {
                *s = fresh.push(self.arena.get(*s));
            }
        }
        self.arena = fresh;
    }

    /// Every overflow value of the leaf.
    pub(crate) fn overflow_values(&self) -> impl Iterator<Item = &Arc<OverflowValue>> {
        self.slots.iter().filter_map(|s| match &s.value {
            SlotValue::Overflow(o) => Some(o),
            SlotValue::Inline(_) => None,
        })
    }

    fn heap_bytes(&self) -> usize {
        self.arena.heap_bytes()
            + self.slots.capacity() * std::mem::size_of::<Slot>()
            + self.overflow_values().count() * std::mem::size_of::<OverflowValue>()
    }
}

/// A branch's reference to a child: where the child is on disk, and the
/// child itself while it is in memory. A reader takes the in-memory child
/// if present, else loads the page; a node that was written by a
/// checkpoint loses its in-memory children (`detach_clean`), which is why
/// both fields change through a shared reference.
pub struct Child {
    /// The child's page and checksum, when known. Never set while `mem`
    /// holds a node that is not on disk.
    loc: OnceLock<Location>,
    mem: Mutex<Option<Arc<Node>>>,
}

impl fmt::Debug for Child {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Child")
            .field("loc", &self.location())
            .field("in_memory", &lock(&self.mem).is_some())
            .finish()
    }
}

impl Clone for Child {
    fn clone(&self) -> Child {
        Child {
            loc: self.loc.clone(),
            mem: Mutex::new(lock(&self.mem).clone()),
        }
    }
}

impl Child {
    /// A child known only by its place on disk.
    pub(crate) fn on_disk(loc: Location) -> Child {
        Child {
            loc: OnceLock::from(loc),
            mem: Mutex::new(None),
        }
    }

    /// A child held in memory.
    pub(crate) fn in_memory(node: Arc<Node>) -> Child {
        let loc = match node.location() {
            Some(l) => OnceLock::from(l),
            None => OnceLock::new(),
        };
        Child {
            loc,
            mem: Mutex::new(Some(node)),
        }
    }

    /// Where the child is on disk: the recorded place, or that of the
    /// in-memory node once a checkpoint gave it one.
    pub fn location(&self) -> Option<Location> {
        if let Some(l) = self.loc.get() {
            return Some(*l);
        }
        lock(&self.mem).as_ref().and_then(|n| n.location())
    }

    /// The in-memory node, or else the place to load it from.
    pub(crate) fn resolve(&self) -> Result<Arc<Node>, Location> {
        let mem = lock(&self.mem);
        match &*mem {
            Some(n) => Ok(Arc::clone(n)),
            None => Err(*self.loc.get().expect("a child is in memory or on disk")),
        }
    }

    /// Both fields, for a writer that owns this child exclusively.
    pub(crate) fn parts_mut(&mut self) -> (&mut OnceLock<Location>, &mut Option<Arc<Node>>) {
        (
            &mut self.loc,
            self.mem.get_mut().unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// Take the child apart (a writer dropping or merging a child it owns).
    pub(crate) fn into_parts(self) -> (Option<Location>, Option<Arc<Node>>) {
        let mem = self
            .mem
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        (self.loc.into_inner(), mem)
    }

    /// Record the place a checkpoint gave the in-memory child.
    pub(crate) fn record_location(&self, loc: Location) {
        let now = *self.loc.get_or_init(|| loc);
        assert_eq!(now, loc, "child recorded at two places");
    }

    /// Drop the in-memory child if it is on disk (recording its place).
    /// Returns the in-memory child either way, for the caller to walk: a
    /// clean child may still hold its own children in memory (and stay
    /// alive in a page cache).
    pub(crate) fn detach_if_clean(&self) -> Option<Arc<Node>> {
        let mut mem = lock(&self.mem);
        let node = mem.as_ref()?;
        if let Some(l) = node.location() {
            self.record_location(l);
            return mem.take();
        }
        Some(Arc::clone(node))
    }
}

/// Children and the separators between them: every key under child `i` is
/// `>= separator(i - 1)` and `< separator(i)`.
#[derive(Clone, Debug)]
pub struct Branch {
    /// Height above the leaves: 1 for a branch of leaves.
    level: u8,
    keys: Vec<KeySpan>,
    arena: Arena,
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
            keys: Vec::new(),
            arena: Arena::default(),
            children,
            encoded_bytes: PAGE_HEADER_BYTES + BRANCH_CELL_FIXED_BYTES,
        }
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
        self.arena.key(self.keys[i])
    }

    /// Child `i`.
    pub fn child(&self, i: usize) -> &Child {
        self.children.get(i)
    }

    pub(crate) fn child_mut(&mut self, i: usize) -> &mut Child {
        self.children.get_mut(i)
    }

    /// The child whose key range holds `key`.
    pub fn child_index(&self, key: &[u8]) -> usize {
        let prefix = key_prefix(key);
        self.keys
            .partition_point(|s| self.arena.cmp_key(*s, key, prefix).is_le())
    }

    /// The bytes the branch takes in a page, header included.
    pub fn encoded_bytes(&self) -> usize {
        self.encoded_bytes
    }

    /// Append a child after every other, with the separator before it.
    pub(crate) fn push(&mut self, separator: &[u8], child: Child) {
        debug_assert!(self.keys.is_empty() || self.separator(self.keys.len() - 1) < separator);
        self.encoded_bytes += BRANCH_CELL_FIXED_BYTES + separator.len();
        let span = self.arena.push_key(separator);
        self.keys.push(span);
        self.children.push(child);
    }

    /// Insert `child` at position `i + 1`, `separator` between it and
    /// child `i`.
    pub(crate) fn insert_after(&mut self, i: usize, separator: &[u8], child: Child) {
        self.encoded_bytes += BRANCH_CELL_FIXED_BYTES + separator.len();
        let span = self.arena.push_key(separator);
        self.keys.insert(i, span);
        self.children.insert(i + 1, child);
    }

    /// Remove child `i` with the separator on its left (on its right for
    /// the first child).
    pub(crate) fn remove_child(&mut self, i: usize) -> Child {
        let child = self.children.remove(i);
        self.encoded_bytes -= BRANCH_CELL_FIXED_BYTES;
        if !self.keys.is_empty() {
            let key = self.keys.remove(i.saturating_sub(1));
            self.encoded_bytes -= key.span.len as usize;
            self.arena.release(key.span);
        }
        self.compact_if_needed();
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
            keys: Vec::with_capacity(self.keys.len() - at),
            arena: Arena::default(),
            encoded_bytes: PAGE_HEADER_BYTES + moved.len() * BRANCH_CELL_FIXED_BYTES,
            children: moved,
        };
        for k in at..self.keys.len() {
            let key = self.arena.key(self.keys[k]);
            right.encoded_bytes += key.len();
            let span = right.arena.push_key(key);
            right.keys.push(span);
        }
        for key in self.keys.drain(at - 1..) {
            self.encoded_bytes -= BRANCH_CELL_FIXED_BYTES + key.span.len as usize;
            self.arena.release(key.span);
        }
        self.compact_if_needed();
        (promoted, right)
    }

    /// Append every child of `right`, `separator` between our last child
    /// and its first.
    pub(crate) fn append(&mut self, separator: &[u8], right: Branch) {
        assert_eq!(self.level, right.level, "merging branches of two levels");
        assert!(!self.is_empty(), "merging into an empty branch");
        let Branch {
            keys,
            arena,
            children,
            encoded_bytes,
            ..
        } = right;
        self.encoded_bytes += encoded_bytes - PAGE_HEADER_BYTES + separator.len();
        let span = self.arena.push_key(separator);
        self.keys.push(span);
        for k in keys {
            let span = self.arena.push_key(arena.key(k));
            self.keys.push(span);
        }
        self.children.append(children);
    }

    fn compact_if_needed(&mut self) {
        if !self.arena.needs_compaction() {
            return;
        }
        let live = self.arena.bytes.len() - self.arena.garbage;
        let mut fresh = Arena::with_capacity(live);
        for key in &mut self.keys {
            key.span = fresh.push(self.arena.key(*key));
        }
        self.arena = fresh;
    }

    fn heap_bytes(&self) -> usize {
        self.arena.heap_bytes()
            + self.keys.capacity() * std::mem::size_of::<KeySpan>()
            + self.children.heap_bytes()
    }
}

/// What a node holds.
#[derive(Clone, Debug)]
pub enum Body {
    Leaf(Leaf),
    Branch(Branch),
}

/// A tree node. `location` is set once a checkpoint has given the node a
/// page (or when it was read from one): a node with a location is clean,
/// its page holds exactly this content.
#[derive(Debug)]
pub struct Node {
    location: OnceLock<Location>,
    body: Body,
}

impl Node {
    /// A node not yet on disk.
    pub(crate) fn new(body: Body) -> Node {
        Node {
            location: OnceLock::new(),
            body,
        }
    }

    /// A node read from `loc`.
    pub(crate) fn loaded(body: Body, loc: Location) -> Node {
        Node {
            location: OnceLock::from(loc),
            body,
        }
    }

    /// The node's page and checksum, if it is on disk.
    pub fn location(&self) -> Option<Location> {
        self.location.get().copied()
    }

    pub(crate) fn set_location(&self, loc: Location) {
        assert!(
            self.location.set(loc).is_ok(),
            "node placed twice: two checkpoints ran at once"
        );
    }

    /// Forget the location of a node this writer owns and is about to
    /// change; returns it.
    pub(crate) fn take_location(&mut self) -> Option<Location> {
        self.location.take()
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
            Body::Leaf(l) => l.encoded_bytes,
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
    /// is not on disk).
    pub(crate) fn copy_dirty(&self) -> Node {
        Node::new(self.body.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf_of(keys: &[&[u8]]) -> Leaf {
        let mut l = Leaf::default();
        for k in keys {
            l.push(k, ValueRef::Inline(b"value"));
        }
        l
    }

    #[test]
    fn leaf_tracks_encoded_bytes_and_compacts() {
        let mut l = Leaf::default();
        for i in 0..200u32 {
            let k = i.to_be_bytes();
            let at = l.search(&k).unwrap_err();
            l.insert(at, &k, ValueRef::Inline(&[i as u8; 10]));
        }
        assert_eq!(
            l.encoded_bytes(),
            PAGE_HEADER_BYTES + 200 * (LEAF_INLINE_CELL_FIXED_BYTES + 4 + 10)
        );
        for i in 0..190u32 {
            let at = l.search(&i.to_be_bytes()).unwrap();
            l.remove_range(at..at + 1);
        }
        assert_eq!(l.len(), 10);
        assert!(l.arena.bytes.len() < 200 * 14, "arena compacted");
        assert_eq!(l.key(0), 190u32.to_be_bytes());
        assert_eq!(
            l.encoded_bytes(),
            PAGE_HEADER_BYTES + 10 * (LEAF_INLINE_CELL_FIXED_BYTES + 4 + 10)
        );
    }

    #[test]
    fn leaf_split_and_append() {
        let mut l = leaf_of(&[b"a", b"b", b"c", b"d"]);
        let total = l.encoded_bytes();
        let r = l.split_off(1);
        assert_eq!((l.len(), r.len()), (1, 3));
        assert_eq!(r.key(0), b"b");
        assert_eq!(
            l.encoded_bytes() + r.encoded_bytes(),
            total + PAGE_HEADER_BYTES
        );
        l.append(&r);
        assert_eq!(l.encoded_bytes(), total);
        assert_eq!(l.key(3), b"d");
    }

    fn leaf_child(k: &[u8]) -> Child {
        Child::in_memory(Arc::new(Node::new(Body::Leaf(leaf_of(&[k])))))
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
