//! Small blind commits, each made by its own thread without the writer
//! slot: it submits its record, inserts its puts into the memtable and
//! waits for the journal, as many at once as there are committers.
//!
//! Why: with every blind commit queued for the writer slot, one thread at
//! a time (a group's leader) submitted and inserted every commit of its
//! group while the others slept, and the next group waited for it: on a
//! 16-core server w2 at 64 committers ran at 273k commits/s against the
//! journal alone's 423k. A blind transaction read nothing, so it gives the
//! same result whenever it runs, and one whose tables all exist needs
//! nothing of the writer's state but the table ids and the memtable to
//! insert into: the slot adds nothing to its correctness.
//!
//! What the slot still orders, a [`DirectGate`](super::gate::DirectGate)
//! keeps: whoever takes the
//! writer slot (a transaction that reads, a group's leader, a checkpoint)
//! *closes* the gate first, which waits for the direct commits inside to
//! finish their insert, so that the slot's holder sees every commit given
//! an LSN and none starts until it gives the slot back (and *opens* the
//! gate with the tables and the memtable as it leaves them). A direct
//! commit that finds the gate closed, or a table it does not know, is
//! queued for the slot as before (`Shared::commit_blind`).
//!
//! The gate is one lock per thread stripe, not one lock: a direct commit
//! takes its own stripe's (a line no other committer writes, unless more
//! than `STRIPES` threads commit), and closing takes each stripe's once.
//! Readers never see a commit before every lower LSN is in the memtable
//! and durable: `super::order`.

use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;

use super::blind::Blind;
use super::combine::START_MIN_OPS;
use super::error::{DbError, Result};
use super::options::Durability;
use super::state::Shared;
use super::sync::lock;
use super::writer::WriterState;
use crate::stripe::stripe;

impl Shared {
    /// Close the direct commits' gate for the writer slot's new holder,
    /// holding `w`: afterwards every commit given an LSN is in the
    /// memtable, and `w.last_lsn` is the last of them.
    pub(crate) fn close_direct(&self, w: &mut WriterState) {
        let last = self.published.direct.close();
        w.last_lsn = w.last_lsn.max(last);
        // The first holder after opening: every LSN up to here applied.
        self.published.order.start_at(w.last_lsn);
    }

    /// Open the gate as the slot's holder gives `w` back (not once the
    /// store is poisoned: queued commits then learn why).
    pub(crate) fn open_direct(&self, w: &WriterState) {
        if self.check_poison().is_ok() {
            self.published.direct.open(w);
        }
    }

    /// Commit `blind` on this thread without the writer slot, if it is
    /// small, the gate is open and every table it opened is known to
    /// exist (its result; `blind` emptied); else `None`, `blind` left for
    /// the slot's queue.
    pub(crate) fn commit_direct(
        self: &Arc<Self>,
        blind: &mut Blind,
        durability: Durability,
    ) -> Option<Result<()>> {
        // A large one gains from being written while it is inserted, or
        // published as a run (`combine`).
        if blind.len() >= START_MIN_OPS || self.published.is_poisoned() {
            return None;
        }
        #[cfg(test)]
        if self
            .faults
            .no_direct
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return None;
        }
        let max_record = self.journal.options().max_record_bytes();
        let mut cell = lock(&self.published.direct.cells[stripe()]);
        let open = cell.open.as_deref()?;
        let rec = blind.encode_known(&open.ids, max_record)?;
        let bytes = rec.len();
        let submitted = rec.submit(&self.journal);
        drop(rec);
        let handle = match submitted {
            Ok(h) => h,
            Err(e) => {
                drop(cell);
                let why = self.set_poison(&format!("the journal refused a record: {e}"));
                return Some(Err(DbError::Poisoned(why)));
            }
        };
        let lsn = handle.lsn();
        // A panic here (a bug) would leave `lsn` never applied and every
        // later commit unpublished: it poisons the store instead (the
        // gate's lock is let go on the way), then goes on up this thread.
        #[cfg(test)]
        match self
            .faults
            .direct_apply_delay_ms
            .swap(0, std::sync::atomic::Ordering::Relaxed)
        {
            0 => {}
            ms => std::thread::sleep(std::time::Duration::from_millis(ms)),
        }
        let applied = panic::catch_unwind(AssertUnwindSafe(|| {
            blind.apply_direct(&open.base.active, lsn);
            self.applied(&open.base, bytes);
            self.published.order.complete(lsn)
        }));
        cell.last_lsn = cell.last_lsn.max(lsn);
        drop(cell);
        let publishable = match applied {
            Ok(p) => p,
            Err(p) => {
                self.panicked("a commit", p.as_ref());
                panic::resume_unwind(p)
            }
        };
        self.published.publish_to(publishable);
        self.unapplied
            .keep_spare(std::mem::replace(blind, Blind::new()));
        self.counters.direct_commits.add(0, 1);
        Some(match durability {
            Durability::Immediate => match handle.wait() {
                Ok(_) => {
                    if let Err(p) = panic::catch_unwind(AssertUnwindSafe(|| self.publish(lsn))) {
                        let why = self.panicked("a commit", p.as_ref());
                        return Some(Err(DbError::CommitFailed(why)));
                    }
                    // Every lower LSN is durable; one may still be being
                    // inserted on another thread.
                    self.wait_published(lsn)
                }
                Err(e) => {
                    let why = self.set_poison(&format!("writing lsn {lsn} failed: {e}"));
                    Err(DbError::CommitFailed(why))
                }
            },
            Durability::Eventual => {
                self.publish_on_durable(handle, lsn, |_| {});
                Ok(())
            }
        })
    }
}
