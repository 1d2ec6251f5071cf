//! Putting a store's compacted copy in its place, crash-safe at every step
//! (`keel db compact`).
//!
//! The copy is built in a sibling directory, `.NAME.compact-PID`, on the
//! same file system as the store `NAME`; every file and directory of it is
//! fsynced, and so is the parent. Then the two directories trade places:
//!
//! * **Exchange** (the default): one `renameat2(RENAME_EXCHANGE)` swaps the
//!   two names atomically (Linux 3.15; ext4, XFS, btrfs, tmpfs, f2fs), so
//!   the name `NAME` always holds a whole store, the old one or the new
//!   one, whether a crash comes before the parent's fsync or after. The
//!   old store is then `.NAME.compact-PID`, removed.
//! * **Two renames** where the file system refuses the exchange (`EINVAL`,
//!   `ENOSYS`, `EOPNOTSUPP`): a marker file `.NAME.compact-PID.swap` is
//!   written and made durable first (it says the copy is whole), then
//!   `NAME` becomes `.NAME.compact-PID.old` and the copy becomes `NAME`.
//!   A crash between the two leaves no `NAME`: [`finish_interrupted`],
//!   which every `keel db` command runs when a store path is missing,
//!   renames the copy into place. The marker goes last.
//!
//! Whatever a crash interrupts, `NAME` holds (or [`finish_interrupted`]
//! restores) the old store or the new one, whole, and no sibling is ever
//! taken for the store; [`clean`] removes what an interrupted compact left
//! beside it, once the store is locked.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use rustix::fs::{renameat_with, RenameFlags, CWD};
use rustix::io::Errno;

/// Forces the two-rename protocol when set to `renames` (tests; not in
/// `--help`, documented in docs/testing.md).
pub const SWAP_ENV: &str = "KEEL_COMPACT_SWAP";

/// How the copy was put in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// One `renameat2(RENAME_EXCHANGE)`.
    Exchange,
    /// Two renames behind a marker file.
    Renames,
}

/// The names of a compaction of one store by this process.
pub struct Paths {
    /// The store's directory, symbolic links resolved (renaming a link
    /// would move the link, not the store).
    pub store: PathBuf,
    pub parent: PathBuf,
    name: OsString,
    pid: u32,
}

impl Paths {
    pub fn of(store: &Path) -> io::Result<Paths> {
        let store = std::fs::canonicalize(store)?;
        let (Some(parent), Some(name)) = (store.parent(), store.file_name()) else {
            return Err(io::Error::other(
                "the file system's root cannot be compacted",
            ));
        };
        Ok(Paths {
            parent: parent.to_path_buf(),
            name: name.to_os_string(),
            pid: std::process::id(),
            store: store.clone(),
        })
    }

    /// `.NAME.compact-`: the start of every sibling's name.
    fn prefix(name: &OsString) -> String {
        format!(".{}.compact-", name.to_string_lossy())
    }

    fn sibling(&self, suffix: &str) -> PathBuf {
        let name = format!("{}{}{suffix}", Self::prefix(&self.name), self.pid);
        self.parent.join(name)
    }

    /// Where the copy is built.
    pub fn copy(&self) -> PathBuf {
        self.sibling("")
    }

    /// Where the two-rename protocol moves the old store.
    fn old(&self) -> PathBuf {
        self.sibling(".old")
    }

    /// The two-rename protocol's marker.
    fn marker(&self) -> PathBuf {
        self.sibling(".swap")
    }
}

/// A sibling an earlier compact left.
#[derive(Debug)]
struct Leftover {
    path: PathBuf,
    pid: u32,
    /// `""` (a copy, or the old store after an exchange), `.old` or
    /// `.swap`.
    suffix: String,
}

/// The siblings of the store `name` in `parent`.
fn leftovers(parent: &Path, name: &OsString) -> io::Result<Vec<Leftover>> {
    let prefix = Paths::prefix(name);
    let mut found = Vec::new();
    for entry in std::fs::read_dir(parent)? {
        let entry = entry?;
        let file = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = file.strip_prefix(&prefix) else {
            continue;
        };
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (pid, suffix) = rest.split_at(digits);
        let Ok(pid) = pid.parse() else { continue };
        if !["", ".old", ".swap"].contains(&suffix) {
            continue;
        }
        found.push(Leftover {
            path: entry.path(),
            pid,
            suffix: suffix.to_owned(),
        });
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

/// Whether process `pid`, not this one, is running (a compact under way
/// owns its siblings).
fn running(pid: u32) -> bool {
    pid != std::process::id() && Path::new("/proc").join(pid.to_string()).exists()
}

/// What [`clean`] did.
#[derive(Debug, Default, serde::Serialize)]
pub struct Cleaned {
    /// Siblings removed: left by a compact that did not finish.
    pub removed: Vec<String>,
    /// Siblings of a compact whose process is still running, left alone.
    pub kept: Vec<String>,
}

/// Remove what interrupted compacts left beside the store. The store is
/// whole at its path (it was just opened, and its lock is held), so every
/// sibling of a process no longer running is a partial copy, a whole copy
/// never swapped in, an old store swapped out, or a marker no longer
/// needed.
pub fn clean(paths: &Paths) -> io::Result<Cleaned> {
    let mut cleaned = Cleaned::default();
    let found = leftovers(&paths.parent, &paths.name)?;
    let name = |l: &Leftover| l.path.display().to_string();
    // Directories first, markers last: a marker outliving its directories
    // is harmless, the other way round it is not.
    for l in found.iter().filter(|l| l.suffix != ".swap") {
        if running(l.pid) {
            cleaned.kept.push(name(l));
        } else {
            remove_tree(&l.path)?;
            cleaned.removed.push(name(l));
        }
    }
    for l in found.iter().filter(|l| l.suffix == ".swap") {
        if running(l.pid) {
            cleaned.kept.push(name(l));
        } else {
            std::fs::remove_file(&l.path)?;
            cleaned.removed.push(name(l));
        }
    }
    if !cleaned.removed.is_empty() {
        sync_dir(&paths.parent)?;
    }
    Ok(cleaned)
}

/// Remove a store directory: its data file first (so that what is left of
/// it can never be opened as a store), then the rest.
pub fn remove_tree(dir: &Path) -> io::Result<()> {
    match std::fs::remove_file(dir.join(keel::db::DATA_FILE)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Called when no store is at `store`: if a compact using two renames was
/// interrupted between them (its marker is there and its process is not),
/// rename its copy (or, failing that, the old store) into place. Whether a
/// store is there now.
pub fn finish_interrupted(store: &Path) -> io::Result<bool> {
    let (Some(parent), Some(name)) = (store.parent(), store.file_name()) else {
        return Ok(false);
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    let Ok(parent) = std::fs::canonicalize(parent) else {
        return Ok(false);
    };
    let found = leftovers(&parent, &name.to_os_string())?;
    for marker in found.iter().filter(|l| l.suffix == ".swap") {
        if running(marker.pid) {
            continue;
        }
        let sibling = |suffix: &str| {
            found
                .iter()
                .find(|l| l.pid == marker.pid && l.suffix == suffix)
                .map(|l| &l.path)
        };
        // The copy is whole (the marker was made durable after it); the
        // old store is whole too.
        if let Some(from) = sibling("").or_else(|| sibling(".old")) {
            std::fs::rename(from, parent.join(name))?;
            sync_dir(&parent)?;
            return Ok(true);
        }
    }
    Ok(false)
}

/// `fsync` every file and directory under `dir`, and `dir` itself.
pub fn sync_tree(dir: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            sync_tree(&entry.path())?;
        } else {
            File::open(entry.path())?.sync_all()?;
        }
    }
    sync_dir(dir)
}

/// `fsync` a directory: its entries' creations, renames and removals
/// become durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Put the copy (fsynced, with the parent) in the store's place; `crash`
/// is called at each step (see `compact.rs`). The parent is not synced
/// after the swap: the caller does that.
pub fn swap(paths: &Paths, crash: &dyn Fn(&str)) -> io::Result<Protocol> {
    let forced = std::env::var(SWAP_ENV).is_ok_and(|v| v == "renames");
    if !forced {
        match renameat_with(CWD, &paths.store, CWD, paths.copy(), RenameFlags::EXCHANGE) {
            Ok(()) => {
                crash("swapped");
                return Ok(Protocol::Exchange);
            }
            // The file system (or kernel) does not do it: two renames.
            Err(Errno::INVAL | Errno::NOSYS | Errno::NOTSUP) => {}
            Err(e) => return Err(e.into()),
        }
    }
    renames(paths, crash)?;
    Ok(Protocol::Renames)
}

/// The two-rename protocol (see the module's comment).
fn renames(paths: &Paths, crash: &dyn Fn(&str)) -> io::Result<()> {
    let marker = paths.marker();
    {
        let f = File::create(&marker)?;
        f.sync_all()?;
    }
    sync_dir(&paths.parent)?;
    crash("marked");
    if let Err(e) = std::fs::rename(&paths.store, paths.old()) {
        let _ = std::fs::remove_file(&marker);
        return Err(e);
    }
    crash("half-swapped");
    if let Err(e) = std::fs::rename(paths.copy(), &paths.store) {
        // Put the old store back; should that fail too, the marker stays
        // for `finish_interrupted`.
        if std::fs::rename(paths.old(), &paths.store).is_ok() {
            let _ = std::fs::remove_file(&marker);
        }
        return Err(e);
    }
    crash("swapped");
    Ok(())
}

/// Where the old store is once swapped out.
pub fn old_store(paths: &Paths, protocol: Protocol) -> PathBuf {
    match protocol {
        Protocol::Exchange => paths.copy(),
        Protocol::Renames => paths.old(),
    }
}

/// Remove the old store, swapped out by `protocol`, and the marker; then
/// sync the parent. `crash("removing")` comes once its data file is gone.
pub fn remove_old(paths: &Paths, protocol: Protocol, crash: &dyn Fn(&str)) -> io::Result<()> {
    let old = old_store(paths, protocol);
    std::fs::remove_file(old.join(keel::db::DATA_FILE))?;
    crash("removing");
    remove_tree(&old)?;
    if protocol == Protocol::Renames {
        std::fs::remove_file(paths.marker())?;
    }
    sync_dir(&paths.parent)
}
