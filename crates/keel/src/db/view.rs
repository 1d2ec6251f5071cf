//! What readers see: the published base and LSN, the read transactions
//! holding older bases, and when those expire (`SnapshotTooOld`). The
//! view itself is in `published.rs`; here, the store's work on it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::error::{DbError, Result};
use super::layers::{Base, Layer};
use super::run::Runs;
use super::state::{Lease, LeaseBase, Shared};
use super::sync::lock;
use super::writer::WriterState;
use crate::journal::Lsn;
use crate::stripe::stripe;

/// Bytes of the `retired` memtables (see `View::retired`) that the
/// readers of generation `gen` and newer keep alive.
fn pinned_from(retired: &[(u64, u64)], gen: u64) -> u64 {
    retired
        .iter()
        .filter(|&&(g, _)| gen < g)
        .map(|&(_, bytes)| bytes)
        .sum()
}

impl Shared {
    /// The published snapshot, registered as held until [`Self::unpin`]
    /// (with the base's generation).
    pub(crate) fn pin(&self) -> (Arc<Base>, Lsn) {
        let (base, lsn, _, _) = self.pin_versioned();
        (base, lsn)
    }

    /// [`Self::pin`], with the runs not yet in the base's memtable and the
    /// view's version.
    fn pin_versioned(&self) -> (Arc<Base>, Lsn, Option<Runs>, u64) {
        let mut v = lock(&self.published.view);
        let (base, runs) = (Arc::clone(&v.base), v.runs.clone());
        // Under the lock: no base or runs change meanwhile (an LSN-only
        // publish may: any LSN read now is one the base and runs show).
        let lsn = self.published.lsn_now();
        *v.readers.entry(base.gen).or_insert(0) += 1;
        let version = self.published.version.load(Ordering::Relaxed);
        (base, lsn, runs, version)
    }

    /// Whether a read transaction on a base of generation `gen` may still
    /// read (else why not).
    pub(crate) fn check_snapshot(&self, gen: u64, lsn: Lsn) -> Result<()> {
        if gen < self.published.expired_below.load(Ordering::Relaxed) {
            return Err(DbError::SnapshotTooOld {
                lsn,
                limit: self.options.reader_pinned_bytes,
            });
        }
        Ok(())
    }

    /// A fold that made generation `gen` replaced `layer`: if read
    /// transactions still hold it, count its memory as theirs; then, while
    /// the memory that unexpired readers keep alive this way exceeds
    /// `reader_pinned_bytes`, expire the oldest of them. An expired
    /// reader's memory is freed when it is dropped.
    pub(super) fn retire(&self, gen: u64, layer: &Layer) {
        let mut v = lock(&self.published.view);
        let v = &mut *v;
        v.retired.push((gen, layer.bytes()));
        // Held by the readers of an older base, expired or not.
        let oldest = v.readers.keys().next().copied();
        v.retired.retain(|&(g, _)| oldest.is_some_and(|o| o < g));
        let below = self.published.expired_below.load(Ordering::Relaxed);
        let limit = self.options.reader_pinned_bytes;
        // The oldest unexpired generation read whose pins fit the limit
        // (readers of the new base, `gen`, pin none of these).
        let keep = v
            .readers
            .keys()
            .copied()
            .filter(|&r| r >= below)
            .find(|&r| pinned_from(&v.retired, r) <= limit)
            .unwrap_or(gen);
        if keep > below {
            let expired: usize = v.readers.range(below..keep).map(|(_, n)| n).sum();
            self.published.expired_below.store(keep, Ordering::Relaxed);
            self.counters
                .snapshots_expired
                .fetch_add(expired as u64, Ordering::Relaxed);
        }
    }

    /// Bytes of folded memtables that unexpired read transactions keep
    /// alive.
    pub(crate) fn reader_pinned_bytes(&self) -> u64 {
        let v = lock(&self.published.view);
        let below = self.published.expired_below.load(Ordering::Relaxed);
        let oldest = v.readers.keys().copied().find(|&r| r >= below);
        oldest.map_or(0, |r| pinned_from(&v.retired, r))
    }

    pub(crate) fn unpin(&self, gen: u64) {
        let mut v = lock(&self.published.view);
        if let Some(n) = v.readers.get_mut(&gen) {
            *n -= 1;
            if *n == 0 {
                v.readers.remove(&gen);
            }
        }
    }

    /// Make the state after `lsn` (now durable) what new readers see; see
    /// [`Published::publish`](super::published::Published::publish).
    pub(crate) fn publish(&self, lsn: Lsn) {
        self.published.publish(lsn);
    }

    /// Make `base` the writer's and what new readers see (the caller holds
    /// the writer's state `w`). The base it replaces is dropped on the
    /// helper's thread: dropping a folded memtable frees its nodes and
    /// hands its chunks back to the pool.
    pub(super) fn set_base(&self, w: &mut WriterState, base: Base) {
        let base = Arc::new(base);
        let old = {
            let mut v = lock(&self.published.view);
            self.published.changed();
            std::mem::replace(&mut v.base, Arc::clone(&base))
        };
        w.base = base;
        // Leases of the replaced base would keep it (and the pages and
        // memtables only it refers to) alive after their last reader.
        self.drop_stale_leases();
        match &self.helper {
            Some(h) => h.dispose(old),
            None => drop(old),
        }
    }

    /// The lease of the published snapshot for a new read transaction:
    /// this thread's stripe's, if still the published one (no lock but
    /// the stripe's own, which only this thread takes unless more than
    /// `STRIPES` threads read; no write another reader makes), else a new
    /// one made under the view's lock and kept in the stripe.
    pub(crate) fn lease(self: &Arc<Self>) -> Arc<Lease> {
        // The LSN first: a publish that changes the base or the runs
        // changes the version before it stores its LSN, so a version
        // read after an LSN is at least the one that LSN needs.
        let lsn = self.published.lsn_now();
        let version = self.published.version.load(Ordering::Acquire);
        let stripe = &self.leases[stripe()];
        let same_base = match lock(stripe).as_ref().filter(|l| l.version == version) {
            Some(l) if l.lsn >= lsn => return Arc::clone(l),
            // Only the LSN moved: the same base, read at the new LSN.
            Some(l) => Some(Arc::clone(&l.base)),
            None => None,
        };
        let (base, lsn) = match same_base {
            Some(base) => (base, lsn),
            None => {
                let (tree, lsn, runs, version) = self.pin_versioned();
                let base = LeaseBase {
                    shared: Arc::clone(self),
                    tree,
                    runs,
                    version,
                };
                (Arc::new(base), lsn)
            }
        };
        let lease = Arc::new(Lease {
            base,
            lsn,
            table_ids: Mutex::new(Vec::new()),
        });
        // The old lease is dropped outside the stripe's lock: its last
        // reference unpins under the view's.
        let old = lock(stripe).replace(Arc::clone(&lease));
        drop(old);
        lease
    }

    /// Forget the stripes' leases of anything but the published snapshot
    /// (their read transactions keep theirs).
    pub(super) fn drop_stale_leases(&self) {
        let version = self.published.version.load(Ordering::Acquire);
        for stripe in self.leases.iter() {
            let old = {
                let mut l = lock(stripe);
                match l.as_ref() {
                    Some(lease) if lease.version != version => l.take(),
                    _ => None,
                }
            };
            drop(old);
        }
    }

    /// Forget every stripe's lease: a lease refers to the store, so the
    /// store cannot go (and release its lock) while one is kept.
    pub(crate) fn drop_leases(&self) {
        for stripe in self.leases.iter() {
            let old = lock(stripe).take();
            drop(old);
        }
    }

    /// The published base, not registered as held (for counters).
    pub(crate) fn base(&self) -> Arc<Base> {
        Arc::clone(&lock(&self.published.view).base)
    }

    /// The published LSN.
    pub(crate) fn published_lsn(&self) -> Lsn {
        self.published.lsn_now()
    }

    /// Wait until the published LSN reaches `lsn` (or the store is
    /// poisoned).
    pub(crate) fn wait_published(&self, lsn: Lsn) -> Result<()> {
        let p = &self.published;
        if p.lsn_now() >= lsn {
            return Ok(());
        }
        let mut v = lock(&p.view);
        loop {
            self.check_poison()?;
            // Counted before the check (both sequentially consistent, as
            // the publisher's store and its read of the count): a publish
            // this check misses sees the count and wakes us through the
            // lock we hold until we wait.
            p.lsn_waiters.fetch_add(1, Ordering::SeqCst);
            if p.lsn_now.load(Ordering::SeqCst) >= lsn {
                p.lsn_waiters.fetch_sub(1, Ordering::SeqCst);
                return Ok(());
            }
            v = p.view_cv.wait(v).unwrap_or_else(|e| e.into_inner());
            p.lsn_waiters.fetch_sub(1, Ordering::SeqCst);
        }
    }
}
