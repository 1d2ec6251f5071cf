//! Group commit: where a record becomes durable.
//!
//! Committers encode their record into the open *batch* under a short lock
//! (a copy, no I/O). Whoever waits first while no write is in flight becomes
//! the **leader**: it takes the batch at the front of the queue, writes it
//! with the journal's durable method *without holding the lock*, publishes
//! the new durable LSN, and wakes that batch's waiters — all of them with one
//! futex wake on the batch's slot, none of the others. Records that arrive
//! during the write gather in the next batch; when the leader is done it
//! hands leadership to the first waiter of the next batch (one targeted
//! unpark), which writes it. So each committer sleeps once and is woken
//! once, and a lone committer writes its own record with no hand-off at all.
//!
//! One write is in flight at a time, so batch *k* is durable before batch
//! *k+1* is written: acknowledgements follow the append order. A failed write
//! or sync poisons the journal: the failing batch, every queued one and every
//! later submit get the error; nothing is retried.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::Thread;

use rustix::thread::futex;

use super::format::{RecordHeader, FLAG_EPOCH_START, RECORD_HEADER_BYTES};
use super::scan::{self, ChainCursor};
use super::segments::{ReadySegment, SegmentSpec};
use super::{JournalError, JournalOptions, JournalStats, Lsn};
use crate::io::{AlignedBuf, IoError, LockGuard, Vfs, VfsFile};

/// Batches map onto this many futex words; waiters of batches that share a
/// slot wake each other only when more than this many batches are queued.
const SLOTS: usize = 64;
const INITIAL_BATCH_BYTES: usize = 64 << 10;

/// A segment the journal has records in (or is appending to).
#[derive(Debug, Clone)]
pub(super) struct SegMeta {
    pub seq: u64,
    pub path: PathBuf,
    pub first_lsn: Option<Lsn>,
    pub last_lsn: Option<Lsn>,
}

/// Records gathered for one write.
struct Batch {
    id: u64,
    buf: AlignedBuf,
    /// Bytes used in `buf`, counting the rewritten prefix of the first block.
    len: usize,
    /// Where `buf[0]` goes in the segment file (block-aligned).
    offset: u64,
    file: Arc<dyn VfsFile>,
    last_lsn: Lsn,
    records: u64,
    sealed: bool,
    /// The first thread that waits on this batch; it takes over as leader.
    candidate: Option<Thread>,
}

pub(super) struct State {
    pub next_lsn: Lsn,
    pub salt: u32,
    /// The next record starts a new epoch (first record after open or
    /// truncation).
    pub epoch_start_pending: bool,
    /// Active segment and the append position in it (after queued records).
    pub active: ReadySegment,
    pub pos: u64,
    /// Bytes of the partly filled block at `pos`, rewritten by the next
    /// write so that batches need not start on a fresh block.
    pub tail: Vec<u8>,
    queue: VecDeque<Batch>,
    next_batch_id: u64,
    /// A leader is active.
    writing: bool,
    /// Leadership handed to the candidate of this batch.
    handoff_to: Option<u64>,
    pool: Vec<AlignedBuf>,
    pub segments: Vec<SegMeta>,
    pub spares: VecDeque<ReadySegment>,
    /// Old segment files waiting to be recycled into spares.
    pub free: VecDeque<PathBuf>,
    pub released: Lsn,
    poisoned: Option<Arc<IoError>>,
    callbacks: Vec<(u64, Lsn, Callback)>,
    flusher_kick: bool,
    shutdown: bool,
    stats: JournalStats,
}

type Callback = Box<dyn FnOnce(Result<Lsn, JournalError>) + Send>;

pub(super) struct Shared {
    pub vfs: Arc<dyn Vfs>,
    pub spec: SegmentSpec,
    pub options: JournalOptions,
    state: Mutex<State>,
    /// Wakes the preparer (spare needed, segment freed, shutdown) and
    /// committers waiting for a spare.
    spare_cv: Condvar,
    flusher_cv: Condvar,
    durable_lsn: AtomicU64,
    completed_batch: AtomicU64,
    poisoned: AtomicBool,
    slots: Vec<AtomicU32>,
    /// Held for the journal's lifetime: one process at a time.
    _lock: Box<dyn LockGuard>,
}

impl Shared {
    pub(super) fn new(
        vfs: Arc<dyn Vfs>,
        spec: SegmentSpec,
        options: JournalOptions,
        state: State,
        lock: Box<dyn LockGuard>,
    ) -> Shared {
        let durable = state.next_lsn - 1;
        Shared {
            vfs,
            spec,
            options,
            state: Mutex::new(state),
            spare_cv: Condvar::new(),
            flusher_cv: Condvar::new(),
            durable_lsn: AtomicU64::new(durable),
            completed_batch: AtomicU64::new(0),
            poisoned: AtomicBool::new(false),
            slots: (0..SLOTS).map(|_| AtomicU32::new(0)).collect(),
            _lock: lock,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn durable_lsn(&self) -> Lsn {
        self.durable_lsn.load(Ordering::Acquire)
    }

    pub(super) fn next_lsn(&self) -> Lsn {
        self.lock().next_lsn
    }

    pub(super) fn poison_error(&self) -> Option<Arc<IoError>> {
        self.lock().poisoned.clone()
    }

    pub(super) fn stats(&self) -> JournalStats {
        self.lock().stats
    }

    pub(super) fn shutdown(&self) {
        self.lock().shutdown = true;
        self.spare_cv.notify_all();
        self.flusher_cv.notify_all();
    }

    fn slot(&self, batch: u64) -> &AtomicU32 {
        &self.slots[(batch % SLOTS as u64) as usize]
    }
}

impl State {
    pub(super) fn new(
        next_lsn: Lsn,
        salt: u32,
        active: ReadySegment,
        pos: u64,
        tail: Vec<u8>,
        segments: Vec<SegMeta>,
    ) -> State {
        State {
            next_lsn,
            salt,
            epoch_start_pending: true,
            active,
            pos,
            tail,
            queue: VecDeque::new(),
            next_batch_id: 1,
            writing: false,
            handoff_to: None,
            pool: Vec::new(),
            segments,
            spares: VecDeque::new(),
            free: VecDeque::new(),
            released: 0,
            poisoned: None,
            callbacks: Vec::new(),
            flusher_kick: false,
            shutdown: false,
            stats: JournalStats::default(),
        }
    }
}

/// A queued record. Wait on it, or register a callback.
#[must_use = "a record is durable only once the handle reports it"]
pub struct CommitHandle {
    shared: Arc<Shared>,
    lsn: Lsn,
    batch: u64,
}

impl std::fmt::Debug for CommitHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommitHandle")
            .field("lsn", &self.lsn)
            .finish()
    }
}

impl CommitHandle {
    /// The record's LSN (not yet durable).
    pub fn lsn(&self) -> Lsn {
        self.lsn
    }

    /// Whether the record is already durable.
    pub fn is_durable(&self) -> bool {
        self.shared.completed_batch.load(Ordering::Acquire) >= self.batch
    }

    /// Block until the record is durable; returns its LSN. This thread may
    /// write the batch itself (as leader).
    pub fn wait(self) -> Result<Lsn, JournalError> {
        wait_batch(&self.shared, self.batch)?;
        Ok(self.lsn)
    }

    /// Call `callback` once the record is durable (or failed), from a
    /// journal thread. For event loops that must not block.
    pub fn on_durable(self, callback: impl FnOnce(Result<Lsn, JournalError>) + Send + 'static) {
        if self.is_durable() {
            callback(Ok(self.lsn));
            return;
        }
        let mut st = self.shared.lock();
        st.callbacks
            .push((self.batch, self.lsn, Box::new(callback)));
        st.flusher_kick = true;
        drop(st);
        self.shared.flusher_cv.notify_one();
    }
}

/// Queue `payload` as the next record.
pub(super) fn submit(shared: &Arc<Shared>, payload: &[u8]) -> Result<CommitHandle, JournalError> {
    let max = shared.options.max_record_bytes();
    if payload.len() > max {
        return Err(JournalError::RecordTooLarge {
            len: payload.len(),
            max,
        });
    }
    let need = (RECORD_HEADER_BYTES + payload.len()) as u64;
    let mut st = shared.lock();
    if let Some(e) = &st.poisoned {
        return Err(JournalError::Poisoned(e.clone()));
    }
    while st.pos + need > shared.spec.segment_size {
        st = roll_over(shared, st)?;
    }
    let block = shared.spec.block_size;
    let needs_new_batch = match st.queue.back() {
        None => true,
        Some(b) => {
            b.sealed || (b.records > 0 && b.len + need as usize > shared.options.max_write_bytes)
        }
    };
    if needs_new_batch {
        seal_open_batch(&mut st, block);
        open_batch(&mut st, block);
    }
    let lsn = st.next_lsn;
    st.next_lsn += 1;
    let flags = if st.epoch_start_pending {
        FLAG_EPOCH_START
    } else {
        0
    };
    st.epoch_start_pending = false;
    let header = RecordHeader {
        len: payload.len() as u32,
        lsn,
        seq: st.active.seq,
        salt: st.salt,
        flags,
    };
    st.pos += need;
    let active_seq = st.active.seq;
    if let Some(seg) = st.segments.last_mut().filter(|s| s.seq == active_seq) {
        seg.first_lsn.get_or_insert(lsn);
        seg.last_lsn = Some(lsn);
    }
    let batch = st.queue.back_mut().expect("open batch");
    let at = batch.len;
    grow(&mut batch.buf, at + need as usize, block);
    header.encode(payload, &mut batch.buf[at..]);
    batch.buf[at + RECORD_HEADER_BYTES..at + need as usize].copy_from_slice(payload);
    batch.len += need as usize;
    batch.last_lsn = lsn;
    batch.records += 1;
    let id = batch.id;
    Ok(CommitHandle {
        shared: Arc::clone(shared),
        lsn,
        batch: id,
    })
}

/// Grow `buf` (keeping its contents) to hold at least `need` bytes rounded
/// up to whole blocks.
fn grow(buf: &mut AlignedBuf, need: usize, block: usize) {
    let need = need.div_ceil(block) * block;
    if buf.len() >= need {
        return;
    }
    let mut bigger = AlignedBuf::new(need.next_power_of_two(), block);
    bigger[..buf.len()].copy_from_slice(buf);
    *buf = bigger;
}

/// Seal the open batch (if any) and remember its partial last block.
fn seal_open_batch(st: &mut State, block: usize) {
    if let Some(b) = st.queue.back_mut() {
        if !b.sealed {
            b.sealed = true;
            let start = b.len / block * block;
            st.tail = b.buf[start..b.len].to_vec();
        }
    }
}

fn open_batch(st: &mut State, block: usize) {
    let offset = st.pos / block as u64 * block as u64;
    let prefix = (st.pos - offset) as usize;
    debug_assert_eq!(prefix, st.tail.len());
    let mut buf = st
        .pool
        .pop()
        .unwrap_or_else(|| AlignedBuf::new(INITIAL_BATCH_BYTES, block));
    buf[..prefix].copy_from_slice(&st.tail[..prefix]);
    let id = st.next_batch_id;
    st.next_batch_id += 1;
    st.queue.push_back(Batch {
        id,
        buf,
        len: prefix,
        offset,
        file: Arc::clone(&st.active.file),
        last_lsn: 0,
        records: 0,
        sealed: false,
        candidate: None,
    });
}

/// Switch appends to the next prepared segment, waiting for the preparer
/// only if it has fallen behind.
fn roll_over<'a>(
    shared: &'a Shared,
    mut st: MutexGuard<'a, State>,
) -> Result<MutexGuard<'a, State>, JournalError> {
    let from_seq = st.active.seq;
    if st.spares.is_empty() {
        st.stats.rollover_waits += 1;
    }
    // The lock is released while waiting: look at the poisoning and at the
    // active segment again after every wake-up.
    loop {
        if let Some(e) = &st.poisoned {
            return Err(JournalError::Poisoned(e.clone()));
        }
        if st.active.seq != from_seq {
            // Another committer rolled over while we waited; the caller
            // checks again whether the record fits.
            return Ok(st);
        }
        if !st.spares.is_empty() {
            break;
        }
        shared.spare_cv.notify_all();
        st = shared.spare_cv.wait(st).unwrap_or_else(|p| p.into_inner());
    }
    // Records queued while we waited belong to the old segment: close their
    // batch so that nothing for the new segment joins it.
    seal_open_batch(&mut st, shared.spec.block_size);
    let next = st.spares.pop_front().expect("spare");
    debug_assert_eq!(next.seq, st.active.seq + 1);
    st.segments.push(SegMeta {
        seq: next.seq,
        path: next.path.clone(),
        first_lsn: None,
        last_lsn: None,
    });
    st.active = next;
    st.pos = shared.spec.block_size as u64;
    st.tail.clear();
    st.stats.rollovers += 1;
    shared.spare_cv.notify_all();
    Ok(st)
}

/// Wait until batch `id` is durable, leading writes when no one else is.
pub(super) fn wait_batch(shared: &Shared, id: u64) -> Result<(), JournalError> {
    let mut candidate = false;
    loop {
        if shared.completed_batch.load(Ordering::Acquire) >= id {
            return Ok(());
        }
        if shared.poisoned.load(Ordering::Acquire) {
            return Err(poison_result(shared));
        }
        let mut st = shared.lock();
        if shared.completed_batch.load(Ordering::Acquire) >= id {
            return Ok(());
        }
        let handed = st.handoff_to == Some(id);
        if handed || !st.writing {
            st.handoff_to = None;
            st.writing = true;
            return lead(shared, st, id);
        }
        if !candidate {
            if let Some(b) = st.queue.iter_mut().find(|b| b.id == id) {
                if b.candidate.is_none() {
                    b.candidate = Some(std::thread::current());
                    candidate = true;
                }
            }
        }
        drop(st);
        if candidate {
            std::thread::park();
        } else {
            sleep_on_slot(shared, id);
        }
    }
}

fn poison_result(shared: &Shared) -> JournalError {
    match shared.poison_error() {
        Some(e) => JournalError::Poisoned(e),
        None => JournalError::Poisoned(Arc::new(IoError::Crashed)),
    }
}

/// Sleep until batch `id`'s slot changes (its completion, a poisoning, or a
/// batch sharing the slot).
fn sleep_on_slot(shared: &Shared, id: u64) {
    let slot = shared.slot(id);
    let seen = slot.load(Ordering::Acquire);
    if shared.completed_batch.load(Ordering::Acquire) >= id
        || shared.poisoned.load(Ordering::Acquire)
    {
        return;
    }
    // EAGAIN (the word changed) and EINTR both mean "look again".
    let _ = futex::wait(slot, futex::Flags::PRIVATE, seen, None);
}

/// The leader's loop: write front batches until batch `id` is durable, then
/// hand leadership on.
fn lead<'a>(
    shared: &'a Shared,
    mut st: MutexGuard<'a, State>,
    id: u64,
) -> Result<(), JournalError> {
    let block = shared.spec.block_size;
    loop {
        let Some(mut batch) = st.queue.pop_front() else {
            // Nothing queued: our batch must be complete already.
            st.writing = false;
            drop(st);
            return if shared.completed_batch.load(Ordering::Acquire) >= id {
                Ok(())
            } else {
                Err(poison_result(shared))
            };
        };
        if !batch.sealed {
            batch.sealed = true;
            let start = batch.len / block * block;
            st.tail = batch.buf[start..batch.len].to_vec();
        }
        if let Some(e) = st.poisoned.clone() {
            // Poisoned elsewhere (segment preparation): write nothing more.
            return Err(poison(shared, st, batch, e));
        }
        drop(st);
        let result = write_batch(shared, &mut batch);
        st = shared.lock();
        if let Err(e) = result {
            return Err(poison(shared, st, batch, Arc::new(e)));
        }
        st.stats.writes += 1;
        st.stats.records += batch.records;
        st.stats.bytes_written += batch.len.div_ceil(block) as u64 * block as u64;
        shared.durable_lsn.store(batch.last_lsn, Ordering::Release);
        shared.completed_batch.store(batch.id, Ordering::Release);
        let slot = shared.slot(batch.id);
        slot.fetch_add(1, Ordering::Release);
        let _ = futex::wake(slot, futex::Flags::PRIVATE, i32::MAX as u32);
        if let Some(t) = batch.candidate.take() {
            if t.id() != std::thread::current().id() {
                t.unpark();
            }
        }
        if st.pool.len() < 4 {
            st.pool
                .push(std::mem::replace(&mut batch.buf, AlignedBuf::new(0, block)));
        }
        if batch.id >= id {
            break;
        }
    }
    hand_off(shared, st);
    Ok(())
}

/// Give leadership to the first queued batch that has a waiter, or stop
/// leading.
fn hand_off<'a>(shared: &'a Shared, mut st: MutexGuard<'a, State>) {
    if let Some(t) = st
        .queue
        .iter()
        .find_map(|b| b.candidate.clone().map(|t| (b.id, t)))
    {
        st.handoff_to = Some(t.0);
        drop(st);
        t.1.unpark();
        return;
    }
    st.writing = false;
    let kick = !st.callbacks.is_empty();
    drop(st);
    if kick {
        shared.flusher_cv.notify_one();
    }
}

/// Write one batch durably: zero the padding to the block boundary, write,
/// and sync if the method needs it.
fn write_batch(shared: &Shared, batch: &mut Batch) -> Result<(), IoError> {
    let block = shared.spec.block_size;
    let padded = batch.len.div_ceil(block) * block;
    batch.buf[batch.len..padded].fill(0);
    debug_assert!(
        batch.offset + padded as u64 <= shared.spec.segment_size,
        "batch past segment end"
    );
    let method = shared.spec.method;
    method.write_durably(batch.file.as_ref(), &batch.buf[..padded], batch.offset)
}

/// Record the failure, fail every waiter from this batch on, and make every
/// later call fail. Returns the error for the leader.
fn poison(
    shared: &Shared,
    st: MutexGuard<'_, State>,
    failed: Batch,
    e: Arc<IoError>,
) -> JournalError {
    let extra: Vec<Thread> = failed.candidate.into_iter().collect();
    JournalError::Poisoned(poison_all(shared, st, e, extra))
}

/// Poison the journal and wake every thread that waits on it: committers
/// (slot sleepers and parked candidates), committers waiting for a spare,
/// and the callback thread. Every path that poisons goes through here, so
/// no waiter can be left asleep behind a candidate that gave up.
fn poison_all(
    shared: &Shared,
    mut st: MutexGuard<'_, State>,
    e: Arc<IoError>,
    mut threads: Vec<Thread>,
) -> Arc<IoError> {
    let e = st.poisoned.get_or_insert(e).clone();
    shared.poisoned.store(true, Ordering::Release);
    st.writing = false;
    st.handoff_to = None;
    threads.extend(st.queue.drain(..).filter_map(|b| b.candidate));
    drop(st);
    for slot in &shared.slots {
        slot.fetch_add(1, Ordering::Release);
        let _ = futex::wake(slot, futex::Flags::PRIVATE, i32::MAX as u32);
    }
    for t in threads {
        t.unpark();
    }
    shared.spare_cv.notify_all();
    shared.flusher_cv.notify_all();
    e
}

/// The callback thread: drives batches nobody waits on and runs callbacks.
pub(super) fn flusher_loop(shared: Arc<Shared>) {
    loop {
        let mut st = shared.lock();
        while !st.flusher_kick && !st.shutdown {
            st = shared
                .flusher_cv
                .wait(st)
                .unwrap_or_else(|p| p.into_inner());
        }
        if st.shutdown && st.callbacks.is_empty() {
            return;
        }
        st.flusher_kick = false;
        let callbacks = std::mem::take(&mut st.callbacks);
        drop(st);
        let max = callbacks.iter().map(|c| c.0).max().unwrap_or(0);
        let result = wait_batch(&shared, max);
        for (_, lsn, cb) in callbacks {
            cb(result.clone().map(|_| lsn));
        }
    }
}

/// The preparer thread: keeps `spare_segments` prepared segments ahead of
/// the active one, recycling released files first.
pub(super) fn preparer_loop(shared: Arc<Shared>) {
    loop {
        let mut st = shared.lock();
        while !st.shutdown
            && st.poisoned.is_none()
            && st.spares.len() >= shared.options.spare_segments
        {
            st = shared.spare_cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        if st.shutdown || st.poisoned.is_some() {
            return;
        }
        let seq = st.spares.back().map_or(st.active.seq, |s| s.seq) + 1;
        let old = st.free.pop_front();
        drop(st);
        let result = shared
            .spec
            .prepare(shared.vfs.as_ref(), seq, old.as_deref());
        let mut st = shared.lock();
        match result {
            Ok(seg) => {
                if old.is_some() {
                    st.stats.segments_recycled += 1;
                } else {
                    st.stats.segments_created += 1;
                }
                st.spares.push_back(seg);
                drop(st);
                shared.spare_cv.notify_all();
            }
            // A failed preparation may have left a half-made file; the
            // journal cannot roll over, so stop it like a failed write.
            Err(JournalError::Io(e)) => {
                poison_all(&shared, st, e, Vec::new());
            }
            Err(_) => {
                poison_all(&shared, st, Arc::new(IoError::Crashed), Vec::new());
            }
        }
    }
}

/// Mark segments whose records are all ≤ `upto` as free for recycling —
/// but never the active one, nor any segment until a later one holds a
/// durable record (so recovery always finds the current LSN).
pub(super) fn release(shared: &Shared, upto: Lsn) {
    let durable = shared.durable_lsn();
    let mut st = shared.lock();
    st.released = st.released.max(upto);
    let active_seq = st.active.seq;
    let mut freed = false;
    while st.segments.len() > 1 {
        let first = &st.segments[0];
        let next = &st.segments[1];
        let done = first.last_lsn.is_none_or(|l| l <= upto.min(durable));
        let later_durable = next.first_lsn.is_some_and(|f| f <= durable);
        if first.seq == active_seq || !done || !later_durable {
            break;
        }
        let seg = st.segments.remove(0);
        st.free.push_back(seg.path);
        freed = true;
    }
    drop(st);
    if freed {
        shared.spare_cv.notify_all();
    }
}

/// Durably discard every record after `lsn`.
pub(super) fn truncate_after(shared: &Shared, lsn: Lsn) -> Result<(), JournalError> {
    // Let everything queued reach the disk first, so nothing is in flight.
    let mut st = loop {
        let st = shared.lock();
        if let Some(e) = &st.poisoned {
            return Err(JournalError::Poisoned(e.clone()));
        }
        match st.queue.back().map(|b| b.id) {
            Some(id) => {
                drop(st);
                wait_batch(shared, id)?;
            }
            None if st.writing => {
                drop(st);
                std::thread::yield_now();
            }
            None => break st,
        }
    };
    if lsn + 1 >= st.next_lsn {
        return Ok(());
    }
    let first = st
        .segments
        .iter()
        .find_map(|s| s.first_lsn)
        .unwrap_or(st.next_lsn);
    if lsn + 1 < first {
        return Err(JournalError::TruncateBeforeStart { lsn, first });
    }
    let idx = st
        .segments
        .iter()
        .position(|s| {
            s.first_lsn.is_some_and(|f| f <= lsn + 1) && s.last_lsn.is_some_and(|l| l > lsn)
        })
        .expect("a segment holds lsn + 1");
    let block = shared.spec.block_size;
    let bytes = scan::read_segment(shared.vfs.as_ref(), &st.segments[idx].path)?;
    let seq = st.segments[idx].seq;
    let mut cursor = ChainCursor {
        expected_lsn: st.segments[idx].first_lsn,
        salt: None,
    };
    let (records, _, _) = scan::walk_segment(&bytes, seq, block, &mut cursor);
    let cut = records
        .iter()
        .find(|r| r.lsn == lsn + 1)
        .map(|r| r.pos)
        .expect("record lsn + 1");
    let cut_block = cut / block as u64 * block as u64;
    let tail = bytes[cut_block as usize..cut as usize].to_vec();
    // Zero from the cut to the end of what was written, in this segment and
    // every later one — backwards, from the last block written to the cut.
    // A crash part-way then leaves an intact prefix of the old chain followed
    // only by zeros: never a stale record beyond a zeroed gap, where a later
    // epoch's appends could run into it and take it as their continuation.
    let result = (|| -> Result<(), JournalError> {
        let active_pos = st.pos;
        let later: Vec<SegMeta> = st.segments[idx..].to_vec();
        for (i, seg) in later.iter().enumerate().rev() {
            let file = if seg.seq == st.active.seq {
                Arc::clone(&st.active.file)
            } else {
                shared.spec.open(shared.vfs.as_ref(), seg.seq)?.file
            };
            let start = if i == 0 { cut_block } else { block as u64 };
            let end = if seg.seq == st.active.seq {
                active_pos
            } else {
                shared.spec.segment_size
            };
            let end = end.div_ceil(block as u64) * block as u64;
            zero_durably(
                shared,
                file.as_ref(),
                start,
                end,
                if i == 0 { &tail } else { &[] },
            )?;
        }
        Ok(())
    })();
    if let Err(JournalError::Io(e)) = &result {
        let e = poison_all(shared, st, e.clone(), Vec::new());
        return Err(JournalError::Poisoned(e));
    }
    result?;
    // Later segments become spares again (their headers are intact). Open
    // every file before changing any state, so a failure leaves the journal
    // poisoned but consistent.
    let reopened = (|| -> Result<(VecDeque<ReadySegment>, ReadySegment), JournalError> {
        let mut spares = VecDeque::new();
        for seg in &st.segments[idx + 1..] {
            if seg.seq == st.active.seq {
                spares.push_back(st.active.clone());
            } else {
                spares.push_back(shared.spec.open(shared.vfs.as_ref(), seg.seq)?);
            }
        }
        Ok((spares, shared.spec.open(shared.vfs.as_ref(), seq)?))
    })();
    let (mut spares, active) = match reopened {
        Ok(r) => r,
        Err(JournalError::Io(e)) => {
            return Err(JournalError::Poisoned(poison_all(
                shared,
                st,
                e,
                Vec::new(),
            )));
        }
        Err(e) => return Err(e),
    };
    st.segments.truncate(idx + 1);
    spares.extend(st.spares.drain(..));
    st.spares = spares;
    let target = &mut st.segments[idx];
    target.last_lsn = if lsn >= target.first_lsn.unwrap_or(u64::MAX) {
        Some(lsn)
    } else {
        None
    };
    if target.last_lsn.is_none() {
        target.first_lsn = None;
    }
    st.active = active;
    st.pos = cut;
    st.tail = tail;
    st.next_lsn = lsn + 1;
    st.salt = new_salt(st.salt);
    st.epoch_start_pending = true;
    shared.durable_lsn.store(lsn, Ordering::Release);
    Ok(())
}

/// Durably write `prefix` then zeros over `[start, end)` of `file`, in
/// chunks from the end backwards (the chunk holding `prefix` last).
fn zero_durably(
    shared: &Shared,
    file: &dyn VfsFile,
    start: u64,
    end: u64,
    prefix: &[u8],
) -> Result<(), JournalError> {
    let block = shared.spec.block_size;
    let chunk_len = (super::TRUNCATE_CHUNK_BYTES as u64).max(block as u64);
    let mut buf = AlignedBuf::new(chunk_len as usize, block);
    let chunks = (end.saturating_sub(start)).div_ceil(chunk_len);
    for k in (0..chunks).rev() {
        let off = start + k * chunk_len;
        let n = (end - off).min(chunk_len) as usize;
        buf[..n].fill(0);
        if k == 0 {
            buf[..prefix.len()].copy_from_slice(prefix);
        }
        shared.spec.method.write_durably(file, &buf[..n], off)?;
    }
    Ok(())
}

/// A fresh epoch salt, different from the last one.
pub(super) fn new_salt(previous: u32) -> u32 {
    loop {
        let s: u32 = rand::random();
        if s != previous {
            return s;
        }
    }
}

/// Durable records from an LSN on, read back segment by segment.
pub struct Records {
    vfs: Arc<dyn Vfs>,
    block_size: usize,
    segments: VecDeque<SegMeta>,
    from: Lsn,
    upto: Lsn,
    current: VecDeque<(Lsn, Vec<u8>)>,
}

impl Iterator for Records {
    type Item = Result<(Lsn, Vec<u8>), JournalError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(r) = self.current.pop_front() {
                return Some(Ok(r));
            }
            let seg = self.segments.pop_front()?;
            if let Err(e) = self.load(&seg) {
                self.segments.clear();
                return Some(Err(e));
            }
        }
    }
}

impl Records {
    fn load(&mut self, seg: &SegMeta) -> Result<(), JournalError> {
        let bytes = scan::read_segment(self.vfs.as_ref(), &seg.path)?;
        let mut cursor = ChainCursor {
            expected_lsn: seg.first_lsn,
            salt: None,
        };
        let (records, _, _) = scan::walk_segment(&bytes, seg.seq, self.block_size, &mut cursor);
        for r in records {
            if r.lsn >= self.from && r.lsn <= self.upto {
                let start = r.pos as usize + RECORD_HEADER_BYTES;
                self.current
                    .push_back((r.lsn, bytes[start..start + r.len as usize].to_vec()));
            }
        }
        Ok(())
    }
}

pub(super) fn read_from(shared: &Arc<Shared>, from: Lsn) -> Result<Records, JournalError> {
    let upto = shared.durable_lsn();
    let st = shared.lock();
    let segments = st
        .segments
        .iter()
        .filter(|s| s.first_lsn.is_some_and(|f| f <= upto) && s.last_lsn.is_some_and(|l| l >= from))
        .cloned()
        .collect();
    Ok(Records {
        vfs: Arc::clone(&shared.vfs),
        block_size: shared.spec.block_size,
        segments,
        from,
        upto,
        current: VecDeque::new(),
    })
}
