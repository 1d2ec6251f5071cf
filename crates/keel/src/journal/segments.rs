//! Segment files: preparing new ones (zero-filled, header written, synced,
//! name made durable) and recycling released ones, in a background thread so
//! that a rollover on the commit path never waits for the file system.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::format::{segment_file_name, SegmentHeader};
use super::JournalError;
use crate::io::{AlignedBuf, OpenMode, OpenOptions, Vfs, VfsFile, WriteMethod};

/// A segment ready to take records: its header is durable and so is its
/// name.
#[derive(Debug, Clone)]
pub struct ReadySegment {
    pub seq: u64,
    pub path: PathBuf,
    pub file: Arc<dyn VfsFile>,
}

/// What a segment is made of, shared by every segment of a journal.
#[derive(Debug, Clone)]
pub struct SegmentSpec {
    pub dir: PathBuf,
    pub store_id: u64,
    pub segment_size: u64,
    pub block_size: usize,
    /// The journal's `max_write_bytes`, recorded in every header.
    pub max_write_bytes: usize,
    /// How far past the end of the chain a crash — of this journal or of
    /// whichever opener wrote the segments found at open — can have left
    /// torn bytes (`tolerated_damage_bytes` of the largest write size).
    pub torn_reach_bytes: u64,
    pub method: WriteMethod,
}

impl SegmentSpec {
    pub fn path(&self, seq: u64) -> PathBuf {
        self.dir.join(segment_file_name(seq))
    }

    /// Open an existing segment file for appending with the journal's
    /// method.
    pub fn open(&self, vfs: &dyn Vfs, seq: u64) -> Result<ReadySegment, JournalError> {
        let path = self.path(seq);
        let file = vfs.open(&path, self.method.open_options().create(false))?;
        Ok(ReadySegment { seq, path, file })
    }

    /// Write (durably) the header of segment `seq` into `file`'s first
    /// block, with `base_lsn` as the lowest LSN its records can have.
    pub fn write_header(
        &self,
        file: &dyn VfsFile,
        seq: u64,
        base_lsn: u64,
        cut_from: u64,
    ) -> Result<(), JournalError> {
        let mut block = AlignedBuf::new(self.block_size, self.block_size);
        SegmentHeader {
            block_size: self.block_size as u32,
            store_id: self.store_id,
            seq,
            segment_size: self.segment_size,
            base_lsn,
            max_write_bytes: u32::try_from(self.max_write_bytes).unwrap_or(u32::MAX),
            cut_from,
        }
        .encode(&mut block);
        self.method.write_durably(file, &block, 0)?;
        if let Some(kind) = self.method.sync_after_writes() {
            file.sync(kind)?;
        }
        Ok(())
    }

    /// Create segment `seq` from nothing: zero-fill it so later writes change
    /// no file metadata, write its header, sync both, then sync the
    /// directory so the name survives a power cut. `base_lsn`: no record of
    /// the segment will have a lower LSN (the journal's next LSN now).
    pub fn create(
        &self,
        vfs: &dyn Vfs,
        seq: u64,
        base_lsn: u64,
    ) -> Result<ReadySegment, JournalError> {
        let path = self.path(seq);
        if vfs.exists(&path)? {
            vfs.remove_file(&path)?;
        }
        // Unknown free space (a file system that reports no size) is no
        // reason to refuse: the zero-fill below reports ENOSPC itself.
        let available = vfs.free_space(&self.dir)?.unwrap_or(u64::MAX);
        if available < self.segment_size {
            return Err(JournalError::from(crate::io::IoError::NoSpace {
                path: self.dir.clone(),
                needed: self.segment_size,
                available,
            }));
        }
        // Fill with zeros through a descriptor that does not sync each
        // write (`O_DIRECT` alone for a direct method, else the page
        // cache), then make all of it — and the file size — durable with
        // one `fdatasync`: one cache flush per segment instead of one per
        // megabyte, so preparing a spare in the background barely delays
        // the commits being written at the same time.
        let fill_mode = if self.method.is_direct() {
            OpenMode::Direct
        } else {
            OpenMode::Buffered
        };
        let filler = vfs.open(&path, OpenOptions::new(fill_mode).create_new(true))?;
        filler.zero_fill(0, self.segment_size)?;
        filler.sync(crate::io::SyncKind::Data)?;
        drop(filler);
        let file = vfs.open(&path, self.method.open_options().create(false))?;
        self.write_header(file.as_ref(), seq, base_lsn, 0)?;
        vfs.sync_dir(&self.dir)?;
        Ok(ReadySegment { seq, path, file })
    }

    /// Turn an old segment file into segment `seq`: rename it, sync the
    /// directory, then rewrite its header. Its old records stay but can
    /// never be taken for new ones: each carries its own (old) segment
    /// sequence.
    ///
    /// The new name is durable before the header changes: a crash in
    /// between then leaves a half-written header only under the new name,
    /// above the chain, and a damaged header *below* the chain always means
    /// damage (what `RecoveryMode::RefuseCorruption` and `keel journal
    /// check` report).
    pub fn recycle(
        &self,
        vfs: &dyn Vfs,
        old_path: &Path,
        seq: u64,
        base_lsn: u64,
    ) -> Result<ReadySegment, JournalError> {
        let path = self.path(seq);
        vfs.rename(old_path, &path)?;
        vfs.sync_dir(&self.dir)?;
        let file = vfs.open(&path, self.method.open_options().create(false))?;
        if file.len()? != self.segment_size {
            // Not one of ours (another segment size): start afresh.
            drop(file);
            vfs.remove_file(&path)?;
            return self.create(vfs, seq, base_lsn);
        }
        self.write_header(file.as_ref(), seq, base_lsn, 0)?;
        Ok(ReadySegment { seq, path, file })
    }

    /// Make segment `seq` ready, recycling `old` if given.
    pub fn prepare(
        &self,
        vfs: &dyn Vfs,
        seq: u64,
        old: Option<&Path>,
        base_lsn: u64,
    ) -> Result<ReadySegment, JournalError> {
        match old {
            Some(old) => self.recycle(vfs, old, seq, base_lsn),
            None => self.create(vfs, seq, base_lsn),
        }
    }
}
