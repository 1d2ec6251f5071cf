//! Facts about the device and file system under a path, read from
//! `/proc/self/mountinfo` and sysfs. Every field is optional: containers and
//! exotic file systems hide some of them.

use std::path::{Path, PathBuf};

/// What the kernel says about the storage under a path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Mount point of the file system holding the path.
    pub mount_point: Option<PathBuf>,
    /// File system type (`ext4`, `xfs`, `tmpfs`…).
    pub fs_type: Option<String>,
    /// Per-mount options (`rw,relatime,…`).
    pub mount_options: Option<String>,
    /// File-system (superblock) options, where the ones that decide
    /// durability live (`data=journal`, `nobarrier`, `discard`…).
    pub super_options: Option<String>,
    /// The mounted device (`/dev/vda`), as mountinfo names it.
    pub device: Option<String>,
    /// The whole-disk name in sysfs (`vda`).
    pub disk: Option<String>,
    /// `queue/rotational`.
    pub rotational: Option<bool>,
    /// `queue/write_cache`: `write back` (volatile cache) or `write through`.
    pub write_cache: Option<String>,
    /// `queue/fua`: whether the device supports Force Unit Access writes.
    pub fua: Option<bool>,
    /// `queue/logical_block_size`, in bytes: the alignment direct I/O
    /// needs.
    pub logical_block_size: Option<usize>,
    /// `queue/physical_block_size`, in bytes: the smallest unit the device
    /// writes atomically (at least the logical block size).
    pub physical_block_size: Option<usize>,
    /// `uname -r`.
    pub kernel: Option<String>,
}

impl DeviceInfo {
    /// Whether the device reports a volatile write cache (data acknowledged
    /// by the device can still be lost on power failure unless flushed).
    pub fn volatile_cache(&self) -> bool {
        self.write_cache
            .as_deref()
            .is_some_and(|c| c.contains("back"))
    }

    /// Gather what can be found for `path` (which need not exist yet).
    pub fn for_path(path: &Path) -> DeviceInfo {
        let mut info = DeviceInfo {
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .ok()
                .map(|s| s.trim().to_string()),
            ..DeviceInfo::default()
        };
        let path = std::fs::canonicalize(nearest_existing(path)).unwrap_or_else(|_| path.into());
        let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else {
            return info;
        };
        // Fields: id parent major:minor root mount_point options ... - fstype source super_opts
        let mut best: Option<(usize, String, &str)> = None;
        for line in mountinfo.lines() {
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let l: Vec<&str> = left.split(' ').collect();
            if l.len() < 6 {
                continue;
            }
            let mp = unescape(l[4]);
            if path.starts_with(&mp) && best.as_ref().is_none_or(|(len, _, _)| mp.len() >= *len) {
                best = Some((mp.len(), mp.clone(), line));
                let r: Vec<&str> = right.split(' ').collect();
                info.mount_point = Some(PathBuf::from(&mp));
                info.mount_options = Some(l[5].to_string());
                info.fs_type = r.first().map(|s| s.to_string());
                info.device = r.get(1).map(|s| s.to_string());
                info.super_options = r.get(2).map(|s| s.to_string());
                info.disk = sysfs_disk(l[2]);
            }
        }
        if let Some(disk) = info.disk.clone() {
            let q = PathBuf::from("/sys/block").join(&disk).join("queue");
            let read = |name: &str| {
                std::fs::read_to_string(q.join(name))
                    .ok()
                    .map(|s| s.trim().to_string())
            };
            info.rotational = read("rotational").map(|s| s == "1");
            info.write_cache = read("write_cache");
            info.fua = read("fua").map(|s| s == "1");
            info.logical_block_size = read("logical_block_size").and_then(|s| s.parse().ok());
            info.physical_block_size = read("physical_block_size").and_then(|s| s.parse().ok());
        }
        info
    }
}

/// The logical block size of the device holding `path`, if sysfs tells.
pub fn device_logical_block_size(path: &Path) -> Option<usize> {
    DeviceInfo::for_path(path).logical_block_size
}

fn nearest_existing(path: &Path) -> PathBuf {
    let mut p = path;
    while !p.exists() {
        match p.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => p = parent,
            _ => return PathBuf::from("."),
        }
    }
    p.to_path_buf()
}

/// mountinfo escapes spaces and a few other bytes as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The whole-disk sysfs name for a `major:minor` (partitions resolve to
/// their parent disk; device-mapper and others to themselves).
fn sysfs_disk(dev: &str) -> Option<String> {
    let link = std::fs::canonicalize(format!("/sys/dev/block/{dev}")).ok()?;
    let dir = if link.join("partition").exists() {
        link.parent()?.to_path_buf()
    } else {
        link
    };
    dir.file_name().map(|n| n.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_root_fs() {
        let info = DeviceInfo::for_path(Path::new("/"));
        assert_eq!(info.mount_point.as_deref(), Some(Path::new("/")));
        assert!(info.fs_type.is_some());
        assert!(info.super_options.is_some());
        assert!(info.kernel.is_some());
    }

    #[test]
    fn unescapes_octal() {
        assert_eq!(unescape(r"/mnt/a\040b"), "/mnt/a b");
        assert_eq!(unescape("/plain"), "/plain");
    }
}
