//! Per-commit latency recording over an HDR histogram.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Highest latency the histogram tracks exactly: one hour. Anything slower is
/// clamped (and still counted), which no sane disk reaches per commit.
const HIGHEST_TRACKABLE_NS: u64 = 3_600 * 1_000_000_000;

/// Three significant digits: a 0.1 % error on every percentile, at a few
/// hundred KiB of memory.
const SIGNIFICANT_DIGITS: u8 = 3;

/// Records one latency per operation (commit, write, get) with nanosecond
/// resolution and answers percentiles in microseconds.
///
/// Recording is a few nanoseconds and never allocates, so it can sit inside
/// a timed loop.
#[derive(Clone, Debug)]
pub struct LatencyRecorder {
    hist: Histogram<u64>,
    /// The exact slowest operation (the histogram only keeps it to
    /// `SIGNIFICANT_DIGITS`).
    max_ns: u64,
}

impl Default for LatencyRecorder {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyRecorder {
    pub fn new() -> Self {
        let mut hist = Histogram::new_with_bounds(1, HIGHEST_TRACKABLE_NS, SIGNIFICANT_DIGITS)
            .expect("valid histogram bounds");
        // Write every count now: the counts (~256 KiB) come zeroed from
        // the allocator, not yet backed by memory, and each thread's
        // first records during the timed run faulted them in (with
        // transparent huge pages, a 2 MiB page zeroed by the kernel at a
        // time: ~2 ms per MiB on the project's VM). `black_box`: the
        // compiler may not assume the counts are still zero and drop the
        // writes.
        std::hint::black_box(&mut hist).clear();
        LatencyRecorder { hist, max_ns: 0 }
    }

    /// Record one operation that took `elapsed`.
    pub fn record(&mut self, elapsed: Duration) {
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.max_ns = self.max_ns.max(ns);
        // A zero-length operation is recorded as 1 ns, the lowest
        // discernible value; slower than an hour is clamped.
        self.hist
            .saturating_record(ns.clamp(1, HIGHEST_TRACKABLE_NS));
    }

    /// Add every operation `other` recorded (per-thread recorders merged
    /// after a multi-threaded run).
    pub fn merge(&mut self, other: &LatencyRecorder) {
        self.max_ns = self.max_ns.max(other.max_ns);
        self.hist
            .add(&other.hist)
            .expect("recorders share the same bounds");
    }

    /// How many operations were recorded.
    pub fn len(&self) -> u64 {
        self.hist.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The latency at `quantile` (0.0..=1.0), in microseconds. The
    /// histogram answers the top of a bucket, which can lie above the
    /// slowest operation recorded; no percentile is reported above it.
    pub fn quantile_us(&self, quantile: f64) -> f64 {
        self.hist.value_at_quantile(quantile).min(self.max_ns) as f64 / 1_000.0
    }

    /// The standard summary: p50, p99, p99.9, max and mean.
    pub fn summary(&self) -> LatencySummary {
        LatencySummary {
            p50_us: self.quantile_us(0.50),
            p99_us: self.quantile_us(0.99),
            p999_us: self.quantile_us(0.999),
            max_us: self.max_ns as f64 / 1_000.0,
            mean_us: self.hist.mean() / 1_000.0,
        }
    }

    /// The percentile distribution as `(quantile, latency_us)` points, dense
    /// in the tail (the shape HdrHistogram plots use): 2^k points per halving
    /// of the remaining distance to 100 %.
    pub fn percentile_points(&self) -> Vec<(f64, f64)> {
        const TICKS_PER_HALF_DISTANCE: u32 = 8;
        self.hist
            .iter_quantiles(TICKS_PER_HALF_DISTANCE)
            .map(|v| {
                (
                    v.quantile_iterated_to(),
                    v.value_iterated_to() as f64 / 1_000.0,
                )
            })
            .collect()
    }
}

/// Latency percentiles in microseconds, with the names every Keel bench
/// prints in JSON (`p50_us`, `p99_us`, `p999_us`, `max_us`, `mean_us`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LatencySummary {
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    pub mean_us: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_in_microseconds() {
        let mut r = LatencyRecorder::new();
        for us in 1..=1000u64 {
            r.record(Duration::from_micros(us));
        }
        r.record(Duration::from_nanos(123_456_789));
        let s = r.summary();
        assert_eq!(r.len(), 1001);
        // 1001 values: the median is the 501st; HDR rounds up by < 0.1 %.
        assert!((s.p50_us - 501.0).abs() < 1.0, "{s:?}");
        assert!((s.p99_us - 990.0).abs() < 2.0, "{s:?}");
        assert!(s.p99_us <= s.p999_us && s.p999_us <= s.max_us);
        let mut one = LatencyRecorder::new();
        one.record(Duration::from_nanos(1_212_479));
        assert_eq!(one.summary().p99_us, one.summary().max_us);
        assert_eq!(s.max_us, 123_456.789);
    }

    #[test]
    fn merge_keeps_counts_and_the_exact_max() {
        let mut a = LatencyRecorder::new();
        let mut b = LatencyRecorder::new();
        a.record(Duration::from_micros(10));
        b.record(Duration::from_nanos(2_000_123));
        b.record(Duration::from_micros(20));
        a.merge(&b);
        assert_eq!(a.len(), 3);
        assert_eq!(a.summary().max_us, 2_000.123);
    }

    #[test]
    fn extremes_are_clamped_not_lost() {
        let mut r = LatencyRecorder::new();
        r.record(Duration::ZERO);
        r.record(Duration::from_secs(10_000));
        assert_eq!(r.len(), 2);
        assert_eq!(r.summary().max_us, 1e10);
    }

    #[test]
    fn percentile_points_rise() {
        let mut a = LatencyRecorder::new();
        a.record(Duration::from_micros(100));
        a.record(Duration::from_micros(300));
        assert_eq!(a.len(), 2);
        let points = a.percentile_points();
        assert!(points
            .windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        assert!((points.last().unwrap().1 - 300.0).abs() < 1.0);
    }
}
