//! The comparison: every (workload, threads, size, engine) cell, in every
//! round, each run a `keel-bench run` process of its own in a fresh
//! directory; then, per cell, the median over the rounds with the min and
//! max, and each engine's median over keel's.
//!
//! Interleaving: round k runs the cells in order, and within each cell
//! the engines starting at offset k of the engine list (round 0: keel,
//! rocksdb, lmdb…; round 1: rocksdb, lmdb, …, keel), so that no engine
//! always runs first or right after the same neighbour, and a slow minute
//! of the machine falls on different engines in different rounds.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::json;

use crate::engines::{FjallSync, Kind};
use crate::machine::{self, Machine};
use crate::run::{round, Workload};

#[derive(Args, Debug, Clone)]
pub struct CompareArgs {
    /// Engines, comma-separated (keel, rocksdb, lmdb, sqlite, redb,
    /// fjall). Ratios are against keel, so keep it in the list.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "keel,rocksdb,lmdb,sqlite,redb,fjall"
    )]
    pub engines: Vec<String>,
    /// Workloads, comma-separated (w1, w2, w3, r1).
    #[arg(long, value_delimiter = ',', default_value = "w1,w2,w3,r1")]
    pub workloads: Vec<String>,
    /// Rounds (each cell run once per round; medians are taken). Default
    /// 5 (with --quick, 1).
    #[arg(long)]
    pub rounds: Option<u32>,
    /// w1: serial commits of one 16 KiB value per run (default 4096).
    #[arg(long)]
    pub w1_count: Option<u64>,
    /// w2: committing threads, comma-separated (default 1,4,16,64).
    #[arg(long, value_delimiter = ',')]
    pub w2_threads: Option<Vec<usize>>,
    /// w2: value bytes per commit, comma-separated (default 128,1024).
    #[arg(long, value_delimiter = ',')]
    pub w2_sizes: Option<Vec<usize>>,
    /// w2: seconds per run (default 3).
    #[arg(long)]
    pub w2_duration: Option<f64>,
    /// w3: transactions per run (default 10000).
    #[arg(long)]
    pub w3_txns: Option<u64>,
    /// w3: random puts (16-byte key, 100-byte value) per transaction
    /// (default 100).
    #[arg(long)]
    pub w3_batch: Option<usize>,
    /// r1: keys loaded before the reads (default 1000000).
    #[arg(long)]
    pub r1_keys: Option<u64>,
    /// r1: reading threads, comma-separated (default 1,2).
    #[arg(long, value_delimiter = ',')]
    pub r1_threads: Option<Vec<usize>>,
    /// r1: seconds of reads per run (default 3).
    #[arg(long)]
    pub r1_duration: Option<f64>,
    /// r1: puts per transaction of the (untimed) load (default 1000).
    #[arg(long)]
    pub r1_batch: Option<usize>,
    /// A smoke test: 1 round, w1 64 commits, w2 at 1 and 4 threads of
    /// 128 bytes for 0.3 s, w3 50 transactions, r1 5,000 keys for 0.3 s
    /// (flags given explicitly still win). Checks that it runs, not the
    /// speed.
    #[arg(long)]
    pub quick: bool,
    /// Directory for the stores (created if missing; each run gets a
    /// fresh subdirectory, removed afterwards). Default: a new
    /// `keel-bench-data-<pid>` in the current directory, removed at the
    /// end. Put it on the disk you want to measure; not on tmpfs.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// fjall: the journal sync each commit asks for: `all`
    /// (PersistMode::SyncAll, fsync) or `data` (SyncData, fdatasync).
    #[arg(long, value_enum, default_value_t = FjallSync::All)]
    pub fjall_sync: FjallSync,
    /// Print one JSON object on stdout instead of the markdown report.
    #[arg(long)]
    pub json: bool,
}

/// The settings of the comparison, resolved from the flags.
struct Plan {
    engines: Vec<Kind>,
    workloads: Vec<Workload>,
    rounds: u32,
    w1_count: u64,
    w2_threads: Vec<usize>,
    w2_sizes: Vec<usize>,
    w2_duration: f64,
    w3_txns: u64,
    w3_batch: usize,
    r1_keys: u64,
    r1_threads: Vec<usize>,
    r1_duration: f64,
    r1_batch: usize,
}

impl Plan {
    fn new(a: &CompareArgs) -> Result<Plan> {
        let mut engines = Vec::new();
        for e in &a.engines {
            let Some(k) = Kind::parse(e.trim()) else {
                bail!("unknown engine {e:?}: choose from keel, rocksdb, lmdb, sqlite, redb, fjall");
            };
            if !engines.contains(&k) {
                engines.push(k);
            }
        }
        let mut workloads = Vec::new();
        for w in &a.workloads {
            let k = match w.trim() {
                "w1" => Workload::W1,
                "w2" => Workload::W2,
                "w3" => Workload::W3,
                "r1" => Workload::R1,
                _ => bail!("unknown workload {w:?}: choose from w1, w2, w3, r1"),
            };
            if !workloads.contains(&k) {
                workloads.push(k);
            }
        }
        let q = a.quick;
        let p = Plan {
            engines,
            workloads,
            rounds: a.rounds.unwrap_or(if q { 1 } else { 5 }),
            w1_count: a.w1_count.unwrap_or(if q { 64 } else { 4096 }),
            w2_threads: a.w2_threads.clone().unwrap_or(if q {
                vec![1, 4]
            } else {
                vec![1, 4, 16, 64]
            }),
            w2_sizes: a
                .w2_sizes
                .clone()
                .unwrap_or(if q { vec![128] } else { vec![128, 1024] }),
            w2_duration: a.w2_duration.unwrap_or(if q { 0.3 } else { 3.0 }),
            w3_txns: a.w3_txns.unwrap_or(if q { 50 } else { 10_000 }),
            w3_batch: a.w3_batch.unwrap_or(100),
            r1_keys: a.r1_keys.unwrap_or(if q { 5_000 } else { 1_000_000 }),
            r1_threads: a.r1_threads.clone().unwrap_or(vec![1, 2]),
            r1_duration: a.r1_duration.unwrap_or(if q { 0.3 } else { 3.0 }),
            r1_batch: a.r1_batch.unwrap_or(1000),
        };
        if p.engines.is_empty() || p.workloads.is_empty() {
            bail!("--engines and --workloads must name at least one each");
        }
        if p.rounds == 0 || p.rounds > 100 {
            bail!("--rounds must be between 1 and 100");
        }
        let threads = p.w2_threads.iter().chain(&p.r1_threads);
        if threads.clone().any(|&t| t == 0 || t > 4096) {
            bail!("thread counts must be between 1 and 4096");
        }
        if p.w2_sizes.iter().any(|&s| s == 0 || s > 16 << 20) {
            bail!("--w2-sizes must be between 1 and 16M bytes");
        }
        if p.w1_count == 0 || p.w3_txns == 0 || p.w3_batch == 0 || p.r1_keys == 0 || p.r1_batch == 0
        {
            bail!("counts and batch sizes must be at least 1");
        }
        for d in [p.w2_duration, p.r1_duration] {
            if !d.is_finite() || d <= 0.0 {
                bail!("durations must be a number of seconds > 0");
            }
        }
        Ok(p)
    }

    /// The cells of a round, in order, without the engine.
    fn cells(&self) -> Vec<Cell> {
        let mut cells = Vec::new();
        for &w in &self.workloads {
            match w {
                Workload::W1 => cells.push(Cell {
                    workload: w,
                    threads: 1,
                    size: 16384,
                    count: self.w1_count,
                    duration: 0.0,
                    batch: 1,
                }),
                Workload::W2 => {
                    for &size in &self.w2_sizes {
                        for &threads in &self.w2_threads {
                            cells.push(Cell {
                                workload: w,
                                threads,
                                size,
                                count: 0,
                                duration: self.w2_duration,
                                batch: 1,
                            });
                        }
                    }
                }
                Workload::W3 => cells.push(Cell {
                    workload: w,
                    threads: 1,
                    size: 100,
                    count: self.w3_txns,
                    duration: 0.0,
                    batch: self.w3_batch,
                }),
                Workload::R1 => {
                    for &threads in &self.r1_threads {
                        cells.push(Cell {
                            workload: w,
                            threads,
                            size: 100,
                            count: self.r1_keys,
                            duration: self.r1_duration,
                            batch: self.r1_batch,
                        });
                    }
                }
            }
        }
        cells
    }
}

/// One (workload, threads, size) configuration, run on every engine.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Cell {
    workload: Workload,
    threads: usize,
    size: usize,
    count: u64,
    duration: f64,
    batch: usize,
}

impl Cell {
    fn label(&self) -> String {
        match self.workload {
            Workload::W1 => format!("w1 T=1, {} × 16 KiB", self.count),
            Workload::W2 => format!("w2 T={}, R={}", self.threads, self.size),
            Workload::W3 => format!("w3 T=1, {} tx × {} puts", self.count, self.batch),
            Workload::R1 => format!("r1 T={}, {} keys", self.threads, self.count),
        }
    }

    fn unit(&self) -> &'static str {
        match self.workload {
            Workload::R1 => "gets/s",
            Workload::W3 => "tx/s",
            _ => "commits/s",
        }
    }

    /// The protocol's flags for this cell in `dir`.
    fn protocol_args(&self, dir: &Path) -> Vec<String> {
        vec![
            "--workload".into(),
            self.workload.name().into(),
            "--threads".into(),
            self.threads.to_string(),
            "--size".into(),
            self.size.to_string(),
            "--count".into(),
            self.count.to_string(),
            "--duration".into(),
            self.duration.to_string(),
            "--dir".into(),
            dir.display().to_string(),
            "--batch".into(),
            self.batch.to_string(),
        ]
    }
}

/// One run's result: its JSON line, or why it failed.
struct RunResult {
    cell: usize,
    engine: Kind,
    round: u32,
    result: Result<serde_json::Value, String>,
}

impl RunResult {
    fn rate(&self) -> Option<f64> {
        self.result.as_ref().ok()?["commits_per_s"].as_f64()
    }

    /// Commits per second counting the engine's `close` (w1–w3).
    fn rate_to_close(&self) -> Option<f64> {
        self.result.as_ref().ok()?["info"]["commits_per_s_to_close"].as_f64()
    }
}

/// Removes the default data directory at the end (only the one this
/// process made).
struct OwnedDir(Option<PathBuf>);

impl Drop for OwnedDir {
    fn drop(&mut self) {
        if let Some(d) = &self.0 {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

pub fn run(a: CompareArgs) -> Result<ExitCode> {
    let plan = Plan::new(&a)?;
    let (dir, _owned) = match &a.dir {
        Some(d) => (d.clone(), OwnedDir(None)),
        None => {
            let d = PathBuf::from(format!("keel-bench-data-{}", std::process::id()));
            (d.clone(), OwnedDir(Some(d)))
        }
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating --dir {}", dir.display()))?;
    let dir = dir.canonicalize()?;
    let command: Vec<String> = std::env::args().collect();
    let machine = Machine::for_path(&dir);
    if machine.is_tmpfs() {
        eprintln!(
            "warning: {} is on tmpfs: nothing there is durable, and the figures say nothing \
             about a disk. Give --dir on the disk to measure.",
            dir.display()
        );
    }
    eprintln!("{}", command.join(" "));
    eprintln!("machine: {}", machine.describe());
    let sync =
        machine::fdatasync_latency(&dir, 200).unwrap_or_else(|e| json!({"error": e.to_string()}));
    eprintln!("durable 4 KiB write here: {sync}");
    let exe = std::env::current_exe().context("finding this binary")?;
    let cells = plan.cells();
    let total = cells.len() * plan.engines.len() * plan.rounds as usize;
    let started = Instant::now();
    let mut results: Vec<RunResult> = Vec::new();
    let mut n = 0;
    for round in 0..plan.rounds {
        for (ci, cell) in cells.iter().enumerate() {
            for engine in rotated(&plan.engines, round) {
                n += 1;
                let run_dir = dir.join(format!("run-{}", engine.name()));
                let t0 = Instant::now();
                let result = run_child(&exe, engine, cell, &run_dir, a.fjall_sync);
                let _ = std::fs::remove_dir_all(&run_dir);
                let r = RunResult {
                    cell: ci,
                    engine,
                    round,
                    result,
                };
                let what = match (&r.result, r.rate()) {
                    (Ok(_), Some(rate)) => format!("{} {}", number(rate, 0), cell.unit()),
                    (Err(e), _) => format!("FAILED: {e}"),
                    (Ok(_), None) => "FAILED: no commits_per_s".into(),
                };
                eprintln!(
                    "[{n}/{total}, {:.0} s] round {}/{} {} {}: {what} ({:.1} s)",
                    started.elapsed().as_secs_f64(),
                    round + 1,
                    plan.rounds,
                    cell.label(),
                    engine.name(),
                    t0.elapsed().as_secs_f64()
                );
                results.push(r);
            }
        }
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    let end_load = machine::loadavg();
    let head = Head {
        command,
        machine,
        sync,
        end_load,
        elapsed_s,
        dir,
    };
    if a.json {
        println!("{}", to_json(&plan, &cells, &results, &head, a.fjall_sync));
    } else {
        print!("{}", render(&plan, &cells, &results, &head, a.fjall_sync));
    }
    let failed = results.iter().filter(|r| r.rate().is_none()).count();
    if failed > 0 {
        eprintln!("{failed} of {total} runs failed (see the report)");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// The engines in the order round `round` runs them: the list started at
/// offset `round` (modulo its length).
fn rotated(engines: &[Kind], round: u32) -> Vec<Kind> {
    let k = round as usize % engines.len().max(1);
    engines[k..].iter().chain(&engines[..k]).copied().collect()
}

/// Run one cell on one engine as a `keel-bench run` process; its last
/// JSON line, or why it failed.
fn run_child(
    exe: &Path,
    engine: Kind,
    cell: &Cell,
    run_dir: &Path,
    fjall_sync: FjallSync,
) -> Result<serde_json::Value, String> {
    let _ = std::fs::remove_dir_all(run_dir);
    std::fs::create_dir_all(run_dir).map_err(|e| format!("creating {}: {e}", run_dir.display()))?;
    let out = Command::new(exe)
        .arg("run")
        .args(["--engine", engine.name()])
        .args(cell.protocol_args(run_dir))
        .args(["--fjall-sync", fjall_sync.name()])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("starting {}: {e}", exe.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l.trim()).ok());
    let stderr = String::from_utf8_lossy(&out.stderr);
    match line {
        Some(v) if out.status.success() && v.get("error").is_none() => Ok(v),
        Some(v) if v.get("error").is_some() => Err(v["error"].as_str().unwrap_or("?").to_string()),
        _ => Err(format!(
            "exit {}: {}",
            out.status,
            stderr.lines().last().unwrap_or("no output")
        )),
    }
}

struct Head {
    command: Vec<String>,
    machine: Machine,
    sync: serde_json::Value,
    end_load: Option<String>,
    elapsed_s: f64,
    dir: PathBuf,
}

/// Per cell and engine: the rates of the rounds that succeeded, their
/// median, min and max, and the run at the median (for its latencies).
struct Summary<'a> {
    rates: Vec<f64>,
    failed: usize,
    median: Option<f64>,
    min: Option<f64>,
    max: Option<f64>,
    mid: Option<&'a serde_json::Value>,
}

fn summarize<'a>(results: &'a [RunResult], cell: usize, engine: Kind) -> Summary<'a> {
    summarize_by(results, cell, engine, RunResult::rate)
}

/// [`summarize`] of another rate of each run.
fn summarize_by<'a>(
    results: &'a [RunResult],
    cell: usize,
    engine: Kind,
    rate: fn(&RunResult) -> Option<f64>,
) -> Summary<'a> {
    let mut ok: Vec<(&'a serde_json::Value, f64)> = Vec::new();
    let mut failed = 0;
    for r in results
        .iter()
        .filter(|r| r.cell == cell && r.engine == engine)
    {
        match (&r.result, rate(r)) {
            (Ok(v), Some(rate)) => ok.push((v, rate)),
            _ => failed += 1,
        }
    }
    let rates: Vec<f64> = ok.iter().map(|x| x.1).collect();
    ok.sort_by(|x, y| x.1.total_cmp(&y.1));
    Summary {
        median: median(&rates),
        min: rates.iter().copied().reduce(f64::min),
        max: rates.iter().copied().reduce(f64::max),
        // The lower middle run for an even count.
        mid: ok.get(ok.len().saturating_sub(1) / 2).map(|x| x.0),
        rates,
        failed,
    }
}

/// The median of `v` (the mean of the two middle values for an even
/// count), or `None` when empty.
pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    Some(if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    })
}

/// `x` with `decimals` decimals and thousands separators.
pub fn number(x: f64, decimals: usize) -> String {
    if !x.is_finite() {
        return "–".into();
    }
    let s = format!("{:.*}", decimals, x.abs());
    let (int, frac) = match s.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (s.as_str(), None),
    };
    let mut out = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if let Some(f) = frac {
        out.push('.');
        out.push_str(f);
    }
    if x < 0.0 {
        out.insert(0, '-');
    }
    out
}

/// The engines' crate versions (from Cargo.lock at build time) and the
/// libraries' own versions where they tell it.
fn versions() -> Vec<(Kind, String)> {
    let locked: Vec<(&str, &str)> = env!("KEEL_BENCH_VERSIONS")
        .split(';')
        .filter_map(|kv| kv.split_once('='))
        .collect();
    let v = |name: &str| {
        locked
            .iter()
            .find(|(n, _)| *n == name)
            .map_or("?", |(_, v)| *v)
            .to_string()
    };
    let git = Command::new("git")
        .args([
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "rev-parse",
            "--short",
            "HEAD",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let rocks = v("librocksdb-sys");
    let rocks_lib = rocks.split_once('+').map_or("?", |(_, r)| r).to_string();
    vec![
        (
            Kind::Keel,
            format!(
                "keel {} (path ../keel{})",
                v("keel"),
                git.map_or(String::new(), |g| format!(", git {g}"))
            ),
        ),
        (
            Kind::Rocksdb,
            format!("rocksdb {} (RocksDB {rocks_lib})", v("rocksdb")),
        ),
        (
            Kind::Lmdb,
            format!("heed {} ({})", v("heed"), heed::lmdb_version().string),
        ),
        (
            Kind::Sqlite,
            format!(
                "rusqlite {} (SQLite {}, bundled)",
                v("rusqlite"),
                rusqlite::version()
            ),
        ),
        (Kind::Redb, format!("redb {}", v("redb"))),
        (
            Kind::Fjall,
            format!("fjall {} (lsm-tree {})", v("fjall"), v("lsm-tree")),
        ),
    ]
}

fn version_of(k: Kind) -> String {
    versions()
        .into_iter()
        .find(|(e, _)| *e == k)
        .map_or_else(String::new, |(_, s)| s)
}

fn to_json(
    plan: &Plan,
    cells: &[Cell],
    results: &[RunResult],
    head: &Head,
    fjall_sync: FjallSync,
) -> serde_json::Value {
    let keel_ok = plan.engines.contains(&Kind::Keel);
    let rows: Vec<serde_json::Value> = cells
        .iter()
        .enumerate()
        .map(|(ci, c)| {
            let keel = keel_ok
                .then(|| summarize(results, ci, Kind::Keel).median)
                .flatten();
            let mut engines = serde_json::Map::new();
            for &e in &plan.engines {
                let s = summarize(results, ci, e);
                let to_close = summarize_by(results, ci, e, RunResult::rate_to_close).median;
                engines.insert(
                    e.name().into(),
                    json!({
                        "per_s": s.rates.iter().map(|x| round(*x, 1)).collect::<Vec<_>>(),
                        "failed": s.failed,
                        "median_per_s": s.median.map(|x| round(x, 1)),
                        "min_per_s": s.min.map(|x| round(x, 1)),
                        "max_per_s": s.max.map(|x| round(x, 1)),
                        "ratio_vs_keel": s.median.zip(keel).map(|(m, k)| round(m / k, 3)),
                        "median_per_s_to_close": to_close.map(|x| round(x, 1)),
                        "median_run_p50_us": s.mid.map(|m| m["p50_us"].clone()),
                        "median_run_p99_us": s.mid.map(|m| m["p99_us"].clone()),
                        "median_run_total_ms": s.mid.map(|m| m["total_ms"].clone()),
                    }),
                );
            }
            json!({
                "workload": c.workload.name(),
                "threads": c.threads,
                "size": c.size,
                "count": c.count,
                "duration_s": c.duration,
                "batch": c.batch,
                "unit": c.unit(),
                "engines": engines,
            })
        })
        .collect();
    json!({
        "command": head.command.join(" "),
        "machine": head.machine.to_json(),
        "durable_write_4k": head.sync,
        "loadavg_at_end": head.end_load,
        "dir": head.dir,
        "rounds": plan.rounds,
        "elapsed_s": round(head.elapsed_s, 1),
        "fjall_sync": fjall_sync.name(),
        "engines": plan.engines.iter().map(|&e| json!({
            "name": e.name(),
            "version": version_of(e),
            "settings": e.settings(),
        })).collect::<Vec<_>>(),
        "cells": rows,
        "runs": results.iter().map(|r| json!({
            "workload": cells[r.cell].workload.name(),
            "threads": cells[r.cell].threads,
            "size": cells[r.cell].size,
            "engine": r.engine.name(),
            "round": r.round + 1,
            "result": match &r.result {
                Ok(v) => v.clone(),
                Err(e) => json!({"error": e}),
            },
        })).collect::<Vec<_>>(),
    })
}

/// A table's header: `first` columns, then one per engine.
fn table_head(plan: &Plan, first: &[&str]) -> String {
    let mut out = String::from("|");
    for c in first {
        out += &format!(" {c} |");
    }
    for &e in &plan.engines {
        out += &format!(" {} |", e.name());
    }
    out += "\n|";
    for _ in 0..first.len() + plan.engines.len() {
        out += "---|";
    }
    out.push('\n');
    out
}

/// One row per cell that `keep` keeps: each engine's median `rate` over
/// the rounds (min–max), and its ratio to keel's.
fn rate_table(
    plan: &Plan,
    cells: &[Cell],
    results: &[RunResult],
    rate: fn(&RunResult) -> Option<f64>,
    keep: fn(&Cell) -> bool,
) -> String {
    let keel_in = plan.engines.contains(&Kind::Keel);
    let mut out = table_head(plan, &["cell", "unit"]);
    for (ci, c) in cells.iter().enumerate().filter(|(_, c)| keep(c)) {
        let keel = keel_in
            .then(|| summarize_by(results, ci, Kind::Keel, rate).median)
            .flatten();
        out += &format!("| {} | {} |", c.label(), c.unit());
        for &e in &plan.engines {
            let s = summarize_by(results, ci, e, rate);
            let cell = match (s.median, s.min, s.max) {
                (Some(m), Some(lo), Some(hi)) => {
                    let mut t = format!("{} ({}–{})", number(m, 0), number(lo, 0), number(hi, 0));
                    if e != Kind::Keel {
                        if let Some(k) = keel {
                            t += &format!(" {}×", number(m / k, 2));
                        }
                    }
                    if s.failed > 0 {
                        t += &format!(" [{} failed]", s.failed);
                    }
                    t
                }
                _ => format!("failed ({}×)", s.failed),
            };
            out += &format!(" {cell} |");
        }
        out.push('\n');
    }
    out
}

fn render(
    plan: &Plan,
    cells: &[Cell],
    results: &[RunResult],
    head: &Head,
    fjall_sync: FjallSync,
) -> String {
    let mut out = String::new();
    out += &format!("`{}`\n\n", head.command.join(" "));
    out += &format!("* Machine: {}\n", head.machine.describe());
    let s = &head.sync;
    out += &format!(
        "* Durable 4 KiB write in --dir ({}): p50 {} µs, p99 {} µs ({} per s)\n",
        s["what"].as_str().unwrap_or("fdatasync loop"),
        s["p50_us"],
        s["p99_us"],
        s["per_s"]
    );
    out += &format!(
        "* Load average (1, 5, 15 min) at the start: {}; at the end: {}\n",
        head.machine.loadavg.as_deref().unwrap_or("?"),
        head.end_load.as_deref().unwrap_or("?")
    );
    out += "* Engines:";
    for &e in &plan.engines {
        out += &format!(" {};", version_of(e));
    }
    out.pop();
    out += &format!(
        " (fjall: PersistMode::{})\n",
        match fjall_sync {
            FjallSync::All => "SyncAll",
            FjallSync::Data => "SyncData",
        }
    );
    out += &format!(
        "* {} round(s), {} runs in {:.1} min; each run a process of its own in a fresh \
         directory; round k starts each cell's engine list at offset k\n\n",
        plan.rounds,
        results.len(),
        head.elapsed_s / 60.0
    );
    out += &format!(
        "Median over the rounds per cell (min–max), and the median over keel's (×). Every \
         commit durable when it returns. w1: {} serial commits of one 16 KiB value; w2: T \
         threads each committing one R-byte value per transaction for {} s; w3: {} \
         transactions of {} random puts (16-byte key, 100-byte value); r1: {} loaded keys \
         (100-byte values), the store closed and opened again, then T threads of point gets for \
         {} s, each get in its own read transaction.\n\n",
        plan.w1_count,
        plan.w2_duration,
        plan.w3_txns,
        plan.w3_batch,
        plan.r1_keys,
        plan.r1_duration
    );
    out += &rate_table(plan, cells, results, RunResult::rate, |_| true);
    if cells.iter().any(|c| c.workload != Workload::R1) {
        out += "\nThe same runs to the close (commits / (the timed run + the engine's `close`), \
                which the protocol leaves out of the timing; a store that writes its data in \
                place at the close, as Keel's checkpoint does, pays for it there):\n\n";
        out += &rate_table(plan, cells, results, RunResult::rate_to_close, |c| {
            c.workload != Workload::R1
        });
    }
    out += "\nLatency of the median run, p50 / p99 µs (w: the commit call; r1: the get):\n\n";
    out += &table_head(plan, &["cell"]);
    for (ci, c) in cells.iter().enumerate() {
        out += &format!("| {} |", c.label());
        for &e in &plan.engines {
            let s = summarize(results, ci, e);
            let t = s.mid.map_or("–".to_string(), |m| {
                let f = |v: &serde_json::Value| v.as_f64().map_or("?".into(), |x| number(x, 0));
                format!("{} / {}", f(&m["p50_us"]), f(&m["p99_us"]))
            });
            out += &format!(" {t} |");
        }
        out.push('\n');
    }
    let failures: Vec<String> = results
        .iter()
        .filter_map(|r| match &r.result {
            Err(e) => Some(format!(
                "- round {} {} {}: {e}",
                r.round + 1,
                cells[r.cell].label(),
                r.engine.name()
            )),
            Ok(_) => None,
        })
        .collect();
    if !failures.is_empty() {
        out += "\nFailed runs:\n\n";
        out += &failures.join("\n");
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }

    #[test]
    fn numbers_have_separators() {
        assert_eq!(number(1234567.0, 0), "1,234,567");
        assert_eq!(number(999.0, 0), "999");
        assert_eq!(number(1234.5, 2), "1,234.50");
        assert_eq!(number(-1234.0, 0), "-1,234");
    }

    fn args(extra: &[&str]) -> CompareArgs {
        #[derive(clap::Parser)]
        struct P {
            #[command(flatten)]
            a: CompareArgs,
        }
        let mut v = vec!["keel-bench"];
        v.extend_from_slice(extra);
        <P as clap::Parser>::parse_from(v).a
    }

    /// The protocol's cells by default: w1, w2 at 4 thread counts × 2
    /// sizes, w3, r1 at 1 and 2 threads.
    #[test]
    fn default_cells_follow_the_protocol() {
        let p = Plan::new(&args(&[])).unwrap();
        assert_eq!(p.rounds, 5);
        assert_eq!(p.engines.len(), 6);
        let cells = p.cells();
        assert_eq!(cells.len(), 1 + 8 + 1 + 2);
        assert_eq!(
            cells[0].protocol_args(Path::new("/d")).join(" "),
            "--workload w1 --threads 1 --size 16384 --count 4096 --duration 0 --dir /d --batch 1"
        );
        let w2_64 = cells
            .iter()
            .find(|c| c.workload == Workload::W2 && c.threads == 64 && c.size == 128)
            .unwrap();
        assert_eq!(
            w2_64.protocol_args(Path::new("/d")).join(" "),
            "--workload w2 --threads 64 --size 128 --count 0 --duration 3 --dir /d --batch 1"
        );
        let w3 = cells.iter().find(|c| c.workload == Workload::W3).unwrap();
        assert_eq!((w3.count, w3.batch, w3.size), (10_000, 100, 100));
        let r1: Vec<_> = cells
            .iter()
            .filter(|c| c.workload == Workload::R1)
            .collect();
        assert_eq!(r1.len(), 2);
        assert_eq!(
            (r1[1].threads, r1[1].count, r1[1].batch),
            (2, 1_000_000, 1000)
        );
    }

    #[test]
    fn rounds_rotate_the_engines() {
        use Kind::*;
        let e = [Keel, Rocksdb, Lmdb];
        assert_eq!(rotated(&e, 0), vec![Keel, Rocksdb, Lmdb]);
        assert_eq!(rotated(&e, 1), vec![Rocksdb, Lmdb, Keel]);
        assert_eq!(rotated(&e, 2), vec![Lmdb, Keel, Rocksdb]);
        assert_eq!(rotated(&e, 3), vec![Keel, Rocksdb, Lmdb]);
    }

    #[test]
    fn bad_flags_are_refused() {
        assert!(Plan::new(&args(&["--engines", "keel,mongo"])).is_err());
        assert!(Plan::new(&args(&["--workloads", "w9"])).is_err());
        assert!(Plan::new(&args(&["--rounds", "0"])).is_err());
        assert!(Plan::new(&args(&["--w2-threads", "0"])).is_err());
        assert!(Plan::new(&args(&["--r1-duration=-1"])).is_err());
        let q = Plan::new(&args(&["--quick", "--rounds", "2"])).unwrap();
        assert_eq!((q.rounds, q.w3_txns), (2, 50));
    }
}
