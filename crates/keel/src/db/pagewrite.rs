//! A checkpoint's page writes: each page is copied, as it is encoded,
//! into one buffer of [`BATCH_BYTES`]; a full buffer is written a run of
//! consecutive pages per system call, and used again.
//!
//! Why not encode every page first and then write them (as checkpoints
//! once did): a fold of half a million keys made ~33,000 pages, 136 MB of
//! buffers at once, each one fresh memory (~1.8 s per GiB to fault in on
//! these VMs), and then handed the whole of it to the kernel in one burst:
//! the `fdatasync` after it held a commit's journal write for 167 ms
//! (traced, `keel bench commit --workload w3 --engine store`, 2026-11-25).
//!
//! Written through the page cache, each buffer then written back and
//! waited for (`VfsFile::write_back`, `sync_file_range`): a checkpoint
//! keeps at most one buffer's worth in the disk's queue ahead of the
//! journal's writes, as `O_DIRECT` writes did. A checkpoint that writers
//! will soon wait for overlaps the two instead
//! ([`PageWriter::overlap_writeback`]). Its pages stay in the
//! page cache afterwards, so that reads after a restart (of a store closed
//! clean, which keeps them) come from memory, not the disk: point gets of
//! a million keys just loaded, the store closed and opened again, ran at
//! 530–562k/s at T=1 with `O_DIRECT` page writes against 881–901k/s
//! written back through the cache (`keel-bench --engines keel --workloads
//! r1,w3 --rounds 2`, interleaved; w3 10,385–11,013 against
//! 10,954–11,303 tx/s, its p99 within the noise). Not durable until the
//! data file is synced.

use std::io::IoSlice;

use crate::btree::PageNo;
use crate::io::{self, AlignedBuf, VfsFile};

/// The buffer's size: pages are written in pieces of at most this. A
/// journal write queued behind one waits for it: with 1 MiB, w3's p99
/// commit latency was 1.8–2.3 ms during a checkpoint, against 0.6–0.75 ms
/// with 256 KiB (same hour, 2 runs each).
pub(crate) const BATCH_BYTES: usize = 256 << 10;

/// Gathers pages and writes them (see the module doc).
pub(crate) struct PageWriter<'f> {
    file: &'f dyn VfsFile,
    page_bytes: usize,
    buf: AlignedBuf,
    /// The pages in `buf`: page number, and slot in the buffer.
    slots: Vec<(PageNo, usize)>,
    capacity: usize,
    /// Pages written.
    pub written: u64,
    /// The byte range whose writeback the last flush started and did
    /// not wait for.
    in_flight: Option<(u64, u64)>,
    overlap: bool,
}

impl<'f> PageWriter<'f> {
    /// A writer to `file` of pages of `page_bytes` (a power of two, as is
    /// every page size), aligned for direct I/O.
    pub(crate) fn new(file: &'f dyn VfsFile, page_bytes: usize) -> PageWriter<'f> {
        let capacity = (BATCH_BYTES / page_bytes).max(1);
        PageWriter {
            file,
            page_bytes,
            buf: AlignedBuf::new(capacity * page_bytes, page_bytes),
            slots: Vec::with_capacity(capacity),
            capacity,
            written: 0,
            in_flight: None,
            overlap: false,
        }
    }

    /// Queue `bytes` (one whole page) for page `page`; writes the buffer
    /// first if it is full.
    pub(crate) fn push(&mut self, page: PageNo, bytes: &[u8]) -> io::Result<()> {
        debug_assert_eq!(bytes.len(), self.page_bytes);
        if self.slots.len() == self.capacity {
            self.flush()?;
        }
        let slot = self.slots.len();
        let ps = self.page_bytes;
        self.buf[slot * ps..(slot + 1) * ps].copy_from_slice(bytes);
        self.slots.push((page, slot));
        Ok(())
    }

    /// Whether each flush leaves its buffer's writeback running while the
    /// next buffer is encoded (waiting for it before writing the next),
    /// instead of waiting for it at once. Still at most one buffer in the
    /// disk's queue, but for most of the checkpoint instead of only while
    /// it waits, so a commit's journal write more often queues behind it:
    /// for a checkpoint that commits wait for (past half a backpressure
    /// budget, or run by a writer). Waiting at once, a 10M-key fill (w3's
    /// shape, default options) spent 4.8 s of its checkpoints' 27 s
    /// waiting for writeback while the disk idled as pages were encoded.
    /// Overlapping in every checkpoint, the protocol's w3 (10,000
    /// transactions, its checkpoints paced) ran at 0.97× and 1.00× the
    /// rate of waiting at once (medians of 8 and 9): within the noise, so
    /// a paced checkpoint keeps the more cautious choice.
    pub(crate) fn overlap_writeback(&mut self, yes: bool) {
        self.overlap = yes;
    }

    /// Write what is queued, sorted by page number, a run of consecutive
    /// pages per system call, after waiting for the writeback of the
    /// buffer before if it is still running, then write this one back
    /// (see [`PageWriter::overlap_writeback`]). The data file's sync
    /// waits for the last one.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        // Before this buffer's pages are written: a range overlapping the
        // last one would otherwise be written back and waited for too.
        if let Some((from, len)) = self.in_flight.take() {
            self.file.write_back(from, len)?;
        }
        self.slots.sort_unstable_by_key(|&(page, _)| page);
        let ps = self.page_bytes;
        let mut i = 0;
        while i < self.slots.len() {
            let mut j = i + 1;
            while j < self.slots.len() && self.slots[j].0 == self.slots[j - 1].0 + 1 {
                j += 1;
            }
            let bufs: Vec<IoSlice<'_>> = self.slots[i..j]
                .iter()
                .map(|&(_, slot)| IoSlice::new(&self.buf[slot * ps..(slot + 1) * ps]))
                .collect();
            self.file
                .write_vectored_at(&bufs, self.slots[i].0 * ps as u64)?;
            self.written += (j - i) as u64;
            i = j;
        }
        if let (Some(first), Some(last)) = (self.slots.first(), self.slots.last()) {
            let (from, to) = (first.0 * ps as u64, (last.0 + 1) * ps as u64);
            if self.overlap {
                self.file.start_write_back(from, to - from)?;
                self.in_flight = Some((from, to - from));
            } else {
                self.file.write_back(from, to - from)?;
            }
        }
        self.slots.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{OpenMode, OpenOptions, SimVfs, Vfs};
    use std::path::Path;

    /// Pages pushed out of order, more than one buffer's worth, read back
    /// where they belong, through a direct descriptor.
    #[test]
    fn pages_land_at_their_numbers_in_any_order() {
        let vfs = SimVfs::new(7);
        let path = Path::new("/d");
        vfs.create_dir_all(path).unwrap();
        let file = vfs
            .open(
                &path.join("f"),
                OpenOptions::new(OpenMode::Direct).create(true),
            )
            .unwrap();
        let ps = 4096;
        let n = (BATCH_BYTES / ps) as u64 * 2 + 7;
        let mut w = PageWriter::new(file.as_ref(), ps);
        // A permutation of 0..n: odd pages first, then even ones, backwards.
        let order: Vec<u64> = (0..n)
            .filter(|p| p % 2 == 1)
            .chain((0..n).filter(|p| p % 2 == 0).rev())
            .collect();
        for &p in &order {
            w.push(p, &vec![p as u8 ^ 0x5a; ps]).unwrap();
        }
        w.flush().unwrap();
        assert_eq!(w.written, n);
        let mut back = AlignedBuf::new(ps, ps);
        for p in 0..n {
            file.read_exact_at(&mut back, p * ps as u64).unwrap();
            assert!(back.iter().all(|&b| b == p as u8 ^ 0x5a), "page {p}");
        }
    }
}
