//! `keel bench store`: the store against its references in the same run,
//! interleaved, and whether it meets its targets.
//!
//! Each round runs, with the store's default options: w3 (transactions of
//! B random puts) on the raw floor, the journal and the store; w1 (serial
//! 16 KiB commits) on the journal and the store; w2 (T threads of R-byte
//! commits) on the journal and the store; and with `--r1`, r1 (point gets
//! of N loaded keys) on the store at one and two threads. Odd rounds run
//! the list backwards. The table gives medians over the rounds, the ratios
//! of the medians, and each target: w3 ≥ 0.8× the raw floor and ≥ 0.85×
//! the journal, w1 ≥ 0.9× the journal, w2 ≥ 100,000 commits/s. With
//! `--noise`, each round also runs the journal a second time beside the
//! store's w3 and w1 runs, and the report gives the journal against
//! itself: what the machine's noise alone does to a ratio.
//!
//! Every run is a `keel bench commit` process of its own, with the
//! protocol's flags (see `bench journal`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use serde_json::json;

use keel::db::BackgroundCpus;

use super::commit::{with_dir, BatchStartArg, Engine, Spec, Values, Workload};
use super::journal::{invocations, run_child};
use super::report::{self, median, number, progress, Align, Machine, Table};

/// The store's targets: w3 against raw and against the journal, w1
/// against the journal, w2 in commits/s.
const W3_VS_RAW: f64 = 0.8;
const W3_VS_JOURNAL: f64 = 0.85;
const W1_VS_JOURNAL: f64 = 0.9;
const W2_COMMITS_PER_S: f64 = 100_000.0;

#[derive(Args, Debug, Clone)]
pub struct StoreArgs {
    /// Rounds (each run once per round; medians are taken).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=15))]
    pub rounds: u32,
    /// w3: transactions per run.
    #[arg(long, default_value_t = 10_000)]
    pub w3_count: u64,
    /// w3: puts per transaction.
    #[arg(long, default_value_t = 100)]
    pub w3_batch: usize,
    /// w1: commits per run (16 KiB each).
    #[arg(long, default_value_t = 4096)]
    pub w1_count: u64,
    /// w2: committing threads.
    #[arg(long, default_value_t = 64)]
    pub w2_threads: usize,
    /// w2: seconds per run.
    #[arg(long, default_value_t = 3.0)]
    pub w2_duration: f64,
    /// Also run r1 (point gets, each in its own read transaction) at one
    /// and two threads; reported, no target.
    #[arg(long)]
    pub r1: bool,
    /// r1: keys loaded (untimed, in transactions of 1,000 puts).
    #[arg(long, default_value_t = 1_000_000)]
    pub r1_keys: u64,
    /// Also run the journal a second time in each round, beside the
    /// store's w3 and w1 runs, and report the journal against itself (the
    /// second run's median over the first's): the ratio the machine's
    /// noise alone gives, to judge a missed target by. The targets use
    /// the first runs only.
    #[arg(long)]
    pub noise: bool,
    /// A short run (1 round; w3 500 transactions, w1 256 commits, w2 16
    /// threads for 0.5 s, r1 20,000 keys for 0.3 s): checks that it runs,
    /// not the speed.
    #[arg(long)]
    pub quick: bool,
    /// Directory for the files (created if missing; default: a fresh
    /// `keel-bench-store-<pid>` here). Files are removed afterwards.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print one JSON object on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// One configuration of a round.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Config {
    workload: Workload,
    threads: usize,
    engine: Engine,
    /// A second run of `engine` in the round (`--noise`): compared with
    /// the first, never used as a reference.
    again: bool,
}

struct Run {
    config: Config,
    round: u32,
    args: Vec<String>,
    result: serde_json::Value,
}

impl Run {
    fn rate(&self) -> f64 {
        self.result["commits_per_s"].as_f64().unwrap_or(f64::NAN)
    }
}

pub fn run(mut a: StoreArgs) -> anyhow::Result<ExitCode> {
    if a.quick {
        a.rounds = 1;
        a.w3_count = 500;
        a.w1_count = 256;
        a.w2_threads = 16;
        a.w2_duration = 0.5;
        a.r1_keys = 20_000;
    }
    if a.w2_threads == 0 || a.w2_threads > 4096 {
        anyhow::bail!("--w2-threads must be between 1 and 4096");
    }
    if a.w3_count == 0 || a.w1_count == 0 || a.r1_keys == 0 || a.w3_batch == 0 {
        anyhow::bail!("--w3-count, --w3-batch, --w1-count and --r1-keys must be at least 1");
    }
    if !a.w2_duration.is_finite() || a.w2_duration <= 0.0 {
        anyhow::bail!("--w2-duration must be a number of seconds > 0");
    }
    let dir = a.dir.clone();
    with_dir(dir.as_deref(), "keel-bench-store", |d| run_in(&a, d))
}

fn spec(a: &StoreArgs, c: Config) -> Spec {
    let (size, count, duration, batch) = match c.workload {
        Workload::W1 => (16384, a.w1_count, 0.0, 1),
        Workload::W2 => (128, 0, a.w2_duration, 1),
        Workload::W3 => (100, a.w3_count, 0.0, a.w3_batch),
        Workload::R1 => (100, a.r1_keys, if a.quick { 0.3 } else { 3.0 }, 1000),
    };
    Spec {
        workload: c.workload,
        threads: c.threads,
        size,
        count,
        duration,
        batch,
        engine: c.engine,
        method: None,
        segment_size: 64 << 20,
        lz4: None,
        values: Values::Random,
        preallocate: None,
        writes_in_flight: 1,
        batch_start: BatchStartArg::Auto,
        start: false,
        background_cpus: BackgroundCpus::Any,
        store: Default::default(),
    }
}

fn round_list(a: &StoreArgs) -> Vec<Config> {
    let c = |workload, threads, engine| Config {
        workload,
        threads,
        engine,
        again: false,
    };
    // The second journal run comes after the store's, so that the store
    // sits between the two in every round, either way round.
    let again = |workload| Config {
        again: true,
        ..c(workload, 1, Engine::Journal)
    };
    let mut list = vec![
        c(Workload::W3, 1, Engine::Raw),
        c(Workload::W3, 1, Engine::Journal),
        c(Workload::W3, 1, Engine::Store),
    ];
    if a.noise {
        list.push(again(Workload::W3));
    }
    list.extend([
        c(Workload::W1, 1, Engine::Journal),
        c(Workload::W1, 1, Engine::Store),
    ]);
    if a.noise {
        list.push(again(Workload::W1));
    }
    list.extend([
        c(Workload::W2, a.w2_threads, Engine::Journal),
        c(Workload::W2, a.w2_threads, Engine::Store),
    ]);
    if a.r1 {
        list.push(c(Workload::R1, 1, Engine::Store));
        list.push(c(Workload::R1, 2, Engine::Store));
    }
    list
}

/// The engine's name, and "(again)" after a second run's.
fn config_name(c: Config) -> String {
    if c.again {
        format!("{} (again)", engine_name(c.engine))
    } else {
        engine_name(c.engine).into()
    }
}

fn engine_name(e: Engine) -> &'static str {
    match e {
        Engine::Store => "store",
        Engine::Journal => "journal",
        Engine::Raw => "raw",
    }
}

fn run_in(a: &StoreArgs, dir: &Path) -> anyhow::Result<ExitCode> {
    let list = round_list(a);
    let machine = Machine::for_path(dir);
    let command: Vec<String> = std::env::args().collect();
    eprintln!("{}", command.join(" "));
    eprintln!("machine: {}", machine.describe());
    let bar = progress::bar(
        list.len() as u64 * u64::from(a.rounds),
        "bench store",
        false,
    );
    let mut runs: Vec<Run> = Vec::new();
    for round in 0..a.rounds {
        let mut list = list.clone();
        if round % 2 == 1 {
            list.reverse();
        }
        for config in list {
            let label = format!(
                "round {} {:>7} {} T={}",
                round + 1,
                config_name(config),
                config.workload.name(),
                config.threads
            );
            bar.set_message(label.clone());
            let (args, result) = run_child(&spec(a, config), dir)?;
            let run = Run {
                config,
                round,
                args,
                result,
            };
            if bar.is_hidden() {
                eprintln!("{label} {:>9.0}/s", run.rate());
            } else {
                bar.inc(1);
            }
            runs.push(run);
        }
    }
    bar.finish_and_clear();
    let rows = summarize(a, &runs);
    if a.json {
        let out = json!({
            "command": command.join(" "),
            "machine": machine.describe(),
            "rounds": a.rounds,
            "rows": rows,
            "runs": runs.iter().map(|r| json!({
                "workload": r.config.workload.name(),
                "threads": r.config.threads,
                "engine": engine_name(r.config.engine),
                "again": r.config.again,
                "round": r.round + 1,
                "command": format!("keel {}", r.args.join(" ")),
                "result": r.result,
            })).collect::<Vec<_>>(),
        });
        outln!("{out}")?;
    } else {
        out!("{}", render(a, &rows, &runs, &command, &machine))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The rates of one configuration's runs (the first of each round), and
/// their median.
fn rates(runs: &[Run], workload: Workload, threads: usize, engine: Engine) -> (Vec<f64>, f64) {
    rates_of(runs, workload, threads, engine, false)
}

/// The rates of one configuration's first (`again` false) or second runs,
/// in round order, and their median.
fn rates_of(
    runs: &[Run],
    workload: Workload,
    threads: usize,
    engine: Engine,
    again: bool,
) -> (Vec<f64>, f64) {
    let v: Vec<f64> = runs
        .iter()
        .filter(|r| {
            r.config.workload == workload
                && r.config.threads == threads
                && r.config.engine == engine
                && r.config.again == again
        })
        .map(Run::rate)
        .collect();
    let m = median(&v).unwrap_or(f64::NAN);
    (v, m)
}

/// The store's run at the median rate (the lower middle one for an even
/// count): its latencies and costs describe the row.
fn median_run(runs: &[Run], workload: Workload, threads: usize) -> serde_json::Value {
    let mut store: Vec<&Run> = runs
        .iter()
        .filter(|r| {
            r.config.workload == workload
                && r.config.threads == threads
                && r.config.engine == Engine::Store
        })
        .collect();
    store.sort_by(|x, y| x.rate().total_cmp(&y.rate()));
    store
        .get(store.len().saturating_sub(1) / 2)
        .map_or(serde_json::Value::Null, |r| r.result.clone())
}

fn ratio(a: f64, b: f64) -> f64 {
    (a / b * 1000.0).round() / 1000.0
}

/// One row per workload, as JSON: the medians, the ratios, each target and
/// whether it is met.
fn summarize(a: &StoreArgs, runs: &[Run]) -> Vec<serde_json::Value> {
    let (_, w2) = rates(runs, Workload::W2, a.w2_threads, Engine::Store);
    let mut rows = vec![
        summary_row(
            runs,
            Workload::W3,
            1,
            &[Engine::Raw, Engine::Journal],
            vec![
                ratio_target(runs, Workload::W3, Engine::Raw, W3_VS_RAW),
                ratio_target(runs, Workload::W3, Engine::Journal, W3_VS_JOURNAL),
            ],
        ),
        summary_row(
            runs,
            Workload::W1,
            1,
            &[Engine::Journal],
            vec![ratio_target(
                runs,
                Workload::W1,
                Engine::Journal,
                W1_VS_JOURNAL,
            )],
        ),
        summary_row(
            runs,
            Workload::W2,
            a.w2_threads,
            &[Engine::Journal],
            // The target is for T = 64.
            if a.w2_threads == 64 {
                vec![json!({
                    "what": format!("store ≥ {W2_COMMITS_PER_S} commits/s"),
                    "value": w2.round(),
                    "met": w2 >= W2_COMMITS_PER_S,
                })]
            } else {
                Vec::new()
            },
        ),
    ];
    if a.r1 {
        rows.push(summary_row(runs, Workload::R1, 1, &[], Vec::new()));
        rows.push(summary_row(runs, Workload::R1, 2, &[], Vec::new()));
    }
    rows
}

/// One workload at one thread count: the store's rates and median, each
/// reference engine's and the store's ratio to it, the `targets`, and the
/// details of the store's median run.
fn summary_row(
    runs: &[Run],
    workload: Workload,
    threads: usize,
    refs: &[Engine],
    targets: Vec<serde_json::Value>,
) -> serde_json::Value {
    let (store, store_median) = rates(runs, workload, threads, Engine::Store);
    let mid = median_run(runs, workload, threads);
    let mut refs_json = serde_json::Map::new();
    for &e in refs {
        let (v, m) = rates(runs, workload, threads, e);
        refs_json.insert(
            engine_name(e).into(),
            json!({
                "per_s": v.iter().map(|x| x.round()).collect::<Vec<_>>(),
                "median": m.round(),
                "store_ratio": ratio(store_median, m),
            }),
        );
    }
    let info = &mid["info"];
    let (again, again_median) = rates_of(runs, workload, threads, Engine::Journal, true);
    let noise = if again.is_empty() {
        serde_json::Value::Null
    } else {
        let (_, journal) = rates(runs, workload, threads, Engine::Journal);
        json!({
            "engine": "journal",
            "per_s": again.iter().map(|x| x.round()).collect::<Vec<_>>(),
            "median": again_median.round(),
            "ratio": ratio(again_median, journal),
        })
    };
    json!({
        "workload": workload.name(),
        "threads": threads,
        "store_per_s": store.iter().map(|x| x.round()).collect::<Vec<_>>(),
        "store_median": store_median.round(),
        "references": refs_json,
        "noise": noise,
        "targets": targets,
        "p50_us": mid["p50_us"].clone(),
        "p99_us": mid["p99_us"].clone(),
        "serial_us_per_commit": info["serial_us_per_commit"].clone(),
        "cpu_us_per_commit": info["cpu_us_per_commit"].clone(),
        "steal_ms": info["steal_ms"].clone(),
        "context_switches_per_commit": info["context_switches_per_commit"].clone(),
        "checkpoints": info["checkpoints"].clone(),
        "overlap": info["overlap"].clone(),
        "runs": info["runs"].clone(),
    })
}

/// The target "store / `engine` ≥ `at_least`" on `workload` at one
/// thread, from the medians: its value and whether it is met.
fn ratio_target(
    runs: &[Run],
    workload: Workload,
    engine: Engine,
    at_least: f64,
) -> serde_json::Value {
    let (_, s) = rates(runs, workload, 1, Engine::Store);
    let (_, r) = rates(runs, workload, 1, engine);
    let got = ratio(s, r);
    json!({
        "what": format!("store / {} ≥ {at_least}", engine_name(engine)),
        "value": got,
        "met": got >= at_least,
    })
}

/// For each row whose median run had lone large commits (w3): how long
/// their two legs took, the journal's write and the memtable apply beside
/// it, and how many of each took over 1 ms.
fn legs_lines(rows: &[serde_json::Value]) -> String {
    let mut out = String::new();
    for r in rows {
        let runs = &r["runs"];
        if runs["commits"].as_u64().unwrap_or(0) > 0 {
            out += &format!(
                "\n{} T={}, the store's median run: {} commits returned once durable, published \
                 as runs that readers search, and were inserted into the memtable afterwards \
                 ({} µs per commit): {} by the helper, {} by committers on their commit's path \
                 (too many were waiting).\n",
                r["workload"].as_str().unwrap_or("?"),
                r["threads"],
                runs["commits"],
                runs["apply_us_per_commit"],
                runs["commits"]
                    .as_u64()
                    .unwrap_or(0)
                    .saturating_sub(runs["inserted_by_committers"].as_u64().unwrap_or(0)),
                runs["inserted_by_committers"],
            );
        }
        let o = &r["overlap"];
        if o["commits"].as_u64().unwrap_or(0) == 0 {
            continue;
        }
        out += &format!(
            "\n{} T={}, the store's median run: {} commits wrote their record while the helper \
             applied them; per commit, the write {} µs and the apply {} µs; {} writes and {} \
             applies took over 1 ms; {} applies ran after the write (the helper not yet awake).\n",
            r["workload"].as_str().unwrap_or("?"),
            r["threads"],
            o["commits"],
            o["write_us_per_commit"],
            o["apply_us_per_commit"],
            o["writes_over_1ms"],
            o["applies_over_1ms"],
            o["applied_after_write"],
        );
    }
    out
}

/// Each round's rates and the store's ratio to each reference in that
/// round: the spread behind the medians (one round of these VMs can be
/// 30 % off another).
fn round_lines(rows: &[serde_json::Value], rounds: u32) -> String {
    if rounds < 2 {
        return String::new();
    }
    let per_s = |v: &serde_json::Value| -> Vec<f64> {
        v.as_array()
            .map(|a| a.iter().filter_map(serde_json::Value::as_f64).collect())
            .unwrap_or_default()
    };
    let mut out = String::from(
        "
By round:
",
    );
    for r in rows {
        let store = per_s(&r["store_per_s"]);
        let mut line = format!(
            "- {} T={}: store {}",
            r["workload"].as_str().unwrap_or("?"),
            r["threads"],
            store
                .iter()
                .map(|x| number(*x, 0))
                .collect::<Vec<_>>()
                .join(", ")
        );
        if let Some(refs) = r["references"].as_object() {
            for (name, v) in refs {
                let ratios: Vec<String> = store
                    .iter()
                    .zip(per_s(&v["per_s"]))
                    .map(|(s, e)| number(s / e, 3))
                    .collect();
                line += &format!("; store/{name} {}", ratios.join(", "));
            }
        }
        out += &line;
        out.push('\n');
    }
    out
}

/// For each row with second journal runs (`--noise`): the journal
/// against itself, from the medians and round by round.
fn noise_lines(rows: &[serde_json::Value]) -> String {
    let per_s = |v: &serde_json::Value| -> Vec<f64> {
        v.as_array()
            .map(|a| a.iter().filter_map(serde_json::Value::as_f64).collect())
            .unwrap_or_default()
    };
    let mut parts = Vec::new();
    for r in rows {
        let noise = &r["noise"];
        let Some(got) = noise["ratio"].as_f64() else {
            continue;
        };
        let by_round: Vec<String> = per_s(&noise["per_s"])
            .iter()
            .zip(per_s(&r["references"]["journal"]["per_s"]))
            .map(|(again, first)| number(again / first, 3))
            .collect();
        parts.push(format!(
            "{} T={} {} (by round {})",
            r["workload"].as_str().unwrap_or("?"),
            r["threads"],
            number(got, 3),
            by_round.join(", ")
        ));
    }
    if parts.is_empty() {
        return String::new();
    }
    format!(
        "\nThe journal against itself (a second journal run in each round, its median over the \
         first's): {}. The same engine, so the distance from 1 is the machine's noise alone; a \
         store ratio that misses its target by less is within that noise.\n",
        parts.join("; ")
    )
}

/// The table of results, a row per workload and thread count.
fn results_table(rows: &[serde_json::Value]) -> Table {
    let mut t = Table::new(&[
        ("workload", Align::Left),
        ("T", Align::Right),
        ("store /s", Align::Right),
        ("raw /s", Align::Right),
        ("journal /s", Align::Right),
        ("store/raw", Align::Right),
        ("store/journal", Align::Right),
        ("target", Align::Left),
        ("met", Align::Left),
        ("p50 µs", Align::Right),
        ("p99 µs", Align::Right),
        ("serial µs", Align::Right),
        ("CPU µs", Align::Right),
        ("steal ms", Align::Right),
    ]);
    let f = |v: &serde_json::Value, d: usize| v.as_f64().map_or("–".into(), |x| number(x, d));
    for r in rows {
        let refs = &r["references"];
        let targets = r["targets"].as_array().cloned().unwrap_or_default();
        let what: Vec<String> = targets
            .iter()
            .map(|t| t["what"].as_str().unwrap_or("").to_string())
            .collect();
        let met: Vec<&str> = targets
            .iter()
            .map(|t| {
                if t["met"].as_bool() == Some(true) {
                    "yes"
                } else {
                    "no"
                }
            })
            .collect();
        let or_dash = |v: String| if v.is_empty() { "–".into() } else { v };
        t.push(vec![
            r["workload"].as_str().unwrap_or("").into(),
            r["threads"].to_string(),
            f(&r["store_median"], 0),
            f(&refs["raw"]["median"], 0),
            f(&refs["journal"]["median"], 0),
            f(&refs["raw"]["store_ratio"], 3),
            f(&refs["journal"]["store_ratio"], 3),
            or_dash(what.join("; ")),
            or_dash(met.join(", ")),
            f(&r["p50_us"], 0),
            f(&r["p99_us"], 0),
            f(&r["serial_us_per_commit"], 1),
            f(&r["cpu_us_per_commit"], 1),
            f(&r["steal_ms"], 0),
        ]);
    }
    t
}

fn render(
    a: &StoreArgs,
    rows: &[serde_json::Value],
    runs: &[Run],
    command: &[String],
    machine: &Machine,
) -> String {
    let t = results_table(rows);
    let mut out = machine.report_head(command);
    out += &format!(
        "Medians of {} interleaved round(s), the store with its default options. w3 = {} \
         transactions of {} random puts (16-byte keys, 100-byte values); w1 = {} serial commits \
         of 16 KiB; w2 = {} s of T threads committing 128-byte values{}. Rates are transactions \
         (r1: gets) per second; ratios are of the medians. p50, p99, serial (the writer slot's \
         time) and CPU (the whole process's) per commit, and steal (the machine's steal time: the \
         host running something else while a vCPU had work), are those of the store's median \
         run.\n\n",
        a.rounds,
        a.w3_count,
        a.w3_batch,
        a.w1_count,
        a.w2_duration,
        if a.r1 {
            format!("; r1 = point gets of {} loaded keys", a.r1_keys)
        } else {
            String::new()
        }
    );
    out += &t.render();
    out += &round_lines(rows, a.rounds);
    out += &noise_lines(rows);
    out += &legs_lines(rows);
    out += &invocations(
        runs.iter()
            .filter(|r| r.round == 0 && !r.config.again)
            .map(|r| (r.config.engine, engine_name(r.config.engine), &r.args[..])),
    );
    out += &legend(a, rows);
    out
}

/// What the report's words mean, one line each.
fn legend(a: &StoreArgs, rows: &[serde_json::Value]) -> String {
    let mut terms = vec![
        ENGINE_STORE,
        ENGINE_JOURNAL,
        ENGINE_RAW,
        WORKLOADS,
        (
            "T",
            "threads committing at once (r1: reading), each a committer of its own",
        ),
        (
            "/s, store/raw, store/journal",
            "medians over the rounds of commits (r1: gets) per second, and the store's median \
             over the reference's",
        ),
        (
            "target, met",
            "what the store must reach on that row (a ratio to a reference, or a rate), and \
             whether its median does",
        ),
        (
            "p50, p99 µs",
            "one commit's latency (from commit to durable and visible) in the store's median run",
        ),
        (
            "serial µs",
            "the writer slot's time per commit: the store lets one write transaction at a time \
             hold its writer slot (a group's leader commits the queued ones under it), so this \
             part of a commit cannot overlap another's",
        ),
        (
            "CPU µs",
            "the whole process's CPU time per commit: every thread, the store's own included",
        ),
        (
            "steal ms",
            "time the host gave the VM's vCPUs to something else while they had work, during \
             the timed run",
        ),
        (
            "round, interleaved",
            "each round runs every engine once, odd rounds in reverse order, so a slow spell \
             of the machine hits all alike; each run is a `keel bench commit` process",
        ),
    ];
    if rows
        .iter()
        .any(|r| r["runs"]["commits"].as_u64().unwrap_or(0) > 0)
    {
        terms.push((
            "runs, helper",
            "a large commit, once durable, is published as a run (its puts, which readers \
             search in key order above the memtable) and returns; the store's helper thread \
             inserts the run into the memtable afterwards, off the commit's path",
        ));
    }
    if a.noise {
        terms.push((
            "the journal against itself",
            "a second journal run per round: its distance from 1 is the machine's noise",
        ));
    }
    report::legend::legend(
        &terms,
        "docs/bench-commit.md (`keel bench store`); the store itself: docs/store.md",
    )
}

/// The engines `keel bench store` and `keel bench journal` compare.
pub(super) const ENGINE_STORE: report::legend::Term = (
    "store",
    "Keel's store with its default options: each transaction a write transaction into one \
     table, its record made durable in the journal, then visible; checkpoints into the data \
     file in the background",
);
pub(super) const ENGINE_JOURNAL: report::legend::Term = (
    "journal",
    "Keel's write-ahead journal alone: each transaction one record, committers grouped into \
     shared writes (group commit); no table, memtable or checkpoint",
);
pub(super) const ENGINE_RAW: report::legend::Term = (
    "raw (the raw floor)",
    "the same bytes as bare durable writes and nothing else — w3: one pwrite of the \
     transaction's keys and values, then fdatasync; w1, w2: one O_DIRECT|O_DSYNC pwrite of the \
     key and value, padded to the block — the best any engine could do on this disk",
);
pub(super) const WORKLOADS: report::legend::Term = (
    "w1, w2, w3, r1",
    "the protocol's workloads (docs/BENCH-PROTOCOL.md): w1 serial commits of one 16 KiB value; \
     w2 T threads committing small values for a while; w3 transactions of 100 random puts \
     (16-byte keys, 100-byte values); r1 point gets, each in its own read transaction",
);

#[cfg(test)]
mod tests {
    use super::*;

    /// Each round's rates, and the store's ratio to each reference round
    /// by round (not to the references' medians).
    #[test]
    fn round_lines_pair_rounds() {
        let rows = [json!({
            "workload": "w3",
            "threads": 1,
            "store_per_s": [800.0, 900.0, 1000.0],
            "references": {"journal": {"per_s": [1000.0, 900.0, 800.0]}},
        })];
        let text = round_lines(&rows, 3);
        assert!(
            text.contains("- w3 T=1: store 800, 900, 1,000; store/journal 0.800, 1.000, 1.250"),
            "{text}"
        );
        assert_eq!(round_lines(&rows, 1), "");
    }

    /// The journal against itself: the medians' ratio, and each round's
    /// second run over its first; nothing without second runs.
    #[test]
    fn noise_lines_pair_the_journal_with_itself() {
        let rows = [
            json!({
                "workload": "w3",
                "threads": 1,
                "references": {"journal": {"per_s": [1000.0, 800.0, 900.0]}},
                "noise": {"per_s": [900.0, 880.0, 1000.0], "ratio": 1.0},
            }),
            json!({"workload": "w2", "threads": 64, "noise": null}),
        ];
        let text = noise_lines(&rows);
        assert!(
            text.contains("w3 T=1 1.000 (by round 0.900, 1.100, 1.111)"),
            "{text}"
        );
        assert!(!text.contains("w2"), "{text}");
        assert_eq!(noise_lines(&rows[1..]), "");
    }
}
