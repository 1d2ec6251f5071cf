//! Opening a journal: lock, choose the write method, recover the chain of
//! records, make the recovered tail durable, and start the background
//! threads.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::scan::{self, SegmentScan};
use super::segments::{FreeFile, ReadySegment, SegmentSpec, Source, REPLACEMENT_SUFFIX};
use super::writer::{self, SegMeta, Shared, State};
use super::{Journal, JournalError, JournalOptions, Lsn, RecoveryMode, RecoveryReport};
use crate::io::{IoError, OpenMode, OpenOptions, SyncKind, Vfs, WriteMethod};

/// The lock file inside a journal directory.
pub const LOCK_FILE: &str = "LOCK";

pub(super) fn open(
    vfs: Arc<dyn Vfs>,
    dir: &Path,
    mut options: JournalOptions,
) -> Result<Journal, JournalError> {
    options.validate()?;
    crate::io::create_dir_all_durable(vfs.as_ref(), dir)?;
    let lock = vfs.lock(&dir.join(LOCK_FILE)).map_err(|e| match e {
        IoError::Locked { .. } => JournalError::Locked(dir.to_path_buf()),
        e => e.into(),
    })?;
    let (method, fallback) = method_for(vfs.as_ref(), dir, &mut options)?;
    let mut found = scan::scan_needing(
        vfs.as_ref(),
        dir,
        options.max_write_bytes,
        options.needed_from,
    )?;
    adopt_existing_geometry(&found, &mut options)?;
    let set_aside = match options.recovery_mode {
        RecoveryMode::RefuseCorruption => {
            refuse_corruption(&found)?;
            Vec::new()
        }
        RecoveryMode::StopAtFirstBad => set_aside_damaged(vfs.as_ref(), dir, &mut found)?,
    };
    let spec = SegmentSpec {
        dir: dir.to_path_buf(),
        store_id: found.store_id.unwrap_or_else(rand::random),
        block_size: options.block_size_bytes,
        largest_segment_size: options.segment_size_bytes,
        max_write_bytes: options.max_write_bytes,
        torn_reach_bytes: found.tolerated_damage_bytes,
        method,
    };
    remove_unfinished_replacements(vfs.as_ref(), dir)?;
    let (after_chain, next_lsn) = next_lsns(&found, options.needed_from);
    let first_size = options.first_segment_bytes();
    let (active, pos, mut segments) =
        recover_chain(vfs.as_ref(), &spec, &found, (next_lsn, first_size))?;
    let mut restarted = Vec::new();
    if next_lsn > after_chain && found.last_lsn.is_some() {
        // The chain's records are all below what the opener needs: the
        // journal starts afresh at the append position, as the next open's
        // scan will see it (its records there resume the chain), and the
        // older segments are free.
        restarted = segments
            .drain(..)
            .filter(|s| s.seq != active.seq)
            .map(|s| FreeFile {
                path: s.path,
                size: s.size,
            })
            .collect();
        segments.push(SegMeta {
            seq: active.seq,
            path: active.path.clone(),
            first_lsn: None,
            last_lsn: None,
            first_pos: pos,
            size: active.size,
        });
    }
    let block = options.block_size_bytes as u64;
    let tail_start = pos / block * block;
    let mut tail = vec![0u8; (pos - tail_start) as usize];
    scan::open_for_read(vfs.as_ref(), &active.path)?.read_exact_at(&mut tail, tail_start)?;
    let (spares, mut free) = classify_leftovers(vfs.as_ref(), &spec, &found.segments, &active)?;
    free.extend(restarted);
    zero_leftovers_after_chain(&spec, &found, &spares)?;
    finish_pending_cut(
        vfs.as_ref(),
        &spec,
        &found,
        (&active, tail_start, &tail),
        &spares,
    )?;
    let salt = writer::new_salt(found.last_salt.unwrap_or(0));
    let report = RecoveryReport {
        first_lsn: found.first_lsn,
        last_lsn: found.last_lsn,
        stop: found.stop.clone(),
        segments: segments.len(),
        method,
        fallback,
        set_aside,
        skipped: found.skipped.clone(),
    };
    let mut state = State::new((next_lsn, salt), active, pos, tail, segments, first_size);
    state.spares = spares;
    state.free = free;
    prepare_spares(
        vfs.as_ref(),
        &spec,
        &mut state,
        options.spare_segments,
        next_lsn,
    )?;
    let shared = Arc::new(Shared::new(vfs, spec, options, state, lock));
    start_threads(shared, dir, report)
}

/// Open the journal in `dir` for reading only: recovery's scan and its
/// verdict (`options.recovery_mode`, `options.needed_from`), and nothing
/// else — no file is created, synced, zeroed, renamed, recycled or removed,
/// and no thread is started. `read_from` returns the recovered records;
/// every append fails (the journal is born stopped, with an error that
/// says it is read-only). The directory's lock is taken, as by a writer,
/// when `take_lock` (`Journal::open_live` reads beside the writer).
pub(super) fn open_read_only(
    vfs: Arc<dyn Vfs>,
    dir: &Path,
    mut options: JournalOptions,
    take_lock: bool,
) -> Result<Journal, JournalError> {
    options.validate()?;
    if !vfs.exists(dir)? {
        return Err(JournalError::NotAJournal(dir.to_path_buf()));
    }
    let lock: Box<dyn crate::io::LockGuard> = match take_lock {
        true => vfs.lock(&dir.join(LOCK_FILE)).map_err(|e| match e {
            IoError::Locked { .. } => JournalError::Locked(dir.to_path_buf()),
            e => e.into(),
        })?,
        false => Box::new(crate::io::NotLocked),
    };
    let found = scan::scan_needing(
        vfs.as_ref(),
        dir,
        options.max_write_bytes,
        options.needed_from,
    )?;
    if found.segments.is_empty() {
        return Err(JournalError::NotAJournal(dir.to_path_buf()));
    }
    adopt_existing_geometry(&found, &mut options)?;
    if options.recovery_mode == RecoveryMode::RefuseCorruption {
        refuse_corruption(&found)?;
    }
    let method = WriteMethod::Buffered;
    options.method = Some(method);
    let spec = SegmentSpec {
        dir: dir.to_path_buf(),
        store_id: found.store_id.unwrap_or(0),
        block_size: options.block_size_bytes,
        largest_segment_size: options.segment_size_bytes,
        max_write_bytes: options.max_write_bytes,
        torn_reach_bytes: found.tolerated_damage_bytes,
        method,
    };
    let (_, next_lsn) = next_lsns(&found, options.needed_from);
    let chain: Vec<&SegmentScan> = found.segments.iter().filter(|s| s.in_chain).collect();
    let last = chain
        .last()
        .copied()
        .or(found.segments.last())
        .expect("a segment");
    let file = vfs.open(
        &last.path,
        OpenOptions::new(OpenMode::Buffered).read_only(true),
    )?;
    let active = ReadySegment {
        seq: last.seq,
        path: last.path.clone(),
        file,
        size: last.file_len,
    };
    let segments = chain_metas(&chain, spec.block_size);
    let report = RecoveryReport {
        first_lsn: found.first_lsn,
        last_lsn: found.last_lsn,
        stop: found.stop.clone(),
        segments: chain.len(),
        method,
        fallback: None,
        set_aside: Vec::new(),
        skipped: found.skipped.clone(),
    };
    let pos = last.end_pos.max(spec.block_size as u64);
    let block = spec.block_size as u64;
    let mut tail = vec![0u8; (pos % block) as usize];
    active.file.read_exact_at(&mut tail, pos / block * block)?;
    let first_size = options.first_segment_bytes();
    let state = State::new((next_lsn, 0), active, pos, tail, segments, first_size);
    let shared = Arc::new(Shared::new(vfs, spec, options, state, lock));
    let why = std::io::Error::from_raw_os_error(rustix::io::Errno::ROFS.raw_os_error());
    writer::stop_read_only(
        &shared,
        IoError::os("append to a journal opened read-only", dir, why),
    );
    Ok(Journal {
        shared,
        preparer: None,
        flusher: None,
        report,
    })
}

/// Remove what a crash left of a replacement of the active segment made
/// under a temporary name (`SegmentSpec::replace`): never renamed, it was
/// never a segment. Not synced: one that comes back goes at the next open.
fn remove_unfinished_replacements(vfs: &dyn Vfs, dir: &Path) -> Result<(), JournalError> {
    for name in vfs.read_dir(dir)? {
        let unfinished = name
            .strip_suffix(REPLACEMENT_SUFFIX)
            .is_some_and(|seg| super::format::parse_segment_file_name(seg).is_some());
        if unfinished {
            vfs.remove_file(&dir.join(name))?;
        }
    }
    Ok(())
}

/// The LSN after the chain's last record (or, when the chain holds none —
/// emptied by `truncate_after` — its first segment's base), and the next
/// LSN the journal gives: at least `needed_from`, since an opener that
/// needs nothing below it gets LSNs from there on even if no record
/// reached it (the records between were skipped as damaged:
/// `Scan::skipped`).
fn next_lsns(found: &scan::Scan, needed_from: Lsn) -> (Lsn, Lsn) {
    let after_chain = found
        .last_lsn
        .map_or_else(|| found.base_lsn.unwrap_or(1), |l| l + 1);
    (after_chain, after_chain.max(needed_from))
}

/// The writer's view of the recovered chain's segments.
fn chain_metas(chain: &[&SegmentScan], block_size: usize) -> Vec<SegMeta> {
    chain
        .iter()
        .map(|s| SegMeta {
            seq: s.seq,
            path: s.path.clone(),
            first_lsn: s.records.first().map(|r| r.lsn),
            last_lsn: s.records.last().map(|r| r.lsn),
            first_pos: s.records.first().map_or(block_size as u64, |r| r.pos),
            size: s.file_len,
        })
        .collect()
}

/// The write method to use (`options.method`, or the fastest this file
/// system takes), set in `options`, and whether it is a fallback; refuses
/// a block size under the device's direct-I/O alignment.
fn method_for(
    vfs: &dyn Vfs,
    dir: &Path,
    options: &mut JournalOptions,
) -> Result<(WriteMethod, Option<String>), JournalError> {
    let (method, fallback) = choose_method(vfs, dir, options.method)?;
    options.method = Some(method);
    if method.is_direct() && vfs.block_size(dir)? > options.block_size_bytes {
        return Err(JournalError::BadOptions(format!(
            "block size {} is smaller than the device's direct-I/O alignment {}",
            options.block_size_bytes,
            vfs.block_size(dir)?
        )));
    }
    Ok((method, fallback))
}

/// Prepare spare segments (reusing free ones of the first size or larger
/// first) until `state` has `count`.
fn prepare_spares(
    vfs: &dyn Vfs,
    spec: &SegmentSpec,
    state: &mut State,
    count: usize,
    next_lsn: Lsn,
) -> Result<(), JournalError> {
    while state.spares.len() < count {
        let seq = state.spares.back().map_or(state.active.seq, |s| s.seq) + 1;
        let source = Source::choose(&mut state.free, state.next_size);
        state
            .spares
            .push_back(spec.prepare(vfs, seq, &source, next_lsn)?);
    }
    Ok(())
}

/// The journal's two background threads: the segment preparer and the
/// flusher (callbacks, and batches started without a waiter).
fn start_threads(
    shared: Arc<Shared>,
    dir: &Path,
    report: RecoveryReport,
) -> Result<Journal, JournalError> {
    let spawn = |name: &str, f: fn(Arc<Shared>)| {
        let s = Arc::clone(&shared);
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || f(s))
            .map_err(|e| IoError::os("spawn thread", dir, e))
    };
    let preparer = spawn("keel-journal-prep", super::rollover::preparer_loop)?;
    let flusher = spawn("keel-journal-cb", writer::flusher_loop)?;
    Ok(Journal {
        shared,
        preparer: Some(preparer),
        flusher: Some(flusher),
        report,
    })
}

/// The active segment, the append position and the segments of the
/// recovered chain — made durable first: a new journal gets segment 1, of
/// `first_size` bytes; an existing chain has every segment synced.
fn recover_chain(
    vfs: &dyn Vfs,
    spec: &SegmentSpec,
    found: &scan::Scan,
    (next_lsn, first_size): (u64, u64),
) -> Result<(ReadySegment, u64, Vec<SegMeta>), JournalError> {
    let chain: Vec<&SegmentScan> = found.segments.iter().filter(|s| s.in_chain).collect();
    let Some(last) = chain.last() else {
        let seg = spec.create(vfs, 1, next_lsn, first_size)?;
        let meta = SegMeta {
            seq: 1,
            path: seg.path.clone(),
            first_lsn: None,
            last_lsn: None,
            first_pos: spec.block_size as u64,
            size: seg.size,
        };
        return Ok((seg, spec.block_size as u64, vec![meta]));
    };
    // After a process crash the tail may sit only in the page cache (not
    // yet written, or written by a torn direct write the crash left
    // pending): make every recovered byte durable before the first new
    // acknowledgement can depend on it. (Bytes of a write whose sync
    // failed were not read: the scan evicted clean pages first.)
    for seg in &chain {
        let f = vfs.open(&seg.path, OpenOptions::new(OpenMode::Buffered))?;
        f.sync(SyncKind::Data)?;
    }
    vfs.sync_dir(&spec.dir)?;
    let metas = chain_metas(&chain, spec.block_size);
    Ok((
        spec.open(vfs, last.seq, last.file_len)?,
        last.end_pos,
        metas,
    ))
}

/// Where a torn first write left records of the recovered epoch in the
/// segment after the chain (see `Scan::leftover_after_chain`): zero them,
/// within the reach of a torn write from its first block. A crash
/// meanwhile leaves the journal as it was; the next open does this again.
fn zero_leftovers_after_chain(
    spec: &SegmentSpec,
    found: &scan::Scan,
    spares: &VecDeque<ReadySegment>,
) -> Result<(), JournalError> {
    let Some(seq) = found.leftover_after_chain else {
        return Ok(());
    };
    if let Some(spare) = spares.iter().find(|s| s.seq == seq) {
        let block = spec.block_size as u64;
        let end = (block + spec.torn_reach_bytes).min(spare.size);
        super::truncate::zero_durably(spec, spare.file.as_ref(), block, end, &[])?;
    }
    Ok(())
}

/// A `truncate_after` that a crash interrupted left its mark (see
/// `Scan::pending_cut`) and perhaps records from before the cut past the
/// chain's end, in the active segment or the spares after it: zero them
/// all, durably, then clear the mark — from then on every record past the
/// chain's end is of the journal's own history again, and its durable LSN
/// counts as evidence. A crash meanwhile leaves the mark; the next open
/// does this again. (The active segment's last partial block keeps its
/// bytes before the append position.)
fn finish_pending_cut(
    vfs: &dyn Vfs,
    spec: &SegmentSpec,
    found: &scan::Scan,
    (active, tail_start, tail): (&ReadySegment, u64, &[u8]),
    spares: &VecDeque<ReadySegment>,
) -> Result<(), JournalError> {
    let Some(cut) = found.pending_cut else {
        return Ok(());
    };
    let block = spec.block_size as u64;
    super::truncate::zero_durably(spec, active.file.as_ref(), tail_start, active.size, tail)?;
    for spare in spares {
        super::truncate::zero_durably(spec, spare.file.as_ref(), block, spare.size, &[])?;
    }
    let marked = found
        .segments
        .iter()
        .find(|s| s.seq == cut.seq)
        .and_then(|s| s.header.ok().map(|h| (h, s.file_len)));
    if let (Some((h, size)), true) = (marked, vfs.exists(&spec.path(cut.seq))?) {
        let file = spec.open(vfs, cut.seq, size)?.file;
        spec.write_header(file.as_ref(), (cut.seq, size), h.base_lsn, 0)?;
    }
    Ok(())
}

/// `RecoveryMode::StopAtFirstBad` keeps the chain that starts above a
/// segment whose header is damaged; that segment would otherwise be
/// recycled like a released one, destroying the evidence of what was lost.
/// Rename it aside (`….seg.damaged`, no longer a segment name), durably,
/// and say so in the report. Returns the new names.
fn set_aside_damaged(
    vfs: &dyn Vfs,
    dir: &Path,
    found: &mut scan::Scan,
) -> Result<Vec<PathBuf>, JournalError> {
    let Some(first_chain) = found.segments.iter().find(|s| s.in_chain).map(|s| s.seq) else {
        return Ok(Vec::new());
    };
    let mut moved = Vec::new();
    for seg in &found.segments {
        if seg.seq < first_chain && seg.header.is_err() {
            let mut name = seg.path.clone().into_os_string();
            name.push(scan::SET_ASIDE_SUFFIX);
            let to = PathBuf::from(name);
            vfs.rename(&seg.path, &to)?;
            moved.push(to);
        }
    }
    if !moved.is_empty() {
        vfs.sync_dir(dir)?;
        found
            .segments
            .retain(|s| !(s.seq < first_chain && s.header.is_err()));
    }
    Ok(moved)
}

/// `RecoveryMode::RefuseCorruption`: fail if the scan found damage that a
/// crash cannot explain.
fn refuse_corruption(found: &scan::Scan) -> Result<(), JournalError> {
    if let (Some(e), Some((seq, pos, reason))) = (found.valid_after_damage, &found.stop) {
        // A chain that ends cleanly at a segment's end stopped because the
        // next segment could not go on: name that one when its header is
        // what is damaged.
        let next_header = found
            .segments
            .iter()
            .find(|s| s.seq == seq + 1 && !s.in_chain)
            .and_then(|s| s.header.err());
        let (seq, pos, reason) = match (reason, next_header) {
            (scan::StopReason::CleanEnd | scan::StopReason::SegmentEnd, Some(h)) => {
                (seq + 1, 0, format!("its header is not valid ({h})"))
            }
            _ => (*seq, *pos, reason.to_string()),
        };
        return Err(JournalError::Corrupt {
            seq,
            pos,
            reason: format!(
                "{reason}, but record {} (segment {}, byte {}) says every record up to {} was \
                 durable",
                e.lsn, e.seq, e.pos, e.durable_lsn
            ),
            later_lsn: e.lsn,
        });
    }
    if let Some(seq) = found.damaged_before_chain {
        return Err(JournalError::Corrupt {
            seq,
            pos: 0,
            reason: "segment header damaged below the start of the chain".into(),
            later_lsn: found.first_lsn.or(found.base_lsn).unwrap_or(0),
        });
    }
    if let Some((seq, len, size)) = found.wrong_length {
        return Err(JournalError::Corrupt {
            seq,
            pos: len,
            reason: format!("the file is {len} bytes but its header says {size}"),
            later_lsn: 0,
        });
    }
    Ok(())
}

/// The method to write with: the one asked for, or `odirect_dsync` unless
/// the file system refuses direct I/O, then `fdatasync`.
fn choose_method(
    vfs: &dyn Vfs,
    dir: &Path,
    asked: Option<WriteMethod>,
) -> Result<(WriteMethod, Option<String>), JournalError> {
    if let Some(m) = asked {
        return Ok((m, None));
    }
    let probe = dir.join(LOCK_FILE);
    // The lock file exists on a real file system; create it where locks
    // are not files (the simulated one).
    match vfs.open(&probe, OpenOptions::new(OpenMode::DirectDsync).create(true)) {
        Ok(_) => Ok((WriteMethod::OdirectDsync, None)),
        Err(e @ IoError::DirectUnsupported { .. }) => {
            Ok((WriteMethod::Fdatasync, Some(e.to_string())))
        }
        Err(e) => Err(e.into()),
    }
}

/// An existing journal keeps the block size it was made with, and its
/// largest segment size (which bounds its records: a store's values are
/// read with that limit): the one its headers record, or the largest
/// segment's if that is larger; for a journal whose headers do not record
/// one (written before they did), the largest segment's — every segment
/// of such a journal has the size it was made with.
fn adopt_existing_geometry(
    found: &scan::Scan,
    options: &mut JournalOptions,
) -> Result<(), JournalError> {
    let segments = &found.segments;
    if let Some(h) = segments.iter().find_map(|s| s.header.ok()) {
        if h.block_size as usize != options.block_size_bytes {
            let seg = segments.iter().find(|s| s.header.is_ok()).expect("segment");
            return Err(JournalError::BlockSizeMismatch {
                path: seg.path.clone(),
                expected: options.block_size_bytes,
                found: h.block_size as usize,
            });
        }
    }
    let largest_file = segments
        .iter()
        .filter_map(|s| s.header.ok())
        .map(|h| h.segment_size)
        .max();
    if let Some(size) = found.largest_segment_size.max(largest_file) {
        options.segment_size_bytes = size;
    }
    Ok(())
}

type Leftovers = (VecDeque<ReadySegment>, VecDeque<FreeFile>);

/// Segments after the active one with valid headers and consecutive
/// sequence numbers are spares, ready to use. Older files are recycled
/// later; other files beyond the active segment (half-prepared, or out of
/// sequence) are removed so that their names cannot collide with new
/// segments.
fn classify_leftovers(
    vfs: &dyn Vfs,
    spec: &SegmentSpec,
    segments: &[SegmentScan],
    active: &ReadySegment,
) -> Result<Leftovers, JournalError> {
    let mut spares = VecDeque::new();
    let mut free = VecDeque::new();
    let mut removed = false;
    let first_chain = segments
        .iter()
        .find(|s| s.in_chain)
        .map_or(active.seq, |s| s.seq);
    for seg in segments.iter().filter(|s| !s.in_chain) {
        let expected_next = spares.back().map_or(active.seq, |s: &ReadySegment| s.seq) + 1;
        let usable = seg
            .header
            .is_ok_and(|h| h.seq == seg.seq && h.segment_size == seg.file_len);
        // A file below the chain of a length no segment has is not one of
        // ours: it goes.
        let block = spec.block_size as u64;
        let recyclable = seg.file_len % block == 0 && seg.file_len >= 4 * block;
        if seg.seq == expected_next && usable {
            // Its header may be readable only from the page cache (a
            // process crash while it was written): make it durable before
            // records go in, or a power cut could blank it and cut the
            // chain in front of acknowledged records.
            let spare = spec.open(vfs, seg.seq, seg.file_len)?;
            spare.file.sync(SyncKind::Data)?;
            spares.push_back(spare);
        } else if seg.seq < first_chain && recyclable {
            free.push_back(FreeFile {
                path: seg.path.clone(),
                size: seg.file_len,
            });
        } else if seg.seq != active.seq {
            vfs.remove_file(&seg.path)?;
            removed = true;
        }
    }
    if removed {
        vfs.sync_dir(&spec.dir)?;
    }
    Ok((spares, free))
}
