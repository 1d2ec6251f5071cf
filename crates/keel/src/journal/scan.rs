//! Reading segments back: the scan that recovery, `read_from`, `journal
//! dump` and `journal check` share.
//!
//! The chain rule (see `docs/format.md`, "Recovery"): segments are visited in
//! sequence order starting at the lowest one with a valid header; inside a
//! segment records follow each other back to back from the end of the first
//! block. A record is accepted when its checksum holds, its segment sequence
//! is the segment's, its LSN is the previous one plus one, and its salt is
//! the previous record's — or it carries `FLAG_EPOCH_START`. At the first
//! record that fails, the segment ends; the chain continues into the next
//! segment only if that segment's header is valid and its first record is
//! accepted by the same rule.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::format::{
    parse_segment_file_name, HeaderError, RecordError, RecordHeader, SegmentHeader,
    FLAG_EPOCH_START, RECORD_HEADER_BYTES, RH_SALT, RH_SEQ, SEGMENT_HEADER_BLOCK_BYTES,
    SEGMENT_HEADER_BYTES,
};
use super::{JournalError, Lsn};
use crate::io::{OpenMode, OpenOptions, Vfs, VfsFile};

/// One accepted record's place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordInfo {
    /// The record's LSN.
    pub lsn: u64,
    /// Byte offset of the record header in its segment file.
    pub pos: u64,
    /// The payload length in bytes, as stored (compressed when `flags` has
    /// `FLAG_LZ4`).
    pub len: u32,
    /// The epoch the record was written in.
    pub salt: u32,
    /// The record's flag bits (`FLAG_EPOCH_START`, `FLAG_LZ4`).
    pub flags: u16,
}

/// A valid record found outside the chain, with what it claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evidence {
    /// The segment it lies in.
    pub seq: u64,
    /// Byte offset of its header in the segment file.
    pub pos: u64,
    /// Its LSN.
    pub lsn: u64,
    /// Every record up to this LSN was durable when it was made.
    pub durable_lsn: u64,
    /// Its epoch.
    pub salt: u32,
    /// Its flag bits.
    pub flags: u16,
    /// Its payload length as stored.
    pub len: u32,
}

/// A truncation that may not have finished: the mark `truncate_after`
/// writes into the header of the segment holding the cut before it zeroes
/// anything, and clears once every record past the cut is zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingCut {
    /// The segment whose header holds the mark.
    pub seq: u64,
    /// The first LSN the cut discards (the journal was cut after the one
    /// before it).
    pub cut_from: u64,
}

/// Why the records of a segment end where they do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// Zeros: nothing was ever written there. The normal end.
    CleanEnd,
    /// The segment is full up to its end.
    SegmentEnd,
    /// A record that fails its checksum or has an impossible length or
    /// flags: torn by a crash, or corrupted.
    Damaged(RecordError),
    /// A valid record that belongs elsewhere: another segment's, an older
    /// epoch's, or out of LSN order (left over from a recycled segment or an
    /// earlier life of this one).
    Stale {
        /// The LSN the record carries.
        lsn: u64,
        /// The segment sequence number the record carries.
        seq: u64,
        /// The LSN the chain expected next (0 before its first record).
        expected_lsn: u64,
    },
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopReason::CleanEnd => f.write_str("clean end (zeros)"),
            StopReason::SegmentEnd => f.write_str("end of segment"),
            StopReason::Damaged(RecordError::BadChecksum) => {
                f.write_str("torn or corrupt record (checksum mismatch)")
            }
            StopReason::Damaged(RecordError::BadLength) => {
                f.write_str("torn or corrupt record (length past segment end)")
            }
            StopReason::Damaged(RecordError::BadFlags) => {
                f.write_str("corrupt record (unknown flags)")
            }
            StopReason::Damaged(RecordError::BadPadding) => f.write_str(
                "torn or corrupt padding (zeros, then other bytes before the block end)",
            ),
            StopReason::Damaged(RecordError::Zeros) => f.write_str("zeros"),
            StopReason::Stale {
                lsn,
                seq,
                expected_lsn,
            } => write!(
                f,
                "stale record (lsn {lsn}, segment {seq}; expected lsn {expected_lsn}) from an \
                 earlier use of this space"
            ),
        }
    }
}

/// What a scan found in one segment file.
#[derive(Debug, Clone)]
pub struct SegmentScan {
    /// The sequence number in the file name.
    pub seq: u64,
    /// The segment file.
    pub path: PathBuf,
    /// The decoded header, or why it was not accepted
    /// ([`HeaderError::SeqMismatch`] when it names another segment).
    pub header: Result<SegmentHeader, HeaderError>,
    /// The file's length in bytes (damage when it differs from the
    /// header's `segment_size`).
    pub file_len: u64,
    /// Records accepted as part of the chain.
    pub records: Vec<RecordInfo>,
    /// Byte offset just past the last accepted record (or the first block).
    pub end_pos: u64,
    /// Why the records end (None for segments outside the chain).
    pub stop: Option<StopReason>,
    /// Whether this segment is part of the recovered chain.
    pub in_chain: bool,
}

/// The outcome of scanning a journal directory.
#[derive(Debug, Clone)]
pub struct Scan {
    /// Every segment file in the directory, in sequence order.
    pub segments: Vec<SegmentScan>,
    /// The store id shared by the segments (None for an empty directory).
    pub store_id: Option<u64>,
    /// The LSN of the chain's first record (None when it holds none).
    pub first_lsn: Option<u64>,
    /// The LSN of the chain's last record (None when it holds none).
    pub last_lsn: Option<u64>,
    /// The salt of the chain's last record: its last epoch (None when it
    /// holds no record).
    pub last_salt: Option<u32>,
    /// Where and why the chain stopped: (segment seq, byte offset, reason).
    pub stop: Option<(u64, u64, StopReason)>,
    /// Proof that the chain was cut by damage, not by a crash: a valid
    /// record outside the chain (past its end, or in another segment) whose
    /// `durable_lsn` says the first record the chain lacks was durable
    /// when it was made. A crash leaves torn only records that were not yet
    /// durable, so no such record follows a torn tail. (The record claiming
    /// the most is kept.) Records that an unfinished truncation may have
    /// left (see [`Scan::pending_cut`]) prove nothing.
    pub valid_after_damage: Option<Evidence>,
    /// A segment below the start of the chain whose header is not valid:
    /// no crash leaves one there (segments are created and recycled only
    /// above the active one), so the records it held are lost to damage.
    pub damaged_before_chain: Option<u64>,
    /// The first segment file (seq, file length, header's
    /// `segment_size`) whose length is not its header's: cut short or
    /// extended behind the journal's back, which no crash does (a header
    /// is written only once the file has its full length).
    pub wrong_length: Option<(u64, u64, u64)>,
    /// A `truncate_after` that a crash interrupted (its mark is still in
    /// a segment header): records it may have left past the cut prove
    /// nothing, and a writable open finishes zeroing them.
    pub pending_cut: Option<PendingCut>,
    /// Records below the opener's needed LSN that recovery went past (see
    /// [`JournalOptions::needed_from`](super::JournalOptions::needed_from));
    /// empty when the opener needs every record.
    pub skipped: Vec<Skipped>,
    /// The base LSN in the header of the chain's first segment: where
    /// numbering goes on when the chain holds no record.
    pub base_lsn: Option<u64>,
    /// How far past the end of the chain a crash can have left torn bytes,
    /// from the largest `max_write_bytes` any segment header states (and
    /// the caller's): see `tolerated_damage_bytes`.
    pub tolerated_damage_bytes: u64,
    /// Segment files that an earlier open set aside (renamed to
    /// `….seg.damaged`) because their headers were damaged below the chain.
    pub set_aside: Vec<PathBuf>,
    /// The largest segment size the journal's headers record (in their
    /// extension; the largest if they differ): the size that bounds its
    /// segments and records, which an open keeps. `None` for a journal
    /// written before headers recorded it.
    pub largest_segment_size: Option<u64>,
    /// The segment right after the chain's last one, when it holds records
    /// of the chain's last epoch beyond the chain's end: the first write
    /// into it was torn, and the records that landed were never
    /// acknowledged. Recovery zeroes them before the next append: were the
    /// next epoch's first write torn in turn, they would look like
    /// acknowledged records lost to corruption (their salt is the last
    /// *recovered* one).
    pub leftover_after_chain: Option<u64>,
}

/// Open a segment for reading (buffered, so no alignment rules apply).
pub fn open_for_read(vfs: &dyn Vfs, path: &Path) -> Result<Arc<dyn VfsFile>, JournalError> {
    Ok(vfs.open(path, OpenOptions::new(OpenMode::Buffered).read_only(true))?)
}

/// Read a whole segment file.
pub fn read_segment(vfs: &dyn Vfs, path: &Path) -> Result<Vec<u8>, JournalError> {
    read_segment_from(open_for_read(vfs, path)?)
}

/// Read a whole segment file as the disk holds it: clean cached pages are
/// evicted first (see [`VfsFile::evict_clean_pages`]), so bytes of a write
/// whose sync failed are not taken for written ones.
pub fn read_segment_from_disk(vfs: &dyn Vfs, path: &Path) -> Result<Vec<u8>, JournalError> {
    let file = open_for_read(vfs, path)?;
    file.evict_clean_pages()?;
    read_segment_from(file)
}

fn read_segment_from(file: Arc<dyn VfsFile>) -> Result<Vec<u8>, JournalError> {
    let len = file.len()?;
    let mut bytes = vec![0u8; len as usize];
    file.read_exact_at(&mut bytes, 0)?;
    // Leave none of the file in the page cache: the journal writes its
    // segments with `O_DIRECT`, and each direct write into a range the
    // cache holds first invalidates those pages (and again after the
    // write) — on every commit into a segment that recovery read whole at
    // open (the store's w3: `invalidate_inode_pages2_range` was 2 % of the
    // committing thread's samples). It also gives back the segment's
    // memory. Advisory: a failure leaves the cache as it was, which is
    // correct, only slower.
    let _ = file.evict_clean_pages();
    Ok(bytes)
}

/// The suffix `RecoveryMode::StopAtFirstBad` gives a segment file whose
/// header is damaged below the chain: kept as evidence, no longer a segment.
pub const SET_ASIDE_SUFFIX: &str = ".damaged";

/// Files in `dir` set aside as damaged by an earlier open.
pub fn list_set_aside(vfs: &dyn Vfs, dir: &Path) -> Result<Vec<PathBuf>, JournalError> {
    Ok(vfs
        .read_dir(dir)?
        .into_iter()
        .filter(|name| {
            name.strip_suffix(SET_ASIDE_SUFFIX)
                .is_some_and(|seg| parse_segment_file_name(seg).is_some())
        })
        .map(|name| dir.join(name))
        .collect())
}

/// The segment files in `dir`, sorted by sequence.
pub fn list_segments(vfs: &dyn Vfs, dir: &Path) -> Result<Vec<(u64, PathBuf)>, JournalError> {
    let mut segs: Vec<(u64, PathBuf)> = vfs
        .read_dir(dir)?
        .into_iter()
        .filter_map(|name| parse_segment_file_name(&name).map(|seq| (seq, dir.join(name))))
        .collect();
    segs.sort();
    Ok(segs)
}

/// The chain state carried from record to record.
#[derive(Debug, Clone, Copy)]
pub struct ChainCursor {
    /// The LSN the next record must have (None before the first record).
    pub expected_lsn: Option<u64>,
    /// The salt the next record must carry unless it starts an epoch (None
    /// before the first record).
    pub salt: Option<u32>,
}

/// Walk the records of one segment's bytes from the first block, extending
/// the chain. Returns the accepted records, the end offset and the reason.
pub fn walk_segment(
    bytes: &[u8],
    seq: u64,
    block_size: usize,
    cursor: &mut ChainCursor,
) -> (Vec<RecordInfo>, u64, StopReason) {
    walk_segment_from(bytes, seq, block_size, block_size, cursor)
}

/// [`walk_segment`] from byte `start` (a chain that resumes past damage
/// the opener does not need: see `scan_needing`).
pub fn walk_segment_from(
    bytes: &[u8],
    seq: u64,
    block_size: usize,
    start: usize,
    cursor: &mut ChainCursor,
) -> (Vec<RecordInfo>, u64, StopReason) {
    let mut records = Vec::new();
    let mut pos = start;
    loop {
        if pos + RECORD_HEADER_BYTES > bytes.len() {
            return (records, pos as u64, StopReason::SegmentEnd);
        }
        let (h, _) = match RecordHeader::decode(&bytes[pos..]) {
            Ok(r) => r,
            Err(e) => match padding(bytes, pos, seq, block_size, cursor, e) {
                Padding::Continue(next) => {
                    pos = next;
                    continue;
                }
                Padding::End(stop) => return (records, pos as u64, stop),
            },
        };
        if !accepted(&h, seq, cursor) {
            let stale = StopReason::Stale {
                lsn: h.lsn,
                seq: h.seq,
                expected_lsn: cursor.expected_lsn.unwrap_or(0),
            };
            return (records, pos as u64, stale);
        }
        records.push(RecordInfo {
            lsn: h.lsn,
            pos: pos as u64,
            len: h.len,
            salt: h.salt,
            flags: h.flags,
        });
        cursor.expected_lsn = Some(h.lsn + 1);
        cursor.salt = Some(h.salt);
        pos += RECORD_HEADER_BYTES + h.len as usize;
    }
}

/// Whether a decoded record continues the chain (rule 2 of the recovery
/// rules): this segment's, the expected LSN, and the chain's salt unless it
/// starts an epoch.
fn accepted(h: &RecordHeader, seq: u64, cursor: &ChainCursor) -> bool {
    let lsn_ok = cursor.expected_lsn.is_none_or(|e| h.lsn == e);
    let salt_ok = h.flags & FLAG_EPOCH_START != 0 || cursor.salt.is_none_or(|s| s == h.salt);
    h.seq == seq && lsn_ok && salt_ok && h.lsn != 0
}

/// What a position that holds no record turns out to be.
enum Padding {
    /// Zero padding: the chain goes on at this block boundary.
    Continue(usize),
    /// The records of the segment end here, for this reason.
    End(StopReason),
}

/// No record decodes at `pos` (`error`): is it the zero padding after a
/// batch that the next batch followed on a fresh block (`BatchStart`; see
/// `docs/format.md`, recovery rule 3)? Padding runs from `pos`, inside a
/// block, to the block boundary — possibly fewer bytes than a record
/// header — and is all zeros; the chain goes on there only if the record
/// at the boundary continues it.
///
/// Only the record with exactly the expected LSN is taken, so padding can
/// never hide a lost record: a record is written once per epoch, at one
/// place, and if that place were `pos` its header would not be zeros.
/// Zeros followed by nonzero bytes later in the block are damage (the
/// padding was written with the batch before it). At the boundary, bytes
/// that do not decode are damage only if they carry this segment's
/// sequence and the chain's salt where a record header has them (a torn
/// or corrupted record of this epoch); anything else there is what a
/// recycled segment holds beyond the last write — a clean end, as with
/// zeros.
fn padding(
    bytes: &[u8],
    pos: usize,
    seq: u64,
    block_size: usize,
    cursor: &ChainCursor,
    error: RecordError,
) -> Padding {
    let plain = match error {
        RecordError::Zeros => StopReason::CleanEnd,
        e => StopReason::Damaged(e),
    };
    if cursor.expected_lsn.is_none() || pos % block_size == 0 || bytes[pos] != 0 {
        return Padding::End(plain);
    }
    let next = pos.next_multiple_of(block_size);
    if next + RECORD_HEADER_BYTES > bytes.len() {
        return Padding::End(plain);
    }
    if bytes[pos..next].iter().any(|&b| b != 0) {
        return Padding::End(match error {
            RecordError::Zeros => StopReason::Damaged(RecordError::BadPadding),
            e => StopReason::Damaged(e),
        });
    }
    match RecordHeader::decode(&bytes[next..]) {
        Ok((h, _)) if accepted(&h, seq, cursor) => Padding::Continue(next),
        Ok(_) | Err(RecordError::Zeros) => Padding::End(StopReason::CleanEnd),
        Err(e) => {
            let at = |off: usize, n: usize| &bytes[next + off..next + off + n];
            let ours = at(RH_SEQ, 8) == seq.to_le_bytes()
                && cursor
                    .salt
                    .is_some_and(|s| at(RH_SALT, 4) == s.to_le_bytes());
            Padding::End(if ours {
                StopReason::Damaged(e)
            } else {
                StopReason::CleanEnd
            })
        }
    }
}

/// Look for a valid record of epoch `salt` (any epoch if `None`: a chain
/// with no record yet has none) with an LSN above `expected_lsn` in
/// `bytes[from..]`: evidence that damage sits in the middle of the journal
/// rather than at its torn tail.
pub fn find_valid_after(
    bytes: &[u8],
    seq: u64,
    from: usize,
    salt: Option<u32>,
    expected_lsn: u64,
) -> Option<(u64, u64)> {
    let seq_bytes = seq.to_le_bytes();
    let mut p = from;
    // The segment sequence sits at bytes 16..24 of a header; checking it
    // first makes the byte-by-byte search cheap.
    while p + RECORD_HEADER_BYTES <= bytes.len() {
        if bytes[p + 16..p + 24] == seq_bytes {
            if let Ok((h, _)) = RecordHeader::decode(&bytes[p..]) {
                if salt.is_none_or(|s| s == h.salt) && h.lsn > expected_lsn {
                    return Some((p as u64, h.lsn));
                }
            }
        }
        p += 1;
    }
    None
}

/// The chain's progress through the segment files of a scan.
struct ChainWalk {
    cursor: ChainCursor,
    open: bool,
    started: bool,
    prev_seq: Option<u64>,
}

/// What the headers of a directory's segments say before any record is
/// read: the largest write any journal made into them, and a truncation
/// that may not have finished.
struct HeaderFacts {
    largest_write_bytes: usize,
    pending_cut: Option<PendingCut>,
    largest_segment_size: Option<u64>,
    /// The largest segment size a valid header states for its own file.
    largest_file: Option<u64>,
}

/// The largest segment size of the journal in `dir`, from its segment
/// headers alone (no lock, no record read): the size they record, or the
/// largest segment's if that is larger, as an open keeps it (the bound of
/// its records). `None` when no segment has a valid header.
pub fn largest_segment_size(vfs: &dyn Vfs, dir: &Path) -> Result<Option<u64>, JournalError> {
    let facts = header_facts(vfs, &list_segments(vfs, dir)?, 0)?;
    Ok(facts.largest_segment_size.max(facts.largest_file))
}

/// Scan every segment in `dir`. How far past the chain's end a crash can
/// leave half-written bytes (writes in flight × the largest write, or a
/// chunk of zeros written by `truncate_after`) comes from the largest write
/// size any segment header states, or `max_write_bytes` if larger: the
/// journal that crashed may have written bigger batches than this opener.
/// Whether damage is a torn write or corruption does not depend on it: see
/// [`Scan::valid_after_damage`].
pub fn scan(vfs: &dyn Vfs, dir: &Path, max_write_bytes: usize) -> Result<Scan, JournalError> {
    scan_at(vfs, dir, max_write_bytes, None)
}

/// Where a chain resumes past damage: a valid record, the first the
/// resumed chain holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Resume {
    seq: u64,
    pos: u64,
}

/// Records recovery went past because the opener does not need them (see
/// [`JournalOptions::needed_from`](super::JournalOptions::needed_from)):
/// lost or damaged, and reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The first and last LSN skipped (inclusive). The first is 0 when it
    /// is not known (a damaged segment header below the chain).
    pub lsns: (Lsn, Lsn),
    /// Where the chain stopped: segment and byte offset.
    pub seq: u64,
    /// Byte offset of the damage in that segment.
    pub pos: u64,
    /// What was found there.
    pub reason: String,
}

/// [`scan`] for an opener that needs only the records from `needed_from`
/// on (a store whose data file holds everything before: its checkpoint).
/// Damage confined to records below `needed_from` does not end the
/// journal: the chain resumes at the first valid record past the damage
/// with an LSN up to `needed_from` (the first record past the damage that
/// the opener may need), and the records skipped are listed in
/// [`Scan::skipped`] — lost, but not needed. When no such record follows,
/// every needed record is missing because none was written: the journal
/// goes on at `needed_from`. Damage to a needed record is judged as
/// [`scan`] judges it.
pub fn scan_needing(
    vfs: &dyn Vfs,
    dir: &Path,
    max_write_bytes: usize,
    needed_from: Lsn,
) -> Result<Scan, JournalError> {
    let mut out = scan(vfs, dir, max_write_bytes)?;
    let mut skipped = Vec::new();
    // Each round resumes past a later record: bounded by the records.
    loop {
        let first_needed_missing = out.missing_lsn();
        if let (Some(seq), true) = (
            out.damaged_before_chain,
            out.first_lsn
                .or(out.base_lsn)
                .is_some_and(|f| f <= needed_from),
        ) {
            skipped.push(Skipped {
                lsns: (0, out.first_lsn.or(out.base_lsn).unwrap_or(1) - 1),
                seq,
                pos: 0,
                reason: "segment header damaged below the start of the chain".into(),
            });
            out.damaged_before_chain = None;
        }
        let (Some(n), Some((seq, pos, reason))) = (first_needed_missing, out.stop.clone()) else {
            break;
        };
        if n >= needed_from {
            break;
        }
        let resume = find_resume(vfs, &out, (seq, pos), n, needed_from)?;
        let last = resume.map_or(needed_from, |(_, lsn)| lsn) - 1;
        skipped.push(Skipped {
            lsns: (n, last),
            seq,
            pos,
            reason: reason.to_string(),
        });
        let Some((at, _)) = resume else {
            // No record the opener may need lies past the damage: unless a
            // record says a needed one was durable (then it was destroyed
            // too, and that is refused), the journal goes on at
            // `needed_from`.
            out.valid_after_damage = out
                .valid_after_damage
                .filter(|e| e.durable_lsn >= needed_from);
            break;
        };
        out = scan_at(vfs, dir, max_write_bytes, Some(at))?;
    }
    out.skipped = skipped;
    Ok(out)
}

/// The first valid record after `(seq, pos)` in file order whose LSN lies
/// in `(missing, needed_from]`: where a chain can resume.
fn find_resume(
    vfs: &dyn Vfs,
    found: &Scan,
    (seq, pos): (u64, u64),
    missing: Lsn,
    needed_from: Lsn,
) -> Result<Option<(Resume, Lsn)>, JournalError> {
    for seg in found.segments.iter().filter(|s| s.seq >= seq) {
        let bytes = read_segment(vfs, &seg.path)?;
        let from = if seg.seq == seq {
            pos as usize + 1
        } else {
            SEGMENT_HEADER_BYTES
        };
        let hit =
            valid_records(&bytes, seg.seq, from).find(|e| e.lsn > missing && e.lsn <= needed_from);
        if let Some(e) = hit {
            let at = Resume {
                seq: e.seq,
                pos: e.pos,
            };
            return Ok(Some((at, e.lsn)));
        }
    }
    Ok(None)
}

/// [`scan`], with the chain resuming at `resume` if given (segments below
/// it are outside the chain, their damage not counted against it).
fn scan_at(
    vfs: &dyn Vfs,
    dir: &Path,
    max_write_bytes: usize,
    resume: Option<Resume>,
) -> Result<Scan, JournalError> {
    let files = list_segments(vfs, dir)?;
    let facts = header_facts(vfs, &files, max_write_bytes)?;
    let tolerated_damage_bytes = super::tolerated_damage_bytes(facts.largest_write_bytes);
    let mut out = Scan::empty(tolerated_damage_bytes, list_set_aside(vfs, dir)?);
    out.pending_cut = facts.pending_cut;
    out.largest_segment_size = facts.largest_segment_size;
    let mut chain = ChainWalk::new();
    let mut bad_before_chain = None;
    let mut claims = Claims::default();
    for (seq, path) in files {
        let bytes = read_segment_from_disk(vfs, &path)?;
        let header = match SegmentHeader::decode(&bytes) {
            // Renamed for recycling but its header not yet rewritten.
            Ok(h) if h.seq != seq => Err(HeaderError::SeqMismatch(h.seq)),
            other => other,
        };
        let mut seg = SegmentScan {
            seq,
            path,
            header,
            file_len: bytes.len() as u64,
            records: Vec::new(),
            end_pos: 0,
            stop: None,
            in_chain: false,
        };
        // Where records outside the chain may lie in this file.
        let mut outside_from = SEGMENT_HEADER_BYTES as u64;
        let below_resume = resume.is_some_and(|r| seq < r.seq);
        let start = match resume {
            Some(r) if r.seq == seq => r.pos as usize,
            _ => 0,
        };
        match header {
            // Below where the chain resumes: records the opener does not
            // need (so its damage — a wrong length too — is not counted).
            _ if below_resume => {}
            // A segment being prepared or recycled: not part of the chain,
            // and it ends the chain if the chain was waiting for it.
            Err(_) if chain.started => chain.open = false,
            Err(_) => {
                bad_before_chain.get_or_insert(seq);
            }
            Ok(h) => {
                check_store_id(&mut out, &seg.path, h.store_id)?;
                if bytes.len() as u64 != h.segment_size {
                    out.wrong_length
                        .get_or_insert((seq, bytes.len() as u64, h.segment_size));
                }
                if chain.prev_seq.is_some_and(|p| p + 1 != seq) {
                    // A segment is missing: the chain cannot go on.
                    chain.open = false;
                }
                if chain.open {
                    extend_chain(&mut out, &mut chain, &mut seg, &bytes, (h, start));
                    if seg.in_chain {
                        outside_from = seg.end_pos;
                    }
                }
            }
        }
        if !seg.in_chain {
            leftover_after_chain(&mut out, &chain, &seg, &bytes);
        }
        claims.look(&bytes, seq, outside_from, out.pending_cut);
        out.segments.push(seg);
    }
    if chain.started {
        out.damaged_before_chain = bad_before_chain;
    }
    out.last_lsn = chain.cursor.expected_lsn.map(|e| e - 1);
    out.last_salt = chain.cursor.salt;
    // The first LSN the chain lacks: after its last record, or where an
    // empty chain's numbering goes on.
    let missing = chain.cursor.expected_lsn.or(out.base_lsn).unwrap_or(1);
    if chain.started {
        out.valid_after_damage = claims.best.filter(|e| e.durable_lsn >= missing);
    }
    Ok(out)
}

/// Read every segment's header: the largest `max_write_bytes` any states
/// (and `at_least`: a crash of whichever opener wrote them can have left
/// that much torn per write in flight), the truncation a header marks as
/// not finished, if any, and the largest segment size the headers'
/// extensions record.
fn header_facts(
    vfs: &dyn Vfs,
    segments: &[(u64, PathBuf)],
    at_least: usize,
) -> Result<HeaderFacts, JournalError> {
    let mut facts = HeaderFacts {
        largest_write_bytes: at_least,
        pending_cut: None,
        largest_segment_size: None,
        largest_file: None,
    };
    for (seq, path) in segments {
        let file = open_for_read(vfs, path)?;
        let mut head = [0u8; SEGMENT_HEADER_BLOCK_BYTES];
        let n = file.read_at(&mut head, 0)?;
        let header = SegmentHeader::decode(&head[..n]);
        if let Err(HeaderError::UnsupportedVersion(version)) = header {
            // Refused before anything is read as damage: an open would
            // otherwise recycle what it cannot read.
            return Err(JournalError::UnsupportedVersion {
                path: path.clone(),
                version,
            });
        }
        if let Ok(h) = header {
            facts.largest_write_bytes = facts.largest_write_bytes.max(h.max_write_bytes as usize);
            facts.largest_file = facts.largest_file.max(Some(h.segment_size));
            if let Some(largest) = h.decode_largest(&head[..n]) {
                facts.largest_segment_size = facts.largest_segment_size.max(Some(largest));
            }
            if h.cut_from != 0 && h.seq == *seq {
                // One truncation runs at a time, and each clears its mark
                // before the journal goes on: at most one is pending. Were
                // there two, the lower cut voids more.
                let cut = PendingCut {
                    seq: *seq,
                    cut_from: h.cut_from,
                };
                facts.pending_cut = Some(match facts.pending_cut {
                    Some(p) if p.cut_from <= cut.cut_from => p,
                    _ => cut,
                });
            }
        }
    }
    Ok(facts)
}

impl Scan {
    /// A scan that has found nothing yet.
    fn empty(tolerated_damage_bytes: u64, set_aside: Vec<PathBuf>) -> Scan {
        Scan {
            segments: Vec::new(),
            store_id: None,
            first_lsn: None,
            last_lsn: None,
            last_salt: None,
            stop: None,
            valid_after_damage: None,
            damaged_before_chain: None,
            wrong_length: None,
            base_lsn: None,
            tolerated_damage_bytes,
            set_aside,
            leftover_after_chain: None,
            largest_segment_size: None,
            pending_cut: None,
            skipped: Vec::new(),
        }
    }

    /// The first LSN the chain lacks: after its last record, or where an
    /// empty chain's numbering goes on (None when no chain started).
    pub fn missing_lsn(&self) -> Option<Lsn> {
        let started = self.segments.iter().any(|s| s.in_chain);
        started.then(|| {
            self.last_lsn
                .map_or_else(|| self.base_lsn.unwrap_or(1), |l| l + 1)
        })
    }
}

impl ChainWalk {
    /// Before the first segment of the chain.
    fn new() -> ChainWalk {
        ChainWalk {
            cursor: ChainCursor {
                expected_lsn: None,
                salt: None,
            },
            open: true,
            started: false,
            prev_seq: None,
        }
    }
}

/// The valid record outside the chain that claims the most durable, of
/// those whose claim counts (see [`PendingCut`]).
#[derive(Default)]
struct Claims {
    best: Option<Evidence>,
}

impl Claims {
    /// Look at every valid record of segment `seq` in `bytes[from..]`.
    fn look(&mut self, bytes: &[u8], seq: u64, from: u64, cut: Option<PendingCut>) {
        for e in valid_records(bytes, seq, from as usize) {
            let void = cut.is_some_and(|c| seq >= c.seq && e.lsn >= c.cut_from);
            if !void && self.best.is_none_or(|b| e.durable_lsn > b.durable_lsn) {
                self.best = Some(e);
            }
        }
    }
}

/// Every record of segment `seq` that decodes in `bytes[from..]` (LSN 0,
/// which no record has, excepted), in file order: found byte by byte (a
/// decoded record is skipped whole: its payload may hold anything), so
/// damage anywhere does not hide what follows it.
pub fn valid_records(bytes: &[u8], seq: u64, from: usize) -> impl Iterator<Item = Evidence> + '_ {
    let seq_bytes = seq.to_le_bytes();
    let mut p = from;
    std::iter::from_fn(move || {
        while p + RECORD_HEADER_BYTES <= bytes.len() {
            // Checking the segment sequence first makes the search cheap.
            if bytes[p + RH_SEQ..p + RH_SEQ + 8] == seq_bytes {
                if let Some((h, _)) = RecordHeader::decode(&bytes[p..])
                    .ok()
                    .filter(|(h, _)| h.lsn != 0)
                {
                    let at = p;
                    p += RECORD_HEADER_BYTES + h.len as usize;
                    return Some(Evidence {
                        seq,
                        pos: at as u64,
                        lsn: h.lsn,
                        durable_lsn: h.durable_lsn,
                        salt: h.salt,
                        flags: h.flags,
                        len: h.len,
                    });
                }
            }
            p += 1;
        }
        None
    })
}

/// Segment `seg` (its `bytes`) lies past the chain's end: note a valid
/// record of the chain's salt in the segment right after the chain's last
/// (a leftover of a torn first write into it).
fn leftover_after_chain(out: &mut Scan, chain: &ChainWalk, seg: &SegmentScan, bytes: &[u8]) {
    let seq = seg.seq;
    let block = seg.header.map_or(0, |h| h.block_size as usize);
    let next_to_chain = chain.prev_seq.is_some_and(|p| p + 1 == seq);
    if let (true, Some(salt), Some(exp)) = (
        next_to_chain && block > 0,
        chain.cursor.salt,
        chain.cursor.expected_lsn,
    ) {
        if find_valid_after(bytes, seq, block, Some(salt), exp - 1).is_some() {
            out.leftover_after_chain = Some(seq);
        }
    }
}

fn check_store_id(out: &mut Scan, path: &Path, found: u64) -> Result<(), JournalError> {
    match out.store_id {
        None => out.store_id = Some(found),
        Some(expected) if expected != found => {
            return Err(JournalError::ForeignSegment {
                path: path.to_path_buf(),
                expected,
                found,
            })
        }
        Some(_) => {}
    }
    Ok(())
}

/// Walk segment `seg` as the chain's next segment.
fn extend_chain(
    out: &mut Scan,
    chain: &mut ChainWalk,
    seg: &mut SegmentScan,
    bytes: &[u8],
    (h, start): (SegmentHeader, usize),
) {
    let seq = seg.seq;
    let before = chain.cursor;
    let block = h.block_size as usize;
    let (records, end, mut stop) =
        walk_segment_from(bytes, seq, block, start.max(block), &mut chain.cursor);
    if stop == StopReason::SegmentEnd && bytes.len() as u64 != h.segment_size {
        // Segment files never change length once their header is written:
        // this one was cut short (or extended) behind the journal's back.
        stop = StopReason::Damaged(RecordError::BadLength);
    }
    if chain.started && records.is_empty() {
        // The next segment does not continue the chain: the chain ended in
        // the previous segment — unless that one ended cleanly and this
        // one's first record is damaged: then the chain stops here, at a
        // write torn (or corrupted) right after a rollover.
        chain.open = false;
        chain.cursor = before;
        let clean_before = matches!(
            out.stop,
            Some((_, _, StopReason::CleanEnd | StopReason::SegmentEnd))
        );
        if clean_before {
            if let StopReason::Damaged(_) = stop {
                out.stop = Some((seq, end, stop.clone()));
                seg.stop = Some(stop);
                seg.end_pos = end;
            }
        }
        return;
    }
    // Here the chain has started already, or this is its first segment.
    if !chain.started {
        out.base_lsn = Some(h.base_lsn);
    }
    chain.started = true;
    if records.is_empty() {
        // The chain's first segment holds no record: nothing can follow it
        // (a record always fits in an empty segment, so no rollover leaves
        // one empty), and without a record there is no LSN or salt for the
        // next segment's records to continue.
        chain.open = false;
    }
    seg.in_chain = true;
    seg.end_pos = end;
    if let Some(first) = records.first() {
        out.first_lsn.get_or_insert(first.lsn);
    }
    seg.records = records;
    out.stop = Some((seq, end, stop.clone()));
    seg.stop = Some(stop);
    chain.prev_seq = Some(seq);
}
