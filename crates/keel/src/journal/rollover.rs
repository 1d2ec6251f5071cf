//! Rollover and the segments behind it: moving appends to the next
//! segment, making segments — ahead of need in the preparer thread, sized
//! by the write rate, or in the committing thread for a record too large
//! for the next one — and handing released segments to be recycled.

use std::sync::{Arc, MutexGuard};
use std::time::Instant;

use super::segments::{FreeFile, ReadySegment, Source};
use super::writer::{poison_all, SegMeta, Shared, State};
use super::{JournalError, Lsn};
use crate::io::IoError;

/// Switch appends to the next prepared segment, which must hold a record
/// of `need` bytes (with its header), waiting for the preparer only if it
/// has fallen behind. The open batch has been retired.
pub(super) fn roll_over<'a>(
    shared: &'a Shared,
    mut st: MutexGuard<'a, State>,
    need: usize,
) -> Result<MutexGuard<'a, State>, JournalError> {
    let block = shared.spec.block_size as u64;
    // The first segment with room for the record: a segment left empty
    // would end the chain (a chain goes on only into a segment whose first
    // record continues it).
    let fits = |s: &ReadySegment| block + need as u64 <= s.size;
    if !st.spares.front().is_some_and(fits) {
        st.stats.rollover_waits += 1;
    }
    loop {
        if let Some(e) = &st.poisoned {
            return Err(JournalError::Poisoned(e.clone()));
        }
        match st.spares.front() {
            Some(s) if fits(s) => break,
            Some(_) if !st.preparing => {
                st = replace_next_spare(shared, st, need)?;
                continue;
            }
            _ => {}
        }
        shared.spare_cv.notify_all();
        st = shared.spare_cv.wait(st).unwrap_or_else(|p| p.into_inner());
    }
    let next = st.spares.pop_front().expect("spare");
    debug_assert_eq!(next.seq, st.active.seq + 1);
    st.segments.push(SegMeta {
        seq: next.seq,
        path: next.path.clone(),
        first_lsn: None,
        last_lsn: None,
        first_pos: block,
        size: next.size,
    });
    // At the rate that filled the segment just left, one of the same size
    // would roll over as soon: the next new one is twice as large.
    if st.active_since.elapsed() < super::GROW_IF_FILLED_WITHIN {
        st.next_size = (st.next_size * 2).min(shared.options.segment_size_bytes);
    }
    st.active_since = Instant::now();
    st.active = next;
    st.pos = block;
    st.tail.clear();
    st.padded_to_block = false;
    st.stats.rollovers += 1;
    shared.spare_cv.notify_all();
    Ok(st)
}

/// Whether the active segment holds no record at all (a new journal's, one
/// emptied by `truncate_after`, or one rolled into whose first batch closed
/// without a record): a rollover would leave it empty in the chain, which
/// ends the chain there.
pub(super) fn active_is_empty(shared: &Shared, st: &State) -> bool {
    let meta = st.segments.last().filter(|s| s.seq == st.active.seq);
    st.pos == shared.spec.block_size as u64 && meta.is_some_and(|s| s.first_lsn.is_none())
}

/// The size of a segment for a record of `need` bytes: room for it after
/// the header block, and at least what new segments have grown to. The
/// segments made after it are at least as large (`next_size`), so that
/// records of that size do not wait for a segment again.
fn size_for(shared: &Shared, st: &mut State, need: usize) -> u64 {
    let block = shared.spec.block_size as u64;
    let size = (block + need as u64)
        .next_multiple_of(block)
        .max(4 * block)
        .max(st.next_size);
    debug_assert!(size <= shared.options.segment_size_bytes);
    st.next_size = size;
    size
}

/// The active segment holds no record and a record of `need` bytes does
/// not fit in it: replace it by one that holds it
/// ([`SegmentSpec::replace`]), in this thread — the commit waits for it.
/// No batch is open and none is queued for this segment. The mutex is
/// released meanwhile. A failure poisons the journal.
pub(super) fn replace_empty_active<'a>(
    shared: &'a Shared,
    mut st: MutexGuard<'a, State>,
    need: usize,
) -> Result<MutexGuard<'a, State>, JournalError> {
    let size = size_for(shared, &mut st, need);
    let (seq, base_lsn) = (st.active.seq, st.next_lsn);
    drop(st);
    let result = shared
        .spec
        .replace(shared.vfs.as_ref(), seq, base_lsn, size);
    let mut st = shared.lock();
    match result {
        Ok(seg) => {
            let meta = st.segments.last_mut().expect("the active segment");
            meta.size = size;
            meta.first_pos = shared.spec.block_size as u64;
            st.active = seg;
            st.tail.clear();
            st.padded_to_block = false;
            st.stats.segments_created += 1;
            Ok(st)
        }
        Err(e) => Err(JournalError::Poisoned(poison_all(shared, st, io_error(e)))),
    }
}

/// The I/O error a failed preparation poisons the journal with.
fn io_error(e: JournalError) -> Arc<IoError> {
    match e {
        JournalError::Io(e) => e,
        _ => Arc::new(IoError::Crashed),
    }
}

/// The next spare is too small for a record of `need` bytes: make a
/// segment under its number that holds it (at least the size new segments
/// have grown to), in this thread — the commit waits for it. The mutex is
/// released meanwhile; the spare cannot be taken (no batch is open) and no
/// other preparation runs (`preparing`). A failure poisons the journal:
/// the spare's file may be gone.
fn replace_next_spare<'a>(
    shared: &'a Shared,
    mut st: MutexGuard<'a, State>,
    need: usize,
) -> Result<MutexGuard<'a, State>, JournalError> {
    let seq = st.spares.front().expect("a spare").seq;
    let size = size_for(shared, &mut st, need);
    st.preparing = true;
    let base_lsn = st.next_lsn;
    drop(st);
    let result = shared.spec.create(shared.vfs.as_ref(), seq, base_lsn, size);
    let mut st = shared.lock();
    st.preparing = false;
    match result {
        Ok(seg) => {
            st.spares[0] = seg;
            st.stats.segments_created += 1;
            shared.spare_cv.notify_all();
            Ok(st)
        }
        Err(e) => Err(JournalError::Poisoned(poison_all(shared, st, io_error(e)))),
    }
}

/// The preparer thread: keeps `spare_segments` prepared segments ahead of
/// the active one, recycling released files first.
pub(super) fn preparer_loop(shared: Arc<Shared>) {
    let mut st = shared.lock();
    loop {
        while !st.shutdown
            && st.poisoned.is_none()
            && (st.preparing || st.spares.len() >= shared.options.spare_segments)
        {
            st = shared.spare_cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        if st.shutdown || st.poisoned.is_some() {
            return;
        }
        let size = st.next_size;
        st = prepare_one(&shared, st, size);
    }
}

/// Prepare the next spare segment, of at least `size` bytes (recycling a
/// free file that large if there is one), with the mutex released
/// meanwhile. Poisons the journal on failure.
fn prepare_one<'a>(
    shared: &'a Shared,
    mut st: MutexGuard<'a, State>,
    size: u64,
) -> MutexGuard<'a, State> {
    st.preparing = true;
    let seq = st.spares.back().map_or(st.active.seq, |s| s.seq) + 1;
    let source = Source::choose(&mut st.free, size);
    let base_lsn = st.next_lsn;
    drop(st);
    let result = shared
        .spec
        .prepare(shared.vfs.as_ref(), seq, &source, base_lsn);
    let mut st = shared.lock();
    st.preparing = false;
    match result {
        Ok(seg) => {
            match source.recycle {
                Some(_) => st.stats.segments_recycled += 1,
                None => st.stats.segments_created += 1,
            }
            st.spares.push_back(seg);
            shared.spare_cv.notify_all();
            st
        }
        // A failed preparation may have left a half-made file; the journal
        // cannot roll over, so stop it like a failed write.
        Err(e) => {
            poison_all(shared, st, io_error(e));
            shared.lock()
        }
    }
}

/// Prepare spare segments now, in the calling thread, until the spares can
/// hold `bytes` more bytes of records (see [`super::Journal::preallocate`]).
pub(super) fn preallocate(shared: &Shared, bytes: u64) -> Result<usize, JournalError> {
    let block = shared.spec.block_size as u64;
    let mut made = 0;
    let mut st = shared.lock();
    loop {
        if let Some(e) = &st.poisoned {
            return Err(JournalError::Poisoned(e.clone()));
        }
        if st.preparing {
            st = shared.spare_cv.wait(st).unwrap_or_else(|p| p.into_inner());
            continue;
        }
        let room: u64 = st.spares.iter().map(|s| s.size - block).sum();
        if room >= bytes {
            return Ok(made);
        }
        // One segment for what is missing, if one can hold it: a bulk load
        // rolls over as seldom as the largest size allows.
        let size = (bytes - room + block)
            .next_multiple_of(block)
            .clamp(st.next_size, shared.options.segment_size_bytes);
        st = prepare_one(shared, st, size);
        made += 1;
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
        st.free.push_back(FreeFile {
            path: seg.path,
            size: seg.size,
        });
        freed = true;
    }
    drop(st);
    if freed {
        shared.spare_cv.notify_all();
    }
}
