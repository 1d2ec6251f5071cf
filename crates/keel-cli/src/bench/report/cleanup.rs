//! Bench files that are removed when the bench is done with them — also
//! when it fails, panics or is interrupted with Ctrl-C — so that a 1 GiB
//! experiment never leaves its files behind.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once};

/// Paths of bench files that exist (or are about to), for the Ctrl-C
/// handler. A file is registered before it is created so that an interrupt
/// between the two cannot leak it.
static LIVE_PATHS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// Directories a bench created for its files, removed after the files.
static LIVE_DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// Directories whose whole contents belong to a bench (a bench journal),
/// removed with everything in them.
static LIVE_TREES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static HANDLER: Once = Once::new();

/// The exit status of a process ended by SIGINT (128 + 2), as shells report.
const INTERRUPTED_EXIT_CODE: i32 = 130;

/// A bench file path that is removed when this guard drops, or when the user
/// presses Ctrl-C. Creating the guard does not create the file.
#[derive(Debug)]
pub struct BenchFile {
    path: PathBuf,
}

impl BenchFile {
    /// Register `path` for removal. A stale file left there by a killed
    /// earlier run is removed now, so every run starts from a fresh file.
    pub fn new(path: PathBuf) -> std::io::Result<BenchFile> {
        install_interrupt_cleanup();
        remove_if_present(&path)?;
        lock_paths().push(path.clone());
        Ok(BenchFile { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for BenchFile {
    fn drop(&mut self) {
        if let Err(e) = remove_if_present(&self.path) {
            eprintln!("warning: could not remove {}: {e}", self.path.display());
        }
        lock_paths().retain(|p| p != &self.path);
    }
}

/// A directory a bench creates for its files (`keel probe`'s scratch
/// folder): removed when this guard drops or on Ctrl-C, once its bench
/// files are gone. Only an empty directory is removed, so nothing else that
/// was put there is lost.
#[derive(Debug)]
pub struct BenchDir {
    path: PathBuf,
}

impl BenchDir {
    pub fn new(path: PathBuf) -> BenchDir {
        install_interrupt_cleanup();
        lock_dirs().push(path.clone());
        BenchDir { path }
    }
}

impl Drop for BenchDir {
    fn drop(&mut self) {
        match std::fs::remove_dir(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                eprintln!("warning: could not remove {}: {e}", self.path.display())
            }
            _ => {}
        }
        lock_dirs().retain(|p| p != &self.path);
    }
}

/// A directory that a bench fills with files it names itself (a journal's
/// segments): removed with its contents when this guard drops or on
/// Ctrl-C. Only for directories the bench created under its own name.
#[derive(Debug)]
pub struct BenchTree {
    path: PathBuf,
}

impl BenchTree {
    pub fn new(path: PathBuf) -> BenchTree {
        install_interrupt_cleanup();
        lock_trees().push(path.clone());
        BenchTree { path }
    }
}

impl Drop for BenchTree {
    fn drop(&mut self) {
        match std::fs::remove_dir_all(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                eprintln!("warning: could not remove {}: {e}", self.path.display())
            }
            _ => {}
        }
        lock_trees().retain(|p| p != &self.path);
    }
}

fn lock_trees() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    LIVE_TREES.lock().unwrap_or_else(|e| e.into_inner())
}

fn lock_paths() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    // A panic while the lock was held cannot leave the list inconsistent
    // (each operation is one push or retain), so poisoning is ignored.
    LIVE_PATHS.lock().unwrap_or_else(|e| e.into_inner())
}

fn lock_dirs() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    LIVE_DIRS.lock().unwrap_or_else(|e| e.into_inner())
}

fn remove_if_present(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// On Ctrl-C: remove every registered bench file, tree and directory, then
/// exit with status 130. Installed once, on first use of [`BenchFile`]; a
/// process that set its own handler first keeps it.
///
/// The handler runs on a thread of its own while the bench goes on. It
/// holds the registries until the process exits, so the bench cannot
/// register (and so cannot create) another file; a file registered just
/// before but created after the first sweep is caught by a later one: the
/// sweeps repeat, at least twice, until no registered file or directory is
/// left, for at most [`CLEANUP_RETRIES`] × [`CLEANUP_PAUSE`].
fn install_interrupt_cleanup() {
    HANDLER.call_once(|| {
        let installed = ctrlc::set_handler(|| {
            let paths = lock_paths();
            let trees = lock_trees();
            let dirs = lock_dirs();
            for sweep in 0..CLEANUP_RETRIES {
                for path in paths.iter() {
                    let _ = remove_if_present(path);
                }
                for tree in trees.iter() {
                    let _ = std::fs::remove_dir_all(tree);
                }
                for dir in dirs.iter() {
                    let _ = std::fs::remove_dir(dir);
                }
                let clean = dirs.iter().chain(paths.iter()).all(|p| !p.exists());
                if clean && sweep > 0 {
                    break;
                }
                std::thread::sleep(CLEANUP_PAUSE);
            }
            eprintln!(
                "\ninterrupted: removed {} bench file(s) and {} bench director(ies)",
                paths.len(),
                trees.len()
            );
            std::process::exit(INTERRUPTED_EXIT_CODE);
        });
        if let Err(e) = installed {
            eprintln!("warning: bench files will not be removed on Ctrl-C: {e}");
        }
    });
}

/// How often, and how far apart, the Ctrl-C handler sweeps: long enough
/// for a bench thread that registered a file to create it (it cannot
/// register another).
const CLEANUP_RETRIES: u32 = 50;
const CLEANUP_PAUSE: std::time::Duration = std::time::Duration::from_millis(10);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removed_on_drop_and_stale_files_cleared() {
        let dir = std::env::temp_dir().join(format!("keel-cleanup-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bench.dat");
        std::fs::write(&path, b"stale").unwrap();
        let guard = BenchFile::new(path.clone()).unwrap();
        assert!(!path.exists(), "stale file must be removed");
        std::fs::write(&path, b"fresh").unwrap();
        assert!(lock_paths().contains(&path));
        drop(guard);
        assert!(!path.exists());
        assert!(!lock_paths().contains(&path));
        // Dropping a guard whose file was never created is fine.
        drop(BenchFile::new(dir.join("never")).unwrap());
        let sub = dir.join("scratch");
        let kept = dir.join("kept");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::create_dir_all(&kept).unwrap();
        std::fs::write(kept.join("user-file"), b"x").unwrap();
        drop(BenchDir::new(sub.clone()));
        drop(BenchDir::new(kept.clone()));
        assert!(!sub.exists(), "an empty bench dir is removed");
        assert!(kept.join("user-file").exists(), "a non-empty one is kept");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
