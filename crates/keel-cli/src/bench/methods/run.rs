//! One timed run: prepare a fresh journal file, then make `count` commits
//! durable with one write method, timing each.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use keel::io::{IoError, SyncKind, Vfs, VfsFile, WriteMethod};

use super::{Plan, RunSpec};
use crate::bench::report::{
    files, progress, BenchFile, LatencyRecorder, Machine, RandomPool, RunFigures,
};

/// Commit payloads are taken from a random pool this much larger than one
/// commit, each at a different 4 KiB-aligned start, so that consecutive
/// commits carry different bytes (a device that deduplicates or compresses
/// gets no help) without allocating `count × size` bytes.
const POOL_SLACK_BYTES: usize = 1 << 20;

/// What a successful run measured.
#[derive(Clone, Debug)]
pub struct Measured {
    pub figures: RunFigures,
    pub latency: LatencyRecorder,
}

/// One run's result: its figures, or the error that stopped it.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub spec: RunSpec,
    /// Whether the method's writes are durable on this device and file
    /// system ([`Machine::durable`]).
    pub durable: bool,
    /// The `--vs-fio` round this run belongs to.
    pub round: Option<u32>,
    pub result: Result<Measured, String>,
}

impl Outcome {
    /// Run `spec` in `plan.dir`; an error is reported on stderr at once and
    /// kept in the outcome, so the other methods still run.
    pub fn run(
        vfs: &dyn Vfs,
        plan: &Plan,
        spec: &RunSpec,
        round: Option<u32>,
        machine: &Machine,
    ) -> Outcome {
        let result = run_one(vfs, &plan.dir, spec, plan.json).map_err(|e| {
            let message = format!("{e:#}");
            eprintln!("{}: error: {message}", spec.label());
            message
        });
        Outcome {
            spec: *spec,
            durable: machine.durable(spec.method),
            round,
            result,
        }
    }
}

fn run_one(vfs: &dyn Vfs, dir: &Path, spec: &RunSpec, quiet: bool) -> anyhow::Result<Measured> {
    check_alignment(vfs, dir, spec)?;
    let file = BenchFile::new(dir.join(spec.file_name()))
        .with_context(|| format!("cannot prepare {}", dir.display()))?;
    prepare_file(vfs, file.path(), spec)?;
    let pool = random_pool(spec.size_bytes as usize);
    // A fresh descriptor for the timed loop: the syscall audit tells the
    // timed writes from the preparation's by this open.
    let journal = vfs.open(file.path(), spec.method.open_options())?;
    let bar = progress::bar(spec.count, spec.label(), quiet);
    let timed = timed_loop(journal.as_ref(), spec, &pool, &bar);
    bar.finish_and_clear();
    let (total, latency) = timed?;
    drop(journal);
    let figures = RunFigures::new(spec.count, spec.size_bytes, total, &latency);
    Ok(Measured { figures, latency })
}

/// Refuse a direct-I/O run whose writes cannot be aligned before creating
/// anything, with the same message the file layer would give.
fn check_alignment(vfs: &dyn Vfs, dir: &Path, spec: &RunSpec) -> anyhow::Result<()> {
    if !spec.method.is_direct() {
        return Ok(());
    }
    let block = vfs.block_size(dir)?;
    let write = spec.write_size_bytes();
    if write % block as u64 != 0 {
        return Err(IoError::Misaligned {
            block,
            what: "write length (--size / --writes-per-commit)",
            value: write,
        }
        .into());
    }
    Ok(())
}

/// Create the journal file and preallocate it as `spec.prealloc` says,
/// through a buffered descriptor that is closed before the timed run.
/// Everything is synced (file and directory), so the timed commits pay for
/// their own writes only.
pub fn prepare_file(vfs: &dyn Vfs, path: &Path, spec: &RunSpec) -> anyhow::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let needed = spec.space_needed_bytes();
    let available = vfs.free_space(dir)?.unwrap_or(u64::MAX);
    if needed > available {
        return Err(IoError::NoSpace {
            path: dir.to_path_buf(),
            needed,
            available,
        }
        .into());
    }
    files::prepare_file(vfs, path, spec.prealloc, spec.file_size_bytes, false)
}

/// Random, incompressible bytes, aligned for direct I/O, filled before the
/// timed region.
fn random_pool(size: usize) -> RandomPool {
    RandomPool::new(size, POOL_SLACK_BYTES)
}

/// The payload of commit `i`.
fn payload(pool: &RandomPool, i: u64, size: usize) -> &[u8] {
    pool.payload(i, size)
}

fn timed_loop(
    journal: &dyn VfsFile,
    spec: &RunSpec,
    pool: &RandomPool,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<(Duration, LatencyRecorder)> {
    let size = spec.size_bytes as usize;
    let mut latency = LatencyRecorder::new();
    let start = Instant::now();
    for i in 0..spec.count {
        let offset = i * spec.size_bytes;
        let data = payload(pool, i, size);
        let t = Instant::now();
        commit(spec.method, journal, data, offset, spec.writes_per_commit)
            .with_context(|| format!("commit {i} at offset {offset}"))?;
        latency.record(t.elapsed());
        if (i + 1) % progress::PROGRESS_STEP == 0 {
            bar.inc(progress::PROGRESS_STEP);
        }
    }
    Ok((start.elapsed(), latency))
}

/// Make one commit of `data` durable as `method` does, written as `parts`
/// equal writes. With one part this is exactly
/// [`WriteMethod::write_durably`]. With more, as pg_test_fsync does: the
/// sync-call methods write every part and sync once; the per-write durable
/// methods (O_DSYNC descriptors, RWF_DSYNC, linked io_uring fdatasync) make
/// each part durable; buffered and O_DIRECT stay without a sync, as with
/// one part.
pub fn commit(
    method: WriteMethod,
    file: &dyn VfsFile,
    data: &[u8],
    offset: u64,
    parts: u32,
) -> keel::io::Result<()> {
    if parts == 1 {
        return method.write_durably(file, data, offset);
    }
    let part_len = data.len() / parts as usize;
    for (k, part) in data.chunks_exact(part_len).enumerate() {
        let at = offset + (k * part_len) as u64;
        match method {
            WriteMethod::Pwritev2Dsync | WriteMethod::UringFdatasync => {
                file.write_dsync_at(part, at)?
            }
            _ => file.write_at(part, at)?,
        }
    }
    match method {
        WriteMethod::Fsync => file.sync(SyncKind::All),
        WriteMethod::Fdatasync => file.sync(SyncKind::Data),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::Prealloc;
    use keel::io::RealVfs;

    fn spec(method: WriteMethod, prealloc: Prealloc, parts: u32) -> RunSpec {
        RunSpec {
            method,
            prealloc,
            writes_per_commit: parts,
            size_bytes: 16384,
            count: 8,
            file_size_bytes: 1 << 20,
        }
    }

    #[test]
    fn runs_write_the_payload_and_clean_up() {
        let dir = std::env::temp_dir().join(format!("keel-run-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (method, prealloc, parts) in [
            (WriteMethod::Fdatasync, Prealloc::Zerofill, 1),
            (WriteMethod::Fsync, Prealloc::None, 4),
            (WriteMethod::Pwritev2Dsync, Prealloc::Fallocate, 2),
        ] {
            let s = spec(method, prealloc, parts);
            let m = run_one(&RealVfs, &dir, &s, true).unwrap();
            assert_eq!(m.latency.len(), 8);
            assert!(m.figures.commits_per_s > 0.0);
        }
        assert!(
            std::fs::read_dir(&dir).unwrap().next().is_none(),
            "files left"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn split_commit_writes_every_part() {
        let dir = std::env::temp_dir().join(format!("keel-split-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        let file = RealVfs
            .open(&path, WriteMethod::Fdatasync.open_options())
            .unwrap();
        let pool = random_pool(16384);
        let data = payload(&pool, 3, 16384);
        commit(WriteMethod::Fdatasync, file.as_ref(), data, 16384, 4).unwrap();
        let mut back = vec![0u8; 16384];
        file.read_exact_at(&mut back, 16384).unwrap();
        assert_eq!(&back[..], data);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn payloads_differ_between_commits() {
        let pool = random_pool(8192);
        assert_ne!(payload(&pool, 0, 8192), payload(&pool, 1, 8192));
        assert_eq!(
            payload(&pool, 0, 8192).as_ptr() as usize % files::POOL_STEP_BYTES,
            0
        );
    }
}
