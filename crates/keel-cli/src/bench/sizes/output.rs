//! The reports of `keel bench sizes`: MB/s by size and mode (the original
//! write-up's shape), a table of every run, one JSON object, an SVG plot of
//! MB/s against write size.

use std::path::Path;

use serde::Serialize;

use super::{Measured, Outcome, SizesPlan};
use crate::bench::report::{legend, number, plot, Align, Machine, Table};
use crate::util::{format_size, format_size_approx};

#[derive(Serialize)]
struct ResultJson<'a> {
    series: &'static str,
    writers: u32,
    layout: super::Layout,
    mode: &'static str,
    method: &'static str,
    prealloc: &'static str,
    size: u64,
    writes: u64,
    total_bytes: u64,
    #[serde(flatten)]
    figures: Option<&'a Measured>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

#[derive(Serialize)]
struct ReportJson<'a> {
    bench: &'static str,
    config: ConfigJson<'a>,
    machine: &'a Machine,
    results: Vec<serde_json::Value>,
}

#[derive(Serialize)]
struct ConfigJson<'a> {
    dir: &'a Path,
    total: u64,
    buffered_total: u64,
    dirty_limit: Option<u64>,
    prealloc: &'static str,
    quick: bool,
}

/// One element of the `results` array (also used by `keel probe`).
pub fn result_json(o: &Outcome) -> serde_json::Value {
    let r = &o.run;
    serde_json::to_value(ResultJson {
        series: r.series,
        writers: r.writers,
        layout: r.layout,
        mode: r.mode.name(),
        method: r.mode.method(),
        prealloc: r.prealloc.name(),
        size: r.size_bytes,
        writes: r.writes(),
        total_bytes: r.total_bytes(),
        figures: o.result.as_ref().ok(),
        error: o.result.as_ref().err().map(String::as_str),
    })
    .expect("serialisable")
}

pub fn json(plan: &SizesPlan, machine: &Machine, outcomes: &[Outcome]) -> String {
    let report = ReportJson {
        bench: "sizes",
        config: ConfigJson {
            dir: &plan.dir,
            total: plan.total_bytes,
            buffered_total: plan.buffered_total_bytes,
            dirty_limit: plan.dirty_limit_bytes,
            prealloc: plan.prealloc.name(),
            quick: plan.quick,
        },
        machine,
        results: outcomes.iter().map(result_json).collect(),
    };
    serde_json::to_string(&report).expect("serialisable")
}

/// `sequential durable`, `parallel buffered`…: one column of the MB/s table.
fn column(o: &Outcome) -> String {
    let writers = if o.run.writers > 1 {
        format!(" ×{}", o.run.writers)
    } else {
        String::new()
    };
    format!("{}{writers} {}", o.run.series, o.run.mode.name())
}

/// What the text report's words mean.
pub fn legend() -> String {
    legend::legend(
        &[
            (
                "sequential, parallel ×N, separate_files ×N, threads ×N",
                "the series: one writer; N writers on one file, each sequentially in its own \
                 region; N writers on a file each; many threads of small writes",
            ),
            (
                "buffered",
                "pwrite into the page cache, then one fdatasync per file after the last write, \
                 timed in (the cost of getting the data to disk eventually)",
            ),
            (
                "durable",
                "pwrite on an O_DIRECT|O_DSYNC descriptor: each write durable when it returns",
            ),
            (
                "MB/s, write-phase MB/s",
                "10^6 bytes per second over the writes and the final sync, and over the \
                 writes alone (what the page cache took in, for buffered runs)",
            ),
            (
                "written, writes",
                "bytes written in all by the run, and in how many writes",
            ),
            (
                "sync ms, total ms",
                "the final fdatasync (buffered runs), and the writes plus that sync",
            ),
            legend::LATENCY,
        ],
        "docs/toolkit.md#keel-bench-sizes--durable-throughput-by-write-size",
    )
}

pub fn text(outcomes: &[Outcome]) -> String {
    let mut out = String::from(
        "MB/s by write size (10^6 bytes/s; buffered includes its final fdatasync):\n\n",
    );
    out.push_str(&by_size_table(outcomes).render());
    out.push_str("\nevery run:\n\n");
    out.push_str(&runs_table(outcomes).render());
    let errors: Vec<String> = outcomes
        .iter()
        .filter_map(|o| {
            Some(format!(
                "* {}: {}\n",
                o.run.label(),
                o.result.as_ref().err()?
            ))
        })
        .collect();
    if !errors.is_empty() {
        out.push_str("\nerrors:\n");
        out.push_str(&errors.concat());
    }
    out
}

/// Rows: write sizes; columns: series and mode; cells: MB/s.
fn by_size_table(outcomes: &[Outcome]) -> Table {
    let mut columns: Vec<String> = Vec::new();
    let mut sizes: Vec<u64> = Vec::new();
    for o in outcomes {
        let c = column(o);
        if !columns.contains(&c) {
            columns.push(c);
        }
        if !sizes.contains(&o.run.size_bytes) {
            sizes.push(o.run.size_bytes);
        }
    }
    sizes.sort_unstable();
    let mut headers = vec![("size", Align::Right)];
    headers.extend(columns.iter().map(|c| (c.as_str(), Align::Right)));
    let mut table = Table::new(&headers);
    for &size in &sizes {
        let mut row = vec![format_size(size)];
        for c in &columns {
            let cell = outcomes
                .iter()
                .find(|o| o.run.size_bytes == size && &column(o) == c)
                .map_or(String::new(), |o| match &o.result {
                    Ok(m) => number(m.mb_per_s, 1),
                    Err(_) => "error".into(),
                });
            row.push(cell);
        }
        table.push(row);
    }
    table
}

fn runs_table(outcomes: &[Outcome]) -> Table {
    let mut table = Table::new(&[
        ("series", Align::Left),
        ("writers", Align::Right),
        ("mode", Align::Left),
        ("size", Align::Right),
        ("written", Align::Right),
        ("writes", Align::Right),
        ("MB/s", Align::Right),
        ("write-phase MB/s", Align::Right),
        ("sync ms", Align::Right),
        ("total ms", Align::Right),
        ("p50 µs", Align::Right),
        ("p99 µs", Align::Right),
        ("max µs", Align::Right),
    ]);
    for o in outcomes {
        let r = &o.run;
        let mut row = vec![
            r.series.to_string(),
            r.writers.to_string(),
            r.mode.name().to_string(),
            format_size(r.size_bytes),
            format_size_approx(r.total_bytes()),
            number(r.writes() as f64, 0),
        ];
        match &o.result {
            Ok(m) => row.extend([
                number(m.mb_per_s, 1),
                number(m.write_mb_per_s, 1),
                m.sync_ms.map_or("–".into(), |s| number(s, 0)),
                number(m.total_ms, 0),
                number(m.latency.p50_us, 0),
                number(m.latency.p99_us, 0),
                number(m.latency.max_us, 0),
            ]),
            Err(_) => row.extend(std::iter::repeat_n("error".to_string(), 7)),
        }
        table.push(row);
    }
    table
}

/// MB/s against write size, one line per series and mode.
pub fn plot(path: &Path, outcomes: &[Outcome]) -> anyhow::Result<()> {
    let mut series: Vec<plot::XySeries> = Vec::new();
    for o in outcomes {
        let Ok(m) = &o.result else { continue };
        let label = column(o);
        let point = (o.run.size_bytes as f64, m.mb_per_s);
        match series.iter_mut().find(|s| s.label == label) {
            Some(s) => s.points.push(point),
            None => series.push(plot::XySeries {
                label,
                points: vec![point],
            }),
        }
    }
    for s in &mut series {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    plot::xy_svg(
        path,
        "throughput by write size (buffered includes its final fdatasync)",
        ("write size (log scale)", "MB/s (log scale)"),
        &series,
        &|x| format_size_approx(x.round() as u64),
    )
}
