//! Reader eras: what keeps a value a read returned alive without a
//! reference count on it.
//!
//! A point read borrows its value's bytes from a cached node or from the
//! mapped data file. Those may leave the store's hands while the value is
//! still held (a node evicted from the page cache, a map replaced by a
//! larger one), so whatever drops them hands them here instead
//! ([`retire`]), and they are freed only once no [`Pin`] taken before
//! that is still held. A pin is a count in this thread's stripe: taking
//! and dropping one writes a cache line only this thread writes (unless
//! more than [`STRIPES`] threads read), where an `Arc` clone of a node
//! writes the node's count, which every reader of that node writes too.
//!
//! How it stays safe: each stripe holds a count of pins and the era its
//! first pin saw. A retired thing is tagged with the era at its
//! retirement; reclaiming advances the era and frees what was retired
//! before the oldest era any stripe with pins holds. A pin is always
//! taken before the reader looks the node up (under a `crossbeam-epoch`
//! guard, as every lookup is), and things are retired only from the
//! epoch's deferred functions, which run after every guard pinned before
//! the unlink is dropped: so a retirement that could concern a pin's
//! reader happens after the pin was counted, and sees it. The era a pin
//! records is never newer than such a retirement's (eras only grow), so
//! the pin holds it.
//!
//! Why not `crossbeam-epoch` alone: its guard is tied to its thread (not
//! `Send`) and is meant to be held briefly; a value may be held as long
//! as its transaction, and moved to another thread.
//!
//! The eras are the process's, shared by its stores (as the epoch is). A
//! pin held a long time keeps everything retired meanwhile in memory:
//! a program that keeps values from a read transaction while caches turn
//! over holds the nodes they came from, and those evicted since.
//!
//! Only what a point read borrows needs this: cached nodes (`btree/
//! pagetable.rs` retires them here). A value found in a mapped page is
//! copied instead: the OS may drop the page and read it from the disk
//! again after it was checked.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crossbeam_utils::CachePadded;

use crate::stripe::{stripe, STRIPES};

/// Bits of a stripe's word that count its pins; the era is above them.
const COUNT_BITS: u32 = 24;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
/// Retired things that make [`retire`] try to free some.
const RECLAIM_AT: usize = 64;

/// The era: advanced by every reclaim.
static ERA: AtomicU64 = AtomicU64::new(1);

/// Per stripe: the era its oldest pin saw (high bits) and its pins.
static STRIPE_PINS: [CachePadded<AtomicU64>; STRIPES] =
    [const { CachePadded::new(AtomicU64::new(0)) }; STRIPES];

type Retired = Vec<(u64, Box<dyn Any + Send>)>;

/// What was retired, each with its era.
static RETIRED: Mutex<Retired> = Mutex::new(Vec::new());

/// Keeps everything retired from now on until it drops. `Send` and
/// `Sync`: it may be dropped on another thread (it then writes the
/// stripe of the thread that took it).
#[derive(Debug)]
pub(crate) struct Pin {
    stripe: u16,
}

impl Pin {
    /// Pin this thread's stripe (or, when it holds as many pins as it
    /// can count, the next one that can).
    pub(crate) fn new() -> Pin {
        let mine = stripe();
        for s in (mine..mine + STRIPES).map(|s| s % STRIPES) {
            if try_pin(&STRIPE_PINS[s]) {
                return Pin { stripe: s as u16 };
            }
        }
        panic!(
            "more than {} read values held at once",
            COUNT_MASK as usize * STRIPES
        );
    }
}

/// Count one more pin in `cell`; false if it cannot count more.
fn try_pin(cell: &AtomicU64) -> bool {
    let mut word = cell.load(Ordering::Relaxed);
    loop {
        let next = match word & COUNT_MASK {
            0 => (ERA.load(Ordering::SeqCst) << COUNT_BITS) | 1,
            COUNT_MASK => return false,
            _ => word + 1,
        };
        match cell.compare_exchange_weak(word, next, Ordering::SeqCst, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(now) => word = now,
        }
    }
}

impl Clone for Pin {
    /// Another pin of the same stripe (its era is already held).
    fn clone(&self) -> Pin {
        if try_pin(&STRIPE_PINS[usize::from(self.stripe)]) {
            return Pin {
                stripe: self.stripe,
            };
        }
        Pin::new()
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        STRIPE_PINS[usize::from(self.stripe)].fetch_sub(1, Ordering::Release);
    }
}

/// Free `thing` once no pin taken before now is held. Call only from a
/// `crossbeam-epoch` deferred function run after `thing` became
/// unreachable to readers (see the module doc), or with a `thing` no
/// reader could ever have reached.
pub(crate) fn retire<T: Send + 'static>(thing: T) {
    let due = {
        let mut retired = RETIRED.lock().unwrap_or_else(|e| e.into_inner());
        retired.push((ERA.load(Ordering::SeqCst), Box::new(thing)));
        if retired.len() < RECLAIM_AT {
            return;
        }
        take_due(&mut retired)
    };
    // Dropped outside the lock: a drop may retire in turn.
    drop(due);
}

/// Try to free what was retired now (a store that closes).
pub(crate) fn reclaim() {
    let due = take_due(&mut RETIRED.lock().unwrap_or_else(|e| e.into_inner()));
    drop(due);
}

/// Advance the era and take what no pin holds any more.
fn take_due(retired: &mut Retired) -> Retired {
    ERA.fetch_add(1, Ordering::SeqCst);
    let oldest = STRIPE_PINS
        .iter()
        .map(|c| c.load(Ordering::SeqCst))
        .filter(|w| w & COUNT_MASK != 0)
        .map(|w| w >> COUNT_BITS)
        .min()
        .unwrap_or(u64::MAX);
    let (due, kept) = std::mem::take(retired)
        .into_iter()
        .partition(|(era, _)| *era < oldest);
    *retired = kept;
    due
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    /// Counts its drops.
    struct Tracked(Arc<AtomicUsize>);
    impl Drop for Tracked {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A pin holds what is retired while it is held, on whichever thread
    /// it is dropped; once dropped, a reclaim frees it.
    #[test]
    fn a_pin_holds_what_is_retired_after_it_until_it_drops() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let pin = Pin::new();
        let second = pin.clone();
        retire(Tracked(Arc::clone(&dropped)));
        for _ in 0..RECLAIM_AT * 2 {
            retire(0u64);
        }
        reclaim();
        assert_eq!(dropped.load(Ordering::SeqCst), 0, "freed under a pin");
        drop(pin);
        reclaim();
        assert_eq!(dropped.load(Ordering::SeqCst), 0, "freed under its clone");
        std::thread::spawn(move || drop(second)).join().unwrap();
        // Other tests' pins may be held meanwhile (they are of other
        // threads, taken later or soon dropped): wait for them.
        for _ in 0..10_000 {
            reclaim();
            if dropped.load(Ordering::SeqCst) == 1 {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        panic!("never freed after its pins dropped");
    }

    /// A pin taken after something was retired does not hold it.
    #[test]
    fn a_pin_taken_later_does_not_hold_older_retirements() {
        let dropped = Arc::new(AtomicUsize::new(0));
        retire(Tracked(Arc::clone(&dropped)));
        // Advance the era past the retirement before pinning.
        ERA.fetch_add(1, Ordering::SeqCst);
        let pin = Pin::new();
        for _ in 0..10_000 {
            reclaim();
            if dropped.load(Ordering::SeqCst) == 1 {
                drop(pin);
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        panic!("held by a pin taken after it");
    }
}
