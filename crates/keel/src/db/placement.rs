//! Where the store's background threads run: by default, off the CPUs
//! that take the interrupts of the disk the store is on.
//!
//! Why: a commit's journal write ends with the disk's completion
//! interrupt, which wakes the committing thread. When that thread sleeps
//! on the CPU that takes the interrupt, the wake-up is local; on another
//! CPU it needs an inter-processor interrupt, and on these VMs an idle
//! vCPU is halted, so the host must run it again first. With the whole
//! process pinned by `taskset`, the journal engine's w3 (10,000
//! transactions of 100 puts) ran at 0.75× its unpinned speed on the vCPU
//! without the disk's interrupts, and at 1.03× on the one with them. The
//! scheduler moves a lone committer to the interrupts' CPU when that CPU
//! is otherwise idle — unless the store's own helper or checkpointer is
//! busy there. Kept off it, they leave it to the committers
//! (docs/bench-commit.md, "Background threads off the disk's interrupts").
//!
//! How the CPUs are found (Linux sysfs and procfs; anything missing means
//! "no restriction"): the store directory's device number names a block
//! device in `/sys/dev/block`; a partition's disk is its parent, a
//! device-mapper or md device's disks are its `slaves`; from each disk's
//! directory up, the first device with `msi_irqs` (or a legacy `irq`)
//! lists its interrupts, and `/proc/irq/N/effective_affinity_list` the
//! CPUs each is delivered to. A disk whose interrupts reach every CPU the
//! opener may use (an NVMe drive with a queue per CPU, say) restricts
//! nothing.

use std::fs;
use std::path::{Path, PathBuf};

use rustix::thread::CpuSet;

/// Which CPUs the store's background threads (its helper and its
/// checkpointer) may run on. Committing and reading threads are the
/// caller's and never moved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum BackgroundCpus {
    /// Any CPU the thread that opens the store may run on.
    Any,
    /// The CPUs the opener may run on, less those that take the
    /// interrupts of the disk the store's directory is on — when that
    /// leaves some; else any. Found once, when the store opens. See
    /// [`Options::background_cpus`](super::Options::background_cpus).
    #[default]
    AwayFromDiskInterrupts,
    /// These CPUs, less those the opener may not run on (none left: the
    /// store refuses to open).
    Only(Vec<usize>),
}

impl BackgroundCpus {
    /// The setting's name, for reports.
    pub fn name(&self) -> String {
        match self {
            BackgroundCpus::Any => "any".into(),
            BackgroundCpus::AwayFromDiskInterrupts => "away_from_disk_interrupts".into(),
            BackgroundCpus::Only(cpus) => format!("only {}", cpu_list(cpus)),
        }
    }
}

/// Where the background threads of an open store run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Placement {
    /// The CPUs they are kept to, in order; `None` when not restricted.
    pub cpus: Option<Vec<usize>>,
    /// The CPUs found taking the store's disk's interrupts (empty when
    /// not looked for or not found).
    pub disk_interrupt_cpus: Vec<usize>,
}

impl Placement {
    /// Where `setting` puts the background threads of a store in `dir`,
    /// for an opener that may run on `allowed`. `Err` says why an `Only`
    /// list leaves no CPU.
    pub fn find(
        setting: &BackgroundCpus,
        dir: &Path,
        allowed: &[usize],
    ) -> Result<Placement, String> {
        match setting {
            BackgroundCpus::Any => Ok(Placement::default()),
            BackgroundCpus::AwayFromDiskInterrupts => {
                let irq = device_of(dir)
                    .map(|dev| disk_interrupt_cpus(Path::new("/sys"), Path::new("/proc/irq"), dev))
                    .unwrap_or_default();
                Ok(Placement {
                    cpus: away_from(allowed, &irq),
                    disk_interrupt_cpus: irq,
                })
            }
            BackgroundCpus::Only(cpus) => {
                let mut kept: Vec<usize> = allowed
                    .iter()
                    .copied()
                    .filter(|c| cpus.contains(c))
                    .collect();
                kept.dedup();
                if kept.is_empty() {
                    return Err(format!(
                        "background_cpus is only {}: none of them is a CPU this thread may run on ({})",
                        cpu_list(cpus),
                        cpu_list(allowed)
                    ));
                }
                Ok(Placement {
                    cpus: Some(kept),
                    disk_interrupt_cpus: Vec::new(),
                })
            }
        }
    }

    /// Keep the calling thread to the placement's CPUs (if restricted).
    /// A refusal (a CPU gone offline since) leaves it where it was: the
    /// placement is a matter of speed only.
    pub fn enter(&self) {
        let Some(cpus) = &self.cpus else { return };
        let mut set = CpuSet::new();
        for &c in cpus {
            set.set(c);
        }
        let _ = rustix::thread::sched_setaffinity(None, &set);
    }
}

/// The CPUs the calling thread may run on, in order.
pub(crate) fn allowed_cpus() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect(),
        Err(_) => Vec::new(),
    }
}

/// The highest CPU number [`BackgroundCpus::Only`] may name, plus one.
pub(crate) const MAX_CPU: usize = CpuSet::MAX_CPU;

/// `allowed` less `irq`, when `irq` takes some of `allowed` and leaves
/// some.
fn away_from(allowed: &[usize], irq: &[usize]) -> Option<Vec<usize>> {
    let rest: Vec<usize> = allowed
        .iter()
        .copied()
        .filter(|c| !irq.contains(c))
        .collect();
    (!rest.is_empty() && rest.len() < allowed.len()).then_some(rest)
}

/// The device number (major, minor) of the file system `dir` is on.
fn device_of(dir: &Path) -> Option<(u32, u32)> {
    let st = rustix::fs::stat(dir).ok()?;
    Some((rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev)))
}

/// The CPUs that take the interrupts of the disks behind block device
/// `dev`, sorted, found under `sys` (sysfs) and `proc_irq` (`/proc/irq`);
/// empty when any step finds nothing.
pub(crate) fn disk_interrupt_cpus(sys: &Path, proc_irq: &Path, dev: (u32, u32)) -> Vec<usize> {
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

/// The whole disks behind block device directory `block`: itself, its
/// parent for a partition, or (device mapper, md) the disks behind each
/// of its `slaves`.
fn collect_disks(block: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    // Stacks of device mappers are shallow; a loop in a broken sysfs is not.
    if depth > 8 {
        return;
    }
    if block.join("partition").exists() {
        if let Some(parent) = block.parent() {
            collect_disks(parent, depth + 1, out);
        }
        return;
    }
    let slaves: Vec<PathBuf> = fs::read_dir(block.join("slaves"))
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    if slaves.is_empty() {
        out.push(block.to_path_buf());
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
pub(crate) fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
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
pub(crate) fn cpu_list(cpus: &[usize]) -> String {
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

    #[test]
    fn away_from_leaves_some_and_takes_some_or_nothing() {
        assert_eq!(away_from(&[0, 1], &[1]), Some(vec![0]));
        assert_eq!(
            away_from(&[0, 1], &[0, 1]),
            None,
            "every CPU takes interrupts"
        );
        assert_eq!(away_from(&[0, 1], &[]), None, "none found");
        assert_eq!(away_from(&[0, 1], &[5]), None, "not the opener's CPUs");
        assert_eq!(away_from(&[0, 1, 2, 3], &[1, 2]), Some(vec![0, 3]));
    }

    #[test]
    fn only_keeps_the_openers_cpus_or_refuses() {
        let p = Placement::find(
            &BackgroundCpus::Only(vec![3, 1, 9]),
            Path::new("/"),
            &[0, 1, 2, 3],
        )
        .unwrap();
        assert_eq!(p.cpus, Some(vec![1, 3]));
        let e =
            Placement::find(&BackgroundCpus::Only(vec![9]), Path::new("/"), &[0, 1]).unwrap_err();
        assert!(e.contains("none of them"), "{e}");
        assert_eq!(
            Placement::find(&BackgroundCpus::Any, Path::new("/"), &[0, 1]).unwrap(),
            Placement::default()
        );
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
        assert_eq!(disk_interrupt_cpus(&sys, &irq, (254, 0)), vec![1, 3]);
        assert_eq!(
            disk_interrupt_cpus(&sys, &irq, (254, 1)),
            vec![1, 3],
            "a partition"
        );
        assert_eq!(
            disk_interrupt_cpus(&sys, &irq, (253, 0)),
            vec![1, 3],
            "a mapper"
        );
        assert_eq!(
            disk_interrupt_cpus(&sys, &irq, (7, 0)),
            Vec::<usize>::new(),
            "no device"
        );
        assert_eq!(
            disk_interrupt_cpus(&sys, &irq, (0, 42)),
            Vec::<usize>::new(),
            "no block device"
        );
        // Without effective affinities, the configured ones.
        fs::remove_file(irq.join("36/effective_affinity_list")).unwrap();
        fs::write(irq.join("36/smp_affinity_list"), "2-3").unwrap();
        assert_eq!(disk_interrupt_cpus(&sys, &irq, (254, 0)), vec![1, 2, 3]);
        fs::remove_dir_all(&dir).unwrap();
    }
}
