//! Publication in LSN order when commits are applied out of order.
//!
//! Committers that commit straight from their puts (`super::direct`)
//! each insert their own changes into the memtable once the journal has
//! given them their LSN, on their own threads, at once: LSN 12 may be in
//! the memtable before LSN 11 is. Readers must never see 12 without 11.
//! So an LSN is published only when it is both durable (the journal makes
//! records durable in LSN order) and *applied* together with every LSN
//! below it:
//!
//! `published = min(durable, applied)`
//!
//! where `applied` is the highest LSN at and below which every commit is
//! applied. [`ApplyOrder`] keeps it without a lock: an applied LSN is
//! marked in a ring, and whoever finds the next LSN marked moves `applied`
//! on. Both the committer that moves `applied` and the one that reports
//! an LSN durable then compute the minimum, after a sequentially
//! consistent fence, so at least one of two such threads sees the
//! other's store (neither publication is lost). The loom model below
//! checks it: without the fence after an LSN's mark in the ring it finds
//! a lost publication (two completions each missing the other's mark),
//! and with `applied` left out of the minimum, a publication out of
//! order.
//!
//! Every LSN the journal gives the store's commits must be completed here
//! (the journal's LSNs have no gaps): commits applied under the writer
//! slot complete theirs as they apply, in order.

#[cfg(loom)]
use loom::sync::atomic::{fence, AtomicU64, Ordering::SeqCst};
#[cfg(not(loom))]
use std::sync::atomic::{fence, AtomicU64, Ordering::SeqCst};

use crate::journal::Lsn;

/// LSNs that may be applied and not yet below `applied` at once: a
/// committer whose LSN is further ahead waits (yielding) for the ones
/// before to be applied. More than the committing threads of any real
/// workload.
#[cfg(not(loom))]
const RING: usize = 4096;
#[cfg(loom)]
const RING: usize = 4;

/// `applied` before the first writer-slot holder sets it
/// ([`ApplyOrder::start_at`]).
const UNSET: Lsn = Lsn::MAX;

/// The applied and durable LSNs, and the applied LSNs above `applied`.
#[derive(Debug)]
pub(crate) struct ApplyOrder {
    /// Every LSN at or below this one is applied.
    applied: AtomicU64,
    /// The highest LSN reported durable.
    durable: AtomicU64,
    /// `done[l % RING] == l`: LSN `l` is applied (whether or not
    /// `applied` has reached it).
    done: Box<[AtomicU64]>,
}

impl Default for ApplyOrder {
    fn default() -> Self {
        ApplyOrder {
            applied: AtomicU64::new(UNSET),
            durable: AtomicU64::new(0),
            done: (0..RING).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl ApplyOrder {
    /// Start counting after `lsn` (every LSN up to it applied), unless
    /// started already. The writer slot's first holder calls it, before
    /// any commit that is not under the slot can run.
    pub(crate) fn start_at(&self, lsn: Lsn) {
        if self
            .applied
            .compare_exchange(UNSET, lsn, SeqCst, SeqCst)
            .is_ok()
        {
            // What was recovered is durable.
            self.durable.fetch_max(lsn, SeqCst);
        }
    }

    /// Every LSN at or below this one is applied.
    pub(crate) fn applied(&self) -> Lsn {
        match self.applied.load(SeqCst) {
            UNSET => 0,
            a => a,
        }
    }

    /// LSN `lsn` is applied (once, after [`ApplyOrder::start_at`]): move
    /// `applied` on past it if every LSN before it is applied too.
    /// Returns what may be published now.
    pub(crate) fn complete(&self, lsn: Lsn) -> Lsn {
        loop {
            let a = self.applied.load(SeqCst);
            assert!(
                a != UNSET && lsn > a,
                "lsn {lsn} completed twice, or before the start"
            );
            if lsn - a <= RING as u64 {
                break;
            }
            // The ring slot is still another LSN's: wait for the ones
            // before this (being applied on other threads).
            yield_now();
        }
        self.done[(lsn % RING as u64) as usize].store(lsn, SeqCst);
        // Between this store and the loads below: of this thread and one
        // completing the LSN before, at least one sees the other's mark
        // (else neither would move `applied` past both). Loom found it
        // missing: it models sequentially consistent loads and stores
        // more weakly than C++ does, so the fence says what is meant.
        fence(SeqCst);
        loop {
            let a = self.applied.load(SeqCst);
            let next = a + 1;
            if self.done[(next % RING as u64) as usize].load(SeqCst) != next {
                break;
            }
            // Whoever fails here finds `applied` moved on, and tries the
            // LSN after it.
            let _ = self.applied.compare_exchange(a, next, SeqCst, SeqCst);
        }
        self.publishable()
    }

    /// Every LSN up to `lsn` is durable. Returns what may be published
    /// now.
    pub(crate) fn durable(&self, lsn: Lsn) -> Lsn {
        self.durable.fetch_max(lsn, SeqCst);
        self.publishable()
    }

    /// `min(durable, applied)`, after this thread's store to one of them.
    fn publishable(&self) -> Lsn {
        // Between the caller's change (to `applied` or `durable`) and the
        // loads of both: of two threads changing one each, at least one
        // then loads the other's change. (Their read-modify-writes and
        // loads being sequentially consistent is enough in the C++
        // model, and loom finds no lost publication without the fence;
        // it costs little beside the read-modify-write before it.)
        fence(SeqCst);
        let a = self.applied();
        a.min(self.durable.load(SeqCst))
    }
}

#[cfg(not(loom))]
fn yield_now() {
    std::thread::yield_now();
}

#[cfg(loom)]
fn yield_now() {
    loom::thread::yield_now();
}

#[cfg(test)]
mod tests {
    //! The publication protocol, checked by `loom` (every interleaving of
    //! a few threads, with `RUSTFLAGS="--cfg loom" cargo test --release
    //! -p keel --lib db::order`) and, in normal test runs, as a stress
    //! test of the same model on real threads.
    //!
    //! The model: LSNs 1..=3 (2 under loom) are applied by a thread each,
    //! in any order,
    //! while a fourth reports them durable one by one; each publishes
    //! what its call returns into a "view" that only moves forward, and
    //! checks that it never holds an LSN some LSN at or below which is
    //! not applied, nor one not durable. At the end, the view is at 3:
    //! no publication was lost.

    use super::ApplyOrder;
    #[cfg(loom)]
    use loom::sync::{
        atomic::{AtomicBool, AtomicU64, Ordering::SeqCst},
        Arc,
    };
    #[cfg(not(loom))]
    use std::sync::{
        atomic::{AtomicBool, AtomicU64, Ordering::SeqCst},
        Arc,
    };

    #[cfg(loom)]
    use loom::thread;
    #[cfg(not(loom))]
    use std::thread;

    /// Two under loom (every interleaving of four threads is too many to
    /// run), three on real threads.
    const LSNS: u64 = if cfg!(loom) { 2 } else { 3 };

    struct World {
        order: ApplyOrder,
        /// Commits applied (their inserts done), by LSN.
        applied: Vec<AtomicBool>,
        durable: AtomicU64,
        view: AtomicU64,
    }

    impl World {
        fn publish(&self, target: u64) {
            // What a reader of this view could see: every LSN up to it.
            for l in 1..=target {
                assert!(
                    self.applied[l as usize].load(SeqCst),
                    "lsn {target} published before lsn {l} was applied"
                );
            }
            assert!(
                target <= self.durable.load(SeqCst),
                "published before durable"
            );
            self.view.fetch_max(target, SeqCst);
        }
    }

    fn model() {
        let w = Arc::new(World {
            order: ApplyOrder::default(),
            applied: (0..=LSNS).map(|_| AtomicBool::new(false)).collect(),
            durable: AtomicU64::new(0),
            view: AtomicU64::new(0),
        });
        w.order.start_at(0);
        let mut threads = Vec::new();
        for lsn in 1..=LSNS {
            let w = Arc::clone(&w);
            threads.push(thread::spawn(move || {
                w.applied[lsn as usize].store(true, SeqCst);
                let target = w.order.complete(lsn);
                w.publish(target);
            }));
        }
        let d = Arc::clone(&w);
        threads.push(thread::spawn(move || {
            for lsn in 1..=LSNS {
                d.durable.store(lsn, SeqCst);
                let target = d.order.durable(lsn);
                d.publish(target);
            }
        }));
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(w.view.load(SeqCst), LSNS, "a publication was lost");
        assert_eq!(w.order.applied(), LSNS);
    }

    /// Every interleaving with up to 3 preemptions (loom's usual bound:
    /// unbounded, the model runs for hours).
    #[cfg(loom)]
    #[test]
    fn publication_is_in_lsn_order_and_never_lost() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(model);
    }

    /// Without loom: the same model, many times on real threads.
    #[cfg(not(loom))]
    #[test]
    fn publication_is_in_lsn_order_and_never_lost() {
        for _ in 0..2000 {
            model();
        }
    }

    /// Far more LSNs than the ring holds, applied by threads taking them
    /// from a counter: `applied` reaches the last.
    #[cfg(not(loom))]
    #[test]
    fn applied_follows_a_long_run_of_out_of_order_completions() {
        let order = ApplyOrder::default();
        order.start_at(100);
        let next = AtomicU64::new(101);
        let last = 100 + 20 * super::RING as u64;
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| loop {
                    let lsn = next.fetch_add(1, SeqCst);
                    if lsn > last {
                        return;
                    }
                    order.complete(lsn);
                });
            }
        });
        assert_eq!(order.applied(), last);
        assert_eq!(order.durable(last), last);
    }
}
