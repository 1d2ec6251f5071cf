//! The store's memtable: every change committed since the last checkpoint,
//! in key order, each key with its versions by LSN.
//!
//! Why it exists: applying a commit to the copy-on-write B+tree copies
//! every 4 KiB leaf (and most level-1 branches) the commit touches, and a
//! transaction of 100 random puts into a tree of a million keys touches
//! ~100 leaves: ~250 µs of memory-bound copying per transaction, more
//! than the journal's write it is meant to hide behind (profiled,
//! docs/bench-commit.md). Here a commit inserts each change once into a
//! structure that is changed in place, and a checkpoint folds the whole
//! memtable into the tree at once, so that the many changes landing in one
//! leaf share one copy of it.
//!
//! Shape: a B+tree of small nodes ([`FANOUT`] slots) in memory, with one
//! writer at a time (the store's writer slot; [`MemTable::writer`] takes
//! a lock that makes it so) and any number of readers that never wait:
//!
//! - A node's keys never change once it is reachable: the writer replaces
//!   a leaf with a changed copy and stores the copy's address into the
//!   parent's child slot (one atomic store); a split copies the parent
//!   too. A reader follows either the old or the new node, and both hold
//!   every entry that existed before the reader began. Replaced nodes are
//!   freed through epoch-based reclamation (`crossbeam-epoch`) once no
//!   reader can still be inside them; a reader pins the epoch only for
//!   the length of one call (a `get`, or one leaf's worth of a scan).
//! - An entry (a key and its versions) is made once and never moves or
//!   goes away while the memtable lives: a delete is a version without a
//!   value. New versions are pushed at the front of the entry's list with
//!   one atomic store; versions never change once pushed.
//! - Readers see versions by LSN: a snapshot at LSN *S* takes, for each
//!   key, the newest version at or below *S* (multi-version concurrency:
//!   the writer applies commits before they are durable, readers see only
//!   what is).
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
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned, Shared};

/// A log sequence number: the journal's numbering of commits.
pub type Lsn = u64;

/// Slots per node. A leaf copy (the cost of an insert of a new key) moves
/// about a KiB at 32.
const FANOUT: usize = 32;
/// Key bytes compared inline in a node, without reading the entry.
pub const HEAD_BYTES: usize = 24;
/// The deepest a tree of at least [`FANOUT`] / 2 slots per node can be
/// with 2^64 entries (16^16); a bound for the writer's path.
const MAX_DEPTH: usize = 32;

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
            // memtable (entries are freed only by its `Drop`), and the
            // caller borrows the memtable.
            CmpOrdering::Equal => self.key.cmp(unsafe { &(*entry).key }),
            o => o,
        }
    }
}

/// One version of a key: its value, or none for a deletion.
#[derive(Debug)]
struct Version {
    lsn: Lsn,
    value: Option<Arc<[u8]>>,
    /// The version before this one (older LSN), or null. Never changes.
    older: *const Version,
}

/// A key and its versions, newest first.
#[derive(Debug)]
struct Entry {
    key: Box<[u8]>,
    newest: AtomicPtr<Version>,
}

impl Entry {
    /// The newest version at or below `at`.
    fn version_at(&self, at: Lsn) -> Option<&Version> {
        let mut v = self.newest.load(Ordering::Acquire).cast_const();
        // SAFETY: versions are published with a release store after they
        // are complete and are freed only by the memtable's `Drop`; the
        // caller borrows the memtable.
        while let Some(version) = unsafe { v.as_ref() } {
            if version.lsn <= at {
                return Some(version);
            }
            v = version.older;
        }
        None
    }
}

/// A node: a leaf (entries) or an inner node (children). Never changed
/// once reachable, except an inner node's child slots (see the module
/// doc).
struct Node {
    /// Slots in use.
    len: usize,
    /// Leaf: the heads of the entries' keys. Inner: `heads[i]` and
    /// `entries[i]`, for `i >= 1`, are the separator before child `i`
    /// (the smallest key under it); slot 0 is unused.
    heads: [Head; FANOUT],
    entries: [*const Entry; FANOUT],
    /// Inner nodes only.
    children: Option<Box<[Atomic<Node>; FANOUT]>>,
}

impl Node {
    fn leaf() -> Node {
        Node {
            len: 0,
            heads: [Head::default(); FANOUT],
            entries: [ptr::null(); FANOUT],
            children: None,
        }
    }

    fn inner() -> Node {
        Node {
            children: Some(Box::new(std::array::from_fn(|_| Atomic::null()))),
            ..Node::leaf()
        }
    }

    fn is_leaf(&self) -> bool {
        self.children.is_none()
    }

    fn children(&self) -> &[Atomic<Node>; FANOUT] {
        self.children.as_ref().expect("an inner node")
    }

    /// Read one word of each cache line of the heads in use: loads that do
    /// not depend on each other, so that their misses overlap, before the
    /// binary search's dependent ones (each would stall on its own miss in
    /// a cold node: measured 1.4 against 1.1 µs per insert at a million
    /// keys without).
    fn warm(&self) {
        let mut sum = 0u64;
        let mut i = 0;
        while i < self.len {
            sum = sum.wrapping_add(self.heads[i].0[0]);
            i += 64 / std::mem::size_of::<Head>() + 1;
        }
        std::hint::black_box(sum);
    }

    /// Leaf: the slot of `probe`'s key, or where it would go.
    fn search(&self, probe: &Probe<'_>) -> Result<usize, usize> {
        self.warm();
        let (mut lo, mut hi) = (0, self.len);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match probe.cmp(self.heads[mid], self.entries[mid]) {
                CmpOrdering::Greater => lo = mid + 1,
                CmpOrdering::Less => hi = mid,
                CmpOrdering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    /// Inner: the child whose keys include `probe`'s.
    fn child_index(&self, probe: &Probe<'_>) -> usize {
        // The number of separators (slots 1..len) at or below the probe.
        self.warm();
        let (mut lo, mut hi) = (1, self.len);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if probe.cmp(self.heads[mid], self.entries[mid]) == CmpOrdering::Less {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo - 1
    }

    /// A copy of slots `from..to` (children loaded by the one writer).
    fn copy_range(&self, from: usize, to: usize, guard: &Guard) -> Node {
        let mut n = if self.is_leaf() {
            Node::leaf()
        } else {
            Node::inner()
        };
        n.len = to - from;
        n.heads[..n.len].copy_from_slice(&self.heads[from..to]);
        n.entries[..n.len].copy_from_slice(&self.entries[from..to]);
        if let (Some(src), Some(dst)) = (&self.children, &mut n.children) {
            for (d, s) in dst.iter_mut().zip(&src[from..to]) {
                *d = Atomic::from(s.load(Ordering::Relaxed, guard));
            }
        }
        n
    }

    /// Shift slots `at..len` one right and put `(head, entry, child)` at
    /// `at`. The node must not be reachable yet and must have room.
    fn insert_slot(
        &mut self,
        at: usize,
        head: Head,
        entry: *const Entry,
        child: Option<Shared<'_, Node>>,
    ) {
        debug_assert!(self.len < FANOUT);
        self.heads.copy_within(at..self.len, at + 1);
        self.entries.copy_within(at..self.len, at + 1);
        self.heads[at] = head;
        self.entries[at] = entry;
        if let Some(children) = &mut self.children {
            children[at..=self.len].rotate_right(1);
            children[at] = Atomic::from(child.expect("an inner slot has a child"));
        }
        self.len += 1;
    }
}

/// A changed node on its way up: it replaces the node at this level, and
/// if it split, `right` (with the smallest key under it) goes beside it.
struct Up {
    node: Owned<Node>,
    right: Option<(Head, *const Entry, Owned<Node>)>,
}

/// The memtable. See the module doc.
pub struct MemTable {
    root: Atomic<Node>,
    writer: Mutex<()>,
    /// Bytes held: keys, values, entries, versions and a share of nodes.
    bytes: AtomicU64,
    entries: AtomicU64,
    versions: AtomicU64,
    /// The highest LSN inserted.
    last_lsn: AtomicU64,
}

// SAFETY: the raw pointers inside (entries, versions) point to data the
// memtable owns and never changes once published (except through atomics);
// changes are made only by the one writer (`writer`'s lock) and published
// with release stores that readers acquire. `Arc<[u8]>` values are Send and
// Sync.
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

/// Bytes counted for an entry besides its key: the entry, its node slot
/// and a node's share of splits (half-full nodes on random inserts).
const ENTRY_OVERHEAD_BYTES: u64 = 96;
/// Bytes counted for a version besides its value.
const VERSION_OVERHEAD_BYTES: u64 = 48;

impl MemTable {
    /// An empty memtable.
    pub fn new() -> MemTable {
        MemTable {
            root: Atomic::null(),
            writer: Mutex::new(()),
            bytes: AtomicU64::new(0),
            entries: AtomicU64::new(0),
            versions: AtomicU64::new(0),
            last_lsn: AtomicU64::new(0),
        }
    }

    /// Keys held (each with one version or more).
    pub fn len(&self) -> u64 {
        self.entries.load(Ordering::Relaxed)
    }

    /// Whether no key was inserted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Versions held, over all keys.
    pub fn versions(&self) -> u64 {
        self.versions.load(Ordering::Relaxed)
    }

    /// An estimate of the memory held, in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// The highest LSN inserted (0 if none).
    pub fn last_lsn(&self) -> Lsn {
        self.last_lsn.load(Ordering::Acquire)
    }

    /// The writer: one at a time (waits for the one before).
    pub fn writer(&self) -> MemWriter<'_> {
        MemWriter {
            mem: self,
            _lock: self.writer.lock().unwrap_or_else(PoisonError::into_inner),
        }
    }

    /// The newest version of `key` at or below `at`: `None` if the
    /// memtable has none (look further down), `Some(None)` if it is a
    /// deletion.
    pub fn get(&self, key: &[u8], at: Lsn) -> Option<Option<&Arc<[u8]>>> {
        let guard = epoch::pin();
        let probe = Probe::new(key);
        let mut node = self.root.load(Ordering::Acquire, &guard);
        // SAFETY: a node loaded under the pinned guard is not freed until
        // the guard is dropped (it is retired through the epoch), and a
        // reachable node is complete (published with a release store).
        while let Some(n) = unsafe { node.as_ref() } {
            if n.is_leaf() {
                let slot = n.search(&probe).ok()?;
                // SAFETY: entries live as long as the memtable, which
                // `self` borrows.
                let entry = unsafe { &*n.entries[slot] };
                return entry.version_at(at).map(|v| v.value.as_ref());
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

    /// Entries from the leaf holding `start`, from `start` on, into `out`;
    /// returns the smallest key of the leaves after that one (the
    /// separator where the path to it turned left last), if any.
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
                let first = match &probe {
                    None => 0,
                    Some(p) => match n.search(p) {
                        Ok(i) if exclusive => i + 1,
                        Ok(i) | Err(i) => i,
                    },
                };
                // SAFETY: entries live as long as the memtable ('a).
                out.extend(n.entries[first..n.len].iter().map(|&e| unsafe { &*e }));
                break;
            }
            let i = probe.as_ref().map_or(0, |p| n.child_index(p));
            if i + 1 < n.len {
                after = n.entries[i + 1];
            }
            node = n.children()[i].load(Ordering::Acquire, &guard);
        }
        // SAFETY: as above.
        unsafe { after.as_ref() }.map(|e| &*e.key)
    }

    /// Every node reachable from the root, for `Drop` and tests.
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
                stack.extend(
                    children[..owned.len]
                        .iter()
                        .map(|c| c.load(Ordering::Relaxed, guard)),
                );
            }
            f(owned);
        }
    }
}

impl Drop for MemTable {
    fn drop(&mut self) {
        self.for_each_node(|node| {
            if node.is_leaf() {
                for &e in &node.entries[..node.len] {
                    // SAFETY: each entry is in exactly one reachable leaf;
                    // it and its versions were made with `Box::into_raw`.
                    let entry = unsafe { Box::from_raw(e.cast_mut()) };
                    let mut v = entry.newest.load(Ordering::Relaxed);
                    while !v.is_null() {
                        // SAFETY: each version is in exactly one chain.
                        let version = unsafe { Box::from_raw(v) };
                        v = version.older.cast_mut();
                    }
                }
            }
        });
    }
}

/// The one writer of a memtable (see [`MemTable::writer`]).
pub struct MemWriter<'m> {
    mem: &'m MemTable,
    _lock: MutexGuard<'m, ()>,
}

impl MemWriter<'_> {
    /// Add a version of `key` made by the commit at `lsn`: `value`, or a
    /// deletion for `None`. LSNs of one key must not go down.
    pub fn insert(&mut self, key: &[u8], lsn: Lsn, value: Option<Arc<[u8]>>) {
        let mem = self.mem;
        let value_bytes = value.as_ref().map_or(0, |v| v.len() as u64);
        let guard = epoch::pin();
        let probe = Probe::new(key);
        let mut path: [(Shared<'_, Node>, usize); MAX_DEPTH] = [(Shared::null(), 0); MAX_DEPTH];
        let mut depth = 0;
        let mut node = mem.root.load(Ordering::Relaxed, &guard);
        // SAFETY (this loop and below): only this writer changes nodes, and
        // a node it reached from the root is not retired before it is
        // replaced below, under the pinned guard.
        while let Some(n) = unsafe { node.as_ref() } {
            if n.is_leaf() {
                break;
            }
            let i = n.child_index(&probe);
            path[depth] = (node, i);
            depth += 1;
            node = n.children()[i].load(Ordering::Relaxed, &guard);
        }
        let version = |older: *const Version| {
            Box::into_raw(Box::new(Version {
                lsn,
                value: value.clone(),
                older,
            }))
        };
        let leaf = unsafe { node.as_ref() };
        let at = match leaf.map(|l| l.search(&probe)) {
            Some(Ok(slot)) => {
                // SAFETY: entries live as long as the memtable.
                let entry = unsafe { &*leaf.expect("a leaf").entries[slot] };
                let older = entry.newest.load(Ordering::Relaxed);
                // SAFETY: a version is never freed while the memtable lives.
                debug_assert!(unsafe { (*older).lsn } <= lsn, "lsns of a key go up");
                entry.newest.store(version(older), Ordering::Release);
                mem.note(lsn, 0, VERSION_OVERHEAD_BYTES + value_bytes);
                return;
            }
            Some(Err(at)) => at,
            None => 0,
        };
        let entry: *const Entry = Box::into_raw(Box::new(Entry {
            key: key.into(),
            newest: AtomicPtr::new(version(ptr::null())),
        }));
        let mut up = {
            let mut n = match leaf {
                Some(l) => l.copy_range(0, l.len, &guard),
                None => Node::leaf(),
            };
            Self::put_slot(&mut n, at, probe.head, entry, None, &guard)
        };
        // Carry the change up until a node takes it without splitting.
        // The nodes it replaces are retired only after the store that
        // unlinks them.
        let mut replaced = [Shared::null(); MAX_DEPTH + 1];
        let mut retired = 0;
        replaced[retired] = node;
        retired += 1;
        loop {
            let Some(d) = depth.checked_sub(1) else {
                // The root changed.
                let new_root = match up.right {
                    None => up.node,
                    Some((head, sep, right)) => {
                        let mut r = Node::inner();
                        let left = up.node.into_shared(&guard);
                        let right = right.into_shared(&guard);
                        r.insert_slot(0, Head::default(), ptr::null(), Some(left));
                        r.insert_slot(1, head, sep, Some(right));
                        Owned::new(r)
                    }
                };
                mem.root.store(new_root, Ordering::Release);
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
                    let mut n = p.copy_range(0, p.len, &guard);
                    n.children.as_mut().expect("inner")[i] = Atomic::from(up.node);
                    let right = right.into_shared(&guard);
                    up = Self::put_slot(&mut n, i + 1, head, sep, Some(right), &guard);
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
        mem.entries.fetch_add(1, Ordering::Relaxed);
        mem.note(
            lsn,
            key.len() as u64 + ENTRY_OVERHEAD_BYTES,
            VERSION_OVERHEAD_BYTES + value_bytes,
        );
    }

    /// Put a slot into the unpublished node `n` (splitting it in two if
    /// full) and return what goes up.
    fn put_slot(
        n: &mut Node,
        at: usize,
        head: Head,
        entry: *const Entry,
        child: Option<Shared<'_, Node>>,
        guard: &Guard,
    ) -> Up {
        if n.len < FANOUT {
            n.insert_slot(at, head, entry, child);
            return Up {
                node: Owned::new(std::mem::replace(n, Node::leaf())),
                right: None,
            };
        }
        let half = FANOUT / 2;
        let mut right = n.copy_range(half, FANOUT, guard);
        let mut left = n.copy_range(0, half, guard);
        if at <= half {
            left.insert_slot(at, head, entry, child);
        } else {
            right.insert_slot(at - half, head, entry, child);
        }
        // The right node's smallest key goes up as the separator; an inner
        // node keeps slot 0 without one.
        let (sep_head, sep) = (right.heads[0], right.entries[0]);
        if !right.is_leaf() {
            right.heads[0] = Head::default();
            right.entries[0] = ptr::null();
        }
        Up {
            node: Owned::new(left),
            right: Some((sep_head, sep, Owned::new(right))),
        }
    }
}

impl MemTable {
    fn note(&self, lsn: Lsn, entry_bytes: u64, version_bytes: u64) {
        self.bytes
            .fetch_add(entry_bytes + version_bytes, Ordering::Relaxed);
        self.versions.fetch_add(1, Ordering::Relaxed);
        self.last_lsn.fetch_max(lsn, Ordering::Release);
    }
}

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
    }

    fn past_end(&self, key: &[u8]) -> bool {
        match &self.end {
            Bound::Included(e) => key > e.as_slice(),
            Bound::Excluded(e) => key >= e.as_slice(),
            Bound::Unbounded => false,
        }
    }
}

impl<'a> Iterator for MemRange<'a> {
    type Item = (&'a [u8], Option<&'a Arc<[u8]>>);

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let Some(&entry) = self.batch.get(self.next) else {
                let last: &'a Entry = self.batch[self.batch.len() - 1];
                self.fill(Bound::Excluded(&last.key));
                continue;
            };
            self.next += 1;
            if self.past_end(&entry.key) {
                self.done = true;
                return None;
            }
            if let Some(v) = entry.version_at(self.at) {
                return Some((&entry.key, v.value.as_ref()));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests;
