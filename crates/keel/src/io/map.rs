//! Read-only memory maps of files: [`FileMap`], made by
//! [`VfsFile::map`](super::VfsFile::map).
//!
//! A map lets a reader look at a file's clean pages where the OS page
//! cache holds them: no system call and no copy. Writes never go through
//! a map (they stay `pwrite`), and the bytes read through one are
//! untrusted input like any `pread` buffer: the reader verifies them
//! (checksums, bounds) before it uses them.
//!
//! What a map cannot do is report an I/O error: a page the kernel fails to
//! read (a bad sector, a file truncated under the map) raises `SIGBUS`,
//! which kills the process unless it installs a handler. A library cannot
//! catch it without a process-wide handler, so Keel keeps `pread` as an
//! option (`Options::read_mapped`).

use std::fmt::Debug;
use std::fs::File;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned};

use super::{IoError, Result, VfsFile};

/// A read-only map of a file from its first byte.
///
/// The map may extend past the end of the file (a map made ahead of the
/// file's growth): only bytes below the file's length may be read, since
/// a real map raises `SIGBUS` on a page wholly past the end. The caller
/// keeps track of the length it knows the file has.
pub trait FileMap: Send + Sync + Debug {
    /// How many bytes from the start of the file the map covers.
    fn len(&self) -> u64;

    /// Whether the map covers nothing.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes `[offset, offset + len)`, which must lie below the file's
    /// length: borrowed from the map, or a copy of what it shows now (the
    /// simulated file system, [`super::SimVfs`]). An error if the range
    /// lies past the map, or if the file layer is down.
    fn read(&self, offset: u64, len: usize) -> Result<MapBytes<'_>>;
}

/// Bytes read through a [`FileMap`].
#[derive(Debug)]
pub enum MapBytes<'a> {
    /// Borrowed from the map: the OS page cache's own page.
    Mapped(&'a [u8]),
    /// A copy of what a map would show (the simulated file system).
    Copied(Vec<u8>),
}

impl Deref for MapBytes<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            MapBytes::Mapped(b) => b,
            MapBytes::Copied(v) => v,
        }
    }
}

/// The error for a range past the end of a map.
pub(crate) fn past_map(path: &Path, offset: u64) -> IoError {
    IoError::UnexpectedEof {
        path: path.to_path_buf(),
        offset,
    }
}

/// Whether `[offset, offset + len)` lies within `map_len` bytes.
pub(crate) fn within(map_len: u64, offset: u64, len: usize) -> bool {
    offset
        .checked_add(len as u64)
        .is_some_and(|end| end <= map_len)
}

/// A map of a real file (`mmap(PROT_READ, MAP_SHARED)`).
#[derive(Debug)]
pub(crate) struct RealMap {
    map: memmap2::Mmap,
    path: PathBuf,
}

impl RealMap {
    /// Map the first `len` bytes of `file` (which may run past its end).
    pub(crate) fn new(file: &File, path: &Path, len: u64) -> Result<RealMap> {
        let len_usize = usize::try_from(len).map_err(|_| past_map(path, len))?;
        // SAFETY: `Mmap` hands out `&[u8]` over memory the kernel backs
        // with the file, so the file must not change under a slice in use,
        // nor shrink below a page read. Keel upholds both for the data
        // file it maps: the store holds an exclusive lock on its directory
        // (no other Keel process writes or truncates it); it never shrinks
        // the file while it is open (it only grows by `pwrite` and
        // `fallocate`); and pages are copy-on-write: a page is never
        // written while a tree that a reader may hold refers to it, so the
        // bytes a reader borrows do not change while it reads them. Pages
        // past the file's end are never read (callers check the length
        // they know). What the bytes hold is untrusted: the tree verifies
        // every page read through the map (CRC32C, page number, layout) as
        // it verifies a `pread` page, so a foreign write or a torn page is
        // an error, never unsound access: every read of the bytes is
        // bounds-checked.
        let map = unsafe { memmap2::MmapOptions::new().len(len_usize).map(file) }
            .map_err(|e| IoError::os("mmap", path, e))?;
        Ok(RealMap {
            map,
            path: path.to_path_buf(),
        })
    }
}

impl FileMap for RealMap {
    fn len(&self) -> u64 {
        self.map.len() as u64
    }

    fn read(&self, offset: u64, len: usize) -> Result<MapBytes<'_>> {
        if !within(self.len(), offset, len) {
            return Err(past_map(&self.path, offset));
        }
        let at = offset as usize;
        Ok(MapBytes::Mapped(&self.map[at..at + len]))
    }
}

/// A map of a file that only grows while it is mapped (a store's data
/// file), for readers pinned by a `crossbeam-epoch` guard.
///
/// It maps ahead of the file's length (twice the length, at least
/// [`MAP_AHEAD_MIN_BYTES`] more), so a growing file is remapped seldom;
/// a read past the length it knows re-reads the length (one `fstat`) and,
/// past the map, maps the file anew. The old map stays alive until every
/// reader pinned while it was current has unpinned: bytes borrowed from
/// it stay valid for as long as the reader's pin.
#[derive(Debug)]
pub struct GrowingMap {
    file: Arc<dyn VfsFile>,
    current: Atomic<Arc<dyn FileMap>>,
    /// The file's length as last read: reads below it are safe, because
    /// the file never shrinks while mapped.
    known_len: AtomicU64,
    /// Serializes length checks and remaps.
    grow: Mutex<()>,
    remaps: AtomicU64,
}

/// The least a [`GrowingMap`] maps past the file's end, and the step its
/// length is a multiple of: 64 MiB (64 KiB in the crate's own tests, so
/// that they remap often).
pub const MAP_AHEAD_MIN_BYTES: u64 = if cfg!(test) { 64 << 10 } else { 64 << 20 };

fn map_len_for(file_len: u64) -> u64 {
    let ahead = file_len.max(MAP_AHEAD_MIN_BYTES);
    file_len.saturating_add(ahead).div_ceil(MAP_AHEAD_MIN_BYTES) * MAP_AHEAD_MIN_BYTES
}

impl GrowingMap {
    /// Map `file`, or `None` if its file layer does not map files. The
    /// file must not shrink while the map lives (see [`FileMap`]).
    pub fn new(file: Arc<dyn VfsFile>) -> Result<Option<GrowingMap>> {
        let len = file.len()?;
        let Some(map) = file.map(map_len_for(len))? else {
            return Ok(None);
        };
        Ok(Some(GrowingMap {
            file,
            current: Atomic::new(map),
            known_len: AtomicU64::new(len),
            grow: Mutex::new(()),
            remaps: AtomicU64::new(0),
        }))
    }

    /// The bytes `[offset, offset + len)` for a reader pinned by `guard`,
    /// or `None` if they lie past the file's end (read them with `pread`,
    /// which reports that).
    pub fn read<'g>(
        &'g self,
        offset: u64,
        len: usize,
        guard: &'g Guard,
    ) -> Result<Option<MapBytes<'g>>> {
        if !within(self.known_len.load(Ordering::Acquire), offset, len)
            && !self.grow(offset, len)?
        {
            return Ok(None);
        }
        let shared = self.current.load(Ordering::Acquire, guard);
        // SAFETY: `current` always holds a valid pointer (set in `new`,
        // replaced only in `grow`, freed in `drop`). A replaced map is
        // destroyed through `guard.defer_destroy`, so it lives until every
        // guard pinned before its replacement is dropped; the bytes
        // returned borrow from it for no longer than `guard` lives.
        let map = unsafe { shared.deref() };
        map.read(offset, len).map(Some)
    }

    /// Re-read the file's length and remap if the range now lies below it
    /// but past the map; false if it lies past the file's end.
    fn grow(&self, offset: u64, len: usize) -> Result<bool> {
        let _one = self.grow.lock().unwrap_or_else(|e| e.into_inner());
        let known = self.known_len.load(Ordering::Acquire);
        if within(known, offset, len) {
            return Ok(true);
        }
        let file_len = self.file.len()?;
        if !within(file_len, offset, len) {
            return Ok(false);
        }
        let guard = epoch::pin();
        let old = self.current.load(Ordering::Acquire, &guard);
        // SAFETY: as in `read`; `guard` pins it.
        if unsafe { old.deref() }.len() < file_len {
            let map = self
                .file
                .map(map_len_for(file_len))?
                .expect("a file layer that mapped it once maps it again");
            let old = self.current.swap(Owned::new(map), Ordering::AcqRel, &guard);
            self.remaps.fetch_add(1, Ordering::Relaxed);
            // SAFETY: `old` is unreachable from `current` now; readers that
            // loaded it are pinned, and the destruction waits for them.
            unsafe { guard.defer_destroy(old) };
        }
        // After the swap: a reader that sees the new length sees the map
        // that covers it.
        self.known_len.store(file_len, Ordering::Release);
        Ok(true)
    }

    /// How many times the file was mapped anew as it grew.
    pub fn remaps(&self) -> u64 {
        self.remaps.load(Ordering::Relaxed)
    }
}

impl Drop for GrowingMap {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no reader holds a borrow from `read`
        // (its bytes borrow `self`), so the current map can go now; the
        // replaced ones were handed to the epoch collector.
        drop(unsafe {
            self.current
                .load(Ordering::Relaxed, epoch::unprotected())
                .into_owned()
        });
    }
}

#[cfg(test)]
#[path = "map_tests.rs"]
mod tests;
