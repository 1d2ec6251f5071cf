//! Spare page-sized buffers, kept per thread for the next node copy.
//!
//! Every insert into a fresh snapshot copies a leaf and usually a branch,
//! and the old versions are dropped a transaction later: a steady stream
//! of allocations and frees of a page's worth of bytes. Those are past the
//! sizes glibc's malloc serves from its per-thread caches (1,032 bytes),
//! so each went through its binned allocator, which split, coalesced and
//! sorted chunks: malloc and free took a third of the time of a
//! transaction of 100 random inserts into a tree of a million entries. A
//! buffer freed here is kept (up to [`MAX_SPARE`] per thread and kind) and
//! handed to the next copy that wants that capacity.

use std::cell::RefCell;
use std::thread::LocalKey;

use super::arena::KeySpan;

/// Buffers kept per thread, kind and capacity: a transaction's worth of
/// copies of the default page size (1 MiB of leaf arenas), and a bound on
/// what an idle thread holds.
const MAX_SPARE: usize = 256;

/// Capacities kept per kind: a store has one page size, and a branch's
/// buffers take one or two sizes.
const MAX_CAPACITIES: usize = 4;

/// Smaller buffers are cheap to allocate (glibc's per-thread cache).
const MIN_SPARE_BYTES: usize = 2048;

/// Buffers by capacity. Only powers of two are kept: the capacities node
/// copies ask for, so that a buffer of another size cannot take the place
/// of useful ones.
type Spares<T> = RefCell<Vec<(usize, Vec<Vec<T>>)>>;

thread_local! {
    static BYTES: Spares<u8> = const { RefCell::new(Vec::new()) };
    static KEYS: Spares<KeySpan> = const { RefCell::new(Vec::new()) };
}

fn take<T>(spares: &'static LocalKey<Spares<T>>, capacity: usize) -> Vec<T> {
    let spare = spares
        .try_with(|s| {
            let mut s = s.borrow_mut();
            let (_, list) = s.iter_mut().find(|(c, _)| *c == capacity)?;
            list.pop()
        })
        .ok()
        .flatten();
    spare.unwrap_or_else(|| Vec::with_capacity(capacity))
}

fn give<T>(spares: &'static LocalKey<Spares<T>>, mut v: Vec<T>) {
    let capacity = v.capacity();
    if capacity * std::mem::size_of::<T>() < MIN_SPARE_BYTES || !capacity.is_power_of_two() {
        return;
    }
    v.clear();
    // During the thread's exit the lists may be gone: the buffer is then
    // just freed.
    let _ = spares.try_with(|s| {
        let mut s = s.borrow_mut();
        let at = match s.iter().position(|(c, _)| *c == capacity) {
            Some(at) => at,
            None if s.len() < MAX_CAPACITIES => {
                s.push((capacity, Vec::new()));
                s.len() - 1
            }
            None => return,
        };
        let list = &mut s[at].1;
        if list.len() < MAX_SPARE {
            list.push(v);
        }
    });
}

/// An empty byte buffer of exactly `capacity`.
pub(crate) fn take_bytes(capacity: usize) -> Vec<u8> {
    take(&BYTES, capacity)
}

/// Keep a byte buffer for [`take_bytes`].
pub(crate) fn give_bytes(v: Vec<u8>) {
    give(&BYTES, v);
}

/// An empty key list of exactly `capacity`.
pub(crate) fn take_keys(capacity: usize) -> Vec<KeySpan> {
    take(&KEYS, capacity)
}

/// Keep a key list for [`take_keys`].
pub(crate) fn give_keys(v: Vec<KeySpan>) {
    give(&KEYS, v);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_empty_and_of_their_capacity() {
        let mut v = take_bytes(4096);
        v.extend_from_slice(&[1, 2, 3]);
        let at = v.as_ptr();
        give_bytes(v);
        let again = take_bytes(4096);
        assert_eq!(
            (again.as_ptr(), again.len(), again.capacity()),
            (at, 0, 4096)
        );
        give_bytes(again);
        assert_eq!(take_bytes(8192).capacity(), 8192);
        // Small buffers and odd sizes are not kept.
        for capacity in [100, 5000] {
            give_bytes(Vec::with_capacity(capacity));
            assert_eq!(kept(capacity), 0, "{capacity}");
        }
        // Past the bound, buffers are freed.
        (0..MAX_SPARE + 10).for_each(|_| give_bytes(Vec::with_capacity(16384)));
        assert_eq!(kept(16384), MAX_SPARE);
    }

    fn kept(capacity: usize) -> usize {
        BYTES.with(|s| {
            s.borrow()
                .iter()
                .find(|(c, _)| *c == capacity)
                .map_or(0, |(_, list)| list.len())
        })
    }
}
