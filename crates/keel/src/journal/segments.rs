//! Segment files: preparing new ones (zero-filled, header written, synced,
//! name made durable) and recycling released ones, in a background thread so
//! that a rollover on the commit path never waits for the file system.

use std::path::PathBuf;
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
    /// The file's length in bytes, which its header states.
    pub size: u64,
}

/// A segment file no longer needed, waiting to be recycled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreeFile {
    pub path: PathBuf,
    /// Its length in bytes.
    pub size: u64,
}

/// The suffix of a segment being made under a temporary name, to replace
/// the active segment in one rename (see [`SegmentSpec::replace`]). Not a
/// segment name: the scan ignores it, and a writable open removes it.
pub const REPLACEMENT_SUFFIX: &str = ".new";

/// What the next spare segment is made from. Free files are taken oldest
/// first, always: those left lie right below the chain, in sequence, and
/// hold released records that recovery may read as the start of the chain
/// — a gap among them would end the chain there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The oldest free file, smaller than the size wanted: no spare will
    /// take it any more. Removed (durably) before `recycle` is renamed
    /// (which would otherwise leave a gap below it), or after the new file
    /// is made: the journal's largest file, which bounds its record size
    /// at the next open, is never removed before a larger one exists.
    pub discard: Option<FreeFile>,
    /// A free file of at least the size wanted, recycled at its own size;
    /// `None`: a new zero-filled file of `size` bytes.
    pub recycle: Option<FreeFile>,
    pub size: u64,
}

impl Source {
    /// A spare of at least `size` bytes: the oldest free file if it is that
    /// large; else that file goes, and the next oldest is taken if it is
    /// that large; else a new file.
    pub fn choose(free: &mut std::collections::VecDeque<FreeFile>, size: u64) -> Source {
        let mut take_if = |fits: bool| {
            let hit = free.front().is_some_and(|f| (f.size >= size) == fits);
            hit.then(|| free.pop_front()).flatten()
        };
        let discard = take_if(false);
        Source {
            discard,
            recycle: take_if(true),
            size,
        }
    }
}

/// What a segment is made of, shared by every segment of a journal (each
/// has its own size).
#[derive(Debug, Clone)]
pub struct SegmentSpec {
    pub dir: PathBuf,
    pub store_id: u64,
    pub block_size: usize,
    /// The journal's largest segment size (its `segment_size_bytes`),
    /// recorded in every header's extension: the next open keeps it.
    pub largest_segment_size: u64,
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

    /// Open an existing segment file of `size` bytes for appending with
    /// the journal's method.
    pub fn open(&self, vfs: &dyn Vfs, seq: u64, size: u64) -> Result<ReadySegment, JournalError> {
        let path = self.path(seq);
        let file = vfs.open(&path, self.method.open_options().create(false))?;
        Ok(ReadySegment {
            seq,
            path,
            file,
            size,
        })
    }

    /// Write (durably) the header of segment `seq`, a file of `size`
    /// bytes, into `file`'s first block, with `base_lsn` as the lowest LSN
    /// its records can have.
    pub fn write_header(
        &self,
        file: &dyn VfsFile,
        (seq, size): (u64, u64),
        base_lsn: u64,
        cut_from: u64,
    ) -> Result<(), JournalError> {
        let mut block = AlignedBuf::new(self.block_size, self.block_size);
        SegmentHeader {
            block_size: self.block_size as u32,
            store_id: self.store_id,
            seq,
            segment_size: size,
            base_lsn,
            max_write_bytes: u32::try_from(self.max_write_bytes).unwrap_or(u32::MAX),
            cut_from,
        }
        .encode_with_largest(self.largest_segment_size, &mut block);
        self.method.write_durably(file, &block, 0)?;
        if let Some(kind) = self.method.sync_after_writes() {
            file.sync(kind)?;
        }
        Ok(())
    }

    /// Create segment `seq`, `size` bytes, from nothing (replacing a file
    /// of that name, a spare too small for the record that needs it):
    /// zero-fill it so later writes change no file metadata, write its
    /// header, sync both, then sync the directory so the name survives a
    /// power cut. `base_lsn`: no record of the segment will have a lower
    /// LSN (the journal's next LSN now).
    pub fn create(
        &self,
        vfs: &dyn Vfs,
        seq: u64,
        base_lsn: u64,
        size: u64,
    ) -> Result<ReadySegment, JournalError> {
        self.create_at(vfs, &self.path(seq), seq, base_lsn, size)
    }

    /// [`SegmentSpec::create`] under the file name `path`.
    fn create_at(
        &self,
        vfs: &dyn Vfs,
        path: &std::path::Path,
        seq: u64,
        base_lsn: u64,
        size: u64,
    ) -> Result<ReadySegment, JournalError> {
        debug_assert!(size % self.block_size as u64 == 0 && size >= 4 * self.block_size as u64);
        let path = path.to_path_buf();
        if vfs.exists(&path)? {
            vfs.remove_file(&path)?;
        }
        // Unknown free space (a file system that reports no size) is no
        // reason to refuse: the zero-fill below reports ENOSPC itself.
        let available = vfs.free_space(&self.dir)?.unwrap_or(u64::MAX);
        if available < size {
            return Err(JournalError::from(crate::io::IoError::NoSpace {
                path: self.dir.clone(),
                needed: size,
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
        filler.zero_fill(0, size)?;
        filler.sync(crate::io::SyncKind::Data)?;
        drop(filler);
        let file = vfs.open(&path, self.method.open_options().create(false))?;
        self.write_header(file.as_ref(), (seq, size), base_lsn, 0)?;
        vfs.sync_dir(&self.dir)?;
        Ok(ReadySegment {
            seq,
            path,
            file,
            size,
        })
    }

    /// Turn an old segment file into segment `seq`, at its own size: rename
    /// it, sync the directory, then rewrite its header. Its old records
    /// stay but can never be taken for new ones: each carries its own (old)
    /// segment sequence.
    ///
    /// The new name is durable before the header changes: a crash in
    /// between then leaves a half-written header only under the new name,
    /// above the chain, and a damaged header *below* the chain always means
    /// damage (what `RecoveryMode::RefuseCorruption` and `keel journal
    /// check` report).
    pub fn recycle(
        &self,
        vfs: &dyn Vfs,
        old: &FreeFile,
        seq: u64,
        base_lsn: u64,
    ) -> Result<ReadySegment, JournalError> {
        let path = self.path(seq);
        vfs.rename(&old.path, &path)?;
        vfs.sync_dir(&self.dir)?;
        let file = vfs.open(&path, self.method.open_options().create(false))?;
        let size = old.size;
        if file.len()? != size {
            // Changed behind the journal's back since it was listed: start
            // afresh.
            drop(file);
            vfs.remove_file(&path)?;
            return self.create(vfs, seq, base_lsn, size);
        }
        self.write_header(file.as_ref(), (seq, size), base_lsn, 0)?;
        Ok(ReadySegment {
            seq,
            path,
            file,
            size,
        })
    }

    /// Make segment `seq` ready from `source`.
    pub fn prepare(
        &self,
        vfs: &dyn Vfs,
        seq: u64,
        source: &Source,
        base_lsn: u64,
    ) -> Result<ReadySegment, JournalError> {
        let discard = |old: &FreeFile| -> Result<(), JournalError> {
            vfs.remove_file(&old.path)?;
            Ok(vfs.sync_dir(&self.dir)?)
        };
        match (&source.recycle, &source.discard) {
            (Some(old), small) => {
                if let Some(small) = small {
                    discard(small)?;
                }
                self.recycle(vfs, old, seq, base_lsn)
            }
            (None, small) => {
                let seg = self.create(vfs, seq, base_lsn, source.size)?;
                if let Some(small) = small {
                    discard(small)?;
                }
                Ok(seg)
            }
        }
    }

    /// Replace the active segment `seq`, which holds no record, by an
    /// empty one of `size` bytes: a record too large for it must not leave
    /// it empty behind a rollover (the chain would end there). Made whole
    /// under a temporary name — zero-filled, header written with
    /// `base_lsn`, synced — then renamed over the old file, and the
    /// directory synced: a crash leaves the old segment or the new one,
    /// both valid and empty.
    pub fn replace(
        &self,
        vfs: &dyn Vfs,
        seq: u64,
        base_lsn: u64,
        size: u64,
    ) -> Result<ReadySegment, JournalError> {
        let path = self.path(seq);
        let mut temp = path.clone().into_os_string();
        temp.push(REPLACEMENT_SUFFIX);
        let temp = PathBuf::from(temp);
        let new = self.create_at(vfs, &temp, seq, base_lsn, size)?;
        drop(new);
        vfs.rename(&temp, &path)?;
        vfs.sync_dir(&self.dir)?;
        self.open(vfs, seq, size)
    }
}
