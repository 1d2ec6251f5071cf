//! The store's memtable: every change committed since the last checkpoint,
//! in key order, each key with its versions by LSN.
//!
//! Why it exists: applying a commit to the copy-on-write B+tree copies
//! every 4 KiB leaf (and most level-1 branches) the commit touches, and a
//! transaction of 100 random puts into a tree of a million keys touches
//! ~100 leaves: ~250 µs of memory-bound copying per transaction, more
//! than the journal's write it is meant to hide behind (profiled,
//! docs/store-performance.md, "The memtable"). Here a commit inserts each change once into a
//! structure that is changed in place, and a checkpoint folds the whole
//! memtable into the tree at once, so that the many changes landing in one
//! leaf share one copy of it.
//!
//! Shape: a B+tree of small nodes ([`FANOUT`] slots) in memory, with
//! writers on many threads at once (each committer inserts its own
//! commit's changes) and any number of readers that never wait:
//!
//! - A leaf takes a new key by *appending* it: the writer, holding the
//!   leaf's lock, fills the slot after the last one in use, then publishes
//!   it by raising the leaf's length (a release store). Slots below the
//!   length never change, so a reader sees a consistent leaf at either
//!   length. A leaf's first `sorted` slots are in key order and the
//!   appended ones after them are not: a search is a binary search and
//!   then a short linear one. Writers of different leaves do not wait for
//!   each other.
//! - A full leaf is split, by a writer holding the memtable's *shape*
//!   lock and then the leaf's: two new sorted leaves replace it, and its
//!   parent is replaced by a changed copy (one atomic store into the
//!   grandparent's child slot); a split parent copies its own parent, and
//!   so on. The replaced leaf is marked dead before its lock is let go: a
//!   writer that reached it meanwhile finds the mark and descends again.
//!   An inner node's keys never change once it is reachable, and only the
//!   shape lock's holder stores into its children.
//!   Replaced nodes are freed through epoch-based reclamation
//!   (`crossbeam-epoch`) once no reader can still be inside them; a reader
//!   pins the epoch only for the length of one call (a `get`, or one
//!   leaf's worth of a scan).
//! - An entry (a key and its versions) is made once and never moves or
//!   goes away while the memtable lives: a delete is a version without a
//!   value. A new version goes into the entry's list in LSN order (commits
//!   insert in any order; most often at the front) with one atomic store,
//!   under the leaf's lock; a version's value never changes once pushed.
//!   A reader at snapshot *S* may miss a version of an LSN at or below
//!   *S* only if that version's insert has not returned, and the store
//!   publishes an LSN only once every commit up to it is inserted.
//! - Readers see versions by LSN: a snapshot at LSN *S* takes, for each
//!   key, the newest version at or below *S* (multi-version concurrency:
//!   the writer applies commits before they are durable, readers see only
//!   what is).
//!
//! Memory: entries, keys, versions and values are bump-allocated from
//! 1 MiB chunks ([`Arena`], one per [`ARENAS`] writer threads, each
//! with its own lock and counters) that the memtable frees all at once when it
//! drops, with no walk over its entries; a [`ChunkPool`] keeps chunks for
//! the next memtable. Why by hand: on these VMs memory the process has not
//! touched before costs ~1 ms per MiB to fault in (the hypervisor backs it
//! on first touch), so a store that reuses its memtables' memory instead
//! of handing it back and asking again saves that on every commit; and
//! five small allocations per insert (key, entry, version, value, leaf
//! copy) cost more than the insert's own work (measured 1.1–1.8 µs per
//! insert at a million keys before, docs/store-performance.md, "The
//! memtable").
//!
//! Node keys are compared first by an inline head (the key's first
//! [`HEAD_BYTES`] bytes, zero-padded, as big-endian integers), so a
//! search touches only the nodes on its path; the entry's full key is read
//! only when two heads are equal. The store's keys (a 4-byte table id and
//! a user key) are compared entirely in the head up to 20-byte user keys.

#![allow(unsafe_code)]

use std::cmp::Ordering as CmpOrdering;
use std::ops::Bound;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned, Shared};
use crossbeam_utils::CachePadded;

use crate::hint::prefetch;
use crate::stripe::stripe;

mod arena;

use arena::Arena;
pub use arena::ChunkPool;

/// A log sequence number: the journal's numbering of commits.
pub type Lsn = u64;

/// Slots per node.
const FANOUT: usize = 32;
/// Keys whose descents [`MemWriter::insert_all`] interleaves (eight did
/// no better, docs/store-performance.md "Four descents at once").
const GROUP: usize = 4;
/// Key bytes compared inline in a node, without reading the entry.
pub const HEAD_BYTES: usize = 24;
/// The deepest a tree of at least [`FANOUT`] / 2 slots per node can be
/// with 2^64 entries (16^16); a bound for the writer's path.
const MAX_DEPTH: usize = 32;
/// The size of an arena chunk.
pub const CHUNK_BYTES: usize = 1 << 20;
/// Bytes [`ChunkPool::prepare`] faults in between two calls of its
/// `pause` (~64 µs of page faults here).
pub const TOUCH_STEP: usize = 64 << 10;
/// Allocations larger than this get a chunk of their own.
const BIG_BYTES: usize = CHUNK_BYTES / 4;
/// Bytes counted per key for its slot in a leaf and a share of the inner
/// nodes (leaves are between half and fully used).
const SLOT_BYTES: u64 = 48;

// ----- entries and versions -----------------------------------------------

/// One version of a key: its value, or none for a deletion. In the arena,
/// followed by the value's bytes.
struct Version {
    lsn: Lsn,
    /// The version before this one (lower or equal LSN), or null. Changes
    /// only when a version of a lower LSN is inserted below this one (see
    /// [`MemWriter::push_version`]), under the lock of the leaf that holds
    /// the key.
    older: AtomicPtr<Version>,
    /// The value's bytes (right after this header, in the same arena
    /// piece; a pointer of their own, derived from the arena's, so that
    /// reading them does not go through a reference to the header).
    value: *const u8,
    /// The value's length, or `usize::MAX` for a deletion.
    len: usize,
}

impl Version {
    fn value(&self) -> Option<&[u8]> {
        if self.len == usize::MAX {
            return None;
        }
        // SAFETY: `value` points to `len` bytes of the arena, written
        // before the version was published and never changed; the arena
        // lives as long as the memtable `self` is in.
        Some(unsafe { std::slice::from_raw_parts(self.value, self.len) })
    }
}

/// A key and its versions, newest first. In the arena, followed by the
/// key's bytes.
struct Entry {
    newest: AtomicPtr<Version>,
    /// The key's bytes (as `Version::value`).
    key: *const u8,
    key_len: usize,
}

impl Entry {
    fn key(&self) -> &[u8] {
        // SAFETY: as in `Version::value`, for the key's bytes.
        unsafe { std::slice::from_raw_parts(self.key, self.key_len) }
    }

    /// The newest version at or below `at`.
    fn version_at(&self, at: Lsn) -> Option<&Version> {
        let mut v = self.newest.load(Ordering::Acquire).cast_const();
        // SAFETY: versions are published with a release store after they
        // are complete and are freed only with the memtable's arena; the
        // caller borrows the memtable.
        while let Some(version) = unsafe { v.as_ref() } {
            if version.lsn <= at {
                return Some(version);
            }
            v = version.older.load(Ordering::Acquire).cast_const();
        }
        None
    }
}

// ----- keys -----------------------------------------------------------------

/// The first [`HEAD_BYTES`] of a key, zero-padded, as integers: ordering
/// heads orders keys, except that equal heads need the full keys (a key
/// and the same key with zero bytes appended, or keys longer than the
/// head that share it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
struct Head([u64; 3]);

impl Head {
    fn of(key: &[u8]) -> Head {
        let mut b = [0u8; HEAD_BYTES];
        let n = key.len().min(HEAD_BYTES);
        b[..n].copy_from_slice(&key[..n]);
        let word = |i: usize| u64::from_be_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        Head([word(0), word(1), word(2)])
    }
}

/// The inner nodes a descent went through, each with the child it took.
type Path<'g> = [(Shared<'g, Node>, usize); MAX_DEPTH];

/// Prefetch what a search reads first in `node` (when not null): its
/// length and kind, and the first words of its heads (see `Node::warm`).
#[inline]
fn prefetch_node(node: *const Node) {
    if node.is_null() {
        return;
    }
    // SAFETY: only addresses inside the node are computed (`addr_of!`
    // creates no reference and reads nothing).
    unsafe {
        prefetch(ptr::addr_of!((*node).len));
        prefetch(ptr::addr_of!((*node).children));
        let heads = ptr::addr_of!((*node).heads[0]).cast::<u8>();
        let mut at = 0;
        while at < std::mem::size_of::<[AtomicU64; FANOUT]>() {
            prefetch(heads.add(at));
            at += 64;
        }
    }
}

/// A key to search for, with its head.
struct Probe<'k> {
    key: &'k [u8],
    head: Head,
}

impl<'k> Probe<'k> {
    fn new(key: &'k [u8]) -> Probe<'k> {
        Probe {
            key,
            head: Head::of(key),
        }
    }

    /// The probe against a slot's head and entry.
    fn cmp(&self, head: Head, entry: *const Entry) -> CmpOrdering {
        match self.head.cmp(&head) {
            // SAFETY: every entry a node refers to lives as long as the
            // memtable (in its arena), and the caller borrows the memtable.
            CmpOrdering::Equal => self.key.cmp(unsafe { (*entry).key() }),
            o => o,
        }
    }
}

/// Two slots in key order.
fn slot_cmp(a: &(Head, *const Entry), b: &(Head, *const Entry)) -> CmpOrdering {
    // SAFETY: as in `Probe::cmp`.
    a.0.cmp(&b.0)
        .then_with(|| unsafe { (*a.1).key().cmp((*b.1).key()) })
}

// ----- nodes ----------------------------------------------------------------

/// A node: a leaf (entries) or an inner node (children). Slots below `len`
/// never change once reachable, except an inner node's child pointers
/// (see the module doc); the writer fills a leaf's next slot before it
/// raises `len`. Slots are atomics so that the writer filling one while
/// readers read the others is not a data race; relaxed loads and stores
/// of them are plain moves.
///
/// Laid out in this order (`repr(C)`): a descent reads `len` and
/// `children` (is it a leaf?) first, so they share the first cache line
/// with the first heads. Left to the compiler, `children` went last, and
/// its cache miss on every node of every path was 60 % of an insert's own
/// time (`perf annotate`, w3).
#[repr(C)]
struct Node {
    /// Slots in use (a release store publishes a filled slot).
    len: AtomicUsize,
    /// Inner nodes only.
    children: Option<Box<[Atomic<Node>; FANOUT]>>,
    /// Leaves: slots `0..sorted` are in key order, those after them (added
    /// since the leaf was made) in the order they came. Inner nodes: all.
    sorted: usize,
    /// Leaf: the heads of the entries' keys. Inner: the head and entry of
    /// slot `i`, for `i >= 1`, are the separator before child `i` (the
    /// smallest key under it); slot 0 is unused.
    ///
    /// Stored word by word (`heads[w][i]` is word `w` of slot `i`'s head):
    /// a search compares first words, reading the next word of a slot
    /// only when they are equal, so a descent touches the 4 cache lines
    /// of the first words instead of the 12 of whole heads. At a million
    /// keys, insertion was bound by those bytes (~1 KiB per node per
    /// level, ~100 ns).
    heads: [[AtomicU64; FANOUT]; 3],
    entries: [AtomicPtr<Entry>; FANOUT],
    /// Leaves: held by a writer that appends a slot to it, pushes a
    /// version onto one of its entries, or splits it. (Unused in inner
    /// nodes.)
    lock: Mutex<()>,
    /// Leaves: set, under `lock`, by the split that replaced it. A writer
    /// that reached it before and then takes `lock` finds it set and
    /// descends again.
    dead: AtomicBool,
}

impl Node {
    fn leaf() -> Node {
        Node {
            len: AtomicUsize::new(0),
            sorted: 0,
            heads: Default::default(),
            entries: Default::default(),
            children: None,
            lock: Mutex::new(()),
            dead: AtomicBool::new(false),
        }
    }

    fn inner() -> Node {
        Node {
            children: Some(Box::new(std::array::from_fn(|_| Atomic::null()))),
            ..Node::leaf()
        }
    }

    /// An unpublished node with `slots` (in key order).
    fn sorted_leaf(slots: &[(Head, *const Entry)]) -> Node {
        let n = Node::leaf();
        for (i, &(head, entry)) in slots.iter().enumerate() {
            n.set(i, head, entry);
        }
        n.len.store(slots.len(), Ordering::Relaxed);
        Node {
            sorted: slots.len(),
            ..n
        }
    }

    fn is_leaf(&self) -> bool {
        self.children.is_none()
    }

    fn children(&self) -> &[Atomic<Node>; FANOUT] {
        self.children.as_ref().expect("an inner node")
    }

    fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    fn head(&self, i: usize) -> Head {
        Head(std::array::from_fn(|w| {
            self.heads[w][i].load(Ordering::Relaxed)
        }))
    }

    /// `probe` against slot `i`'s key: word by word of the heads, then the
    /// entry's key when the heads are equal.
    fn cmp_slot(&self, probe: &Probe<'_>, i: usize) -> CmpOrdering {
        for (w, &word) in probe.head.0.iter().enumerate() {
            match word.cmp(&self.heads[w][i].load(Ordering::Relaxed)) {
                CmpOrdering::Equal => {}
                o => return o,
            }
        }
        // SAFETY: every entry a node refers to lives as long as the
        // memtable (in its arena), and the caller borrows the memtable.
        probe.key.cmp(unsafe { (*self.entry(i)).key() })
    }

    fn entry(&self, i: usize) -> *const Entry {
        self.entries[i].load(Ordering::Relaxed).cast_const()
    }

    /// Fill slot `i` (not yet published: at or past `len`, or the node is
    /// not reachable).
    fn set(&self, i: usize, head: Head, entry: *const Entry) {
        for (cells, word) in self.heads.iter().zip(head.0) {
            cells[i].store(word, Ordering::Relaxed);
        }
        self.entries[i].store(entry.cast_mut(), Ordering::Relaxed);
    }

    /// Read one word of each cache line of the heads in use: loads that do
    /// not depend on each other, so that their misses overlap, before the
    /// search's dependent ones (each would stall on its own miss in a cold
    /// node: measured 1.4 against 1.1 µs per insert at a million keys
    /// without).
    fn warm(&self, len: usize) {
        let mut sum = 0u64;
        let mut i = 0;
        while i < len {
            sum = sum.wrapping_add(self.heads[0][i].load(Ordering::Relaxed));
            i += 64 / std::mem::size_of::<u64>();
        }
        // An inner node's child pointers are a block of their own: their
        // misses overlap the heads' too.
        if let Some(children) = &self.children {
            let mut i = 0;
            while i < len {
                prefetch(&children[i]);
                i += 64 / std::mem::size_of::<Atomic<Node>>();
            }
        }
        std::hint::black_box(sum);
    }

    /// Leaf: the slot holding `probe`'s key, among the first `len`.
    fn find(&self, probe: &Probe<'_>, len: usize) -> Option<usize> {
        self.warm(len);
        let (mut lo, mut hi) = (0, self.sorted.min(len));
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.cmp_slot(probe, mid) {
                CmpOrdering::Greater => lo = mid + 1,
                CmpOrdering::Less => hi = mid,
                CmpOrdering::Equal => return Some(mid),
            }
        }
        (self.sorted..len).find(|&i| self.cmp_slot(probe, i).is_eq())
    }

    /// Leaf: its first `len` slots in key order.
    fn sorted_slots(&self, len: usize) -> Vec<(Head, *const Entry)> {
        let mut slots: Vec<_> = (0..len).map(|i| (self.head(i), self.entry(i))).collect();
        if self.sorted < len {
            slots.sort_unstable_by(slot_cmp);
        }
        slots
    }

    /// Inner: the child whose keys include `probe`'s.
    fn child_index(&self, probe: &Probe<'_>) -> usize {
        // The number of separators (slots 1..len) at or below the probe.
        let len = self.len();
        self.warm(len);
        let (mut lo, mut hi) = (1, len);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.cmp_slot(probe, mid) == CmpOrdering::Less {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo - 1
    }

    /// Inner: an unpublished copy (children loaded by the one writer).
    fn copy_inner(&self, from: usize, to: usize, guard: &Guard) -> Node {
        let n = Node::inner();
        for i in from..to {
            n.set(i - from, self.head(i), self.entry(i));
        }
        let (src, dst) = (self.children(), n.children());
        for i in from..to {
            dst[i - from].store(src[i].load(Ordering::Relaxed, guard), Ordering::Relaxed);
        }
        n.len.store(to - from, Ordering::Relaxed);
        Node {
            sorted: to - from,
            ..n
        }
    }

    /// Inner, unpublished, with room: shift slots `at..len` one right and
    /// put `(head, entry, child)` at `at`.
    fn insert_child(
        &mut self,
        at: usize,
        head: Head,
        entry: *const Entry,
        child: Shared<'_, Node>,
    ) {
        let len = *self.len.get_mut();
        debug_assert!(len < FANOUT);
        for words in &mut self.heads {
            words[at..=len].rotate_right(1);
        }
        self.entries[at..=len].rotate_right(1);
        let children = self.children.as_mut().expect("an inner node");
        children[at..=len].rotate_right(1);
        children[at] = Atomic::from(child);
        self.set(at, head, entry);
        *self.len.get_mut() = len + 1;
        self.sorted = len + 1;
    }
}

/// A changed node on its way up: it replaces the node at this level, and
/// if it split, `right` (with the smallest key under it) goes beside it.
struct Up {
    node: Owned<Node>,
    right: Option<(Head, *const Entry, Owned<Node>)>,
}

impl Up {
    /// The full leaf `l` (its first `len` slots) and `(head, entry)`, as
    /// two sorted leaves.
    fn split(l: &Node, len: usize, head: Head, entry: *const Entry) -> Up {
        let mut slots = l.sorted_slots(len);
        let at = slots.partition_point(|s| slot_cmp(s, &(head, entry)).is_lt());
        slots.insert(at, (head, entry));
        let half = slots.len() / 2;
        let right = Node::sorted_leaf(&slots[half..]);
        Up {
            node: Owned::new(Node::sorted_leaf(&slots[..half])),
            right: Some((slots[half].0, slots[half].1, Owned::new(right))),
        }
    }

    /// The new root, when the change reached the top: the node, or a new
    /// inner node above it and its right half.
    fn into_root(self, guard: &Guard) -> Owned<Node> {
        match self.right {
            None => self.node,
            Some((head, sep, right)) => {
                let mut r = Node::inner();
                let left = self.node.into_shared(guard);
                let right = right.into_shared(guard);
                r.insert_child(0, Head::default(), ptr::null(), left);
                r.insert_child(1, head, sep, right);
                Owned::new(r)
            }
        }
    }
}

// ----- the memtable ---------------------------------------------------------

/// The memtable. See the module doc.
pub struct MemTable {
    root: Atomic<Node>,
    /// Held by the writer that changes the tree's shape: a split (which
    /// replaces inner nodes and stores into their parents), or the first
    /// root. Taken before any leaf's lock, never while holding one.
    shape: Mutex<()>,
    /// The writers' arenas: a writer takes its thread's
    /// (`stripe() % ARENAS`), so that writers on different threads
    /// allocate, and count, without waiting for one another.
    arenas: Box<[CachePadded<ArenaSlot>]>,
}

/// Arenas per memtable: writers on up to this many threads at once
/// allocate without sharing a lock. Each holds one partly used chunk.
const ARENAS: usize = 8;

/// One arena, and what the writers using it inserted (changed only under
/// `arena`'s lock: plain loads and stores, read without the lock).
struct ArenaSlot {
    arena: Mutex<Arena>,
    /// Bytes held: the arena's pieces and a share of nodes per key.
    bytes: AtomicU64,
    entries: AtomicU64,
    versions: AtomicU64,
    /// The highest LSN inserted through this arena.
    last_lsn: AtomicU64,
}

// SAFETY: the raw pointers inside (entries, versions) point into the
// memtable's own arenas and are never changed once published (except
// through atomics); a leaf and its entries' versions are changed only
// under the leaf's lock, inner nodes and the root only under `shape`, and
// every change is published with a release store that readers acquire.
unsafe impl Send for MemTable {}
// SAFETY: as above.
unsafe impl Sync for MemTable {}

impl std::fmt::Debug for MemTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemTable")
            .field("entries", &self.len())
            .field("bytes", &self.bytes())
            .field("last_lsn", &self.last_lsn())
            .finish()
    }
}

impl Default for MemTable {
    fn default() -> Self {
        MemTable::new()
    }
}

impl MemTable {
    /// An empty memtable whose memory is mapped for it (and unmapped when
    /// it drops).
    pub fn new() -> MemTable {
        MemTable::with_pool(None)
    }

    /// An empty memtable whose memory comes from `pool` (or is mapped for
    /// it), and goes back to it when the memtable drops.
    pub fn with_pool(pool: Option<Arc<ChunkPool>>) -> MemTable {
        MemTable {
            root: Atomic::null(),
            shape: Mutex::new(()),
            arenas: (0..ARENAS)
                .map(|_| {
                    CachePadded::new(ArenaSlot {
                        arena: Mutex::new(Arena::new(pool.clone())),
                        bytes: AtomicU64::new(0),
                        entries: AtomicU64::new(0),
                        versions: AtomicU64::new(0),
                        last_lsn: AtomicU64::new(0),
                    })
                })
                .collect(),
        }
    }

    /// The sum of one counter over the arenas.
    fn sum(&self, counter: impl Fn(&ArenaSlot) -> &AtomicU64) -> u64 {
        self.arenas
            .iter()
            .map(|a| counter(a).load(Ordering::Relaxed))
            .sum()
    }

    /// Keys held (each with one version or more).
    pub fn len(&self) -> u64 {
        self.sum(|a| &a.entries)
    }

    /// Whether no key was inserted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Versions held, over all keys.
    pub fn versions(&self) -> u64 {
        self.sum(|a| &a.versions)
    }

    /// An estimate of the memory the entries hold, in bytes: keys, values,
    /// their headers and their slots in nodes.
    pub fn bytes(&self) -> u64 {
        self.sum(|a| &a.bytes)
    }

    /// The highest LSN inserted (0 if none).
    pub fn last_lsn(&self) -> Lsn {
        self.arenas
            .iter()
            .map(|a| a.last_lsn.load(Ordering::Acquire))
            .max()
            .unwrap_or(0)
    }

    /// A writer. Writers on different threads insert at once (see the
    /// module doc); a thread's writer waits only for another writer of
    /// a thread that shares its arena.
    pub fn writer(&self) -> MemWriter<'_> {
        let slot = &self.arenas[stripe() % ARENAS];
        MemWriter {
            mem: self,
            slot,
            arena: slot.arena.lock().unwrap_or_else(PoisonError::into_inner),
            _pinned: epoch::pin(),
        }
    }

    /// The leaf whose keys include `probe`'s (null: the memtable is
    /// empty), as a descent under `guard` finds it now.
    fn leaf_for<'g>(&self, probe: &Probe<'_>, guard: &'g Guard) -> Shared<'g, Node> {
        let mut node = self.root.load(Ordering::Acquire, guard);
        // SAFETY: as in `get`.
        while let Some(n) = unsafe { node.as_ref() } {
            if n.is_leaf() {
                break;
            }
            node = n.children()[n.child_index(probe)].load(Ordering::Acquire, guard);
        }
        node
    }

    /// The newest version of `key` at or below `at`: `None` if the
    /// memtable has none (look further down), `Some(None)` if it is a
    /// deletion.
    pub fn get(&self, key: &[u8], at: Lsn) -> Option<Option<&[u8]>> {
        let guard = epoch::pin();
        let probe = Probe::new(key);
        let mut node = self.root.load(Ordering::Acquire, &guard);
        // SAFETY: a node loaded under the pinned guard is not freed until
        // the guard is dropped (it is retired through the epoch), and a
        // reachable node's published slots are complete (release stores).
        while let Some(n) = unsafe { node.as_ref() } {
            if n.is_leaf() {
                let slot = n.find(&probe, n.len())?;
                // SAFETY: entries live as long as the memtable's arena,
                // which `self` borrows.
                let entry = unsafe { &*n.entry(slot) };
                return entry.version_at(at).map(Version::value);
            }
            node = n.children()[n.child_index(&probe)].load(Ordering::Acquire, &guard);
        }
        None
    }

    /// The keys from `start` to `end`, in order, each with its newest
    /// version at or below `at` (keys without one are skipped).
    pub fn range(&self, start: Bound<&[u8]>, end: Bound<&[u8]>, at: Lsn) -> MemRange<'_> {
        let mut r = MemRange {
            mem: self,
            at,
            end: match end {
                Bound::Included(k) => Bound::Included(k.to_vec()),
                Bound::Excluded(k) => Bound::Excluded(k.to_vec()),
                Bound::Unbounded => Bound::Unbounded,
            },
            batch: Vec::with_capacity(FANOUT),
            next: 0,
            done: false,
        };
        r.fill(start);
        r
    }

    /// Entries from the leaf holding `start`, from `start` on, in order,
    /// into `out`; returns the smallest key of the leaves after that one
    /// (the separator where the path to it turned left last), if any.
    fn leaf_from<'a>(&'a self, start: Bound<&[u8]>, out: &mut Vec<&'a Entry>) -> Option<&'a [u8]> {
        let guard = epoch::pin();
        let (probe, exclusive) = match start {
            Bound::Included(k) => (Some(Probe::new(k)), false),
            Bound::Excluded(k) => (Some(Probe::new(k)), true),
            Bound::Unbounded => (None, false),
        };
        let mut after: *const Entry = ptr::null();
        let mut node = self.root.load(Ordering::Acquire, &guard);
        // SAFETY: as in `get`.
        while let Some(n) = unsafe { node.as_ref() } {
            if n.is_leaf() {
                let slots = n.sorted_slots(n.len());
                let first = match &probe {
                    None => 0,
                    Some(p) => slots.partition_point(|&(h, e)| match p.cmp(h, e) {
                        CmpOrdering::Greater => true,
                        CmpOrdering::Equal => exclusive,
                        CmpOrdering::Less => false,
                    }),
                };
                // SAFETY: entries live as long as the memtable ('a).
                out.extend(slots[first..].iter().map(|&(_, e)| unsafe { &*e }));
                break;
            }
            let i = probe.as_ref().map_or(0, |p| n.child_index(p));
            if i + 1 < n.len() {
                after = n.entry(i + 1);
            }
            node = n.children()[i].load(Ordering::Acquire, &guard);
        }
        // SAFETY: as above.
        unsafe { after.as_ref() }.map(Entry::key)
    }

    /// The keys from `end` down to `start`, in descending order, each with
    /// its newest version at or below `at` (keys without one are skipped):
    /// [`MemTable::range`] backward.
    pub fn range_rev(&self, start: Bound<&[u8]>, end: Bound<&[u8]>, at: Lsn) -> MemRangeRev<'_> {
        let mut r = MemRangeRev {
            mem: self,
            at,
            start: match start {
                Bound::Included(k) => Bound::Included(k.to_vec()),
                Bound::Excluded(k) => Bound::Excluded(k.to_vec()),
                Bound::Unbounded => Bound::Unbounded,
            },
            batch: Vec::with_capacity(FANOUT),
            low: None,
            done: false,
        };
        r.fill(end);
        r
    }

    /// Entries of the leaf holding the last key at or before `end`, up to
    /// `end`, in order, into `out`; returns the smallest key that leaf may
    /// hold (the separator where the path to it turned right last): every
    /// key of the leaves before it is below that one.
    fn leaf_before<'a>(&'a self, end: Bound<&[u8]>, out: &mut Vec<&'a Entry>) -> Option<&'a [u8]> {
        let guard = epoch::pin();
        let (probe, inclusive) = match end {
            Bound::Included(k) => (Some(Probe::new(k)), true),
            Bound::Excluded(k) => (Some(Probe::new(k)), false),
            Bound::Unbounded => (None, true),
        };
        let mut before: *const Entry = ptr::null();
        let mut node = self.root.load(Ordering::Acquire, &guard);
        // SAFETY: as in `get`.
        while let Some(n) = unsafe { node.as_ref() } {
            if n.is_leaf() {
                let slots = n.sorted_slots(n.len());
                let last = match &probe {
                    None => slots.len(),
                    Some(p) => slots.partition_point(|&(h, e)| match p.cmp(h, e) {
                        CmpOrdering::Greater => true,
                        CmpOrdering::Equal => inclusive,
                        CmpOrdering::Less => false,
                    }),
                };
                // SAFETY: entries live as long as the memtable ('a).
                out.extend(slots[..last].iter().map(|&(_, e)| unsafe { &*e }));
                break;
            }
            let i = match &probe {
                None => n.len() - 1,
                Some(p) => {
                    let i = n.child_index(p);
                    // An excluded end equal to a separator: the keys below
                    // it are all left of that separator (descending right
                    // of it would find none, and come back to it forever).
                    match i > 0 && !inclusive && n.cmp_slot(p, i).is_eq() {
                        true => i - 1,
                        false => i,
                    }
                }
            };
            if i > 0 {
                before = n.entry(i);
            }
            node = n.children()[i].load(Ordering::Acquire, &guard);
        }
        // SAFETY: as above.
        unsafe { before.as_ref() }.map(Entry::key)
    }

    /// Every node reachable from the root, for `Drop`.
    fn for_each_node(&mut self, mut f: impl FnMut(Owned<Node>)) {
        // SAFETY: `&mut self`: no reader or writer is inside the memtable,
        // so an unprotected guard is enough to walk it.
        let guard = unsafe { epoch::unprotected() };
        let mut stack = vec![self.root.swap(Shared::null(), Ordering::Relaxed, guard)];
        while let Some(node) = stack.pop() {
            if node.is_null() {
                continue;
            }
            // SAFETY: each node is reachable from the root exactly once
            // (replaced nodes are retired, not reachable), so this takes
            // each exactly once.
            let owned = unsafe { node.into_owned() };
            if let Some(children) = &owned.children {
                let len = owned.len.load(Ordering::Relaxed);
                stack.extend(
                    children[..len]
                        .iter()
                        .map(|c| c.load(Ordering::Relaxed, guard)),
                );
            }
            f(owned);
        }
    }
}

impl ArenaSlot {
    /// Count an insert made through this arena.
    ///
    /// Only the writer holding `arena`'s lock calls this, so plain loads
    /// and stores do: a locked read-modify-write would wait for every
    /// store before it to reach the cache, and an insert's stores go to
    /// lines not yet in it (its fresh entry and version): with four of
    /// them here, a quarter of an insert's time was spent on them (`perf
    /// annotate`).
    fn note(&self, lsn: Lsn, bytes: u64, new_entry: bool) {
        let add = |a: &AtomicU64, n: u64| a.store(a.load(Ordering::Relaxed) + n, Ordering::Relaxed);
        add(&self.bytes, bytes);
        add(&self.versions, 1);
        if new_entry {
            add(&self.entries, 1);
        }
        if lsn > self.last_lsn.load(Ordering::Relaxed) {
            self.last_lsn.store(lsn, Ordering::Release);
        }
    }
}

impl Drop for MemTable {
    fn drop(&mut self) {
        // Nodes only: entries and versions go with the arena, whole chunks
        // at a time.
        self.for_each_node(drop);
    }
}

// ----- the writer -----------------------------------------------------------

/// A writer of a memtable (see [`MemTable::writer`]).
pub struct MemWriter<'m> {
    mem: &'m MemTable,
    /// Its arena's counters.
    slot: &'m ArenaSlot,
    arena: MutexGuard<'m, Arena>,
    /// The epoch, pinned while the writer lives: each insert pins it
    /// again, and a pin inside a pin costs a counter's increment, where
    /// the outermost one costs a full fence (and, every 128th, an attempt
    /// to advance the global epoch). Inserting a commit's 100 puts, the
    /// helper spent 8.8 % of its samples pinning (w3, `perf`). Dropped
    /// after the arena's lock (fields drop in order): nodes retired
    /// meanwhile are freed, if they are, without the lock held.
    _pinned: Guard,
}

impl MemWriter<'_> {
    /// A version of `lsn` in the arena, with a copy of `value`.
    fn version(&mut self, lsn: Lsn, value: Option<&[u8]>, older: *const Version) -> *const Version {
        let len = value.map_or(0, <[u8]>::len);
        let p = self
            .arena
            .alloc(std::mem::size_of::<Version>() + len)
            .cast::<Version>();
        // SAFETY: the arena gave `size_of::<Version>() + len` bytes,
        // 8-aligned (Version's alignment), that nothing else uses.
        unsafe {
            let bytes = p.as_ptr().add(1).cast::<u8>();
            if let Some(v) = value {
                ptr::copy_nonoverlapping(v.as_ptr(), bytes, len);
            }
            p.as_ptr().write(Version {
                lsn,
                older: AtomicPtr::new(older.cast_mut()),
                value: bytes,
                len: value.map_or(usize::MAX, <[u8]>::len),
            });
        }
        p.as_ptr().cast_const()
    }

    /// An entry for `key` in the arena, with `first` as its only version.
    fn entry(&mut self, key: &[u8], first: *const Version) -> *const Entry {
        let p = self
            .arena
            .alloc(std::mem::size_of::<Entry>() + key.len())
            .cast::<Entry>();
        // SAFETY: as in `version`, for an entry and its key.
        unsafe {
            let bytes = p.as_ptr().add(1).cast::<u8>();
            ptr::copy_nonoverlapping(key.as_ptr(), bytes, key.len());
            p.as_ptr().write(Entry {
                newest: AtomicPtr::new(first.cast_mut()),
                key: bytes,
                key_len: key.len(),
            });
        }
        p.as_ptr().cast_const()
    }

    /// Add a version of `key` made by the commit at `lsn`: a copy of
    /// `value`, or a deletion for `None`. A key's versions are kept in
    /// LSN order whatever order they come in (writers of several commits
    /// insert at once); a second version at the same LSN replaces the
    /// first for readers.
    pub fn insert(&mut self, key: &[u8], lsn: Lsn, value: Option<&[u8]>) {
        let guard = epoch::pin();
        let probe = Probe::new(key);
        loop {
            let leaf = self.mem.leaf_for(&probe, &guard);
            if self.insert_at(&probe, lsn, value, leaf, &guard) {
                return;
            }
        }
    }

    /// Insert every `(key, value)` of `puts` under `lsn`, in order: the
    /// same as [`MemWriter::insert`] on each, faster for more than one.
    ///
    /// Why: a descent from the root stalls on a cache miss at each level
    /// (at a million keys, 69 % of an insert's own samples were the load
    /// of a node's first line, w3's helper, `perf annotate`). Here the
    /// descents of [`GROUP`] keys go down together, level by level, each
    /// node's lines prefetched one step before they are read, so that
    /// their misses overlap instead of following one another. The keys
    /// are then inserted in order; one that splits a leaf changes the
    /// paths the others took, which then descend again alone.
    pub fn insert_all<'k>(
        &mut self,
        lsn: Lsn,
        puts: impl IntoIterator<Item = (&'k [u8], Option<&'k [u8]>)>,
    ) {
        let mut group: [(&[u8], Option<&[u8]>); GROUP] = [(&[], None); GROUP];
        let mut n = 0;
        for put in puts {
            group[n] = put;
            n += 1;
            if n == GROUP {
                self.insert_group(lsn, &group);
                n = 0;
            }
        }
        self.insert_group(lsn, &group[..n]);
    }

    fn insert_group(&mut self, lsn: Lsn, group: &[(&[u8], Option<&[u8]>)]) {
        let guard = epoch::pin();
        let root = self.mem.root.load(Ordering::Acquire, &guard);
        if group.len() < 2 || root.is_null() {
            for &(key, value) in group {
                self.insert(key, lsn, value);
            }
            return;
        }
        let probes: [Probe<'_>; GROUP] =
            std::array::from_fn(|c| Probe::new(group.get(c).map_or(&[][..], |p| p.0)));
        let mut nodes = [root; GROUP];
        let n = group.len();
        debug_assert!(n <= GROUP, "a group of {n}");
        let mut child = [0; GROUP];
        // SAFETY (this function): nodes are loaded under the pinned guard
        // (as in `MemTable::get`). Every leaf under one root is at the
        // same depth (splits replace nodes by nodes of their level), so
        // the cursors reach the leaves together.
        while !unsafe { nodes[0].deref() }.is_leaf() {
            for c in 0..n {
                let node = unsafe { nodes[c].deref() };
                child[c] = node.child_index(&probes[c]);
                prefetch(&node.children()[child[c]]);
            }
            for c in 0..n {
                let node = unsafe { nodes[c].deref() };
                nodes[c] = node.children()[child[c]].load(Ordering::Acquire, &guard);
                prefetch_node(nodes[c].as_raw());
            }
        }
        for c in 0..n {
            let (key, value) = group[c];
            // A leaf split since the descent (by this insert or another
            // writer's) is dead: descend again.
            if !self.insert_at(&probes[c], lsn, value, nodes[c], &guard) {
                self.insert(key, lsn, value);
            }
        }
    }

    /// Insert `probe`'s key into the leaf `node` (null: the memtable was
    /// empty), reached by a descent under `guard`: `false` if that leaf
    /// was split since (dead), and nothing was done.
    fn insert_at<'g>(
        &mut self,
        probe: &Probe<'_>,
        lsn: Lsn,
        value: Option<&[u8]>,
        node: Shared<'g, Node>,
        guard: &'g Guard,
    ) -> bool {
        // SAFETY: `node` was reached from the root under `guard`: not
        // freed before the guard is dropped.
        let Some(leaf) = (unsafe { node.as_ref() }) else {
            self.insert_reshaping(probe, lsn, value, guard);
            return true;
        };
        let held = leaf.lock.lock().unwrap_or_else(PoisonError::into_inner);
        if leaf.dead.load(Ordering::Relaxed) {
            return false;
        }
        if self.insert_into(leaf, probe, lsn, value) {
            return true;
        }
        // Full: split it, under the shape lock (taken without holding a
        // leaf's).
        drop(held);
        self.insert_reshaping(probe, lsn, value, guard);
        true
    }

    /// Insert `probe`'s key into the live `leaf`, whose lock the caller
    /// holds: a version pushed onto its entry, or a new entry appended.
    /// `false` (nothing done) when the key is new and the leaf full.
    fn insert_into(
        &mut self,
        leaf: &Node,
        probe: &Probe<'_>,
        lsn: Lsn,
        value: Option<&[u8]>,
    ) -> bool {
        let len = leaf.len.load(Ordering::Relaxed);
        if let Some(slot) = leaf.find(probe, len) {
            // SAFETY: entries live as long as the memtable.
            let entry = unsafe { &*leaf.entry(slot) };
            self.push_version(entry, lsn, value);
            return true;
        }
        if len == FANOUT {
            return false;
        }
        let entry = self.new_entry(probe.key, lsn, value);
        // Append: fill the next slot, then publish it.
        leaf.set(len, probe.head, entry);
        leaf.len.store(len + 1, Ordering::Release);
        true
    }

    /// A new entry for `key` with one version, counted.
    fn new_entry(&mut self, key: &[u8], lsn: Lsn, value: Option<&[u8]>) -> *const Entry {
        let value_bytes = value.map_or(0, |v| v.len().next_multiple_of(8) as u64);
        let first = self.version(lsn, value, ptr::null());
        let entry = self.entry(key, first);
        self.slot.note(
            lsn,
            value_bytes
                + key.len().next_multiple_of(8) as u64
                + (std::mem::size_of::<Version>() + std::mem::size_of::<Entry>()) as u64
                + SLOT_BYTES,
            true,
        );
        entry
    }

    /// Add a version of `lsn` to `entry`, in LSN order: in front unless a
    /// newer version is there already (another writer's commit of a
    /// higher LSN came first), else below the newest that is above it.
    /// The caller holds the lock of the (live) leaf holding `entry`: no
    /// other writer changes its list meanwhile.
    ///
    /// A reader never misses the new version: it reads at a snapshot at
    /// or above `lsn` only once `lsn` is published, and the store
    /// publishes an LSN only after its commit's insert returned.
    fn push_version(&mut self, entry: &Entry, lsn: Lsn, value: Option<&[u8]>) {
        let value_bytes = value.map_or(0, |v| v.len().next_multiple_of(8) as u64);
        let newest = entry.newest.load(Ordering::Acquire);
        // SAFETY: a version is never freed while the memtable lives.
        let above = |v: *mut Version| !v.is_null() && unsafe { (*v).lsn } > lsn;
        if above(newest) {
            // SAFETY: as above.
            let mut at = unsafe { &*newest };
            loop {
                let older = at.older.load(Ordering::Acquire);
                if !above(older) {
                    break;
                }
                // SAFETY: as above.
                at = unsafe { &*older };
            }
            let v = self.version(lsn, value, at.older.load(Ordering::Relaxed));
            at.older.store(v.cast_mut(), Ordering::Release);
        } else {
            let v = self.version(lsn, value, newest);
            entry.newest.store(v.cast_mut(), Ordering::Release);
        }
        self.slot.note(
            lsn,
            value_bytes + std::mem::size_of::<Version>() as u64,
            false,
        );
    }

    /// Insert `probe`'s key holding the shape lock: into the memtable's
    /// first leaf, or into its leaf as found now, which it splits if full.
    fn insert_reshaping(
        &mut self,
        probe: &Probe<'_>,
        lsn: Lsn,
        value: Option<&[u8]>,
        guard: &Guard,
    ) {
        let mem = self.mem;
        let _shape = mem.shape.lock().unwrap_or_else(PoisonError::into_inner);
        let mut path: Path<'_> = [(Shared::null(), 0); MAX_DEPTH];
        let mut node = mem.root.load(Ordering::Acquire, guard);
        let mut depth = 0;
        // SAFETY (this function): nodes reached from the root under
        // `guard`; with the shape lock held, no other writer replaces an
        // inner node or a leaf, so the leaf reached is live and `path` is
        // the tree's.
        while let Some(n) = unsafe { node.as_ref() } {
            if n.is_leaf() {
                break;
            }
            let i = n.child_index(probe);
            path[depth] = (node, i);
            depth += 1;
            node = n.children()[i].load(Ordering::Acquire, guard);
        }
        let Some(leaf) = (unsafe { node.as_ref() }) else {
            // The first key.
            let entry = self.new_entry(probe.key, lsn, value);
            let root = Node::sorted_leaf(&[(probe.head, entry)]);
            mem.root.store(Owned::new(root), Ordering::Release);
            return;
        };
        let _held = leaf.lock.lock().unwrap_or_else(PoisonError::into_inner);
        debug_assert!(!leaf.dead.load(Ordering::Relaxed), "a leaf split twice");
        if self.insert_into(leaf, probe, lsn, value) {
            return;
        }
        let entry = self.new_entry(probe.key, lsn, value);
        Self::split_leaf(mem, &path[..depth], node, FANOUT, probe.head, entry, guard);
        // Before the leaf's lock is let go: a writer that takes it next
        // descends again, to the leaves that replaced it.
        leaf.dead.store(true, Ordering::Relaxed);
    }

    /// Insert `head` and `entry` into the full leaf `node` (at the end of
    /// `path`, the inner nodes above it and the child taken in each): two
    /// sorted leaves replace it, and the change is carried up, copying
    /// each parent that splits in turn, until a node takes it in place or
    /// a new root does. The nodes replaced are retired under `guard`. The
    /// caller holds the shape lock and the leaf's.
    fn split_leaf<'g>(
        mem: &MemTable,
        path: &[(Shared<'g, Node>, usize)],
        node: Shared<'g, Node>,
        len: usize,
        head: Head,
        entry: *const Entry,
        guard: &'g Guard,
    ) {
        // SAFETY: only the shape lock's holder changes inner nodes and
        // replaces leaves, and `node` (reached from the root under
        // `guard`) is retired only below.
        let l = unsafe { node.deref() };
        let mut depth = path.len();
        let mut up = Up::split(l, len, head, entry);
        // Carry the change up until a node takes it without splitting.
        // The nodes it replaces are retired only after the store that
        // unlinks them.
        let mut replaced = [Shared::null(); MAX_DEPTH + 1];
        replaced[0] = node;
        let mut retired = 1;
        loop {
            let Some(d) = depth.checked_sub(1) else {
                mem.root.store(up.into_root(guard), Ordering::Release);
                break;
            };
            depth = d;
            let (parent, i) = path[d];
            // SAFETY: as above.
            let p = unsafe { parent.deref() };
            match up.right {
                None => {
                    // The parent stays: swap its child in place.
                    p.children()[i].store(up.node, Ordering::Release);
                    break;
                }
                Some((head, sep, right)) => {
                    let plen = p.len.load(Ordering::Relaxed);
                    let mut n = p.copy_inner(0, plen, guard);
                    n.children.as_mut().expect("inner")[i] = Atomic::from(up.node);
                    let right = right.into_shared(guard);
                    up = Self::put_child(n, i + 1, head, sep, right, guard);
                    replaced[retired] = parent;
                    retired += 1;
                }
            }
        }
        for &old in replaced[..retired].iter().filter(|n| !n.is_null()) {
            // SAFETY: the store that ended the loop unlinked every replaced
            // node from the tree; a reader still inside one pinned the
            // epoch before that, so it is freed only after such readers
            // leave.
            unsafe { guard.defer_destroy(old) };
        }
    }

    /// Put a child into the unpublished inner node `n` (splitting it in two
    /// if full) and return what goes up.
    fn put_child(
        mut n: Node,
        at: usize,
        head: Head,
        entry: *const Entry,
        child: Shared<'_, Node>,
        guard: &Guard,
    ) -> Up {
        let len = *n.len.get_mut();
        if len < FANOUT {
            n.insert_child(at, head, entry, child);
            return Up {
                node: Owned::new(n),
                right: None,
            };
        }
        let half = FANOUT / 2;
        let mut right = n.copy_inner(half, FANOUT, guard);
        let mut left = n.copy_inner(0, half, guard);
        if at <= half {
            left.insert_child(at, head, entry, child);
        } else {
            right.insert_child(at - half, head, entry, child);
        }
        // The right node's smallest key goes up as the separator; an inner
        // node keeps slot 0 without one.
        let (sep_head, sep) = (right.head(0), right.entry(0));
        right.set(0, Head::default(), ptr::null());
        Up {
            node: Owned::new(left),
            right: Some((sep_head, sep, Owned::new(right))),
        }
    }
}

// ----- scans ----------------------------------------------------------------

/// A scan of a memtable at one LSN (see [`MemTable::range`]): `(key,
/// value)` in key order, `None` for a deletion.
pub struct MemRange<'a> {
    mem: &'a MemTable,
    at: Lsn,
    end: Bound<Vec<u8>>,
    batch: Vec<&'a Entry>,
    next: usize,
    done: bool,
}

impl std::fmt::Debug for MemRange<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemRange").field("at", &self.at).finish()
    }
}

impl<'a> MemRange<'a> {
    /// The next non-empty leaf's entries from `start` on.
    fn fill(&mut self, start: Bound<&[u8]>) {
        self.batch.clear();
        self.next = 0;
        let mut after = self.mem.leaf_from(start, &mut self.batch);
        while self.batch.is_empty() {
            match after {
                Some(k) => after = self.mem.leaf_from(Bound::Included(k), &mut self.batch),
                None => {
                    self.done = true;
                    return;
                }
            }
        }
        // The leaf's entries lie anywhere in the arena: ask for all of them
        // at once, so their misses overlap (`next` does the same for each
        // entry's newest version, a few entries ahead). A checkpoint's
        // fold reads every entry so.
        for &e in &self.batch {
            prefetch(e);
        }
    }

    fn past_end(&self, key: &[u8]) -> bool {
        match &self.end {
            Bound::Included(e) => key > e.as_slice(),
            Bound::Excluded(e) => key >= e.as_slice(),
            Bound::Unbounded => false,
        }
    }
}

/// How many entries ahead [`MemRange`] prefetches an entry's newest version.
const VERSION_PREFETCH_AHEAD: usize = 4;

impl<'a> Iterator for MemRange<'a> {
    type Item = (&'a [u8], Option<&'a [u8]>);

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let Some(&entry) = self.batch.get(self.next) else {
                let last: &'a Entry = self.batch[self.batch.len() - 1];
                self.fill(Bound::Excluded(last.key()));
                continue;
            };
            self.next += 1;
            if let Some(&ahead) = self.batch.get(self.next + VERSION_PREFETCH_AHEAD) {
                prefetch(ahead.newest.load(Ordering::Acquire));
            }
            if self.past_end(entry.key()) {
                self.done = true;
                return None;
            }
            if let Some(v) = entry.version_at(self.at) {
                return Some((entry.key(), v.value()));
            }
        }
        None
    }
}

/// A scan of a memtable at one LSN backward (see [`MemTable::range_rev`]):
/// `(key, value)` in descending key order, `None` for a deletion.
pub struct MemRangeRev<'a> {
    mem: &'a MemTable,
    at: Lsn,
    start: Bound<Vec<u8>>,
    /// One leaf's entries up to where the scan is, in key order: taken
    /// from the back.
    batch: Vec<&'a Entry>,
    /// The smallest key of the leaf `batch` came from: the next leaf is
    /// the one before it.
    low: Option<&'a [u8]>,
    done: bool,
}

impl std::fmt::Debug for MemRangeRev<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemRangeRev").field("at", &self.at).finish()
    }
}

impl<'a> MemRangeRev<'a> {
    /// The previous non-empty leaf's entries up to `end`.
    fn fill(&mut self, end: Bound<&[u8]>) {
        self.batch.clear();
        let mut before = self.mem.leaf_before(end, &mut self.batch);
        while self.batch.is_empty() {
            match before {
                Some(k) => before = self.mem.leaf_before(Bound::Excluded(k), &mut self.batch),
                None => {
                    self.done = true;
                    return;
                }
            }
        }
        self.low = Some(self.batch[0].key());
        for &e in &self.batch {
            prefetch(e);
        }
    }

    fn before_start(&self, key: &[u8]) -> bool {
        match &self.start {
            Bound::Included(s) => key < s.as_slice(),
            Bound::Excluded(s) => key <= s.as_slice(),
            Bound::Unbounded => false,
        }
    }
}

impl<'a> Iterator for MemRangeRev<'a> {
    type Item = (&'a [u8], Option<&'a [u8]>);

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let Some(entry) = self.batch.pop() else {
                let low = self.low.expect("a leaf was read");
                self.fill(Bound::Excluded(low));
                continue;
            };
            if let Some(&ahead) = self
                .batch
                .len()
                .checked_sub(VERSION_PREFETCH_AHEAD)
                .and_then(|i| self.batch.get(i))
            {
                prefetch(ahead.newest.load(Ordering::Acquire));
            }
            if self.before_start(entry.key()) {
                self.done = true;
                return None;
            }
            if let Some(v) = entry.version_at(self.at) {
                return Some((entry.key(), v.value()));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests;
