//! Where the store's background threads run: by default anywhere the
//! opener may run; on request off the CPUs that take the interrupts of the
//! disk the store is on, or on given CPUs.
//!
//! Why one would keep them off the interrupts' CPUs: a commit's journal
//! write ends with the disk's completion interrupt, which wakes the
//! committing thread. When that thread sleeps on the CPU that takes the
//! interrupt, the wake-up is local; on another CPU it needs an
//! inter-processor interrupt, and on these VMs an idle vCPU is halted, so
//! the host must run it again first. With the whole process pinned by
//! `taskset`, the journal engine's w3 (10,000 transactions of 100 puts)
//! ran at 0.75× its unpinned speed on the vCPU without the disk's
//! interrupts, and at 1.03× on the one with them. The scheduler moves a
//! lone committer to the interrupts' CPU when that CPU is otherwise idle,
//! unless the store's own helper or checkpointer is busy there. Kept off
//! it, they leave it to the committers — but measured as the default it
//! did not pay here (w1 4–6 % slower, w2 and w3 within the noise), so it
//! is an option, not the default (docs/store-performance.md, "Background
//! threads off the disk's interrupts").
//!
//! How the CPUs are found: `crate::io::disk_interrupt_cpus` (sysfs and
//! procfs; anything missing means "no restriction"). A disk whose
//! interrupts reach every CPU the opener may use (an NVMe drive with a
//! queue per CPU, say) restricts nothing.

use std::path::Path;

use rustix::thread::CpuSet;

use crate::io::{cpu_list, disk_interrupt_cpus};

/// Which CPUs the store's background threads (its helper and its
/// checkpointer) may run on. Committing and reading threads are the
/// caller's and never moved. See
/// [`Options::background_cpus`](super::Options::background_cpus) for
/// what each did here.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum BackgroundCpus {
    /// Any CPU the thread that opens the store may run on (the default).
    #[default]
    Any,
    /// The CPUs the opener may run on, less those that take the
    /// interrupts of the disk the store's directory is on — when that
    /// leaves some; else any. Found once, when the store opens.
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
    /// not found).
    pub disk_interrupt_cpus: Vec<usize>,
}

impl Placement {
    /// Where `setting` puts the background threads of a store in `dir`,
    /// for an opener that may run on `allowed`. `Err` says why an `Only`
    /// list is refused (see [`only`]).
    pub fn find(
        setting: &BackgroundCpus,
        dir: &Path,
        allowed: &[usize],
    ) -> Result<Placement, String> {
        let irq = disk_interrupt_cpus(dir);
        let cpus = match setting {
            BackgroundCpus::Any => None,
            BackgroundCpus::AwayFromDiskInterrupts => away_from(allowed, &irq),
            BackgroundCpus::Only(cpus) => Some(only(cpus, allowed)?),
        };
        Ok(Placement {
            cpus,
            disk_interrupt_cpus: irq,
        })
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

/// The CPUs of an [`BackgroundCpus::Only`] list the opener may run on
/// (`allowed`), in order; `Err` says why there are none, or names a CPU
/// past the largest a CPU set holds. No I/O: `Database::open` checks a
/// list with it before the store's files are touched.
pub(crate) fn only(cpus: &[usize], allowed: &[usize]) -> Result<Vec<usize>, String> {
    if let Some(c) = cpus.iter().find(|&&c| c >= crate::io::MAX_CPU) {
        return Err(format!(
            "background_cpus names CPU {c}: at most {}",
            crate::io::MAX_CPU - 1
        ));
    }
    let kept: Vec<usize> = allowed
        .iter()
        .copied()
        .filter(|c| cpus.contains(c))
        .collect();
    if kept.is_empty() {
        return Err(format!(
            "background_cpus is only {}: none of them is a CPU this thread may run on ({})",
            cpu_list(cpus),
            cpu_list(allowed)
        ));
    }
    Ok(kept)
}

/// The CPUs the calling thread may run on, in order.
pub(crate) fn allowed_cpus() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect(),
        Err(_) => Vec::new(),
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

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
            Placement::find(&BackgroundCpus::Any, Path::new("/"), &[0, 1])
                .unwrap()
                .cpus,
            None
        );
    }
}
