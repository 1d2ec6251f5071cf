//! Commits that are durable and visible but not yet in the memtable.
//!
//! Why: a lone transaction of many puts (w3: 100 random puts) used to be
//! inserted into the memtable by the helper thread while the committer
//! wrote its record, and the commit waited for both. On these 2-vCPU VMs
//! the helper often woke late (an idle vCPU halts, and waking it takes
//! the hypervisor tens of µs), so the committer waited for the insert
//! after its write was durable (1,200 of 10,000 w3 commits in one `keel
//! bench store` run), and every commit paid the helper's wake-up and
//! sleep (docs/store-performance.md, "Commits published before their
//! insert"). Now such a commit, once durable, is published
//! as a [`Run`] — its puts, which readers search in key order above the
//! memtable — and returns; the helper inserts the run into the memtable
//! afterwards, off every commit's path, and then drops it from the view.
//!
//! Order: runs are inserted in LSN order, one at a time under
//! [`Unapplied::order`], by whichever thread drains them: the helper, or a
//! writer that needs the memtable complete (before it applies, replays or
//! freezes; see `Shared::drain_applies`). A run stays in the published
//! view until it is in the memtable, so every version at or below a
//! reader's snapshot is in a run the reader holds or in the memtable.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use super::blind::Blind;
use super::kept::Kept;
use super::layers::Layer;
use super::published::Published;
use super::run::Run;

/// The runs published and not yet inserted, oldest first, each with the
/// memtable it goes into (the active one when it was committed: a freeze
/// drains them first, so that is still the active one when it is
/// inserted).
#[derive(Debug, Default)]
pub(crate) struct Unapplied {
    queue: Mutex<VecDeque<(Arc<Layer>, Arc<Run>)>>,
    /// Held while a run is taken and inserted: runs go in in LSN order.
    order: Mutex<()>,
    /// Runs queued and not yet inserted (read without a lock).
    count: AtomicUsize,
    /// The helper has been asked to drain and has not finished.
    pub posted: AtomicBool,
    /// Runs inserted, and the nanoseconds their inserts took.
    pub applied: AtomicU64,
    pub apply_ns: AtomicU64,
    /// Runs a committer inserted itself (too many were queued).
    pub by_committer: AtomicU64,
    /// Emptied blind transactions of inserted runs, their buffers kept
    /// for the next write transactions ([`Unapplied::spare_blind`]).
    spares: Kept<Blind>,
}

/// Runs published and not yet in the memtable past which a committer
/// inserts the oldest itself before its own, unless the helper is at it
/// (`Shared::write_then_publish_run`); twice as many, whoever is at it.
///
/// Why a share and not all of them: at 16, a committer finding them
/// waiting inserted all 16 and more while the helper was late (~1 ms on
/// its commit's path, 800 of 10,000 w3 commits inserted so in some runs),
/// or waited for the helper's whole batch.
pub(super) const MAX_UNAPPLIED_RUNS: usize = 32;

/// Emptied blind transactions kept for reuse, at most, of any size (up
/// to `Blind::clear_to_keep`'s bound).
const KEEP_SPARES: usize = 8;

/// More emptied blind transactions kept, if small (at most
/// [`SMALL_SPARE_BYTES`] of buffers each): as many as can be in flight
/// (runs queued for the memtable go up to twice `MAX_UNAPPLIED_RUNS`
/// before a committer inserts them all).
///
/// Why: with 8 kept, a committer found none whenever the helper fell
/// behind and its runs piled up, and grew a new transaction's buffers put
/// by put, some into memory the process had not touched: 565 of 10,000 w3
/// transactions in one run, 3 µs per transaction on the commit's path on
/// average (perf, 2026-11-26).
const KEEP_SMALL_SPARES: usize = 2 * MAX_UNAPPLIED_RUNS + 8;

/// See [`KEEP_SMALL_SPARES`]: 64 such spares hold at most 4 MiB.
const SMALL_SPARE_BYTES: usize = 64 << 10;

impl Unapplied {
    /// An empty blind transaction for a new write transaction: one whose
    /// run was inserted, buffers and all, when there is one.
    ///
    /// Why: a run's buffers are freed on the helper's thread, and the
    /// committer's next transaction grew new ones put by put (a chain of
    /// reallocations, some into memory the process had not touched, which
    /// costs 0.5–2 ms per MiB to fault in here): 3 % of the committer's
    /// samples on w3 (perf).
    pub(crate) fn spare_blind(&self) -> Blind {
        // Not `unwrap_or_default`: a new one's bound is not the default's.
        match self.spares.take_oldest() {
            Some(b) => b,
            None => Blind::new(),
        }
    }

    /// Keep `run`'s blind transaction for [`Unapplied::spare_blind`], if
    /// nobody else holds the run (a reader may) and its buffers are not
    /// too large to keep.
    fn recycle(&self, run: Arc<Run>) {
        let Some(run) = Arc::into_inner(run) else {
            return;
        };
        self.keep_spare(run.blind);
    }

    /// Keep `blind` (committed, its changes in the memtable) for
    /// [`Unapplied::spare_blind`], if its buffers are not too large to
    /// keep.
    pub(crate) fn keep_spare(&self, mut blind: Blind) {
        if !blind.clear_to_keep() {
            return;
        }
        let small = blind.held_bytes() <= SMALL_SPARE_BYTES;
        let max = if small {
            KEEP_SMALL_SPARES
        } else {
            KEEP_SPARES
        };
        self.spares.keep(blind, max);
    }

    /// Runs not yet inserted.
    pub(crate) fn len(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    pub(crate) fn push(&self, layer: Arc<Layer>, run: Arc<Run>) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.push_back((layer, run));
        self.count.fetch_add(1, Ordering::Release);
    }

    /// Insert every queued run into its memtable, in order, dropping each
    /// from `published`'s view once it is in. Returns how many this call
    /// inserted.
    pub(crate) fn drain(&self, published: &Published) -> u64 {
        if self.len() == 0 {
            return 0;
        }
        let order = self.order.lock().unwrap_or_else(|e| e.into_inner());
        self.insert_while(published, order, |_| true)
    }

    /// Insert the oldest runs until at most `keep` are queued, unless
    /// another thread is inserting them (it goes on until none are left):
    /// a committer past the soft bound takes a share, but never waits for
    /// the helper's batch. Returns how many this call inserted.
    pub(crate) fn drain_to(&self, published: &Published, keep: usize) -> u64 {
        if self.len() <= keep {
            return 0;
        }
        let order = match self.order.try_lock() {
            Ok(o) => o,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return 0,
        };
        self.insert_while(published, order, |queued| queued > keep)
    }

    /// Insert the oldest run while `go(runs queued)` says so.
    fn insert_while(
        &self,
        published: &Published,
        _order: MutexGuard<'_, ()>,
        go: impl Fn(usize) -> bool,
    ) -> u64 {
        let mut inserted = 0;
        loop {
            let next = {
                let q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
                if !go(q.len()) {
                    return inserted;
                }
                q.front().cloned()
            };
            let Some((layer, run)) = next else {
                return inserted;
            };
            inserted += 1;
            let started = Instant::now();
            run.apply(&layer);
            let ns = started.elapsed().as_nanos().try_into().unwrap_or(u64::MAX);
            self.apply_ns.fetch_add(ns, Ordering::Relaxed);
            self.applied.fetch_add(1, Ordering::Relaxed);
            published.unpublish_run(run.lsn);
            let queued = self
                .queue
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop_front();
            self.count.fetch_sub(1, Ordering::Release);
            drop(queued);
            self.recycle(run);
        }
    }
}
