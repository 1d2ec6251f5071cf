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

    /// The latency of the operation of `rank` (1 = the fastest), in
    /// microseconds.
    fn at_rank_us(&self, rank: u64) -> f64 {
        let n = self.len().max(1);
        self.quantile_us(rank.clamp(1, n) as f64 / n as f64)
    }

    /// A rough 95 % confidence interval of the `quantile` (0..1) of the
    /// distribution the operations were drawn from, in microseconds: the
    /// order statistics whose ranks lie 1.96 binomial standard deviations
    /// either side of `n × quantile` (distribution-free; the normal
    /// approximation makes it rough for a few dozen operations). A bound
    /// the operations cannot give is `None`: the upper bound of a p99 of
    /// fewer than a few hundred operations lies above the slowest of them.
    pub fn quantile_ci95_us(&self, quantile: f64) -> (Option<f64>, Option<f64>) {
        let n = self.len() as f64;
        if n < 1.0 {
            return (None, None);
        }
        let half = 1.96 * (n * quantile * (1.0 - quantile)).sqrt();
        let lo = (n * quantile - half).floor();
        let hi = (n * quantile + half).ceil() + 1.0;
        let bound = |rank: f64| (rank >= 1.0 && rank <= n).then(|| self.at_rank_us(rank as u64));
        (bound(lo), bound(hi))
    }

    /// A rough 95 % confidence interval of the mean, in microseconds:
    /// mean ± 1.96 standard errors, the lower bound no faster than the
    /// fastest operation (`None` below two operations). Latency tails are
    /// heavy, so take it as an order of magnitude of the noise.
    pub fn mean_ci95_us(&self) -> Option<(f64, f64)> {
        let n = self.len();
        if n < 2 {
            return None;
        }
        let mean = self.hist.mean() / 1_000.0;
        let half = 1.96 * self.hist.stdev() / 1_000.0 / (n as f64).sqrt();
        let fastest = self.hist.min() as f64 / 1_000.0;
        Some(((mean - half).max(fastest), mean + half))
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
    fn confidence_intervals_narrow_with_more_operations() {
        let record = |n: u64| {
            let mut r = LatencyRecorder::new();
            for i in 0..n {
                // 100 µs … 199 µs, evenly: the median is ~150 µs.
                r.record(Duration::from_micros(100 + (i * 100) / n));
            }
            r
        };
        let (small, large) = (record(40), record(4000));
        let (lo, hi) = small.quantile_ci95_us(0.5);
        let (lo, hi) = (lo.unwrap(), hi.unwrap());
        assert!(lo < 150.0 && 150.0 < hi, "{lo} {hi}");
        let (llo, lhi) = large.quantile_ci95_us(0.5);
        assert!(lhi.unwrap() - llo.unwrap() < (hi - lo) / 5.0);
        // 40 operations cannot bound a p99 from above; 4000 can.
        assert_eq!(small.quantile_ci95_us(0.99).1, None);
        assert!(large.quantile_ci95_us(0.99).1.is_some());
        let (mlo, mhi) = small.mean_ci95_us().unwrap();
        assert!(mlo < 150.0 && 150.0 < mhi, "{mlo} {mhi}");
        assert_eq!(LatencyRecorder::new().quantile_ci95_us(0.5), (None, None));
        assert_eq!(LatencyRecorder::new().mean_ci95_us(), None);
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
