//! Writing sealed batches: who writes, how many writes are in flight, and
//! the moment a commit becomes durable.
//!
//! **Writers.** A committer waiting for its batch becomes a *writer* when a
//! write permit is free (one compare-and-swap on `Shared::writers`; there are
//! `JournalOptions::writes_in_flight` permits). A writer takes the oldest
//! sealed batch off the queue — sealing its own open batch first if nothing
//! older is queued — writes it with the journal's durable method without
//! holding the mutex, and goes on until its own batch has been written.
//! Then it gives the permit back and wakes exactly one waiter of the oldest
//! batch whose write has not started; that waiter becomes the next writer.
//! A lone committer therefore writes its own record with no hand-off.
//!
//! **Acknowledged in order.** Writes may complete in any order; a batch is
//! *completed* (its waiters woken, `durable_lsn` advanced) only once it and
//! every earlier batch are durable: completions advance over the longest
//! prefix of written batches. The thread that completes a batch wakes that
//! batch's waiters — all of them with one futex wake, and nobody else.
//!
//! **Failures.** A failed write of batch *k* poisons the journal: batch *k*,
//! every later batch and every later call fail. Earlier batches still in
//! flight complete normally if their own writes succeed (their waiters keep
//! waiting for them), since they and everything before them are durable.
//!
//! **When a second write may start.** Only while the writes in flight carry
//! fewer than [`OVERLAP_BELOW_RECORDS`] records: under heavy load the CPU,
//! not the disk, is the limit on a 2-vCPU machine, and starting the next
//! write early only makes batches smaller (measured: `docs/journal.md`).
//! And never across segments, nor with a batch larger than
//! `max_write_bytes`: a crash must leave no record of the epoch in a later
//! segment while an earlier write is incomplete, and the bytes a crash can
//! leave torn stay within `writes_in_flight × max_write_bytes`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::writer::{install_room, poison_all, retire, Sealed, Shared, State, POOL_BUFFERS};
use super::JournalError;
use crate::io::IoError;

/// A second write starts only while those in flight hold fewer records
/// than this (see the module comment).
pub const OVERLAP_BELOW_RECORDS: u64 = 8;

/// A batch whose write has started and not yet completed.
pub(super) struct Flight {
    id: u64,
    last_lsn: u64,
    records: u64,
    padded_bytes: u64,
    seq: u64,
    /// Larger than `max_write_bytes` (a single big record).
    oversized: bool,
    /// The segment's first batch.
    first_in_segment: bool,
    /// Its write returned success.
    written: bool,
}

impl Flight {
    pub(super) fn id(&self) -> u64 {
        self.id
    }
}

/// Wait until batch `id` is durable, writing batches when a permit is free.
pub(super) fn wait_batch(shared: &Shared, id: u64) -> Result<(), JournalError> {
    loop {
        // Read the slot word before looking at anything that can end the
        // wait. Whoever completes this batch, poisons the journal or stops
        // writing changes the word *after* changing that state: either the
        // checks below see the change, or the word differs from `seen` and
        // the sleep returns at once. (Checking `poisoned` before this read
        // lost the wake-up of a poisoning that fell between the two.)
        let slot = shared.slot(id);
        let seen = slot.seen();
        if shared.completed_batch.load(Ordering::Acquire) >= id {
            return Ok(());
        }
        if shared.poisoned.load(Ordering::Acquire)
            && id >= shared.failed_batch.load(Ordering::Acquire)
        {
            return Err(poison_result(shared));
        }
        #[cfg(test)]
        test_hooks::run(test_hooks::Point::BeforeSleepDecision, shared);
        // Once our batch's write has started, only its completion matters.
        if shared.started_batch.load(Ordering::SeqCst) < id && take_permit(shared) {
            if let Some(result) = write_until(shared, id) {
                return result;
            }
            continue;
        }
        slot.sleep(seen);
    }
}

/// Take a write permit if one is free and another write may start now.
fn take_permit(shared: &Shared) -> bool {
    let max = shared.options.writes_in_flight;
    let mut n = shared.writers.load(Ordering::SeqCst);
    loop {
        if n >= max
            || (n > 0 && shared.flight_records.load(Ordering::SeqCst) >= OVERLAP_BELOW_RECORDS)
        {
            return false;
        }
        match shared
            .writers
            .compare_exchange(n, n + 1, Ordering::SeqCst, Ordering::SeqCst)
        {
            Ok(_) => return true,
            Err(now) => n = now,
        }
    }
}

pub(super) fn poison_result(shared: &Shared) -> JournalError {
    match shared.poison_error() {
        Some(e) => JournalError::Poisoned(e),
        None => JournalError::Poisoned(Arc::new(IoError::Crashed)),
    }
}

/// What a writer does next.
enum Next {
    Write(Sealed),
    /// Its batch is written or being written by another writer: wait.
    Wait,
    /// The batch at the queue's head must wait for this in-flight batch.
    After(u64),
    Done(Result<(), JournalError>),
}

/// The writer's loop: write batches in order until batch `id` is written
/// (and, when it is the only write in flight, durable). `None`: batch `id`
/// is in flight elsewhere; the caller waits for it. Gives the permit back.
fn write_until(shared: &Shared, id: u64) -> Option<Result<(), JournalError>> {
    let result = loop {
        if shared.completed_batch.load(Ordering::Acquire) >= id {
            break Some(Ok(()));
        }
        let batch = match next_batch(shared, id) {
            Next::Write(b) => b,
            Next::Wait => break None,
            Next::After(target) => {
                wait_completed(shared, target);
                continue;
            }
            Next::Done(r) => break Some(r),
        };
        let result = write_batch(shared, &batch);
        let mut st = shared.lock();
        if let Err(e) = result {
            let failed = batch.slab.id;
            shared.failed_batch.fetch_min(failed, Ordering::SeqCst);
            let e = poison_all(shared, st, Arc::new(e));
            break (id >= failed).then_some(Err(JournalError::Poisoned(e)));
        }
        complete(shared, &mut st, &batch);
        let kick = !st.callbacks.is_empty() && st.flusher_waiting;
        drop(st);
        if kick {
            shared.flusher_cv.notify_one();
        }
        if batch.slab.id >= id {
            // Ours is written; it is durable once the earlier ones are.
            break (shared.completed_batch.load(Ordering::Acquire) >= id).then_some(Ok(()));
        }
    };
    stop_writing(shared);
    result
}

/// Under the mutex: pick the batch to write next, sealing our own open
/// batch if nothing older is queued.
fn next_batch(shared: &Shared, id: u64) -> Next {
    let mut st = shared.lock();
    if let Some(e) = st.poisoned.clone() {
        drop(st);
        if id >= shared.failed_batch.load(Ordering::SeqCst) {
            return Next::Done(Err(JournalError::Poisoned(e)));
        }
        return Next::Wait;
    }
    if shared.started_batch.load(Ordering::SeqCst) >= id {
        return Next::Wait;
    }
    if st.queue.is_empty() {
        // Our batch is still open: close it (no waiting for more).
        if let Some(slab) = shared.open.load_full().filter(|s| s.id <= id) {
            let (records, len) = slab.seal();
            retire(shared, &mut st, &slab, records, len);
            shared.open.store(None);
            match install_room(shared, st, 0) {
                Ok(g) => st = g,
                Err(e) => return Next::Done(Err(e)),
            }
        }
    }
    let Some(front) = st.queue.front() else {
        // Our batch was empty or taken by another writer meanwhile.
        return Next::Wait;
    };
    if let Some(last) = st.flights.back() {
        if !may_overlap(shared, &st, front) {
            return Next::After(last.id);
        }
    }
    let batch = st.queue.pop_front().expect("front");
    start(shared, &mut st, &batch);
    Next::Write(batch)
}

/// Whether `front` may be written while the batches of `st.flights` are in
/// flight. Not across segments, not beside a segment's first batch, not
/// beside a batch larger than `max_write_bytes`: recovery must never find
/// records of the chain's epoch in a segment whose first write did not
/// land (it would take them for damage once a later epoch writes in the
/// previous segment), and the bytes a crash can leave torn must stay
/// within `writes_in_flight × max_write_bytes` past the chain's end.
fn may_overlap(shared: &Shared, st: &State, front: &Sealed) -> bool {
    let block = shared.spec.block_size as u64;
    let max_write = shared.options.max_write_bytes;
    st.flights
        .iter()
        .all(|f| f.seq == front.slab.seq && !f.oversized && !f.first_in_segment)
        && front.len <= max_write
        && front.slab.offset != block
}

/// Record that `batch`'s write starts now.
fn start(shared: &Shared, st: &mut State, batch: &Sealed) {
    let block = shared.spec.block_size;
    debug_assert!(st.flights.back().is_none_or(|f| f.id < batch.slab.id));
    if !st.flights.is_empty() {
        st.stats.overlapped_writes += 1;
    }
    shared.started_batch.store(batch.slab.id, Ordering::SeqCst);
    shared
        .flight_records
        .fetch_add(batch.records, Ordering::SeqCst);
    st.flights.push_back(Flight {
        id: batch.slab.id,
        last_lsn: batch.last_lsn,
        records: batch.records,
        padded_bytes: (batch.len.div_ceil(block) * block) as u64,
        seq: batch.slab.seq,
        oversized: batch.len > shared.options.max_write_bytes,
        first_in_segment: batch.slab.offset == block as u64,
        written: false,
    });
}

/// `batch` is written: complete every written batch at the head of the
/// flights (in order), publish the durable LSN and wake their waiters.
fn complete(shared: &Shared, st: &mut State, batch: &Sealed) {
    let flight = st
        .flights
        .iter_mut()
        .find(|f| f.id == batch.slab.id)
        .expect("a written batch is in flight");
    flight.written = true;
    // Never past a failed batch: it and every later one stay unacknowledged.
    let failed = shared.failed_batch.load(Ordering::SeqCst);
    while st
        .flights
        .front()
        .is_some_and(|f| f.written && f.id < failed)
    {
        let f = st.flights.pop_front().expect("front");
        st.stats.writes += 1;
        st.stats.records += f.records;
        st.stats.bytes_written += f.padded_bytes;
        shared.flight_records.fetch_sub(f.records, Ordering::SeqCst);
        shared.durable_lsn.store(f.last_lsn, Ordering::Release);
        // Before the waiters are woken: a live reader in another process
        // sees every acknowledged commit (one store to shared memory).
        if let Some(m) = shared.durable_mirror.get() {
            m.store(f.last_lsn);
        }
        shared.completed_batch.store(f.id, Ordering::Release);
        shared.slot(f.id).wake_all();
    }
    // Keep the buffer for the next batches.
    // SAFETY: this writer wrote the batch and alone holds it.
    if let Some(buf) = unsafe { batch.slab.take_buffer() } {
        if st.pool.len() < POOL_BUFFERS {
            st.pool.push(buf);
        }
    }
}

/// Sleep until batch `target` is completed (or the journal is poisoned).
fn wait_completed(shared: &Shared, target: u64) {
    let slot = shared.slot(target);
    loop {
        let seen = slot.seen();
        if shared.completed_batch.load(Ordering::Acquire) >= target
            || shared.poisoned.load(Ordering::Acquire)
        {
            return;
        }
        slot.sleep(seen);
    }
}

/// Give the permit back and wake one waiter of the oldest batch whose write
/// has not started; it will write. Every such slot's word is bumped on the
/// way, so a waiter about to sleep there looks again instead.
fn stop_writing(shared: &Shared) {
    shared.writers.fetch_sub(1, Ordering::SeqCst);
    let from = shared.started_batch.load(Ordering::SeqCst) + 1;
    let to = shared.open_id.load(Ordering::SeqCst);
    for b in from..=to.min(from + super::writer::SLOTS as u64 - 1) {
        if shared.slot(b).wake_one() {
            break;
        }
    }
}

/// Write one batch durably: zero the padding to the block boundary, write,
/// and sync if the method needs it.
fn write_batch(shared: &Shared, batch: &Sealed) -> Result<(), IoError> {
    let block = shared.spec.block_size;
    let padded = batch.len.div_ceil(block) * block;
    // SAFETY: the writer took this batch off the queue: it alone holds it,
    // and it was settled when sealed.
    let buf = unsafe { batch.slab.bytes_mut() };
    buf[batch.len..padded].fill(0);
    debug_assert!(
        batch.slab.offset + padded as u64 <= batch.slab.segment_size,
        "batch past segment end"
    );
    let (method, file) = (shared.spec.method, batch.slab.file.as_ref());
    let (bytes, offset) = (&buf[..padded], batch.slab.offset);
    if !method.shares_writeback_errors() {
        return method.write_durably(file, bytes, offset);
    }
    let seq = batch.slab.seq;
    let result = match method.separate_sync() {
        Some(kind) => {
            // The write to the page cache overlaps other batches' syncs;
            // only the sync is judged.
            file.write_at(bytes, offset)?;
            #[cfg(test)]
            test_hooks::run(test_hooks::Point::BeforeBatchSync, shared);
            judged_sync(shared, seq, || file.sync(kind))
        }
        None => judged_sync(shared, seq, || method.write_durably(file, bytes, offset)),
    };
    #[cfg(test)]
    test_hooks::run(test_hooks::Point::AfterBatchSync, shared);
    result
}

/// Run `sync` (a batch's sync in segment `seq`, or its write with the sync
/// inside) unless an earlier batch's sync failed: one at a time, so that a
/// success is known to have come before any failure.
///
/// With several writes in flight through the page cache, batch A's pages
/// can be dropped by a writeback failure that batch B's sync reports (the
/// file's one error goes to the first sync that looks); A's own sync then
/// returns 0. Once any sync failed, no later success can be trusted — and
/// without this order A's writer could acknowledge A before B's writer
/// had poisoned the journal (`hardening_tests`,
/// `a_sync_after_a_failed_one_does_not_acknowledge`).
fn judged_sync(
    shared: &Shared,
    seq: u64,
    sync: impl FnOnce() -> Result<(), IoError>,
) -> Result<(), IoError> {
    let mut failed = shared.sync_failed.lock().unwrap_or_else(|p| p.into_inner());
    if *failed {
        return Err(IoError::os(
            "sync",
            shared.spec.path(seq),
            std::io::Error::other(
                "not synced: an earlier sync of the journal failed, and the error it \
                 reported may have been this write's",
            ),
        ));
    }
    let result = sync();
    if result.is_err() {
        *failed = true;
    }
    result
}

/// Hooks that let a unit test act at an exact point of a writer's or a
/// waiter's loop: each runs once, on the thread that set it.
#[cfg(test)]
pub(super) mod test_hooks {
    use std::cell::RefCell;

    use super::Shared;

    /// Where a hook runs.
    #[derive(Clone, Copy)]
    pub(in crate::journal) enum Point {
        /// In `wait_batch`, after its checks for completion and poisoning
        /// and before it decides to write or to sleep: the window in which
        /// a lost wake-up would strike.
        BeforeSleepDecision,
        /// When this thread has written a batch with a method that syncs
        /// after the write, before that sync.
        BeforeBatchSync,
        /// Right after this thread's batch sync returned (and the sync gate
        /// recorded the outcome), before the writer takes the journal's
        /// state to complete or poison.
        AfterBatchSync,
    }

    type Hook = Box<dyn FnOnce(&Shared)>;

    thread_local! {
        static HOOKS: RefCell<[Option<Hook>; 3]> = const { RefCell::new([None, None, None]) };
    }

    /// Run `hook` once, on this thread, at `point`.
    pub(in crate::journal) fn set(point: Point, hook: impl FnOnce(&Shared) + 'static) {
        HOOKS.with(|h| h.borrow_mut()[point as usize] = Some(Box::new(hook)));
    }

    /// Run this thread's hook for `point`, if one is set.
    pub(super) fn run(point: Point, shared: &Shared) {
        if let Some(hook) = HOOKS.with(|h| h.borrow_mut()[point as usize].take()) {
            hook(shared);
        }
    }
}
