//! `keel probe`: the command to run first on a new machine. Short versions
//! of every bench in one scratch directory — the durable floor (every
//! durable method at 4 and 16 KiB, fallocated and zero-filled), throughput
//! by write size, parallel scaling, the cost of fsync under a mixed load,
//! the fill-random variants — then a verdict: which method, preallocation,
//! write size and writes in flight Keel's journal should use here, with the
//! figures that justify it, and a warning when flushes may be ignored.

mod budget;
mod calibrate;
mod confidence;
mod report;
mod steps;
pub mod verdict;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use keel::io::{RealVfs, Vfs, WriteMethod};

use budget::{Planner, Quantity, Step};

use crate::bench::report::{check_dir, BenchDir, Machine, Prealloc};
use crate::bench::{methods, mixed, mmap, sizes};
use crate::util::Size;

/// The methods of the durable floor: every durable Linux method, and
/// `O_DIRECT` alone for the flush rule (`fsync` measures like `fdatasync`
/// and is left out to save time).
const FLOOR_METHODS: [WriteMethod; 7] = [
    WriteMethod::Fdatasync,
    WriteMethod::Odsync,
    WriteMethod::Odirect,
    WriteMethod::OdirectDsync,
    WriteMethod::Pwritev2Dsync,
    WriteMethod::UringOdirectDsync,
    WriteMethod::UringFdatasync,
];
const FLOOR_SIZES: [u64; 2] = [4 << 10, 16 << 10];
const PROBE_SIZES: [u64; 7] = [
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
    16 << 20,
];
const SCALING_WRITERS: [u32; 5] = [1, 2, 4, 8, 16];
const SCALING_SIZE_BYTES: u64 = 16 << 10;
const MANY_THREADS: u32 = 128;
const MANY_THREADS_SIZE_BYTES: u64 = 8 << 10;
const MIXED_SET_BYTES: u64 = 64 << 20;
const MIXED_FILES: u32 = 4;
const MIXED_THREADS: u32 = 4;
const MMAP_REGION_BYTES: u64 = 64 << 20;

/// Nominal quantities (the figures a full probe rests on) and the least the
/// budget may cut them to.
const NOMINAL_COUNT: u64 = 2048;
const MIN_COUNT: u64 = 8;
const NOMINAL_TOTAL_BYTES: u64 = 64 << 20;
const MIN_TOTAL_BYTES: u64 = 256 << 10;
const NOMINAL_MIXED_S: f64 = 2.0;
const MIN_MIXED_S: f64 = 0.1;
const MIN_MIXED_SET_BYTES: u64 = 8 << 20;
const NOMINAL_TRANSACTIONS: u64 = 1000;
const MIN_TRANSACTIONS: u64 = 10;
const MIN_MMAP_REGION_BYTES: u64 = 4 << 20;

/// Flags of `keel probe`.
#[derive(Args, Debug, Clone)]
pub struct ProbeArgs {
    /// Directory for the bench files [default: a fresh keel-probe-<pid>
    /// folder in the current directory, removed afterwards]
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print the report as one JSON object on stdout instead of markdown
    #[arg(long)]
    pub json: bool,
    /// Also save the full report as BASE.json and BASE.md
    #[arg(long, value_name = "BASE")]
    pub out: Option<PathBuf>,
    /// The whole probe's time budget (e.g. 90, 60s, 2m): a short
    /// calibration prices every step, and the counts below are cut, where
    /// needed, so the probe ends within it; the report says what was cut
    /// and what that costs in confidence
    #[arg(long, default_value = "60s", value_name = "DURATION",
          value_parser = crate::diskcheck::parse_duration)]
    pub budget: Duration,
    /// Commits per durable-floor run (smaller is faster and noisier); given,
    /// it is kept even if the budget is then exceeded [default: 2048, or
    /// fewer to fit --budget]
    #[arg(long)]
    pub count: Option<u64>,
    /// Bytes per write size and per parallel run; given, it is kept
    /// [default: 64M, or less to fit --budget]
    #[arg(long, value_name = "SIZE")]
    pub total: Option<Size>,
    /// Seconds per mixed-load variant; given, it is kept [default: 2, or
    /// less to fit --budget]
    #[arg(long, value_name = "SECS")]
    pub mixed_duration: Option<f64>,
    /// Transactions per fill-random variant; given, it is kept [default:
    /// 1000, or fewer to fit --budget]
    #[arg(long)]
    pub transactions: Option<u64>,
}

impl ProbeArgs {
    /// The quantities the budget scales, the user's values fixed.
    fn quantities(&self) -> steps::Quantities {
        steps::Quantities {
            floor_count: Quantity::new(
                NOMINAL_COUNT as f64,
                MIN_COUNT as f64,
                self.count.map(|c| c as f64),
            ),
            total_bytes: Quantity::new(
                NOMINAL_TOTAL_BYTES as f64,
                MIN_TOTAL_BYTES as f64,
                self.total.map(|t| t.bytes() as f64),
            ),
            mixed_s: Quantity::new(NOMINAL_MIXED_S, MIN_MIXED_S, self.mixed_duration),
            mixed_set_bytes: Quantity::new(
                MIXED_SET_BYTES as f64,
                MIN_MIXED_SET_BYTES as f64,
                None,
            ),
            transactions: Quantity::new(
                NOMINAL_TRANSACTIONS as f64,
                MIN_TRANSACTIONS as f64,
                self.transactions.map(|t| t as f64),
            ),
            mmap_region_bytes: Quantity::new(
                MMAP_REGION_BYTES as f64,
                MIN_MMAP_REGION_BYTES as f64,
                None,
            ),
        }
    }

    /// The flags given that the budget may not cut.
    fn explicit_flags(&self) -> Vec<&'static str> {
        [
            (self.count.is_some(), "--count"),
            (self.total.is_some(), "--total"),
            (self.mixed_duration.is_some(), "--mixed-duration"),
            (self.transactions.is_some(), "--transactions"),
        ]
        .into_iter()
        .filter_map(|(given, flag)| given.then_some(flag))
        .collect()
    }
}

/// Every step's outcomes, for the verdict and the report.
pub struct Probe {
    pub dir: PathBuf,
    pub machine: Machine,
    pub args: ProbeArgs,
    pub budget: confidence::BudgetReport,
    pub floor: Vec<methods::Outcome>,
    pub sizes: Vec<sizes::Outcome>,
    pub scaling: Vec<sizes::Outcome>,
    pub mixed: Vec<mixed::Outcome>,
    pub mixed_plan: mixed::MixedPlan,
    pub mmap: Vec<mmap::Outcome>,
    pub mmap_plan: mmap::MmapPlan,
    pub verdict: verdict::Verdict,
    pub elapsed_s: f64,
}

pub fn run(args: ProbeArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    check_args(&args)?;
    let deadline = started + args.budget;
    let (dir, remove_dir) = match &args.dir {
        Some(d) => (d.clone(), !d.exists()),
        None => {
            let cwd = std::env::current_dir().context("cannot read the current directory")?;
            (cwd.join(format!("keel-probe-{}", std::process::id())), true)
        }
    };
    let vfs = RealVfs;
    let q = args.quantities();
    let needed = [
        q.floor_count.at(1.0) as u64 * FLOOR_SIZES[1],
        q.total_bytes.at(1.0) as u64,
        MIXED_SET_BYTES,
        MMAP_REGION_BYTES,
    ]
    .into_iter()
    .max()
    .unwrap_or(0);
    // Registered before it is created, so Ctrl-C removes it (once empty).
    let _dir_guard = remove_dir.then(|| BenchDir::new(dir.clone()));
    check_dir(&vfs, &dir, needed, "--total or --count")?;
    let machine = Machine::for_path(&dir);
    eprintln!("keel probe in {}: {}", dir.display(), machine.describe());
    let mut probe = measure(&vfs, dir, machine, args, deadline)?;
    probe.elapsed_s = started.elapsed().as_secs_f64();
    probe.budget.finish(probe.elapsed_s);
    let markdown = report::markdown(&probe);
    let json = report::json(&probe);
    if let Some(base) = &probe.args.out {
        save(base, &markdown, &json)?;
    }
    if probe.args.json {
        outln!("{json}")?;
    } else {
        out!("{markdown}")?;
    }
    eprintln!("keel probe: done in {:.1} s", probe.elapsed_s);
    if probe.budget.over_budget {
        eprintln!("note: {}", probe.budget.over_budget_note());
    }
    Ok(ExitCode::SUCCESS)
}

fn check_args(args: &ProbeArgs) -> anyhow::Result<()> {
    budget::check_budget(args.budget)?;
    if let Some(count) = args.count {
        if count == 0 || count > 1 << 20 {
            bail!("--count must be between 1 and {}; got {count}", 1 << 20);
        }
    }
    if let Some(total) = args.total {
        if total.bytes() == 0 || total.bytes() > 1 << 40 {
            bail!(
                "--total must be between 1 byte and 1 TiB; got {}",
                total.bytes()
            );
        }
    }
    if let Some(secs) = args.mixed_duration {
        if !(secs.is_finite() && secs > 0.0 && secs <= 600.0) {
            bail!("--mixed-duration must be between 0 and 600 seconds; got {secs}");
        }
    }
    if let Some(tx) = args.transactions {
        if tx == 0 || tx > 1_000_000 {
            bail!("--transactions must be between 1 and 1000000; got {tx}");
        }
    }
    Ok(())
}

fn step(n: u32, what: &str) {
    eprintln!("probe {n}/5: {what}");
}

/// Calibrate, plan, say on stderr what the budget cuts (and what it
/// cannot), and hand back the planner.
fn plan(
    vfs: &dyn Vfs,
    dir: &Path,
    args: &ProbeArgs,
    deadline: Instant,
) -> anyhow::Result<(Planner, confidence::BudgetReport)> {
    let calibration = calibrate::calibrate(vfs, dir)?;
    let q = args.quantities();
    let mut planner = Planner::new(deadline);
    planner.set_pending(steps::costs(
        Step::DurableFloor,
        &q,
        &calibration.rates(),
        Prealloc::Zerofill,
    ));
    let first = planner.preview(Instant::now());
    let budget = confidence::BudgetReport::new(args, calibration, &planner, first);
    eprintln!("keel probe: calibration: {}", budget.calibration.describe());
    eprintln!("keel probe: {}", budget.plan_sentence());
    if let Some(note) = budget.predicted_over_note(first) {
        eprintln!("note: {note}");
    }
    Ok((planner, budget))
}

fn measure(
    vfs: &dyn Vfs,
    dir: PathBuf,
    machine: Machine,
    args: ProbeArgs,
    deadline: Instant,
) -> anyhow::Result<Probe> {
    let (mut planner, mut budget) = plan(vfs, &dir, &args, deadline)?;
    let q = args.quantities();
    let rates = budget.calibration.rates();
    step(
        1,
        "durable floor: each method at 4 and 16 KiB, fallocated and zero-filled",
    );
    let floor = steps::durable_floor(vfs, &dir, &machine, &q, &mut planner);
    let mut figures = verdict::Figures {
        persistent: machine.persistent(),
        volatile_cache: machine.volatile_cache(),
        methods: report::method_figures(&floor),
        ..Default::default()
    };
    // Later steps write into files prepared the way the verdict chose.
    let prealloc = match verdict::verdict(&figures).prealloc {
        Some("fallocate") => Prealloc::Fallocate,
        _ => Prealloc::Zerofill,
    };
    planner.set_pending(steps::costs(Step::Sizes, &q, &rates, prealloc));
    step(2, "throughput by write size, buffered and durable");
    let sizes = steps::size_step(vfs, &dir, &q, &mut planner, |t| {
        steps::size_runs(t, prealloc)
    });
    step(3, "parallel scaling of durable writes");
    let scaling = steps::size_step(vfs, &dir, &q, &mut planner, |t| {
        steps::scaling_runs(t, prealloc)
    });
    step(
        4,
        "mixed random load, with and without fsync after every write",
    );
    let (mixed_plan, mixed) = planner.run(|d| {
        let plan = steps::mixed_plan(&dir, &q, d.scale);
        let outcomes = mixed::run_all(vfs, &plan).unwrap_or_else(|e| {
            eprintln!("mixed: error: {e:#}");
            Vec::new()
        });
        (plan, outcomes)
    });
    step(5, "fill-random transactions, five ways");
    let (mmap_plan, mmap) = steps::mmap_step(vfs, &dir, &q, &mut planner, prealloc);
    figures.sizes = report::size_figures(&sizes);
    figures.scaling = report::scale_figures(&scaling);
    figures.mixed = report::mixed_figure(&mixed);
    let verdict = verdict::verdict(&figures);
    budget.record(&planner, &q);
    Ok(Probe {
        dir,
        machine,
        args,
        budget,
        floor,
        sizes,
        scaling,
        mixed,
        mixed_plan,
        mmap,
        mmap_plan,
        verdict,
        elapsed_s: 0.0,
    })
}

/// `BASE.json` and `BASE.md` (an extension given on BASE is dropped).
fn save(base: &Path, markdown: &str, json: &str) -> anyhow::Result<()> {
    let base = match base.extension().and_then(|e| e.to_str()) {
        Some("json" | "md") => base.with_extension(""),
        _ => base.to_path_buf(),
    };
    if let Some(parent) = base.parent().filter(|p| !p.as_os_str().is_empty()) {
        crate::util::ensure_dir(parent)?;
    }
    for (ext, text) in [("json", format!("{json}\n")), ("md", markdown.to_string())] {
        let path = base.with_extension(ext);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("saved {}", path.display());
    }
    Ok(())
}
