//! `keel bench commit`: the commit-benchmark protocol (`docs/BENCH-PROTOCOL.md`)
//! on Keel's store (the default, [`store`]), on its journal alone, or on the
//! raw floor both are measured against.
//!
//! One run = open (untimed: segments created and zero-filled), a start
//! barrier, T threads committing, the last thread's end. The run prints one
//! JSON line on stdout, a summary on stderr.
//!
//! **The store** (`--engine store`): a transaction is a write transaction
//! putting the same keys and values into one table (see [`store`]); r1
//! runs there only.
//!
//! **Journal records** (`--engine journal`). A transaction is one journal record: `u32` number of puts,
//! then each put as `u16` key length, `u32` value length, key, value (all
//! little-endian). w1/w2: one put with a 16-byte key (thread id, sequence
//! number, big-endian) and a `--size`-byte value; w3: `--batch` puts of a
//! random 16-byte key and a `--size`-byte value. Values are slices of an
//! incompressible random pool filled before timing.
//!
//! **The raw floor** (`--engine raw`): w1/w2 write the value's bytes
//! rounded up to the block size with one `pwrite` on an `O_DIRECT|O_DSYNC`
//! descriptor per commit, into a zero-filled file, each of the T threads in
//! its own region (the protocol's reference floor is one thread; `bench
//! journal --vs-raw` runs that one unless told otherwise); w3 writes the
//! transaction's keys and values without framing (`batch × (16 + size)`
//! bytes, the protocol's 11.6 KB) with a buffered `pwrite` and one
//! `fdatasync`, appending within a zero-filled file.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use keel::db::BackgroundCpus;
use keel::io::{AlignedBuf, OpenMode, OpenOptions, RealVfs, SyncKind, VfsFile, WriteMethod};
use keel::journal::{BatchStart, Journal, JournalOptions, JournalStats};
use rand::Rng;
use serde_json::json;

mod store;

use super::report::{BenchDir, BenchFile, BenchTree, LatencyRecorder, RandomPool};
use crate::util::{ensure_dir, format_size, format_size_approx, Size};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// N serial commits of one 16 KiB record.
    W1,
    /// T threads, one R-byte record per commit, for a duration.
    W2,
    /// N transactions of B puts (random 16-byte key + SIZE-byte value).
    W3,
    /// Point reads of N loaded keys, each get in its own read transaction
    /// (the store only).
    R1,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::W1 => "w1",
            Workload::W2 => "w2",
            Workload::W3 => "w3",
            Workload::R1 => "r1",
        }
    }
}

/// What `keel bench commit` measures; the default first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Engine {
    /// The default: Keel's store, what an application embeds — each
    /// transaction a write transaction into one table, durable in the
    /// journal, then visible to readers; checkpoints into the data file in
    /// the background.
    Store,
    /// Keel's write-ahead journal alone: each transaction one record
    /// (`u32` puts, then each key and value), committers grouped into
    /// shared writes (group commit); no table, memtable or checkpoint.
    Journal,
    /// The raw floor, what the other two are measured against: the same
    /// bytes as bare durable writes and nothing else (w1, w2: one
    /// O_DIRECT|O_DSYNC pwrite of key and value padded to the block; w3:
    /// one pwrite of the keys and values, then fdatasync).
    Raw,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Values {
    /// Incompressible random bytes (the protocol's values).
    Random,
    /// Compressible text (to measure LZ4).
    Text,
}

#[derive(Args, Debug, Clone)]
#[command(after_help = "The protocol's invocation (all flags, this order):\n  \
    keel bench commit --workload w1|w2|w3|r1 --threads T --size BYTES --count N --duration SECS \
    --dir DIR --batch B\n\
    Prints one JSON line on stdout: commits_per_s, p50_us, p99_us, p999_us, max_us, total_ms, \
    ms_per_commit, commits, ops, ops_per_s and info (engine, method, what was prepared before \
    timing, context switches and CPU time of the process during the run). A nonzero exit status \
    and an `error` field mark a failed run.\n\n\
    Terms (the JSON and the summary on stderr):\n  \
    commits, ops: transactions made, and the puts (r1: gets) in them\n  \
    p50_us … max_us: one commit's latency, from its start to durable (and, for the store, \
    visible)\n  \
    context switches, CPU per commit: the whole process's, all threads, over the commits\n  \
    commits_on_interrupt_cpus: the share of commits that returned on a CPU taking the disk's \
    interrupts; a committer woken on another CPU pays a cross-CPU wake-up per write\n\
    More: docs/bench-commit.md, docs/BENCH-PROTOCOL.md")]
pub struct CommitArgs {
    /// Workload: w1 (serial 16 KiB commits), w2 (T threads, R-byte
    /// commits), w3 (transactions of B puts), r1 (point reads of N loaded
    /// keys; the store only).
    #[arg(long, value_enum)]
    pub workload: Workload,
    /// Committing threads (default 1).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Value bytes per put, or K/M/G (default: w1 16K, w2 128, w3 100).
    #[arg(long)]
    pub size: Option<Size>,
    /// Commits in all (0: run for --duration). Default: w1 4096, w3 10000.
    /// r1: keys loaded (default 1000000).
    #[arg(long)]
    pub count: Option<u64>,
    /// Seconds to run (0: do --count commits). Default: w2 3. r1: seconds
    /// of reads (default 3).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Directory for the files (created if missing; default: a fresh
    /// `keel-bench-commit-<pid>` here). Files are removed afterwards.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Puts per transaction (w3, and r1's load; default w3 100, r1 1000,
    /// else 1).
    #[arg(long)]
    pub batch: Option<usize>,
    /// What to measure: `store` (the default), `journal` (the journal
    /// alone) or `raw` (the raw floor); `--help` says what each is.
    #[arg(long, value_enum, default_value_t = Engine::Store)]
    pub engine: Engine,
    #[command(flatten)]
    pub journal: JournalFlags,
    /// Batch writes the journal may have in flight at once (1 to 4).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4))]
    pub writes_in_flight: u32,
    /// Where a batch starts when the previous one ended inside a block
    /// (default: the journal's default, auto, with one write in flight;
    /// fresh with more, which they need).
    #[arg(long, value_enum)]
    pub batch_start: Option<BatchStartArg>,
    /// Journal engine: commit as the store does — submit the record, start
    /// its write without blocking (`CommitHandle::start`, the journal's
    /// flusher thread writes it), then wait — instead of `append`.
    #[arg(long)]
    pub start: bool,
    /// Segments to prepare before timing, in bytes of records (default:
    /// what a --count run needs; for a --duration run, an estimate from
    /// the threads and record size, at most 640M).
    #[arg(long)]
    pub preallocate: Option<Size>,
    /// Store engine: the CPUs its helper and checkpointer threads may run
    /// on — `any` (the store's default), `away` (off the CPUs taking the
    /// disk's interrupts), or a CPU list such as `0` or `0,2-3`.
    #[arg(long, value_parser = parse_background_cpus, default_value = "any")]
    pub background_cpus: BackgroundCpus,
    #[command(flatten)]
    pub store: StoreFlags,
}

/// The store engine's memory budgets (`keel::db::Options`) when not the
/// store's defaults, and readers beside the committers.
#[derive(Args, Debug, Clone, Default)]
pub struct StoreFlags {
    /// Store engine: the page cache's budget of decoded pages
    /// (`Options::cache_bytes`; bytes or K/M/G; default: the store's).
    #[arg(long)]
    pub cache_size: Option<Size>,
    /// Store engine: memtable bytes that start a checkpoint
    /// (`Options::checkpoint_dirty_bytes`; default: the store's).
    #[arg(long)]
    pub checkpoint_dirty: Option<Size>,
    /// Store engine: memtable bytes at which writers stop until a
    /// checkpoint ends (`Options::backpressure_dirty_bytes`; default: the
    /// store's).
    #[arg(long)]
    pub backpressure_dirty: Option<Size>,
    /// Store engine, w1/w2/w3: this many threads do point gets of random
    /// keys (most absent: each descends to a leaf) while the committers
    /// run, each in a read transaction of its own; `info.reader_gets_per_s`
    /// reports their rate (reads keep working during checkpoints).
    #[arg(long, default_value_t = 0)]
    pub readers: usize,
}

impl StoreFlags {
    /// The `keel bench commit` flags that set these.
    fn args(&self) -> Vec<String> {
        let mut args = Vec::new();
        for (flag, v) in [
            ("--cache-size", self.cache_size),
            ("--checkpoint-dirty", self.checkpoint_dirty),
            ("--backpressure-dirty", self.backpressure_dirty),
        ] {
            if let Some(v) = v {
                args.extend([flag.to_string(), v.bytes().to_string()]);
            }
        }
        if self.readers > 0 {
            args.extend(["--readers".to_string(), self.readers.to_string()]);
        }
        args
    }
}

/// `--background-cpus`: `any`, `away`, or a kernel CPU list.
fn parse_background_cpus(s: &str) -> Result<BackgroundCpus, String> {
    match s {
        "any" => Ok(BackgroundCpus::Any),
        "away" => Ok(BackgroundCpus::AwayFromDiskInterrupts),
        list => match keel::io::parse_cpu_list(list) {
            Some(cpus) if !cpus.is_empty() => Ok(BackgroundCpus::Only(cpus)),
            _ => Err(format!(
                "{s:?} is not `any`, `away` or a list of CPUs such as 0,2-3 (each below {})",
                keel::io::MAX_CPU
            )),
        },
    }
}

/// `--batch-start`: where a batch starts when the previous one ended
/// inside a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BatchStartArg {
    /// Rewrite the partly filled block (`BatchStart::RewriteTail`).
    Rewrite,
    /// Fresh block after a one-block batch, else rewrite
    /// (`BatchStart::Auto`, the journal's default).
    Auto,
    /// Start on a fresh block (`BatchStart::FreshBlock`).
    Fresh,
}

impl BatchStartArg {
    pub fn to_journal(self) -> BatchStart {
        match self {
            BatchStartArg::Rewrite => BatchStart::RewriteTail,
            BatchStartArg::Auto => BatchStart::Auto,
            BatchStartArg::Fresh => BatchStart::FreshBlock,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            BatchStartArg::Rewrite => "rewrite",
            BatchStartArg::Auto => "auto",
            BatchStartArg::Fresh => "fresh",
        }
    }
}

/// The journal's settings and the values it is fed, shared by `bench
/// commit` and `bench journal`.
#[derive(Args, Debug, Clone)]
pub struct JournalFlags {
    /// The journal's write method (default: odirect_dsync, or fdatasync
    /// where direct I/O is refused).
    #[arg(long)]
    pub method: Option<WriteMethod>,
    /// Journal segment size (bytes or K/M/G).
    #[arg(long, default_value = "64M")]
    pub segment_size: Size,
    /// Compress records of at least this many bytes with LZ4 (off by
    /// default).
    #[arg(long)]
    pub lz4: Option<Size>,
    /// Value bytes: random (incompressible, the protocol's) or text.
    #[arg(long, value_enum, default_value_t = Values::Random)]
    pub values: Values,
}

/// A fully resolved run.
#[derive(Debug, Clone)]
pub struct Spec {
    pub workload: Workload,
    pub threads: usize,
    pub size: usize,
    pub count: u64,
    pub duration: f64,
    pub batch: usize,
    pub engine: Engine,
    pub method: Option<WriteMethod>,
    pub segment_size: u64,
    pub lz4: Option<usize>,
    pub values: Values,
    pub preallocate: Option<u64>,
    pub writes_in_flight: usize,
    pub batch_start: BatchStartArg,
    pub start: bool,
    /// The store engine's `Options::background_cpus`.
    pub background_cpus: BackgroundCpus,
    /// The store engine's budgets and readers.
    pub store: StoreFlags,
}

impl Spec {
    pub fn from_args(a: &CommitArgs) -> anyhow::Result<Spec> {
        let w = a.workload;
        match (w, a.engine) {
            (Workload::R1, Engine::Journal) => bail!("r1 needs a store; the journal has no reads"),
            (Workload::R1, Engine::Raw) => bail!("r1 needs a store; the raw floor has no reads"),
            _ => {}
        }
        let spec = Spec {
            workload: w,
            threads: a.threads.unwrap_or(1),
            size: a.size.map_or(
                match w {
                    Workload::W1 => 16384,
                    Workload::W2 => 128,
                    _ => 100,
                },
                |s| s.bytes() as usize,
            ),
            count: a.count.unwrap_or(match w {
                Workload::W1 => 4096,
                Workload::W3 => 10_000,
                Workload::R1 => 1_000_000,
                Workload::W2 => 0,
            }),
            duration: a.duration.unwrap_or(match w {
                Workload::W2 | Workload::R1 => 3.0,
                _ => 0.0,
            }),
            batch: a.batch.unwrap_or(match w {
                Workload::W3 => 100,
                Workload::R1 => 1000,
                _ => 1,
            }),
            engine: a.engine,
            method: a.journal.method,
            segment_size: a.journal.segment_size.bytes(),
            lz4: a.journal.lz4.map(|s| s.bytes() as usize),
            values: a.journal.values,
            preallocate: a.preallocate.map(Size::bytes),
            writes_in_flight: a.writes_in_flight as usize,
            batch_start: match a.batch_start {
                Some(b) => b,
                None if a.writes_in_flight > 1 => BatchStartArg::Fresh,
                None => BatchStartArg::Auto,
            },
            start: a.start,
            background_cpus: a.background_cpus.clone(),
            store: a.store.clone(),
        };
        spec.validate()?;
        Ok(spec)
    }

    fn validate(&self) -> anyhow::Result<()> {
        if self.threads == 0 || self.threads > 4096 {
            bail!("--threads must be between 1 and 4096");
        }
        if self.batch == 0 {
            bail!("--batch must be at least 1");
        }
        if self.size > 64 << 20 {
            bail!("--size above 64M is not supported");
        }
        if !self.duration.is_finite() || self.duration < 0.0 {
            bail!("--duration must be a number of seconds ≥ 0");
        }
        if self.workload == Workload::R1 {
            if self.count == 0 || self.duration == 0.0 {
                bail!("r1 needs both --count (keys to load) and --duration (seconds of reads)");
            }
        } else if (self.count == 0) == (self.duration == 0.0) {
            bail!("give exactly one of --count N or --duration SECS (the other 0)");
        }
        let store_flags = self.store.args();
        if self.engine != Engine::Store && !store_flags.is_empty() {
            bail!("{} applies to the store engine only", store_flags[0]);
        }
        if self.workload == Workload::R1 && self.store.readers > 0 {
            bail!("--readers applies to w1, w2 and w3 (r1's threads are all readers)");
        }
        if matches!(self.workload, Workload::W1 | Workload::W2) && self.batch != 1 {
            bail!("--batch applies to w3 and r1 only (w1 and w2 commit one put per transaction)");
        }
        Ok(())
    }

    /// The `keel bench commit` arguments that run this spec in `dir`: the
    /// protocol's flags in the protocol's order, then Keel's own.
    pub fn command_args(&self, dir: &Path) -> Vec<String> {
        let name = |v: Option<clap::builder::PossibleValue>| {
            v.map_or_else(String::new, |p| p.get_name().to_string())
        };
        let mut args: Vec<String> = vec![
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
            "--engine".into(),
            name(self.engine.to_possible_value()),
        ];
        if let Some(m) = self.method {
            args.extend(["--method".into(), m.name().into()]);
        }
        if self.engine == Engine::Journal {
            args.extend(["--segment-size".into(), self.segment_size.to_string()]);
            if let Some(l) = self.lz4 {
                args.extend(["--lz4".into(), l.to_string()]);
            }
            args.extend([
                "--writes-in-flight".into(),
                self.writes_in_flight.to_string(),
                "--batch-start".into(),
                self.batch_start.name().into(),
            ]);
            if self.start {
                args.push("--start".into());
            }
        }
        if self.values != Values::Random {
            args.extend(["--values".into(), name(self.values.to_possible_value())]);
        }
        if let Some(p) = self.preallocate {
            args.extend(["--preallocate".into(), p.to_string()]);
        }
        args.extend(self.store.args());
        args
    }

    /// Bytes of one transaction as committed: the journal's record (see
    /// the module comment), the store's journal record, or the raw floor's
    /// bare keys and values.
    pub fn record_bytes(&self) -> usize {
        match self.engine {
            Engine::Store => store::record_bytes(self.batch, self.size),
            Engine::Journal => 4 + self.batch * (6 + 16 + self.size),
            Engine::Raw => self.batch * (16 + self.size),
        }
    }

    /// The bytes from which each commit's keys and values are taken:
    /// framed as a journal record for the journal engine, bare
    /// `batch × (key, value)` otherwise.
    fn encoded_bytes(&self) -> usize {
        match self.engine {
            Engine::Journal => self.record_bytes(),
            _ => self.batch * (16 + self.size),
        }
    }
}

/// Figures of one run.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub commits: u64,
    pub elapsed: Duration,
    pub latency: LatencyRecorder,
    pub context_switches: u64,
    pub cpu_us: f64,
    /// The machine's steal time during the timed region (see `steal_ms`).
    pub steal_ms: Option<f64>,
    /// Commits that returned on each CPU (index: the CPU's number), as
    /// the committing threads saw it right after each commit; empty for
    /// reads.
    pub committer_cpus: Vec<u64>,
    pub info: serde_json::Value,
}

impl Outcome {
    pub fn commits_per_s(&self) -> f64 {
        self.commits as f64 / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    pub fn cs_per_commit(&self) -> f64 {
        self.context_switches as f64 / self.commits.max(1) as f64
    }

    pub fn cpu_us_per_commit(&self) -> f64 {
        self.cpu_us / self.commits.max(1) as f64
    }

    /// The protocol's JSON object.
    pub fn to_json(&self, spec: &Spec) -> serde_json::Value {
        let total_ms = self.elapsed.as_secs_f64() * 1e3;
        let s = self.latency.summary();
        // r1's batch is its load's: each of its "commits" is one get.
        let ops = match spec.workload {
            Workload::R1 => self.commits,
            _ => self.commits * spec.batch as u64,
        };
        let mut info = self.info.clone();
        info["context_switches"] = json!(self.context_switches);
        info["context_switches_per_commit"] = json!(round(self.cs_per_commit(), 3));
        info["cpu_us"] = json!(round(self.cpu_us, 0));
        info["cpu_us_per_commit"] = json!(round(self.cpu_us_per_commit(), 2));
        info["steal_ms"] = json!(self.steal_ms.map(|ms| round(ms, 0)));
        if !self.committer_cpus.is_empty() {
            let named: serde_json::Map<String, serde_json::Value> = self
                .committer_cpus
                .iter()
                .enumerate()
                .filter(|(_, &n)| n > 0)
                .map(|(cpu, &n)| (cpu.to_string(), json!(n)))
                .collect();
            info["commits_by_cpu"] = serde_json::Value::Object(named);
        }
        json!({
            "commits_per_s": round(self.commits_per_s(), 1),
            "p50_us": round(s.p50_us, 1),
            "p99_us": round(s.p99_us, 1),
            "p999_us": round(s.p999_us, 1),
            "max_us": round(s.max_us, 1),
            "total_ms": round(total_ms, 2),
            "ms_per_commit": round(total_ms / self.commits.max(1) as f64, 4),
            "commits": self.commits,
            "ops": ops,
            "ops_per_s": round(ops as f64 / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE), 1),
            "info": info,
        })
    }
}

/// Add to `out`'s `info` the CPUs that take the interrupts of the disk
/// under `dir`, and the share of commits that returned on one of them
/// (`commits_on_interrupt_cpus`, 0 to 1): a committer woken elsewhere pays
/// a wake-up across CPUs per write, so two runs of one engine can differ
/// by it alone.
fn note_interrupts(out: &mut Outcome, dir: &Path) {
    let irq = keel::io::disk_interrupt_cpus(dir);
    out.info["disk_interrupt_cpus"] = json!(irq);
    let all: u64 = out.committer_cpus.iter().sum();
    if irq.is_empty() || all == 0 {
        return;
    }
    let on: u64 = irq.iter().filter_map(|&c| out.committer_cpus.get(c)).sum();
    out.info["commits_on_interrupt_cpus"] = json!(round(on as f64 / all as f64, 3));
}

pub(super) fn round(x: f64, decimals: i32) -> f64 {
    let p = 10f64.powi(decimals);
    (x * p).round() / p
}

pub fn run(args: CommitArgs) -> anyhow::Result<std::process::ExitCode> {
    let result = Spec::from_args(&args).and_then(|spec| {
        let out = with_dir(args.dir.as_deref(), "keel-bench-commit", |dir| {
            let mut out = run_one(&spec, dir)?;
            note_interrupts(&mut out, dir);
            Ok(out)
        })?;
        Ok((spec, out))
    });
    match result {
        Ok((spec, out)) => {
            let unit = if spec.workload == Workload::R1 {
                "gets"
            } else {
                "commits"
            };
            eprintln!(
                "{} {} T={} size={}: {:.0} {}/s, p50 {:.0} µs, p99 {:.0} µs, {:.2} context \
                 switches and {:.1} µs CPU per {}{}",
                out.info["engine"].as_str().unwrap_or("?"),
                spec.workload.name(),
                spec.threads,
                format_size(spec.size as u64),
                out.commits_per_s(),
                unit,
                out.latency.quantile_us(0.5),
                out.latency.quantile_us(0.99),
                out.cs_per_commit(),
                out.cpu_us_per_commit(),
                if spec.workload == Workload::R1 {
                    "get"
                } else {
                    "commit"
                },
                match out.info["commits_on_interrupt_cpus"].as_f64() {
                    Some(share) => format!(
                        "; {:.0} % returned on the CPU(s) taking the disk's interrupts",
                        share * 100.0
                    ),
                    None => String::new(),
                },
            );
            outln!("{}", out.to_json(&spec))?;
            Ok(std::process::ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            outln!("{}", json!({ "error": format!("{e:#}") }))?;
            Ok(std::process::ExitCode::FAILURE)
        }
    }
}

/// Run `f` in `dir` (created if missing), or in a fresh directory here that
/// is removed afterwards.
pub fn with_dir<T>(
    dir: Option<&Path>,
    prefix: &str,
    f: impl FnOnce(&Path) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    match dir {
        Some(d) => {
            ensure_dir(d)?;
            f(d)
        }
        None => {
            let d = PathBuf::from(format!("{prefix}-{}", std::process::id()));
            let _guard = BenchDir::new(d.clone());
            ensure_dir(&d)?;
            f(&d)
        }
    }
}

/// The machine's steal time so far, in ms (`/proc/stat`: time the
/// hypervisor ran something else while a vCPU of this VM had work), or
/// `None` where it is not reported. A benchmark that keeps both vCPUs busy
/// loses more of it than one that sleeps on the disk, and it shows as
/// commits stalled for milliseconds: a run's figure says how much the host
/// took meanwhile (docs/bench-commit.md).
pub(super) fn steal_ms() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu = stat.lines().find(|l| l.starts_with("cpu "))?;
    // user nice system idle iowait irq softirq steal …
    let ticks: u64 = cpu.split_whitespace().nth(8)?.parse().ok()?;
    // SAFETY: sysconf reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| ticks as f64 * 1e3 / hz as f64)
}

/// Process-wide context switches and CPU time (µs) so far.
pub(super) fn rusage() -> (u64, f64) {
    // SAFETY: getrusage only writes into the zeroed struct we pass it.
    let u = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let cs = (u.ru_nvcsw + u.ru_nivcsw) as u64;
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    (cs, us(u.ru_utime) + us(u.ru_stime))
}

/// Values for the run, filled before timing: the benches' random pool, or
/// compressible text.
pub(super) enum ValuePool {
    Random(RandomPool),
    Text(Vec<u8>),
}

/// Room for different value starts beyond one value.
const VALUE_SLACK_BYTES: usize = 1 << 20;

impl ValuePool {
    pub(super) fn new(size: usize, values: Values) -> ValuePool {
        match values {
            Values::Random => ValuePool::Random(RandomPool::new(size, VALUE_SLACK_BYTES)),
            Values::Text => ValuePool::Text(
                b"user:000123 {\"name\": \"a journal record\", \"count\": 42} "
                    .iter()
                    .copied()
                    .cycle()
                    .take(size + VALUE_SLACK_BYTES)
                    .collect(),
            ),
        }
    }

    pub(super) fn value(&self, i: u64, size: usize) -> &[u8] {
        match self {
            ValuePool::Random(pool) => pool.payload(i, size),
            ValuePool::Text(buf) => {
                let slots = (buf.len() - size) as u64 / 64 + 1;
                let start = (i.wrapping_mul(0x9e37_79b9) % slots) as usize * 64;
                &buf[start..start + size]
            }
        }
    }
}

/// Encode transaction `seq` of `thread` into `out`: the journal's record,
/// or for the raw floor the same keys and values without the lengths.
fn encode(
    spec: &Spec,
    pool: &ValuePool,
    rng: &mut impl Rng,
    thread: u64,
    seq: u64,
    out: &mut Vec<u8>,
) {
    let framed = spec.engine == Engine::Journal;
    out.clear();
    if framed {
        out.extend_from_slice(&(spec.batch as u32).to_le_bytes());
    }
    for p in 0..spec.batch as u64 {
        let key: [u8; 16] = if spec.workload == Workload::W3 {
            rng.random()
        } else {
            let mut k = [0u8; 16];
            k[..8].copy_from_slice(&thread.to_be_bytes());
            k[8..].copy_from_slice(&seq.to_be_bytes());
            k
        };
        if framed {
            out.extend_from_slice(&16u16.to_le_bytes());
            out.extend_from_slice(&(spec.size as u32).to_le_bytes());
        }
        out.extend_from_slice(&key);
        out.extend_from_slice(pool.value(seq * spec.batch as u64 + p + thread, spec.size));
    }
}

/// What each committer does per transaction.
pub(super) trait Committer: Sync {
    fn commit(&self, thread: usize, record: &[u8], value_bytes: usize) -> anyhow::Result<()>;
}

/// The journal, and whether each commit starts its write before waiting.
struct JournalCommitter(Journal, bool);

impl Committer for JournalCommitter {
    fn commit(&self, _thread: usize, record: &[u8], _value_bytes: usize) -> anyhow::Result<()> {
        if self.1 {
            let h = self.0.submit(record)?;
            h.start();
            h.wait()?;
        } else {
            self.0.append(record)?;
        }
        Ok(())
    }
}

/// The raw floor: per thread, a region of a zero-filled file written in
/// turn, one durable write per commit.
struct RawCommitter {
    file: Arc<dyn VfsFile>,
    block: usize,
    region_bytes: u64,
    /// Per thread: next offset in its region.
    next: Vec<AtomicU64>,
    /// w3: buffered write + fdatasync instead of a direct durable write.
    buffered: bool,
    bufs: Vec<std::sync::Mutex<AlignedBuf>>,
}

impl Committer for RawCommitter {
    fn commit(&self, thread: usize, record: &[u8], _value_bytes: usize) -> anyhow::Result<()> {
        if self.buffered {
            // w3: the transaction's keys and values, appended.
            let at = self.next_offset(thread, record.len() as u64);
            self.file.write_at(record, at)?;
            self.file.sync(SyncKind::Data)?;
            return Ok(());
        }
        // w1, w2: the commit's key and value ("the same bytes" as the
        // engine commits), zero-padded to the block.
        let n = record.len().div_ceil(self.block).max(1) * self.block;
        let mut buf = self.bufs[thread].lock().unwrap_or_else(|p| p.into_inner());
        buf[..record.len()].copy_from_slice(record);
        buf[record.len()..n].fill(0);
        let at = self.next_offset(thread, n as u64);
        self.file.write_at(&buf[..n], at)?;
        Ok(())
    }
}

impl RawCommitter {
    /// Where `thread` writes its next `n` bytes: on from its last write,
    /// back to the start of its region when they would not fit, so that
    /// every write lands in the zero-filled part of the file.
    fn next_offset(&self, thread: usize, n: u64) -> u64 {
        debug_assert!(n <= self.region_bytes);
        let next = &self.next[thread];
        let mut at = next.load(Ordering::Relaxed);
        if at + n > self.region_bytes {
            at = 0;
        }
        next.store(at + n, Ordering::Relaxed);
        thread as u64 * self.region_bytes + at
    }
}

/// One run in `dir`: set up (untimed), commit, tear down.
pub fn run_one(spec: &Spec, dir: &Path) -> anyhow::Result<Outcome> {
    let pool = ValuePool::new(spec.size, spec.values);
    match spec.engine {
        Engine::Store => store::run(spec, dir, &pool),
        Engine::Journal => run_journal(spec, dir, &pool),
        Engine::Raw => run_raw(spec, dir, &pool),
    }
}

/// Bytes of records to prepare journal segments for before timing, so
/// that none is zero-filled during the run.
pub(super) fn journal_bytes_to_prepare(spec: &Spec) -> u64 {
    let record_bytes = spec.record_bytes();
    // With fresh blocks every batch starts on a block of its own: count a
    // block per record, the most it can take.
    let per_record_bytes = match spec.batch_start {
        BatchStartArg::Rewrite => record_bytes as u64 + 32,
        _ => (record_bytes as u64 + 32).next_multiple_of(4096),
    };
    match spec.preallocate {
        Some(b) => b,
        None if spec.count > 0 => spec.count * per_record_bytes,
        // A duration run: what the fastest rate seen on our machines (per
        // thread ~15,000 commits/s, in all ~400,000) would write, with
        // half again as margin, between 1M and 640M. Zero-filling more
        // than the run needs right before it only adds noise.
        None => {
            let rate = (spec.threads as f64 * 15_000.0).min(400_000.0);
            let bytes = spec.duration * rate * per_record_bytes as f64 * 1.5;
            (bytes as u64).clamp(1 << 20, 640 << 20)
        }
    }
}

/// The journal engine: one record per transaction.
fn run_journal(spec: &Spec, dir: &Path, pool: &ValuePool) -> anyhow::Result<Outcome> {
    let vfs = RealVfs::shared();
    let record_bytes = spec.record_bytes();
    let expected_bytes = journal_bytes_to_prepare(spec);
    let jdir = dir.join("keel-bench-journal");
    if jdir.exists() {
        bail!(
            "{} exists (left by an interrupted run?): remove it, or choose another --dir",
            jdir.display()
        );
    }
    let _cleanup = BenchTree::new(jdir.clone());
    let opts = JournalOptions {
        segment_size_bytes: spec.segment_size,
        method: spec.method,
        lz4_min_bytes: spec.lz4,
        writes_in_flight: spec.writes_in_flight,
        batch_start: spec.batch_start.to_journal(),
        ..JournalOptions::default()
    };
    let t0 = Instant::now();
    let j = Journal::open(vfs.clone(), &jdir, opts)
        .with_context(|| format!("opening a journal in {}", jdir.display()))?;
    let prepared = j.preallocate(expected_bytes)?;
    let setup_ms = t0.elapsed().as_secs_f64() * 1e3;
    let method = j.method();
    let segments_before = j.stats();
    let c = JournalCommitter(j, spec.start);
    settle(dir);
    let mut out = timed(spec, pool, &c)?;
    let st: JournalStats = c.0.stats();
    let created = st.segments_created - segments_before.segments_created;
    let writes = st.writes - segments_before.writes;
    out.info = json!({
        "engine": "journal",
        "method": method.name(),
        "workload": spec.workload.name(),
        "threads": spec.threads,
        "size": spec.size,
        "batch": spec.batch,
        "record_bytes": record_bytes,
        "segment_bytes": spec.segment_size,
        "block_bytes": c.0.options().block_size_bytes,
        "max_write_bytes": c.0.options().max_write_bytes,
        "lz4_min_bytes": spec.lz4,
        "writes_in_flight": spec.writes_in_flight,
        "batch_start": spec.batch_start.name(),
        "commit_path": if spec.start { "submit, start, wait" } else { "append" },
        "values": if spec.values == Values::Random { "random" } else { "text" },
        "before_timing": format!(
            "opened a fresh journal and prepared {} segment(s) of {} (zero-filled, header \
             written, synced) for {} of records, in {:.0} ms",
            // The active segment, the spares made at open, and
            // those `preallocate` added.
            1 + c.0.options().spare_segments + prepared,
            format_size(spec.segment_size),
            format_size_approx(expected_bytes),
            setup_ms
        ),
        "writes": writes,
        "records_per_write": round(out.commits as f64 / writes.max(1) as f64, 2),
        "bytes_written": st.bytes_written - segments_before.bytes_written,
        "rollovers": st.rollovers - segments_before.rollovers,
        "overlapped_writes": st.overlapped_writes - segments_before.overlapped_writes,
        "segments_prepared_during_run": created,
        "durable": "each commit returns after the journal's durable write (or write + sync) of its batch",
    });
    drop(c);
    Ok(out)
}

/// The raw floor: the same keys and values as bare durable writes.
fn run_raw(spec: &Spec, dir: &Path, pool: &ValuePool) -> anyhow::Result<Outcome> {
    let vfs = RealVfs::shared();
    let record_bytes = spec.record_bytes();
    let block = vfs.block_size(dir).unwrap_or(4096).max(4096);
    let buffered = spec.workload == Workload::W3;
    let per_commit = if buffered {
        record_bytes as u64
    } else {
        (record_bytes.div_ceil(block).max(1) * block) as u64
    };
    let wanted = if spec.count > 0 {
        spec.count.div_ceil(spec.threads as u64) * per_commit
    } else {
        (256u64 << 20) / spec.threads as u64
    };
    let region_bytes = wanted.clamp(per_commit, 1 << 30).div_ceil(block as u64) * block as u64;
    let file_bytes = region_bytes * spec.threads as u64;
    let guard = BenchFile::new(dir.join("raw-floor.dat"))?;
    let mode = if buffered {
        OpenMode::Buffered
    } else {
        OpenMode::DirectDsync
    };
    let t0 = Instant::now();
    let file = vfs.open(guard.path(), OpenOptions::new(mode).create(true))?;
    file.zero_fill(0, file_bytes)?;
    file.sync(SyncKind::All)?;
    vfs.sync_dir(dir)?;
    let setup_ms = t0.elapsed().as_secs_f64() * 1e3;
    let c = RawCommitter {
        file,
        block,
        region_bytes,
        next: (0..spec.threads).map(|_| AtomicU64::new(0)).collect(),
        buffered,
        bufs: (0..spec.threads)
            .map(|_| std::sync::Mutex::new(AlignedBuf::new(per_commit as usize, block)))
            .collect(),
    };
    settle(dir);
    let mut out = timed(spec, pool, &c)?;
    out.info = json!({
        "engine": "raw",
        "method": if buffered { "pwrite + fdatasync" } else { "odirect_dsync" },
        "workload": spec.workload.name(),
        "threads": spec.threads,
        "size": spec.size,
        "batch": spec.batch,
        "bytes_per_commit": per_commit,
        "block_bytes": block,
        "before_timing": format!(
            "created a {} file, zero-filled and synced, in {:.0} ms{}",
            format_size_approx(file_bytes),
            setup_ms,
            if spec.threads > 1 { "; one region per thread" } else { "" }
        ),
        "durable": if buffered {
            "one pwrite of the transaction's keys and values (no framing), then fdatasync, per commit"
        } else {
            "one pwrite of the commit's key and value, zero-padded to the block, on an O_DIRECT|O_DSYNC descriptor per commit"
        },
    });
    drop(c);
    drop(guard);
    Ok(out)
}

/// Flush the whole file system holding `dir` (`syncfs`) so that writes and
/// deletions left by setup, or by an earlier run in the same process, are
/// not flushed inside the timed region of this one.
pub(super) fn settle(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = rustix::fs::syncfs(&d);
    }
}

/// The timed region: barrier, T committers, join.
pub(super) fn timed(spec: &Spec, pool: &ValuePool, c: &dyn Committer) -> anyhow::Result<Outcome> {
    let gate = Gate {
        barrier: Barrier::new(spec.threads + 1),
        stop: AtomicBool::new(false),
        claimed: AtomicU64::new(0),
        failed: AtomicBool::new(false),
    };
    let mut started = Instant::now();
    let mut usage0 = (0, 0.0);
    let mut steal0 = None;
    let results: Vec<anyhow::Result<(u64, LatencyRecorder, Vec<u64>)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..spec.threads)
            .map(|t| {
                let gate = &gate;
                s.spawn(move || commit_loop(spec, pool, c, t, gate))
            })
            .collect();
        gate.barrier.wait();
        usage0 = rusage();
        steal0 = steal_ms();
        started = Instant::now();
        if spec.count == 0 {
            run_for(started, spec.duration, &gate.failed, &gate.stop);
        }
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a committer panicked")))
            })
            .collect()
    });
    let elapsed = started.elapsed();
    let usage1 = rusage();
    let steal = steal0.zip(steal_ms()).map(|(a, b)| b - a);
    let mut latency = LatencyRecorder::new();
    let mut commits = 0;
    let mut committer_cpus: Vec<u64> = Vec::new();
    for r in results {
        let (n, lat, cpus) = r?;
        commits += n;
        latency.merge(&lat);
        if committer_cpus.len() < cpus.len() {
            committer_cpus.resize(cpus.len(), 0);
        }
        for (total, n) in committer_cpus.iter_mut().zip(cpus) {
            *total += n;
        }
    }
    Ok(Outcome {
        commits,
        elapsed,
        latency,
        context_switches: usage1.0 - usage0.0,
        cpu_us: usage1.1 - usage0.1,
        steal_ms: steal,
        committer_cpus,
        info: json!({}),
    })
}

/// What the committing threads of a timed run share: the start, the stop,
/// the count of commits claimed (a `--count` run) and whether one failed.
struct Gate {
    barrier: Barrier,
    stop: AtomicBool,
    claimed: AtomicU64,
    failed: AtomicBool,
}

/// Committing thread `t`: after the start, commit until the count is
/// claimed, the time is up or a thread failed; its commits and their
/// latencies, and how many returned on each CPU.
fn commit_loop(
    spec: &Spec,
    pool: &ValuePool,
    c: &dyn Committer,
    t: usize,
    gate: &Gate,
) -> anyhow::Result<(u64, LatencyRecorder, Vec<u64>)> {
    let mut rng = rand::rng();
    let mut lat = LatencyRecorder::new();
    let mut record = Vec::with_capacity(spec.encoded_bytes());
    let mut seq = 0u64;
    // Made before the start, as the histogram is; grown only for a CPU
    // numbered past it.
    let mut cpus = vec![0u64; CPU_SLOTS];
    gate.barrier.wait();
    loop {
        if spec.count > 0 {
            if gate.claimed.fetch_add(1, Ordering::Relaxed) >= spec.count {
                break;
            }
        } else if gate.stop.load(Ordering::Relaxed) {
            break;
        }
        if gate.failed.load(Ordering::Relaxed) {
            break;
        }
        encode(spec, pool, &mut rng, t as u64, seq, &mut record);
        let t0 = Instant::now();
        if let Err(e) = c.commit(t, &record, spec.size) {
            gate.failed.store(true, Ordering::Relaxed);
            return Err(e);
        }
        lat.record(t0.elapsed());
        count_cpu(&mut cpus);
        seq += 1;
    }
    Ok((seq, lat, cpus))
}

/// CPUs a committing thread counts commits on before it has to grow its
/// counts.
const CPU_SLOTS: usize = 64;

/// Count one commit on the CPU this thread runs on now: where the
/// commit's wake-up left it. A committer that sleeps on a CPU other than
/// the one taking the disk's interrupts is woken across CPUs; on a VM that
/// costs tens of µs per write (docs/store-performance.md, "Background
/// threads off the disk's interrupts").
fn count_cpu(cpus: &mut Vec<u64>) {
    // SAFETY: sched_getcpu takes no arguments and only returns a number
    // (glibc reads it from the thread's restartable-sequence area or the
    // vDSO: no system call on the commit's path).
    let cpu = unsafe { libc::sched_getcpu() };
    if let Ok(cpu) = usize::try_from(cpu) {
        if cpu >= cpus.len() {
            cpus.resize(cpu + 1, 0);
        }
        cpus[cpu] += 1;
    }
}

/// Let the workers run for `seconds` from `started` (or until one of them
/// fails), then tell them to stop.
pub(super) fn run_for(started: Instant, seconds: f64, failed: &AtomicBool, stop: &AtomicBool) {
    let end = started + Duration::from_secs_f64(seconds);
    while Instant::now() < end && !failed.load(Ordering::Relaxed) {
        std::thread::sleep((end - Instant::now()).min(Duration::from_millis(50)));
    }
    stop.store(true, Ordering::Relaxed);
}
