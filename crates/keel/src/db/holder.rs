//! Who holds what: which thread holds the writer slot, and who holds a
//! store's lock.
//!
//! ## The writer slot
//!
//! A write transaction takes the slot at its first read and keeps it until
//! it ends. If the thread it runs on then waits for the slot itself — a
//! second write transaction's read or commit, `checkpoint`, `close` — it
//! would wait forever: the slot records the thread that took it, and
//! those calls fail with [`DbError::WouldDeadlock`] instead.
//!
//! The cost: a thread-local read where the slot is taken, where a
//! transaction holding it is used (to follow one moved to another thread)
//! and where a caller would wait for it; nothing on the read path, and on
//! a blind commit's only when it would queue while the slot is held.
//!
//! ## The store's lock
//!
//! One `Database` at a time may have a store open, in one process: the
//! `LOCK` file's `flock` says so. A refused open says who holds it, which
//! is rarely obvious: a `Database` that was closed keeps the lock while
//! read transactions of it are alive (they read its files), and in
//! another process the holder's id is what a user needs. So this process
//! keeps a registry of the stores it has open (by directory, with what
//! holds each), and the holder writes its process id into `LOCK`, which a
//! refused opener reads back.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use super::error::{DbError, LockHolder, Result};
use super::files::LOCK_FILE;
use super::slot::Slot;
use super::state::Shared;
use super::sync::{lock, this_thread};
use crate::io::{IoError, LockGuard, OpenMode, OpenOptions, Vfs, VfsFile};

impl Slot {
    /// Whether this thread holds the slot.
    pub(super) fn held_here(&self) -> bool {
        self.holder.is_some_and(|h| h == this_thread())
    }

    /// Record this thread as the slot's holder.
    pub(super) fn hold_here(&mut self) {
        self.holder = Some(this_thread());
    }
}

impl Shared {
    /// Whether this thread holds the writer slot.
    pub(crate) fn writer_held_here(&self) -> bool {
        lock(&self.writer).held_here()
    }

    /// Fail with [`DbError::WouldDeadlock`] (`what` would wait) if this
    /// thread holds the writer slot.
    pub(crate) fn refuse_if_holder(&self, what: &'static str) -> Result<()> {
        match self.writer_held_here() {
            true => Err(DbError::WouldDeadlock(what)),
            false => Ok(()),
        }
    }

    /// Make this thread the slot's holder: the write transaction holding
    /// it is used on this thread now (it was moved).
    pub(crate) fn hold_here(&self) {
        lock(&self.writer).hold_here();
    }
}

/// A store this process has open.
struct Held {
    /// Its directory, canonical where the file system resolves it.
    dir: PathBuf,
    shared: Weak<Shared>,
    /// Whether its `Database` is still open (not closed nor dropped).
    database_open: bool,
}

/// The stores this process has open (entries whose `Shared` is gone are
/// stale: pruned at the next change).
static HELD: Mutex<Vec<Held>> = Mutex::new(Vec::new());

/// `dir` as the registry knows it.
fn canonical(dir: &Path) -> PathBuf {
    std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf())
}

/// Note that a `Database` opened the store of `shared`.
pub(crate) fn opened(shared: &Arc<Shared>) {
    let dir = canonical(&shared.path);
    let mut held = lock(&HELD);
    held.retain(|h| h.shared.strong_count() > 0);
    held.push(Held {
        dir,
        shared: Arc::downgrade(shared),
        database_open: true,
    });
}

/// Note that the `Database` of `shared` was closed or dropped (its
/// transactions may still hold the store).
pub(crate) fn closed(shared: &Arc<Shared>) {
    let mut held = lock(&HELD);
    for h in held.iter_mut() {
        if std::ptr::eq(h.shared.as_ptr(), Arc::as_ptr(shared)) {
            h.database_open = false;
        }
    }
}

/// The store's lock, with this process's id written into the file while
/// it is held.
#[derive(Debug)]
struct PidLock {
    /// The `flock`: released once `drop` has emptied the file.
    _lock: Box<dyn LockGuard>,
    file: Option<Arc<dyn VfsFile>>,
}

impl LockGuard for PidLock {}

impl Drop for PidLock {
    fn drop(&mut self) {
        // Left behind, the id would name this process after it is gone.
        if let Some(f) = &self.file {
            let _ = f.set_len(0);
        }
    }
}

/// Take the lock of the store in `dir` (its `LOCK` file), and write this
/// process's id into it; `Locked`, saying who holds it, when refused.
pub(crate) fn lock_store(vfs: &dyn Vfs, dir: &Path) -> Result<Box<dyn LockGuard>> {
    lock_store_with(vfs, dir, true)
}

/// [`lock_store`] in one attempt, with no retry while it is held (see
/// [`Vfs::try_lock`]).
pub(crate) fn try_lock_store(vfs: &dyn Vfs, dir: &Path) -> Result<Box<dyn LockGuard>> {
    lock_store_with(vfs, dir, false)
}

fn lock_store_with(vfs: &dyn Vfs, dir: &Path, retry: bool) -> Result<Box<dyn LockGuard>> {
    let path = dir.join(LOCK_FILE);
    let taken = match retry {
        true => vfs.lock(&path),
        false => vfs.try_lock(&path),
    };
    let guard = match taken {
        Ok(guard) => guard,
        Err(IoError::Locked { .. }) => return Err(refused(vfs, dir)),
        Err(e) => return Err(e.into()),
    };
    // The id is a help for a refused opener, not part of the store: a
    // file system that refuses the write costs only that help.
    let file = vfs
        .open(&path, OpenOptions::new(OpenMode::Buffered))
        .ok()
        .filter(|f| {
            let id = format!("{}\n", std::process::id());
            f.set_len(0).is_ok() && f.write_at(id.as_bytes(), 0).is_ok()
        });
    Ok(Box::new(PidLock { _lock: guard, file }))
}

/// The error for an open of the store in `dir` refused by its lock: who
/// holds it.
pub(crate) fn refused(vfs: &dyn Vfs, dir: &Path) -> DbError {
    DbError::Locked {
        path: dir.to_path_buf(),
        holder: holder_of(vfs, dir),
    }
}

fn holder_of(vfs: &dyn Vfs, dir: &Path) -> LockHolder {
    let canonical = canonical(dir);
    let live: Vec<(Arc<Shared>, bool)> = lock(&HELD)
        .iter()
        .filter(|h| h.dir == canonical)
        .filter_map(|h| h.shared.upgrade().map(|s| (s, h.database_open)))
        .collect();
    // The one on the same file system (tests open stores of one path on
    // several simulated ones); on the real one, where each open makes its
    // own `Vfs`, the one there is.
    let same_vfs = |s: &Arc<Shared>| std::ptr::addr_eq(Arc::as_ptr(&s.options.vfs), vfs);
    let live = match live.iter().position(|(s, _)| same_vfs(s)) {
        Some(i) => live.into_iter().nth(i),
        None if live.len() == 1 => live.into_iter().next(),
        None => None,
    };
    if let Some((shared, database_open)) = live {
        if database_open {
            return LockHolder::OpenDatabase {
                read_only: shared.read_only,
            };
        }
        let [begun, ended] = shared.read_txns.sum();
        return LockHolder::ClosedDatabase {
            read_transactions: begun.saturating_sub(ended) as usize,
        };
    }
    match lock_file_pid(vfs, &dir.join(LOCK_FILE)) {
        Some(pid) if pid == std::process::id() => LockHolder::ThisProcess,
        pid => LockHolder::OtherProcess {
            pid: pid.filter(|&p| process_exists(p)),
        },
    }
}

/// The process id written in the lock file at `path`, if any.
pub(super) fn lock_file_pid(vfs: &dyn Vfs, path: &Path) -> Option<u32> {
    let f = vfs
        .open(path, OpenOptions::new(OpenMode::Buffered).read_only(true))
        .ok()?;
    let mut buf = [0u8; 16];
    let n = f.read_at(&mut buf, 0).ok()?;
    std::str::from_utf8(&buf[..n]).ok()?.trim().parse().ok()
}

/// Whether process `pid` exists (an id left by a process that died, in
/// a lock an older Keel now holds, names nobody).
fn process_exists(pid: u32) -> bool {
    if cfg!(target_os = "linux") {
        return Path::new("/proc").join(pid.to_string()).exists();
    }
    true
}
