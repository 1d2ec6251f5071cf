//! The writer slot (the writer's state while no one holds it, and the
//! blind transactions queued for it) and the tickets its queued
//! committers wait on: the store's state holds it; `combine` commits
//! what is queued, `holder` and `store` take and give back the state.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::blind::Blind;
use super::error::Result;
use super::options::Durability;
use super::writer::WriterState;
use crate::bell::Bell;

/// Bells queued committers sleep on ([`Bell`]): those queued between two
/// takings of the queue share one, `generation % BELLS`, so that one
/// system call wakes a group. At most 64: `combine`'s `Rings` is a `u64` mask.
pub(crate) const BELLS: usize = 64;

/// The committers' bells.
pub(crate) fn bells() -> Arc<[Bell]> {
    (0..BELLS).map(|_| Bell::default()).collect()
}

/// The writer slot: the writer's state while no one holds it, and the
/// blind transactions waiting to be committed.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    pub state: Option<WriterState>,
    /// The thread that took the state with `Shared::take_writer` (a
    /// write transaction's, when it reads), until it is given back: that
    /// thread waiting for the slot would wait forever
    /// (`DbError::WouldDeadlock`; `super::holder`). `None` while a
    /// group's leader holds it: no caller's code runs then.
    pub holder: Option<std::thread::ThreadId>,
    pub(super) queue: Vec<Queued>,
    /// Transactions (or checkpoints) waiting in `take_writer`.
    pub(super) waiting: usize,
    /// The queue goes first at the next hand-over (it waited while a
    /// waiting transaction was given the slot).
    pub(super) queue_turn: bool,
    /// Times the queue was taken: its committers sleep on bell
    /// `generation % BELLS`.
    pub(super) generation: usize,
    /// An emptied queue kept for the next (as `combine`'s group vectors
    /// are).
    pub(super) spare_queue: Vec<Queued>,
}

impl Slot {
    /// Take the queued transactions (a group's members), so that those
    /// queued next sleep on the next bell.
    pub(super) fn take_queue(&mut self) -> Vec<Queued> {
        self.generation = self.generation.wrapping_add(1);
        let spare = std::mem::take(&mut self.spare_queue);
        std::mem::replace(&mut self.queue, spare)
    }

    /// Take the queue as a group led by `head`.
    pub(super) fn take_group(&mut self, head: Queued) -> Vec<Queued> {
        let mut group = self.take_queue();
        group.insert(0, head);
        group
    }

    /// Keep `queue` (emptied, not too large) for [`Slot::take_queue`].
    pub(super) fn keep_queue(&mut self, mut queue: Vec<Queued>) {
        queue.clear();
        if self.spare_queue.capacity() == 0 && queue.capacity() <= KEEP_GROUP_CAPACITY {
            self.spare_queue = queue;
        }
    }

    /// The bell a transaction queued now sleeps on.
    pub(super) fn bell(&self) -> usize {
        self.generation % BELLS
    }
}

/// Vectors longer than this are not kept.
pub(super) const KEEP_GROUP_CAPACITY: usize = 1024;

/// A blind transaction waiting in the queue.
#[derive(Debug)]
pub(super) struct Queued {
    pub(super) ticket: Arc<Ticket>,
    pub(super) blind: Blind,
    pub(super) durability: Durability,
}

/// How a queued committer learns what became of its transaction: the
/// state, set before its bell rings.
#[derive(Debug)]
pub(super) struct Ticket {
    /// Its bell's index, set under the slot's lock when it is queued.
    pub(super) bell: AtomicUsize,
    pub(super) state: Mutex<TicketState>,
}

#[derive(Debug)]
pub(super) enum TicketState {
    Waiting,
    Done(Result<()>),
    /// Lead a group: the slot's state, and the ticket's own transaction.
    Lead(WriterState, Queued),
}

impl Ticket {
    pub(super) fn bell(&self) -> usize {
        self.bell.load(Ordering::Relaxed)
    }
}
