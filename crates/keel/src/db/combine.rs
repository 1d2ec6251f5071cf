//! The writer slot, and the commits combined under it.
//!
//! One write transaction at a time holds the writer slot (the base commits
//! go into). A transaction that has only made blind changes — opened
//! tables and inserted — has read nothing, so it gives the same result
//! whenever it runs: its `commit` queues it (unless it is small and its
//! tables known, and the slot is free: then its own thread commits it,
//! `super::direct`). Whoever takes the slot next
//! with a queue waiting becomes the *leader* and commits the whole queue:
//! for each transaction in order, it replays the changes over the state
//! the earlier ones left (creating the tables it opened if they are
//! missing), checks the record, submits it to the journal; then it inserts
//! the records' changes into the memtable while the journal writes them,
//! gives the slot back, waits once for the last record to be durable (the
//! journal makes records durable in LSN order, so every earlier one is
//! too), publishes, and wakes the others with their results.
//!
//! Why: with one transaction per slot hand-over, each of T committers
//! sleeps twice per commit, once for the slot and once for the journal. On
//! these 2-vCPU VMs a sleep and its wake-up cost about as much CPU as the
//! commit itself (w2 at T=64: 2.1 context switches and 28 µs of CPU per
//! commit). Combined, a committer sleeps once.
//!
//! The committers queued between two takings of the queue (a group's
//! members) sleep on one futex word, a [`Bell`]: whoever tells them their
//! results sets each one's ticket, then wakes them all with one system
//! call instead of one per committer (w2 at T=64: 1.37 instead of 1.88
//! `futex` calls per commit, 1.28 instead of 1.38 context switches).
//!
//! Each transaction is still its own journal record, so recovery and its
//! atomicity are unchanged: a crash keeps a prefix of the group's records,
//! each whole or absent. No committer is told its commit succeeded before
//! its record is durable (`Durability::Immediate`) — or, for
//! `Durability::Eventual`, before it is applied.
//!
//! Fairness: a transaction waiting for the slot to read (or a checkpoint)
//! and the queue take turns, so neither starves.

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::Instant;

use super::blind::Blind;
use super::error::{DbError, Result};
use super::kept::Kept;
use super::options::Durability;
use super::pending::MAX_UNAPPLIED_RUNS;
use super::published::Published;
use super::run::Run;
use super::slot::{Queued, Slot, Ticket, TicketState, KEEP_GROUP_CAPACITY};
use super::state::{OverlapCounters, Shared};
use super::sync::lock;
use super::txn::Active;
use super::writer::WriterState;
use crate::bell::Bell;
use crate::journal::{CommitHandle, JournalError, Lsn};

/// Commits of at least this many changes hand their record's write to the
/// journal's flusher thread before inserting them into the memtable, so
/// that the apply overlaps the write; smaller ones apply first and then write the
/// record themselves in `wait` (the journal's lone-committer path). Waking
/// the flusher costs tens of µs on these VMs (an idle vCPU halts and needs
/// an interrupt from the hypervisor), more than a small apply takes: with
/// the hand-off on every commit, w1 (one 16 KiB put per commit) ran at
/// 0.69x the journal alone, the committer itself writing the batch in 775
/// of 2,000 commits because the flusher had not yet run (perf sched,
/// 2026-11-23, when a change cost about 3 µs to apply to the tree; into
/// the memtable it costs about 1 µs at a million keys).
pub(super) const START_MIN_OPS: usize = 16;

/// The vectors a group is committed with, kept from one group to the next
/// instead of allocated and freed for each (and the queue's, in
/// [`Slot`]).
///
/// Why: the leader changes from group to group among the committing
/// threads, and each thread's allocator heap took fresh pages for its
/// first groups — with transparent huge pages, 2 MiB zeroed by the kernel
/// at a time: 4% of w2's CPU at T=64 in a 3-second run (perf, 2026-11-26),
/// and the queue's vector was allocated by one thread and freed by
/// another at every group.
#[derive(Debug, Default)]
pub(crate) struct GroupSpares(Kept<GroupBufs>);

/// The process's kept group vectors (its stores share them: they are
/// empty, and a thread commits to one store at a time).
static GROUP_SPARES: LazyLock<GroupSpares> = LazyLock::new(GroupSpares::default);

/// One group's vectors (empty when kept).
#[derive(Default)]
struct GroupBufs {
    tickets: Vec<Arc<Ticket>>,
    durability: Vec<Durability>,
    members: Vec<Member>,
    waiting: Vec<(Arc<Ticket>, bool)>,
}

/// Group vectors kept: groups in flight at once (one being committed,
/// a few waiting for the journal).
const KEEP_GROUPS: usize = 8;

impl GroupSpares {
    fn take(&self) -> GroupBufs {
        self.0.take().unwrap_or_default()
    }

    fn keep(&self, mut b: GroupBufs) {
        b.tickets.clear();
        b.durability.clear();
        b.members.clear();
        b.waiting.clear();
        let cap = [
            b.tickets.capacity(),
            b.durability.capacity(),
            b.members.capacity(),
            b.waiting.capacity(),
        ];
        if cap.iter().all(|&c| c <= KEEP_GROUP_CAPACITY) {
            self.0.keep(b, KEEP_GROUPS);
        }
    }
}

/// Tickets told their results, and the bells to ring for them once all
/// are told: one system call per bell, not one per committer.
#[derive(Default)]
struct Rings(u64);

impl Rings {
    fn send(&mut self, t: &Ticket, state: TicketState) {
        *lock(&t.state) = state;
        self.0 |= 1 << t.bell();
    }

    /// Fail `t`'s commit (in doubt: `CommitFailed`) unless it was told
    /// its result already.
    fn fail_untold(&mut self, t: &Ticket, why: &Arc<str>) {
        let mut state = lock(&t.state);
        if matches!(*state, TicketState::Waiting) {
            *state = TicketState::Done(Err(DbError::CommitFailed(Arc::clone(why))));
            self.0 |= 1 << t.bell();
        }
    }

    fn ring(self, bells: &[Bell]) {
        let mut left = self.0;
        while left != 0 {
            let i = left.trailing_zeros() as usize;
            bells[i].wake_all();
            left &= left - 1;
        }
    }
}

/// A transaction of the group being committed, and what became of it.
enum Member {
    /// Failed before anything was submitted (its result), or had nothing
    /// to write.
    Settled(Result<()>),
    /// Nothing to write; with `Immediate`, waits for the group.
    Empty,
    /// Submitted: its changes, its LSN, not yet in the memtable.
    Submitted(Prepared, Lsn),
    Applied,
}

/// A transaction's changes, as its record was made.
enum Prepared {
    /// Replayed over the writer's state (`Active::replay`).
    Replayed(Active),
    /// Straight from its puts (`Blind::encode_direct`): the puts (with
    /// their full keys), its record's bytes.
    Direct(Blind, usize),
}

impl Prepared {
    /// Changes in the record.
    fn changes(&self) -> usize {
        match self {
            Prepared::Replayed(a) => a.changes(),
            Prepared::Direct(b, ..) => b.len(),
        }
    }

    /// Whether it creates or drops a table.
    fn changes_catalog(&self) -> bool {
        matches!(self, Prepared::Replayed(a) if a.changes_catalog())
    }
}

impl Shared {
    // ----- the writer slot ----------------------------------------------

    /// Take the writer's state, waiting while a write transaction, a group
    /// of them or a checkpoint holds it.
    pub(crate) fn take_writer(&self) -> Result<WriterState> {
        let mut w = lock(&self.writer);
        loop {
            if let Err(e) = self.check_poison() {
                self.dispatch(w);
                return Err(e);
            }
            if let Some(mut state) = w.state.take() {
                w.hold_here();
                drop(w);
                // The slot's holder reads and changes the memtable: every
                // direct commit and every run goes in first.
                self.close_direct(&mut state);
                self.drain_applies();
                return Ok(state);
            }
            if w.held_here() {
                return Err(DbError::WouldDeadlock(
                    "a write transaction's read or commit",
                ));
            }
            w.waiting += 1;
            w = self.writer_cv.wait(w).unwrap_or_else(|e| e.into_inner());
            w.waiting -= 1;
        }
    }

    /// Give the writer's state back: to the queue's first committer, to
    /// lead it, or to a waiting transaction.
    pub(crate) fn put_writer(&self, state: WriterState) {
        self.open_direct(&state);
        let mut w = lock(&self.writer);
        w.state = Some(state);
        w.holder = None;
        self.dispatch(w);
    }

    /// With the state in the slot: hand it to the queue if its turn has
    /// come (or the store is poisoned: its leader fails the group), else
    /// wake a waiting transaction.
    pub(crate) fn dispatch(&self, mut w: MutexGuard<'_, Slot>) {
        if w.state.is_none() {
            return;
        }
        let queue_first = w.waiting == 0 || w.queue_turn || self.check_poison().is_err();
        if !w.queue.is_empty() && queue_first {
            // The head leads; it takes the rest of the queue when it runs,
            // with whatever queued while it woke up.
            let state = w.state.take().expect("checked");
            w.queue_turn = false;
            let head = w.queue.remove(0);
            drop(w);
            let ticket = Arc::clone(&head.ticket);
            let mut rings = Rings::default();
            rings.send(&ticket, TicketState::Lead(state, head));
            rings.ring(&self.bells);
            return;
        }
        w.queue_turn = !w.queue.is_empty();
        // A notify nobody waits for is still a futex call.
        let wake = w.waiting > 0;
        drop(w);
        if wake {
            self.writer_cv.notify_one();
        }
    }

    // ----- combined commits ---------------------------------------------

    /// Commit a blind transaction: lead with it if the slot is free, else
    /// queue it; then wait to be told its result (or to lead).
    pub(crate) fn commit_blind(
        self: &Arc<Self>,
        blind: Blind,
        durability: Durability,
    ) -> Result<()> {
        let ticket = Arc::new(Ticket {
            bell: AtomicUsize::new(0),
            state: Mutex::new(TicketState::Waiting),
        });
        let me = Queued {
            ticket: Arc::clone(&ticket),
            blind,
            durability,
        };
        let mut w = lock(&self.writer);
        // Under the slot's lock: a poisoning after this finds the queue.
        self.check_poison()?;
        me.ticket.bell.store(w.bell(), Ordering::Relaxed);
        if w.state.is_some() && w.waiting == 0 {
            let state = w.state.take().expect("checked");
            let group = w.take_group(me);
            drop(w);
            self.lead(state, group);
        } else {
            if w.state.is_none() && w.held_here() {
                return Err(DbError::WouldDeadlock(
                    "committing a second write transaction",
                ));
            }
            w.queue.push(me);
            drop(w);
        }
        let bell = &self.bells[ticket.bell()];
        loop {
            // Before looking: a ring after this look wakes the sleep.
            let seen = bell.seen();
            let st = std::mem::replace(&mut *lock(&ticket.state), TicketState::Waiting);
            match st {
                TicketState::Waiting => bell.sleep(seen),
                TicketState::Done(r) => return r,
                TicketState::Lead(state, me) => {
                    let group = lock(&self.writer).take_group(me);
                    self.lead(state, group);
                }
            }
        }
    }

    /// Commit groups while the queue has some (and no transaction waits
    /// for the slot), holding the writer's state `w`; then give the slot
    /// back. Every member learns its result through its ticket: the last
    /// group's from this thread, which waits for the journal; earlier
    /// groups' from the journal's thread once their records are durable,
    /// so that the leader goes on meanwhile.
    ///
    /// A panic while a group is being committed or told its results (a
    /// bug) poisons the store, fails the group's members not yet told
    /// (`CommitFailed`: in doubt) and gives the slot back if this thread
    /// holds it, before it goes on up this thread: the other committers,
    /// waiting transactions and the checkpointer get an error instead of
    /// waiting forever. On the journal's thread, [`Waiters`] does the same
    /// for the members it was to tell.
    fn lead(self: &Arc<Self>, mut w: WriterState, mut group: Vec<Queued>) {
        self.close_direct(&mut w);
        let mut held: Vec<Arc<Ticket>> = Vec::new();
        loop {
            let started = Instant::now();
            held.clear();
            held.extend(group.iter().map(|q| Arc::clone(&q.ticket)));
            let g = match panic::catch_unwind(AssertUnwindSafe(|| {
                self.run_group(&mut w, &mut group)
            })) {
                Ok(g) => g,
                Err(p) => {
                    let why = self.writer_panicked("a commit", w, p.as_ref());
                    self.fail_after_panic(&held, &[], &why, p)
                }
            };
            self.counters
                .commit_writer_ns
                .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
            let mut slot = lock(&self.writer);
            slot.keep_queue(std::mem::take(&mut group));
            if g.failure.is_none()
                && !slot.queue.is_empty()
                && slot.waiting == 0
                && self.check_poison().is_ok()
            {
                group = slot.take_queue();
                drop(slot);
                // With the slot held: a panic (a bug) must give it back,
                // fail the group's members not yet told, and fail the
                // group just taken (none of it submitted).
                if let Err(p) = panic::catch_unwind(AssertUnwindSafe(|| self.settle(g, false))) {
                    let why = self.writer_panicked("a commit", w, p.as_ref());
                    self.fail_after_panic(&held, &group, &why, p)
                }
                continue;
            }
            // Before the state is back in the slot: a taker after that
            // closes the gate again.
            self.open_direct(&w);
            slot.state = Some(w);
            slot.holder = None;
            self.dispatch(slot);
            if let Err(p) = panic::catch_unwind(AssertUnwindSafe(|| self.settle(g, true))) {
                let why = self.panicked("a commit", p.as_ref());
                self.fail_after_panic(&held, &[], &why, p)
            }
            return;
        }
    }

    /// After a panic `p` (a bug) while leading a group, the store poisoned
    /// with `why`: fail the group's members not yet told (`held`;
    /// `CommitFailed`, in doubt: their records may have been submitted)
    /// and those of `taken`, a group taken from the queue and not run
    /// (`Poisoned`), then let the panic go on up this thread.
    fn fail_after_panic(
        &self,
        held: &[Arc<Ticket>],
        taken: &[Queued],
        why: &Arc<str>,
        p: Box<dyn std::any::Any + Send>,
    ) -> ! {
        let mut rings = Rings::default();
        for t in held {
            rings.fail_untold(t, why);
        }
        for q in taken {
            let refused = DbError::Poisoned(Arc::clone(why));
            rings.send(&q.ticket, TicketState::Done(Err(refused)));
        }
        rings.ring(&self.bells);
        panic::resume_unwind(p)
    }

    /// Replay, submit and apply one group (emptying `group`).
    fn run_group(self: &Arc<Self>, w: &mut WriterState, group: &mut Vec<Queued>) -> Group {
        let bufs = GROUP_SPARES.take();
        let mut g = Group {
            tickets: bufs.tickets,
            durability: bufs.durability,
            members: bufs.members,
            waiting: bufs.waiting,
            last: None,
            last_lsn: w.last_lsn,
            failure: self.check_poison().err().map(failure_reason),
        };
        let mut record_buf = std::mem::take(&mut w.record_buf);
        let mut ops_submitted = 0;
        // An unapplied member changes the catalog: apply before the next
        // replay, which reads it.
        let mut catalog_changed = false;
        for q in group.drain(..) {
            let Queued {
                ticket,
                blind,
                durability,
            } = q;
            g.tickets.push(ticket);
            g.durability.push(durability);
            if catalog_changed && g.failure.is_none() {
                catalog_changed = false;
                self.apply_members(w, &mut g.members);
            }
            if let Some(why) = &g.failure {
                g.members
                    .push(Member::Settled(Err(DbError::Poisoned(Arc::clone(why)))));
                continue;
            }
            let (ops, catalog) = self.submit_member(w, &mut g, blind, &mut record_buf);
            ops_submitted += ops;
            catalog_changed = catalog;
        }
        if g.failure.is_none() {
            let more = !lock(&self.writer).queue.is_empty();
            self.write_and_apply(w, &mut g, more, ops_submitted);
        }
        let submitted = g
            .members
            .iter()
            .filter(|m| matches!(m, Member::Applied))
            .count() as u64;
        if g.failure.is_none() {
            w.last_lsn = g.last_lsn;
        }
        w.recycle(record_buf);
        self.counters
            .commits
            .fetch_add(submitted, Ordering::Relaxed);
        self.counters.groups.fetch_add(1, Ordering::Relaxed);
        self.counters
            .grouped_commits
            .fetch_add(submitted, Ordering::Relaxed);
        g
    }

    /// Prepare one member's record and submit it, adding the member to
    /// `g` (submitted, empty, or refused); returns the changes it
    /// submitted and whether it changes the catalog.
    fn submit_member(
        self: &Arc<Self>,
        w: &WriterState,
        g: &mut Group,
        blind: Blind,
        record_buf: &mut Vec<u8>,
    ) -> (usize, bool) {
        let (prepared, submitted) = match self.prepare(w, g.last_lsn, blind, record_buf) {
            Err(e) => {
                g.members.push(Member::Settled(Err(e)));
                return (0, false);
            }
            Ok(None) => {
                g.members.push(Member::Empty);
                return (0, false);
            }
            Ok(Some(p)) => p,
        };
        match submitted {
            Ok(h) => {
                g.last_lsn = h.lsn();
                let out = (prepared.changes(), prepared.changes_catalog());
                g.members.push(Member::Submitted(prepared, g.last_lsn));
                g.last = Some(h);
                out
            }
            Err(e) => {
                // Nothing was queued, but the journal refuses more.
                let why = self.set_poison(&format!("the journal refused a record: {e}"));
                g.members
                    .push(Member::Settled(Err(DbError::Poisoned(Arc::clone(&why)))));
                g.failure = Some(why);
                (0, false)
            }
        }
    }

    /// Encode one blind transaction's record into `record_buf` (straight
    /// from its puts, or by replaying them over the state after
    /// `last_lsn`) and submit it: its changes and the journal's answer,
    /// or `None` when it has nothing to write.
    fn prepare(
        self: &Arc<Self>,
        w: &WriterState,
        last_lsn: Lsn,
        mut blind: Blind,
        record_buf: &mut Vec<u8>,
    ) -> Result<Option<(Prepared, std::result::Result<CommitHandle, JournalError>)>> {
        if let Some(rec) = blind.encode_direct(
            &self.cache,
            &self.path,
            self.journal.options().max_record_bytes(),
            w,
        )? {
            let bytes = rec.len();
            let submitted = rec.submit(&self.journal);
            drop(rec);
            return Ok(Some((Prepared::Direct(blind, bytes), submitted)));
        }
        self.drain_applies();
        let view = WriterState::new(Arc::clone(&w.base), last_lsn);
        let a = Active::replay(
            Arc::clone(self),
            view,
            false,
            &blind.tables,
            blind.replay_puts(),
        )?;
        let ops = a.ops();
        if ops.is_empty() {
            return Ok(None);
        }
        self.unapplied.keep_spare(blind);
        let rec = a.record(&ops, std::mem::take(record_buf))?;
        let submitted = rec.submit(&self.journal);
        if let Some(buf) = rec.into_buf() {
            *record_buf = buf;
        }
        drop(ops);
        Ok(Some((Prepared::Replayed(a), submitted)))
    }

    /// Get the group's records written and its changes applied, overlapped
    /// where that pays:
    ///
    /// - A lone large `Immediate` transaction straight from its puts: its
    ///   record is written, then it is published as a run and the helper
    ///   inserts it later ([`Self::write_then_publish_run`]).
    /// - Another lone large transaction (nobody queued) with the helper free:
    ///   this thread writes the records itself (the journal's lone
    ///   committer path) while the helper applies, and the slot is held
    ///   until both are done. The helper's wake-up hides behind the write,
    ///   and the committer pays no hand-off to the journal's thread.
    /// - Else, for a large group or with others queued: start the write on
    ///   the journal's thread, then apply; the wait comes after the slot is
    ///   given back, so the next group can be submitted meanwhile.
    /// - A small lone group applies first; the wait writes it (see
    ///   `START_MIN_OPS`).
    fn write_and_apply(self: &Arc<Self>, w: &WriterState, g: &mut Group, more: bool, ops: usize) {
        if ops >= START_MIN_OPS
            && !more
            && g.members.len() == 1
            && g.durability[0] == Durability::Immediate
            && self.helper.is_some()
            && matches!(g.members[0], Member::Submitted(Prepared::Direct(..), _))
        {
            return self.write_then_publish_run(w, g);
        }
        let Some(h) = g.last.as_ref() else {
            return self.apply_members(w, &mut g.members);
        };
        // One transaction only: a group's leader holding the slot through
        // the write would keep the next group from being submitted while
        // it is in flight (w2 at T=64: ~70,000 against ~90,000 commits/s).
        if ops >= START_MIN_OPS && !more && g.members.len() == 1 {
            if let Some(helper) = &self.helper {
                // Task 0 (the write) is this thread's: it starts on it at
                // once, before the helper can wake; the helper takes the
                // apply, or this thread does after the write if the helper
                // has not woken by then.
                let next = AtomicUsize::new(0);
                let members = Mutex::new(&mut g.members);
                let legs = Legs::new();
                let wrote = Mutex::new(None);
                let posted = helper.try_fork(&|| loop {
                    let task = next.fetch_add(1, Ordering::Relaxed);
                    let started = Instant::now();
                    match task {
                        0 => *lock(&wrote) = Some(h.wait_durable()),
                        1 => self.apply_members(w, &mut lock(&members)),
                        _ => return,
                    }
                    legs.ran(task, started);
                });
                if posted {
                    legs.count(&self.counters.overlap);
                    // The write's failure is known before `commit`
                    // returns: an `Eventual` commit must not answer `Ok`
                    // (an `Immediate` one would learn it in `settle`).
                    if let Some(Err(e)) = wrote.into_inner().unwrap_or_else(|e| e.into_inner()) {
                        let lsn = g.last_lsn;
                        g.failure =
                            Some(self.set_poison(&format!("writing lsn {lsn} failed: {e}")));
                    }
                    return;
                }
            }
        }
        if more || ops >= START_MIN_OPS {
            h.start();
        }
        self.apply_members(w, &mut g.members);
    }

    /// A lone `Immediate` transaction straight from its puts: write its
    /// record on this thread; once durable, publish it as a run (readers
    /// search it in key order above the memtable) and hand its insert into
    /// the memtable to the helper, which nobody waits for. See
    /// `super::pending` for why, and for the order of inserts. Past
    /// [`MAX_UNAPPLIED_RUNS`] runs waiting, this thread inserts the oldest
    /// first, down to the bound, unless the helper is inserting them (it
    /// then takes all); past twice the bound, all of them, waiting for
    /// the helper if need be: memory and readers' searches stay bounded.
    fn write_then_publish_run(self: &Arc<Self>, w: &WriterState, g: &mut Group) {
        let Member::Submitted(Prepared::Direct(blind, bytes), lsn) =
            std::mem::replace(&mut g.members[0], Member::Applied)
        else {
            unreachable!("checked by the caller")
        };
        let n = if self.unapplied.len() >= 2 * MAX_UNAPPLIED_RUNS {
            self.unapplied.drain(&self.published)
        } else {
            self.unapplied
                .drain_to(&self.published, MAX_UNAPPLIED_RUNS - 1)
        };
        self.unapplied.by_committer.fetch_add(n, Ordering::Relaxed);
        let h = g.last.as_ref().expect("a submitted member has a handle");
        // A failure is `wait`ed for again in `settle`, which fails the
        // commit; the run is never published then.
        if h.wait_durable().is_err() {
            return;
        }
        let run = Arc::new(Run::new(blind, lsn));
        self.applied(&w.base, bytes);
        self.published.publish_run(Arc::clone(&run));
        // After publishing: a drain drops the run from the view once it is
        // in the memtable, which it must be in the view to be dropped from.
        self.unapplied.push(Arc::clone(&w.base.active), run);
        #[cfg(test)]
        if self.faults.hold_runs.load(Ordering::Relaxed) {
            return;
        }
        // The helper is asked once per [`RUNS_PER_WAKE`] runs, and not
        // again while it drains: it takes whatever is queued meanwhile.
        let few = self.unapplied.len() < RUNS_PER_WAKE;
        if few || self.unapplied.posted.swap(true, Ordering::AcqRel) {
            return;
        }
        let (unapplied, published) = (Arc::clone(&self.unapplied), Arc::clone(&self.published));
        if let Some(helper) = &self.helper {
            helper.chore(move |_| {
                let drained = panic::catch_unwind(AssertUnwindSafe(|| unapplied.drain(&published)));
                unapplied.posted.store(false, Ordering::Release);
                if let Err(p) = drained {
                    // The run stays published, and reads stay right; the
                    // memtable lacks it, so no writer may go on.
                    published.set_poison(&format!(
                        "inserting a commit into the memtable panicked: {}",
                        super::sync::panic_message(p.as_ref())
                    ));
                }
            });
        }
    }

    /// Insert every published run into the memtable, in order (see
    /// `super::pending`): before the writer's memtable is read, changed
    /// or frozen.
    pub(crate) fn drain_applies(&self) {
        self.unapplied.drain(&self.published);
    }

    /// Insert the submitted members' changes into the active memtable, in
    /// order, each under its LSN.
    fn apply_members(&self, w: &WriterState, members: &mut [Member]) {
        // In LSN order: the runs of earlier commits first.
        self.drain_applies();
        for m in members.iter_mut() {
            if !matches!(m, Member::Submitted(..)) {
                continue;
            }
            let Member::Submitted(p, lsn) = std::mem::replace(m, Member::Applied) else {
                unreachable!("checked")
            };
            match p {
                Prepared::Replayed(a) => {
                    w.forget_table_ids();
                    w.base.active.apply(&a.ops(), lsn);
                    self.applied(&w.base, a.size());
                }
                Prepared::Direct(b, bytes) => {
                    b.apply_direct(&w.base.active, lsn);
                    self.applied(&w.base, bytes);
                    self.unapplied.keep_spare(b);
                }
            }
            // Published once durable too (the group's `settle`).
            self.published.order.complete(lsn);
        }
    }

    /// Tell a group's members their results: now for those refused and
    /// the `Eventual` ones; for the others once the group's last record is
    /// durable and published — waiting here (`wait`), or from the
    /// journal's thread.
    fn settle(&self, g: Group, wait: bool) {
        #[cfg(test)]
        if self.faults.panic_in_settle.swap(false, Ordering::Relaxed) {
            panic!("injected: settling failed");
        }
        let Group {
            mut tickets,
            mut durability,
            mut members,
            mut waiting,
            last,
            last_lsn,
            failure,
        } = g;
        let mut rings = Rings::default();
        for ((m, d), t) in members
            .drain(..)
            .zip(durability.drain(..))
            .zip(tickets.drain(..))
        {
            let had_record = matches!(m, Member::Applied);
            let now = match (m, &failure) {
                (Member::Settled(r), _) => Some(r),
                (_, Some(why)) => Some(Err(DbError::CommitFailed(Arc::clone(why)))),
                (_, None) if d == Durability::Eventual => Some(Ok(())),
                (_, None) => None,
            };
            match now {
                Some(r) => rings.send(&t, TicketState::Done(r)),
                None => waiting.push((t, had_record)),
            }
        }
        rings.ring(&self.bells);
        let bufs = GroupBufs {
            tickets,
            durability,
            members,
            waiting: Vec::new(),
        };
        // After a failure every member is settled.
        if failure.is_some() || waiting.is_empty() {
            GROUP_SPARES.keep(GroupBufs { waiting, ..bufs });
            // All `Eventual`: publish once durable.
            if let (None, Some(h)) = (&failure, last) {
                self.publish_on_durable(h, last_lsn, |_| {});
            }
            return;
        }
        let waiters = Waiters {
            list: waiting,
            bells: Arc::clone(&self.bells),
            published: Arc::clone(&self.published),
            spares: Some(bufs),
        };
        match last {
            // Nothing written: `Immediate` still waits for earlier commits.
            None => waiters.tell(self.wait_published(last_lsn).map_err(failure_reason)),
            Some(h) if wait => waiters.tell(match h.wait() {
                Ok(_) => {
                    self.publish(last_lsn);
                    Ok(())
                }
                Err(e) => Err(self.set_poison(&format!("writing lsn {last_lsn} failed: {e}"))),
            }),
            Some(h) => self.publish_on_durable(h, last_lsn, move |o| waiters.tell(o)),
        }
    }
}

/// A group's members waiting for their results until its last record is
/// durable and published: told through [`Waiters::tell`]. Dropped untold
/// — a panic on the way (a bug), or a journal callback never run — it
/// poisons the store and fails them, so that none waits forever.
struct Waiters {
    /// Each member's ticket, and whether it had a record (in doubt if the
    /// group fails: `CommitFailed`, else `Poisoned`).
    list: Vec<(Arc<Ticket>, bool)>,
    bells: Arc<[Bell]>,
    published: Arc<Published>,
    /// Where the group's vectors go back to once told, and they.
    spares: Option<GroupBufs>,
}

impl Waiters {
    fn tell(mut self, outcome: std::result::Result<(), Arc<str>>) {
        let mut list = std::mem::take(&mut self.list);
        tell_all(&mut list, &outcome, &self.bells);
        if let Some(bufs) = self.spares.take() {
            GROUP_SPARES.keep(GroupBufs {
                waiting: list,
                ..bufs
            });
        }
    }
}

impl Drop for Waiters {
    fn drop(&mut self) {
        if self.list.is_empty() {
            return;
        }
        let why = self
            .published
            .set_poison("a commit panicked while its group was being told its results");
        tell_all(&mut self.list, &Err(why), &self.bells);
    }
}

/// Tell each member `outcome` (a failure as `CommitFailed` to those with a
/// record), then ring their bells.
fn tell_all(
    list: &mut Vec<(Arc<Ticket>, bool)>,
    outcome: &std::result::Result<(), Arc<str>>,
    bells: &[Bell],
) {
    let mut rings = Rings::default();
    for (t, had_record) in list.drain(..) {
        let r = match outcome {
            Ok(()) => Ok(()),
            Err(why) if had_record => Err(DbError::CommitFailed(Arc::clone(why))),
            Err(why) => Err(DbError::Poisoned(Arc::clone(why))),
        };
        rings.send(&t, TicketState::Done(r));
    }
    rings.ring(bells);
}

/// Runs waiting before the helper is asked to insert them: one wake-up of
/// the helper per this many lone commits instead of one per commit.
const RUNS_PER_WAKE: usize = 4;

/// A leg of an overlapped commit longer than this is counted as slow.
const SLOW_LEG_NS: u64 = 1_000_000;

/// The two legs of one overlapped commit (the journal's write on the
/// committer, the apply on the helper): when each started after the fork,
/// and how long it ran, in nanoseconds.
struct Legs {
    forked: Instant,
    started_ns: [AtomicU64; 2],
    ran_ns: [AtomicU64; 2],
}

impl Legs {
    fn new() -> Legs {
        Legs {
            forked: Instant::now(),
            started_ns: [AtomicU64::new(0), AtomicU64::new(0)],
            ran_ns: [AtomicU64::new(0), AtomicU64::new(0)],
        }
    }

    /// Leg `task` (0: write, 1: apply) ran from `started` until now.
    fn ran(&self, task: usize, started: Instant) {
        let nanos = |d: std::time::Duration| d.as_nanos().try_into().unwrap_or(u64::MAX);
        self.started_ns[task].store(nanos(started - self.forked), Ordering::Relaxed);
        self.ran_ns[task].store(nanos(started.elapsed()), Ordering::Relaxed);
    }

    /// Add this commit's legs to `c` (after the fork returned: both ran).
    fn count(&self, c: &OverlapCounters) {
        let [write, apply] = [0, 1].map(|i| self.ran_ns[i].load(Ordering::Relaxed));
        c.commits.fetch_add(1, Ordering::Relaxed);
        c.write_ns.fetch_add(write, Ordering::Relaxed);
        c.apply_ns.fetch_add(apply, Ordering::Relaxed);
        c.slow_writes
            .fetch_add(u64::from(write > SLOW_LEG_NS), Ordering::Relaxed);
        c.slow_applies
            .fetch_add(u64::from(apply > SLOW_LEG_NS), Ordering::Relaxed);
        // The helper had not woken when the write was done: this thread
        // applied after it, one leg after the other.
        let apply_started = self.started_ns[1].load(Ordering::Relaxed);
        let write_ended = self.started_ns[0].load(Ordering::Relaxed) + write;
        c.applied_after_write
            .fetch_add(u64::from(apply_started >= write_ended), Ordering::Relaxed);
    }
}

/// Why the store stopped: a poisoning's reason, or the error's text.
fn failure_reason(e: DbError) -> Arc<str> {
    match e {
        DbError::Poisoned(why) => why,
        e => e.to_string().into(),
    }
}

/// A group being committed: its members in order, and what became of it.
struct Group {
    tickets: Vec<Arc<Ticket>>,
    durability: Vec<Durability>,
    members: Vec<Member>,
    /// Empty: the members left waiting, made in `settle` (kept with the
    /// others, see [`GroupSpares`]).
    waiting: Vec<(Arc<Ticket>, bool)>,
    /// The last record submitted, and its LSN (else the writer's).
    last: Option<CommitHandle>,
    last_lsn: Lsn,
    failure: Option<Arc<str>>,
}
