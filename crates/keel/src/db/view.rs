//! What readers see: the published base and LSN, the read transactions
//! holding older bases, and when those expire (`SnapshotTooOld`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use super::direct::DirectGate;
use super::error::{DbError, Result};
use super::layers::{Base, Layer};
use super::order::ApplyOrder;
use super::pending::{Run, Runs};
use super::store::{lock, Shared, WriterState};
use crate::journal::Lsn;
use crate::stripe::{stripe, STRIPES};
use crossbeam_utils::CachePadded;

/// What readers see: the newest base at the highest durable LSN, and how
/// many readers hold each base's tree (by [`Base::gen`]).
#[derive(Debug)]
pub(super) struct View {
    pub base: Arc<Base>,
    pub lsn: Lsn,
    pub readers: BTreeMap<u64, usize>,
    /// Durable commits published before their changes are in the active
    /// memtable, oldest first (`None`: none). See `super::pending`.
    pub runs: Option<Runs>,
    /// The list `runs` last emptied into, kept for the next publish (no
    /// reader holds it: it is never shown).
    spare_runs: Option<Runs>,
    /// Threads in `wait_published` (a publish notifies only then: a
    /// notify nobody waits for is still a futex call, once per commit).
    lsn_waiters: usize,
    /// Memtables that folds replaced while readers still held them: the
    /// generation `g` of the fold that replaced each (readers of a base
    /// older than `g` hold it) and its bytes. See [`Shared::retire`].
    retired: Vec<(u64, u64)>,
}

/// Bytes of the `retired` memtables (see [`View::retired`]) that the
/// readers of generation `gen` and newer keep alive.
fn pinned_from(retired: &[(u64, u64)], gen: u64) -> u64 {
    retired
        .iter()
        .filter(|&&(g, _)| gen < g)
        .map(|&(_, bytes)| bytes)
        .sum()
}

/// A published snapshot held for read transactions: the ones a thread
/// begins while nothing new is published share one, so beginning one
/// writes only to this thread's stripe and to the lease's count (which
/// only this thread's transactions change). Registered as a reader of its
/// base's generation from its making until its last holder drops it.
pub(crate) struct Lease {
    pub shared: Arc<Shared>,
    pub base: Arc<Base>,
    pub lsn: Lsn,
    /// Commits at or below `lsn` not yet in `base`'s memtable when the
    /// lease was made, oldest first (`super::pending`).
    pub runs: Option<Runs>,
    /// Table ids this snapshot's catalog gave, by name: a thread's read
    /// transactions between two publishes look a table up once (at most
    /// [`TABLE_IDS`]; a lock only this thread's transactions take).
    pub table_ids: Mutex<Vec<(Box<str>, u32)>>,
    version: u64,
}

/// Table ids a [`Lease`] remembers.
pub(crate) const TABLE_IDS: usize = 8;

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("lsn", &self.lsn)
            .finish_non_exhaustive()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.shared.unpin(self.base.gen);
    }
}

/// The stripes' leases (see [`Shared::lease`]).
pub(crate) type Leases = Box<[CachePadded<Mutex<Option<Arc<Lease>>>>]>;

/// Empty stripes.
pub(crate) fn leases() -> Leases {
    (0..STRIPES)
        .map(|_| CachePadded::new(Mutex::new(None)))
        .collect()
}

/// The published view and the poison.
#[derive(Debug)]
pub(super) struct Published {
    pub view: Mutex<View>,
    /// Read transactions on a base of a generation below this one have
    /// expired ([`DbError::SnapshotTooOld`]).
    expired_below: AtomicU64,
    /// Bumped (under the view's lock, release) by every change to the
    /// view a reader takes: a [`Lease`] made at version `v` is the
    /// published snapshot while this still reads `v`.
    version: AtomicU64,
    view_cv: Condvar,
    /// `view.lsn` as last published through [`Published::publish_to`],
    /// read without the lock: at most `view.lsn`.
    lsn_now: AtomicU64,
    /// Which LSNs are applied and durable: what may be published.
    pub order: ApplyOrder,
    /// The gate of commits made without the writer slot.
    pub direct: DirectGate,
    pub poison: Mutex<Option<Arc<str>>>,
    /// Set with `poison` (read without its lock).
    poisoned: AtomicBool,
    /// The next publish panics (a test's injected bug).
    #[cfg(test)]
    pub panic_in_publish: std::sync::atomic::AtomicBool,
}

impl Published {
    pub(super) fn new(base: Arc<Base>, lsn: Lsn) -> Published {
        Published {
            view: Mutex::new(View {
                base,
                lsn,
                readers: BTreeMap::new(),
                runs: None,
                spare_runs: None,
                lsn_waiters: 0,
                retired: Vec::new(),
            }),
            expired_below: AtomicU64::new(0),
            version: AtomicU64::new(0),
            view_cv: Condvar::new(),
            lsn_now: AtomicU64::new(lsn),
            order: ApplyOrder::default(),
            direct: DirectGate::default(),
            poison: Mutex::new(None),
            poisoned: AtomicBool::new(false),
            #[cfg(test)]
            panic_in_publish: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// `lsn` (and every LSN before it) is durable: publish what that
    /// allows ([`Published::publish_to`]).
    pub(super) fn publish(&self, lsn: Lsn) {
        #[cfg(test)]
        if self.panic_in_publish.swap(false, Ordering::Relaxed) {
            panic!("injected: the publish failed");
        }
        self.publish_to(self.order.durable(lsn));
    }

    /// Make the state after `lsn` what new readers see, unless a later
    /// state is already published: committers may wake out of order, and
    /// the published LSN never moves back. `lsn` must be durable and
    /// applied, with every LSN below it (what [`ApplyOrder`] returns).
    pub(super) fn publish_to(&self, lsn: Lsn) {
        if lsn <= self.lsn_now.load(Ordering::Acquire) {
            return;
        }
        let mut v = lock(&self.view);
        if lsn > v.lsn {
            v.lsn = lsn;
            self.lsn_now.store(lsn, Ordering::Release);
            self.changed();
        }
        let wake = v.lsn_waiters > 0;
        drop(v);
        if wake {
            self.view_cv.notify_all();
        }
    }

    /// Publish `run` (durable) and its LSN together: new readers search it
    /// above the memtable until [`Published::unpublish_run`].
    pub(super) fn publish_run(&self, run: Arc<Run>) {
        let mut v = lock(&self.view);
        if v.runs.is_none() {
            v.runs = Some(v.spare_runs.take().unwrap_or_default());
        }
        let runs = v.runs.as_mut().expect("set above");
        // Copy on write: the list changes in place unless a reader holds
        // it (readers take it under this lock). A new list and a clone of
        // every run in it on each commit cost the committer an allocation
        // and a cache line from the helper's vCPU per run.
        Arc::make_mut(runs).push(Arc::clone(&run));
        // Every commit before it was applied by the writer slot's holder,
        // which this run's committer is (and no direct commit runs
        // meanwhile): it is published now.
        self.order.durable(run.lsn);
        let publishable = self.order.complete(run.lsn);
        debug_assert_eq!(publishable, run.lsn, "a run published out of order");
        v.lsn = v.lsn.max(run.lsn);
        self.lsn_now.store(v.lsn, Ordering::Release);
        self.changed();
        let wake = v.lsn_waiters > 0;
        drop(v);
        if wake {
            self.view_cv.notify_all();
        }
    }

    /// Stop showing the run of `lsn` to new readers: its changes are in
    /// the memtable now.
    pub(super) fn unpublish_run(&self, lsn: Lsn) {
        let mut v = lock(&self.view);
        let Some(runs) = v.runs.as_mut() else { return };
        // As in `publish_run`; once empty, the list goes (readers see
        // `None`) and is kept for the next publish: no reader holds it
        // after `make_mut`.
        Arc::make_mut(runs).retain(|r| r.lsn != lsn);
        if runs.is_empty() {
            v.spare_runs = v.runs.take();
        }
        self.changed();
    }

    /// Note a change to the view (under its lock).
    fn changed(&self) {
        self.version.fetch_add(1, Ordering::Release);
    }

    /// Whether the store is poisoned (without the poison's lock).
    pub(super) fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    /// Record the first failure; close the direct commits' gate; wake
    /// whoever waits for publication.
    pub(super) fn set_poison(&self, why: &str) -> Arc<str> {
        let why: Arc<str> = {
            let mut p = lock(&self.poison);
            Arc::clone(p.get_or_insert_with(|| why.into()))
        };
        self.poisoned.store(true, Ordering::Release);
        self.direct.close();
        drop(lock(&self.view));
        self.view_cv.notify_all();
        why
    }
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
        let (base, lsn, runs) = (Arc::clone(&v.base), v.lsn, v.runs.clone());
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
    /// [`Published::publish`].
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
        let version = self.published.version.load(Ordering::Acquire);
        let stripe = &self.leases[stripe()];
        if let Some(l) = lock(stripe).as_ref().filter(|l| l.version == version) {
            return Arc::clone(l);
        }
        let lease = {
            let (base, lsn, runs, version) = self.pin_versioned();
            Arc::new(Lease {
                shared: Arc::clone(self),
                base,
                lsn,
                runs,
                table_ids: Mutex::new(Vec::new()),
                version,
            })
        };
        let old = lock(stripe).replace(Arc::clone(&lease));
        // Dropped outside the stripe's lock: the last reference unpins
        // under the view's.
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
        lock(&self.published.view).lsn
    }

    /// Wait until the published LSN reaches `lsn` (or the store is
    /// poisoned).
    pub(crate) fn wait_published(&self, lsn: Lsn) -> Result<()> {
        if self.published.lsn_now.load(Ordering::Acquire) >= lsn {
            return Ok(());
        }
        let mut v = lock(&self.published.view);
        while v.lsn < lsn {
            self.check_poison()?;
            v.lsn_waiters += 1;
            v = self
                .published
                .view_cv
                .wait(v)
                .unwrap_or_else(|e| e.into_inner());
            v.lsn_waiters -= 1;
        }
        Ok(())
    }
}
