//! Facts about the device and file system under a path, read from
//! `/proc/self/mountinfo` and sysfs. Every field is optional: containers and
//! exotic file systems hide some of them.

use std::fs;
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
    whole_disk(&link)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
}

/// A block device's sysfs directory (canonical), or its disk's for a
/// partition.
fn whole_disk(block: &Path) -> PathBuf {
    match block.parent() {
        Some(disk) if block.join("partition").exists() => disk.to_path_buf(),
        _ => block.to_path_buf(),
    }
}

/// The largest CPU number the kernel's CPU sets here hold, plus one.
pub const MAX_CPU: usize = rustix::thread::CpuSet::MAX_CPU;

/// The CPUs that take the interrupts of the disk(s) under `path` (the file
/// system it is on), sorted; empty when they cannot be found (tmpfs, a
/// container without sysfs, a device without interrupts of its own).
///
/// How (Linux sysfs and procfs): the file system's device number names a
/// block device in `/sys/dev/block`; a partition's disk is its parent, a
/// device mapper's or md device's disks are its `slaves`; from each disk's
/// directory up, the first device with `msi_irqs` (or a legacy `irq`)
/// lists its interrupts, and `/proc/irq/N/effective_affinity_list` (else
/// `smp_affinity_list`) the CPUs each is delivered to.
pub fn disk_interrupt_cpus(path: &Path) -> Vec<usize> {
    device_of(&nearest_existing(path))
        .map(|dev| disk_interrupt_cpus_in(Path::new("/sys"), Path::new("/proc/irq"), dev))
        .unwrap_or_default()
}

/// The device number (major, minor) of the file system `dir` is on.
fn device_of(dir: &Path) -> Option<(u32, u32)> {
    let st = rustix::fs::stat(dir).ok()?;
    Some((rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev)))
}

/// The CPUs that take the interrupts of the disks behind block device
/// `dev`, sorted, found under `sys` (sysfs) and `proc_irq` (`/proc/irq`);
/// empty when any step finds nothing.
pub(crate) fn disk_interrupt_cpus_in(sys: &Path, proc_irq: &Path, dev: (u32, u32)) -> Vec<usize> {
    let Ok(block) = fs::canonicalize(sys.join(format!("dev/block/{}:{}", dev.0, dev.1))) else {
        return Vec::new();
    };
    let mut disks = Vec::new();
    collect_disks(&block, 0, &mut disks);
    let mut cpus = Vec::new();
    for disk in disks {
        for irq in device_irqs(sys, &disk) {
            let dir = proc_irq.join(irq.to_string());
            let list = fs::read_to_string(dir.join("effective_affinity_list"))
                .or_else(|_| fs::read_to_string(dir.join("smp_affinity_list")));
            if let Ok(list) = list {
                cpus.extend(parse_cpu_list(&list).unwrap_or_default());
            }
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

/// The whole disks behind block device directory `block`: its disk
/// ([`whole_disk`]), or (device mapper, md) the disks behind each of that
/// one's `slaves`.
fn collect_disks(block: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    // Stacks of device mappers are shallow; a loop in a broken sysfs is not.
    if depth > 8 {
        return;
    }
    let disk = whole_disk(block);
    let slaves: Vec<PathBuf> = fs::read_dir(disk.join("slaves"))
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    if slaves.is_empty() {
        out.push(disk);
        return;
    }
    for s in slaves {
        if let Ok(real) = fs::canonicalize(&s) {
            collect_disks(&real, depth + 1, out);
        }
    }
}

/// The interrupts of the device a disk belongs to: those listed in
/// `msi_irqs` of the first directory from the disk's up that has one, or
/// its legacy `irq`; none past `sys`'s `devices`.
fn device_irqs(sys: &Path, disk: &Path) -> Vec<u32> {
    let top = fs::canonicalize(sys.join("devices")).unwrap_or_else(|_| sys.join("devices"));
    let mut at = Some(disk);
    while let Some(dir) = at {
        if !dir.starts_with(&top) || dir == top {
            break;
        }
        if let Ok(entries) = fs::read_dir(dir.join("msi_irqs")) {
            let mut irqs: Vec<u32> = entries
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect();
            irqs.sort_unstable();
            if !irqs.is_empty() {
                return irqs;
            }
        }
        if let Ok(n) = fs::read_to_string(dir.join("irq")) {
            if let Ok(n) = n.trim().parse::<u32>() {
                if n != 0 {
                    return vec![n];
                }
            }
        }
        at = dir.parent();
    }
    Vec::new()
}

/// A kernel CPU list ("0-3,8,10-11") as CPU numbers; `None` if it is not
/// one, or names a CPU past [`MAX_CPU`].
pub fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let text = text.trim();
    let mut cpus = Vec::new();
    if text.is_empty() {
        return Some(cpus);
    }
    for part in text.split(',') {
        let part = part.trim();
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (
                a.trim().parse::<usize>().ok()?,
                b.trim().parse::<usize>().ok()?,
            ),
            None => {
                let c = part.parse::<usize>().ok()?;
                (c, c)
            }
        };
        if lo > hi || hi >= MAX_CPU {
            return None;
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Some(cpus)
}

/// CPU numbers as a kernel CPU list ("0-3,8").
pub fn cpu_list(cpus: &[usize]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            sorted[i].to_string()
        } else {
            format!("{}-{}", sorted[i], sorted[j])
        });
        i = j + 1;
    }
    parts.join(",")
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

#[cfg(test)]
mod interrupt_tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    #[test]
    fn cpu_lists_parse_and_print() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("1"), Some(vec![1]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(parse_cpu_list(&format!("{MAX_CPU}")), None);
        assert_eq!(cpu_list(&[11, 0, 1, 2, 3, 8, 10]), "0-3,8,10-11");
        assert_eq!(cpu_list(&[]), "");
    }

    /// A sysfs of one PCI disk with a partition, one device-mapper device
    /// over it, and `/proc/irq` with its two interrupts.
    fn fake_sys(root: &Path) -> (PathBuf, PathBuf) {
        let sys = root.join("sys");
        let proc_irq = root.join("irq");
        let pci = sys.join("devices/pci0000:00/0000:00:02.0");
        let disk = pci.join("virtio1/block/vda");
        fs::create_dir_all(disk.join("vda1")).unwrap();
        fs::write(disk.join("vda1/partition"), "1\n").unwrap();
        fs::create_dir_all(pci.join("msi_irqs/35")).unwrap();
        fs::create_dir_all(pci.join("msi_irqs/36")).unwrap();
        let dm = sys.join("devices/virtual/block/dm-0");
        fs::create_dir_all(dm.join("slaves")).unwrap();
        symlink(disk.join("vda1"), dm.join("slaves/vda1")).unwrap();
        fs::create_dir_all(sys.join("dev/block")).unwrap();
        symlink(&disk, sys.join("dev/block/254:0")).unwrap();
        symlink(disk.join("vda1"), sys.join("dev/block/254:1")).unwrap();
        symlink(&dm, sys.join("dev/block/253:0")).unwrap();
        let loop0 = sys.join("devices/virtual/block/loop0");
        fs::create_dir_all(&loop0).unwrap();
        symlink(&loop0, sys.join("dev/block/7:0")).unwrap();
        for (irq, cpus) in [(35, "1\n"), (36, "3\n")] {
            fs::create_dir_all(proc_irq.join(irq.to_string())).unwrap();
            fs::write(
                proc_irq.join(format!("{irq}/effective_affinity_list")),
                cpus,
            )
            .unwrap();
        }
        (sys, proc_irq)
    }

    #[test]
    fn finds_the_interrupt_cpus_of_a_disk_its_partition_and_a_mapper_over_it() {
        let dir = std::env::temp_dir().join(format!("keel-placement-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let (sys, irq) = fake_sys(&dir);
        assert_eq!(disk_interrupt_cpus_in(&sys, &irq, (254, 0)), vec![1, 3]);
        assert_eq!(
            disk_interrupt_cpus_in(&sys, &irq, (254, 1)),
            vec![1, 3],
            "a partition"
        );
        assert_eq!(
            disk_interrupt_cpus_in(&sys, &irq, (253, 0)),
            vec![1, 3],
            "a mapper"
        );
        assert_eq!(
            disk_interrupt_cpus_in(&sys, &irq, (7, 0)),
            Vec::<usize>::new(),
            "no device"
        );
        assert_eq!(
            disk_interrupt_cpus_in(&sys, &irq, (0, 42)),
            Vec::<usize>::new(),
            "no block device"
        );
        // Without effective affinities, the configured ones.
        fs::remove_file(irq.join("36/effective_affinity_list")).unwrap();
        fs::write(irq.join("36/smp_affinity_list"), "2-3").unwrap();
        assert_eq!(disk_interrupt_cpus_in(&sys, &irq, (254, 0)), vec![1, 2, 3]);
        fs::remove_dir_all(&dir).unwrap();
    }
}
