//! `keel bench sizes`: durable-write throughput by write size. For each
//! write size from 4 KiB to 16 MiB, a volume of data is written buffered
//! (then one `fdatasync`, timed apart) and durably (`O_DIRECT|O_DSYNC`);
//! then the same with several writers on one file at disjoint offsets, on
//! separate files, and with many threads writing small blocks.

mod output;
mod plan;
mod run;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use keel::io::RealVfs;

use crate::bench::report::{Machine, Prealloc};
use crate::util::Size;
pub use output::result_json;
pub use plan::{Layout, Mode, SizeRun, SizesPlan};
pub use run::{Measured, Outcome};

/// Flags of `keel bench sizes`.
#[derive(Args, Debug, Clone)]
pub struct SizesArgs {
    /// Write sizes, comma-separated [default: 4K,16K,32K,64K,128K,256K,1M,
    /// 2M,4M,8M,16M, or 8K with --threads]
    #[arg(
        long,
        visible_alias = "size",
        value_delimiter = ',',
        value_name = "SIZE,..."
    )]
    pub sizes: Vec<Size>,
    /// Bytes written per write size and mode [default: 1G, and for buffered
    /// single-writer runs twice the kernel's dirty-page limit when that is
    /// larger, so the page cache cannot absorb it all; 16M with --quick]
    #[arg(long, value_name = "SIZE")]
    pub total: Option<Size>,
    /// Only runs with N writers on one file, each in its own region (or on
    /// its own file with --separate-files)
    #[arg(long, value_name = "N", conflicts_with = "threads",
          value_parser = clap::value_parser!(u32).range(1..=plan::MAX_WRITERS))]
    pub parallel: Option<u32>,
    /// Only runs with N threads (the many-threads case: --threads 128
    /// --size 8K); like --parallel, with 8 KiB writes by default
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=plan::MAX_WRITERS))]
    pub threads: Option<u32>,
    /// With --parallel or --threads: every writer on its own file
    #[arg(long)]
    pub separate_files: bool,
    /// How the files are prepared: `fallocate`, `zerofill`, `none` (empty
    /// files that grow)
    #[arg(long, value_enum, default_value_t = Prealloc::Fallocate)]
    pub prealloc: Prealloc,
    /// Directory for the bench files (created if missing; files are removed
    /// afterwards, also on Ctrl-C)
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// A small run of every variant: 16 MiB per size and mode
    #[arg(long)]
    pub quick: bool,
    /// Print one JSON object on stdout instead of a table
    #[arg(long)]
    pub json: bool,
    /// Also plot MB/s against write size into this SVG file
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
}

/// Run the experiment; the exit status is a failure only if every run
/// failed (bad arguments are errors before anything runs).
pub fn run(args: SizesArgs) -> anyhow::Result<ExitCode> {
    let plan = SizesPlan::resolve(&args)?;
    let vfs = RealVfs;
    plan.check_dir(&vfs)?;
    let machine = Machine::for_path(&plan.dir);
    if !plan.json {
        outln!("{}", plan.describe())?;
        outln!("machine: {}\n", machine.describe())?;
    }
    let outcomes: Vec<Outcome> = plan
        .runs
        .iter()
        .map(|r| Outcome::run(&vfs, &plan.dir, r, plan.json))
        .collect();
    if plan.json {
        outln!("{}", output::json(&plan, &machine, &outcomes))?;
    } else {
        out!("{}", output::text(&outcomes))?;
    }
    if let Some(path) = &plan.plot {
        output::plot(path, &outcomes)?;
        if !plan.json {
            outln!("\nthroughput plot: {}", path.display())?;
        }
    }
    if !plan.json {
        print!("{}", output::legend());
    }
    Ok(if outcomes.iter().all(|o| o.result.is_err()) {
        eprintln!("error: every run failed");
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
