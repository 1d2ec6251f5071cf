//! One timed run of `keel bench sizes`: `writers` threads write
//! `writes_per_writer` writes of `size` bytes each, sequentially in their
//! own region (or file), started together at a barrier.

use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::Context;
use keel::io::{OpenMode, OpenOptions, SyncKind, Vfs, VfsFile};
use serde::Serialize;

use super::{Layout, Mode, SizeRun};
use crate::bench::report::files::check_direct_size;
use crate::bench::report::{
    prepare_file, progress, BenchFile, LatencyRecorder, LatencySummary, RandomPool,
};

/// Room in each writer's random pool for 64 different payload starts.
const POOL_SLACK_BYTES: usize = 256 << 10;
/// A writer advances the progress bar every this many writes.
const PROGRESS_WRITES: u64 = 64;

/// What a successful run measured.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Measured {
    /// From the start barrier until the last writer's last write returned.
    pub write_ms: f64,
    /// The final `fdatasync` of every file (buffered runs only).
    pub sync_ms: Option<f64>,
    /// `write_ms + sync_ms`: what the throughput is computed over.
    pub total_ms: f64,
    /// Megabytes (10^6 bytes) per second over `total_ms`.
    pub mb_per_s: f64,
    /// Megabytes per second over `write_ms` alone (what the page cache
    /// took in, for buffered runs).
    pub write_mb_per_s: f64,
    pub writes_per_s: f64,
    /// Latency of one write (its `pwrite` call).
    #[serde(flatten)]
    pub latency: LatencySummary,
}

impl Measured {
    fn new(run: &SizeRun, write: Duration, sync: Option<Duration>, lat: &LatencyRecorder) -> Self {
        let write_s = write.as_secs_f64().max(f64::MIN_POSITIVE);
        let total_s = write_s + sync.map_or(0.0, |s| s.as_secs_f64());
        let bytes = run.total_bytes() as f64;
        Measured {
            write_ms: write_s * 1e3,
            sync_ms: sync.map(|s| s.as_secs_f64() * 1e3),
            total_ms: total_s * 1e3,
            mb_per_s: bytes / total_s / 1e6,
            write_mb_per_s: bytes / write_s / 1e6,
            writes_per_s: run.writes() as f64 / total_s,
            latency: lat.summary(),
        }
    }
}

/// One run's result: its figures, or the error that stopped it.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub run: SizeRun,
    pub result: Result<Measured, String>,
    /// Every write's latency, when the run succeeded (for confidence
    /// intervals beyond the summary).
    pub latency: Option<LatencyRecorder>,
}

impl Outcome {
    /// Run `run` in `dir`; an error is reported on stderr at once and kept
    /// in the outcome, so the other runs still go ahead.
    pub fn run(vfs: &dyn Vfs, dir: &Path, run: &SizeRun, quiet: bool) -> Outcome {
        let (result, latency) = match run_one(vfs, dir, run, quiet) {
            Ok((m, l)) => (Ok(m), Some(l)),
            Err(e) => {
                let message = format!("{e:#}");
                eprintln!("{}: error: {message}", run.label());
                (Err(message), None)
            }
        };
        Outcome {
            run: *run,
            result,
            latency,
        }
    }
}

pub fn run_one(
    vfs: &dyn Vfs,
    dir: &Path,
    run: &SizeRun,
    quiet: bool,
) -> anyhow::Result<(Measured, LatencyRecorder)> {
    if run.mode == Mode::Durable {
        check_direct_size(
            vfs,
            dir,
            run.size_bytes,
            "write size (--sizes) for O_DIRECT",
        )?;
    }
    let file_len = run.total_bytes() / u64::from(run.file_count());
    let mut guards = Vec::new();
    for k in 0..run.file_count() {
        let guard = BenchFile::new(dir.join(run.file_name(k)))
            .with_context(|| format!("cannot prepare {}", dir.display()))?;
        prepare_file(vfs, guard.path(), run.prealloc, file_len, false)?;
        guards.push(guard);
    }
    let mode = match run.mode {
        Mode::Buffered => OpenMode::Buffered,
        Mode::Durable => OpenMode::DirectDsync,
    };
    let files = guards
        .iter()
        .map(|g| vfs.open(g.path(), OpenOptions::new(mode)))
        .collect::<Result<Vec<_>, _>>()?;
    let bar = progress::bar(run.writes(), run.label(), quiet);
    let timed = timed_writers(&files, run, &bar);
    bar.finish_and_clear();
    let (write, latency) = timed?;
    let sync = if run.mode == Mode::Buffered {
        let t = Instant::now();
        for f in &files {
            f.sync(SyncKind::Data)?;
        }
        Some(t.elapsed())
    } else {
        None
    };
    Ok((Measured::new(run, write, sync, &latency), latency))
}

/// Start every writer at a barrier; return the time until the last one
/// finished and every write's latency.
fn timed_writers(
    files: &[Arc<dyn VfsFile>],
    run: &SizeRun,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<(Duration, LatencyRecorder)> {
    let barrier = Barrier::new(run.writers as usize + 1);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..run.writers)
            .map(|w| {
                let (file, base) = match run.layout {
                    Layout::OneFile => (&files[0], u64::from(w) * run.writes_per_writer),
                    Layout::SeparateFiles => (&files[w as usize], 0),
                };
                let barrier = &barrier;
                s.spawn(move || {
                    let pool = RandomPool::new(run.size_bytes as usize, POOL_SLACK_BYTES);
                    barrier.wait();
                    writer(file.as_ref(), run, base, u64::from(w), &pool, bar)
                })
            })
            .collect();
        barrier.wait();
        // Each writer notes when it started and finished: the main thread
        // may be scheduled only after a short run is over (2 vCPUs), so its
        // own clock would miss the writes.
        let mut span: Option<(Instant, Instant)> = None;
        let mut latency = LatencyRecorder::new();
        let mut first_error = None;
        for handle in workers {
            match handle.join().expect("a bench writer panicked") {
                Ok((start, end, l)) => {
                    latency.merge(&l);
                    span = Some(span.map_or((start, end), |(s, e)| (s.min(start), e.max(end))));
                }
                Err(e) => first_error = first_error.or(Some(e)),
            }
        }
        match (first_error, span) {
            (Some(e), _) => Err(e),
            (None, Some((start, end))) => Ok((end - start, latency)),
            (None, None) => unreachable!("a run has at least one writer"),
        }
    })
}

/// One writer: `writes_per_writer` sequential writes starting at write
/// number `base` of the file.
fn writer(
    file: &dyn VfsFile,
    run: &SizeRun,
    base: u64,
    seed: u64,
    pool: &RandomPool,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<(Instant, Instant, LatencyRecorder)> {
    let size = run.size_bytes as usize;
    let mut latency = LatencyRecorder::new();
    let start = Instant::now();
    for i in 0..run.writes_per_writer {
        let offset = (base + i) * run.size_bytes;
        let data = pool.payload(i + seed * 7, size);
        let t = Instant::now();
        file.write_at(data, offset)
            .with_context(|| format!("write of {size} bytes at offset {offset}"))?;
        latency.record(t.elapsed());
        if (i + 1) % PROGRESS_WRITES == 0 {
            bar.inc(PROGRESS_WRITES);
        }
    }
    let end = Instant::now();
    bar.inc(run.writes_per_writer % PROGRESS_WRITES);
    Ok((start, end, latency))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::Prealloc;
    use keel::io::RealVfs;

    #[test]
    fn writers_fill_their_regions_and_files_are_removed() {
        let dir = std::env::temp_dir().join(format!("keel-sizes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (layout, mode) in [
            (Layout::OneFile, Mode::Buffered),
            (Layout::SeparateFiles, Mode::Durable),
        ] {
            let run = SizeRun {
                series: "parallel",
                writers: 3,
                layout,
                mode,
                size_bytes: 8192,
                writes_per_writer: 5,
                prealloc: Prealloc::None,
            };
            let (m, latency) = run_one(&RealVfs, &dir, &run, true).unwrap();
            assert_eq!(latency.len(), 15);
            assert_eq!(m.sync_ms.is_some(), mode == Mode::Buffered);
            assert!(m.total_ms >= m.write_ms && m.mb_per_s > 0.0);
        }
        assert!(std::fs::read_dir(&dir).unwrap().next().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
