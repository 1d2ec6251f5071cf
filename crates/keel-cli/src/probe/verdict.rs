//! The verdict of `keel probe`: which write method, preallocation, write
//! size and number of writes in flight Keel's journal should use on this
//! machine, the figures that justify each choice, and the "flushes may be
//! ignored" warning. Pure functions of the measured figures, so every rule
//! is tested on made-up figures.

use keel::io::WriteMethod;
use serde::Serialize;

use crate::bench::report::Prealloc;
use crate::util::format_size;

/// A durable 4 KiB write that completes faster than this on a device with
/// a volatile write cache cannot have waited for a real cache flush. A
/// flush must put the data on non-volatile media: programming a NAND page
/// takes ~100–700 µs (SLC to TLC), a disk rotation milliseconds; only a
/// cache the device can save on power loss (which it then reports as
/// `write through`) or a flush that is not done acknowledges in tens of µs.
pub const FLUSH_FLOOR_US: f64 = 50.0;
/// `O_DIRECT|O_DSYNC` at most this many times the latency of `O_DIRECT`
/// alone counts as "no slower": the flush added nothing measurable. The
/// 20 % margin covers the noise between medians of a few thousand writes
/// on a shared machine.
pub const DSYNC_VS_DIRECT_MAX_RATIO: f64 = 1.2;
/// The journal's default method is kept unless another durable method is
/// faster by more than this factor (beyond the noise of one short run).
pub const DEFAULT_METHOD_MARGIN: f64 = 1.10;
/// The journal's write size: the largest size whose durable write costs at
/// most this many times a 4 KiB one. Up to there the flush round trip
/// dominates, so packing more commits into one write is nearly free;
/// beyond it the transfer itself starts to cost.
pub const WRITE_SIZE_LATENCY_FACTOR: f64 = 2.0;
/// Writes in flight: the fewest parallel writers that reach this share of
/// the best writes/s measured.
pub const SCALING_SHARE: f64 = 0.9;

/// One durable-floor run: a method, a preallocation, a commit size.
#[derive(Clone, Debug, PartialEq)]
pub struct MethodFigure {
    pub method: WriteMethod,
    pub prealloc: Prealloc,
    pub size: u64,
    pub durable: bool,
    pub p50_us: f64,
    pub p99_us: f64,
    pub mean_us: f64,
}

/// One durable sequential write size.
#[derive(Clone, Debug, PartialEq)]
pub struct SizeFigure {
    pub size: u64,
    pub p50_us: f64,
    pub mb_per_s: f64,
}

/// Durable 16 KiB writes with `writers` threads on one file.
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleFigure {
    pub writers: u32,
    pub writes_per_s: f64,
}

/// The mixed load without and with an fsync after every write.
#[derive(Clone, Debug, PartialEq)]
pub struct MixedFigure {
    pub no_sync_ops_per_s: f64,
    pub fsync_ops_per_s: f64,
    pub no_sync_write_p50_us: f64,
    pub fsync_write_p50_us: f64,
}

/// Everything the verdict is computed from.
#[derive(Clone, Debug, Default)]
pub struct Figures {
    /// Whether the file system keeps anything across a power cut (not
    /// tmpfs or ramfs).
    pub persistent: bool,
    pub volatile_cache: bool,
    pub methods: Vec<MethodFigure>,
    pub sizes: Vec<SizeFigure>,
    pub scaling: Vec<ScaleFigure>,
    pub mixed: Option<MixedFigure>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Warning {
    pub rule: &'static str,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    pub method: Option<&'static str>,
    pub prealloc: Option<&'static str>,
    pub commit_latency_us_16k: Option<f64>,
    pub write_size: Option<u64>,
    pub writes_in_flight: Option<u32>,
    /// One sentence per choice, with its figures.
    pub reasons: Vec<String>,
    pub warnings: Vec<Warning>,
}

/// The journal commit size the method choice is made at.
const COMMIT_SIZE: u64 = 16 << 10;
const SMALL_SIZE: u64 = 4 << 10;

pub fn verdict(f: &Figures) -> Verdict {
    let mut v = Verdict {
        method: None,
        prealloc: None,
        commit_latency_us_16k: None,
        write_size: None,
        writes_in_flight: None,
        reasons: Vec::new(),
        warnings: Vec::new(),
    };
    if !f.persistent {
        v.reasons.push(
            "this file system keeps nothing across a power cut (it lives in memory), so no \
             write here is durable and nothing can be recommended; run the probe with --dir on \
             the disk the store will use"
                .into(),
        );
        return v;
    }
    choose_method(f, &mut v);
    choose_write_size(f, &mut v);
    choose_writes_in_flight(f, &mut v);
    if let Some(m) = &f.mixed {
        v.reasons.push(format!(
            "under a mixed random load an fsync after every write costs {:.0} % of the \
             throughput ({:.0} → {:.0} requests/s) and raises the write p50 from {:.0} to {:.0} µs",
            (1.0 - m.fsync_ops_per_s / m.no_sync_ops_per_s.max(f64::MIN_POSITIVE)) * 100.0,
            m.no_sync_ops_per_s,
            m.fsync_ops_per_s,
            m.no_sync_write_p50_us,
            m.fsync_write_p50_us
        ));
    }
    v.warnings = flush_warnings(f);
    v
}

fn find(f: &Figures, m: WriteMethod, p: Prealloc, size: u64) -> Option<&MethodFigure> {
    f.methods
        .iter()
        .find(|x| x.method == m && x.prealloc == p && x.size == size)
}

/// The fastest durable (method, prealloc) at 16 KiB by mean latency, with
/// the journal's default kept when it is within the margin.
fn choose_method(f: &Figures, v: &mut Verdict) {
    let mut durable: Vec<&MethodFigure> = f
        .methods
        .iter()
        .filter(|x| x.durable && x.size == COMMIT_SIZE)
        .collect();
    durable.sort_by(|a, b| a.mean_us.total_cmp(&b.mean_us));
    let Some(&fastest) = durable.first() else {
        v.reasons
            .push("no durable method ran at 16 KiB: no method can be recommended".into());
        return;
    };
    let default = durable
        .iter()
        .copied()
        .filter(|x| x.method == WriteMethod::OdirectDsync)
        .min_by(|a, b| a.mean_us.total_cmp(&b.mean_us));
    let chosen = match default {
        Some(d) if d.mean_us <= fastest.mean_us * DEFAULT_METHOD_MARGIN => d,
        _ => fastest,
    };
    v.method = Some(chosen.method.name());
    v.prealloc = Some(chosen.prealloc.name());
    v.commit_latency_us_16k = Some(chosen.mean_us);
    let mut reason = format!(
        "{} into a {} file: {:.0} µs per durable 16 KiB commit (p50 {:.0}, p99 {:.0})",
        chosen.method,
        chosen.prealloc.name(),
        chosen.mean_us,
        chosen.p50_us,
        chosen.p99_us
    );
    if chosen.method != fastest.method || chosen.prealloc != fastest.prealloc {
        reason.push_str(&format!(
            "; {} ({}) measured {:.0} µs, within {:.0} % (noise) — the journal's default is kept",
            fastest.method,
            fastest.prealloc.name(),
            fastest.mean_us,
            (DEFAULT_METHOD_MARGIN - 1.0) * 100.0
        ));
    } else if let Some(next) = durable.iter().find(|x| x.method != chosen.method) {
        reason.push_str(&format!(
            "; the next durable method, {} ({}), {:.0} µs",
            next.method,
            next.prealloc.name(),
            next.mean_us
        ));
    }
    v.reasons.push(reason);
    let other = match chosen.prealloc {
        Prealloc::Zerofill => Prealloc::Fallocate,
        _ => Prealloc::Zerofill,
    };
    if let Some(o) = find(f, chosen.method, other, COMMIT_SIZE) {
        v.reasons.push(format!(
            "preallocation {}: {:.0} µs against {:.0} µs {} ({:.2}×)",
            chosen.prealloc.name(),
            chosen.mean_us,
            o.mean_us,
            o.prealloc.name(),
            o.mean_us / chosen.mean_us.max(f64::MIN_POSITIVE)
        ));
    }
}

fn choose_write_size(f: &Figures, v: &mut Verdict) {
    let Some(base) = f.sizes.iter().find(|s| s.size == SMALL_SIZE) else {
        return;
    };
    let limit = base.p50_us * WRITE_SIZE_LATENCY_FACTOR;
    let Some(best) = f
        .sizes
        .iter()
        .filter(|s| s.p50_us <= limit)
        .max_by_key(|s| s.size)
    else {
        return;
    };
    v.write_size = Some(best.size);
    v.reasons.push(format!(
        "write size up to {}: a durable {} write takes {:.0} µs (p50), at most {:.0}× a 4 KiB \
         one ({:.0} µs), and moves {:.0} MB/s against {:.0} MB/s — so group commit should \
         gather commits into writes of up to {}",
        format_size(best.size),
        format_size(best.size),
        best.p50_us,
        WRITE_SIZE_LATENCY_FACTOR,
        base.p50_us,
        best.mb_per_s,
        base.mb_per_s,
        format_size(best.size)
    ));
}

fn choose_writes_in_flight(f: &Figures, v: &mut Verdict) {
    let Some(max) = f
        .scaling
        .iter()
        .map(|s| s.writes_per_s)
        .max_by(f64::total_cmp)
    else {
        return;
    };
    let one = f.scaling.iter().find(|s| s.writers == 1);
    let Some(enough) = f
        .scaling
        .iter()
        .filter(|s| s.writes_per_s >= max * SCALING_SHARE)
        .min_by_key(|s| s.writers)
    else {
        return;
    };
    v.writes_in_flight = Some(enough.writers);
    let most = f.scaling.iter().map(|s| s.writers).max().unwrap_or(1);
    let more = if enough.writers == most && f.scaling.len() > 1 {
        " (the most measured: more may help)"
    } else {
        ""
    };
    let figures: Vec<String> = f
        .scaling
        .iter()
        .map(|s| format!("{}: {:.0}", s.writers, s.writes_per_s))
        .collect();
    v.reasons.push(format!(
        "writes in flight: {}{more} — durable 16 KiB writes/s by writers ({}); {} reach {:.0} % \
         of the best{}. This is the device's parallelism; how many writes the journal keeps in \
         flight (`writes_in_flight`, 1 to 4, default 1) is for `keel bench journal \
         --writes-in-flight 1,2,4` to decide, since on few CPUs waking the committers, not the \
         device, limits group commit",
        enough.writers,
        figures.join(", "),
        enough.writers,
        SCALING_SHARE * 100.0,
        one.map_or(String::new(), |o| format!(
            ", {:.1}× one writer",
            enough.writes_per_s / o.writes_per_s.max(f64::MIN_POSITIVE)
        ))
    ));
}

/// The two explicit rules for "flushes may be ignored".
pub fn flush_warnings(f: &Figures) -> Vec<Warning> {
    let mut warnings = Vec::new();
    if !f.volatile_cache {
        return warnings;
    }
    let fastest_4k = f
        .methods
        .iter()
        .filter(|x| x.durable && x.size == SMALL_SIZE)
        .min_by(|a, b| a.p50_us.total_cmp(&b.p50_us));
    if let Some(x) = fastest_4k.filter(|x| x.p50_us < FLUSH_FLOOR_US) {
        warnings.push(Warning {
            rule: "durable_4k_below_flush_floor",
            message: format!(
                "flushes may be ignored: a durable 4 KiB write ({} into a {} file) takes {:.0} µs \
                 (p50), below the {FLUSH_FLOOR_US:.0} µs a cache flush to non-volatile media \
                 needs, on a device that reports a volatile write cache; check with `keel \
                 diskcheck` (a power-cut test) before trusting commits here",
                x.method,
                x.prealloc.name(),
                x.p50_us
            ),
        });
    }
    let size = SMALL_SIZE;
    let dsync = find(f, WriteMethod::OdirectDsync, Prealloc::Zerofill, size);
    let direct = find(f, WriteMethod::Odirect, Prealloc::Zerofill, size);
    if let (Some(d), Some(o)) = (dsync, direct) {
        if d.p50_us <= o.p50_us * DSYNC_VS_DIRECT_MAX_RATIO {
            warnings.push(Warning {
                rule: "dsync_no_slower_than_direct",
                message: format!(
                    "flushes may be ignored: O_DIRECT|O_DSYNC {} writes take {:.0} µs (p50), \
                     no slower than O_DIRECT alone ({:.0} µs; at most {DSYNC_VS_DIRECT_MAX_RATIO}×), \
                     on a device that reports a volatile write cache — the flush costs \
                     nothing, so it may not happen; check with `keel diskcheck`",
                    format_size(size),
                    d.p50_us,
                    o.p50_us
                ),
            });
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(method: WriteMethod, prealloc: Prealloc, size: u64, mean_us: f64) -> MethodFigure {
        MethodFigure {
            method,
            prealloc,
            size,
            durable: method != WriteMethod::Odirect && method != WriteMethod::Buffered,
            p50_us: mean_us * 0.95,
            p99_us: mean_us * 2.0,
            mean_us,
        }
    }

    fn honest() -> Figures {
        use Prealloc::{Fallocate as F, Zerofill as Z};
        use WriteMethod::*;
        Figures {
            persistent: true,
            volatile_cache: true,
            methods: vec![
                m(Fdatasync, Z, 16384, 130.0),
                m(Fdatasync, F, 16384, 200.0),
                m(OdirectDsync, Z, 16384, 125.0),
                m(OdirectDsync, F, 16384, 230.0),
                m(Odirect, Z, 16384, 70.0),
                m(OdirectDsync, Z, 4096, 100.0),
                m(Odirect, Z, 4096, 50.0),
            ],
            sizes: vec![
                SizeFigure {
                    size: 4096,
                    p50_us: 100.0,
                    mb_per_s: 40.0,
                },
                SizeFigure {
                    size: 65536,
                    p50_us: 180.0,
                    mb_per_s: 350.0,
                },
                SizeFigure {
                    size: 262144,
                    p50_us: 260.0,
                    mb_per_s: 900.0,
                },
            ],
            scaling: vec![
                ScaleFigure {
                    writers: 1,
                    writes_per_s: 6000.0,
                },
                ScaleFigure {
                    writers: 4,
                    writes_per_s: 11000.0,
                },
                ScaleFigure {
                    writers: 16,
                    writes_per_s: 11500.0,
                },
            ],
            mixed: Some(MixedFigure {
                no_sync_ops_per_s: 26000.0,
                fsync_ops_per_s: 19000.0,
                no_sync_write_p50_us: 145.0,
                fsync_write_p50_us: 290.0,
            }),
        }
    }

    #[test]
    fn honest_disk_gets_a_full_verdict_and_no_warning() {
        let v = verdict(&honest());
        assert_eq!(v.method, Some("odirect_dsync"));
        assert_eq!(v.prealloc, Some("zerofill"));
        assert_eq!(v.write_size, Some(65536), "260 µs > 2 × 100 µs");
        assert_eq!(v.writes_in_flight, Some(4));
        assert!(v.warnings.is_empty(), "{:?}", v.warnings);
        assert_eq!(v.reasons.len(), 5, "{:#?}", v.reasons);
        assert!(v.reasons[1].contains("1.84×"), "{}", v.reasons[1]);
    }

    #[test]
    fn the_default_is_kept_only_within_the_margin() {
        let mut f = honest();
        f.methods[0].mean_us = 118.0; // fdatasync 5.6 % faster: noise
        assert_eq!(verdict(&f).method, Some("odirect_dsync"));
        f.methods[0].mean_us = 100.0; // 25 % faster: a real difference
        let v = verdict(&f);
        assert_eq!(v.method, Some("fdatasync"));
        assert!(v.reasons[0].starts_with("fdatasync into a zerofill file: 100 µs"));
    }

    #[test]
    fn fast_durable_writes_on_a_volatile_cache_warn() {
        let mut f = honest();
        f.methods[5].p50_us = 30.0;
        let rules: Vec<&str> = verdict(&f).warnings.iter().map(|w| w.rule).collect();
        assert_eq!(
            rules,
            [
                "durable_4k_below_flush_floor",
                "dsync_no_slower_than_direct"
            ]
        );
        assert!(verdict(&f).warnings[0].message.contains("keel diskcheck"));
        f.volatile_cache = false; // a write-through (power-loss protected) cache
        assert!(verdict(&f).warnings.is_empty());
    }

    #[test]
    fn dsync_as_fast_as_direct_warns_even_when_slow() {
        let mut f = honest();
        f.methods[5].p50_us = 55.0; // 1.16 × O_DIRECT's 47.5 µs, above the floor
        let w = verdict(&f).warnings;
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].rule, "dsync_no_slower_than_direct");
    }

    #[test]
    fn a_memory_file_system_gets_no_recommendation() {
        let mut f = honest();
        f.persistent = false;
        let v = verdict(&f);
        assert_eq!(
            (v.method, v.write_size, v.writes_in_flight),
            (None, None, None)
        );
        assert_eq!(v.reasons.len(), 1);
        assert!(v.reasons[0].contains("--dir"));
    }

    #[test]
    fn nothing_measured_gives_no_recommendation() {
        let v = verdict(&Figures {
            persistent: true,
            ..Figures::default()
        });
        assert_eq!(
            (v.method, v.write_size, v.writes_in_flight),
            (None, None, None)
        );
        assert!(v.warnings.is_empty());
    }
}
