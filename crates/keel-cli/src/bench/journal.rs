//! `keel bench journal --vs-raw`: the journal and the raw floor in the same
//! run, interleaved, so that the ratio survives a noisy machine.
//!
//! Each round runs, for w1 and for every record size of w2, the raw floor
//! (one thread, `O_DIRECT|O_DSYNC` into a zero-filled file, as in the
//! protocol's reference figures) and the journal at every thread count;
//! with `--raw-threads each`, the raw floor runs at every thread count too,
//! just before the journal at that count. Odd rounds run the same list
//! backwards, so each pair alternates which goes first. The table gives
//! medians over the rounds and the ratio of the medians.
//!
//! Every run is a `keel bench commit` process of its own, with the
//! protocol's flags, as an outside harness runs it: no run inherits the
//! heap, threads or page mappings of the one before, and each run's
//! context switches and CPU time are its own process's.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::Context;

use clap::{Args, ValueEnum};
use serde_json::json;

use keel::db::BackgroundCpus;

use super::commit::{with_dir, BatchStartArg, Engine, JournalFlags, Spec, Workload};
use super::report::{self, median, number, progress, Align, Machine, Table};
use crate::util::Size;

#[derive(Args, Debug, Clone)]
pub struct JournalArgs {
    /// Also run the raw floor, interleaved, and print journal/raw ratios.
    #[arg(long)]
    pub vs_raw: bool,
    /// Which raw floor a w2 row is compared with: one thread at the same
    /// record size (the protocol's reference floor), or T threads, each
    /// writing its own region of the file (twice the runs).
    #[arg(long, value_enum, default_value_t = RawThreads::One)]
    pub raw_threads: RawThreads,
    /// Rounds (each configuration runs once per round; medians are taken).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=15))]
    pub rounds: u32,
    /// w2 thread counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64")]
    pub threads: Vec<usize>,
    /// w2 record sizes (value bytes), comma-separated, bytes or K/M/G.
    #[arg(long, value_delimiter = ',', default_value = "128,1024")]
    pub sizes: Vec<Size>,
    /// Seconds per w2 run.
    #[arg(long, default_value_t = 3.0)]
    pub duration: f64,
    /// Commits per w1 run (16 KiB each).
    #[arg(long, default_value_t = 4096)]
    pub count: u64,
    /// Directory for the files (created if missing; default: a fresh
    /// `keel-bench-journal-<pid>` here). Files are removed afterwards.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    #[command(flatten)]
    pub journal: JournalFlags,
    /// Batch writes in flight, comma-separated: each value is a journal
    /// configuration of its own, interleaved with the others (1 to 4).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub writes_in_flight: Vec<usize>,
    /// Where batches start, comma-separated (rewrite, auto, fresh): each
    /// value a journal configuration of its own, crossed with
    /// --writes-in-flight (more than one write in flight always uses fresh
    /// blocks).
    #[arg(long, value_delimiter = ',', default_value = "auto")]
    pub batch_start: Vec<BatchStartArg>,
    /// A short run (1 round, 0.3 s, 256 w1 commits, T = 1 and 16, R = 128).
    #[arg(long)]
    pub quick: bool,
    /// Print one JSON object on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RawThreads {
    /// One committing thread: what one durable write at a time achieves.
    One,
    /// As many threads as the journal row: T independent durable writers.
    Each,
}

/// One line of the table: a workload at T threads and R bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Config {
    workload: Workload,
    threads: usize,
    size: usize,
    /// Writes in flight (journal only; 1 for the raw floor).
    in_flight: usize,
    /// Where batches start (journal only).
    start: BatchStartArg,
}

struct Run {
    config: Config,
    engine: Engine,
    round: u32,
    /// The `keel bench commit` arguments of the run.
    args: Vec<String>,
    /// Its JSON line.
    result: serde_json::Value,
}

impl Run {
    fn commits_per_s(&self) -> f64 {
        self.result["commits_per_s"].as_f64().unwrap_or(f64::NAN)
    }
}

/// One run as a process of its own: `keel bench commit` with `spec`'s
/// flags; its JSON line, or the error it reported.
pub(super) fn run_child(
    spec: &Spec,
    dir: &Path,
) -> anyhow::Result<(Vec<String>, serde_json::Value)> {
    let exe = std::env::current_exe().context("finding the keel executable")?;
    let mut args: Vec<String> = vec!["bench".into(), "commit".into()];
    args.extend(spec.command_args(dir));
    let out = Command::new(&exe)
        .args(&args)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("running {}", exe.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or("");
    let v: Option<serde_json::Value> = serde_json::from_str(line).ok();
    let shown = || format!("keel {}", args.join(" "));
    match v {
        Some(v) if out.status.success() && v["commits_per_s"].is_number() => Ok((args, v)),
        Some(v) if v["error"].is_string() => {
            anyhow::bail!(
                "`{}` failed: {}",
                shown(),
                v["error"].as_str().unwrap_or("")
            )
        }
        _ => anyhow::bail!(
            "`{}` failed ({}): {}",
            shown(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    }
}

pub fn run(mut a: JournalArgs) -> anyhow::Result<ExitCode> {
    if a.quick {
        a.rounds = 1;
        a.duration = 0.3;
        a.count = 256;
        a.threads = vec![1, 16];
        a.sizes = vec![Size(128)];
    }
    if a.threads.iter().any(|&t| t == 0 || t > 4096) {
        anyhow::bail!("--threads: each count must be between 1 and 4096");
    }
    if a.writes_in_flight.is_empty() || a.writes_in_flight.iter().any(|&w| !(1..=4).contains(&w)) {
        anyhow::bail!("--writes-in-flight: each value must be between 1 and 4");
    }
    let dir = a.dir.clone();
    with_dir(dir.as_deref(), "keel-bench-journal", |d| run_in(&a, d))
}

fn spec(a: &JournalArgs, c: Config, engine: Engine) -> Spec {
    let w1 = c.workload == Workload::W1;
    Spec {
        workload: c.workload,
        threads: c.threads,
        size: c.size,
        count: if w1 { a.count } else { 0 },
        duration: if w1 { 0.0 } else { a.duration },
        batch: 1,
        engine,
        method: a.journal.method,
        segment_size: a.journal.segment_size.bytes(),
        lz4: a.journal.lz4.map(|s| s.bytes() as usize),
        values: a.journal.values,
        preallocate: None,
        writes_in_flight: c.in_flight,
        batch_start: c.start,
        start: false,
        background_cpus: BackgroundCpus::Any,
        store: Default::default(),
    }
}

fn run_in(a: &JournalArgs, dir: &Path) -> anyhow::Result<ExitCode> {
    let round_list = round_list(a);
    let machine = Machine::for_path(dir);
    let command: Vec<String> = std::env::args().collect();
    eprintln!("{}", command.join(" "));
    eprintln!("machine: {}", machine.describe());
    let runs = run_rounds(a, dir, &round_list)?;
    let rows = summarize(a, &runs);
    if a.json {
        print_json(a, &rows, &runs, &command, &machine)?;
    } else {
        out!("{}", render(a, &rows, &runs, &command, &machine))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The runs of one round: per group (w1, then each w2 size), the raw
/// floor first, then the journal configurations.
fn round_list(a: &JournalArgs) -> Vec<(Config, Engine)> {
    let mut round_list: Vec<(Config, Engine)> = Vec::new();
    let w1 = Config {
        workload: Workload::W1,
        threads: 1,
        size: 16384,
        in_flight: 1,
        start: BatchStartArg::Auto,
    };
    // The journal configurations: writes in flight × batch start, without
    // the impossible ones (several in flight need fresh blocks).
    let mut variants: Vec<(usize, BatchStartArg)> = Vec::new();
    for &w in &a.writes_in_flight {
        for &b in &a.batch_start {
            let v = (w, if w > 1 { BatchStartArg::Fresh } else { b });
            if !variants.contains(&v) {
                variants.push(v);
            }
        }
    }
    if a.vs_raw {
        round_list.push((w1, Engine::Raw));
    }
    for &(in_flight, start) in &variants {
        round_list.push((
            Config {
                in_flight,
                start,
                ..w1
            },
            Engine::Journal,
        ));
    }
    for size in &a.sizes {
        let size = size.bytes() as usize;
        if a.vs_raw && a.raw_threads == RawThreads::One {
            let raw = Config {
                workload: Workload::W2,
                threads: 1,
                size,
                in_flight: 1,
                start: BatchStartArg::Auto,
            };
            round_list.push((raw, Engine::Raw));
        }
        for &threads in &a.threads {
            let c = Config {
                workload: Workload::W2,
                threads,
                size,
                in_flight: 1,
                start: BatchStartArg::Auto,
            };
            if a.vs_raw && a.raw_threads == RawThreads::Each {
                round_list.push((c, Engine::Raw));
            }
            for &(in_flight, start) in &variants {
                round_list.push((
                    Config {
                        in_flight,
                        start,
                        ..c
                    },
                    Engine::Journal,
                ));
            }
        }
    }
    round_list
}

/// Every run of every round (odd rounds in reverse order), with progress
/// on stderr.
fn run_rounds(
    a: &JournalArgs,
    dir: &Path,
    round_list: &[(Config, Engine)],
) -> anyhow::Result<Vec<Run>> {
    let total = round_list.len() as u64 * u64::from(a.rounds);
    let bar = progress::bar(total, "bench journal", false);
    let mut runs: Vec<Run> = Vec::new();
    for round in 0..a.rounds {
        let mut list = round_list.to_vec();
        if round % 2 == 1 {
            list.reverse();
        }
        for (config, engine) in list {
            let s = spec(a, config, engine);
            let label = label(round, config, engine);
            bar.set_message(label.clone());
            let (args, result) = run_child(&s, dir)?;
            let run = Run {
                config,
                engine,
                round,
                args,
                result,
            };
            if bar.is_hidden() {
                eprintln!("{label} {:>9.0} commits/s", run.commits_per_s());
            } else {
                bar.inc(1);
            }
            runs.push(run);
        }
    }
    bar.finish_and_clear();
    Ok(runs)
}

/// A run's line in the progress bar (or on stderr).
fn label(round: u32, config: Config, engine: Engine) -> String {
    format!(
        "round {} {:>7} {} T={:<3} R={:<6} W={} {}",
        round + 1,
        if engine == Engine::Raw {
            "raw"
        } else {
            "journal"
        },
        config.workload.name(),
        config.threads,
        config.size,
        config.in_flight,
        if engine == Engine::Raw {
            ""
        } else {
            config.start.name()
        }
    )
}

/// The whole result as one JSON object on stdout.
fn print_json(
    a: &JournalArgs,
    rows: &[serde_json::Value],
    runs: &[Run],
    command: &[String],
    machine: &Machine,
) -> Result<(), crate::out::StdoutError> {
    let out = json!({
        "command": command.join(" "),
        "machine": machine.describe(),
        "rounds": a.rounds,
        "raw_threads": if a.vs_raw { Some(format!("{:?}", a.raw_threads).to_lowercase()) } else { None },
        "rows": rows,
        "runs": runs.iter().map(|r| json!({
            "workload": r.config.workload.name(),
            "threads": r.config.threads,
            "size": r.config.size,
            "writes_in_flight": r.config.in_flight,
            "batch_start": r.config.start.name(),
            "engine": if r.engine == Engine::Raw { "raw" } else { "journal" },
            "round": r.round + 1,
            "command": format!("keel {}", r.args.join(" ")),
            "result": r.result,
        })).collect::<Vec<_>>(),
    });
    outln!("{out}")
}

/// Medians per configuration, as JSON rows.
fn summarize(a: &JournalArgs, runs: &[Run]) -> Vec<serde_json::Value> {
    let mut configs: Vec<Config> = Vec::new();
    for r in runs.iter().filter(|r| r.engine == Engine::Journal) {
        if !configs.contains(&r.config) {
            configs.push(r.config);
        }
    }
    configs
        .into_iter()
        .map(|c| {
            let mut journal: Vec<&Run> = runs
                .iter()
                .filter(|r| r.engine == Engine::Journal && r.config == c)
                .collect();
            journal.sort_by(|x, y| x.commits_per_s().total_cmp(&y.commits_per_s()));
            // The run at the median (the lower middle one for an even count).
            let mid = &journal[(journal.len() - 1) / 2].result;
            let j_rates: Vec<f64> = journal.iter().map(|r| r.commits_per_s()).collect();
            let j_median = median(&j_rates).unwrap_or(f64::NAN);
            let raw_threads = match a.raw_threads {
                RawThreads::One => 1,
                RawThreads::Each => c.threads,
            };
            let raw: Vec<f64> = runs
                .iter()
                .filter(|r| {
                    r.engine == Engine::Raw
                        && r.config.workload == c.workload
                        && r.config.size == c.size
                        && r.config.threads == raw_threads
                })
                .map(|r| r.commits_per_s())
                .collect();
            let raw_median = median(&raw);
            json!({
                "workload": c.workload.name(),
                "threads": c.threads,
                "size": c.size,
                "writes_in_flight": c.in_flight,
                "batch_start": c.start.name(),
                "journal_commits_per_s": journal.iter().map(|r| r.commits_per_s().round()).collect::<Vec<_>>(),
                "journal_median": j_median.round(),
                "raw_commits_per_s": raw.iter().map(|x| x.round()).collect::<Vec<_>>(),
                "raw_median": raw_median.map(f64::round),
                "raw_threads": (!raw.is_empty()).then_some(raw_threads),
                "ratio": raw_median.map(|r| (j_median / r * 1000.0).round() / 1000.0),
                "p50_us": mid["p50_us"].clone(),
                "p99_us": mid["p99_us"].clone(),
                "context_switches_per_commit": mid["info"]["context_switches_per_commit"].clone(),
                "cpu_us_per_commit": mid["info"]["cpu_us_per_commit"].clone(),
                "records_per_write": mid["info"]["records_per_write"].clone(),
                "duration_s": if c.workload == Workload::W1 { None } else { Some(a.duration) },
            })
        })
        .collect()
}

/// The table of results, a row per configuration.
fn results_table(rows: &[serde_json::Value]) -> Table {
    let mut t = Table::new(&[
        ("workload", Align::Left),
        ("T", Align::Right),
        ("R", Align::Right),
        ("W", Align::Right),
        ("batch start", Align::Left),
        ("raw commits/s", Align::Right),
        ("journal commits/s", Align::Right),
        ("journal/raw", Align::Right),
        ("p50 µs", Align::Right),
        ("p99 µs", Align::Right),
        ("cs/commit", Align::Right),
        ("CPU µs/commit", Align::Right),
        ("records/write", Align::Right),
    ]);
    let f = |v: &serde_json::Value, d: usize| v.as_f64().map_or("–".into(), |x| number(x, d));
    for r in rows {
        t.push(vec![
            r["workload"].as_str().unwrap_or("").into(),
            r["threads"].to_string(),
            r["size"].to_string(),
            r["writes_in_flight"].to_string(),
            r["batch_start"].as_str().unwrap_or("").into(),
            f(&r["raw_median"], 0),
            f(&r["journal_median"], 0),
            f(&r["ratio"], 3),
            f(&r["p50_us"], 0),
            f(&r["p99_us"], 0),
            f(&r["context_switches_per_commit"], 2),
            f(&r["cpu_us_per_commit"], 1),
            f(&r["records_per_write"], 1),
        ]);
    }
    t
}

/// The text report: the command, the machine, how the runs were made, the
/// table, and one exact invocation per engine.
fn render(
    a: &JournalArgs,
    rows: &[serde_json::Value],
    runs: &[Run],
    command: &[String],
    machine: &Machine,
) -> String {
    let t = results_table(rows);
    let mut out = machine.report_head(command);
    let (raw_who, w2_floor) = match a.raw_threads {
        RawThreads::One => ("one thread", "the one-thread floor at the same R"),
        RawThreads::Each => (
            "T threads, each in its own region of the file",
            "the floor at the same T and R",
        ),
    };
    out += &format!(
        "Medians of {} interleaved round(s); w1 = {} serial commits of 16 KiB, w2 = {} s per run. \
         Raw floor: {raw_who}, one O_DIRECT|O_DSYNC pwrite of the key and value (zero-padded \
         to the block) per commit into a zero-filled file. Ratio = journal median / raw median (w2: \
         {w2_floor}). W = journal writes in flight at most. cs = context switches of the \
         run's whole process (each run is a `keel bench commit` process of its own).\n\n",
        a.rounds, a.count, a.duration
    );
    out += &t.render();
    out += &invocations(runs.iter().filter(|r| r.round == 0).map(|r| {
        let name = r.result["info"]["engine"].as_str().unwrap_or("?");
        (r.engine, name, &r.args[..])
    }));
    out += &report::legend::legend(
        &[
            super::store::ENGINE_JOURNAL,
            super::store::ENGINE_RAW,
            super::store::WORKLOADS,
            (
                "T, R",
                "threads committing at once, and the value's bytes per commit",
            ),
            (
                "W",
                "the journal's batch writes in flight at most (`--writes-in-flight`), each \
                 acknowledged only when it and every earlier one are durable",
            ),
            (
                "batch start",
                "where a batch starts when the previous one ended inside a block: rewrite (that \
                 block again), fresh (the next block), auto (fresh after a one-block batch, \
                 else rewrite)",
            ),
            (
                "commits/s, journal/raw",
                "medians over the rounds, and the journal's median over the raw floor's",
            ),
            (
                "p50, p99 µs",
                "one commit's latency (from append to durable) in the journal's median run",
            ),
            (
                "cs/commit, CPU µs/commit",
                "context switches and CPU time of the whole process per commit",
            ),
            (
                "records/write",
                "journal records per device write: how many commits group commit gathered",
            ),
        ],
        "docs/bench-commit.md (`keel bench journal --vs-raw`); the journal: docs/journal.md",
    );
    out
}

/// The exact `keel bench commit` invocation of the first run of each
/// engine among `runs` (engine, its name, the run's arguments), a line
/// each, so that any row of a report can be rerun by hand (the other rows
/// differ in their workload, size and thread flags).
pub(super) fn invocations<'a>(
    runs: impl Iterator<Item = (Engine, &'a str, &'a [String])>,
) -> String {
    let mut out = String::new();
    let mut shown: Vec<Engine> = Vec::new();
    for (engine, name, args) in runs {
        if !shown.contains(&engine) {
            shown.push(engine);
            out += &format!("\nA {name} run: `keel {}`", args.join(" "));
        }
    }
    if !shown.is_empty() {
        out += "\n";
    }
    out
}
