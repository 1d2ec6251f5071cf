//! The damaged store, opened for reading only: its lock (taken only to
//! know nobody has the store open), its data file and its two meta slots;
//! and the check that the new store's path is fit to be written.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::super::error::{DbError, Result};
use super::super::files::{DATA_FILE, LOCK_FILE};
use super::super::meta::{self, Meta, MetaError};
use crate::btree::{MAX_PAGE_BYTES, MIN_PAGE_BYTES};
use crate::io::{IoError, LockGuard, OpenMode, OpenOptions, Vfs, VfsFile};

/// The damaged store's data file and meta slots.
pub(super) struct Source {
    pub data: Arc<dyn VfsFile>,
    /// Slot 0's and slot 1's meta, or why each is not valid.
    pub metas: [std::result::Result<Meta, MetaError>; 2],
    /// Held while salvage reads, so that no process opens the store and
    /// changes its files meanwhile. `None` when the lock file is missing
    /// or cannot be opened for writing (a read-only copy): nothing is
    /// created to take it.
    _lock: Option<Box<dyn LockGuard>>,
}

/// Open the store at `from` for reading: refuse a path that holds no data
/// file, and a store another process has open.
pub(super) fn open(vfs: &dyn Vfs, from: &Path) -> Result<Source> {
    let not_a_store = |reason: &str| DbError::NotAStore {
        path: from.to_path_buf(),
        reason: reason.into(),
    };
    if !vfs.exists(from)? {
        return Err(not_a_store("no such directory"));
    }
    let data_path = from.join(DATA_FILE);
    if !vfs.exists(&data_path)? {
        return Err(not_a_store(&format!("no {DATA_FILE} in it")));
    }
    let lock_path = from.join(LOCK_FILE);
    let lock = if vfs.exists(&lock_path)? {
        match vfs.lock(&lock_path) {
            Ok(guard) => Some(guard),
            Err(IoError::Locked { .. }) => return Err(super::super::holder::refused(vfs, from)),
            // A lock file that cannot be opened for writing (a read-only
            // copy of the store): no process can hold it for writing
            // either, so read without it.
            Err(_) => None,
        }
    } else {
        None
    };
    let data = vfs.open(
        &data_path,
        OpenOptions::new(OpenMode::Buffered).read_only(true),
    )?;
    let metas = read_slots(data.as_ref())?;
    Ok(Source {
        data,
        metas,
        _lock: lock,
    })
}

/// Decode both meta slots. Slot 1 is page 1, at the page size: the one
/// slot 0 states, or, when slot 0 is not valid, the first page size from
/// 4 KiB to 64 KiB where a valid meta stating that size lies (as the
/// store's open does).
fn read_slots(data: &dyn VfsFile) -> Result<[std::result::Result<Meta, MetaError>; 2]> {
    let len = data.len()?;
    let read = |at: u64| meta::read_meta_at(data, len, at);
    let slot0 = Meta::decode(&read(0)?);
    let sizes: Vec<u64> = match slot0 {
        Ok(m) => vec![u64::from(m.page_size)],
        Err(_) => std::iter::successors(Some(MIN_PAGE_BYTES as u64), |s| Some(s * 2))
            .take_while(|&s| s <= MAX_PAGE_BYTES as u64)
            .collect(),
    };
    let mut slot1 = Meta::decode(&read(sizes[0])?);
    for &size in &sizes {
        let m = Meta::decode(&read(size)?);
        if m.is_ok_and(|m| u64::from(m.page_size) == size) {
            slot1 = m;
            break;
        }
    }
    if let (Ok(a), Ok(b)) = (&slot0, &slot1) {
        if a.page_size != b.page_size {
            // Both pass their checksums but disagree on the page size: a
            // slot read at the wrong offset cannot be valid, so slot 1 is
            // not where slot 0 says.
            slot1 = Err(MetaError::BadGeometry {
                page_size: b.page_size,
                page_count: b.page_count,
            });
        }
    }
    Ok([slot0, slot1])
}

/// Refuse a target that exists and is not an empty directory, or that
/// lies inside the damaged store (writing there would change it).
pub(super) fn check_target(vfs: &dyn Vfs, from: &Path, to: &Path) -> Result<()> {
    let refuse = |reason: String| DbError::SalvageTarget {
        path: to.to_path_buf(),
        reason,
    };
    if inside(to, from) {
        return Err(refuse(format!(
            "it is inside the damaged store {}, which salvage must not change",
            from.display()
        )));
    }
    if !vfs.exists(to)? {
        return Ok(());
    }
    match vfs.read_dir(to) {
        Ok(names) if names.is_empty() => Ok(()),
        Ok(names) => Err(refuse(format!(
            "it is not empty ({} entries); salvage writes a new store into an empty or new \
             directory",
            names.len()
        ))),
        Err(_) => Err(refuse("it exists and is not a directory".into())),
    }
}

/// Whether `path` is `dir` or lies under it, comparing what the file
/// system resolves (symbolic links, `..`) where it can. (Backups refuse
/// such a target too.)
pub(in crate::db) fn inside(path: &Path, dir: &Path) -> bool {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    resolve(path).starts_with(&dir)
}

/// `path` with its longest existing prefix resolved by the file system.
fn resolve(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut head = path.to_path_buf();
    loop {
        if let Ok(real) = std::fs::canonicalize(&head) {
            return rest.iter().rev().fold(real, |p, c| p.join(c));
        }
        match (head.file_name().map(|c| c.to_os_string()), head.parent()) {
            (Some(c), Some(parent)) => {
                rest.push(c);
                head = if parent.as_os_str().is_empty() {
                    PathBuf::from(".")
                } else {
                    parent.to_path_buf()
                };
            }
            _ => return path.to_path_buf(),
        }
    }
}
