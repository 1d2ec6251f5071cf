//! A small file shared between processes through a memory map, read and
//! written only as aligned 64-bit atomic words: how a store's writer
//! tells readers in other processes how far its journal is durable
//! (`db::LIVE_FILE`, docs/format.md, "The store directory"), with one
//! store to memory per durable group and no system call (LMDB's lock file
//! shares its transaction ids the same way).
//!
//! The map is `MAP_SHARED`: a store by the writer is seen by every
//! process that maps the same file, through the page cache, without a
//! `write` or `msync` (nothing here needs to survive a crash: the file
//! is rewritten whole by every writer that opens the store). Nothing ever
//! shortens the file: a mapped page past a file's end raises `SIGBUS`.

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::real::open_or_create_rw;
use super::{IoError, Result};

/// Bytes of a shared map: eight 64-bit words.
pub const SHARED_MAP_BYTES: usize = 64;

/// Words of a shared map.
pub const SHARED_MAP_WORDS: usize = SHARED_MAP_BYTES / 8;

/// A mapped file of [`SHARED_MAP_WORDS`] little-endian 64-bit words.
#[derive(Debug)]
pub struct SharedMap {
    map: memmap2::MmapRaw,
    writable: bool,
}

impl SharedMap {
    /// Open (or create, mode `0600`) the file at `path` for writing and map
    /// it; a file shorter than [`SHARED_MAP_BYTES`] is lengthened (never
    /// shortened: a reader may have it mapped).
    pub fn create(path: &Path) -> Result<SharedMap> {
        let os = |op| move |e| IoError::os(op, path, e);
        let file = open_or_create_rw(path).map_err(os("open"))?;
        if file.metadata().map_err(os("stat"))?.len() < SHARED_MAP_BYTES as u64 {
            file.set_len(SHARED_MAP_BYTES as u64)
                .map_err(os("set_len"))?;
        }
        Self::map(&file, true).map_err(os("mmap"))
    }

    /// Open the file at `path` read-only and map it; `Ok(None)` when it
    /// does not exist or is shorter than [`SHARED_MAP_BYTES`] (no writer
    /// of this format made it).
    pub fn open_read_only(path: &Path) -> Result<Option<SharedMap>> {
        let os = |op| move |e| IoError::os(op, path, e);
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(os("open")(e)),
        };
        if file.metadata().map_err(os("stat"))?.len() < SHARED_MAP_BYTES as u64 {
            return Ok(None);
        }
        Self::map(&file, false).map(Some).map_err(os("mmap"))
    }

    fn map(file: &File, writable: bool) -> std::io::Result<SharedMap> {
        let mut options = memmap2::MmapOptions::new();
        options.len(SHARED_MAP_BYTES);
        let map = match writable {
            true => options.map_raw(file)?,
            false => options.map_raw_read_only(file)?,
        };
        Ok(SharedMap { map, writable })
    }

    fn word(&self, index: usize) -> &AtomicU64 {
        assert!(index < SHARED_MAP_WORDS, "word {index} of a shared map");
        // SAFETY: the map is `SHARED_MAP_BYTES` long (its file was at least
        // that long when mapped, and no Keel shortens it), page-aligned, so
        // word `index` lies inside it at an 8-byte-aligned address; it
        // lives as long as `self`, which the returned reference borrows.
        // Every process touches these bytes only through atomic operations
        // of this same width (this type is the only way Keel reads or
        // writes them), so there is no data race. A read-only map is only
        // loaded from (`store` asserts `writable`).
        unsafe { &*self.map.as_ptr().add(index * 8).cast::<AtomicU64>() }
    }

    /// Word `index`, as the latest store to it left it (`Acquire`).
    pub fn load(&self, index: usize) -> u64 {
        u64::from_le(self.word(index).load(Ordering::Acquire))
    }

    /// Set word `index` (`Release`): one store to memory, no system call.
    pub fn store(&self, index: usize, value: u64) {
        assert!(self.writable, "a store into a read-only shared map");
        self.word(index).store(value.to_le(), Ordering::Release);
    }
}

/// Where a journal mirrors its durable LSN: a word of a [`SharedMap`].
#[derive(Debug, Clone)]
pub struct DurableMirror {
    map: Arc<SharedMap>,
    index: usize,
}

impl DurableMirror {
    /// Mirror into word `index` of `map` (a writable map).
    pub fn new(map: Arc<SharedMap>, index: usize) -> DurableMirror {
        assert!(map.writable && index < SHARED_MAP_WORDS);
        DurableMirror { map, index }
    }

    /// Publish `lsn`: every record up to it is durable.
    pub fn store(&self, lsn: u64) {
        self.map.store(self.index, lsn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_is_seen_through_another_map_of_the_file() {
        let dir = std::env::temp_dir().join(format!("keel-shared-map-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("LIVE");
        assert!(SharedMap::open_read_only(&path).unwrap().is_none());
        let w = SharedMap::create(&path).unwrap();
        let r = SharedMap::open_read_only(&path).unwrap().unwrap();
        w.store(3, 0x1122_3344_5566_7788);
        assert_eq!(r.load(3), 0x1122_3344_5566_7788);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), SHARED_MAP_BYTES);
        assert_eq!(bytes[24..32], 0x1122_3344_5566_7788u64.to_le_bytes());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
