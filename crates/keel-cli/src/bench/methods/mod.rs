//! `keel bench methods`: the journal-method experiment. A preallocated
//! journal file (1 GiB by default) receives `count` sequential commits of
//! `size` bytes (65,536 × 16 KiB), each made durable with one write method;
//! every method runs on a fresh file, and the report gives total ms and ms
//! per write (the original write-up's columns) plus commits/s, MB/s and
//! latency percentiles.

mod fio;
mod output;
mod plan;
mod run;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use keel::io::{RealVfs, Vfs, WriteMethod};

use crate::bench::report::Machine;
use crate::util::Size;
pub use output::result_json;
pub use plan::{Plan, PreallocArg, RunSpec};
pub use run::Outcome;

/// Flags of `keel bench methods`.
#[derive(Args, Debug, Clone)]
pub struct MethodsArgs {
    /// Size of the journal file each method writes into (bytes, or K/M/G/T
    /// powers of two) [default: 1G, or 32M with --quick]
    #[arg(long, value_name = "SIZE")]
    pub file_size: Option<Size>,
    /// Bytes per commit [default: 16K]
    #[arg(long, value_name = "SIZE")]
    pub size: Option<Size>,
    /// Commits per method [default: 65536, or 2048 with --quick]
    #[arg(long)]
    pub count: Option<u64>,
    /// How the journal file is prepared before the timed run: `fallocate`
    /// (reserved, unwritten extents), `zerofill` (written with zeros and
    /// synced), `none` (an empty file that grows), `both` (each method runs
    /// once with fallocate and once with zerofill)
    #[arg(long, value_enum, default_value_t = PreallocArg::Fallocate)]
    pub prealloc: PreallocArg,
    /// Directory for the bench files (created if missing; files are removed
    /// afterwards, also on Ctrl-C)
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// Only these methods, comma-separated [default: all, or odsync with
    /// --split]
    #[arg(long, value_delimiter = ',', value_name = "METHOD,...")]
    pub methods: Vec<WriteMethod>,
    /// A small run of every method: 2048 commits into a 32 MiB file
    #[arg(long)]
    pub quick: bool,
    /// Each commit is N writes of size/N bytes, then one sync for methods
    /// that sync (pg_test_fsync's "two 8 kB writes per sync")
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=plan::MAX_WRITES_PER_COMMIT))]
    pub writes_per_commit: u32,
    /// Write each commit as 1, 2, 4, 8 and 16 writes (16 KiB as 1×16 …
    /// 16×1 KiB), by default under odsync (pg_test_fsync's "open_sync with
    /// different write sizes")
    #[arg(long, conflicts_with = "writes_per_commit")]
    pub split: bool,
    /// Print one JSON object on stdout instead of a table
    #[arg(long)]
    pub json: bool,
    /// Also draw the latency distribution of every run into this SVG file
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Compare with fio on the same file size and prealloc, interleaved,
    /// for fdatasync, odsync and odirect_dsync
    #[arg(long)]
    pub vs_fio: bool,
    /// Rounds of the --vs-fio comparison (the median is reported)
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=15))]
    pub rounds: u32,
}

/// Run the experiment; the exit status is a failure only if every run
/// failed (bad arguments are errors before anything runs).
pub fn run(args: MethodsArgs) -> anyhow::Result<ExitCode> {
    let plan = Plan::resolve(&args)?;
    let vfs = RealVfs;
    plan.check_dir(&vfs)?;
    let machine = Machine::for_path(&plan.dir);
    if !plan.json {
        outln!("{}", plan.describe())?;
        outln!("machine: {}\n", machine.describe())?;
    }
    let (outcomes, comparisons) = if plan.vs_fio {
        fio::compare(&vfs, &plan, &machine)?
    } else {
        let outcomes = plan
            .runs()
            .iter()
            .map(|spec| Outcome::run(&vfs as &dyn Vfs, &plan, spec, None, &machine))
            .collect();
        (outcomes, Vec::new())
    };
    if plan.json {
        outln!("{}", output::json(&plan, &machine, &outcomes, &comparisons))?;
    } else {
        out!("{}", output::text(&outcomes, &comparisons))?;
    }
    if let Some(path) = &plan.plot {
        output::plot(path, &plan, &outcomes)?;
        if !plan.json {
            outln!("\nlatency plot: {}", path.display())?;
        }
    }
    if !plan.json {
        print!("{}", output::legend(&plan));
    }
    let all_failed = outcomes.iter().all(|o| o.result.is_err())
        && comparisons.iter().all(|c| c.ratio().is_none());
    Ok(if all_failed {
        eprintln!("error: every run failed");
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
