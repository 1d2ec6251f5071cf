//! Which thread holds the writer slot.
//!
//! A write transaction takes the slot at its first read and keeps it until
//! it ends. If the thread it runs on then waits for the slot itself — a
//! second write transaction's read or commit, `checkpoint`, `close` — it
//! would wait forever: the slot records the thread that took it, and
//! those calls fail with [`DbError::WouldDeadlock`] instead.
//!
//! The cost: a thread-local read where the slot is taken, where a
//! transaction holding it is used (to follow one moved to another thread)
//! and where a caller would wait for it; nothing on the read path, and on
//! a blind commit's only when it would queue while the slot is held.

use std::thread::ThreadId;

use super::combine::Slot;
use super::error::{DbError, Result};
use super::store::{lock, Shared};

thread_local! {
    static THIS_THREAD: ThreadId = std::thread::current().id();
}

/// This thread's id; after the first call, a read of a thread-local.
pub(crate) fn this_thread() -> ThreadId {
    THIS_THREAD
        .try_with(|t| *t)
        .unwrap_or_else(|_| std::thread::current().id())
}

impl Slot {
    /// Whether this thread holds the slot.
    pub(super) fn held_here(&self) -> bool {
        self.holder.is_some_and(|h| h == this_thread())
    }

    /// Record this thread as the slot's holder.
    pub(super) fn hold_here(&mut self) {
        self.holder = Some(this_thread());
    }
}

impl Shared {
    /// Whether this thread holds the writer slot.
    pub(crate) fn writer_held_here(&self) -> bool {
        lock(&self.writer).held_here()
    }

    /// Fail with [`DbError::WouldDeadlock`] (`what` would wait) if this
    /// thread holds the writer slot.
    pub(crate) fn refuse_if_holder(&self, what: &'static str) -> Result<()> {
        match self.writer_held_here() {
            true => Err(DbError::WouldDeadlock(what)),
            false => Ok(()),
        }
    }

    /// Make this thread the slot's holder: the write transaction holding
    /// it is used on this thread now (it was moved).
    pub(crate) fn hold_here(&self) {
        lock(&self.writer).hold_here();
    }
}
