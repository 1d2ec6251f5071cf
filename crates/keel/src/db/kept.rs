//! Emptied buffers kept for reuse: the next transaction or group of
//! commits takes one instead of growing new ones, which on these VMs
//! often means memory the process has not touched yet
//! (docs/store-performance.md, "Why memory touched first costs so much
//! here"). Used for blind
//! transactions (`pending::Unapplied::spare_blind`) and for a group's
//! vectors (`combine::GroupSpares`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::sync::lock;

/// A few emptied values of `T`, kept for the next to take.
pub(crate) struct Kept<T> {
    list: Mutex<VecDeque<T>>,
    /// `list.len()`, read without the lock.
    count: AtomicUsize,
}

impl<T> Default for Kept<T> {
    fn default() -> Self {
        Kept {
            list: Mutex::new(VecDeque::new()),
            count: AtomicUsize::new(0),
        }
    }
}

impl<T> std::fmt::Debug for Kept<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept")
            .field("count", &self.count.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<T> Kept<T> {
    /// One kept value, if there is one (no lock when there is none: most
    /// stores keep nothing of some kinds).
    pub(crate) fn take(&self) -> Option<T> {
        self.take_from(VecDeque::pop_back)
    }

    /// The value kept longest ago, if there is one.
    ///
    /// Why, for blind transactions: the one kept last is the one the
    /// helper thread has just inserted into the memtable, its bytes still
    /// in the other vCPU's cache, and writing a new transaction's puts
    /// over them cost the committer a cache line taken from there at each
    /// line. Taken oldest first, `WriteTxn::insert`'s samples of w3's
    /// committer halved (185 and 155 against 420 and 309, `perf record`,
    /// 10,000 transactions of 100 puts).
    pub(crate) fn take_oldest(&self) -> Option<T> {
        self.take_from(VecDeque::pop_front)
    }

    fn take_from(&self, pop: fn(&mut VecDeque<T>) -> Option<T>) -> Option<T> {
        if self.count.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut list = lock(&self.list);
        let value = pop(&mut list);
        self.count.store(list.len(), Ordering::Relaxed);
        value
    }

    /// Keep `value` (emptied by the caller) unless `max` are kept already.
    pub(crate) fn keep(&self, value: T, max: usize) {
        let mut list = lock(&self.list);
        if list.len() < max {
            list.push_back(value);
            self.count.store(list.len(), Ordering::Relaxed);
        }
    }
}
