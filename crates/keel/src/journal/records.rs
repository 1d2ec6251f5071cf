//! Reading durable records back: [`Records`], what
//! [`super::Journal::read_from`] returns (recovery's replay, tools).

use std::collections::VecDeque;
use std::sync::Arc;

use super::format::{lz4_decode, FLAG_LZ4, RECORD_HEADER_BYTES};
use super::scan::{self, ChainCursor};
use super::writer::{SegMeta, Shared};
use super::{JournalError, Lsn};
use crate::io::Vfs;

/// Durable records from an LSN on, read back segment by segment.
pub struct Records {
    vfs: Arc<dyn Vfs>,
    block_size: usize,
    /// Cap on a decompressed payload (the largest record).
    max_record_bytes: usize,
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
        let start = seg.first_pos as usize;
        let (records, _, _) =
            scan::walk_segment_from(&bytes, seg.seq, self.block_size, start, &mut cursor);
        for r in records {
            if r.lsn >= self.from && r.lsn <= self.upto {
                let start = r.pos as usize + RECORD_HEADER_BYTES;
                let stored = &bytes[start..start + r.len as usize];
                let payload = if r.flags & FLAG_LZ4 != 0 {
                    lz4_decode(stored, self.max_record_bytes)
                        .ok_or(JournalError::BadCompressedRecord { lsn: r.lsn })?
                } else {
                    stored.to_vec()
                };
                self.current.push_back((r.lsn, payload));
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
        max_record_bytes: shared.options.max_record_bytes(),
        segments,
        from,
        upto,
        current: VecDeque::new(),
    })
}
