//! The probe's calibration: a fraction of a second of writes that prices
//! the steps for the budget — what a durable write, a plain `O_DIRECT`
//! write and a zero-fill cost here, now.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use keel::io::{Vfs, WriteMethod};
use serde::Serialize;

use super::budget::Rates;
use crate::bench::report::{prepare_file, BenchFile, LatencyRecorder, Prealloc, RandomPool};

/// Writes of this size, the journal's commit size.
const WRITE_BYTES: u64 = 16 << 10;
/// At most this many writes of each kind, and at most this long: enough
/// for a mean within a few tens of percent, a small part of any budget.
const MAX_WRITES: u64 = 32;
const MIN_WRITES: u64 = 4;
const MAX_TIME: Duration = Duration::from_millis(300);
/// The zero-filled file the writes go into, timed as the fill rate.
const FILE_BYTES: u64 = 8 << 20;

/// What the calibration measured.
#[derive(Clone, Debug, Serialize)]
pub struct Calibration {
    /// The durable method measured: `odirect_dsync`, or `fdatasync` where
    /// direct I/O is refused (tmpfs).
    pub durable_method: &'static str,
    pub durable_writes: u64,
    /// Mean latency of a durable 16 KiB write.
    pub durable_write_us: f64,
    pub plain_method: &'static str,
    pub plain_writes: u64,
    pub plain_write_us: f64,
    /// Zero-filling and syncing an 8 MiB file, in MB/s (10^6 bytes).
    pub fill_mb_per_s: f64,
    pub elapsed_s: f64,
}

impl Calibration {
    pub fn rates(&self) -> Rates {
        Rates {
            sync_s: self.durable_write_us / 1e6,
            plain_s: self.plain_write_us / 1e6,
            fill_bytes_per_s: self.fill_mb_per_s * 1e6,
        }
    }

    pub fn describe(&self) -> String {
        format!(
            "a durable 16 KiB write ({}) {:.0} µs (mean of {}), a plain one ({}) {:.0} µs, \
             zero-fill {:.0} MB/s; in {:.2} s",
            self.durable_method,
            self.durable_write_us,
            self.durable_writes,
            self.plain_method,
            self.plain_write_us,
            self.fill_mb_per_s,
            self.elapsed_s
        )
    }
}

/// Measure in `dir` (which exists and takes files).
pub fn calibrate(vfs: &dyn Vfs, dir: &Path) -> anyhow::Result<Calibration> {
    let started = Instant::now();
    let file = BenchFile::new(dir.join(format!("keel-bench-{}-calibrate.dat", std::process::id())))
        .with_context(|| format!("cannot prepare {}", dir.display()))?;
    let t = Instant::now();
    prepare_file(vfs, file.path(), Prealloc::Zerofill, FILE_BYTES, false)?;
    let fill_s = t.elapsed().as_secs_f64().max(1e-6);
    let pool = RandomPool::new(WRITE_BYTES as usize, 1 << 20);
    let (durable_method, durable) = timed_writes(
        vfs,
        file.path(),
        &pool,
        [WriteMethod::OdirectDsync, WriteMethod::Fdatasync],
    )?;
    let (plain_method, plain) = timed_writes(
        vfs,
        file.path(),
        &pool,
        [WriteMethod::Odirect, WriteMethod::Buffered],
    )?;
    Ok(Calibration {
        durable_method: durable_method.name(),
        durable_writes: durable.len(),
        durable_write_us: durable.summary().mean_us,
        plain_method: plain_method.name(),
        plain_writes: plain.len(),
        plain_write_us: plain.summary().mean_us,
        fill_mb_per_s: FILE_BYTES as f64 / fill_s / 1e6,
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}

/// Up to [`MAX_WRITES`] sequential 16 KiB writes with the first method of
/// `methods` the file system takes, stopping after [`MAX_TIME`].
fn timed_writes(
    vfs: &dyn Vfs,
    path: &Path,
    pool: &RandomPool,
    methods: [WriteMethod; 2],
) -> anyhow::Result<(WriteMethod, LatencyRecorder)> {
    let mut last_error = None;
    for method in methods {
        let file = match vfs.open(path, method.open_options()) {
            Ok(f) => f,
            Err(e) => {
                last_error = Some(e);
                continue;
            }
        };
        let mut latency = LatencyRecorder::new();
        let started = Instant::now();
        for i in 0..MAX_WRITES {
            if i >= MIN_WRITES && started.elapsed() > MAX_TIME {
                break;
            }
            let data = pool.payload(i, WRITE_BYTES as usize);
            let t = Instant::now();
            method
                .write_durably(file.as_ref(), data, i * WRITE_BYTES)
                .with_context(|| format!("calibration write {i} ({method})"))?;
            latency.record(t.elapsed());
        }
        return Ok((method, latency));
    }
    Err(last_error.expect("two methods tried")).context("calibration: cannot open a bench file")
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel::io::RealVfs;

    #[test]
    fn calibrates_and_cleans_up() {
        let dir = std::env::temp_dir().join(format!("keel-calibrate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let c = calibrate(&RealVfs, &dir).unwrap();
        assert!(
            c.durable_writes >= MIN_WRITES && c.plain_writes >= MIN_WRITES,
            "{c:?}"
        );
        let r = c.rates();
        assert!(
            r.sync_s > 0.0 && r.plain_s > 0.0 && r.fill_bytes_per_s > 0.0,
            "{r:?}"
        );
        assert!(std::fs::read_dir(&dir).unwrap().next().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
