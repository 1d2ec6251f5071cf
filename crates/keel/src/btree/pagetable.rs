//! The page cache's index: page number → cached node, read without a lock
//! and without writing anything shared.
//!
//! A radix table of three levels of [`FAN`] slots covers page numbers
//! below [`MAX_PAGES`] (4 TiB of 4 KiB pages); a page past it is simply
//! not cached. Inner tables are made on first use and live as long as the
//! table. A slot holds its node through `crossbeam_epoch`: a reader pins
//! the epoch (a write to its own thread's record only), loads the slot and
//! borrows the node for as long as it stays pinned; whoever replaces or
//! clears a slot hands the old entry to the epoch, which frees it once no
//! thread pinned before the change is still pinned.
//!
//! Only the holder of the page's shard lock (see `cache.rs`) changes a
//! slot, so slot changes never race each other; readers race them freely.
//!
//! Written by hand rather than with a concurrent hash map: a lookup here
//! is three dependent loads with no hashing, no lock and no reference
//! count, and the page numbers of a data file are dense and bounded.

#![allow(unsafe_code)]

use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Arc;

use crossbeam_epoch::Guard;

use super::node::Node;
use super::PageNo;
use crate::era;

const BITS: u32 = 10;
const FAN: usize = 1 << BITS;
/// Pages at or past this number are not cached.
pub(crate) const MAX_PAGES: PageNo = 1 << (3 * BITS);

/// Each slot: null, or the pointer of an `Arc<Node>` (`Arc::into_raw`).
type Leaf = [AtomicPtr<Node>; FAN];
type Mid = [AtomicPtr<Leaf>; FAN];

/// See the module doc.
pub(crate) struct PageTable {
    top: Box<[AtomicPtr<Mid>]>,
}

impl std::fmt::Debug for PageTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageTable").finish_non_exhaustive()
    }
}

fn parts(page: PageNo) -> Option<(usize, usize, usize)> {
    if page >= MAX_PAGES {
        return None;
    }
    let p = page as usize;
    Some((p >> (2 * BITS), (p >> BITS) & (FAN - 1), p & (FAN - 1)))
}

/// The table at `slot`, made and installed if missing (and `make`).
fn child<T>(slot: &AtomicPtr<T>, make: bool, new: impl FnOnce() -> Box<T>) -> Option<&T> {
    let mut p = slot.load(Ordering::Acquire);
    if p.is_null() {
        if !make {
            return None;
        }
        let fresh = Box::into_raw(new());
        match slot.compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => p = fresh,
            Err(other) => {
                // SAFETY: `fresh` came from `Box::into_raw` just above and
                // was never shared: the exchange failed.
                drop(unsafe { Box::from_raw(fresh) });
                p = other;
            }
        }
    }
    // SAFETY: a non-null pointer in a slot came from `Box::into_raw` and
    // is freed only by `PageTable::drop`, which has the table to itself;
    // the caller's borrow of the table outlives this one.
    Some(unsafe { &*p })
}

impl Default for PageTable {
    fn default() -> Self {
        PageTable {
            top: (0..FAN).map(|_| AtomicPtr::new(ptr::null_mut())).collect(),
        }
    }
}

impl PageTable {
    fn slot(&self, page: PageNo, make: bool) -> Option<&AtomicPtr<Node>> {
        let (a, b, c) = parts(page)?;
        let mid = child(&self.top[a], make, || {
            Box::new(std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())))
        })?;
        let leaf = child(&mid[b], make, || {
            Box::new(std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())))
        })?;
        Some(&leaf[c])
    }

    /// The node cached for `page`, whatever version of the page it is,
    /// borrowed for as long as `guard` pins. It lives in an `Arc`.
    pub fn get<'g>(&'g self, page: PageNo, guard: &'g Guard) -> Option<&'g Node> {
        let _ = guard;
        let p = self.slot(page, false)?.load(Ordering::Acquire);
        // SAFETY: a non-null slot holds a strong reference to its node
        // (`Arc::into_raw`); the reference is dropped only through the
        // epoch, after it left the slot and every thread pinned before
        // that unpinned; `guard` pins this thread, so the node lives as
        // long as `guard`.
        unsafe { p.cast_const().as_ref() }
    }

    /// Put `node` in its page's slot (or clear the slot: `None`), handing
    /// the old reference to the epoch. Only under the page's shard lock.
    /// False when the page is past [`MAX_PAGES`] (nothing stored).
    pub fn set(&self, page: PageNo, node: Option<Arc<Node>>, guard: &Guard) -> bool {
        let Some(slot) = self.slot(page, node.is_some()) else {
            return node.is_none();
        };
        let new = node.map_or(ptr::null_mut(), |n| Arc::into_raw(n).cast_mut());
        let old = slot.swap(new, Ordering::AcqRel);
        if !old.is_null() {
            let old = old as usize;
            // SAFETY: `old` just left the slot, so no reader can load it
            // any more; readers that loaded it before are pinned, and the
            // epoch runs this only after they unpin. Slot changes are
            // serialised by the shard lock, so nobody else defers it. It
            // came from `Arc::into_raw`, so it is turned back into its
            // `Arc` once. Then a value borrowed from the node under a
            // reader-era pin keeps it (`crate::era`, `read::get_pinned`).
            unsafe {
                guard.defer_unchecked(move || {
                    era::retire(Arc::from_raw(old as *const Node));
                })
            };
        }
        true
    }
}

impl Drop for PageTable {
    fn drop(&mut self) {
        // What this table's evictions retired may be freed now, if no
        // value read from it is still held.
        era::reclaim();
        // SAFETY: `&mut self`: no reader or writer has the table; every
        // pointer below came from `Box::into_raw` (tables) or
        // `Arc::into_raw` (nodes) and is freed exactly once here.
        unsafe {
            for m in self.top.iter() {
                let m = m.load(Ordering::Relaxed);
                if m.is_null() {
                    continue;
                }
                let mid = Box::from_raw(m);
                for l in mid.iter() {
                    let l = l.load(Ordering::Relaxed);
                    if l.is_null() {
                        continue;
                    }
                    let leaf = Box::from_raw(l);
                    for e in leaf.iter() {
                        let e = e.load(Ordering::Relaxed);
                        if !e.is_null() {
                            drop(Arc::from_raw(e.cast_const()));
                        }
                    }
                }
            }
        }
    }
}
