//! Leaves: entries sorted by key, and the overflow values some of them
//! hold.
//!
//! A leaf is laid out for copy-on-write. Its slots are plain 16-byte
//! records (no reference counts, no owned buffers), so copying them is one
//! `memcpy`; every key and inline value lives in one byte arena, copied by
//! a second. Up to 32 slots (a 4 KiB page of 100-byte values holds ~30)
//! sit inline in the node, so a lookup that reached the node finds them
//! without one more dependent load: on a tree larger than the CPU's
//! caches that load is a miss to memory, and r1 at a million keys ran
//! ~11 % faster at one thread without it (docs/store-performance.md).
//! Overflow values, rare, sit in a side list that is empty (and
//! unallocated) in most leaves. A copy is given room for a page's worth of
//! bytes, so that the insert that caused it does not reallocate, and so
//! that the allocator sees buffers of one size, which it recycles cheaply.

use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};

use super::arena::{cmp_prefixed, key_prefix, warm, Arena};
use super::node::lock;
use super::page::{
    LEAF_INLINE_CELL_FIXED_BYTES, LEAF_OVERFLOW_CELL_FIXED_BYTES, PAGE_HEADER_BYTES,
};
use super::{Location, PageNo};

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
        OverflowValue::shared(Arc::from(bytes))
    }

    /// A value not yet on disk, whose bytes the caller already holds.
    pub(crate) fn shared(bytes: Arc<[u8]>) -> OverflowValue {
        OverflowValue {
            len: bytes.len() as u64,
            location: OnceLock::new(),
            pages: OnceLock::new(),
            mem: Mutex::new(Some(bytes)),
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

    /// Reserve the chain's pages (a checkpoint, before encoding it).
    pub(crate) fn reserve_pages(&self, pages: Box<[PageNo]>) {
        assert!(
            self.pages.set(pages).is_ok(),
            "overflow value reserved twice: two checkpoints ran at once"
        );
    }

    /// The chain is encoded: its first page and that page's checksum.
    pub(crate) fn set_location(&self, first: Location) {
        debug_assert_eq!(self.pages().map(|p| p[0]), Some(first.page));
        assert!(
            self.location.set(first).is_ok(),
            "overflow value placed twice: two checkpoints ran at once"
        );
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

/// A value as a leaf holds it: the bytes, or a reference to an overflow
/// chain.
#[derive(Clone, Copy, Debug)]
pub enum ValueRef<'a> {
    /// The value's bytes, in the leaf.
    Inline(&'a [u8]),
    /// A value on overflow pages (or held in memory until a checkpoint
    /// writes it there).
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

/// One change for [`Leaf::merged`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum Merge<'a> {
    Put(&'a [u8], ValueRef<'a>),
    Remove(&'a [u8]),
}

impl Merge<'_> {
    fn key(&self) -> &[u8] {
        match self {
            Merge::Put(k, _) | Merge::Remove(k) => k,
        }
    }

    /// The arena bytes the change adds at most.
    fn arena_bytes(&self) -> usize {
        match self {
            Merge::Put(k, ValueRef::Inline(v)) => k.len() + v.len(),
            Merge::Put(k, ValueRef::Overflow(_)) => k.len() + OVERFLOW_INDEX_BYTES,
            Merge::Remove(_) => 0,
        }
    }
}

/// [`Slot::value`] of an entry whose value is in overflow pages: the
/// arena then holds, after the key, the value's index in
/// [`Leaf::overflow`] as 4 little-endian bytes. Inline values are at most
/// a quarter of the largest page (16 KiB), so the marker is never a
/// length.
const OVERFLOW_MARK: u16 = u16::MAX;
const OVERFLOW_INDEX_BYTES: usize = 4;

/// One entry: where its key (and inline value, right after the key) is in
/// the arena, and the key's first 8 bytes for the binary search.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    prefix: u64,
    off: u32,
    key_len: u16,
    /// The inline value's length, or [`OVERFLOW_MARK`].
    value: u16,
}
const _: () = assert!(std::mem::size_of::<Slot>() == 16);

impl Slot {
    fn is_overflow(self) -> bool {
        self.value == OVERFLOW_MARK
    }

    /// The arena bytes the entry takes.
    fn arena_bytes(self) -> usize {
        usize::from(self.key_len)
            + if self.is_overflow() {
                OVERFLOW_INDEX_BYTES
            } else {
                usize::from(self.value)
            }
    }

    /// The bytes the entry takes in a page.
    fn cell_bytes(self) -> usize {
        usize::from(self.key_len)
            + if self.is_overflow() {
                LEAF_OVERFLOW_CELL_FIXED_BYTES
            } else {
                LEAF_INLINE_CELL_FIXED_BYTES + usize::from(self.value)
            }
    }

    fn value_off(self) -> u32 {
        self.off + u32::from(self.key_len)
    }
}

/// Slots kept inline in the node up to this many entries.
const INLINE_SLOTS: usize = 32;

/// A leaf's slots: inline in the node (so a lookup reaches them without
/// one more dependent load) up to [`INLINE_SLOTS`], else on the heap.
type Slots = smallvec::SmallVec<[Slot; INLINE_SLOTS]>;

/// Entries sorted by key.
#[derive(Clone, Debug)]
pub struct Leaf {
    slots: Slots,
    arena: Arena,
    /// The values in overflow pages, in no particular order.
    overflow: Vec<Arc<OverflowValue>>,
    encoded_bytes: usize,
}

impl Default for Leaf {
    fn default() -> Self {
        Leaf::with_capacity(0, 0)
    }
}

impl Leaf {
    /// An empty leaf with room for `entries` entries and `arena_bytes` of
    /// keys and values.
    pub(crate) fn with_capacity(entries: usize, arena_bytes: usize) -> Leaf {
        Leaf {
            slots: Slots::with_capacity(entries),
            arena: Arena::with_capacity(arena_bytes),
            overflow: Vec::new(),
            encoded_bytes: PAGE_HEADER_BYTES,
        }
    }

    /// A copy for a writer to change, with room to grow to `page_bytes`
    /// without reallocating. A copy made while a third or more of the
    /// arena is garbage leaves the garbage behind.
    pub(crate) fn copy_for_write(&self, page_bytes: usize) -> Leaf {
        let mut slots = Slots::with_capacity((self.slots.len() + 1).next_power_of_two());
        slots.extend_from_slice(&self.slots);
        let mut copy = Leaf {
            slots,
            arena: Arena::default(),
            overflow: self.overflow.clone(),
            encoded_bytes: self.encoded_bytes,
        };
        if self.arena.garbage * 3 >= self.arena.len() && self.arena.garbage > 0 {
            copy.arena = Arena::with_capacity(page_bytes);
            for slot in &mut copy.slots {
                slot.off = copy
                    .arena
                    .push(self.arena.slice(slot.off, slot.arena_bytes()));
            }
        } else {
            copy.arena = self.arena.copy_with_capacity(page_bytes);
        }
        copy
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
        let s = self.slots[i];
        self.arena.slice(s.off, usize::from(s.key_len))
    }

    /// The value of entry `i`.
    pub fn value(&self, i: usize) -> ValueRef<'_> {
        let s = self.slots[i];
        if s.is_overflow() {
            ValueRef::Overflow(&self.overflow[self.overflow_index(s)])
        } else {
            ValueRef::Inline(self.arena.slice(s.value_off(), usize::from(s.value)))
        }
    }

    fn overflow_index(&self, s: Slot) -> usize {
        let b = self.arena.slice(s.value_off(), OVERFLOW_INDEX_BYTES);
        u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize
    }

    fn set_overflow_index(&mut self, s: Slot, index: usize) {
        let index = u32::try_from(index).expect("a leaf holds few overflow values");
        self.arena
            .slice_mut(s.value_off(), OVERFLOW_INDEX_BYTES)
            .copy_from_slice(&index.to_le_bytes());
    }

    /// Binary search: `Ok(i)` if entry `i` has `key`, else `Err(i)` where
    /// it would go.
    pub fn search(&self, key: &[u8]) -> Result<usize, usize> {
        let prefix = key_prefix(key);
        warm(&self.slots, |s| s.prefix);
        self.slots.binary_search_by(|s| {
            cmp_prefixed(
                s.prefix,
                || self.arena.slice(s.off, usize::from(s.key_len)),
                key,
                prefix,
            )
        })
    }

    /// The bytes entry `i` takes in a page.
    pub(crate) fn cell_bytes(&self, i: usize) -> usize {
        self.slots[i].cell_bytes()
    }

    /// The bytes the leaf takes in a page, header included.
    pub fn encoded_bytes(&self) -> usize {
        self.encoded_bytes
    }

    /// Put `key` and `value` in the arena; returns the entry's slot.
    fn make_slot(&mut self, key: &[u8], value: ValueRef<'_>) -> Slot {
        let key_len = u16::try_from(key.len()).expect("keys are shorter than a page");
        let off = self.arena.push(key);
        Slot {
            prefix: key_prefix(key),
            off,
            key_len,
            value: self.push_value(value),
        }
    }

    /// Put a value in the arena right after its key (just pushed); returns
    /// [`Slot::value`].
    fn push_value(&mut self, value: ValueRef<'_>) -> u16 {
        match value {
            ValueRef::Inline(v) => {
                let len = u16::try_from(v.len())
                    .ok()
                    .filter(|&l| l != OVERFLOW_MARK)
                    .expect("inline values are at most a quarter page");
                self.arena.push(v);
                len
            }
            ValueRef::Overflow(o) => {
                let index = u32::try_from(self.overflow.len()).expect("few overflow values");
                self.arena.push(&index.to_le_bytes());
                self.overflow.push(Arc::clone(o));
                OVERFLOW_MARK
            }
        }
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
        let old = self.slots[i];
        if let ValueRef::Inline(v) = value {
            if !old.is_overflow() && usize::from(old.value) == v.len() {
                // The common update: same length, overwritten in place.
                self.arena
                    .slice_mut(old.value_off(), v.len())
                    .copy_from_slice(v);
                return None;
            }
        }
        self.encoded_bytes -= old.cell_bytes();
        self.encoded_bytes += value.cell_bytes(usize::from(old.key_len));
        // The key is copied along: an entry's bytes are contiguous.
        let off = self.arena.push_within(old.off, usize::from(old.key_len));
        self.slots[i] = Slot {
            off,
            value: self.push_value(value),
            ..old
        };
        self.arena.release(old.arena_bytes());
        let freed = if old.is_overflow() {
            self.drop_unreferenced_overflow().pop()
        } else {
            None
        };
        self.compact_if_needed();
        freed
    }

    /// Rebuild the overflow list from the slots; returns the values no
    /// slot refers to any more.
    fn drop_unreferenced_overflow(&mut self) -> Vec<Arc<OverflowValue>> {
        let mut old: Vec<Option<Arc<OverflowValue>>> = std::mem::take(&mut self.overflow)
            .into_iter()
            .map(Some)
            .collect();
        for i in 0..self.slots.len() {
            let s = self.slots[i];
            if s.is_overflow() {
                let value = old[self.overflow_index(s)]
                    .take()
                    .expect("each overflow value has one slot");
                self.set_overflow_index(s, self.overflow.len());
                self.overflow.push(value);
            }
        }
        old.into_iter().flatten().collect()
    }

    /// Remove the entries in `range`; returns their overflow values.
    pub(crate) fn remove_range(&mut self, range: Range<usize>) -> Vec<Arc<OverflowValue>> {
        let mut any_overflow = false;
        for s in &self.slots[range.clone()] {
            self.arena.release(s.arena_bytes());
            self.encoded_bytes -= s.cell_bytes();
            any_overflow |= s.is_overflow();
        }
        self.slots.drain(range);
        let freed = if any_overflow {
            self.drop_unreferenced_overflow()
        } else {
            Vec::new()
        };
        self.compact_if_needed();
        freed
    }

    /// The leaf with `changes` applied, built in one pass over both: the
    /// changes' keys must be strictly ascending. Returns the new leaf and
    /// the overflow values it no longer holds (replaced or removed).
    ///
    /// Why: a checkpoint's fold lands some 15 sorted changes in each leaf
    /// of a large tree; copying the leaf and then searching and inserting
    /// one change at a time (each a binary search over a cold leaf and a
    /// shift of the slots) was most of the fold's time.
    pub(crate) fn merged(&self, changes: &[Merge<'_>]) -> (Leaf, Vec<Arc<OverflowValue>>) {
        debug_assert!(changes.windows(2).all(|w| w[0].key() < w[1].key()));
        let added: usize = changes.iter().map(Merge::arena_bytes).sum();
        let live = self.arena.len() - self.arena.garbage;
        let mut out = Leaf::with_capacity(self.len() + changes.len(), live + added);
        let mut dropped = Vec::new();
        let mut i = 0;
        for change in changes {
            let key = change.key();
            let prefix = key_prefix(key);
            while let Some(&s) = self.slots.get(i) {
                let stored = || self.arena.slice(s.off, usize::from(s.key_len));
                match cmp_prefixed(s.prefix, stored, key, prefix) {
                    std::cmp::Ordering::Less => {
                        out.push_from(self, i);
                        i += 1;
                    }
                    std::cmp::Ordering::Equal => {
                        if let ValueRef::Overflow(o) = self.value(i) {
                            dropped.push(Arc::clone(o));
                        }
                        i += 1;
                        break;
                    }
                    std::cmp::Ordering::Greater => break,
                }
            }
            if let Merge::Put(key, value) = *change {
                out.push(key, value);
            }
        }
        for i in i..self.len() {
            out.push_from(self, i);
        }
        (out, dropped)
    }

    /// Append entry `i` of `other`, whose key sorts after every key here.
    fn push_from(&mut self, other: &Leaf, i: usize) {
        let s = other.slots[i];
        if s.is_overflow() {
            return self.push(other.key(i), other.value(i));
        }
        // Key and inline value are contiguous: one copy.
        let off = self.arena.push(other.arena.slice(s.off, s.arena_bytes()));
        self.encoded_bytes += s.cell_bytes();
        self.slots.push(Slot { off, ..s });
    }

    /// Move entries `at..` into a new leaf.
    pub(crate) fn split_off(&mut self, at: usize) -> Leaf {
        let arena_bytes: usize = self.slots[at..].iter().map(|s| s.arena_bytes()).sum();
        let mut right = Leaf::with_capacity(self.len() - at, arena_bytes);
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
        self.overflow.shrink_to_fit();
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
        let live = self.arena.len() - self.arena.garbage;
        let mut fresh = Arena::with_capacity(live);
        for slot in &mut self.slots {
            slot.off = fresh.push(self.arena.slice(slot.off, slot.arena_bytes()));
        }
        self.arena = fresh;
    }

    /// Every overflow value of the leaf.
    pub(crate) fn overflow_values(&self) -> impl Iterator<Item = &Arc<OverflowValue>> {
        self.overflow.iter()
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.arena.heap_bytes()
            + if self.slots.spilled() {
                self.slots.capacity() * std::mem::size_of::<Slot>()
            } else {
                0
            }
            + self.overflow.capacity() * std::mem::size_of::<Arc<OverflowValue>>()
            + self.overflow.len() * std::mem::size_of::<OverflowValue>()
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
        assert!(l.arena.len() < 200 * 14, "arena compacted");
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

    fn overflow(len: u64) -> Arc<OverflowValue> {
        Arc::new(OverflowValue::on_disk(Location { page: len, crc: 0 }, len))
    }

    fn overflow_len(l: &Leaf, i: usize) -> Option<u64> {
        match l.value(i) {
            ValueRef::Overflow(o) => Some(o.len()),
            ValueRef::Inline(_) => None,
        }
    }

    /// Overflow values keep their entries through every change, and a
    /// replaced or removed one is handed back exactly once.
    #[test]
    fn overflow_values_follow_their_entries() {
        let mut l = Leaf::default();
        for (i, k) in [b"a", b"b", b"c", b"d", b"e"].iter().enumerate() {
            l.push(*k, ValueRef::Overflow(&overflow(5000 + i as u64)));
        }
        assert_eq!(l.overflow_values().count(), 5);
        let removed = l.remove_range(1..3);
        let mut lens: Vec<u64> = removed.iter().map(|o| o.len()).collect();
        lens.sort_unstable();
        assert_eq!(lens, vec![5001, 5002]);
        assert_eq!(l.key(1), b"d");
        assert_eq!(overflow_len(&l, 1), Some(5003));
        let old = l.set_value(0, ValueRef::Inline(b"small")).unwrap();
        assert_eq!(old.len(), 5000);
        assert!(l.set_value(0, ValueRef::Inline(b"other")).is_none());
        assert!(matches!(l.value(0), ValueRef::Inline(b"other")));
        let old = l.set_value(2, ValueRef::Overflow(&overflow(7000))).unwrap();
        assert_eq!(old.len(), 5004);
        let copy = l.copy_for_write(4096);
        let want = [None, Some(5003), Some(7000)];
        for (leaf, name) in [(&l, "original"), (&copy, "copy")] {
            let got: Vec<_> = (0..3).map(|i| overflow_len(leaf, i)).collect();
            assert_eq!(got, want, "{name}");
            assert_eq!(leaf.overflow_values().count(), 2, "{name}");
        }
        let right = l.split_off(1);
        assert_eq!(
            (overflow_len(&right, 0), overflow_len(&right, 1)),
            (Some(5003), Some(7000))
        );
        assert_eq!(l.overflow_values().count(), 0);
        l.append(&right);
        assert_eq!(l.encoded_bytes(), copy.encoded_bytes());
    }

    /// A copy leaves heavy garbage behind and keeps every entry.
    #[test]
    fn copies_drop_garbage() {
        let mut l = Leaf::default();
        for i in 0..20u8 {
            l.push(&[i], ValueRef::Inline(&[i; 50]));
        }
        // Garbage of 12 * 51 bytes in 1,512: not enough to compact, a third
        // of the arena.
        for i in 0..12u8 {
            l.set_value(usize::from(i), ValueRef::Inline(&[i; 40]));
        }
        assert_eq!(l.arena.garbage, 12 * 51);
        let copy = l.copy_for_write(4096);
        assert_eq!(copy.arena.garbage, 0);
        assert_eq!(copy.arena.len(), 12 * 41 + 8 * 51);
        for i in 0..20u8 {
            let len = if i < 12 { 40 } else { 50 };
            assert_eq!(copy.key(usize::from(i)), [i]);
            assert!(matches!(copy.value(usize::from(i)), ValueRef::Inline(v) if v == vec![i; len]));
        }
        assert_eq!(copy.encoded_bytes(), l.encoded_bytes());
    }
}
