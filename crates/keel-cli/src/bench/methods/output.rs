//! The reports of `keel bench methods`: a markdown table, one JSON object,
//! an SVG latency plot.

use std::path::Path;

use serde::Serialize;
use serde_json::json;

use super::fio::Comparison;
use super::{Outcome, Plan};
use crate::bench::report::{legend, number, plot, Align, Machine, RunFigures, Table};

/// One element of the JSON `results` array.
#[derive(Serialize)]
struct ResultJson<'a> {
    method: &'static str,
    prealloc: &'static str,
    durable: bool,
    /// The system calls one write makes (what the strace audit checks).
    syscalls: &'static str,
    size: u64,
    count: u64,
    writes_per_commit: u32,
    write_size: u64,
    file_size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    round: Option<u32>,
    #[serde(flatten)]
    figures: Option<&'a RunFigures>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

impl<'a> From<&'a Outcome> for ResultJson<'a> {
    fn from(o: &'a Outcome) -> Self {
        let s = &o.spec;
        ResultJson {
            method: s.method.name(),
            prealloc: s.prealloc.name(),
            durable: o.durable,
            syscalls: s.method.syscalls(),
            size: s.size_bytes,
            count: s.count,
            writes_per_commit: s.writes_per_commit,
            write_size: s.write_size_bytes(),
            file_size: s.file_size_bytes,
            round: o.round,
            figures: o.result.as_ref().ok().map(|m| &m.figures),
            error: o.result.as_ref().err().map(String::as_str),
        }
    }
}

/// One element of the `results` array (also used by `keel probe`).
pub fn result_json(o: &Outcome) -> serde_json::Value {
    serde_json::to_value(ResultJson::from(o)).expect("serialisable")
}

/// The whole JSON report; fields print in this order.
#[derive(Serialize)]
struct ReportJson<'a> {
    bench: &'static str,
    config: ConfigJson<'a>,
    machine: &'a Machine,
    results: Vec<ResultJson<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    vs_fio: Vec<serde_json::Value>,
}

#[derive(Serialize)]
struct ConfigJson<'a> {
    dir: &'a Path,
    file_size: u64,
    size: u64,
    count: u64,
    prealloc: Vec<&'static str>,
    writes_per_commit: &'a [u32],
    quick: bool,
}

/// The whole report as one JSON object (one line).
pub fn json(
    plan: &Plan,
    machine: &Machine,
    outcomes: &[Outcome],
    comparisons: &[Comparison],
) -> String {
    let report = ReportJson {
        bench: "methods",
        config: ConfigJson {
            dir: &plan.dir,
            file_size: plan.file_size_bytes,
            size: plan.size_bytes,
            count: plan.count,
            prealloc: plan.preallocs.iter().map(|p| p.name()).collect(),
            writes_per_commit: &plan.splits,
            quick: plan.quick,
        },
        machine,
        results: outcomes.iter().map(ResultJson::from).collect(),
        vs_fio: comparisons.iter().map(comparison_json).collect(),
    };
    serde_json::to_string(&report).expect("the report serialises")
}

fn comparison_json(c: &Comparison) -> serde_json::Value {
    let mut v = serde_json::to_value(c).expect("serialisable");
    v["keel_median_commits_per_s"] = json!(c.keel_median());
    v["fio_median_commits_per_s"] = json!(c.fio_median());
    v["round_ratios"] = json!(c.round_ratios());
    v["ratio"] = json!(c.ratio());
    v
}

/// What the text report's words mean.
pub fn legend(plan: &Plan) -> String {
    let mut terms = vec![
        legend::METHODS,
        legend::PREALLOC,
        (
            "total ms, ms/write",
            "the timed loop's wall time for every commit, and that over the commits (the \
             original write-up's columns)",
        ),
        ("commits/s", "commits over the total time"),
        legend::MB_PER_S,
        legend::LATENCY,
        (
            "durable",
            "whether a commit has reached non-volatile media when its call returns, on this \
             device and file system: never for buffered and odirect (a volatile write cache may \
             hold it), never on tmpfs",
        ),
    ];
    if plan.splits.iter().any(|&s| s > 1) {
        terms.push((
            "writes/commit",
            "a commit written as N writes of size/N, then one sync (per-write durable methods \
             make each write durable)",
        ));
    }
    if plan.vs_fio {
        terms.push((
            "keel/fio",
            "Keel's commits/s over fio's for the same job, the median of the per-round ratios \
             (rounds interleave the two)",
        ));
    }
    legend::legend(
        &terms,
        "docs/toolkit.md#keel-bench-methods--the-journal-method-experiment",
    )
}

/// The text report: the results table, the errors, the fio comparison.
pub fn text(outcomes: &[Outcome], comparisons: &[Comparison]) -> String {
    let mut out = results_table(outcomes).render();
    let errors: Vec<String> = outcomes
        .iter()
        .filter_map(|o| {
            let e = o.result.as_ref().err()?;
            Some(format!("* {}: {e}\n", o.spec.label()))
        })
        .collect();
    if !errors.is_empty() {
        out.push_str("\nerrors:\n");
        out.push_str(&errors.concat());
    }
    if !comparisons.is_empty() {
        out.push_str("\nKeel vs fio, commits/s (keel/fio = median of the per-round ratios):\n\n");
        out.push_str(&fio_table(comparisons).render());
    }
    out
}

fn results_table(outcomes: &[Outcome]) -> Table {
    let split = outcomes.iter().any(|o| o.spec.writes_per_commit > 1);
    let rounds = outcomes.iter().any(|o| o.round.is_some());
    let mut headers = vec![("method", Align::Left), ("prealloc", Align::Left)];
    if split {
        headers.push(("writes/commit", Align::Right));
    }
    if rounds {
        headers.push(("round", Align::Right));
    }
    headers.extend([
        ("total ms", Align::Right),
        ("ms/write", Align::Right),
        ("commits/s", Align::Right),
        ("MB/s", Align::Right),
        ("p50 µs", Align::Right),
        ("p99 µs", Align::Right),
        ("p99.9 µs", Align::Right),
        ("max µs", Align::Right),
        ("durable", Align::Left),
    ]);
    let mut table = Table::new(&headers);
    for o in outcomes {
        let s = &o.spec;
        let mut row = vec![s.method.name().to_string(), s.prealloc.name().to_string()];
        if split {
            row.push(format!(
                "{} × {}",
                s.writes_per_commit,
                crate::util::format_size(s.write_size_bytes())
            ));
        }
        if rounds {
            row.push(o.round.map_or(String::new(), |r| r.to_string()));
        }
        match &o.result {
            Ok(m) => row.extend(figure_cells(&m.figures)),
            Err(_) => row.extend(std::iter::repeat_n("error".to_string(), 8)),
        }
        row.push(if o.durable { "yes" } else { "no" }.to_string());
        table.push(row);
    }
    table
}

fn figure_cells(f: &RunFigures) -> [String; 8] {
    [
        number(f.total_ms, 0),
        number(f.ms_per_write, 3),
        number(f.commits_per_s, 0),
        number(f.mb_per_s, 1),
        number(f.latency.p50_us, 0),
        number(f.latency.p99_us, 0),
        number(f.latency.p999_us, 0),
        number(f.latency.max_us, 0),
    ]
}

fn fio_table(comparisons: &[Comparison]) -> Table {
    let mut table = Table::new(&[
        ("method", Align::Left),
        ("prealloc", Align::Left),
        ("fio job", Align::Left),
        ("keel median", Align::Right),
        ("fio median", Align::Right),
        ("keel/fio", Align::Right),
        ("keel/fio per round", Align::Left),
    ]);
    let cell = |v: Option<f64>, decimals| v.map_or("error".to_string(), |v| number(v, decimals));
    for c in comparisons {
        let per_round: Vec<String> = c
            .round_ratios()
            .iter()
            .map(|r| r.map_or("error".to_string(), |r| format!("{r:.3}")))
            .collect();
        table.push(vec![
            c.method.to_string(),
            c.prealloc.to_string(),
            c.fio_flags.clone(),
            cell(c.keel_median(), 0),
            cell(c.fio_median(), 0),
            cell(c.ratio(), 3),
            per_round.join(", "),
        ]);
    }
    table
}

/// Draw every successful run's latency distribution into `path`.
pub fn plot(path: &Path, plan: &Plan, outcomes: &[Outcome]) -> anyhow::Result<()> {
    let series: Vec<plot::Series<'_>> = outcomes
        .iter()
        .filter_map(|o| {
            let m = o.result.as_ref().ok()?;
            let mut label = o.spec.label();
            if let Some(r) = o.round {
                label.push_str(&format!(" #{r}"));
            }
            Some(plot::Series {
                label,
                latency: &m.latency,
            })
        })
        .collect();
    let title = format!(
        "commit latency: {} × {} into a {} file",
        plan.count,
        crate::util::format_size(plan.size_bytes),
        crate::util::format_size(plan.file_size_bytes)
    );
    plot::percentile_svg(path, &title, &series)
}
