//! The Linux implementation of [`Vfs`]: positional system calls through
//! `std` and `rustix`, direct I/O, io_uring on request.

use std::fs::File;
use std::io::IoSlice;
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustix::fs::{FallocateFlags, FlockOperation};
use rustix::io::ReadWriteFlags;

use super::map::RealMap;
use super::uring::Ring;
use super::{
    check_direct_alignment, FileMap, IoEngine, IoError, LockGuard, OpenMode, OpenOptions, Result,
    SyncKind, Vfs, VfsFile, FALLBACK_BLOCK_SIZE,
};

/// Zero-fill writes this many bytes per system call.
const ZERO_FILL_CHUNK_BYTES: usize = 1 << 20;

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealVfs;

impl RealVfs {
    /// The real file system, shared.
    pub fn shared() -> Arc<dyn Vfs> {
        Arc::new(RealVfs)
    }
}

fn os<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> IoError + 'a {
    move |source| IoError::os(op, path, source)
}

fn errno<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(rustix::io::Errno) -> IoError + 'a {
    move |e| {
        IoError::os(
            op,
            path,
            std::io::Error::from_raw_os_error(e.raw_os_error()),
        )
    }
}

impl Vfs for RealVfs {
    fn open(&self, path: &Path, options: OpenOptions) -> Result<Arc<dyn VfsFile>> {
        let mut flags = 0;
        if options.mode.is_direct() {
            flags |= libc::O_DIRECT;
        }
        if options.mode.writes_are_durable() {
            flags |= libc::O_DSYNC;
        }
        let mut std_options = std::fs::OpenOptions::new();
        std_options
            .read(true)
            .write(!options.read_only)
            .create(options.create && !options.create_new)
            .create_new(options.create_new)
            .mode(0o600)
            .custom_flags(flags);
        let file = match std_options.open(path) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && options.mode.is_direct() => {
                return Err(IoError::DirectUnsupported {
                    path: path.to_path_buf(),
                })
            }
            Err(e) => return Err(IoError::os("open", path, e)),
        };
        let block = if options.mode.is_direct() {
            direct_alignment(&file, path)
        } else {
            1
        };
        let ring = match options.engine {
            IoEngine::Psync => None,
            IoEngine::Uring => Some(Mutex::new(Ring::new()?)),
        };
        Ok(Arc::new(RealFile {
            file,
            path: path.to_path_buf(),
            mode: options.mode,
            block,
            ring,
        }))
    }

    fn create_dir_all(&self, path: &Path) -> Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
            .map_err(os("create directory", path))
    }

    fn read_dir(&self, path: &Path) -> Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(path).map_err(os("read directory", path))? {
            let entry = entry.map_err(os("read directory", path))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        std::fs::rename(from, to).map_err(os("rename", from))
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        std::fs::remove_file(path).map_err(os("remove", path))
    }

    fn sync_dir(&self, path: &Path) -> Result<()> {
        let dir = File::open(path).map_err(os("open directory", path))?;
        dir.sync_all().map_err(os("fsync directory", path))
    }

    fn lock(&self, path: &Path) -> Result<Box<dyn LockGuard>> {
        lock_file(path, LOCK_RETRY)
    }

    fn try_lock(&self, path: &Path) -> Result<Box<dyn LockGuard>> {
        lock_file(path, std::time::Duration::ZERO)
    }

    fn shared_map(&self, path: &Path, writable: bool) -> Result<Option<super::SharedMap>> {
        match writable {
            true => super::SharedMap::create(path).map(Some),
            false => super::SharedMap::open_read_only(path),
        }
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        path.try_exists().map_err(os("stat", path))
    }

    fn free_space(&self, path: &Path) -> Result<Option<u64>> {
        let existing = nearest_existing(path);
        let st = rustix::fs::statvfs(&existing).map_err(errno("statvfs", &existing))?;
        // A FUSE file system without `statfs` answers with all zeros: its
        // size is unknown, not zero.
        if st.f_blocks == 0 {
            return Ok(None);
        }
        Ok(Some(st.f_bavail.saturating_mul(st.f_frsize)))
    }

    fn block_size(&self, path: &Path) -> Result<usize> {
        let existing = nearest_existing(path);
        let file = File::open(&existing).map_err(os("open", &existing))?;
        Ok(direct_alignment(&file, &existing))
    }
}

/// The closest ancestor of `path` (or itself) that exists.
fn nearest_existing(path: &Path) -> PathBuf {
    let mut p = if path.as_os_str().is_empty() {
        Path::new(".")
    } else {
        path
    };
    loop {
        if p.exists() {
            return p.to_path_buf();
        }
        match p.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => p = parent,
            _ => return PathBuf::from("."),
        }
    }
}

/// The alignment direct I/O needs on this file: `statx(STATX_DIOALIGN)`
/// (Linux ≥ 6.1) when the kernel reports it, else the device's logical block
/// size from sysfs, else [`FALLBACK_BLOCK_SIZE`].
fn direct_alignment(file: &File, path: &Path) -> usize {
    if let Ok(st) = rustix::fs::statx(
        file.as_fd(),
        "",
        rustix::fs::AtFlags::EMPTY_PATH,
        rustix::fs::StatxFlags::DIOALIGN,
    ) {
        let align = st.stx_dio_offset_align.max(st.stx_dio_mem_align) as usize;
        if align.is_power_of_two() && align >= 512 {
            return align;
        }
    }
    crate::io::device_logical_block_size(path).unwrap_or(FALLBACK_BLOCK_SIZE)
}

/// Open `path` to read and write, creating it (mode `0600`, less the
/// umask) if missing and never truncating it: a store's small shared
/// files (`LOCK`, `LIVE`).
pub(crate) fn open_or_create_rw(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
}

/// Take the `flock` on `path`, retrying for `retry` while it is held.
fn lock_file(path: &Path, retry: std::time::Duration) -> Result<Box<dyn LockGuard>> {
    let file = open_or_create_rw(path).map_err(os("open lock file", path))?;
    // flock locks belong to the open file description, so a second open
    // in the same process conflicts too — which is what we want. So
    // does a child process that another thread is starting: between
    // its fork and its exec it holds a copy of every descriptor (close-
    // on-exec ones too), so a lock released just before can still be
    // held for a moment. Retry briefly before calling the lock taken.
    let deadline = std::time::Instant::now() + retry;
    loop {
        match rustix::fs::flock(file.as_fd(), FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(Box::new(RealLock { _file: file })),
            Err(rustix::io::Errno::WOULDBLOCK) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            Err(rustix::io::Errno::WOULDBLOCK) => {
                return Err(IoError::Locked {
                    path: path.to_path_buf(),
                })
            }
            Err(e) => return Err(errno("flock", path)(e)),
        }
    }
}

/// How long `lock` retries a lock that is held, in case its holder is a
/// copy of a descriptor in a child process not yet past its `exec`.
const LOCK_RETRY: std::time::Duration = std::time::Duration::from_millis(100);

#[derive(Debug)]
struct RealLock {
    _file: File,
}

impl LockGuard for RealLock {}

/// An open file on the real file system.
#[derive(Debug)]
pub(crate) struct RealFile {
    file: File,
    path: PathBuf,
    mode: OpenMode,
    /// Direct-I/O alignment (1 for buffered files).
    block: usize,
    ring: Option<Mutex<Ring>>,
}

impl RealFile {
    fn check(&self, addr: usize, len: usize, offset: u64) -> Result<()> {
        if self.mode.is_direct() {
            check_direct_alignment(self.block, addr, len, offset)?;
        }
        Ok(())
    }

    fn check_space(&self, offset: u64, len: u64) -> Result<()> {
        let current = self.len()?;
        let needed = (offset + len).saturating_sub(current);
        if needed == 0 {
            return Ok(());
        }
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let Some(available) = RealVfs.free_space(dir)? else {
            return Ok(());
        };
        if needed > available {
            return Err(IoError::NoSpace {
                path: dir.to_path_buf(),
                needed,
                available,
            });
        }
        Ok(())
    }

    /// `sync_file_range` over `[offset, offset+len)` with `flags`.
    fn sync_range(&self, offset: u64, len: u64, flags: libc::c_uint) -> Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: a plain system call on a descriptor this file owns; no
        // memory is passed.
        let r = unsafe {
            libc::sync_file_range(
                self.file.as_raw_fd(),
                offset as libc::off64_t,
                len as libc::off64_t,
                flags,
            )
        };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            return Err(IoError::os("sync_file_range", &self.path, e));
        }
        Ok(())
    }
}

impl VfsFile for RealFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.check(buf.as_ptr() as usize, buf.len(), offset)?;
        loop {
            match self.file.read_at(buf, offset) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => return r.map_err(os("read", &self.path)),
            }
        }
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.check(buf.as_ptr() as usize, buf.len(), offset)?;
        match &self.ring {
            Some(ring) => ring
                .lock()
                .expect("ring lock")
                .write(&self.file, buf, offset, false),
            None => self
                .file
                .write_all_at(buf, offset)
                .map_err(os("write", &self.path)),
        }
    }

    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if self.mode.is_direct() {
            let mut off = offset;
            for b in bufs {
                self.check(b.as_ptr() as usize, b.len(), off)?;
                off += b.len() as u64;
            }
        }
        let mut written = 0usize;
        while written < total {
            // Rebuild the slice list past what was written (partial writes
            // are rare but legal).
            let mut skip = written;
            let mut rest: Vec<IoSlice<'_>> = Vec::with_capacity(bufs.len());
            for b in bufs {
                if skip >= b.len() {
                    skip -= b.len();
                    continue;
                }
                rest.push(IoSlice::new(&b[skip..]));
                skip = 0;
            }
            match rustix::io::pwritev(&self.file, &rest, offset + written as u64) {
                Ok(0) => {
                    return Err(IoError::os(
                        "write",
                        &self.path,
                        std::io::Error::from(std::io::ErrorKind::WriteZero),
                    ))
                }
                Ok(n) => written += n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(errno("write", &self.path)(e)),
            }
        }
        Ok(())
    }

    fn write_dsync_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.check(buf.as_ptr() as usize, buf.len(), offset)?;
        if let Some(ring) = &self.ring {
            return ring
                .lock()
                .expect("ring lock")
                .write(&self.file, buf, offset, true);
        }
        let mut done = 0usize;
        while done < buf.len() {
            let slice = [IoSlice::new(&buf[done..])];
            match rustix::io::pwritev2(
                &self.file,
                &slice,
                offset + done as u64,
                ReadWriteFlags::DSYNC,
            ) {
                Ok(0) => {
                    return Err(IoError::os(
                        "pwritev2",
                        &self.path,
                        std::io::Error::from(std::io::ErrorKind::WriteZero),
                    ))
                }
                Ok(n) => done += n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(errno("pwritev2", &self.path)(e)),
            }
        }
        Ok(())
    }

    fn write_back(&self, offset: u64, len: u64) -> Result<()> {
        self.sync_range(
            offset,
            len,
            libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER,
        )
    }

    fn start_write_back(&self, offset: u64, len: u64) -> Result<()> {
        self.sync_range(offset, len, libc::SYNC_FILE_RANGE_WRITE)
    }

    fn allocate(&self, offset: u64, len: u64) -> Result<()> {
        self.check_space(offset, len)?;
        rustix::fs::fallocate(&self.file, FallocateFlags::empty(), offset, len)
            .map_err(errno("fallocate", &self.path))
    }

    fn zero_fill(&self, offset: u64, len: u64) -> Result<()> {
        self.check_space(offset, len)?;
        let align = self.block.max(FALLBACK_BLOCK_SIZE);
        let chunk = super::AlignedBuf::new(ZERO_FILL_CHUNK_BYTES, align);
        let mut off = offset;
        let end = offset + len;
        while off < end {
            let n = ((end - off) as usize).min(chunk.len());
            self.write_at(&chunk[..n], off)?;
            off += n as u64;
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<()> {
        self.file.set_len(len).map_err(os("truncate", &self.path))
    }

    fn sync(&self, kind: SyncKind) -> Result<()> {
        match kind {
            SyncKind::All => self.file.sync_all().map_err(os("fsync", &self.path)),
            SyncKind::Data => self.file.sync_data().map_err(os("fdatasync", &self.path)),
        }
    }

    fn evict_clean_pages(&self) -> Result<()> {
        rustix::fs::fadvise(&self.file, 0, None, rustix::fs::Advice::DontNeed)
            .map_err(errno("posix_fadvise", &self.path))
    }

    fn len(&self) -> Result<u64> {
        Ok(self.file.metadata().map_err(os("stat", &self.path))?.len())
    }

    fn map(&self, len: u64) -> Result<Option<Arc<dyn FileMap>>> {
        Ok(Some(Arc::new(RealMap::new(&self.file, &self.path, len)?)))
    }

    fn mode(&self) -> OpenMode {
        self.mode
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::AlignedBuf;

    fn tmp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("keel-real-{}-{name}", std::process::id()));
        RealVfs.create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn write_read_sync_all_modes() {
        let dir = tmp("modes");
        for mode in [
            OpenMode::Buffered,
            OpenMode::Dsync,
            OpenMode::Direct,
            OpenMode::DirectDsync,
        ] {
            let path = dir.join(format!("{mode:?}"));
            let f = match RealVfs.open(&path, OpenOptions::new(mode).create(true)) {
                Err(IoError::DirectUnsupported { .. }) => continue,
                r => r.unwrap(),
            };
            let mut buf = AlignedBuf::new(8192, 4096);
            buf.fill(7);
            f.write_at(&buf, 4096).unwrap();
            f.write_dsync_at(&buf, 0).unwrap();
            f.sync(SyncKind::Data).unwrap();
            let mut back = AlignedBuf::new(8192, 4096);
            f.read_exact_at(&mut back, 4096).unwrap();
            assert_eq!(&back[..], &buf[..]);
            assert_eq!(f.len().unwrap(), 12288);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn direct_misalignment_is_a_clear_error() {
        let dir = tmp("misaligned");
        let path = dir.join("f");
        let f = match RealVfs.open(&path, OpenOptions::new(OpenMode::DirectDsync).create(true)) {
            Err(IoError::DirectUnsupported { .. }) => return,
            r => r.unwrap(),
        };
        let err = f.write_at(&[0u8; 1000], 0).unwrap_err();
        assert!(
            matches!(err, IoError::Misaligned { what: "length", .. }),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn lock_is_exclusive() {
        let dir = tmp("lock");
        let lock = dir.join("LOCK");
        let g = RealVfs.lock(&lock).unwrap();
        assert!(matches!(RealVfs.lock(&lock), Err(IoError::Locked { .. })));
        drop(g);
        RealVfs.lock(&lock).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn allocate_and_zero_fill_check_space() {
        let dir = tmp("space");
        let f = RealVfs
            .open(
                &dir.join("f"),
                OpenOptions::new(OpenMode::Buffered).create(true),
            )
            .unwrap();
        f.zero_fill(0, 3 << 20).unwrap();
        assert_eq!(f.len().unwrap(), 3 << 20);
        let err = f.allocate(0, u64::MAX / 4).unwrap_err();
        assert!(matches!(err, IoError::NoSpace { .. }), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn uring_engine_writes_and_syncs() {
        let dir = tmp("uring");
        for mode in [OpenMode::Buffered, OpenMode::DirectDsync] {
            let path = dir.join(format!("{mode:?}"));
            let opts = OpenOptions::new(mode).create(true).engine(IoEngine::Uring);
            let f = match RealVfs.open(&path, opts) {
                Err(IoError::UringUnavailable { .. }) | Err(IoError::DirectUnsupported { .. }) => {
                    continue
                }
                r => r.unwrap(),
            };
            let mut buf = AlignedBuf::new(8192, 4096);
            buf.fill(3);
            f.write_at(&buf, 0).unwrap();
            f.write_dsync_at(&buf, 8192).unwrap();
            let mut back = AlignedBuf::new(16384, 4096);
            f.read_exact_at(&mut back, 0).unwrap();
            assert!(back.iter().all(|&b| b == 3));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn vectored_write() {
        let dir = tmp("vec");
        let f = RealVfs
            .open(
                &dir.join("f"),
                OpenOptions::new(OpenMode::Buffered).create(true),
            )
            .unwrap();
        f.write_vectored_at(&[IoSlice::new(b"abc"), IoSlice::new(b"defg")], 10)
            .unwrap();
        let mut back = [0u8; 7];
        f.read_exact_at(&mut back, 10).unwrap();
        assert_eq!(&back, b"abcdefg");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
