//! The five variants of `keel bench mmap`, each on a fresh file.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use clap::ValueEnum;
use keel::io::{OpenMode, OpenOptions, SyncKind, Vfs, VfsFile};
use memmap2::{Mmap, MmapMut, MmapOptions};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::MmapPlan;
use crate::bench::report::{prepare_file, progress, BenchFile, LatencyRecorder, RandomPool};

const PAGE_BYTES: u64 = 4096;
const POOL_SLACK_BYTES: usize = 1 << 20;

/// How a transaction's bytes reach the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Variant {
    /// (a) One `pwrite` of the whole transaction at the end of the log, then
    /// `fdatasync`: the raw best case.
    #[value(name = "sequential")]
    Sequential,
    /// (b) One `pwrite` per put (key and value), then `fdatasync`.
    #[value(name = "small_writes")]
    SmallWrites,
    /// (c) One `pwrite` at a random 4 KiB-aligned offset in the region,
    /// then `fdatasync`: page writes scattered like a B-tree's.
    #[value(name = "random_4k")]
    Random4k,
    /// (d) Copied into a shared memory map at a random 4 KiB-aligned offset,
    /// then `msync(MS_SYNC)` of the touched pages and `fdatasync`.
    #[value(name = "mmap_random")]
    MmapRandom,
    /// (e) As `sequential`, while a read-only map of the whole file is held
    /// open with every page faulted in (Keel's design: writes by `pwrite`,
    /// reads through a map).
    #[value(name = "sequential_read_map")]
    SequentialReadMap,
}

impl Variant {
    pub const ALL: [Variant; 5] = [
        Variant::Sequential,
        Variant::SmallWrites,
        Variant::Random4k,
        Variant::MmapRandom,
        Variant::SequentialReadMap,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Variant::Sequential => "sequential",
            Variant::SmallWrites => "small_writes",
            Variant::Random4k => "random_4k",
            Variant::MmapRandom => "mmap_random",
            Variant::SequentialReadMap => "sequential_read_map",
        }
    }

    /// The calls one transaction makes.
    pub fn how(self) -> &'static str {
        match self {
            Variant::Sequential => "pwrite64 + fdatasync",
            Variant::SmallWrites => "puts × pwrite64 + fdatasync",
            Variant::Random4k => "pwrite64 at random 4K offset + fdatasync",
            Variant::MmapRandom => "memcpy to shared map + msync(MS_SYNC) + fdatasync",
            Variant::SequentialReadMap => "pwrite64 + fdatasync, read-only map held",
        }
    }

    /// Whether the variant writes at random offsets in the region.
    pub fn random(self) -> bool {
        matches!(self, Variant::Random4k | Variant::MmapRandom)
    }
}

#[derive(Clone, Debug)]
pub struct Measured {
    pub total_ms: f64,
    pub tx_per_s: f64,
    /// Puts per second.
    pub ops_per_s: f64,
    /// Latency of one transaction, its sync included.
    pub latency: LatencyRecorder,
}

#[derive(Clone, Debug)]
pub struct Outcome {
    pub variant: Variant,
    /// The round (0-based) of `--rounds`.
    pub round: u32,
    /// Transactions the run made (its plan's).
    pub transactions: u64,
    pub result: Result<Measured, String>,
}

impl Outcome {
    pub fn run(vfs: &dyn Vfs, plan: &MmapPlan, variant: Variant, round: u32) -> Outcome {
        let result = run_one(vfs, plan, variant).map_err(|e| {
            let message = format!("{e:#}");
            eprintln!("{}: error: {message}", variant.name());
            message
        });
        Outcome {
            variant,
            round,
            transactions: plan.transactions,
            result,
        }
    }

    pub fn json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "variant": self.variant.name(),
            "how": self.variant.how(),
            "round": self.round,
            "transactions": self.transactions,
        });
        match &self.result {
            Ok(m) => {
                v["total_ms"] = m.total_ms.into();
                v["tx_per_s"] = m.tx_per_s.into();
                v["ops_per_s"] = m.ops_per_s.into();
                let lat = serde_json::to_value(m.latency.summary()).expect("serialisable");
                for (k, x) in lat.as_object().expect("an object") {
                    v[k] = x.clone();
                }
            }
            Err(e) => v["error"] = e.as_str().into(),
        }
        v
    }
}

fn run_one(vfs: &dyn Vfs, plan: &MmapPlan, variant: Variant) -> anyhow::Result<Measured> {
    let guard = BenchFile::new(plan.dir.join(format!(
        "keel-bench-{}-mmap-{}.dat",
        std::process::id(),
        variant.name()
    )))
    .with_context(|| format!("cannot prepare {}", plan.dir.display()))?;
    let len = plan.file_bytes(variant);
    // `none` is a sparse file of the full length, as in the original: a map
    // needs the length, and every variant starts alike.
    prepare_file(vfs, guard.path(), plan.prealloc, len, true)?;
    let file = vfs.open(guard.path(), OpenOptions::new(OpenMode::Buffered))?;
    let pool = RandomPool::new(plan.tx_bytes as usize, POOL_SLACK_BYTES);
    let bar = progress::bar(plan.transactions, variant.name(), plan.json);
    let timed = timed(file.as_ref(), guard.path(), plan, variant, &pool, &bar);
    bar.finish_and_clear();
    let (elapsed, latency) = timed?;
    let secs = elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
    Ok(Measured {
        total_ms: secs * 1e3,
        tx_per_s: plan.transactions as f64 / secs,
        ops_per_s: (plan.transactions * plan.puts) as f64 / secs,
        latency,
    })
}

/// Where each variant's maps live during the timed loop.
enum Maps {
    None,
    Shared(MmapMut),
    ReadOnly(Mmap),
}

fn timed(
    file: &dyn VfsFile,
    path: &Path,
    plan: &MmapPlan,
    variant: Variant,
    pool: &RandomPool,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<(Duration, LatencyRecorder)> {
    let mut maps = maps_for(variant, path, plan.file_bytes(variant) as usize)?;
    let tx = plan.tx_bytes as usize;
    let put = (plan.key_size + plan.value_size) as usize;
    let slots = (plan.region - plan.tx_bytes) / PAGE_BYTES + 1;
    let mut rng = SmallRng::from_os_rng();
    let mut latency = LatencyRecorder::new();
    let mut last = (0u64, 0u64);
    let start = Instant::now();
    for i in 0..plan.transactions {
        let data = pool.payload(i, tx);
        let offset = if variant.random() {
            rng.random_range(0..slots) * PAGE_BYTES
        } else {
            i * plan.tx_bytes
        };
        let t = Instant::now();
        match (&mut maps, variant) {
            (Maps::Shared(map), _) => {
                let at = offset as usize;
                map[at..at + tx].copy_from_slice(data);
                map.flush_range(at, tx).context("msync")?;
            }
            (_, Variant::SmallWrites) => {
                for (k, p) in data.chunks(put).enumerate() {
                    file.write_at(p, offset + (k * put) as u64)?;
                }
            }
            _ => file.write_at(data, offset)?,
        }
        file.sync(SyncKind::Data)?;
        latency.record(t.elapsed());
        last = (i, offset);
        if (i + 1) % progress::PROGRESS_STEP == 0 {
            bar.inc(progress::PROGRESS_STEP);
        }
    }
    let elapsed = start.elapsed();
    verify(file, &maps, pool, last, tx)?;
    Ok((elapsed, latency))
}

/// The maps `variant` writes or reads through, over the first `len`
/// bytes of the file at `path`: a shared writable map (`mmap_random`), a
/// read-only one with every page faulted in (`sequential_read_map`), or
/// none.
fn maps_for(variant: Variant, path: &Path, len: usize) -> anyhow::Result<Maps> {
    let open_for_map = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .with_context(|| format!("open {} for mapping", path.display()))
    };
    Ok(match variant {
        // SAFETY: the file is this bench's own (created just now with a
        // unique name, mode 0600) and nobody truncates it while it is
        // mapped; the map is dropped before the file is removed.
        Variant::MmapRandom => {
            Maps::Shared(unsafe { MmapOptions::new().len(len).map_mut(&open_for_map()?) }?)
        }
        Variant::SequentialReadMap => {
            // SAFETY: as above; the map is only read.
            let map = unsafe { MmapOptions::new().len(len).map(&open_for_map()?) }?;
            // Fault every page in, as a reader of the store would have:
            // writeback must then deal with pages mapped into a process.
            let touched = (0..map.len())
                .step_by(PAGE_BYTES as usize)
                .fold(0u8, |a, i| a ^ map[i]);
            std::hint::black_box(touched);
            Maps::ReadOnly(map)
        }
        _ => Maps::None,
    })
}

/// Check (untimed) that the last transaction reads back through `pread`,
/// and through the map where there is one: the timed loop really wrote.
fn verify(
    file: &dyn VfsFile,
    maps: &Maps,
    pool: &RandomPool,
    (i, offset): (u64, u64),
    tx: usize,
) -> anyhow::Result<()> {
    let expected = pool.payload(i, tx);
    let mut back = vec![0u8; tx];
    file.read_exact_at(&mut back, offset)?;
    ensure!(
        back == expected,
        "transaction {i} did not read back at offset {offset}"
    );
    let at = offset as usize;
    let mapped = match maps {
        Maps::Shared(m) => Some(&m[at..at + tx]),
        Maps::ReadOnly(m) => Some(&m[at..at + tx]),
        Maps::None => None,
    };
    if let Some(mapped) = mapped {
        ensure!(
            mapped == expected,
            "transaction {i} not visible through the map"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::Prealloc;
    use keel::io::RealVfs;

    #[test]
    fn every_variant_writes_and_cleans_up() {
        let dir = std::env::temp_dir().join(format!("keel-mmap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for prealloc in [Prealloc::None, Prealloc::Zerofill] {
            let plan = MmapPlan {
                dir: dir.clone(),
                transactions: 20,
                puts: 10,
                key_size: 16,
                value_size: 100,
                tx_bytes: 1160,
                region: 1 << 20,
                prealloc,
                variants: Variant::ALL.to_vec(),
                rounds: 1,
                quick: true,
                json: true,
                plot: None,
            };
            for v in Variant::ALL {
                let m = run_one(&RealVfs, &plan, v).unwrap();
                assert_eq!(m.latency.len(), 20, "{v:?}");
                assert!(m.ops_per_s > m.tx_per_s);
            }
        }
        assert!(std::fs::read_dir(&dir).unwrap().next().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
