//! The file set and the timed mixed load of `keel bench mixed`.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::Context;
use keel::io::{AlignedBuf, OpenMode, OpenOptions, SyncKind, Vfs, VfsFile};
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use serde::Serialize;

use super::MixedPlan;
use crate::bench::report::files::check_direct_size;
use crate::bench::report::{progress, BenchFile, LatencyRecorder, RandomPool};

/// The file set is filled in chunks of this many fresh random bytes.
const FILL_CHUNK_BYTES: usize = 1 << 20;
const POOL_SLACK_BYTES: usize = 1 << 20;
/// How often the progress bar moves while the threads run.
const PROGRESS_TICK: Duration = Duration::from_millis(100);

/// With or without a sync after every write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Variant {
    /// `O_DIRECT` writes with no sync: the data may still sit in the
    /// device's volatile cache; what the load costs without durability.
    NoSync,
    /// `O_DIRECT` write, then `fsync`, for every write (sysbench
    /// `--file-fsync-freq=1`, fio `--fsync=1`).
    FsyncEveryWrite,
}

impl Variant {
    pub const ALL: [Variant; 2] = [Variant::NoSync, Variant::FsyncEveryWrite];

    pub fn name(self) -> &'static str {
        match self {
            Variant::NoSync => "no_sync",
            Variant::FsyncEveryWrite => "fsync_every_write",
        }
    }
}

/// What one variant measured.
#[derive(Clone, Debug)]
pub struct Measured {
    pub elapsed: Duration,
    pub reads: u64,
    pub writes: u64,
    pub read_mib_per_s: f64,
    pub write_mib_per_s: f64,
    pub reads_per_s: f64,
    pub writes_per_s: f64,
    /// Reads that returned a block of zeros: the file set holds random data,
    /// so anything but 0 means the reads did not see what was written.
    pub zero_blocks_read: u64,
    pub read_latency: LatencyRecorder,
    /// Latency of one write, its fsync included.
    pub write_latency: LatencyRecorder,
}

#[derive(Clone, Debug)]
pub struct Outcome {
    pub variant: Variant,
    pub result: Result<Measured, String>,
}

impl Outcome {
    pub fn json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({ "variant": self.variant.name() });
        match &self.result {
            Ok(m) => {
                v["sync_after_write"] = match self.variant {
                    Variant::NoSync => serde_json::json!(null),
                    Variant::FsyncEveryWrite => serde_json::json!("fsync"),
                };
                v["elapsed_ms"] = serde_json::json!(m.elapsed.as_secs_f64() * 1e3);
                v["reads"] = m.reads.into();
                v["writes"] = m.writes.into();
                v["read_mib_per_s"] = m.read_mib_per_s.into();
                v["write_mib_per_s"] = m.write_mib_per_s.into();
                v["reads_per_s"] = m.reads_per_s.into();
                v["writes_per_s"] = m.writes_per_s.into();
                v["zero_blocks_read"] = m.zero_blocks_read.into();
                v["read_latency"] = serde_json::to_value(m.read_latency.summary()).unwrap();
                v["write_latency"] = serde_json::to_value(m.write_latency.summary()).unwrap();
            }
            Err(e) => v["error"] = e.as_str().into(),
        }
        v
    }
}

/// Fill the file set once, then run every variant over it.
pub fn run_all(vfs: &dyn Vfs, plan: &MixedPlan) -> anyhow::Result<Vec<Outcome>> {
    check_direct_size(vfs, &plan.dir, plan.block, "--block (O_DIRECT)")?;
    let guards = fill_file_set(vfs, plan)?;
    let files = guards
        .iter()
        .map(|g| vfs.open(g.path(), OpenOptions::new(OpenMode::Direct)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Variant::ALL
        .into_iter()
        .map(|variant| {
            let result = timed(&files, plan, variant).map_err(|e| {
                let message = format!("{e:#}");
                eprintln!("{}: error: {message}", variant.name());
                message
            });
            Outcome { variant, result }
        })
        .collect())
}

/// Create the files and fill them with fresh random bytes (no block repeats
/// another), then sync: the reads must never return zeros or cached data.
fn fill_file_set(vfs: &dyn Vfs, plan: &MixedPlan) -> anyhow::Result<Vec<BenchFile>> {
    let bar = progress::bar(plan.set_size >> 20, "filling the file set (MiB)", plan.json);
    let mut rng = SmallRng::from_os_rng();
    let mut chunk = vec![0u8; FILL_CHUNK_BYTES];
    let mut guards = Vec::new();
    for k in 0..plan.files {
        let guard = BenchFile::new(plan.dir.join(file_name(k)))
            .with_context(|| format!("cannot prepare {}", plan.dir.display()))?;
        let file = vfs.open(
            guard.path(),
            OpenOptions::new(OpenMode::Buffered).create_new(true),
        )?;
        guards.push(guard);
        let mut offset = 0;
        while offset < plan.file_size {
            let n = (plan.file_size - offset).min(FILL_CHUNK_BYTES as u64) as usize;
            rng.fill_bytes(&mut chunk[..n]);
            file.write_at(&chunk[..n], offset)?;
            offset += n as u64;
            bar.set_position((u64::from(k) * plan.file_size + offset) >> 20);
        }
        file.sync(SyncKind::All)?;
    }
    vfs.sync_dir(&plan.dir)?;
    bar.finish_and_clear();
    Ok(guards)
}

fn file_name(k: u32) -> String {
    format!("keel-bench-{}-mixed-{k}.dat", std::process::id())
}

/// Per-thread counts.
struct ThreadResult {
    reads: u64,
    writes: u64,
    zero_blocks_read: u64,
    read_latency: LatencyRecorder,
    write_latency: LatencyRecorder,
}

fn timed(
    files: &[Arc<dyn VfsFile>],
    plan: &MixedPlan,
    variant: Variant,
) -> anyhow::Result<Measured> {
    let barrier = Barrier::new(plan.threads as usize + 1);
    let duration = plan.duration();
    let bar = progress::bar(
        duration.as_millis() as u64,
        format!("{} (ms)", variant.name()),
        plan.json,
    );
    let results = std::thread::scope(|s| {
        let workers: Vec<_> = (0..plan.threads)
            .map(|_| {
                let barrier = &barrier;
                s.spawn(move || worker(files, plan, variant, barrier))
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        while start.elapsed() < duration {
            std::thread::sleep(PROGRESS_TICK.min(duration.saturating_sub(start.elapsed())));
            bar.set_position(start.elapsed().as_millis() as u64);
        }
        workers
            .into_iter()
            .map(|h| h.join().expect("a bench thread panicked"))
            .collect::<Vec<_>>()
    });
    bar.finish_and_clear();
    let mut total = ThreadResult {
        reads: 0,
        writes: 0,
        zero_blocks_read: 0,
        read_latency: LatencyRecorder::new(),
        write_latency: LatencyRecorder::new(),
    };
    let mut elapsed = Duration::ZERO;
    for r in results {
        let (r, e) = r?;
        total.reads += r.reads;
        total.writes += r.writes;
        total.zero_blocks_read += r.zero_blocks_read;
        total.read_latency.merge(&r.read_latency);
        total.write_latency.merge(&r.write_latency);
        elapsed = elapsed.max(e);
    }
    let secs = elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
    let mib = plan.block as f64 / (1u64 << 20) as f64;
    Ok(Measured {
        elapsed,
        reads: total.reads,
        writes: total.writes,
        read_mib_per_s: total.reads as f64 * mib / secs,
        write_mib_per_s: total.writes as f64 * mib / secs,
        reads_per_s: total.reads as f64 / secs,
        writes_per_s: total.writes as f64 / secs,
        zero_blocks_read: total.zero_blocks_read,
        read_latency: total.read_latency,
        write_latency: total.write_latency,
    })
}

/// One thread: random requests until the duration is over; returns its
/// counts and how long it ran.
fn worker(
    files: &[Arc<dyn VfsFile>],
    plan: &MixedPlan,
    variant: Variant,
    barrier: &Barrier,
) -> anyhow::Result<(ThreadResult, Duration)> {
    let block = plan.block as usize;
    let blocks_per_file = plan.file_size / plan.block;
    let pool = RandomPool::new(block, POOL_SLACK_BYTES);
    let mut read_buf = AlignedBuf::new(block, crate::bench::report::files::POOL_STEP_BYTES);
    let mut rng = SmallRng::from_os_rng();
    let mut r = ThreadResult {
        reads: 0,
        writes: 0,
        zero_blocks_read: 0,
        read_latency: LatencyRecorder::new(),
        write_latency: LatencyRecorder::new(),
    };
    barrier.wait();
    let start = Instant::now();
    let deadline = start + plan.duration();
    let mut i = 0u64;
    while Instant::now() < deadline {
        let file = &files[rng.random_range(0..files.len())];
        let offset = rng.random_range(0..blocks_per_file) * plan.block;
        let t = Instant::now();
        if rng.random_range(0..100) < plan.read_percent {
            file.read_exact_at(&mut read_buf, offset)
                .with_context(|| format!("read at offset {offset}"))?;
            r.read_latency.record(t.elapsed());
            r.reads += 1;
            if read_buf.iter().all(|&b| b == 0) {
                r.zero_blocks_read += 1;
            }
        } else {
            file.write_at(pool.payload(i, block), offset)
                .with_context(|| format!("write at offset {offset}"))?;
            if variant == Variant::FsyncEveryWrite {
                file.sync(SyncKind::All)?;
            }
            r.write_latency.record(t.elapsed());
            r.writes += 1;
            i += 1;
        }
    }
    Ok((r, start.elapsed()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel::io::RealVfs;

    #[test]
    fn both_variants_read_random_data_and_clean_up() {
        let dir = std::env::temp_dir().join(format!("keel-mixed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let plan = MixedPlan {
            dir: dir.clone(),
            set_size: 2 * 8 * 16384,
            files: 2,
            file_size: 8 * 16384,
            threads: 2,
            block: 16384,
            read_percent: 60,
            duration_s: 0.05,
            quick: true,
            json: true,
            plot: None,
        };
        let outcomes = run_all(&RealVfs, &plan).unwrap();
        assert_eq!(outcomes.len(), 2);
        for o in &outcomes {
            let m = o.result.as_ref().unwrap();
            assert!(m.reads > 0 && m.writes > 0, "{:?}", o.variant);
            assert_eq!(m.zero_blocks_read, 0);
            assert_eq!(m.read_latency.len(), m.reads);
        }
        assert!(std::fs::read_dir(&dir).unwrap().next().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
