//! Reporting pieces every `keel bench` subcommand shares, so that all of
//! them measure, print and clean up the same way:
//!
//! * [`LatencyRecorder`] — per-operation latency over an HDR histogram;
//!   [`LatencySummary`] serialises as `p50_us`, `p99_us`, `p999_us`,
//!   `max_us`, `mean_us`.
//! * [`RunFigures`] — the throughput figures of one timed run (`total_ms`,
//!   `ms_per_write`, `commits_per_s`, `mb_per_s` and the latency summary).
//! * [`Machine`] — the `machine` JSON object: file system, mount options,
//!   device, cache mode, FUA, block sizes, kernel, CPUs, memory.
//! * [`Table`] / [`number`] — markdown tables for text output.
//! * [`progress::bar`] — progress bars on stderr, hidden when not a terminal.
//! * [`BenchFile`] — a bench file removed on drop and on Ctrl-C.
//! * [`plot::percentile_svg`] — an SVG latency plot, one line per series;
//!   [`plot::xy_svg`] — figures against a parameter (MB/s by write size).
//! * [`files`] — the directory check, [`Prealloc`] and file preparation,
//!   [`RandomPool`] payloads.
//! * [`legend::legend`] — the lines under a text report that say what its
//!   words mean.
//!
//! Conventions: figures go to stdout (a table, or one JSON object with
//! `--json`); progress, warnings and errors go to stderr.

mod cleanup;
pub mod files;
mod latency;
pub mod legend;
mod machine;
pub mod plot;
pub mod progress;
mod table;

use std::time::Duration;

use serde::Serialize;

pub use cleanup::{BenchDir, BenchFile, BenchTree};
pub use files::{check_dir, prepare_file, Prealloc, RandomPool};
pub use latency::{LatencyRecorder, LatencySummary};
pub use machine::Machine;
pub use table::{number, Align, Table};

/// The median of `values` (the mean of the middle two for an even count),
/// or `None` when there are none: what every interleaved comparison
/// reports.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// Figures of one timed run of `count` operations of `bytes_per_op` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct RunFigures {
    /// Wall time of the whole timed loop.
    pub total_ms: f64,
    /// `total_ms / count`: the write-up's "ms per write" (one write = one
    /// commit of `--size` bytes).
    pub ms_per_write: f64,
    pub commits_per_s: f64,
    /// Megabytes (10^6 bytes) per second of payload.
    pub mb_per_s: f64,
    #[serde(flatten)]
    pub latency: LatencySummary,
}

impl RunFigures {
    pub fn new(count: u64, bytes_per_op: u64, total: Duration, latency: &LatencyRecorder) -> Self {
        let secs = total.as_secs_f64().max(f64::MIN_POSITIVE);
        let count_f = count as f64;
        RunFigures {
            total_ms: secs * 1_000.0,
            ms_per_write: secs * 1_000.0 / count_f.max(1.0),
            commits_per_s: count_f / secs,
            mb_per_s: count_f * bytes_per_op as f64 / secs / 1e6,
            latency: latency.summary(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures() {
        let mut lat = LatencyRecorder::new();
        lat.record(Duration::from_micros(250));
        let f = RunFigures::new(4000, 16384, Duration::from_secs(2), &lat);
        assert_eq!(f.total_ms, 2000.0);
        assert_eq!(f.ms_per_write, 0.5);
        assert_eq!(f.commits_per_s, 2000.0);
        assert!((f.mb_per_s - 32.768).abs() < 1e-9);
        let json = serde_json::to_value(f).unwrap();
        assert!(json.get("p99_us").is_some() && json.get("latency").is_none());
    }
}
