//! The published view: what new readers see (the base, the LSN, the runs
//! not yet in the memtable), which generations readers hold, and the
//! poison. Readers and the commit path work on it through `Shared`
//! (`view.rs`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use super::gate::DirectGate;
use super::layers::Base;
use super::order::ApplyOrder;
use super::run::{Run, Runs};
use super::sync::lock;
use crate::journal::Lsn;

/// What readers see: the newest base at the highest durable LSN, and how
/// many readers hold each base's tree (by [`Base::gen`]).
#[derive(Debug)]
pub(super) struct View {
    pub base: Arc<Base>,
    pub readers: BTreeMap<u64, usize>,
    /// Durable commits published before their changes are in the active
    /// memtable, oldest first (`None`: none). See `super::pending`.
    pub runs: Option<Runs>,
    /// The list `runs` last emptied into, kept for the next publish (no
    /// reader holds it: it is never shown).
    pub(super) spare_runs: Option<Runs>,
    /// Memtables that folds replaced while readers still held them: the
    /// generation `g` of the fold that replaced each (readers of a base
    /// older than `g` hold it) and its bytes. See `Shared::retire`.
    pub(super) retired: Vec<(u64, u64)>,
}

/// The published view and the poison.
#[derive(Debug)]
pub(super) struct Published {
    pub view: Mutex<View>,
    /// Read transactions on a base of a generation below this one have
    /// expired ([`DbError::SnapshotTooOld`](super::DbError::SnapshotTooOld)).
    pub(super) expired_below: AtomicU64,
    /// Bumped (under the view's lock, release) by every change to the
    /// base or the runs a reader takes (not by a publish that moves only
    /// the LSN): a `LeaseBase` made at version `v` is the published base
    /// and runs while this still reads `v`.
    pub(super) version: AtomicU64,
    pub(super) view_cv: Condvar,
    /// The published LSN: raised (never lowered) without the view's lock
    /// by [`Published::publish_to`], under it by
    /// [`Published::publish_run`].
    pub(super) lsn_now: AtomicU64,
    /// Threads in `wait_published` (a publish notifies only then: a
    /// notify nobody waits for is still a futex call, once per commit).
    pub(super) lsn_waiters: AtomicUsize,
    /// Which LSNs are applied and durable: what may be published.
    pub order: ApplyOrder,
    /// The gate of commits made without the writer slot.
    pub direct: DirectGate,
    pub poison: Mutex<Option<Arc<str>>>,
    /// Set with `poison` (read without its lock).
    pub(super) poisoned: AtomicBool,
    /// The next publish panics (a test's injected bug).
    #[cfg(test)]
    pub panic_in_publish: std::sync::atomic::AtomicBool,
}

impl Published {
    pub(super) fn new(base: Arc<Base>, lsn: Lsn) -> Published {
        Published {
            view: Mutex::new(View {
                base,
                readers: BTreeMap::new(),
                runs: None,
                spare_runs: None,
                retired: Vec::new(),
            }),
            expired_below: AtomicU64::new(0),
            version: AtomicU64::new(0),
            view_cv: Condvar::new(),
            lsn_now: AtomicU64::new(lsn),
            lsn_waiters: AtomicUsize::new(0),
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
        // Without the view's lock: only the LSN moves (the version does
        // not), so a thread's next read transaction reads its lease's
        // base at the new LSN (`Shared::lease`).
        if self.lsn_now.fetch_max(lsn, Ordering::SeqCst) >= lsn {
            return;
        }
        self.wake_waiters();
    }

    /// Wake the threads in `wait_published`, if any. After a store of a
    /// new LSN (sequentially consistent, as the waiters' count and their
    /// check of the LSN: a waiter either sees the LSN or is counted here),
    /// and through the view's lock (a counted waiter is either still
    /// before its wait, holding the lock, or waiting).
    fn wake_waiters(&self) {
        if self.lsn_waiters.load(Ordering::SeqCst) > 0 {
            drop(lock(&self.view));
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
        // The version before the LSN: a reader that sees the LSN sees
        // that its lease's runs are not the published ones.
        self.changed();
        self.lsn_now.fetch_max(run.lsn, Ordering::SeqCst);
        drop(v);
        self.wake_waiters();
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

    /// The published LSN, read without the lock (acquire: a version read
    /// after it is at least the one it was published with).
    pub(super) fn lsn_now(&self) -> Lsn {
        self.lsn_now.load(Ordering::Acquire)
    }

    /// Note a change to the view's base or runs (under its lock; before
    /// a new LSN that needs it is stored in `lsn_now`).
    pub(super) fn changed(&self) {
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
