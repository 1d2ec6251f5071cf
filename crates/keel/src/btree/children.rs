//! A branch's children: [`Child`] references, in chunks shared between the
//! versions of the branch.
//!
//! A writer copies a branch on the path to every child it changes, so the
//! cost of copying one is most of the cost of an insert. Two things make
//! it cheap:
//!
//! - Chunks. Cloning each child would touch each child node's reference
//!   count: some 240 per copy of a 4 KiB branch with short separators.
//!   With children in shared chunks of [`CHUNK`], a copy clones one `Arc`
//!   per chunk, and changing a child copies only its chunk.
//! - Plain references. A [`Child`] is a location and an `Arc`, with no lock
//!   of its own: the lock that lets a checkpoint drop clean children from
//!   a chunk others may be reading (`detach_clean`) is one per chunk, so a
//!   copy of a chunk takes one lock, not one per child. The reference
//!   counts a copy is about to increment are first read with plain loads,
//!   all of them, so that their cache misses overlap instead of each
//!   stalling the locked increment that follows it (measured: with a lock
//!   per child, cloning children was 22% of the time of a transaction of
//!   100 random inserts into a tree of a million entries).

use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::node::{lock, Node};
use super::Location;
use crate::hint::prefetch;

/// A branch's reference to a child: where the child is on disk, and the
/// child itself while it is in memory. A reader takes the in-memory child
/// if present, else loads the page.
#[derive(Clone)]
pub struct Child {
    /// The child's page and checksum, if it was on disk when the
    /// reference was made; a writer clears it before changing the child.
    loc: Option<Location>,
    mem: Option<Arc<Node>>,
}

impl fmt::Debug for Child {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Child")
            .field("loc", &self.location())
            .field("in_memory", &self.mem.is_some())
            .finish()
    }
}

impl Child {
    /// A child known only by its place on disk.
    pub(crate) fn on_disk(loc: Location) -> Child {
        Child {
            loc: Some(loc),
            mem: None,
        }
    }

    /// A child held in memory.
    pub(crate) fn in_memory(node: Arc<Node>) -> Child {
        Child {
            loc: node.location(),
            mem: Some(node),
        }
    }

    /// Where the child is on disk: the recorded place, or that of the
    /// in-memory node once a checkpoint gave it one.
    pub fn location(&self) -> Option<Location> {
        self.loc
            .or_else(|| self.mem.as_ref().and_then(|n| n.location()))
    }

    /// The in-memory node, or else the place to load it from.
    pub(crate) fn resolve(&self) -> Result<Arc<Node>, Location> {
        match &self.mem {
            Some(n) => Ok(Arc::clone(n)),
            None => Err(self.loc.expect("a child is in memory or on disk")),
        }
    }

    /// Both fields, for a writer that owns this child exclusively.
    pub(crate) fn parts_mut(&mut self) -> (&mut Option<Location>, &mut Option<Arc<Node>>) {
        (&mut self.loc, &mut self.mem)
    }

    /// Take the child apart (a writer dropping or merging a child it owns).
    pub(crate) fn into_parts(self) -> (Option<Location>, Option<Arc<Node>>) {
        (self.loc, self.mem)
    }

    /// The reference without its in-memory node, if that node is on disk.
    fn detached(&self) -> Option<Child> {
        let loc = self.mem.as_ref()?.location()?;
        Some(Child::on_disk(loc))
    }

    /// Read the in-memory node's reference count (see the module doc).
    fn warm(&self) -> usize {
        self.mem.as_ref().map_or(0, Arc::strong_count)
    }
}

/// Children per chunk: about the square root of a full branch's children,
/// which balances the chunks a copy clones against the children a change
/// copies.
const CHUNK: usize = 16;

/// Up to [`CHUNK`] children, the first `len` slots filled: one
/// allocation with its reference count, one pointer away from the branch.
///
/// The slots are behind a lock only so that a checkpoint can drop the
/// clean children of a chunk that readers (and other versions of the
/// branch, which share the chunk) may be reading; a writer that owns the
/// chunk reaches them without locking.
#[derive(Debug)]
struct Chunk {
    len: usize,
    slots: Mutex<[Option<Child>; CHUNK]>,
    on_disk: OnDisk,
}

/// A copy of the slots' locations that readers take without the lock:
/// where bit `i` of `ask` is clear, slot `i` holds no in-memory node and
/// its location is `page[i]`/`crc[i]`. A set bit only sends the reader to
/// the lock (`Children::slot`), so a set bit is always right: a writer
/// owning the chunk sets it for any slot it may change; a detach, under
/// the lock, stores the location before it clears the bit (release), and
/// a reader that sees the bit clear (acquire) sees that location. A clear
/// bit's slot changes only in a chunk a writer owns, which no reader
/// sees.
///
/// Most children of a tree read after a checkpoint are on disk: their
/// readers then write nothing shared (with the lock, every reader of a
/// branch wrote the lock's cache line: the root's, on every lookup).
#[derive(Debug)]
struct OnDisk {
    ask: AtomicU32,
    page: [AtomicU64; CHUNK],
    crc: [AtomicU32; CHUNK],
}

impl OnDisk {
    fn new() -> OnDisk {
        OnDisk {
            ask: AtomicU32::new(u32::MAX),
            page: [const { AtomicU64::new(0) }; CHUNK],
            crc: [const { AtomicU32::new(0) }; CHUNK],
        }
    }

    /// Slot `i`'s location, if the copy vouches that it is only on disk.
    #[inline]
    fn location(&self, i: usize) -> Option<Location> {
        if self.ask.load(Ordering::Acquire) & (1 << i) != 0 {
            return None;
        }
        Some(Location {
            page: self.page[i].load(Ordering::Relaxed),
            crc: self.crc[i].load(Ordering::Relaxed),
        })
    }

    /// Record slot `i` as `child` is (a detach under the lock, or a
    /// writer owning the chunk).
    fn record(&self, i: usize, child: &Child) {
        match (&child.mem, child.loc) {
            (None, Some(loc)) => {
                self.page[i].store(loc.page, Ordering::Relaxed);
                self.crc[i].store(loc.crc, Ordering::Relaxed);
                self.ask.fetch_and(!(1 << i), Ordering::Release);
            }
            _ => self.ask_lock(i),
        }
    }

    fn ask_lock(&self, i: usize) {
        self.ask.fetch_or(1 << i, Ordering::Release);
    }

    fn copy(&self) -> OnDisk {
        OnDisk {
            ask: AtomicU32::new(self.ask.load(Ordering::Acquire)),
            page: std::array::from_fn(|i| AtomicU64::new(self.page[i].load(Ordering::Relaxed))),
            crc: std::array::from_fn(|i| AtomicU32::new(self.crc[i].load(Ordering::Relaxed))),
        }
    }
}

impl Clone for Chunk {
    fn clone(&self) -> Chunk {
        let slots = lock(&self.slots);
        // Overlap the misses of the counts about to be incremented.
        std::hint::black_box(slots.iter().flatten().map(Child::warm).sum::<usize>());
        Chunk {
            len: self.len,
            // Under the lock: no detach changes it meanwhile.
            on_disk: self.on_disk.copy(),
            slots: Mutex::new(slots.clone()),
        }
    }
}

impl Chunk {
    fn new() -> Chunk {
        Chunk {
            len: 0,
            slots: Mutex::new([const { None }; CHUNK]),
            on_disk: OnDisk::new(),
        }
    }

    fn slots_mut(&mut self) -> &mut [Option<Child>; CHUNK] {
        self.slots.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    fn get_mut(&mut self, i: usize) -> &mut Child {
        // The writer may change it: readers (of a later version sharing
        // this chunk) ask the lock until a detach records it again.
        self.on_disk.ask_lock(i);
        self.slots_mut()[i].as_mut().expect("a filled slot")
    }

    fn push(&mut self, child: Child) {
        let at = self.len;
        self.on_disk.record(at, &child);
        self.slots_mut()[at] = Some(child);
        self.len += 1;
    }

    /// Take children `at..` out.
    fn drain_from(&mut self, at: usize) -> impl Iterator<Item = Child> + '_ {
        let end = std::mem::replace(&mut self.len, at);
        self.slots_mut()[at..end]
            .iter_mut()
            .map(|c| c.take().expect("a filled slot"))
    }

    fn into_children(shared: Arc<Chunk>) -> impl Iterator<Item = Child> {
        let chunk = Arc::try_unwrap(shared).unwrap_or_else(|shared| (*shared).clone());
        let slots = chunk
            .slots
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        slots.into_iter().flatten()
    }
}

type Shared = Arc<Chunk>;

/// Every chunk holds exactly [`CHUNK`] children but the last, which holds
/// at least one; so child `i` is at `(i / CHUNK, i % CHUNK)`.
#[derive(Debug, Default)]
pub(crate) struct Children {
    chunks: Vec<Shared>,
    len: usize,
}

impl Clone for Children {
    fn clone(&self) -> Children {
        let counts: usize = self.chunks.iter().map(Arc::strong_count).sum();
        std::hint::black_box(counts);
        Children {
            chunks: self.chunks.clone(),
            len: self.len,
        }
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        // Dropping an old version of a branch frees the chunks no newer
        // version shares: overlap the misses of their counts, then of
        // their children's.
        let mut last = 0u64;
        for (i, c) in self.chunks.iter().enumerate().take(64) {
            if Arc::strong_count(c) == 1 {
                last |= 1 << i;
            }
        }
        let mut sum = 0;
        for (i, c) in self.chunks.iter().enumerate().take(64) {
            if last & (1 << i) != 0 {
                sum += lock(&c.slots)
                    .iter()
                    .flatten()
                    .map(Child::warm)
                    .sum::<usize>();
            }
        }
        std::hint::black_box(sum);
    }
}

impl Children {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn slot<R>(&self, i: usize, f: impl FnOnce(&Child) -> R) -> R {
        assert!(i < self.len, "child {i} of {}", self.len);
        let slots = lock(&self.chunks[i / CHUNK].slots);
        f(slots[i % CHUNK].as_ref().expect("a filled slot"))
    }

    /// Child `i` (a copy of the reference).
    pub(crate) fn get(&self, i: usize) -> Child {
        self.slot(i, Child::clone)
    }

    /// Where child `i` is on disk, if it is.
    pub(crate) fn location(&self, i: usize) -> Option<Location> {
        self.only_on_disk(i)
            .or_else(|| self.slot(i, Child::location))
    }

    /// Ask the CPU to start loading the list of chunks (a hint, no
    /// semantics): a lookup calls it on entering a branch, so that the
    /// list arrives while it searches the separators, and finding the
    /// child's chunk then costs one miss to memory less. At 10M keys,
    /// that chunk pointer and the chunk's own lines were most of the
    /// samples of a lookup's `child_or_location`.
    #[inline]
    pub(crate) fn prefetch(&self) {
        // Two lines from the list's start: 16 chunk pointers (256
        // children) if the list starts on a line, and at least 8 (128
        // children) if not. A 4 KiB branch holds at most 120 children
        // with 16-byte user keys (14 bytes a cell and the 20-byte key);
        // one with more children gets its first chunks prefetched, the
        // rest not.
        let start = self.chunks.as_ptr().cast::<u8>();
        prefetch(start);
        prefetch(start.wrapping_add(64));
    }

    /// Where child `i` is, when it is known without the lock to be only
    /// on disk (not in memory); `None` says nothing (see [`OnDisk`]).
    #[inline]
    pub(crate) fn only_on_disk(&self, i: usize) -> Option<Location> {
        assert!(i < self.len, "child {i} of {}", self.len);
        self.chunks[i / CHUNK].on_disk.location(i % CHUNK)
    }

    /// Child `i`, its chunk made this version's own first.
    pub(crate) fn get_mut(&mut self, i: usize) -> &mut Child {
        assert!(i < self.len, "child {i} of {}", self.len);
        Arc::make_mut(&mut self.chunks[i / CHUNK]).get_mut(i % CHUNK)
    }

    pub(crate) fn push(&mut self, child: Child) {
        if self.len % CHUNK == 0 {
            self.chunks.push(Arc::new(Chunk::new()));
        }
        let last = self.chunks.last_mut().expect("a chunk with room");
        Arc::make_mut(last).push(child);
        self.len += 1;
    }

    /// Take children `at..` out (shifting the ones after a change is the
    /// cost of keeping every chunk full).
    fn take_from(&mut self, at: usize) -> Vec<Child> {
        assert!(at <= self.len);
        if at == self.len {
            return Vec::new();
        }
        let (c, off) = (at / CHUNK, at % CHUNK);
        let mut out = Vec::with_capacity(self.len - at);
        if off > 0 {
            out.extend(Arc::make_mut(&mut self.chunks[c]).drain_from(off));
        }
        let first_whole = if off > 0 { c + 1 } else { c };
        for chunk in self.chunks.drain(first_whole..) {
            out.extend(Chunk::into_children(chunk));
        }
        self.len = at;
        out
    }

    pub(crate) fn insert(&mut self, i: usize, child: Child) {
        let tail = self.take_from(i);
        self.push(child);
        tail.into_iter().for_each(|c| self.push(c));
    }

    pub(crate) fn remove(&mut self, i: usize) -> Child {
        let mut tail = self.take_from(i).into_iter();
        let child = tail.next().expect("child i exists");
        tail.for_each(|c| self.push(c));
        child
    }

    /// Move children `at..` into a new list.
    pub(crate) fn split_off(&mut self, at: usize) -> Children {
        let mut right = Children::default();
        self.take_from(at).into_iter().for_each(|c| right.push(c));
        right
    }

    /// Append every child of `right`; its chunks are reused as they are
    /// when ours are full.
    pub(crate) fn append(&mut self, mut right: Children) {
        let theirs = std::mem::take(&mut right.chunks);
        if self.len % CHUNK == 0 {
            self.len += right.len;
            self.chunks.extend(theirs);
        } else {
            for chunk in theirs {
                Chunk::into_children(chunk).for_each(|c| self.push(c));
            }
        }
    }

    /// Drop the in-memory children that are on disk, keeping their
    /// places, in every version of the branch that shares their chunk;
    /// returns every child that was in memory, for the caller to walk (a
    /// clean child may still hold its own children in memory, and stay
    /// alive in a page cache). Readers see each child either way, in
    /// memory or on disk.
    pub(crate) fn detach_clean(&self) -> Vec<Arc<Node>> {
        let mut walk = Vec::new();
        for chunk in &self.chunks {
            let mut slots = lock(&chunk.slots);
            for (i, slot) in slots.iter_mut().enumerate() {
                let Some(slot) = slot else { continue };
                if let Some(node) = &slot.mem {
                    walk.push(Arc::clone(node));
                }
                if let Some(detached) = slot.detached() {
                    *slot = detached;
                    chunk.on_disk.record(i, slot);
                }
            }
        }
        walk
    }

    /// Memory the chunks hold (shared chunks are counted by every holder).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.chunks.capacity() * std::mem::size_of::<Shared>()
            + self.chunks.len() * std::mem::size_of::<Chunk>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btree::leaf::Leaf;
    use crate::btree::node::Body;

    fn child(page: u64) -> Child {
        Child::on_disk(Location { page, crc: 0 })
    }

    fn pages(c: &Children) -> Vec<u64> {
        (0..c.len())
            .map(|i| c.get(i).location().unwrap().page)
            .collect()
    }

    #[test]
    fn keeps_order_through_every_change() {
        let mut c = Children::default();
        let mut model: Vec<u64> = Vec::new();
        for p in 0..100 {
            c.push(child(p));
            model.push(p);
        }
        let shared = c.clone();
        for (i, p) in [(0, 1000), (17, 1001), (50, 1002), (103, 1003), (16, 1004)] {
            c.insert(i, child(p));
            model.insert(i, p);
        }
        for i in [0, 15, 16, 60, 100] {
            assert_eq!(c.remove(i).location().unwrap().page, model.remove(i));
        }
        assert_eq!(pages(&c), model);
        let right = c.split_off(37);
        let right_model = model.split_off(37);
        assert_eq!(pages(&right), right_model);
        c.append(right);
        model.extend(right_model);
        assert_eq!(pages(&c), model);
        *c.get_mut(5) = child(7777);
        model[5] = 7777;
        assert_eq!(pages(&c), model);
        // The clone taken before saw none of it.
        assert_eq!(pages(&shared), (0..100).collect::<Vec<_>>());
        let mut full = Children::default();
        (0..32).for_each(|p| full.push(child(p)));
        full.append(shared);
        assert_eq!(full.len(), 132);
        assert_eq!(full.get(131).location().unwrap().page, 99);
    }

    /// Detaching drops clean children only, from every version sharing
    /// their chunk; a version that made the chunk its own keeps its copy.
    #[test]
    fn detach_drops_clean_children_of_shared_chunks() {
        let node = || Arc::new(Node::new(Body::Leaf(Leaf::default())));
        let mut c = Children::default();
        c.push(Child::in_memory(node()));
        c.push(child(4));
        let clean = node();
        c.push(Child::in_memory(Arc::clone(&clean)));
        clean.set_location(Location { page: 9, crc: 1 });
        let sharing = c.clone();
        let mut own = c.clone();
        *own.get_mut(1) = child(5);
        let walked = c.detach_clean();
        assert_eq!(walked.len(), 2);
        assert!(c.get(0).resolve().is_ok(), "a dirty child stays");
        assert_eq!(c.get(2).resolve().unwrap_err().page, 9);
        assert_eq!(sharing.get(2).resolve().unwrap_err().page, 9);
        assert!(own.get(2).resolve().is_ok(), "a copied chunk is its own");
        // The lock-free copy of the locations agrees.
        assert_eq!(c.only_on_disk(0), None, "in memory: ask the lock");
        assert_eq!(c.only_on_disk(1).unwrap().page, 4);
        assert_eq!(c.only_on_disk(2).unwrap().page, 9);
        assert_eq!(sharing.only_on_disk(2).unwrap().page, 9);
        assert_eq!(own.only_on_disk(1), None, "changed by its writer");
        assert_eq!(own.only_on_disk(2), None, "a copied chunk is its own");
        // Held by `clean`, `walked` and `own`'s chunk.
        assert_eq!(Arc::strong_count(&clean), 3);
    }
}
