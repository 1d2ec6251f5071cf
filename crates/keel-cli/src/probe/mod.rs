//! `keel probe`: the command to run first on a new machine. Short versions
//! of every bench in one scratch directory — the durable floor (every
//! durable method at 4 and 16 KiB, fallocated and zero-filled), throughput
//! by write size, parallel scaling, the cost of fsync under a mixed load,
//! the fill-random variants — then a verdict: which method, preallocation,
//! write size and writes in flight Keel's journal should use here, with the
//! figures that justify it, and a warning when flushes may be ignored.

mod report;
pub mod verdict;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Args;
use keel::io::{RealVfs, Vfs, WriteMethod};

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
    /// Commits per durable-floor run (smaller is faster and noisier)
    #[arg(long, default_value_t = 2048)]
    pub count: u64,
    /// Bytes per write size and per parallel run
    #[arg(long, default_value = "64M", value_name = "SIZE")]
    pub total: Size,
    /// Seconds per mixed-load variant
    #[arg(long, default_value_t = 2.0, value_name = "SECS")]
    pub mixed_duration: f64,
    /// Transactions per fill-random variant
    #[arg(long, default_value_t = 1000)]
    pub transactions: u64,
}

/// Every step's outcomes, for the verdict and the report.
pub struct Probe {
    pub dir: PathBuf,
    pub machine: Machine,
    pub args: ProbeArgs,
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
    let (dir, remove_dir) = match &args.dir {
        Some(d) => (d.clone(), !d.exists()),
        None => {
            let cwd = std::env::current_dir().context("cannot read the current directory")?;
            (cwd.join(format!("keel-probe-{}", std::process::id())), true)
        }
    };
    let vfs = RealVfs;
    let needed = [
        args.count * FLOOR_SIZES[1],
        args.total.bytes(),
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
    let mut probe = measure(&vfs, dir, machine, args)?;
    probe.elapsed_s = started.elapsed().as_secs_f64();
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
    Ok(ExitCode::SUCCESS)
}

fn check_args(args: &ProbeArgs) -> anyhow::Result<()> {
    if args.count == 0 || args.count > 1 << 20 {
        bail!(
            "--count must be between 1 and {}; got {}",
            1 << 20,
            args.count
        );
    }
    if args.total.bytes() == 0 || args.total.bytes() > 1 << 40 {
        bail!(
            "--total must be between 1 byte and 1 TiB; got {}",
            args.total.bytes()
        );
    }
    if !(args.mixed_duration.is_finite()
        && args.mixed_duration > 0.0
        && args.mixed_duration <= 600.0)
    {
        bail!(
            "--mixed-duration must be between 0 and 600 seconds; got {}",
            args.mixed_duration
        );
    }
    if args.transactions == 0 || args.transactions > 1_000_000 {
        bail!(
            "--transactions must be between 1 and 1000000; got {}",
            args.transactions
        );
    }
    Ok(())
}

fn step(n: u32, what: &str) {
    eprintln!("probe {n}/5: {what}");
}

fn measure(
    vfs: &dyn Vfs,
    dir: PathBuf,
    machine: Machine,
    args: ProbeArgs,
) -> anyhow::Result<Probe> {
    step(
        1,
        "durable floor: each method at 4 and 16 KiB, fallocated and zero-filled",
    );
    let floor = durable_floor(vfs, &dir, &machine, &args);
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
    step(2, "throughput by write size, buffered and durable");
    let sizes = size_runs(&args, prealloc)
        .iter()
        .map(|r| sizes::Outcome::run(vfs, &dir, r, false))
        .collect::<Vec<_>>();
    step(3, "parallel scaling of durable writes");
    let scaling = scaling_runs(&args, prealloc)
        .iter()
        .map(|r| sizes::Outcome::run(vfs, &dir, r, false))
        .collect::<Vec<_>>();
    step(
        4,
        "mixed random load, with and without fsync after every write",
    );
    let mixed_plan = mixed_plan(&dir, &args);
    let mixed = mixed::run_all(vfs, &mixed_plan).unwrap_or_else(|e| {
        eprintln!("mixed: error: {e:#}");
        Vec::new()
    });
    step(5, "fill-random transactions, five ways");
    let mmap_plan = mmap_plan(&dir, &args, prealloc);
    let mmap = mmap::run_rounds(vfs, &mmap_plan);
    figures.sizes = report::size_figures(&sizes);
    figures.scaling = report::scale_figures(&scaling);
    figures.mixed = report::mixed_figure(&mixed);
    let verdict = verdict::verdict(&figures);
    Ok(Probe {
        dir,
        machine,
        args,
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

/// Step 4's mixed random load: 60 % reads of 16 KiB blocks over
/// [`MIXED_FILES`] files, [`MIXED_THREADS`] threads.
fn mixed_plan(dir: &Path, args: &ProbeArgs) -> mixed::MixedPlan {
    mixed::MixedPlan {
        dir: dir.to_path_buf(),
        set_size: MIXED_SET_BYTES,
        files: MIXED_FILES,
        file_size: MIXED_SET_BYTES / u64::from(MIXED_FILES),
        threads: MIXED_THREADS,
        block: 16 << 10,
        read_percent: 60,
        duration_s: args.mixed_duration,
        quick: true,
        json: false,
        plot: None,
    }
}

/// Step 5's fill-random transactions (100 puts of 16-byte keys and
/// 100-byte values), every variant once, in files prepared by `prealloc`.
fn mmap_plan(dir: &Path, args: &ProbeArgs, prealloc: Prealloc) -> mmap::MmapPlan {
    mmap::MmapPlan {
        dir: dir.to_path_buf(),
        transactions: args.transactions,
        puts: 100,
        key_size: 16,
        value_size: 100,
        tx_bytes: 11_600,
        region: MMAP_REGION_BYTES,
        prealloc,
        variants: mmap::Variant::ALL.to_vec(),
        rounds: 1,
        quick: true,
        json: false,
        plot: None,
    }
}

fn durable_floor(
    vfs: &dyn Vfs,
    dir: &Path,
    machine: &Machine,
    args: &ProbeArgs,
) -> Vec<methods::Outcome> {
    let mut outcomes = Vec::new();
    for size in FLOOR_SIZES {
        let plan = methods::Plan {
            dir: dir.to_path_buf(),
            file_size_bytes: args.count * size,
            size_bytes: size,
            count: args.count,
            preallocs: vec![Prealloc::Fallocate, Prealloc::Zerofill],
            methods: FLOOR_METHODS.to_vec(),
            splits: vec![1],
            quick: true,
            json: false,
            plot: None,
            vs_fio: false,
            rounds: 1,
        };
        for spec in plan.runs() {
            outcomes.push(methods::Outcome::run(vfs, &plan, &spec, None, machine));
        }
    }
    outcomes
}

fn size_runs(args: &ProbeArgs, prealloc: Prealloc) -> Vec<sizes::SizeRun> {
    let mut runs = Vec::new();
    for size in PROBE_SIZES {
        for mode in [sizes::Mode::Buffered, sizes::Mode::Durable] {
            runs.push(sizes::SizeRun {
                series: "sequential",
                writers: 1,
                layout: sizes::Layout::OneFile,
                mode,
                size_bytes: size,
                writes_per_writer: (args.total.bytes() / size).max(1),
                prealloc,
            });
        }
    }
    runs
}

fn scaling_runs(args: &ProbeArgs, prealloc: Prealloc) -> Vec<sizes::SizeRun> {
    let run = |series, writers: u32, layout, size: u64| sizes::SizeRun {
        series,
        writers,
        layout,
        mode: sizes::Mode::Durable,
        size_bytes: size,
        writes_per_writer: (args.total.bytes() / size / u64::from(writers)).max(1),
        prealloc,
    };
    let mut runs: Vec<sizes::SizeRun> = SCALING_WRITERS
        .iter()
        .map(|&w| run("parallel", w, sizes::Layout::OneFile, SCALING_SIZE_BYTES))
        .collect();
    runs.push(run(
        "separate_files",
        4,
        sizes::Layout::SeparateFiles,
        SCALING_SIZE_BYTES,
    ));
    runs.push(run(
        "threads",
        MANY_THREADS,
        sizes::Layout::OneFile,
        MANY_THREADS_SIZE_BYTES,
    ));
    runs
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
