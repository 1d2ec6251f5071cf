//! `keel probe`'s report: the figures each step measured, turned into the
//! verdict's inputs, and the whole report as markdown and as JSON.

use serde_json::json;

use super::budget::Step;
use super::confidence;
use super::verdict::{self, MethodFigure, MixedFigure, ScaleFigure, SizeFigure};
use super::Probe;
use crate::bench::report::{number, Align, Table};
use crate::bench::{methods, mixed, mmap, sizes};
use crate::util::{format_size, format_size_approx};

pub fn method_figures(floor: &[methods::Outcome]) -> Vec<MethodFigure> {
    floor
        .iter()
        .filter_map(|o| {
            let f = &o.result.as_ref().ok()?.figures;
            Some(MethodFigure {
                method: o.spec.method,
                prealloc: o.spec.prealloc,
                size: o.spec.size_bytes,
                durable: o.durable,
                p50_us: f.latency.p50_us,
                p99_us: f.latency.p99_us,
                mean_us: f.latency.mean_us,
            })
        })
        .collect()
}

pub fn size_figures(runs: &[sizes::Outcome]) -> Vec<SizeFigure> {
    runs.iter()
        .filter(|o| o.run.mode == sizes::Mode::Durable)
        .filter_map(|o| {
            let m = o.result.as_ref().ok()?;
            Some(SizeFigure {
                size: o.run.size_bytes,
                p50_us: m.latency.p50_us,
                mb_per_s: m.mb_per_s,
            })
        })
        .collect()
}

/// The one-file 16 KiB runs, by writers.
pub fn scale_figures(runs: &[sizes::Outcome]) -> Vec<ScaleFigure> {
    runs.iter()
        .filter(|o| o.run.series == "parallel")
        .filter_map(|o| {
            Some(ScaleFigure {
                writers: o.run.writers,
                writes_per_s: o.result.as_ref().ok()?.writes_per_s,
            })
        })
        .collect()
}

pub fn mixed_figure(runs: &[mixed::Outcome]) -> Option<MixedFigure> {
    let get = |v: mixed::Variant| {
        runs.iter()
            .find(|o| o.variant == v)
            .and_then(|o| o.result.as_ref().ok())
    };
    let (a, b) = (
        get(mixed::Variant::NoSync)?,
        get(mixed::Variant::FsyncEveryWrite)?,
    );
    Some(MixedFigure {
        no_sync_ops_per_s: a.reads_per_s + a.writes_per_s,
        fsync_ops_per_s: b.reads_per_s + b.writes_per_s,
        no_sync_write_p50_us: a.write_latency.summary().p50_us,
        fsync_write_p50_us: b.write_latency.summary().p50_us,
    })
}

/// The thresholds the verdict applied, for the JSON report.
fn rules() -> serde_json::Value {
    json!({
        "flush_floor_us": verdict::FLUSH_FLOOR_US,
        "dsync_vs_direct_max_ratio": verdict::DSYNC_VS_DIRECT_MAX_RATIO,
        "default_method_margin": verdict::DEFAULT_METHOD_MARGIN,
        "write_size_latency_factor": verdict::WRITE_SIZE_LATENCY_FACTOR,
        "scaling_share": verdict::SCALING_SHARE,
    })
}

/// The fastest durable method per size and preallocation (mean latency).
fn floor_summary(p: &Probe) -> Vec<(u64, &'static str, MethodFigure)> {
    let figures = method_figures(&p.floor);
    let mut best = Vec::new();
    for size in super::FLOOR_SIZES {
        for prealloc in ["fallocate", "zerofill"] {
            let fastest = figures
                .iter()
                .filter(|f| f.durable && f.size == size && f.prealloc.name() == prealloc)
                .min_by(|a, b| a.mean_us.total_cmp(&b.mean_us));
            if let Some(f) = fastest {
                best.push((size, prealloc, f.clone()));
            }
        }
    }
    best
}

pub fn json(p: &Probe) -> String {
    let floor_best: Vec<serde_json::Value> = floor_summary(p)
        .into_iter()
        .map(|(size, prealloc, f)| {
            json!({"size": size, "prealloc": prealloc, "method": f.method.name(),
                   "mean_us": f.mean_us, "p50_us": f.p50_us, "p99_us": f.p99_us})
        })
        .collect();
    let report = json!({
        "bench": "probe",
        "config": {
            "dir": p.dir,
            "budget_s": p.budget.budget_s,
            "count": used(p, Step::DurableFloor, "count").1 as u64,
            "total": used(p, Step::Sizes, "total").1 as u64,
            "mixed_duration_s": p.mixed_plan.duration_s,
            "transactions": p.mmap_plan.transactions,
        },
        "machine": p.machine,
        "elapsed_s": p.elapsed_s,
        "budget": p.budget,
        "confidence": {
            "figures": confidence::figures(p),
            "method_choice": confidence::method_choice(p),
        },
        "verdict": p.verdict,
        "rules": rules(),
        "durable_floor_best": floor_best,
        "durable_floor": p.floor.iter().map(methods::result_json).collect::<Vec<_>>(),
        "sizes": p.sizes.iter().map(sizes::result_json).collect::<Vec<_>>(),
        "scaling": p.scaling.iter().map(sizes::result_json).collect::<Vec<_>>(),
        "mixed": {
            "config": p.mixed_plan,
            "results": p.mixed.iter().map(mixed::Outcome::json).collect::<Vec<_>>(),
        },
        "mmap": {
            "config": p.mmap_plan,
            "results": p.mmap.iter().map(mmap::Outcome::json).collect::<Vec<_>>(),
        },
    });
    serde_json::to_string(&report).expect("serialisable")
}

/// The smallest and largest value `step` used of the quantity `name`.
fn used(p: &Probe, step: Step, name: &str) -> (f64, f64) {
    p.budget
        .quantities
        .iter()
        .find(|u| u.step == step && u.name == name)
        .map_or((0.0, 0.0), |u| (u.used_min, u.used_max))
}

/// `340` or `300–340`.
fn range(lo: f64, hi: f64, show: impl Fn(f64) -> String) -> String {
    if lo == hi {
        show(lo)
    } else {
        format!("{}–{}", show(lo), show(hi))
    }
}

pub fn markdown(p: &Probe) -> String {
    let mut out = format!(
        "# keel probe\n\nIn {}, {:.0} s. Every durable figure comes from writes that were made \
         durable when the call returned; latencies are per write (µs), MB = 10^6 bytes.\n\n",
        p.dir.display(),
        p.elapsed_s
    );
    if p.budget.cut {
        out.push_str(&format!(
            "**Counts were cut to fit the {:.0} s budget** (to {:.0} % of the defaults at \
             least): every figure rests on fewer operations than a full probe's; see \
             [Budget and confidence](#budget-and-confidence).\n\n",
            p.budget.budget_s,
            p.budget
                .quantities
                .iter()
                .filter(|u| !u.explicit)
                .map(|u| u.share)
                .min_by(f64::total_cmp)
                .unwrap_or(1.0)
                * 100.0
        ));
    }
    out.push_str("## Machine\n\n");
    out.push_str(&machine_table(p).render());
    out.push_str("\n## Verdict\n\n");
    out.push_str(&verdict_text(&p.verdict));
    out.push_str(&confidence::markdown(p));
    let (lo, hi) = used(p, Step::DurableFloor, "count");
    out.push_str(&format!(
        "\n## 1. Durable floor ({} commits per run, sequential, into a fresh file)\n\n",
        range(lo, hi, |v| number(v, 0))
    ));
    for (size, prealloc, f) in floor_summary(p) {
        out.push_str(&format!(
            "* fastest durable {} write into a {prealloc} file: {} — {:.0} µs mean, {:.0} µs p50, \
             {:.0} µs p99\n",
            format_size(size),
            f.method,
            f.mean_us,
            f.p50_us,
            f.p99_us
        ));
    }
    out.push('\n');
    out.push_str(&floor_table(&p.floor).render());
    let (lo, hi) = used(p, Step::Sizes, "total");
    out.push_str(&format!(
        "\n## 2. Throughput by write size ({} per size and mode, one writer)\n\n",
        range(lo, hi, |v| format_size_approx(v as u64))
    ));
    out.push_str(&sizes_table(&p.sizes).render());
    out.push_str("\n## 3. Parallel scaling (durable writes, O_DIRECT|O_DSYNC)\n\n");
    out.push_str(&scaling_table(&p.scaling).render());
    out.push_str(&format!(
        "\n## 4. Mixed load: the cost of fsync\n\n{}\n\n",
        p.mixed_plan.describe()
    ));
    out.push_str(&mixed::text(&p.mixed));
    out.push_str(&format!(
        "\n## 5. Fill random, raw\n\n{}\n\n",
        p.mmap_plan.describe()
    ));
    out.push_str(&mmap::text(&p.mmap_plan, &p.mmap));
    out.push_str(TERMS);
    out
}

/// What the report's words mean, one line each.
const TERMS: &str = "
## Terms

* **durable**: the write had reached non-volatile media (a flush or FUA) when the call returned; \
\"durable here: no\" marks a method that does not guarantee it on this device (O_DIRECT alone \
leaves data in a volatile write cache).
* **method**: how a commit is made durable — `fdatasync`/`fsync` after a buffered `pwrite`, \
`odsync` (an `O_DSYNC` descriptor), `odirect_dsync` (`O_DIRECT|O_DSYNC`), `pwritev2_dsync` \
(`RWF_DSYNC`), `uring_*` (the same through io_uring).
* **prealloc**: how the file was prepared — `fallocate` (reserved, unwritten extents: the first \
write to each block also changes metadata) or `zerofill` (written with zeros and synced first).
* **p50 / p99 / mean**: the median, the 99th percentile and the average latency of one write; a \
p99 of fewer than 100 writes is the slowest write.
* **MB/s**: 10^6 bytes per second; **buffered sync ms**: the one `fdatasync` after a buffered \
run's last write.
* **× one writer**: writes/s over the one-writer run's.
* **requests/s** (mixed load): reads and writes together; **tx/s** (fill random): transactions \
of 100 puts, each made durable; **× sequential**: how many times longer a transaction takes than \
with `sequential`.
* **budget, share, 95 % interval**: see Budget and confidence above; the rules behind the \
verdict: docs/toolkit.md#the-verdict-and-its-rules.
";

fn machine_table(p: &Probe) -> Table {
    let mut t = Table::new(&[("fact", Align::Left), ("value", Align::Left)]);
    let value = serde_json::to_value(&p.machine).expect("serialisable");
    for (k, v) in value.as_object().expect("an object") {
        let text = match v {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Null => "unknown".into(),
            other => other.to_string(),
        };
        t.push(vec![k.clone(), text]);
    }
    t
}

fn verdict_text(v: &verdict::Verdict) -> String {
    let mut out = String::new();
    match (v.method, v.prealloc) {
        (Some(m), Some(p)) => {
            out.push_str(&format!(
                "**Keel's journal here:** method `{m}`, preallocation `{p}`"
            ));
            if let Some(s) = v.write_size {
                out.push_str(&format!(", writes of up to {}", format_size(s)));
            }
            if let Some(n) = v.writes_in_flight {
                out.push_str(&format!(
                    "; the device scales to {n} durable write(s) in flight"
                ));
            }
            out.push_str(".\n\n");
        }
        _ => out.push_str("**No recommendation** (the reasons follow).\n\n"),
    }
    for r in &v.reasons {
        out.push_str(&format!("* {r}\n"));
    }
    out.push('\n');
    if v.warnings.is_empty() && v.method.is_some() {
        out.push_str(&format!(
            "No \"flushes may be ignored\" warning: the fastest durable 4 KiB write is not below \
             {:.0} µs, and O_DIRECT|O_DSYNC costs more than {}× O_DIRECT at 4 KiB (rules \
             applied only on a device that reports a volatile write cache). Whether the disk \
             keeps what it acknowledges across a power cut only `keel diskcheck` can tell.\n",
            verdict::FLUSH_FLOOR_US,
            verdict::DSYNC_VS_DIRECT_MAX_RATIO
        ));
    }
    for w in &v.warnings {
        out.push_str(&format!("**WARNING** ({}): {}\n\n", w.rule, w.message));
    }
    out
}

fn floor_table(floor: &[methods::Outcome]) -> Table {
    let mut t = Table::new(&[
        ("method", Align::Left),
        ("prealloc", Align::Left),
        ("4 KiB p50", Align::Right),
        ("4 KiB mean", Align::Right),
        ("4 KiB p99", Align::Right),
        ("16 KiB p50", Align::Right),
        ("16 KiB mean", Align::Right),
        ("16 KiB p99", Align::Right),
        ("durable here", Align::Left),
    ]);
    let mut keys: Vec<(keel::io::WriteMethod, &'static str, bool)> = Vec::new();
    for o in floor {
        let k = (o.spec.method, o.spec.prealloc.name(), o.durable);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    for (method, prealloc, durable) in keys {
        let mut row = vec![method.name().to_string(), prealloc.to_string()];
        for size in super::FLOOR_SIZES {
            let o = floor.iter().find(|o| {
                o.spec.method == method
                    && o.spec.prealloc.name() == prealloc
                    && o.spec.size_bytes == size
            });
            match o.map(|o| &o.result) {
                Some(Ok(m)) => {
                    let l = &m.figures.latency;
                    row.extend([
                        number(l.p50_us, 0),
                        number(l.mean_us, 0),
                        number(l.p99_us, 0),
                    ]);
                }
                _ => row.extend(std::iter::repeat_n("error".to_string(), 3)),
            }
        }
        row.push(if durable { "yes" } else { "no" }.into());
        t.push(row);
    }
    t
}

fn sizes_table(runs: &[sizes::Outcome]) -> Table {
    let mut t = Table::new(&[
        ("size", Align::Right),
        ("buffered MB/s", Align::Right),
        ("buffered sync ms", Align::Right),
        ("durable MB/s", Align::Right),
        ("durable p50 µs", Align::Right),
        ("durable p99 µs", Align::Right),
    ]);
    let mut sizes: Vec<u64> = runs.iter().map(|o| o.run.size_bytes).collect();
    sizes.dedup();
    for size in sizes {
        let get = |mode| {
            runs.iter()
                .find(|o| o.run.size_bytes == size && o.run.mode == mode)
                .and_then(|o| o.result.as_ref().ok())
        };
        let mut row = vec![format_size(size)];
        match get(sizes::Mode::Buffered) {
            Some(m) => row.extend([
                number(m.mb_per_s, 1),
                m.sync_ms.map_or("–".into(), |s| number(s, 0)),
            ]),
            None => row.extend(["error".to_string(), "error".to_string()]),
        }
        match get(sizes::Mode::Durable) {
            Some(m) => row.extend([
                number(m.mb_per_s, 1),
                number(m.latency.p50_us, 0),
                number(m.latency.p99_us, 0),
            ]),
            None => row.extend(std::iter::repeat_n("error".to_string(), 3)),
        }
        t.push(row);
    }
    t
}

fn scaling_table(runs: &[sizes::Outcome]) -> Table {
    let mut t = Table::new(&[
        ("writers", Align::Right),
        ("layout", Align::Left),
        ("size", Align::Right),
        ("writes/s", Align::Right),
        ("MB/s", Align::Right),
        ("× one writer", Align::Right),
        ("p50 µs", Align::Right),
        ("p99 µs", Align::Right),
    ]);
    let one = runs
        .iter()
        .find(|o| o.run.writers == 1)
        .and_then(|o| o.result.as_ref().ok())
        .map(|m| m.writes_per_s);
    for o in runs {
        let layout = match o.run.layout {
            sizes::Layout::OneFile => "one file",
            sizes::Layout::SeparateFiles => "separate files",
        };
        let mut row = vec![
            o.run.writers.to_string(),
            layout.into(),
            format_size(o.run.size_bytes),
        ];
        match &o.result {
            Ok(m) => row.extend([
                number(m.writes_per_s, 0),
                number(m.mb_per_s, 1),
                one.map_or(String::new(), |b| format!("{:.2}", m.writes_per_s / b)),
                number(m.latency.p50_us, 0),
                number(m.latency.p99_us, 0),
            ]),
            Err(_) => row.extend(std::iter::repeat_n("error".to_string(), 5)),
        }
        t.push(row);
    }
    t
}
