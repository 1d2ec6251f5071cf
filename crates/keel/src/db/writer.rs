//! What only the one writer touches: its base, its last LSN and the
//! buffers it keeps between commits. Whoever holds the writer slot
//! (`combine.rs`) holds this.

use std::sync::{Arc, Mutex};

use super::layers::Base;
use super::sync::lock;
use crate::journal::Lsn;

/// What only the one writer touches: the base its commits go into (its
/// active memtable holds every commit, perhaps not yet durable) and the
/// LSN of the last one.
#[derive(Debug)]
pub(crate) struct WriterState {
    pub base: Arc<Base>,
    pub last_lsn: Lsn,
    /// The buffer records are encoded into, kept between commits: a fresh
    /// one per commit came from memory the allocator had not touched yet,
    /// and the kernel zeroing it was a tenth of w1's time (perf,
    /// 2026-11-23). See [`WriterState::recycle`].
    pub record_buf: Vec<u8>,
    /// Table ids blind transactions looked up in the catalog, kept while
    /// only blind transactions straight from their puts commit (they never
    /// change the catalog): [`WriterState::forget_table_ids`] before
    /// applying anything else. Why: with 64 committers (w2) each record of
    /// a group looked its table up again, a memtable search and three
    /// allocations on the leader's serial path.
    pub table_ids: Mutex<Vec<(Box<str>, u32)>>,
}

/// A record buffer larger than this is not kept for the next commit.
pub(crate) const KEEP_RECORD_BUF_BYTES: usize = 1 << 20;

impl WriterState {
    pub(crate) fn new(base: Arc<Base>, last_lsn: Lsn) -> WriterState {
        WriterState {
            base,
            last_lsn,
            record_buf: Vec::new(),
            table_ids: Mutex::new(Vec::new()),
        }
    }

    /// Forget the table ids kept (see [`WriterState::table_ids`]): the
    /// catalog may change.
    pub(crate) fn forget_table_ids(&self) {
        lock(&self.table_ids).clear();
    }

    /// Keep `buf` (emptied) for the next commit's record, unless a large
    /// transaction grew it past [`KEEP_RECORD_BUF_BYTES`].
    pub(crate) fn recycle(&mut self, mut buf: Vec<u8>) {
        if buf.capacity() <= KEEP_RECORD_BUF_BYTES {
            buf.clear();
            self.record_buf = buf;
        }
    }
}
