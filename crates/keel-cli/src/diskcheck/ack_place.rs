//! Where the single-machine mode's ack file lives. The check is only as
//! good as the record of what was acknowledged: an ack file in memory
//! (tmpfs, ramfs) is gone after the power cut, and one on the file system
//! under test is lost or kept together with the writes it records, so a
//! disk that drops acknowledged writes can drop their record too and pass.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use keel::io::DeviceInfo;

/// `statfs(2)` `f_type` of the file systems that live in memory
/// (`linux/magic.h`).
const VOLATILE_FS: [(u32, &str); 2] = [(0x0102_1994, "tmpfs"), (0x8584_58f6, "ramfs")];

/// The warnings for recording the acknowledgements of writes to `file` in
/// `ack_file`, each a sentence that says what to do; none when the ack
/// file is on another, persistent file system and disk.
pub fn warnings(file: &Path, ack_file: &Path) -> Vec<String> {
    let (file_at, ack_at) = (existing(file), existing(ack_file));
    let mut out = Vec::new();
    if let Some(fs) = volatile_fs(&ack_at) {
        out.push(format!(
            "--ack-file {} is on {fs}, which lives in memory: a power cut takes the record of \
             acknowledged writes with it, so the check proves nothing; put the ack file on a \
             disk that keeps its writes, another one than --file's",
            ack_file.display()
        ));
    }
    let dev = |p: &Path| std::fs::metadata(p).ok().map(|m| m.dev());
    match (dev(&file_at), dev(&ack_at)) {
        (Some(a), Some(b)) if a == b => out.push(format!(
            "--ack-file {} is on the same file system as --file {}: a power cut that loses \
             acknowledged writes there can lose their record too, so the check proves nothing; \
             put the ack file on another device",
            ack_file.display(),
            file.display()
        )),
        _ => {
            let (a, b) = (
                DeviceInfo::for_path(&file_at),
                DeviceInfo::for_path(&ack_at),
            );
            if a.disk.is_some() && a.disk == b.disk {
                out.push(format!(
                    "--ack-file {} and --file {} are on different file systems of the same disk \
                     ({}): a disk that loses acknowledged writes can lose their record too, and \
                     the check proves little; put the ack file on another device",
                    ack_file.display(),
                    file.display(),
                    a.disk.unwrap_or_default()
                ));
            }
        }
    }
    out
}

/// The name of the in-memory file system `path` is on, if it is on one.
fn volatile_fs(path: &Path) -> Option<&'static str> {
    let f_type = rustix::fs::statfs(path).ok()?.f_type;
    // `f_type`'s width differs between architectures; the magic numbers
    // are 32-bit.
    let f_type = f_type as u32;
    VOLATILE_FS
        .iter()
        .find(|(magic, _)| *magic == f_type)
        .map(|(_, name)| *name)
}

/// `path`, or its nearest ancestor that exists (`write` creates both files;
/// a bare file name is in the current directory).
fn existing(path: &Path) -> PathBuf {
    path.ancestors()
        .map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        })
        .find(|p| p.exists())
        .unwrap_or(Path::new("/"))
        .to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_file_system_and_missing_paths() {
        let dir = std::env::temp_dir().join(format!("keel-ackplace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let w = warnings(&dir.join("new/disk.bin"), &dir.join("acks.log"));
        assert!(w.iter().any(|w| w.contains("same file system")), "{w:?}");
        assert_eq!(existing(Path::new("no-such-file")), Path::new("."));
        assert_eq!(existing(&dir.join("a/b/c")), dir);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn tmpfs_is_volatile_where_it_is_mounted() {
        let shm = Path::new("/dev/shm");
        let is_tmpfs = std::fs::read_to_string("/proc/mounts")
            .unwrap_or_default()
            .lines()
            .any(|l| {
                l.split(' ').nth(1) == Some("/dev/shm") && l.split(' ').nth(2) == Some("tmpfs")
            });
        assert_eq!(volatile_fs(shm) == Some("tmpfs"), is_tmpfs);
        assert_eq!(volatile_fs(Path::new("/proc")), None);
    }
}
