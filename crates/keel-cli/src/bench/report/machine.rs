//! The `machine` object every bench report carries: where the numbers were
//! measured (STYLE.md habit 12).

use std::path::{Path, PathBuf};

use keel::io::DeviceInfo;
use serde::Serialize;

/// Facts about the machine and the storage under the bench directory. Every
/// storage field is optional: containers and exotic file systems hide some.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// File system type (`ext4`, `xfs`, `tmpfs`…).
    pub filesystem: Option<String>,
    pub mount_point: Option<PathBuf>,
    /// Per-mount and file-system options together, as `findmnt` shows them
    /// (`rw,relatime,discard,…`).
    pub mount_options: Option<String>,
    /// The mounted device (`/dev/vda`).
    pub device: Option<String>,
    /// The whole-disk name in sysfs (`vda`).
    pub disk: Option<String>,
    pub rotational: Option<bool>,
    /// `write back` (volatile cache: a write is durable only after a flush
    /// or FUA) or `write through`.
    pub write_cache: Option<String>,
    /// Whether the device supports Force Unit Access writes; without FUA an
    /// `O_DSYNC` write costs a write plus a full cache flush.
    pub fua: Option<bool>,
    pub logical_block_size: Option<usize>,
    pub physical_block_size: Option<usize>,
    pub kernel: Option<String>,
    pub cpus: usize,
    pub memory_bytes: u64,
}

impl Machine {
    /// Gather the facts for a bench that writes under `dir`.
    pub fn for_path(dir: &Path) -> Machine {
        Self::from_device(DeviceInfo::for_path(dir))
    }

    pub fn from_device(d: DeviceInfo) -> Machine {
        let info = rustix::system::sysinfo();
        Machine {
            filesystem: d.fs_type,
            mount_point: d.mount_point,
            mount_options: merge_options(d.mount_options, d.super_options),
            device: d.device,
            disk: d.disk,
            rotational: d.rotational,
            write_cache: d.write_cache,
            fua: d.fua,
            logical_block_size: d.logical_block_size,
            physical_block_size: d.physical_block_size,
            kernel: d.kernel,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_bytes: (info.totalram as u64).saturating_mul(u64::from(info.mem_unit)),
        }
    }

    /// Whether a write the device acknowledged may still sit in a volatile
    /// cache. An unknown cache mode counts as volatile: durability is only
    /// claimed where the kernel says the cache is write-through.
    pub fn volatile_cache(&self) -> bool {
        self.write_cache
            .as_deref()
            .is_none_or(|c| c.contains("back"))
    }

    /// Whether the file system keeps data across a power cut at all: tmpfs
    /// and ramfs live in memory, so nothing written there is ever durable,
    /// whatever the write method.
    pub fn persistent(&self) -> bool {
        !matches!(self.filesystem.as_deref(), Some("tmpfs" | "ramfs"))
    }

    /// Whether `method`'s writes are durable when they return, here.
    pub fn durable(&self, method: keel::io::WriteMethod) -> bool {
        self.persistent() && method.is_durable(self.volatile_cache())
    }

    /// The top of a text report: the command that made it, then this
    /// machine.
    pub fn report_head(&self, command: &[String]) -> String {
        format!(
            "`{}`\n\nMachine: {}\n\n",
            command.join(" "),
            self.describe()
        )
    }

    /// One line for the top of a text report.
    pub fn describe(&self) -> String {
        let unknown = || "?".to_string();
        let yes_no = |b: Option<bool>| b.map_or("?", |b| if b { "yes" } else { "no" });
        format!(
            "{} ({}) on {} [{}]: rotational {}, write cache {}, FUA {}, \
             logical/physical block {}/{} B; kernel {}, {} CPUs, {} GiB RAM",
            self.filesystem.clone().unwrap_or_else(unknown),
            self.mount_options.clone().unwrap_or_else(unknown),
            self.device.clone().unwrap_or_else(unknown),
            self.disk.clone().unwrap_or_else(unknown),
            yes_no(self.rotational),
            self.write_cache.clone().unwrap_or_else(unknown),
            yes_no(self.fua),
            self.logical_block_size
                .map_or_else(unknown, |b| b.to_string()),
            self.physical_block_size
                .map_or_else(unknown, |b| b.to_string()),
            self.kernel.clone().unwrap_or_else(unknown),
            self.cpus,
            self.memory_bytes >> 30,
        )
    }
}

/// Per-mount options, then the file-system options not already listed.
fn merge_options(mount: Option<String>, fs: Option<String>) -> Option<String> {
    let mut merged: Vec<String> = Vec::new();
    for list in [mount, fs].into_iter().flatten() {
        for opt in list.split(',').filter(|o| !o.is_empty()) {
            if !merged.iter().any(|m| m == opt) {
                merged.push(opt.to_string());
            }
        }
    }
    (!merged.is_empty()).then(|| merged.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_this_machine() {
        let m = Machine::for_path(Path::new("."));
        assert!(m.cpus >= 1);
        assert!(m.memory_bytes > 0);
        let json = serde_json::to_value(&m).unwrap();
        for key in [
            "filesystem",
            "mount_options",
            "write_cache",
            "fua",
            "kernel",
        ] {
            assert!(json.get(key).is_some(), "{key} missing from {json}");
        }
        assert!(m.describe().contains("write cache"));
    }

    #[test]
    fn options_merge_like_findmnt() {
        let merged = merge_options(Some("rw,relatime".into()), Some("rw,discard".into()));
        assert_eq!(merged.as_deref(), Some("rw,relatime,discard"));
        assert_eq!(merge_options(None, None), None);
    }

    #[test]
    fn durability_needs_a_known_cache_and_a_persistent_fs() {
        use keel::io::WriteMethod;
        let mut m = Machine::from_device(DeviceInfo::default());
        assert!(m.volatile_cache(), "unknown counts as volatile");
        assert!(!m.durable(WriteMethod::Odirect));
        m.write_cache = Some("write back".into());
        assert!(m.volatile_cache());
        m.write_cache = Some("write through".into());
        assert!(!m.volatile_cache());
        assert!(m.durable(WriteMethod::Odirect) && m.durable(WriteMethod::Fdatasync));
        assert!(!m.durable(WriteMethod::Buffered));
        m.filesystem = Some("tmpfs".into());
        assert!(!m.durable(WriteMethod::Fdatasync));
    }
}
