//! Group commit: where a record becomes durable.
//!
//! **Reserving without a lock.** Records are packed into the open *batch*
//! (a slab: one block-aligned buffer destined for one place in the active
//! segment). A committer reserves its bytes and its LSN with a single
//! `fetch_add` on the batch's reservation word (record count and end offset
//! packed in one `u64`), copies its header and payload into its own range,
//! and counts itself done. No mutex on the append path, so a burst of
//! committers woken together never convoys behind a lock.
//!
//! **Sealing.** A batch is closed by setting the word's sealed bit, under
//! the journal mutex: by the leader that is about to write it, or by a
//! committer whose record did not fit (it overflowed the batch's capacity).
//! The sealer waits for the reservations made before the seal to finish
//! copying, computes the batch's final length (every reservation that fits
//! — they form a prefix, because offsets grow monotonically), queues it, and
//! installs the next batch, which starts with the partial last block of this
//! one so that batches need not start on a fresh block. Reservations that
//! arrive after the seal are void and retry on the next batch.
//!
//! **Writing.** Whoever waits first while no write is in flight becomes the
//! **leader** (one compare-and-swap): it writes the queued batches up to its
//! own with the journal's durable method *without holding the mutex*,
//! publishes the new durable LSN and wakes that batch's waiters — all of
//! them with one futex wake on the batch's slot, none of the others. Then it
//! stops leading and wakes exactly one waiter of the next pending batch,
//! which takes over. So each committer sleeps once and is woken once, and a
//! lone committer writes its own record with no hand-off at all.
//!
//! One write is in flight at a time, so batch *k* is durable before batch
//! *k+1* is written: acknowledgements follow the append order. A failed write
//! or sync poisons the journal: the failing batch, every queued one and every
//! later submit get the error; nothing is retried.

use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use crossbeam_epoch::{self as epoch, Atomic, Owned, Shared as EpochPtr};

use super::format::{lz4_encode, RecordHeader, FLAG_EPOCH_START, FLAG_LZ4, RECORD_HEADER_BYTES};
use super::leader::{poison_result, wait_batch, Flight};
use super::rollover;
use super::segments::{FreeFile, ReadySegment, SegmentSpec};
use super::{BatchStart, JournalError, JournalOptions, JournalStats, Lsn};
use crate::bell::Bell;
use crate::io::{AlignedBuf, IoError, LockGuard, Vfs, VfsFile};

/// Batches map onto this many futex words; waiters of batches that share a
/// slot wake each other only when more than this many batches are pending.
pub(super) const SLOTS: usize = 64;
/// Buffers kept for reuse (allocating a zeroed megabyte per batch would
/// cost more than the write).
pub(super) const POOL_BUFFERS: usize = 8;

/// Reservation word layout: sealed bit, record count, end offset.
const SEALED: u64 = 1 << 63;
const COUNT_SHIFT: u32 = 40;
const ONE_RECORD: u64 = 1 << COUNT_SHIFT;
const END_MASK: u64 = ONE_RECORD - 1;
const COUNT_MASK: u64 = !SEALED & !END_MASK;

fn word_count(w: u64) -> u64 {
    (w & COUNT_MASK) >> COUNT_SHIFT
}

fn word_end(w: u64) -> usize {
    (w & END_MASK) as usize
}

/// A segment the journal has records in (or is appending to).
#[derive(Debug, Clone)]
pub(super) struct SegMeta {
    pub seq: u64,
    pub path: PathBuf,
    pub first_lsn: Option<Lsn>,
    pub last_lsn: Option<Lsn>,
    /// Where its first record lies: the first block, unless the chain
    /// resumed past damage in it (`scan::scan_needing`).
    pub first_pos: u64,
    /// The file's length in bytes.
    pub size: u64,
}

/// The open batch: committers reserve ranges of `buf` concurrently.
pub(super) struct Slab {
    pub(super) id: u64,
    first_lsn: Lsn,
    pub(super) seq: u64,
    salt: u32,
    /// The record at index 0 carries `FLAG_EPOCH_START`.
    epoch_start: bool,
    /// Where `buf[0]` goes in the segment file (block-aligned).
    pub(super) offset: u64,
    /// The segment file's length: no write goes past it.
    pub(super) segment_size: u64,
    /// Reservations must end at or before this many bytes of `buf`.
    capacity: usize,
    pub(super) file: Arc<dyn VfsFile>,
    /// Taken back for reuse once the batch is written (see `take_buffer`).
    buf: UnsafeCell<Option<AlignedBuf>>,
    /// Raw start of `buf`, for the disjoint concurrent copies.
    base: *mut u8,
    /// `SEALED | count << COUNT_SHIFT | end`.
    reserve: AtomicU64,
    /// The smallest reservation word of a record that did not fit.
    overflow: AtomicU64,
    /// Reservations made before the seal that are finished (copied, or
    /// found not to fit).
    settled: AtomicU64,
}

// SAFETY: committers write only inside the byte ranges their `fetch_add` on
// `reserve` gave them, which are disjoint; the buffer is read as a whole
// only by the sealer after every reservation made before the seal has
// settled (Release on `settled`, Acquire when reading it), and no range is
// handed out after the seal.
unsafe impl Sync for Slab {}
// SAFETY: the raw pointer points into `buf`, owned by the slab.
unsafe impl Send for Slab {}

impl Slab {
    /// Seal the batch and wait until every reservation made before the seal
    /// has settled. Returns the record count and the end offset of the
    /// records that fit. Callers hold the journal mutex.
    pub(super) fn seal(&self) -> (u64, usize) {
        let word = self.reserve.fetch_or(SEALED, Ordering::AcqRel);
        debug_assert_eq!(word & SEALED, 0, "a batch is sealed once");
        let n = word_count(word);
        let mut spins = 0u32;
        while self.settled.load(Ordering::Acquire) < n {
            // A copier is a few hundred nanoseconds from done — unless it
            // was preempted; then let it run.
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        let last = word.min(self.overflow.load(Ordering::Acquire));
        (word_count(last), word_end(last))
    }

    /// The buffer, once sealed and settled.
    ///
    /// # Safety
    /// The caller is the one thread that sealed the batch (under the mutex)
    /// or that writes it (after taking it off the queue), every reservation
    /// made before the seal has settled, and no other reference to the
    /// buffer is live.
    #[allow(clippy::mut_from_ref)] // exclusive by the protocol above
    pub(super) unsafe fn bytes_mut(&self) -> &mut AlignedBuf {
        // SAFETY: exclusive access is the caller's obligation (see above).
        unsafe {
            (*self.buf.get())
                .as_mut()
                .expect("a batch's buffer is taken after its write")
        }
    }

    /// Take the buffer back for reuse, once the batch is written. Late
    /// committers may still hold the slab (they reserve, find it sealed and
    /// retry) but none writes into the buffer: no range is handed out
    /// after the seal.
    ///
    /// # Safety
    /// As for [`Slab::bytes_mut`], and the batch has been written.
    pub(super) unsafe fn take_buffer(&self) -> Option<AlignedBuf> {
        // SAFETY: exclusive access is the caller's obligation (see above).
        unsafe { (*self.buf.get()).take() }
    }
}

/// Where committers find the open batch. A committer loads the pointer
/// inside an epoch pin and may use the slab until it unpins; a replaced
/// slab is destroyed only once no thread pinned before the swap remains.
///
/// Why not `arc-swap`: its store pays the outstanding debts of every thread
/// that ever loaded from it, a walk over one node per thread ever created.
/// After 64 committer threads had come and gone, that walk took a quarter
/// of a lone committer's CPU time (installing a batch per commit): ~7 µs
/// per commit, measured. An epoch pin is a thread-local counter, and
/// reclamation walks only the threads alive.
pub(super) struct OpenBatch(Atomic<Arc<Slab>>);

impl OpenBatch {
    fn empty() -> OpenBatch {
        OpenBatch(Atomic::null())
    }

    /// A counted reference to the open batch, if any.
    pub(super) fn load_full(&self) -> Option<Arc<Slab>> {
        let guard = epoch::pin();
        let p = self.0.load(Ordering::Acquire, &guard);
        // SAFETY: `p` was loaded under `guard`; what it points to is
        // destroyed only after every guard pinned before its replacement
        // is gone.
        unsafe { p.as_ref() }.cloned()
    }

    /// Replace the open batch (callers hold the journal mutex).
    pub(super) fn store(&self, slab: Option<Arc<Slab>>) {
        let guard = epoch::pin();
        let new = match slab {
            Some(s) => Owned::new(s).into_shared(&guard),
            None => EpochPtr::null(),
        };
        let old = self.0.swap(new, Ordering::AcqRel, &guard);
        if !old.is_null() {
            // SAFETY: `old` is no longer reachable from the pointer; threads
            // that loaded it are pinned, and destruction waits for them.
            unsafe { guard.defer_destroy(old) };
        }
    }
}

impl Drop for OpenBatch {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no other thread can reach the pointer.
        unsafe {
            let p = self.0.load(Ordering::Relaxed, epoch::unprotected());
            if !p.is_null() {
                drop(p.into_owned());
            }
        }
    }
}

/// A sealed batch waiting to be written.
pub(super) struct Sealed {
    pub(super) slab: Arc<Slab>,
    /// Bytes used in the buffer, counting the rewritten prefix.
    pub(super) len: usize,
    pub(super) records: u64,
    pub(super) last_lsn: Lsn,
}

pub(super) struct State {
    pub next_lsn: Lsn,
    pub salt: u32,
    /// The next record starts a new epoch (first record after open or
    /// truncation).
    pub epoch_start_pending: bool,
    /// Active segment and the append position in it after the sealed
    /// batches (the open batch starts here).
    pub active: ReadySegment,
    pub pos: u64,
    /// Bytes of the partly filled block at `pos`, rewritten by the next
    /// batch.
    pub tail: Vec<u8>,
    /// The bytes from `pos` to the next block boundary are the zero padding
    /// of a batch retired since the last open, truncation or rollover.
    pub(super) padded_to_block: bool,
    /// The last batch retired was written as a single block.
    last_batch_one_block: bool,
    pub(super) queue: VecDeque<Sealed>,
    /// Batches whose writes have started and not completed, in order.
    pub(super) flights: VecDeque<Flight>,
    next_batch_id: u64,
    pub(super) pool: Vec<AlignedBuf>,
    pub segments: Vec<SegMeta>,
    pub spares: VecDeque<ReadySegment>,
    /// Old segment files waiting to be recycled into spares.
    pub free: VecDeque<FreeFile>,
    /// The size of the next segment made new (or recycled: a free file at
    /// least this large): doubles, up to the largest segment size, when
    /// the active segment filled within `GROW_IF_FILLED_WITHIN`.
    pub next_size: u64,
    /// When appends moved into the active segment (or the journal opened).
    pub(super) active_since: Instant,
    pub released: Lsn,
    pub(super) poisoned: Option<Arc<IoError>>,
    pub(super) callbacks: Vec<(u64, Lsn, Callback)>,
    flusher_kick: bool,
    /// The flusher sleeps on `flusher_cv` (a kick wakes it only then: a
    /// notify nobody waits for is still a futex call, and `on_durable`
    /// comes once per store commit group).
    pub(super) flusher_waiting: bool,
    pub(super) shutdown: bool,
    /// A spare is being prepared (by the preparer or `preallocate`): one at
    /// a time, so two never pick the same sequence number.
    pub(super) preparing: bool,
    pub(super) stats: JournalStats,
}

type Callback = Box<dyn FnOnce(Result<Lsn, JournalError>) + Send>;

pub(super) struct Shared {
    pub vfs: Arc<dyn Vfs>,
    pub spec: SegmentSpec,
    pub options: JournalOptions,
    state: Mutex<State>,
    /// The open batch; `None` while a rollover waits for a spare segment.
    pub(super) open: OpenBatch,
    /// Wakes the preparer (spare needed, segment freed, shutdown) and
    /// committers waiting for a spare.
    pub(super) spare_cv: Condvar,
    pub(super) flusher_cv: Condvar,
    pub(super) durable_lsn: AtomicU64,
    /// Where `durable_lsn` is mirrored for readers in other processes
    /// (`Journal::mirror_durable_lsn`): set once, stored to after each
    /// store to `durable_lsn`, before the waiters are woken.
    pub(super) durable_mirror: std::sync::OnceLock<crate::io::DurableMirror>,
    /// The last batch that is durable with every batch before it.
    pub(super) completed_batch: AtomicU64,
    /// The last batch whose write has started (writes start in order).
    pub(super) started_batch: AtomicU64,
    /// The first batch that failed (or was pending when the journal was
    /// poisoned); `u64::MAX` while none did. Batches before it may still
    /// complete.
    pub(super) failed_batch: AtomicU64,
    /// Records in the batches in flight.
    pub(super) flight_records: AtomicU64,
    /// Id of the open batch (the highest that can have waiters).
    pub(super) open_id: AtomicU64,
    /// Threads holding a write permit (at most `writes_in_flight`).
    pub(super) writers: AtomicUsize,
    /// The highest batch [`CommitHandle::start`] asked to be written
    /// without a waiter; the flusher thread writes up to it.
    start_target: AtomicU64,
    pub(super) poisoned: AtomicBool,
    /// Held around each batch's sync with a method whose writes go
    /// through the page cache, and set once one failed (see
    /// `leader::judged_sync`).
    pub(super) sync_failed: Mutex<bool>,
    slots: Vec<Bell>,
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
        let shared = Shared {
            vfs,
            spec,
            options,
            state: Mutex::new(state),
            open: OpenBatch::empty(),
            spare_cv: Condvar::new(),
            flusher_cv: Condvar::new(),
            durable_lsn: AtomicU64::new(durable),
            durable_mirror: std::sync::OnceLock::new(),
            completed_batch: AtomicU64::new(0),
            started_batch: AtomicU64::new(0),
            failed_batch: AtomicU64::new(u64::MAX),
            flight_records: AtomicU64::new(0),
            open_id: AtomicU64::new(0),
            writers: AtomicUsize::new(0),
            start_target: AtomicU64::new(0),
            poisoned: AtomicBool::new(false),
            sync_failed: Mutex::new(false),
            slots: (0..SLOTS).map(|_| Bell::default()).collect(),
            _lock: lock,
        };
        {
            let mut st = shared.lock();
            install_slab(&shared, &mut st, 0);
        }
        shared
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn durable_lsn(&self) -> Lsn {
        self.durable_lsn.load(Ordering::Acquire)
    }

    pub(super) fn next_lsn(&self) -> Lsn {
        let st = self.lock();
        match self.open.load_full().as_ref() {
            Some(slab) => {
                let w = slab.reserve.load(Ordering::Acquire);
                if w & SEALED != 0 {
                    st.next_lsn
                } else {
                    slab.first_lsn + word_count(w)
                }
            }
            None => st.next_lsn,
        }
    }

    pub(super) fn poison_error(&self) -> Option<Arc<IoError>> {
        self.lock().poisoned.clone()
    }

    pub(super) fn stats(&self) -> JournalStats {
        self.lock().stats
    }

    /// Ask the flusher to run (start the write of `start_target`, run the
    /// callbacks), waking it if it sleeps; it checks the kick under the
    /// lock before it sleeps, so none is lost.
    fn kick_flusher(&self, mut st: MutexGuard<'_, State>) {
        st.flusher_kick = true;
        let wake = st.flusher_waiting;
        drop(st);
        if wake {
            self.flusher_cv.notify_one();
        }
    }

    pub(super) fn shutdown(&self) {
        self.lock().shutdown = true;
        self.spare_cv.notify_all();
        self.flusher_cv.notify_all();
    }

    pub(super) fn slot(&self, batch: u64) -> &Bell {
        &self.slots[(batch % SLOTS as u64) as usize]
    }
}

impl State {
    pub(super) fn new(
        (next_lsn, salt): (Lsn, u32),
        active: ReadySegment,
        pos: u64,
        tail: Vec<u8>,
        segments: Vec<SegMeta>,
        first_size: u64,
    ) -> State {
        State {
            next_lsn,
            salt,
            epoch_start_pending: true,
            active,
            pos,
            tail,
            padded_to_block: false,
            last_batch_one_block: false,
            queue: VecDeque::new(),
            flights: VecDeque::new(),
            next_batch_id: 1,
            pool: Vec::new(),
            segments,
            spares: VecDeque::new(),
            free: VecDeque::new(),
            next_size: first_size,
            active_since: Instant::now(),
            released: 0,
            poisoned: None,
            callbacks: Vec::new(),
            flusher_kick: false,
            flusher_waiting: false,
            shutdown: false,
            preparing: false,
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

    /// Block until the record is durable, like [`CommitHandle::wait`],
    /// keeping the handle (a later `wait` returns at once with the same
    /// outcome). This thread may write the batch itself (as leader).
    pub fn wait_durable(&self) -> Result<Lsn, JournalError> {
        wait_batch(&self.shared, self.batch)?;
        Ok(self.lsn)
    }

    /// Start writing the record's batch now, without blocking: the
    /// journal's flusher thread writes it (sealing the open batch if the
    /// record is still in it), so that the caller can do other work — a
    /// store applies the transaction to its tree — while the write is in
    /// flight, then [`CommitHandle::wait`]s. Costs nothing when the batch's
    /// write has already started. The record is durable only once `wait`
    /// (or a callback) says so.
    pub fn start(&self) {
        let shared = &self.shared;
        if shared.started_batch.load(Ordering::Acquire) >= self.batch {
            return;
        }
        // One kick per batch: committers of the same batch find the target
        // already raised.
        if shared.start_target.fetch_max(self.batch, Ordering::AcqRel) < self.batch {
            shared.kick_flusher(shared.lock());
        }
    }

    /// Call `callback` once the record is durable (or failed), from a
    /// journal thread, with the outcome of the record's own batch. For
    /// event loops that must not block. The callback should be short: the
    /// thread that runs it also writes the batches [`CommitHandle::start`]
    /// asks for. One that panics does not stop that thread: its panic is
    /// printed (the panic hook) and dropped, and the other callbacks run.
    pub fn on_durable(self, callback: impl FnOnce(Result<Lsn, JournalError>) + Send + 'static) {
        if self.is_durable() {
            callback(Ok(self.lsn));
            return;
        }
        let mut st = self.shared.lock();
        st.callbacks
            .push((self.batch, self.lsn, Box::new(callback)));
        self.shared.kick_flusher(st);
    }
}

/// Stop a journal opened read-only before anything is appended: every
/// append gets `why`.
pub(super) fn stop_read_only(shared: &Shared, why: IoError) {
    let mut st = shared.lock();
    st.poisoned = Some(Arc::new(why));
    shared.poisoned.store(true, Ordering::Release);
}

/// Queue `payload` as the next record.
pub(super) fn submit(shared: &Arc<Shared>, parts: &[&[u8]]) -> Result<CommitHandle, JournalError> {
    let max = shared.options.max_record_bytes();
    let len = parts.iter().map(|p| p.len()).sum::<usize>();
    if len > max {
        return Err(JournalError::RecordTooLarge { len, max });
    }
    // Compression happens here, before any shared state is touched.
    let compressed = compress(shared, parts, len);
    let compressed_part;
    let (parts, len, extra_flags) = match &compressed {
        Some(c) => {
            compressed_part = [&c[..]];
            (&compressed_part[..], c.len(), FLAG_LZ4)
        }
        None => (parts, len, 0),
    };
    let need = RECORD_HEADER_BYTES + len;
    loop {
        if shared.poisoned.load(Ordering::Acquire) {
            return Err(poison_result(shared));
        }
        let guard = epoch::pin();
        let ptr = shared.open.0.load(Ordering::Acquire, &guard);
        // SAFETY: loaded under `guard`, which is held while `slab` is used
        // (see `OpenBatch`).
        let Some(slab) = (unsafe { ptr.as_ref() }) else {
            drop(guard);
            slow_path(shared, None, need)?;
            continue;
        };
        let prev = slab
            .reserve
            .fetch_add(ONE_RECORD | need as u64, Ordering::AcqRel);
        if prev & SEALED == 0 {
            let (index, at) = (word_count(prev), word_end(prev));
            if at + need <= slab.capacity {
                let lsn = slab.first_lsn + index;
                let flags = extra_flags
                    | if index == 0 && slab.epoch_start {
                        FLAG_EPOCH_START
                    } else {
                        0
                    };
                // What is durable now (never this record: it is not
                // written yet), for recovery to tell damage from a tear.
                let durable_lsn = shared.durable_lsn();
                fill(slab, at, need, (lsn, durable_lsn), flags, parts);
                return Ok(CommitHandle {
                    shared: Arc::clone(shared),
                    lsn,
                    batch: slab.id,
                });
            }
            // It does not fit: this batch ends before us.
            slab.overflow.fetch_min(prev, Ordering::AcqRel);
            slab.settled.fetch_add(1, Ordering::Release);
        }
        let id = slab.id;
        drop(guard);
        slow_path(shared, Some(id), need)?;
    }
}

/// The record's payload compressed, when the options ask for it at this
/// length and compressing makes it smaller.
fn compress(shared: &Shared, parts: &[&[u8]], len: usize) -> Option<Vec<u8>> {
    shared
        .options
        .lz4_min_bytes
        .filter(|&min| len >= min)
        .and_then(|_| match parts {
            [one] => lz4_encode(one),
            _ => lz4_encode(&parts.concat()),
        })
}

/// Write the record `lsn` (`parts`, `need` bytes with its header) at
/// offset `at` of `slab`, which this thread reserved, and count it as
/// settled.
#[inline]
fn fill(
    slab: &Slab,
    at: usize,
    need: usize,
    (lsn, durable_lsn): (Lsn, Lsn),
    flags: u16,
    parts: &[&[u8]],
) {
    let header = RecordHeader {
        len: (need - RECORD_HEADER_BYTES) as u32,
        lsn,
        seq: slab.seq,
        salt: slab.salt,
        flags,
        durable_lsn,
    };
    // SAFETY: `[at, at + need)` lies inside the buffer (`capacity` ≤ its
    // length) and was reserved by this thread alone; nobody reads it
    // before `settled` counts it.
    let out = unsafe { std::slice::from_raw_parts_mut(slab.base.add(at), need) };
    let mut to = RECORD_HEADER_BYTES;
    for part in parts {
        out[to..to + part.len()].copy_from_slice(part);
        to += part.len();
    }
    header.encode_in_place(out);
    slab.settled.fetch_add(1, Ordering::Release);
}

/// A reservation failed on batch `seen` (sealed, or too full for `need`
/// bytes), or there was no open batch: make sure a newer batch with room is
/// open, then let the caller retry.
fn slow_path(shared: &Shared, seen: Option<u64>, need: usize) -> Result<(), JournalError> {
    let mut st = shared.lock();
    loop {
        if let Some(e) = &st.poisoned {
            return Err(JournalError::Poisoned(e.clone()));
        }
        let open = shared.open.load_full();
        match (&open, seen) {
            // Someone else already moved on.
            (Some(slab), Some(id)) if slab.id != id => return Ok(()),
            (Some(_), None) => return Ok(()),
            (Some(slab), Some(_)) => {
                // Still the batch we failed on. If it is sealed, its sealer
                // is between sealing and installing (cannot happen: both
                // are under the mutex) — so it is open and too full.
                let (records, len) = slab.seal();
                retire(shared, &mut st, slab, records, len);
                shared.open.store(None);
                drop(install_room(shared, st, need)?);
                return Ok(());
            }
            (None, _) => {
                // A rollover is waiting for a spare segment.
                shared.spare_cv.notify_all();
                st = shared.spare_cv.wait(st).unwrap_or_else(|p| p.into_inner());
            }
        }
    }
}

/// Queue a sealed batch (if it holds records) and move the append position
/// past it.
pub(super) fn retire(shared: &Shared, st: &mut State, slab: &Arc<Slab>, records: u64, len: usize) {
    let block = shared.spec.block_size;
    st.pos = slab.offset + len as u64;
    // SAFETY: the caller sealed the batch under the mutex and it settled;
    // nobody else touches the buffer until it is queued below.
    let buf = unsafe { slab.bytes_mut() };
    st.tail.clear();
    st.tail.extend_from_slice(&buf[len / block * block..len]);
    st.next_lsn = slab.first_lsn + records;
    st.epoch_start_pending = slab.epoch_start && records == 0;
    if records == 0 {
        return;
    }
    st.padded_to_block = true;
    st.last_batch_one_block = len <= block;
    let last_lsn = slab.first_lsn + records - 1;
    if let Some(seg) = st.segments.last_mut().filter(|s| s.seq == slab.seq) {
        seg.first_lsn.get_or_insert(slab.first_lsn);
        seg.last_lsn = Some(last_lsn);
    }
    st.queue.push_back(Sealed {
        slab: Arc::clone(slab),
        len,
        records,
        last_lsn,
    });
}

/// Install the next open batch at the append position, rolling over to a
/// new segment first if a record of `need` bytes would not fit in this one
/// (or, when this one holds no record, replacing it by one that holds the
/// record). The mutex is released while waiting for a spare segment or
/// making one.
pub(super) fn install_room<'a>(
    shared: &'a Shared,
    mut st: MutexGuard<'a, State>,
    need: usize,
) -> Result<MutexGuard<'a, State>, JournalError> {
    let moved = batch_start(shared, &st) + need as u64 > st.active.size;
    if moved {
        if rollover::active_is_empty(shared, &st) {
            st = rollover::replace_empty_active(shared, st, need)?;
        } else {
            st = rollover::roll_over(shared, st, need)?;
        }
    }
    install_slab(shared, &mut st, need);
    if moved {
        // Committers that found no open batch while the mutex was released
        // wait for this one; the preparer may have a spare to replace.
        shared.spare_cv.notify_all();
    }
    Ok(st)
}

/// Open a batch at `st.pos` with room for at least `need` bytes (the caller
/// checked that they fit in the segment).
pub(super) fn install_slab(shared: &Shared, st: &mut State, need: usize) {
    let block = shared.spec.block_size;
    if shared.options.batch_start != BatchStart::RewriteTail {
        // Start on a fresh block (with several writes in flight, two of
        // them must never cover the same block: which lands last is
        // unknown).
        st.pos = batch_start(shared, st);
        if st.pos % block as u64 == 0 {
            st.tail.clear();
        }
    }
    let offset = st.pos / block as u64 * block as u64;
    let prefix = (st.pos - offset) as usize;
    debug_assert_eq!(prefix, st.tail.len());
    let room = (st.active.size - offset) as usize;
    let capacity = shared.options.max_write_bytes.max(prefix + need).min(room);
    let buf_len = capacity.div_ceil(block).max(1) * block;
    let mut buf = match st.pool.iter().position(|b| b.len() >= buf_len) {
        Some(i) => st.pool.swap_remove(i),
        None => AlignedBuf::new(buf_len.max(shared.options.max_write_bytes), block),
    };
    buf[..prefix].copy_from_slice(&st.tail);
    let base = buf.as_mut_ptr();
    let id = st.next_batch_id;
    st.next_batch_id += 1;
    let slab = Slab {
        id,
        first_lsn: st.next_lsn,
        seq: st.active.seq,
        salt: st.salt,
        epoch_start: st.epoch_start_pending,
        offset,
        segment_size: st.active.size,
        capacity,
        file: Arc::clone(&st.active.file),
        buf: UnsafeCell::new(Some(buf)),
        base,
        reserve: AtomicU64::new(prefix as u64),
        overflow: AtomicU64::new(u64::MAX),
        settled: AtomicU64::new(0),
    };
    shared.open_id.store(id, Ordering::Release);
    shared.open.store(Some(Arc::new(slab)));
}

/// Where the next batch starts writing records, if the append position is
/// the current one: right there (rewriting the partial block), or at the
/// next block boundary as `BatchStart` says — but only if
/// the rest of the block is zero padding of a batch of this life: after an
/// open or a truncation it may hold a torn record, which recovery would
/// stop at, so the first batch rewrites it.
fn batch_start(shared: &Shared, st: &State) -> u64 {
    let fresh = match shared.options.batch_start {
        BatchStart::RewriteTail => false,
        BatchStart::Auto => st.last_batch_one_block || shared.options.writes_in_flight > 1,
        BatchStart::FreshBlock => true,
    };
    if fresh && st.padded_to_block {
        st.pos.next_multiple_of(shared.spec.block_size as u64)
    } else {
        st.pos
    }
}

/// Poison the journal and wake every thread that waits on it: committers,
/// committers waiting for a spare, and the callback thread. Every path that
/// poisons goes through here.
pub(super) fn poison_all(
    shared: &Shared,
    mut st: MutexGuard<'_, State>,
    e: Arc<IoError>,
) -> Arc<IoError> {
    let e = st.poisoned.get_or_insert(e).clone();
    // With a direct durable write per batch (`O_DIRECT|O_DSYNC`), each
    // write reports its own error: batches whose writes started may still
    // complete; none after them. Through the page cache (a write then a
    // sync, or a sync inside the write), they may not: a sync reports a
    // writeback error once per open file, so the failed sync may have been
    // the one to hear of another batch's lost pages, and that batch's own
    // sync then returns 0 (`fsync(2)`, errseq;
    // `WriteMethod::shares_writeback_errors`). Nothing not yet complete is
    // acknowledged then.
    let first_in_doubt = if shared.spec.method.shares_writeback_errors() {
        shared.completed_batch.load(Ordering::SeqCst) + 1
    } else {
        shared.started_batch.load(Ordering::SeqCst) + 1
    };
    shared
        .failed_batch
        .fetch_min(first_in_doubt, Ordering::SeqCst);
    shared.poisoned.store(true, Ordering::SeqCst);
    st.queue.clear();
    drop(st);
    for slot in &shared.slots {
        slot.wake_all();
    }
    shared.spare_cv.notify_all();
    shared.flusher_cv.notify_all();
    e
}

/// The flusher thread: writes batches that [`CommitHandle::start`] asked
/// for, drives batches nobody waits on, and runs callbacks.
pub(super) fn flusher_loop(shared: Arc<Shared>) {
    loop {
        let mut st = shared.lock();
        while !st.flusher_kick && !st.shutdown {
            st.flusher_waiting = true;
            st = shared
                .flusher_cv
                .wait(st)
                .unwrap_or_else(|p| p.into_inner());
            st.flusher_waiting = false;
        }
        if st.shutdown && st.callbacks.is_empty() {
            return;
        }
        st.flusher_kick = false;
        let mut callbacks = std::mem::take(&mut st.callbacks);
        drop(st);
        let target = shared.start_target.load(Ordering::Acquire);
        if target > shared.started_batch.load(Ordering::Acquire) {
            // Its committers hear the outcome from their own `wait`.
            let _ = wait_batch(&shared, target);
        }
        run_callbacks(&shared, &mut callbacks);
    }
}

/// Run `callbacks` in batch order, each with its own batch's outcome: a
/// batch that became durable before a later one failed reports success.
/// A callback that panics (the caller's code) does not end this thread:
/// the panic hook has printed it, and the other callbacks run, and later
/// `start`s are written, as if it had returned.
fn run_callbacks(shared: &Shared, callbacks: &mut Vec<(u64, Lsn, Callback)>) {
    callbacks.sort_by_key(|c| c.0);
    let mut outcome: Option<(u64, Result<(), JournalError>)> = None;
    for (batch, lsn, cb) in callbacks.drain(..) {
        let result = match &outcome {
            Some((b, r)) if *b == batch => r.clone(),
            _ => {
                let r = wait_batch(shared, batch);
                outcome = Some((batch, r.clone()));
                r
            }
        };
        let _ = panic::catch_unwind(AssertUnwindSafe(|| cb(result.map(|_| lsn))));
    }
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
