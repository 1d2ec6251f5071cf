//! The write-ahead journal: records appended in order, made durable in
//! groups, recovered after any crash as a gap-free prefix of the append
//! order that holds every acknowledged record.
//!
//! * [`Journal::append`] returns a record's LSN once it is durable.
//! * [`Journal::submit`] queues a record and returns a [`CommitHandle`] at
//!   once; [`CommitHandle::wait`] blocks until durable (a store releases its
//!   writer lock between the two), [`CommitHandle::on_durable`] calls back.
//! * [`Journal::read_from`] iterates durable records; [`Journal::release`]
//!   lets segments before an LSN be recycled; [`Journal::truncate_after`]
//!   durably discards a tail.
//!
//! The format is specified in `docs/format.md`; the modules are:
//! `format` (bytes), `scan` (reading back), `segments` (files), `writer`
//! (group commit), `rollover` (moving to the next segment, making
//! segments), `open` (recovery).

mod format;
mod leader;
mod open;
mod records;
mod rollover;
pub(crate) mod salvage;
mod scan;
mod segments;
mod truncate;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use format::{
    lz4_decode, HeaderError, RecordError, SegmentHeader, FLAG_EPOCH_START, FLAG_LZ4,
    FORMAT_VERSION, RECORD_HEADER_BYTES, SEGMENT_HEADER_BLOCK_BYTES, SEGMENT_HEADER_BYTES,
};
pub use records::Records;
pub use scan::{
    largest_segment_size, Evidence, PendingCut, RecordInfo, Scan, SegmentScan, Skipped, StopReason,
    SET_ASIDE_SUFFIX,
};
pub use writer::CommitHandle;

use crate::io::{IoError, Vfs, WriteMethod};

/// A log sequence number: records are numbered 1, 2, 3… in append order.
pub type Lsn = u64;

/// Default largest segment size: large enough that rollovers are rare
/// under a heavy load, small enough that preparing a spare (zero-filling
/// it) takes well under a second. Also what bounds a record.
pub const DEFAULT_SEGMENT_SIZE_BYTES: u64 = 64 << 20;

/// Default size of a new journal's first segments: a new journal (a new
/// store) takes two of them on disk, the active segment and its spare.
pub const DEFAULT_FIRST_SEGMENT_SIZE_BYTES: u64 = 1 << 20;

/// A segment that filled within this long since appends moved into it
/// makes the next new segment twice as large (up to
/// [`JournalOptions::segment_size_bytes`]): at the rate that filled it, a
/// segment of the same size would roll over again as soon. Segments grow
/// until one lasts this long, so a journal written slowly keeps small
/// ones.
pub const GROW_IF_FILLED_WITHIN: std::time::Duration = std::time::Duration::from_secs(4);

/// Default cap on one write. Batches stop growing here because a bigger
/// write no longer lowers the cost per byte on the devices we measured
/// (durable throughput flattens past ~1 MiB), while it delays every
/// committer queued behind it.
pub const DEFAULT_MAX_WRITE_BYTES: usize = 1 << 20;

/// The most writes [`JournalOptions::writes_in_flight`] allows. Recovery
/// tolerates damage this many largest writes past the end of the chain.
pub const MAX_WRITES_IN_FLIGHT: usize = 4;

/// `truncate_after` zeroes the discarded tail in writes of this size, from
/// the end backwards; a crash can tear the one in flight.
pub(crate) const TRUNCATE_CHUNK_BYTES: usize = 1 << 20;

/// What recovery does when it meets a record it cannot accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecoveryMode {
    /// Recover up to the first torn, stale or corrupt record and discard
    /// everything after it. Guarantees: every acknowledged record survives
    /// a process crash, an OS crash or a power cut on a disk that honours
    /// flushes; the recovered records are exactly a prefix of the append
    /// order. Damage in the *middle* of the journal (bit rot) silently cuts
    /// the journal there — the open report says where and why.
    #[default]
    StopAtFirstBad,
    /// Like `StopAtFirstBad`, but refuse to open ([`JournalError::Corrupt`])
    /// when the records the chain lacks were durable: a valid record past
    /// the damage says so (each record carries the LSN up to which the
    /// journal was durable when it was made). Also refused: a damaged
    /// segment header below the chain, and a segment file whose length is
    /// not its header's. A torn tail from a crash — records that were never
    /// durable — is still accepted; damage that would lose acknowledged
    /// records is not.
    RefuseCorruption,
}

/// Where a batch starts writing when the previous batch ended inside a
/// block. All keep every guarantee; they differ in cost (measured in
/// `docs/journal.md`, "Where a batch starts").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BatchStart {
    /// Rewrite the partly filled block: the batch starts at the block that
    /// holds the previous batch's end, with its earlier bytes copied in.
    /// Uses segment space byte for byte; a lone committer of small records
    /// rewrites the same block commit after commit, which costs it up to
    /// ~10 % of its commits/s on the disk measured.
    RewriteTail,
    /// With one write in flight: `FreshBlock` after a batch that was
    /// written as a single block, `RewriteTail` after a larger one: small
    /// commits at low concurrency never rewrite a block, and larger batches
    /// waste no space. With several writes in flight: always `FreshBlock`.
    #[default]
    Auto,
    /// Start on a fresh block; the rest of the previous block stays zero
    /// padding (recovery steps over it). A batch takes at least one block
    /// of segment space, but no write covers a block written before.
    /// Required with more than one write in flight.
    FreshBlock,
}

/// Settings of a journal.
#[derive(Debug, Clone)]
pub struct JournalOptions {
    /// The largest segment file, and what bounds a record (see
    /// [`JournalOptions::max_record_bytes`]). Segments start at
    /// `first_segment_size_bytes` and grow up to this size while they fill
    /// fast ([`GROW_IF_FILLED_WITHIN`]); a record larger than the next
    /// spare gets a segment sized for it. Recycled segments keep their own
    /// size. An existing journal whose segments are larger keeps them, and
    /// its limit is the largest of them.
    pub segment_size_bytes: u64,
    /// The size of the first segments a journal creates (the journal's
    /// first segment and its spares; after each open, the first new ones):
    /// a multiple of the block size. At least 4 blocks and at most
    /// `segment_size_bytes` are used: the default, 1 MiB, with segments of
    /// 1 MiB or less means every segment has the largest size.
    pub first_segment_size_bytes: u64,
    /// How records are made durable. `None`: `odirect_dsync`, or `fdatasync`
    /// where the file system refuses direct I/O.
    pub method: Option<WriteMethod>,
    /// Writes are multiples of this and aligned to it (≥ the device's
    /// logical block size for direct I/O).
    pub block_size_bytes: usize,
    /// Cap on the bytes of one batch write.
    pub max_write_bytes: usize,
    /// What recovery does at open when it meets a record it cannot accept.
    pub recovery_mode: RecoveryMode,
    /// The lowest LSN the opener needs (0, the default: every record). An
    /// opener that holds the effects of every earlier record elsewhere (a
    /// store's checkpoint) sets it: damage confined to records below it
    /// then neither cuts the journal nor refuses the open — recovery goes
    /// past it to the needed records, lists what it skipped in
    /// [`RecoveryReport::skipped`], and LSNs go on from at least here.
    pub needed_from: Lsn,
    /// Prepared segments kept ahead of the active one.
    pub spare_segments: usize,
    /// Compress payloads of at least this many bytes with LZ4 (kept only
    /// when smaller). `None`, the default: never. Readers always decode.
    pub lz4_min_bytes: Option<usize>,
    /// How many batch writes may be in flight at once (1 to
    /// [`MAX_WRITES_IN_FLIGHT`]). The guarantee is the same for every value:
    /// a commit is acknowledged only once its write and every earlier one
    /// are durable, and a failed write fails its batch and every later one.
    /// More than 1 makes every batch start on a fresh block (two writes in
    /// flight must never share a block): `BatchStart::Auto` does so by
    /// itself, `RewriteTail` is refused. A second write starts only while
    /// those in flight carry few records. Default 1: measured in
    /// `docs/journal.md`.
    pub writes_in_flight: usize,
    /// Where a batch starts when the previous one ended inside a block.
    pub batch_start: BatchStart,
}

impl Default for JournalOptions {
    fn default() -> Self {
        JournalOptions {
            segment_size_bytes: DEFAULT_SEGMENT_SIZE_BYTES,
            first_segment_size_bytes: DEFAULT_FIRST_SEGMENT_SIZE_BYTES,
            method: None,
            block_size_bytes: 4096,
            max_write_bytes: DEFAULT_MAX_WRITE_BYTES,
            recovery_mode: RecoveryMode::default(),
            needed_from: 0,
            spare_segments: 1,
            lz4_min_bytes: None,
            writes_in_flight: 1,
            batch_start: BatchStart::default(),
        }
    }
}

impl JournalOptions {
    /// The largest record payload: a record never spans segments, so it must
    /// fit in a segment of the largest size after the header block.
    pub fn max_record_bytes(&self) -> usize {
        (self.segment_size_bytes as usize)
            .saturating_sub(self.block_size_bytes + RECORD_HEADER_BYTES)
            .min(u32::MAX as usize)
    }

    /// The size of the first segments: `first_segment_size_bytes`, at least
    /// 4 blocks, at most `segment_size_bytes`.
    pub fn first_segment_bytes(&self) -> u64 {
        self.first_segment_size_bytes
            .max(4 * self.block_size_bytes as u64)
            .min(self.segment_size_bytes)
    }

    fn validate(&self) -> Result<(), JournalError> {
        let bad = |m: String| Err(JournalError::BadOptions(m));
        if !self.block_size_bytes.is_power_of_two() || self.block_size_bytes < 512 {
            return bad(format!(
                "block size {} is not a power of two ≥ 512",
                self.block_size_bytes
            ));
        }
        if self.segment_size_bytes % self.block_size_bytes as u64 != 0
            || self.segment_size_bytes < 4 * self.block_size_bytes as u64
        {
            return bad(format!(
                "segment size {} must be a multiple of the block size {} and at least 4 blocks",
                self.segment_size_bytes, self.block_size_bytes
            ));
        }
        if self.first_segment_size_bytes % self.block_size_bytes as u64 != 0 {
            return bad(format!(
                "first segment size {} must be a multiple of the block size {}",
                self.first_segment_size_bytes, self.block_size_bytes
            ));
        }
        if !(1..=MAX_WRITES_IN_FLIGHT).contains(&self.writes_in_flight) {
            return bad(format!(
                "writes in flight must be 1 to {MAX_WRITES_IN_FLIGHT}, not {}",
                self.writes_in_flight
            ));
        }
        if self.writes_in_flight > 1 && self.batch_start == BatchStart::RewriteTail {
            return bad(
                "several writes in flight cannot use BatchStart::RewriteTail (two writes in \
                 flight must never share a block); use Auto or FreshBlock"
                    .into(),
            );
        }
        if self.max_write_bytes < self.block_size_bytes {
            return bad("max write size is smaller than one block".into());
        }
        if let Some(m) = self.method {
            if !m.is_durable(true) {
                return bad(format!(
                    "write method `{m}` does not make writes durable; use odirect_dsync, \
                     fdatasync, odsync, fsync, pwritev2_dsync or a uring method"
                ));
            }
        }
        Ok(())
    }
}

/// Errors of the journal.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// A file operation failed.
    #[error(transparent)]
    Io(Arc<IoError>),
    /// An earlier write or sync failed; the journal accepts nothing more.
    #[error(
        "the journal stopped accepting writes after an I/O failure ({0}); nothing after it was \
         acknowledged; reopen the journal to recover"
    )]
    Poisoned(Arc<IoError>),
    /// Another process (or handle) has the journal open.
    #[error("journal {0} is in use by another process (its LOCK file is held)")]
    Locked(PathBuf),
    /// A record larger than [`JournalOptions::max_record_bytes`] was
    /// submitted; nothing was queued.
    #[error("record of {len} bytes is larger than the maximum of {max} bytes")]
    RecordTooLarge {
        /// The record's payload length in bytes.
        len: usize,
        /// The largest payload the journal accepts, in bytes.
        max: usize,
    },
    /// A record marked compressed whose payload does not decompress (its
    /// checksum matched, so it was written that way).
    #[error("record {lsn}: compressed payload does not decode")]
    BadCompressedRecord {
        /// The LSN of the record.
        lsn: Lsn,
    },
    /// The [`JournalOptions`] are inconsistent or do not suit the device;
    /// the message says which setting and why.
    #[error("invalid journal options: {0}")]
    BadOptions(String),
    /// `RecoveryMode::RefuseCorruption` found damage that no crash leaves:
    /// a record the chain lacks that a later record says was durable, a
    /// damaged segment header below the chain, or a segment file whose
    /// length is not its header's.
    #[error(
        "journal is corrupt: segment {seq}, byte {pos}: {reason}; acknowledged records would be \
         lost. Inspect with `keel journal check`; open the journal with \
         RecoveryMode::StopAtFirstBad to keep the records before the damage, or, for a store's \
         journal, salvage the store: `keel db salvage STORE --to NEW` (Database::salvage)"
    )]
    Corrupt {
        /// The sequence number of the damaged segment.
        seq: u64,
        /// The byte offset of the damage in that segment file (0 for a
        /// damaged header; the file's length for a wrong length).
        pos: u64,
        /// What was found there, and the evidence that it is not a tear.
        reason: String,
        /// The LSN of the valid record that proves the damage (for a
        /// damaged header below the chain: the chain's first LSN, or its
        /// base LSN if it holds no record; 0 for a wrong length).
        later_lsn: u64,
    },
    /// A segment file whose header carries another store id than the
    /// segments before it: files of two journals are mixed in one directory.
    #[error(
        "segment {path} belongs to another journal (store id {found:#x}, expected {expected:#x})"
    )]
    ForeignSegment {
        /// The segment file.
        path: PathBuf,
        /// The store id of the segments scanned before this one.
        expected: u64,
        /// The store id in this segment's header.
        found: u64,
    },
    /// The journal's existing segments were written with a block size other
    /// than [`JournalOptions::block_size_bytes`] (an existing journal keeps
    /// the block size it was made with).
    #[error("segment {path} was written with block size {found}, but the journal uses {expected}")]
    BlockSizeMismatch {
        /// The first segment file with a valid header.
        path: PathBuf,
        /// The block size in bytes the journal was opened with.
        expected: usize,
        /// The block size in bytes the first valid segment header states.
        found: usize,
    },
    /// [`Journal::truncate_after`] was asked to cut below the journal's
    /// first record.
    #[error("cannot truncate after lsn {lsn}: records before lsn {first} were released")]
    TruncateBeforeStart {
        /// The LSN to truncate after.
        lsn: Lsn,
        /// The LSN of the journal's first record (its next LSN if it holds
        /// none).
        first: Lsn,
    },
    /// A segment in a journal format version this build does not read
    /// (version 1 and 2 records carry no durable LSN). Nothing was changed.
    #[error(
        "segment {path} is in journal format version {version}, which this Keel does not read \
         (it reads version {}): open the journal with the Keel that wrote it",
        format::FORMAT_VERSION
    )]
    UnsupportedVersion {
        /// The segment file.
        path: PathBuf,
        /// The version its header states.
        version: u32,
    },
    /// [`inspect`] found no segment files in the directory.
    #[error("{0} is not a journal directory (no segment files)")]
    NotAJournal(PathBuf),
}

impl From<IoError> for JournalError {
    fn from(e: IoError) -> Self {
        JournalError::Io(Arc::new(e))
    }
}

/// What recovery found when the journal was opened.
#[derive(Debug, Clone)]
pub struct RecoveryReport {
    /// The LSN of the first recovered record (`None` if none was recovered).
    pub first_lsn: Option<Lsn>,
    /// The LSN of the last recovered record (`None` if none was recovered).
    pub last_lsn: Option<Lsn>,
    /// Where the recovered records end and why: (segment, byte, reason).
    pub stop: Option<(u64, u64, StopReason)>,
    /// Segments in the recovered chain.
    pub segments: usize,
    /// The write method in use (after any fallback).
    pub method: WriteMethod,
    /// Why the default method was not used, if it was not.
    pub fallback: Option<String>,
    /// Segment files set aside by this open (`RecoveryMode::StopAtFirstBad`
    /// only): their headers were damaged below the start of the chain, so
    /// the records they held are lost. Renamed to `….seg.damaged` and kept
    /// as evidence instead of being recycled.
    pub set_aside: Vec<PathBuf>,
    /// Damaged or missing records below [`JournalOptions::needed_from`]
    /// that recovery went past: lost, but not needed by the opener.
    pub skipped: Vec<Skipped>,
}

/// An open journal. Share it between threads with `Arc<Journal>`.
pub struct Journal {
    shared: Arc<writer::Shared>,
    preparer: Option<std::thread::JoinHandle<()>>,
    flusher: Option<std::thread::JoinHandle<()>>,
    report: RecoveryReport,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("dir", &self.shared.spec.dir)
            .finish()
    }
}

impl Journal {
    /// Open (creating if needed) the journal in `dir` and recover it.
    pub fn open(
        vfs: Arc<dyn Vfs>,
        dir: &Path,
        options: JournalOptions,
    ) -> Result<Journal, JournalError> {
        open::open(vfs, dir, options)
    }

    /// Open the journal in `dir` for reading only: the same scan and
    /// verdict as [`Journal::open`] (`recovery_mode`, `needed_from`), but
    /// nothing on disk changes — no file is created, synced, zeroed,
    /// renamed or recycled — and no thread starts. [`Journal::read_from`]
    /// returns the records recovery would keep; every append fails with
    /// [`JournalError::Poisoned`] ("opened read-only"). Takes the
    /// directory's lock like a writer, so it does not run beside one.
    pub fn open_read_only(
        vfs: Arc<dyn Vfs>,
        dir: &Path,
        options: JournalOptions,
    ) -> Result<Journal, JournalError> {
        open::open_read_only(vfs, dir, options, true)
    }

    /// [`Journal::open_read_only`] without the directory's lock, beside a
    /// writer that may be appending, recycling and preparing segments
    /// meanwhile: what it reads may be cut short or refused where the
    /// writer changed a file under it (its caller retries), and records
    /// the writer has not made durable yet may be among those it returns
    /// (its caller stops at an LSN the writer published durable: see
    /// [`Journal::mirror_durable_lsn`]).
    pub fn open_live(
        vfs: Arc<dyn Vfs>,
        dir: &Path,
        options: JournalOptions,
    ) -> Result<Journal, JournalError> {
        open::open_read_only(vfs, dir, options, false)
    }

    /// From now on, store the durable LSN into `mirror` each time it
    /// advances, before the commits it covers are acknowledged; stores
    /// the current one at once. Set once (a second call changes nothing).
    pub fn mirror_durable_lsn(&self, mirror: crate::io::DurableMirror) {
        let mirror = self.shared.durable_mirror.get_or_init(|| mirror);
        mirror.store(self.shared.durable_lsn());
    }

    /// Append a record and return its LSN once it is durable.
    pub fn append(&self, payload: &[u8]) -> Result<Lsn, JournalError> {
        self.submit(payload)?.wait()
    }

    /// Queue a record; the returned handle tells when it is durable. The
    /// record is durable only after [`CommitHandle::wait`] (or the
    /// callback) reports success.
    pub fn submit(&self, payload: &[u8]) -> Result<CommitHandle, JournalError> {
        writer::submit(&self.shared, &[payload])
    }

    /// [`Journal::submit`] of the record made of `parts`, one after the
    /// other, copied straight into the batch: a caller whose record holds
    /// large values it already has elsewhere need not copy them into one
    /// buffer first.
    pub fn submit_parts(&self, parts: &[&[u8]]) -> Result<CommitHandle, JournalError> {
        writer::submit(&self.shared, parts)
    }

    /// The LSN of the last durable record (0 if none).
    pub fn durable_lsn(&self) -> Lsn {
        self.shared.durable_lsn()
    }

    /// The LSN the next record will get.
    pub fn next_lsn(&self) -> Lsn {
        self.shared.next_lsn()
    }

    /// Iterate the durable records with LSN ≥ `from`.
    pub fn read_from(&self, from: Lsn) -> Result<Records, JournalError> {
        records::read_from(&self.shared, from)
    }

    /// Prepare spare segments now, in the calling thread, until they can
    /// hold `bytes` more bytes of records (record headers included, and
    /// the padding of batches that start on a fresh block: with
    /// `BatchStart::Auto` or `FreshBlock`, a batch takes at least a block), so
    /// that the next `bytes` of appends roll over without any segment being
    /// created or recycled meanwhile (unless a record is larger than the
    /// next spare: it gets a segment made for it). The segments made here
    /// are as large as the bytes still missing need, up to
    /// `segment_size_bytes`, and at least the size the journal has grown
    /// to. Returns how many segments it prepared. For bulk loads and
    /// benchmarks: preparing a segment in the background writes its size in
    /// zeros, which competes with the commits for the disk.
    pub fn preallocate(&self, bytes: u64) -> Result<usize, JournalError> {
        rollover::preallocate(&self.shared, bytes)
    }

    /// Allow the segments holding only records ≤ `upto` to be recycled.
    pub fn release(&self, upto: Lsn) {
        rollover::release(&self.shared, upto)
    }

    /// Durably discard every record after `lsn` (waits for queued records to
    /// be written first). The next record gets `lsn + 1`.
    ///
    /// Not atomic across a crash: if the process or the machine stops
    /// inside it, recovery returns every record up to `lsn` and possibly a
    /// prefix of the discarded ones (zeros are written from the end
    /// backwards); call it again after reopening.
    pub fn truncate_after(&self, lsn: Lsn) -> Result<(), JournalError> {
        truncate::truncate_after(&self.shared, lsn)
    }

    /// What recovery found at open.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.report
    }

    /// The journal's store id: every segment header carries it, and a
    /// store's data file records it to check that the two belong together.
    pub fn store_id(&self) -> u64 {
        self.shared.spec.store_id
    }

    /// The write method in use.
    pub fn method(&self) -> WriteMethod {
        self.shared.spec.method
    }

    /// The journal's options (after defaults and fallbacks).
    pub fn options(&self) -> &JournalOptions {
        &self.shared.options
    }

    /// The first error that poisoned the journal, if any.
    pub fn poisoned(&self) -> Option<Arc<IoError>> {
        self.shared.poison_error()
    }

    /// Counters for benchmarks: (batches written, records written).
    pub fn stats(&self) -> JournalStats {
        self.shared.stats()
    }
}

/// Counters of a journal's activity since open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JournalStats {
    /// Batch writes made durable.
    pub writes: u64,
    /// Records in those writes.
    pub records: u64,
    /// Bytes those writes covered, padded to whole blocks.
    pub bytes_written: u64,
    /// Times appends moved on to the next segment.
    pub rollovers: u64,
    /// Rollovers that had to wait for a spare segment to be prepared.
    pub rollover_waits: u64,
    /// Spare segments made from released files (rename + new header).
    pub segments_recycled: u64,
    /// Spare segments made as new zero-filled files.
    pub segments_created: u64,
    /// Writes that started while another write was in flight.
    pub overlapped_writes: u64,
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.shared.shutdown();
        if let Some(h) = self.preparer.take() {
            let _ = h.join();
        }
        if let Some(h) = self.flusher.take() {
            let _ = h.join();
        }
    }
}

/// Scan a journal directory without opening it for writing (no lock, no
/// recovery actions): what `keel journal dump` and `check` show.
pub fn inspect(vfs: &dyn Vfs, dir: &Path) -> Result<Scan, JournalError> {
    let scan = scan::scan(vfs, dir, 0)?;
    if scan.segments.is_empty() {
        return Err(JournalError::NotAJournal(dir.to_path_buf()));
    }
    Ok(scan)
}

/// How far past the end of the chain a crash can leave written bytes: the
/// writes that can be in flight at once, or one chunk of zeros written by
/// `truncate_after`.
pub(crate) fn tolerated_damage_bytes(max_write_bytes: usize) -> u64 {
    (max_write_bytes.max(TRUNCATE_CHUNK_BYTES) * MAX_WRITES_IN_FLIGHT) as u64
}

/// Read one record's payload as stored in a segment file (for `journal
/// dump`): compressed when the record has `FLAG_LZ4` (see [`lz4_decode`]).
pub fn read_record(vfs: &dyn Vfs, path: &Path, info: &RecordInfo) -> Result<Vec<u8>, JournalError> {
    let file = scan::open_for_read(vfs, path)?;
    let mut buf = vec![0u8; info.len as usize];
    file.read_exact_at(&mut buf, info.pos + RECORD_HEADER_BYTES as u64)?;
    Ok(buf)
}

#[cfg(test)]
mod growth_tests;
#[cfg(test)]
mod hardening_tests;
#[cfg(test)]
mod tests;

/// The decoders, for the fuzz targets in `fuzz/` and the random-input
/// tests: not a stable API.
#[doc(hidden)]
pub mod fuzzing {
    pub use super::format::{HeaderError, RecordHeader, SegmentHeader};
    pub use super::scan::{find_valid_after, walk_segment, ChainCursor};
    use super::RECORD_HEADER_BYTES;

    /// Decode a record and check what the decoder promises: an accepted
    /// record lies inside `bytes`, its payload is the bytes after its
    /// header, and encoding it again gives the same bytes.
    pub fn check_decode_record(bytes: &[u8]) {
        if let Ok((h, payload)) = RecordHeader::decode(bytes) {
            let end = RECORD_HEADER_BYTES + h.len as usize;
            assert!(end <= bytes.len());
            assert_eq!(payload, &bytes[RECORD_HEADER_BYTES..end]);
            let mut again = vec![0u8; end];
            h.encode(payload, &mut again);
            again[RECORD_HEADER_BYTES..].copy_from_slice(payload);
            assert_eq!(&again[..], &bytes[..end], "decode/encode round trip");
        }
    }

    /// Decode a segment header; an accepted one must encode back to the
    /// same bytes.
    pub fn check_decode_segment_header(bytes: &[u8]) {
        if let Ok(h) = SegmentHeader::decode(bytes) {
            let mut again = vec![0u8; super::SEGMENT_HEADER_BYTES];
            h.encode(&mut again);
            assert_eq!(&again[..], &bytes[..super::SEGMENT_HEADER_BYTES]);
            // The extension after it: absent, or a size that encodes back
            // to the same bytes.
            if let Some(largest) = h.decode_largest(bytes) {
                let mut again = vec![0u8; super::format::SEGMENT_HEADER_BLOCK_BYTES];
                h.encode_with_largest(largest, &mut again);
                assert_eq!(&again[..], &bytes[..again.len()]);
            }
        }
    }

    /// A segment built from a recipe: a header block of 512 bytes for
    /// segment 1, then records whose sizes, LSN steps, salts and flags come
    /// from `data`, then bit flips at places `data` picks. Gives a fuzzer
    /// valid checksums to start from, which it could not find by chance.
    pub fn segment_from_recipe(data: &[u8]) -> Vec<u8> {
        const BLOCK: usize = 512;
        let mut seg = vec![0u8; BLOCK];
        SegmentHeader {
            block_size: BLOCK as u32,
            store_id: 1,
            seq: 1,
            segment_size: 1 << 16,
            base_lsn: 1,
            max_write_bytes: 1 << 16,
            cut_from: 0,
        }
        .encode(&mut seg);
        let (mut lsn, mut salt, mut i) = (1u64, 7u32, 0usize);
        let records = data.first().map_or(0, |&n| n % 16);
        i += 1;
        for _ in 0..records {
            let Some(&ctl) = data.get(i) else { break };
            let len = data.get(i + 1).map_or(0, |&l| l as usize);
            i += 2;
            let payload = data.get(i..(i + len).min(data.len())).unwrap_or(&[]);
            i += payload.len();
            let mut flags = 0;
            if ctl & 1 != 0 {
                salt = salt.wrapping_add(1);
                flags = super::FLAG_EPOCH_START;
            }
            let h = RecordHeader {
                len: payload.len() as u32,
                lsn: lsn + u64::from(ctl >> 6),
                seq: if ctl & 2 != 0 { 2 } else { 1 },
                salt,
                flags,
                durable_lsn: lsn.saturating_sub(1 + u64::from(ctl >> 2 & 3)),
            };
            lsn = h.lsn + 1;
            let at = seg.len();
            seg.resize(at + RECORD_HEADER_BYTES + payload.len(), 0);
            h.encode(payload, &mut seg[at..]);
            seg[at + RECORD_HEADER_BYTES..].copy_from_slice(payload);
        }
        seg.resize(seg.len() + 64, 0);
        while let Some(flip) = data.get(i..i + 3) {
            let at = usize::from(u16::from_le_bytes([flip[0], flip[1]])) % seg.len();
            seg[at] ^= flip[2];
            i += 3;
        }
        seg
    }

    /// Make every valid record of segment `seq` in `bytes` whose LSN is
    /// above `lsn` claim at most `claim` durable, checksums recomputed: as
    /// if they had been made while record `lsn` was still in flight (what
    /// writes that overlap, or a torn first write, leave).
    pub fn lower_claims(bytes: &mut [u8], seq: u64, lsn: u64, claim: u64) {
        let found: Vec<_> = super::scan::valid_records(bytes, seq, 0).collect();
        for e in found.into_iter().filter(|e| e.lsn > lsn) {
            let at = e.pos as usize;
            let end = at + RECORD_HEADER_BYTES + e.len as usize;
            let (h, payload) = RecordHeader::decode(&bytes[at..end]).expect("valid record");
            let payload = payload.to_vec();
            RecordHeader {
                durable_lsn: h.durable_lsn.min(claim),
                ..h
            }
            .encode(&payload, &mut bytes[at..end]);
        }
    }

    /// Walk arbitrary bytes as segment `seq` with `block_size` bytes of
    /// header block, and check every accepted record: inside the bytes,
    /// back to back (or after zero padding to a block boundary), its checksum verifies, its LSNs consecutive, its
    /// segment `seq`. Then search past the end as recovery does.
    pub fn check_walk_segment(bytes: &[u8], seq: u64, block_size: usize) {
        let mut cursor = ChainCursor {
            expected_lsn: None,
            salt: None,
        };
        let (records, end, _) = walk_segment(bytes, seq, block_size, &mut cursor);
        let mut pos = block_size as u64;
        let mut prev: Option<u64> = None;
        for r in &records {
            if r.pos != pos {
                // Only zero padding to the next block boundary may separate
                // two records.
                let next = pos.next_multiple_of(block_size as u64);
                assert_eq!(r.pos, next, "records back to back or after padding");
                assert!(bytes[pos as usize..next as usize].iter().all(|&b| b == 0));
                pos = next;
            }
            let (h, payload) = RecordHeader::decode(&bytes[r.pos as usize..])
                .expect("an accepted record decodes, checksum included");
            assert_eq!((h.lsn, h.len, h.seq), (r.lsn, r.len, seq));
            assert_eq!(payload.len(), r.len as usize);
            assert!(prev.is_none_or(|p| p + 1 == r.lsn), "LSNs consecutive");
            prev = Some(r.lsn);
            pos += (RECORD_HEADER_BYTES + r.len as usize) as u64;
        }
        assert!(records.is_empty() || end == pos);
        assert!(end <= bytes.len().max(block_size) as u64);
        let from = (end as usize).min(bytes.len());
        if let Some((at, lsn)) = find_valid_after(bytes, seq, from, cursor.salt, 0) {
            let (h, _) = RecordHeader::decode(&bytes[at as usize..]).expect("found record");
            assert_eq!((h.lsn, h.seq), (lsn, seq));
        }
    }
}
