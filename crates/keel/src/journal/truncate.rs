//! `truncate_after`: durably discarding the tail of the journal (a
//! replicated log dropping a conflicting suffix). The protocol is in
//! `docs/format.md`, "`truncate_after(lsn)`".

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::format::SegmentHeader;
use super::leader::wait_batch;
use super::scan::{self, ChainCursor};
use super::segments::{ReadySegment, SegmentSpec};
use super::writer::{install_room, install_slab, new_salt, poison_all, retire, Shared, State};
use super::{JournalError, Lsn};
use crate::io::{AlignedBuf, VfsFile};

/// Durably discard every record after `lsn`.
pub(super) fn truncate_after(shared: &Shared, lsn: Lsn) -> Result<(), JournalError> {
    // Close the open batch and let everything queued reach the disk, until
    // the journal is quiet with no open batch: appends then wait on the
    // mutex while the tail is rewritten.
    let mut st = loop {
        let mut st = shared.lock();
        if let Some(e) = &st.poisoned {
            return Err(JournalError::Poisoned(e.clone()));
        }
        let Some(slab) = shared.open.load_full() else {
            // A rollover waits for a spare segment.
            let _unused = shared.spare_cv.wait(st).unwrap_or_else(|p| p.into_inner());
            continue;
        };
        let (records, len) = slab.seal();
        retire(shared, &mut st, &slab, records, len);
        shared.open.store(None);
        if records == 0 && st.queue.is_empty() && st.flights.is_empty() {
            break st;
        }
        let target =
            (st.queue.back().map(|b| b.slab.id)).or_else(|| st.flights.back().map(|f| f.id()));
        let st = install_room(shared, st, 0)?;
        drop(st);
        match target {
            Some(id) => wait_batch(shared, id)?,
            None => std::thread::yield_now(),
        }
    };
    match truncate_quiet(shared, &mut st, lsn) {
        // A failed read, write or reopen leaves the files in doubt: stop.
        Err(JournalError::Io(e)) => Err(JournalError::Poisoned(poison_all(shared, st, e))),
        result => {
            install_slab(shared, &mut st, 0);
            drop(st);
            shared.spare_cv.notify_all();
            result
        }
    }
}

/// The truncation itself, with the journal quiet and locked.
fn truncate_quiet(shared: &Shared, st: &mut State, lsn: Lsn) -> Result<(), JournalError> {
    if lsn + 1 >= st.next_lsn {
        return Ok(());
    }
    let (idx, cut, bytes) = find_cut(shared, st, lsn)?;
    let seq = st.segments[idx].seq;
    let block = shared.spec.block_size;
    let cut_block = cut / block as u64 * block as u64;
    let tail = bytes[cut_block as usize..cut as usize].to_vec();
    // The mark first, durably: until it is cleared, records past the cut
    // (which the zeroing below removes, last block first) prove nothing
    // about the chain that goes on from the cut — a crash part-way leaves
    // some of them, and their `durable_lsn` speaks of the old tail. When
    // the cut empties this segment the same header says where numbering
    // goes on (`base_lsn`): once the segments below it are recycled it may
    // be the chain's first, with no record to say it; written before any
    // record is zeroed, so that a crash at any point leaves either records
    // or the base.
    let base = if st.segments[idx].first_lsn == Some(lsn + 1) {
        lsn + 1
    } else {
        SegmentHeader::decode(&bytes).map_or(lsn + 1, |h| h.base_lsn)
    };
    let size = st.segments[idx].size;
    let file = shared.spec.open(shared.vfs.as_ref(), seq, size)?.file;
    shared
        .spec
        .write_header(file.as_ref(), (seq, size), base, lsn + 1)?;
    // Zero from the cut to the end of what was written, in this segment and
    // every later one — backwards, from the last block written to the cut.
    // A crash part-way then leaves an intact prefix of the old chain followed
    // only by zeros: never a stale record beyond a zeroed gap, where a later
    // epoch's appends could run into it and take it as their continuation.
    zero_from_cut(shared, st, idx, cut_block, &tail)?;
    shared
        .spec
        .write_header(file.as_ref(), (seq, size), base, 0)?;
    // Later segments become spares again (their headers are intact). Open
    // every file before changing any state: a failure poisons the journal,
    // which must still be consistent.
    let (spares, active) = reopen_from(shared, st, idx)?;
    go_on_from_cut(st, idx, lsn, cut, tail, spares, active);
    shared.durable_lsn.store(lsn, Ordering::Release);
    if let Some(m) = shared.durable_mirror.get() {
        m.store(lsn);
    }
    Ok(())
}

/// Where record `lsn + 1` starts: the index of its segment in
/// `st.segments`, its byte offset there, and the segment's bytes. Refuses
/// an `lsn` below the journal's first record.
fn find_cut(shared: &Shared, st: &State, lsn: Lsn) -> Result<(usize, u64, Vec<u8>), JournalError> {
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
    let bytes = scan::read_segment(shared.vfs.as_ref(), &st.segments[idx].path)?;
    let mut cursor = ChainCursor {
        expected_lsn: st.segments[idx].first_lsn,
        salt: None,
    };
    let (records, _, _) = scan::walk_segment_from(
        &bytes,
        st.segments[idx].seq,
        shared.spec.block_size,
        st.segments[idx].first_pos as usize,
        &mut cursor,
    );
    let cut = records
        .iter()
        .find(|r| r.lsn == lsn + 1)
        .map(|r| r.pos)
        .expect("record lsn + 1");
    Ok((idx, cut, bytes))
}

/// The writer's state after the cut at `cut` in segment `idx`: later
/// segments are `spares` (before the old spares), appends go on at the
/// cut (`tail`: the cut block's bytes before it) with LSN `lsn + 1`, in a
/// new epoch (a new salt).
fn go_on_from_cut(
    st: &mut State,
    idx: usize,
    lsn: Lsn,
    cut: u64,
    tail: Vec<u8>,
    mut spares: VecDeque<ReadySegment>,
    active: ReadySegment,
) {
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
    st.padded_to_block = false;
    st.next_lsn = lsn + 1;
    st.salt = new_salt(st.salt);
    st.epoch_start_pending = true;
}

/// Zero segment `idx` from `cut_block` (writing `tail`, the cut block's
/// bytes before the cut, first) and every later segment from its first
/// block, to the end of what may have been written, last segment first.
fn zero_from_cut(
    shared: &Shared,
    st: &State,
    idx: usize,
    cut_block: u64,
    tail: &[u8],
) -> Result<(), JournalError> {
    let block = shared.spec.block_size as u64;
    for (i, seg) in st.segments[idx..].iter().enumerate().rev() {
        let file = if seg.seq == st.active.seq {
            Arc::clone(&st.active.file)
        } else {
            shared
                .spec
                .open(shared.vfs.as_ref(), seg.seq, seg.size)?
                .file
        };
        let start = if i == 0 { cut_block } else { block };
        // In the active segment, past the append position too: a torn
        // write of an earlier life may have left records there, of the
        // epoch that the cut chain now ends in.
        let end = if seg.seq == st.active.seq {
            let reach = shared.spec.torn_reach_bytes;
            (st.pos + reach).min(seg.size)
        } else {
            seg.size
        };
        let end = end.div_ceil(block) * block;
        zero_durably(
            &shared.spec,
            file.as_ref(),
            start,
            end,
            if i == 0 { tail } else { &[] },
        )?;
    }
    Ok(())
}

/// The segments after segment `idx`, opened as spares, and segment `idx`
/// opened to become the active one.
fn reopen_from(
    shared: &Shared,
    st: &State,
    idx: usize,
) -> Result<(VecDeque<ReadySegment>, ReadySegment), JournalError> {
    let mut spares = VecDeque::new();
    for seg in &st.segments[idx + 1..] {
        if seg.seq == st.active.seq {
            spares.push_back(st.active.clone());
        } else {
            spares.push_back(shared.spec.open(shared.vfs.as_ref(), seg.seq, seg.size)?);
        }
    }
    let target = &st.segments[idx];
    let active = shared
        .spec
        .open(shared.vfs.as_ref(), target.seq, target.size)?;
    Ok((spares, active))
}

/// Durably write `prefix` then zeros over `[start, end)` of `file`, in
/// chunks from the end backwards (the chunk holding `prefix` last).
pub(super) fn zero_durably(
    spec: &SegmentSpec,
    file: &dyn VfsFile,
    start: u64,
    end: u64,
    prefix: &[u8],
) -> Result<(), JournalError> {
    let block = spec.block_size;
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
        spec.method.write_durably(file, &buf[..n], off)?;
    }
    Ok(())
}
