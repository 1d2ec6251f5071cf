//! The fault-injecting file system: an in-memory [`Vfs`] that knows, for
//! every file and directory, what a reader sees now (the *live* image) and
//! what would be left after a power cut (the *durable* image).
//!
//! # The model
//!
//! * **File data.** A write lands in the live image at once and joins the
//!   file's list of *pending* (not yet durable) operations. `sync` (either
//!   kind) makes every pending operation of the file durable. A write through
//!   a durable open mode ([`OpenMode::writes_are_durable`]) or through
//!   [`VfsFile::write_dsync_at`] is durable when it returns (pending writes to
//!   the same range are flushed first, as the kernel writes back dirty page
//!   cache before a direct write).
//! * **Names.** Creating, renaming and removing a file are *pending
//!   namespace operations*, made durable by [`Vfs::sync_dir`] of an affected
//!   directory. Like a journaling file system, the namespace commits in
//!   order: syncing a directory also commits every earlier pending namespace
//!   operation, and a power cut keeps a random *prefix* of the rest.
//! * **New directories** (`create_dir_all`) are durable only once their
//!   parent directory is synced (POSIX: an `fsync` of the new directory
//!   itself does not make its own entry durable). A power cut keeps or drops
//!   each pending one; whatever lies under a dropped directory is gone.
//! * **[`CrashMode::Process`]**: the process died, the kernel did not: the
//!   page cache survives, so everything written stays *readable* — but what
//!   was not synced stays *pending*: a later power cut can still drop or
//!   tear it. (A recovering process must sync what it adopts.)
//! * **[`CrashMode::PowerLoss`]**: each pending write is, by the seeded RNG,
//!   kept, dropped, or torn (every 512-byte sector of it independently kept
//!   or not); a pending length change is kept or dropped.
//! * **A failed sync** ([`SimVfs::fail_after`] on a file sync) may, as Linux
//!   does after a writeback error, mark the file's dirty pages clean without
//!   writing them ([`SimVfs::set_failed_sync_drops`]): they stay readable
//!   until the next power cut or [`VfsFile::evict_clean_pages`], but no
//!   later sync makes them durable (the PostgreSQL "fsyncgate" case).
//! * **Faults.** The n-th future write or sync can fail with an errno
//!   ([`SimVfs::fail_after`]); after n more operations the layer can go down
//!   as if the machine died ([`SimVfs::crash_after_ops`]) — a write hit by
//!   that crash point is left in the live image as pending, so it may be
//!   torn. The disk can **lie** (acknowledge a sync but lose the write at the
//!   next power cut, [`SimVfs::set_lying`]) or **misdirect** a write to
//!   another offset ([`SimVfs::set_misdirect`]).
//! * **Maps.** [`VfsFile::map`] gives the twin of a read-only shared map:
//!   each read copies the live image as it is then (what the OS page cache
//!   shows a real map), counts in [`SimStats::mapped_reads`], and panics
//!   where a real map would raise `SIGBUS` (a read past the file's end).
//!
//! After [`SimVfs::crash`] every handle (and map) opened before it fails with
//! [`IoError::Crashed`] and every lock is released: the test reopens, as a
//! restarted process would.

use std::collections::{BTreeMap, HashMap};
use std::io::IoSlice;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::map::{past_map, within};
use super::{
    check_direct_alignment, FileMap, IoError, LockGuard, MapBytes, OpenMode, OpenOptions, Result,
    SyncKind, Vfs, VfsFile,
};

/// The granularity at which a power cut tears a write: the classic sector.
pub const SECTOR_BYTES: usize = 512;

/// What kind of crash [`SimVfs::crash`] models.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashMode {
    /// The process died; the kernel and its page cache did not. Every
    /// completed write stays readable; what was not synced stays pending
    /// (a later power cut may still lose it).
    Process,
    /// The machine lost power. Only durable writes and names are certain to
    /// survive; the rest is kept, dropped or torn at random.
    PowerLoss,
}

/// Which operations a fault rule counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// Any write: `write_at`, vectored, `write_dsync_at`, zero-fill.
    Write,
    /// `sync` of a file or `sync_dir`.
    Sync,
    /// Every mutating operation.
    Any,
}

/// The operation a crash point stopped: what, on which file, where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrashOp {
    /// The operation (`write`, `zero-fill`, `fdatasync`, `rename`…).
    pub op: &'static str,
    /// The file or directory it applied to (for a rename, the source).
    pub path: PathBuf,
    /// The byte offset of a write; `None` for other operations.
    pub offset: Option<u64>,
}

/// Counts of what the layer has seen, for tests that report coverage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Writes applied to a file (zero-fills included).
    pub writes: u64,
    /// Successful file syncs (`fsync` or `fdatasync`).
    pub syncs: u64,
    /// Successful directory syncs ([`Vfs::sync_dir`]).
    pub dir_syncs: u64,
    /// Files renamed.
    pub renames: u64,
    /// Files removed.
    pub removes: u64,
    /// Files created.
    pub creates: u64,
    /// Calls to [`SimVfs::crash`].
    pub crashes: u64,
    /// Durable writes that spent a while in flight (see
    /// [`SimVfs::set_in_flight`]).
    pub in_flight: u64,
    /// Operations acknowledged as durable but left out of the durable image
    /// (see [`SimVfs::set_lying`]).
    pub lies: u64,
    /// Writes that landed at another offset (see
    /// [`SimVfs::set_misdirect`]).
    pub misdirects: u64,
    /// Failed syncs that dropped the file's pending writes (see
    /// [`SimVfs::set_failed_sync_drops`]).
    pub failed_sync_drops: u64,
    /// Reads through a map ([`VfsFile::map`]).
    pub mapped_reads: u64,
}

#[derive(Debug, Clone)]
enum PendingOp {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Default)]
struct Inode {
    live: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<PendingOp>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    File(u64),
    Dir,
}

#[derive(Debug, Clone)]
enum NsOp {
    Create { path: PathBuf, ino: u64 },
    Remove { path: PathBuf },
    Rename { from: PathBuf, to: PathBuf },
}

impl NsOp {
    fn touches_dir(&self, dir: &Path) -> bool {
        let parent_is = |p: &Path| p.parent() == Some(dir);
        match self {
            NsOp::Create { path, .. } | NsOp::Remove { path } => parent_is(path),
            NsOp::Rename { from, to } => parent_is(from) || parent_is(to),
        }
    }

    fn apply(&self, ns: &mut BTreeMap<PathBuf, Entry>) {
        match self {
            NsOp::Create { path, ino } => {
                ns.insert(path.clone(), Entry::File(*ino));
            }
            NsOp::Remove { path } => {
                ns.remove(path);
            }
            NsOp::Rename { from, to } => {
                if let Some(e) = ns.remove(from) {
                    ns.insert(to.clone(), e);
                }
            }
        }
    }
}

#[derive(Debug, Clone)]
struct FailRule {
    kind: OpKind,
    /// Only operations on this file count, when set.
    path: Option<PathBuf>,
    remaining: u64,
    errno: i32,
}

#[derive(Debug)]
struct State {
    rng: SmallRng,
    /// Bumped at every crash; handles and locks of older generations are
    /// dead.
    generation: u64,
    down: bool,
    crash_after: Option<u64>,
    op_count: u64,
    inodes: HashMap<u64, Inode>,
    next_ino: u64,
    live_ns: BTreeMap<PathBuf, Entry>,
    durable_ns: BTreeMap<PathBuf, Entry>,
    pending_ns: Vec<NsOp>,
    locks: HashMap<PathBuf, u64>,
    next_lock_id: u64,
    fail_rules: Vec<FailRule>,
    lie_probability: f64,
    misdirect_probability: f64,
    in_flight_probability: f64,
    failed_sync_drop_probability: f64,
    /// New directories whose entries in their parents are not durable yet.
    pending_dirs: Vec<PathBuf>,
    /// What `free_space` reports: (total bytes, available bytes); a total
    /// of 0 is a file system that reports no size.
    space: (u64, u64),
    block_size: usize,
    stats: SimStats,
    /// The operation the crash point stopped, for tests that classify crash
    /// points.
    crash_op: Option<CrashOp>,
}

/// The fault-injecting file system. Cheap to share: `Arc<SimVfs>`.
#[derive(Debug)]
pub struct SimVfs {
    state: Arc<Mutex<State>>,
}

impl SimVfs {
    /// A new, empty file system whose random choices follow `seed`.
    pub fn new(seed: u64) -> Arc<SimVfs> {
        let state = State {
            rng: SmallRng::seed_from_u64(seed),
            generation: 0,
            down: false,
            crash_after: None,
            op_count: 0,
            inodes: HashMap::new(),
            next_ino: 1,
            live_ns: BTreeMap::new(),
            durable_ns: BTreeMap::new(),
            pending_ns: Vec::new(),
            locks: HashMap::new(),
            next_lock_id: 1,
            fail_rules: Vec::new(),
            lie_probability: 0.0,
            misdirect_probability: 0.0,
            in_flight_probability: 0.0,
            failed_sync_drop_probability: 0.5,
            pending_dirs: Vec::new(),
            space: (u64::MAX / 2, u64::MAX / 4),
            block_size: SECTOR_BYTES,
            stats: SimStats::default(),
            crash_op: None,
        };
        Arc::new(SimVfs {
            state: Arc::new(Mutex::new(state)),
        })
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Model a crash and the restart after it: compute what survives, drop
    /// every lock, invalidate every open handle, and bring the layer up.
    pub fn crash(&self, mode: CrashMode) {
        let mut st = self.lock_state();
        st.stats.crashes += 1;
        st.generation += 1;
        st.down = false;
        st.crash_after = None;
        st.fail_rules.clear();
        st.locks.clear();
        match mode {
            CrashMode::Process => st.crash_process(),
            CrashMode::PowerLoss => st.crash_power(),
        }
    }

    /// Lie about durability: each write made durable afterwards is, with
    /// this probability, silently lost at the next power cut.
    pub fn set_lying(&self, probability: f64) {
        self.lock_state().lie_probability = probability;
    }

    /// Misdirect writes: each later write lands, with this probability, at
    /// another offset of the same file (a multiple of its length) instead of
    /// its own.
    pub fn set_misdirect(&self, probability: f64) {
        self.lock_state().misdirect_probability = probability;
    }

    /// Keep durable writes in flight for a while: each durable write is,
    /// with this probability, first applied to the live image only, then
    /// the writing thread sleeps a few microseconds with the layer
    /// unlocked, and only then is the write made durable. Other threads'
    /// writes can complete meanwhile, and a crash point reached meanwhile
    /// leaves it pending (kept, dropped or torn by a power cut): the
    /// out-of-order completions of a real device with several writes in
    /// flight. Not combined with misdirected writes.
    pub fn set_in_flight(&self, probability: f64) {
        self.lock_state().in_flight_probability = probability;
    }

    /// The probability (default 0.5) that a failed file sync drops the
    /// file's pending writes: they stay in the live image (readable, as
    /// Linux keeps the pages cached after marking them clean) but leave the
    /// pending list, so no later sync makes them durable and the next power
    /// cut loses them.
    pub fn set_failed_sync_drops(&self, probability: f64) {
        self.lock_state().failed_sync_drop_probability = probability;
    }

    /// What [`Vfs::free_space`] reports: `total` bytes and `available`
    /// bytes. A `total` of 0 models a file system that reports no size
    /// (a FUSE file system without `statfs`).
    pub fn set_space(&self, total: u64, available: u64) {
        self.lock_state().space = (total, available);
    }

    /// Create a directory and its parents, durably (for test set-up).
    pub fn create_dir_durable(&self, path: &Path) -> Result<()> {
        self.create_dir_all(path)?;
        let mut st = self.lock_state();
        st.pending_dirs.retain(|d| !path.starts_with(d));
        for dir in path.ancestors() {
            if !is_root(dir) {
                st.durable_ns.insert(dir.to_path_buf(), Entry::Dir);
            }
        }
        Ok(())
    }

    /// Make the `nth` (0-based) future operation of `kind` fail with `errno`
    /// (e.g. `libc::EIO`, `libc::ENOSPC`) without taking effect.
    pub fn fail_after(&self, kind: OpKind, nth: u64, errno: i32) {
        self.lock_state().fail_rules.push(FailRule {
            kind,
            path: None,
            remaining: nth,
            errno,
        });
    }

    /// Like [`SimVfs::fail_after`], counting only operations on `path`: a
    /// test aims at one file while other threads (a journal's segment
    /// preparation, say) keep doing I/O on others.
    pub fn fail_after_on(&self, path: &Path, kind: OpKind, nth: u64, errno: i32) {
        self.lock_state().fail_rules.push(FailRule {
            kind,
            path: Some(path.to_path_buf()),
            remaining: nth,
            errno,
        });
    }

    /// After `n` more mutating operations, go down: the next one (and every
    /// later one) fails with [`IoError::Crashed`] until [`SimVfs::crash`].
    pub fn crash_after_ops(&self, n: u64) {
        let mut st = self.lock_state();
        st.crash_after = Some(n);
        st.crash_op = None;
    }

    /// Whether a crash point has been reached and the layer is down.
    pub fn is_down(&self) -> bool {
        self.lock_state().down
    }

    /// The operation (name, path) that the last crash point stopped.
    pub fn crash_op(&self) -> Option<CrashOp> {
        self.lock_state().crash_op.clone()
    }

    /// Mutating operations performed so far (the crash-point clock).
    pub fn op_count(&self) -> u64 {
        self.lock_state().op_count
    }

    /// What the layer has seen so far.
    pub fn stats(&self) -> SimStats {
        self.lock_state().stats
    }

    /// The alignment direct-I/O handles check (default 512).
    pub fn set_block_size(&self, block: usize) {
        assert!(block.is_power_of_two());
        self.lock_state().block_size = block;
    }

    /// The live contents of the file at `path`, if it exists (for tests).
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let st = self.lock_state();
        match st.live_ns.get(path)? {
            Entry::File(ino) => Some(st.inodes[ino].live.clone()),
            Entry::Dir => None,
        }
    }

    /// Overwrite bytes of a file's live and durable image directly, without
    /// counting an operation (for tests that plant corruption).
    pub fn corrupt(&self, path: &Path, offset: u64, bytes: &[u8]) -> Result<()> {
        let mut st = self.lock_state();
        let ino = st.file_ino(path)?;
        let inode = st.inodes.get_mut(&ino).expect("inode");
        write_into(&mut inode.live, offset, bytes);
        write_into(&mut inode.durable, offset, bytes);
        for op in &mut inode.pending {
            if let PendingOp::Write { offset: o, data } = op {
                overlay(data, *o, offset, bytes);
            }
        }
        Ok(())
    }
}

fn is_root(p: &Path) -> bool {
    p.as_os_str().is_empty() || p == Path::new("/")
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // A test thread that panicked while holding the lock leaves the model
    // consistent (every mutation is a few in-memory steps), so carry on.
    state.lock().unwrap_or_else(|p| p.into_inner())
}

fn write_into(buf: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let off = offset as usize;
    if buf.len() < off + data.len() {
        buf.resize(off + data.len(), 0);
    }
    buf[off..off + data.len()].copy_from_slice(data);
}

/// Copy into `data` (which sits at `data_off`) the part of `bytes` (at
/// `bytes_off`) that overlaps it.
fn overlay(data: &mut [u8], data_off: u64, bytes_off: u64, bytes: &[u8]) {
    let start = data_off.max(bytes_off);
    let end = (data_off + data.len() as u64).min(bytes_off + bytes.len() as u64);
    if start < end {
        let (s, e) = ((start - data_off) as usize, (end - data_off) as usize);
        let b = (start - bytes_off) as usize;
        data[s..e].copy_from_slice(&bytes[b..b + (e - s)]);
    }
}

fn apply_op(buf: &mut Vec<u8>, op: &PendingOp) {
    match op {
        PendingOp::Write { offset, data } => write_into(buf, *offset, data),
        PendingOp::SetLen(len) => buf.resize(*len as usize, 0),
    }
}

fn err(op: &'static str, path: &Path, errno: i32) -> IoError {
    IoError::os(op, path, std::io::Error::from_raw_os_error(errno))
}

impl State {
    /// Count a mutating operation: apply fault rules and the crash clock.
    /// `Err` means the operation must not take effect.
    fn begin(&mut self, kind: OpKind, op: &'static str, path: &Path) -> Result<()> {
        if self.down {
            return Err(IoError::Crashed);
        }
        if let Some(n) = self.crash_after {
            if n == 0 {
                self.down = true;
                self.crash_op = Some(CrashOp {
                    op,
                    path: path.to_path_buf(),
                    offset: None,
                });
                return Err(IoError::Crashed);
            }
            self.crash_after = Some(n - 1);
        }
        self.op_count += 1;
        let mut failure = None;
        for rule in &mut self.fail_rules {
            let on_path = rule.path.as_deref().is_none_or(|p| p == path);
            if on_path && (rule.kind == OpKind::Any || rule.kind == kind) {
                if rule.remaining == 0 && failure.is_none() {
                    failure = Some(rule.errno);
                    rule.remaining = u64::MAX;
                } else if rule.remaining != u64::MAX {
                    rule.remaining -= 1;
                }
            }
        }
        self.fail_rules.retain(|r| r.remaining != u64::MAX);
        match failure {
            Some(errno) => Err(err(op, path, errno)),
            None => Ok(()),
        }
    }

    fn check_alive(&self, generation: u64) -> Result<()> {
        if self.down || generation != self.generation {
            return Err(IoError::Crashed);
        }
        Ok(())
    }

    fn file_ino(&self, path: &Path) -> Result<u64> {
        match self.live_ns.get(path) {
            Some(Entry::File(ino)) => Ok(*ino),
            _ => Err(IoError::NotFound {
                path: path.to_path_buf(),
            }),
        }
    }

    fn parent_exists(&self, path: &Path) -> bool {
        match path.parent() {
            None => true,
            Some(p) if is_root(p) => true,
            Some(p) => self.live_ns.get(p) == Some(&Entry::Dir),
        }
    }

    /// Make the pending writes of `ino` that overlap `[offset, offset+len)`
    /// durable — and every pending op before them, to keep order.
    fn flush_overlapping(&mut self, ino: u64, offset: u64, len: u64) {
        let inode = self.inodes.get_mut(&ino).expect("inode");
        let last = inode.pending.iter().rposition(|op| match op {
            PendingOp::Write { offset: o, data } => {
                *o < offset + len && offset < *o + data.len() as u64
            }
            PendingOp::SetLen(_) => false,
        });
        if let Some(last) = last {
            let ops: Vec<PendingOp> = inode.pending.drain(..=last).collect();
            for op in ops {
                self.make_durable(ino, &op);
            }
        }
    }

    /// Apply `op` to the durable image, unless the disk lies about it.
    fn make_durable(&mut self, ino: u64, op: &PendingOp) {
        if self.lie_probability > 0.0 && self.rng.random_bool(self.lie_probability) {
            self.stats.lies += 1;
            return;
        }
        apply_op(&mut self.inodes.get_mut(&ino).expect("inode").durable, op);
    }

    /// Record a write in the live image; `durable` applies it to the durable
    /// image too (durable open modes).
    fn write(&mut self, ino: u64, mut offset: u64, data: &[u8], durable: bool) {
        self.stats.writes += 1;
        let len = data.len() as u64;
        if self.misdirect_probability > 0.0 && self.rng.random_bool(self.misdirect_probability) {
            let file_len = self.inodes[&ino].live.len() as u64;
            if len > 0 && file_len >= 2 * len {
                let slots = file_len / len;
                let mut target = self.rng.random_range(0..slots) * len;
                if target == offset {
                    target = (target + len) % (slots * len);
                }
                offset = target;
                self.stats.misdirects += 1;
            }
        }
        let op = PendingOp::Write {
            offset,
            data: data.to_vec(),
        };
        apply_op(&mut self.inodes.get_mut(&ino).expect("inode").live, &op);
        if durable {
            self.flush_overlapping(ino, offset, len);
            self.make_durable(ino, &op);
        } else {
            self.inodes.get_mut(&ino).expect("inode").pending.push(op);
        }
    }

    fn sync_file(&mut self, ino: u64) {
        self.stats.syncs += 1;
        let ops: Vec<PendingOp> = self
            .inodes
            .get_mut(&ino)
            .expect("inode")
            .pending
            .drain(..)
            .collect();
        for op in ops {
            self.make_durable(ino, &op);
        }
    }

    fn sync_dir(&mut self, dir: &Path) {
        self.stats.dir_syncs += 1;
        let (now, later): (Vec<PathBuf>, Vec<PathBuf>) = std::mem::take(&mut self.pending_dirs)
            .into_iter()
            .partition(|d| d.parent() == Some(dir));
        self.pending_dirs = later;
        for d in now {
            self.durable_ns.insert(d, Entry::Dir);
        }
        if let Some(last) = self.pending_ns.iter().rposition(|op| op.touches_dir(dir)) {
            let ops: Vec<NsOp> = self.pending_ns.drain(..=last).collect();
            for op in ops {
                op.apply(&mut self.durable_ns);
            }
        }
    }

    /// The page cache and the namespace survive as they are: nothing
    /// becomes durable, nothing is lost.
    fn crash_process(&mut self) {}

    fn crash_power(&mut self) {
        let keep_ns = self.rng.random_range(0..=self.pending_ns.len());
        for op in std::mem::take(&mut self.pending_ns)
            .into_iter()
            .take(keep_ns)
        {
            op.apply(&mut self.durable_ns);
        }
        for dir in std::mem::take(&mut self.pending_dirs) {
            if self.rng.random_bool(0.5) {
                self.durable_ns.insert(dir, Entry::Dir);
            }
        }
        // A name under a directory that did not survive is gone with it.
        let orphans: Vec<PathBuf> = self
            .durable_ns
            .keys()
            .filter(|p| {
                p.ancestors()
                    .skip(1)
                    .any(|a| !is_root(a) && self.durable_ns.get(a) != Some(&Entry::Dir))
            })
            .cloned()
            .collect();
        for p in orphans {
            self.durable_ns.remove(&p);
        }
        self.live_ns = self.durable_ns.clone();
        let mut inos: Vec<u64> = self.inodes.keys().copied().collect();
        inos.sort_unstable();
        for ino in inos {
            let pending = std::mem::take(&mut self.inodes.get_mut(&ino).expect("inode").pending);
            let mut image = std::mem::take(&mut self.inodes.get_mut(&ino).expect("inode").durable);
            for op in pending {
                self.apply_at_power_loss(&mut image, op);
            }
            let inode = self.inodes.get_mut(&ino).expect("inode");
            inode.live = image.clone();
            inode.durable = image;
        }
    }

    /// Keep, drop or tear one pending operation at a power cut.
    fn apply_at_power_loss(&mut self, image: &mut Vec<u8>, op: PendingOp) {
        let choice = self.rng.random_range(0..3u8);
        match (choice, op) {
            (0, op) => apply_op(image, &op),
            (1, _) => {}
            (_, PendingOp::SetLen(len)) => image.resize(len as usize, 0),
            (_, PendingOp::Write { offset, data }) => {
                // Torn: each sector (aligned on absolute file offsets) is
                // independently the new or the old contents.
                let end = offset + data.len() as u64;
                let mut pos = offset;
                while pos < end {
                    let sector_end = ((pos / SECTOR_BYTES as u64) + 1) * SECTOR_BYTES as u64;
                    let piece_end = sector_end.min(end);
                    if self.rng.random_bool(0.5) {
                        let s = (pos - offset) as usize;
                        let e = (piece_end - offset) as usize;
                        write_into(image, pos, &data[s..e]);
                    }
                    pos = piece_end;
                }
            }
        }
    }
}

impl Vfs for SimVfs {
    fn open(&self, path: &Path, options: OpenOptions) -> Result<Arc<dyn VfsFile>> {
        let mut st = self.lock_state();
        if st.down {
            return Err(IoError::Crashed);
        }
        let ino = match st.live_ns.get(path).copied() {
            Some(Entry::File(_)) if options.create_new => {
                return Err(err("open", path, libc::EEXIST));
            }
            Some(Entry::File(ino)) => ino,
            Some(Entry::Dir) => return Err(err("open", path, libc::EISDIR)),
            None if options.create && !options.read_only => {
                if !st.parent_exists(path) {
                    return Err(IoError::NotFound {
                        path: path.to_path_buf(),
                    });
                }
                st.begin(OpKind::Any, "create", path)?;
                st.stats.creates += 1;
                let ino = st.next_ino;
                st.next_ino += 1;
                st.inodes.insert(ino, Inode::default());
                st.live_ns.insert(path.to_path_buf(), Entry::File(ino));
                st.pending_ns.push(NsOp::Create {
                    path: path.to_path_buf(),
                    ino,
                });
                ino
            }
            None => {
                return Err(IoError::NotFound {
                    path: path.to_path_buf(),
                })
            }
        };
        Ok(Arc::new(SimFile {
            state: Arc::clone(&self.state),
            ino,
            path: path.to_path_buf(),
            mode: options.mode,
            read_only: options.read_only,
            generation: st.generation,
            block: st.block_size,
        }))
    }

    fn create_dir_all(&self, path: &Path) -> Result<()> {
        let mut st = self.lock_state();
        if st.down {
            return Err(IoError::Crashed);
        }
        for dir in path.ancestors() {
            if dir.as_os_str().is_empty() || dir == Path::new("/") {
                continue;
            }
            match st.live_ns.get(dir) {
                Some(Entry::File(_)) => return Err(err("create directory", dir, libc::ENOTDIR)),
                Some(Entry::Dir) => {}
                None => {
                    st.live_ns.insert(dir.to_path_buf(), Entry::Dir);
                    st.pending_dirs.push(dir.to_path_buf());
                }
            }
        }
        Ok(())
    }

    fn read_dir(&self, path: &Path) -> Result<Vec<String>> {
        let st = self.lock_state();
        if st.down {
            return Err(IoError::Crashed);
        }
        if st.live_ns.get(path) != Some(&Entry::Dir) {
            return Err(IoError::NotFound {
                path: path.to_path_buf(),
            });
        }
        let names = st
            .live_ns
            .keys()
            .filter(|p| p.parent() == Some(path))
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        Ok(names)
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut st = self.lock_state();
        st.begin(OpKind::Any, "rename", from)?;
        let entry = st.file_ino(from)?;
        if !st.parent_exists(to) {
            return Err(IoError::NotFound {
                path: to.to_path_buf(),
            });
        }
        st.stats.renames += 1;
        st.live_ns.remove(from);
        st.live_ns.insert(to.to_path_buf(), Entry::File(entry));
        st.pending_ns.push(NsOp::Rename {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
        });
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        let mut st = self.lock_state();
        st.begin(OpKind::Any, "remove", path)?;
        st.file_ino(path)?;
        st.stats.removes += 1;
        st.live_ns.remove(path);
        st.pending_ns.push(NsOp::Remove {
            path: path.to_path_buf(),
        });
        Ok(())
    }

    fn sync_dir(&self, path: &Path) -> Result<()> {
        let mut st = self.lock_state();
        st.begin(OpKind::Sync, "fsync directory", path)?;
        if !is_root(path) && st.live_ns.get(path) != Some(&Entry::Dir) {
            return Err(IoError::NotFound {
                path: path.to_path_buf(),
            });
        }
        st.sync_dir(path);
        Ok(())
    }

    fn lock(&self, path: &Path) -> Result<Box<dyn LockGuard>> {
        let mut st = self.lock_state();
        if st.down {
            return Err(IoError::Crashed);
        }
        if st.locks.contains_key(path) {
            return Err(IoError::Locked {
                path: path.to_path_buf(),
            });
        }
        let id = st.next_lock_id;
        st.next_lock_id += 1;
        st.locks.insert(path.to_path_buf(), id);
        Ok(Box::new(SimLock {
            state: Arc::clone(&self.state),
            path: path.to_path_buf(),
            id,
        }))
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        let st = self.lock_state();
        if st.down {
            return Err(IoError::Crashed);
        }
        Ok(is_root(path) || st.live_ns.contains_key(path))
    }

    fn free_space(&self, _path: &Path) -> Result<Option<u64>> {
        let (total, available) = self.lock_state().space;
        Ok((total > 0).then_some(available))
    }

    fn block_size(&self, _path: &Path) -> Result<usize> {
        Ok(self.lock_state().block_size)
    }
}

#[derive(Debug)]
struct SimLock {
    state: Arc<Mutex<State>>,
    path: PathBuf,
    id: u64,
}

impl LockGuard for SimLock {}

impl Drop for SimLock {
    fn drop(&mut self) {
        let mut st = lock(&self.state);
        // After a crash the lock table was cleared and may hold a newer lock
        // on the same path: remove only our own.
        if st.locks.get(&self.path) == Some(&self.id) {
            st.locks.remove(&self.path);
        }
    }
}

#[derive(Debug)]
struct SimFile {
    state: Arc<Mutex<State>>,
    ino: u64,
    path: PathBuf,
    mode: OpenMode,
    read_only: bool,
    generation: u64,
    block: usize,
}

impl SimFile {
    fn state(&self) -> Result<MutexGuard<'_, State>> {
        let st = lock(&self.state);
        st.check_alive(self.generation)?;
        Ok(st)
    }

    fn check(&self, addr: usize, len: usize, offset: u64) -> Result<()> {
        if self.mode.is_direct() {
            check_direct_alignment(self.block, addr, len, offset)?;
        }
        if self.read_only {
            return Err(err("write", &self.path, libc::EBADF));
        }
        Ok(())
    }

    /// One write: counted, fault-checked, crash-point aware.
    fn do_write(&self, op: &'static str, buf: &[u8], offset: u64, durable: bool) -> Result<()> {
        let mut st = self.state()?;
        let crash_now = st.crash_after == Some(0);
        if let Err(e) = st.begin(OpKind::Write, op, &self.path) {
            if let Some(c) = st.crash_op.as_mut().filter(|_| crash_now) {
                c.offset = Some(offset);
            }
            // A write hit by the crash point may have partly reached the
            // disk: leave it pending so the power cut keeps, drops or tears it.
            if crash_now && st.rng.random_bool(0.5) {
                st.write(self.ino, offset, buf, false);
            }
            return Err(e);
        }
        let durable = durable || self.mode.writes_are_durable();
        let p = st.in_flight_probability;
        if durable && p > 0.0 && st.misdirect_probability == 0.0 && st.rng.random_bool(p) {
            st.stats.in_flight += 1;
            let wait = std::time::Duration::from_micros(st.rng.random_range(0..40));
            st.write(self.ino, offset, buf, false);
            drop(st);
            std::thread::sleep(wait);
            // Crashed meanwhile: the write stays pending.
            let mut st = self.state()?;
            st.flush_overlapping(self.ino, offset, buf.len() as u64);
            return Ok(());
        }
        st.write(self.ino, offset, buf, durable);
        Ok(())
    }
}

impl VfsFile for SimFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        if self.mode.is_direct() {
            check_direct_alignment(self.block, buf.as_ptr() as usize, buf.len(), offset)?;
        }
        let st = self.state()?;
        let data = &st.inodes[&self.ino].live;
        let off = offset as usize;
        if off >= data.len() {
            return Ok(0);
        }
        let n = buf.len().min(data.len() - off);
        buf[..n].copy_from_slice(&data[off..off + n]);
        Ok(n)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.check(buf.as_ptr() as usize, buf.len(), offset)?;
        self.do_write("write", buf, offset, false)
    }

    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> Result<()> {
        let mut off = offset;
        for b in bufs {
            self.check(b.as_ptr() as usize, b.len(), off)?;
            off += b.len() as u64;
        }
        // One system call, one operation: join the pieces.
        let joined: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
        self.do_write("write", &joined, offset, false)
    }

    fn write_dsync_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.check(buf.as_ptr() as usize, buf.len(), offset)?;
        self.do_write("write", buf, offset, true)
    }

    fn allocate(&self, offset: u64, len: u64) -> Result<()> {
        let mut st = self.state()?;
        st.begin(OpKind::Any, "fallocate", &self.path)?;
        let inode = st.inodes.get_mut(&self.ino).expect("inode");
        let end = offset + len;
        if end > inode.live.len() as u64 {
            inode.live.resize(end as usize, 0);
            inode.pending.push(PendingOp::SetLen(end));
        }
        Ok(())
    }

    fn zero_fill(&self, offset: u64, len: u64) -> Result<()> {
        let zeros = vec![0u8; len as usize];
        self.do_write("zero-fill", &zeros, offset, false)
    }

    fn set_len(&self, len: u64) -> Result<()> {
        let mut st = self.state()?;
        st.begin(OpKind::Any, "truncate", &self.path)?;
        let inode = st.inodes.get_mut(&self.ino).expect("inode");
        inode.live.resize(len as usize, 0);
        inode.pending.push(PendingOp::SetLen(len));
        Ok(())
    }

    fn sync(&self, kind: SyncKind) -> Result<()> {
        let op = match kind {
            SyncKind::All => "fsync",
            SyncKind::Data => "fdatasync",
        };
        let mut st = self.state()?;
        if let Err(e) = st.begin(OpKind::Sync, op, &self.path) {
            // Linux marks the pages of a failed writeback clean: still
            // cached and readable, never written by a later sync.
            let p = st.failed_sync_drop_probability;
            if !matches!(e, IoError::Crashed) && p > 0.0 && st.rng.random_bool(p) {
                st.stats.failed_sync_drops += 1;
                let inode = st.inodes.get_mut(&self.ino).expect("inode");
                inode
                    .pending
                    .retain(|op| matches!(op, PendingOp::SetLen(_)));
            }
            return Err(e);
        }
        st.sync_file(self.ino);
        Ok(())
    }

    fn evict_clean_pages(&self) -> Result<()> {
        let mut st = self.state()?;
        // Clean pages are the durable image; dirty ones are the pending
        // writes. What a failed sync dropped is in neither: it goes.
        let inode = st.inodes.get_mut(&self.ino).expect("inode");
        let mut live = inode.durable.clone();
        for op in &inode.pending {
            apply_op(&mut live, op);
        }
        inode.live = live;
        Ok(())
    }

    fn len(&self) -> Result<u64> {
        Ok(self.state()?.inodes[&self.ino].live.len() as u64)
    }

    fn map(&self, len: u64) -> Result<Option<Arc<dyn FileMap>>> {
        // Like `mmap`, which needs a descriptor of a live file.
        drop(self.state()?);
        Ok(Some(Arc::new(SimMap {
            state: Arc::clone(&self.state),
            ino: self.ino,
            path: self.path.clone(),
            generation: self.generation,
            len,
        })))
    }

    fn mode(&self) -> OpenMode {
        self.mode
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

/// The twin of a real map: each read copies what the file's live image
/// holds now, which is what a `MAP_SHARED` map of the OS page cache would
/// show (every completed write, synced or not). Like the file's handle, it
/// fails once the layer crashed.
#[derive(Debug)]
struct SimMap {
    state: Arc<Mutex<State>>,
    ino: u64,
    path: PathBuf,
    generation: u64,
    len: u64,
}

impl FileMap for SimMap {
    fn len(&self) -> u64 {
        self.len
    }

    fn read(&self, offset: u64, len: usize) -> Result<MapBytes<'_>> {
        if !within(self.len, offset, len) {
            return Err(past_map(&self.path, offset));
        }
        let mut st = lock(&self.state);
        st.check_alive(self.generation)?;
        st.stats.mapped_reads += 1;
        let data = &st.inodes[&self.ino].live;
        // A real map raises SIGBUS here: the caller broke the contract.
        assert!(
            within(data.len() as u64, offset, len),
            "a mapped read of {len} bytes at {offset} past the end of {} ({} bytes): SIGBUS \
             on a real map",
            self.path.display(),
            data.len()
        );
        let at = offset as usize;
        Ok(MapBytes::Copied(data[at..at + len].to_vec()))
    }
}

#[cfg(test)]
#[path = "sim_tests.rs"]
mod tests;
