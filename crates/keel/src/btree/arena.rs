//! The byte arena that holds a node's keys (and a leaf's inline values),
//! so that copying a node for copy-on-write copies one buffer instead of
//! allocating per key and value.

use std::cmp::Ordering;

use super::spare;

/// A byte range inside an [`Arena`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Span {
    pub(crate) off: u32,
    pub(crate) len: u32,
}

/// A key in an [`Arena`], with its first 8 bytes (zero-padded, big-endian)
/// kept beside it: a binary search then compares most keys without
/// touching the arena (a cache miss each, measured as a fifth of an
/// insert).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct KeySpan {
    pub(crate) span: Span,
    pub(crate) prefix: u64,
}

/// Read one value from every cache line of `items` (that is not already
/// in cache): the loads are independent, so their misses overlap, and a
/// binary search over them then finds each probe in cache instead of
/// stalling on one miss after another.
pub(crate) fn warm<T>(items: &[T], read: impl Fn(&T) -> u64) {
    let stride = (64 / std::mem::size_of::<T>().max(1)).max(1);
    let mut sum = 0u64;
    let mut i = 0;
    while i < items.len() {
        sum = sum.wrapping_add(read(&items[i]));
        i += stride;
    }
    std::hint::black_box(sum);
}

pub(crate) fn key_prefix(k: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = k.len().min(8);
    b[..n].copy_from_slice(&k[..n]);
    u64::from_be_bytes(b)
}

/// Compare a stored key whose prefix is `stored_prefix` with `key`, whose
/// prefix is `prefix`; `stored` reads the stored key's bytes only when
/// the prefixes tie. Differing prefixes order the keys as the bytes do:
/// they differ at a byte both keys have, or one key ends there and the
/// other has a nonzero byte.
#[inline]
pub(crate) fn cmp_prefixed<'a>(
    stored_prefix: u64,
    stored: impl FnOnce() -> &'a [u8],
    key: &[u8],
    prefix: u64,
) -> Ordering {
    stored_prefix.cmp(&prefix).then_with(|| stored().cmp(key))
}

/// Key and value bytes. Removing bytes only counts them as garbage; the
/// owner rebuilds the arena when garbage dominates.
#[derive(Clone, Debug, Default)]
pub(crate) struct Arena {
    pub(crate) bytes: Vec<u8>,
    pub(crate) garbage: usize,
}

impl Arena {
    pub(crate) fn with_capacity(bytes: usize) -> Arena {
        Arena {
            bytes: spare::take_bytes(bytes),
            garbage: 0,
        }
    }

    /// A copy of the live bytes' buffer with room for at least `capacity`
    /// bytes, so that the copy's owner can add to it without growing it.
    pub(crate) fn copy_with_capacity(&self, capacity: usize) -> Arena {
        let mut bytes = spare::take_bytes(capacity.max(self.bytes.len()));
        bytes.extend_from_slice(&self.bytes);
        Arena {
            bytes,
            garbage: self.garbage,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Append `b`; returns where it went.
    pub(crate) fn push(&mut self, b: &[u8]) -> u32 {
        let off = self.bytes.len();
        self.bytes.extend_from_slice(b);
        // A node's arena stays below a few pages (see `needs_compaction`),
        // far below 4 GiB.
        u32::try_from(off).expect("a node's arena stays far below 4 GiB")
    }

    /// Append a copy of `len` bytes at `off`; returns where it went.
    pub(crate) fn push_within(&mut self, off: u32, len: usize) -> u32 {
        let at = self.bytes.len();
        let off = off as usize;
        self.bytes.extend_from_within(off..off + len);
        u32::try_from(at).expect("a node's arena stays far below 4 GiB")
    }

    pub(crate) fn push_span(&mut self, b: &[u8]) -> Span {
        Span {
            off: self.push(b),
            len: b.len() as u32,
        }
    }

    pub(crate) fn get(&self, s: Span) -> &[u8] {
        self.slice(s.off, s.len as usize)
    }

    pub(crate) fn slice(&self, off: u32, len: usize) -> &[u8] {
        let off = off as usize;
        &self.bytes[off..off + len]
    }

    pub(crate) fn slice_mut(&mut self, off: u32, len: usize) -> &mut [u8] {
        let off = off as usize;
        &mut self.bytes[off..off + len]
    }

    pub(crate) fn push_key(&mut self, k: &[u8]) -> KeySpan {
        KeySpan {
            span: self.push_span(k),
            prefix: key_prefix(k),
        }
    }

    pub(crate) fn key(&self, k: KeySpan) -> &[u8] {
        self.get(k.span)
    }

    /// Compare a stored key with `key`, whose prefix is `prefix`.
    pub(crate) fn cmp_key(&self, k: KeySpan, key: &[u8], prefix: u64) -> Ordering {
        cmp_prefixed(k.prefix, || self.get(k.span), key, prefix)
    }

    /// Count `len` bytes as no longer used.
    pub(crate) fn release(&mut self, len: usize) {
        self.garbage += len;
    }

    pub(crate) fn needs_compaction(&self) -> bool {
        self.garbage > 256 && self.garbage * 2 > self.bytes.len()
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.bytes.capacity()
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        spare::give_bytes(std::mem::take(&mut self.bytes));
    }
}
