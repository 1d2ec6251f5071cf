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
//! The loom model below checks this with the epoch's pin and advance
//! modelled as the full fences they are (`RUSTFLAGS="--cfg loom" cargo
//! test --release -p keel --lib era::model`, run by `scripts/test`): it
//! fails when a pin records a newer era than it saw, or a reclaim frees
//! what was retired in the era a pin holds.
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

#[cfg(loom)]
use loom::sync::{
    atomic::{AtomicU64, Ordering},
    Mutex,
};
use std::sync::LazyLock;
#[cfg(not(loom))]
use std::sync::{
    atomic::{AtomicU64, Ordering},
    Mutex,
};

use crossbeam_utils::CachePadded;

use crate::stripe::{stripe, STRIPES};

/// Bits of a stripe's word that count its pins; the era is above them.
const COUNT_BITS: u32 = 24;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
/// Retired things that make [`retire`] try to free some.
const RECLAIM_AT: usize = 64;

type Retired = Vec<(u64, Box<dyn Any + Send>)>;

/// The process's eras (see the module doc).
static ERAS: LazyLock<Eras> = LazyLock::new(|| Eras::new(STRIPES));

/// The era, the stripes' pins and what waits for them.
struct Eras {
    /// Advanced by every reclaim.
    era: AtomicU64,
    /// Per stripe: the era its oldest pin saw (high bits) and its pins.
    stripes: Box<[CachePadded<AtomicU64>]>,
    /// What was retired, each with its era.
    retired: Mutex<Retired>,
}

impl Eras {
    fn new(stripes: usize) -> Eras {
        Eras {
            era: AtomicU64::new(1),
            stripes: (0..stripes)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            retired: Mutex::new(Vec::new()),
        }
    }

    /// Count a pin in stripe `mine` (or, when it holds as many pins as it
    /// can count, the next one that can); the stripe it is counted in.
    fn pin(&self, mine: usize) -> u16 {
        let n = self.stripes.len();
        for s in (mine..mine + n).map(|s| s % n) {
            if self.try_pin(s) {
                return s as u16;
            }
        }
        panic!(
            "more than {} read values held at once",
            COUNT_MASK as usize * n
        );
    }

    /// Count one more pin in stripe `s`; false if it cannot count more.
    fn try_pin(&self, s: usize) -> bool {
        let cell = &self.stripes[s];
        let mut word = cell.load(Ordering::Relaxed);
        loop {
            let next = match word & COUNT_MASK {
                0 => (self.era.load(Ordering::SeqCst) << COUNT_BITS) | 1,
                COUNT_MASK => return false,
                _ => word + 1,
            };
            match cell.compare_exchange_weak(word, next, Ordering::SeqCst, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(now) => word = now,
            }
        }
    }

    fn unpin(&self, s: u16) {
        self.stripes[usize::from(s)].fetch_sub(1, Ordering::Release);
    }

    fn retire(&self, thing: Box<dyn Any + Send>) {
        let due = {
            let mut retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
            retired.push((self.era.load(Ordering::SeqCst), thing));
            if retired.len() < RECLAIM_AT {
                return;
            }
            self.take_due(&mut retired)
        };
        // Dropped outside the lock: a drop may retire in turn.
        drop(due);
    }

    fn reclaim(&self) {
        let due = self.take_due(&mut self.retired.lock().unwrap_or_else(|e| e.into_inner()));
        drop(due);
    }

    /// Advance the era and take what no pin holds any more.
    fn take_due(&self, retired: &mut Retired) -> Retired {
        self.era.fetch_add(1, Ordering::SeqCst);
        let oldest = self
            .stripes
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
}

/// Keeps everything retired from now on until it drops. `Send` and
/// `Sync`: it may be dropped on another thread (it then writes the
/// stripe of the thread that took it).
#[derive(Debug)]
pub(crate) struct Pin {
    stripe: u16,
}

impl Pin {
    /// Pin this thread's stripe.
    pub(crate) fn new() -> Pin {
        Pin {
            stripe: ERAS.pin(stripe()),
        }
    }
}

impl Clone for Pin {
    /// Another pin of the same stripe (its era is already held).
    fn clone(&self) -> Pin {
        Pin {
            stripe: ERAS.pin(usize::from(self.stripe)),
        }
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        ERAS.unpin(self.stripe);
    }
}

/// Free `thing` once no pin taken before now is held. Call only from a
/// `crossbeam-epoch` deferred function run after `thing` became
/// unreachable to readers (see the module doc), or with a `thing` no
/// reader could ever have reached.
pub(crate) fn retire<T: Send + 'static>(thing: T) {
    ERAS.retire(Box::new(thing));
}

/// Try to free what was retired now (a store that closes).
pub(crate) fn reclaim() {
    ERAS.reclaim();
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
        ERAS.era.fetch_add(1, Ordering::SeqCst);
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

#[cfg(test)]
mod model {
    //! The pin and reclaim protocol, checked by `loom` (every
    //! interleaving, with `RUSTFLAGS="--cfg loom" cargo test --release
    //! -p keel --lib era::model`) and, in normal test runs, as a stress
    //! test of the same model on real threads.
    //!
    //! The model: a node is linked in a slot; readers pin their stripe,
    //! then (inside a critical section standing for the epoch's guard)
    //! see whether the node is linked, leave the section and, if it was,
    //! read it while still pinned. A reclaimer unlinks it, waits for the
    //! readers' sections to end (as the epoch does before it runs a
    //! deferred function), retires it and reclaims. No reader may find
    //! the node freed while it holds the pin it took before seeing it;
    //! once every pin is gone, a reclaim frees it.

    use super::Eras;
    #[cfg(loom)]
    use loom::{
        sync::{
            atomic::{fence, AtomicBool, Ordering::SeqCst},
            Arc,
        },
        thread,
    };
    #[cfg(not(loom))]
    use std::{
        sync::{
            atomic::{fence, AtomicBool, Ordering::SeqCst},
            Arc,
        },
        thread,
    };

    /// Readers: one under loom (with the reclaimer, two threads; three
    /// are too many interleavings), two on real threads, sharing one
    /// stripe (the pins of threads beyond the stripes share theirs).
    const READERS: usize = if cfg!(loom) { 1 } else { 2 };

    struct Node(Arc<AtomicBool>);

    impl Drop for Node {
        fn drop(&mut self) {
            self.0.store(true, SeqCst);
        }
    }

    struct World {
        eras: Eras,
        linked: AtomicBool,
        in_section: Vec<AtomicBool>,
        freed: Arc<AtomicBool>,
    }

    fn model() {
        let freed = Arc::new(AtomicBool::new(false));
        let w = Arc::new(World {
            eras: Eras::new(2),
            linked: AtomicBool::new(true),
            in_section: (0..READERS).map(|_| AtomicBool::new(false)).collect(),
            freed: Arc::clone(&freed),
        });
        let node = Node(freed);
        let mut threads = Vec::new();
        for r in 0..READERS {
            let w = Arc::clone(&w);
            threads.push(thread::spawn(move || {
                let stripe = w.eras.pin(0);
                // The epoch's pin: a store, then a full fence.
                w.in_section[r].store(true, SeqCst);
                fence(SeqCst);
                let seen = w.linked.load(SeqCst);
                w.in_section[r].store(false, SeqCst);
                if seen {
                    thread::yield_now();
                    assert!(!w.freed.load(SeqCst), "freed under a pin");
                }
                w.eras.unpin(stripe);
            }));
        }
        let rw = Arc::clone(&w);
        threads.push(thread::spawn(move || {
            // The epoch's advance: a full fence before it reads the
            // threads' pins.
            rw.linked.store(false, SeqCst);
            fence(SeqCst);
            for s in &rw.in_section {
                while s.load(SeqCst) {
                    thread::yield_now();
                }
            }
            rw.eras.retire(Box::new(node));
            rw.eras.reclaim();
        }));
        for t in threads {
            t.join().unwrap();
        }
        w.eras.reclaim();
        assert!(w.freed.load(SeqCst), "never freed once unpinned");
    }

    #[cfg(loom)]
    #[test]
    fn a_node_is_freed_only_after_the_pins_taken_before_it_was_unlinked() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(model);
    }

    /// The same model, many times on real threads.
    #[cfg(not(loom))]
    #[test]
    fn a_node_is_freed_only_after_the_pins_taken_before_it_was_unlinked() {
        for _ in 0..2000 {
            model();
        }
    }
}
