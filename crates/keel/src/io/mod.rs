//! The platform layer: every file Keel touches goes through [`Vfs`] and
//! [`VfsFile`].
//!
//! Two implementations exist:
//!
//! * [`RealVfs`] — Linux system calls (`rustix`), direct I/O with aligned
//!   buffers, optional io_uring submission.
//! * [`SimVfs`] — an in-memory, fault-injecting twin that tracks, for every
//!   file and directory, a *live* image (what a reader sees now) and a
//!   *durable* image (what would be left after a power cut). Crash tests,
//!   error injection and lying-disk tests all plug in here.
//!
//! Durability is carried by the [`OpenMode`]: a write through a `Dsync` or
//! `DirectDsync` descriptor, or through [`VfsFile::write_dsync_at`], is
//! durable when it returns; any other write needs [`VfsFile::sync`]. The
//! [`WriteMethod`] enum names the combinations `keel bench` measures and the
//! journal can use.
//!
//! Reads of the data file's clean pages may go through a read-only memory
//! map instead ([`VfsFile::map`], [`GrowingMap`]); writes never do.

mod aligned;
mod device;
mod error;
mod map;
mod method;
mod real;
mod shared_map;
pub mod sim;
mod uring;

use std::fmt::Debug;
use std::io::IoSlice;
use std::path::Path;
use std::sync::Arc;

pub use aligned::AlignedBuf;
pub use device::{
    cpu_list, device_logical_block_size, disk_interrupt_cpus, parse_cpu_list, DeviceInfo, MAX_CPU,
};
pub use error::{IoError, Result};
pub use map::{FileMap, GrowingMap, MapBytes, MAP_AHEAD_MIN_BYTES};
pub use method::{ParseMethodError, WriteMethod};
pub use real::RealVfs;
pub use shared_map::{DurableMirror, SharedMap, SHARED_MAP_BYTES, SHARED_MAP_WORDS};
pub use sim::{CrashMode, CrashOp, OpKind, SimVfs};

/// The sector size that direct I/O is aligned to when the device's own
/// logical block size cannot be found.
pub const FALLBACK_BLOCK_SIZE: usize = 4096;

/// How a file descriptor is opened. The mode decides whether a completed
/// write is durable by itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpenMode {
    /// Writes go to the page cache. Durable only after [`VfsFile::sync`].
    Buffered,
    /// `O_DSYNC`: each write returns after its data (and the metadata needed
    /// to read it back) reached stable storage — the kernel issues a cache
    /// flush or FUA write on devices with a volatile cache.
    Dsync,
    /// `O_DIRECT`: bypasses the page cache, but the data may sit in the
    /// device's volatile write cache when the write returns. NOT durable by
    /// itself on a drive with a write-back cache; needs [`VfsFile::sync`].
    Direct,
    /// `O_DIRECT | O_DSYNC`: bypasses the page cache and returns once the
    /// data is on stable storage (FUA or flush). Durable when it returns.
    DirectDsync,
}

impl OpenMode {
    /// Whether a write that returned success through this mode is durable.
    pub fn writes_are_durable(self) -> bool {
        matches!(self, OpenMode::Dsync | OpenMode::DirectDsync)
    }

    /// Whether buffers, offsets and lengths must be block-aligned.
    pub fn is_direct(self) -> bool {
        matches!(self, OpenMode::Direct | OpenMode::DirectDsync)
    }
}

/// How writes are submitted to the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum IoEngine {
    /// Plain positional system calls (`pwrite`, `pwritev2`).
    #[default]
    Psync,
    /// io_uring: one submission per write (and a linked `fdatasync` for
    /// [`VfsFile::write_dsync_at`]). Falls back to an error if the kernel
    /// refuses io_uring.
    Uring,
}

/// Options for [`Vfs::open`]. Files are created with permissions 0600.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenOptions {
    /// How the descriptor is opened, which decides whether writes are
    /// durable by themselves.
    pub mode: OpenMode,
    /// How writes are submitted to the kernel ([`IoEngine::Psync`] unless
    /// set with [`OpenOptions::engine`]).
    pub engine: IoEngine,
    /// Create the file if it does not exist.
    pub create: bool,
    /// Fail if the file exists (with `create`).
    pub create_new: bool,
    /// Open for reading only.
    pub read_only: bool,
}

impl OpenOptions {
    /// Open an existing file for reading and writing with `mode`.
    pub fn new(mode: OpenMode) -> Self {
        OpenOptions {
            mode,
            engine: IoEngine::Psync,
            create: false,
            create_new: false,
            read_only: false,
        }
    }

    /// Create the file if it does not exist.
    pub fn create(mut self, yes: bool) -> Self {
        self.create = yes;
        self
    }

    /// Create the file, failing if it exists (`yes` also sets `create`).
    pub fn create_new(mut self, yes: bool) -> Self {
        self.create_new = yes;
        self.create = self.create || yes;
        self
    }

    /// Open for reading only.
    pub fn read_only(mut self, yes: bool) -> Self {
        self.read_only = yes;
        self
    }

    /// Submit writes with `engine`.
    pub fn engine(mut self, engine: IoEngine) -> Self {
        self.engine = engine;
        self
    }
}

/// Which sync call [`VfsFile::sync`] makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SyncKind {
    /// `fsync`: data and all metadata (timestamps included).
    All,
    /// `fdatasync`: data and the metadata needed to read it back (size,
    /// extents), not timestamps. Enough for durability of the data.
    Data,
}

/// A held exclusive lock; released when dropped.
pub trait LockGuard: Send + Sync + Debug {}

/// A lock not taken: for a reader that reads beside the lock's holder
/// (a live snapshot of a store another process has open) and must not
/// take it.
#[derive(Debug)]
pub(crate) struct NotLocked;

impl LockGuard for NotLocked {}

/// A file system: the directory operations Keel needs, and opening files.
///
/// Paths are absolute or relative to the process's working directory for
/// [`RealVfs`]; [`SimVfs`] treats them as plain keys.
pub trait Vfs: Send + Sync + Debug {
    /// Open (and maybe create, with permissions 0600) a file.
    fn open(&self, path: &Path, options: OpenOptions) -> Result<Arc<dyn VfsFile>>;
    /// Create a directory and its parents (permissions 0700 for new ones).
    fn create_dir_all(&self, path: &Path) -> Result<()>;
    /// The names of the entries of a directory, sorted.
    fn read_dir(&self, path: &Path) -> Result<Vec<String>>;
    /// Atomically rename a file. Durable only after [`Vfs::sync_dir`] of both
    /// parents.
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;
    /// Remove a file. Durable only after [`Vfs::sync_dir`] of its parent.
    fn remove_file(&self, path: &Path) -> Result<()>;
    /// `fsync` a directory: makes creations, renames and removals of its
    /// entries durable.
    fn sync_dir(&self, path: &Path) -> Result<()>;
    /// Take an exclusive, non-blocking lock on `path` (created if missing).
    /// Fails with [`IoError::Locked`] if another holder has it (the real
    /// file system retries for 100 ms first: a lock just released can
    /// still be held by a child process another thread is starting).
    fn lock(&self, path: &Path) -> Result<Box<dyn LockGuard>>;
    /// [`Vfs::lock`] without the retry: one attempt, [`IoError::Locked`]
    /// at once if another holder has it (a reader that has somewhere else
    /// to go when the lock is held).
    fn try_lock(&self, path: &Path) -> Result<Box<dyn LockGuard>> {
        self.lock(path)
    }
    /// A [`SharedMap`] of the file at `path`, created (and lengthened) for
    /// writing when `writable`, else mapped read-only if it exists;
    /// `Ok(None)` where the file system has no shared memory (the
    /// simulated one) or, read-only, no such file.
    fn shared_map(&self, path: &Path, writable: bool) -> Result<Option<SharedMap>> {
        let _ = (path, writable);
        Ok(None)
    }
    /// Whether a file or directory exists at `path`.
    fn exists(&self, path: &Path) -> Result<bool>;
    /// Bytes available to this process on the file system holding `path`,
    /// or `None` when the file system reports no size at all (0 total
    /// blocks: e.g. a FUSE file system that does not implement `statfs`).
    /// Unknown is not "full": writes still report `ENOSPC` themselves.
    fn free_space(&self, path: &Path) -> Result<Option<u64>>;
    /// The alignment direct I/O needs for files under `path` (the logical
    /// block size of the device), or [`FALLBACK_BLOCK_SIZE`].
    fn block_size(&self, path: &Path) -> Result<usize>;
}

/// An open file. All offsets are absolute; there is no cursor, so one file
/// can be shared by threads.
pub trait VfsFile: Send + Sync + Debug {
    /// Read up to `buf.len()` bytes at `offset`; returns the count read
    /// (short only at end of file).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize>;
    /// Write all of `buf` at `offset`. Durable on return iff the file's
    /// [`OpenMode::writes_are_durable`].
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()>;
    /// Write all buffers, one after the other, starting at `offset`.
    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> Result<()>;
    /// Write all of `buf` at `offset` and make it durable before returning:
    /// `pwritev2(RWF_DSYNC)` with [`IoEngine::Psync`], a write linked with
    /// `fdatasync` with [`IoEngine::Uring`].
    fn write_dsync_at(&self, buf: &[u8], offset: u64) -> Result<()>;
    /// Start writing `[offset, offset+len)` back to the device and wait
    /// until it is written (`sync_file_range` with `WAIT_BEFORE | WRITE |
    /// WAIT_AFTER`): flow control for buffered writes, so that they reach
    /// the device in pieces rather than in one burst of writeback. **Not
    /// a durability point**: no metadata, no device cache flush. The
    /// default does nothing.
    fn write_back(&self, offset: u64, len: u64) -> Result<()> {
        let _ = (offset, len);
        Ok(())
    }
    /// Start writing `[offset, offset+len)` back to the device without
    /// waiting for it (`sync_file_range` with `WRITE` alone): a later
    /// [`VfsFile::write_back`] of the range waits for it. Not a
    /// durability point either. The default does nothing.
    fn start_write_back(&self, offset: u64, len: u64) -> Result<()> {
        let _ = (offset, len);
        Ok(())
    }
    /// Reserve blocks for `[offset, offset+len)` (`fallocate`, mode 0). The
    /// blocks read as zeros but stay "unwritten" extents: the first write to
    /// each converts it, which is a metadata change.
    fn allocate(&self, offset: u64, len: u64) -> Result<()>;
    /// Write zeros over `[offset, offset+len)` with real writes (not
    /// `fallocate`), so later overwrites change no metadata. Not synced.
    fn zero_fill(&self, offset: u64, len: u64) -> Result<()>;
    /// Truncate or extend the file.
    fn set_len(&self, len: u64) -> Result<()>;
    /// `fsync` or `fdatasync`.
    fn sync(&self, kind: SyncKind) -> Result<()>;
    /// Drop the file's *clean* cached pages, so the next buffered reads come
    /// from the disk (`posix_fadvise(POSIX_FADV_DONTNEED)`); dirty pages
    /// stay. After a failed `fsync`, Linux marks pages that never reached
    /// the disk clean (`fsync(2)`, "fsyncgate"): they read back as if
    /// written until evicted. Recovery evicts before it reads, so what it
    /// adopts is what the disk holds (plus dirty pages, which it syncs).
    fn evict_clean_pages(&self) -> Result<()>;
    /// The file's current length.
    fn len(&self) -> Result<u64>;
    /// A read-only map of the file's first `len` bytes (which may run past
    /// its end, to leave room for growth: only bytes below the file's
    /// length may be read through it), or `None` if this file layer does
    /// not map files. Writes never go through a map; a map shows them as
    /// the OS page cache does. See [`FileMap`] for what a reader must
    /// check, and why an I/O error under a map kills the process.
    fn map(&self, len: u64) -> Result<Option<Arc<dyn FileMap>>> {
        let _ = len;
        Ok(None)
    }
    /// Whether the file is empty.
    fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }
    /// The mode the file was opened with.
    fn mode(&self) -> OpenMode;
    /// The path the file was opened at (for error messages).
    fn path(&self) -> &Path;
    /// Read exactly `buf.len()` bytes at `offset`.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let n = self.read_at(&mut buf[done..], offset + done as u64)?;
            if n == 0 {
                return Err(IoError::UnexpectedEof {
                    path: self.path().to_path_buf(),
                    offset: offset + done as u64,
                });
            }
            done += n;
        }
        Ok(())
    }
}

/// Check that a direct-I/O request is aligned, with a clear error instead of
/// the kernel's bare `EINVAL`.
pub(crate) fn check_direct_alignment(
    block: usize,
    addr: usize,
    len: usize,
    offset: u64,
) -> Result<()> {
    let block_u64 = block as u64;
    if len % block != 0 {
        return Err(IoError::Misaligned {
            block,
            what: "length",
            value: len as u64,
        });
    }
    if offset % block_u64 != 0 {
        return Err(IoError::Misaligned {
            block,
            what: "offset",
            value: offset,
        });
    }
    if addr % block != 0 {
        return Err(IoError::Misaligned {
            block,
            what: "buffer address",
            value: addr as u64,
        });
    }
    Ok(())
}

/// Create `path` and any missing parents, and make every directory on the
/// way durable by syncing each directory that holds one: `mkdir` alone
/// leaves the new entry in the page cache, and a power cut can lose the
/// directory with everything later written under it, synced or not.
///
/// Every ancestor is synced, not only those created now: a directory made
/// by an earlier call that crashed before syncing its parent exists (the
/// page cache survived the process) but is not yet durable. One `fsync` per
/// level of the path, at open time only.
///
/// A directory above the path that existed before and that this process may
/// not open for reading (search permission only, e.g. mode 0711) cannot be
/// synced; it was not made by this call, and it is skipped.
pub fn create_dir_all_durable(vfs: &dyn Vfs, path: &Path) -> Result<()> {
    let existed: Vec<bool> = path
        .ancestors()
        .map(|p| vfs.exists(p).unwrap_or(false))
        .collect();
    vfs.create_dir_all(path)?;
    let mut holders = Vec::new();
    for (dir, existed) in path.ancestors().zip(existed).skip(1) {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        holders.push((dir, existed));
    }
    for (dir, existed) in holders.into_iter().rev() {
        match vfs.sync_dir(dir) {
            Err(IoError::Os { error, .. })
                if existed && error.kind() == std::io::ErrorKind::PermissionDenied => {}
            other => other?,
        }
    }
    Ok(())
}

/// Data files for tests of the mapped read path: one on the real file
/// system, one on the simulated one.
#[cfg(test)]
pub(crate) mod test_files {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use super::{OpenMode, OpenOptions, RealVfs, SimVfs, Vfs, VfsFile};

    /// A fresh buffered file `data` in a directory of its own, named after
    /// `name` and the process; the directory, for the caller to remove.
    pub(crate) fn real_file(name: &str) -> (Arc<dyn VfsFile>, PathBuf) {
        let dir = std::env::temp_dir().join(format!("keel-{name}-{}", std::process::id()));
        RealVfs.create_dir_all(&dir).unwrap();
        let f = RealVfs
            .open(
                &dir.join("data"),
                OpenOptions::new(OpenMode::Buffered).create(true),
            )
            .unwrap();
        (f, dir)
    }

    /// A fresh buffered file `/db/data` on a simulated file system seeded
    /// with `seed`.
    pub(crate) fn sim_file(seed: u64) -> Arc<dyn VfsFile> {
        sim_vfs_file(seed).1
    }

    /// [`sim_file`], with its file system (for its counters).
    pub(crate) fn sim_vfs_file(seed: u64) -> (Arc<SimVfs>, Arc<dyn VfsFile>) {
        let vfs = SimVfs::new(seed);
        vfs.create_dir_durable(Path::new("/db")).unwrap();
        let file = vfs
            .open(
                Path::new("/db/data"),
                OpenOptions::new(OpenMode::Buffered).create(true),
            )
            .unwrap();
        (vfs, file)
    }
}
