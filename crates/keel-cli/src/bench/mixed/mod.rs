//! `keel bench mixed`: what an fsync costs under a mixed load. N threads
//! make random 16 KiB reads and writes (60/40) over a file set filled with
//! random data, through `O_DIRECT` descriptors (so every read comes from
//! the device, never from the page cache), once without any sync and once
//! with an `fsync` after every write — what sysbench `fileio rndrw
//! --file-fsync-freq=1` and fio `randrw --fsync=1` measure.

mod run;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use clap::Args;
use keel::io::{RealVfs, Vfs};
use serde::Serialize;

use crate::bench::report::{check_dir, legend, number, plot, Align, Machine, Table};
use crate::util::{format_size, Size};
pub use run::{run_all, Outcome, Variant};

const DEFAULT_FILES: u32 = 16;
const QUICK_FILES: u32 = 4;
const DEFAULT_SET_SIZE_BYTES: u64 = 1 << 30;
const QUICK_SET_SIZE_BYTES: u64 = 64 << 20;
const DEFAULT_SECS: f64 = 10.0;
const QUICK_SECS: f64 = 1.0;
const MAX_THREADS: i64 = 1024;
const MAX_FILES: u32 = 4096;
const MAX_BLOCK_BYTES: u64 = 64 << 20;

/// Flags of `keel bench mixed`.
#[derive(Args, Debug, Clone)]
pub struct MixedArgs {
    /// Total size of the file set [default: 1G, 64M with --quick]
    #[arg(long, value_name = "SIZE")]
    pub set_size: Option<Size>,
    /// Number of files the set is split into [default: 16, 4 with --quick]
    #[arg(long)]
    pub files: Option<u32>,
    /// Threads making requests
    #[arg(long, default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(1..=MAX_THREADS))]
    pub threads: u32,
    /// Bytes per read and per write
    #[arg(long, default_value = "16K", value_name = "SIZE")]
    pub block: Size,
    /// Percentage of requests that are reads (the rest are writes)
    #[arg(long, default_value_t = 60,
          value_parser = clap::value_parser!(u32).range(0..=100))]
    pub read_percent: u32,
    /// Seconds each variant runs [default: 10, 1 with --quick]
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Directory for the file set (created if missing; files are removed
    /// afterwards, also on Ctrl-C)
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// A short run: 4 files, 64 MiB, 1 s per variant
    #[arg(long)]
    pub quick: bool,
    /// Print one JSON object on stdout instead of a table
    #[arg(long)]
    pub json: bool,
    /// Also draw the read and write latency distributions into this SVG file
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
}

/// The checked configuration.
#[derive(Clone, Debug, Serialize)]
pub struct MixedPlan {
    pub dir: PathBuf,
    pub set_size: u64,
    pub files: u32,
    pub file_size: u64,
    pub threads: u32,
    pub block: u64,
    pub read_percent: u32,
    pub duration_s: f64,
    pub quick: bool,
    #[serde(skip)]
    pub json: bool,
    #[serde(skip)]
    pub plot: Option<PathBuf>,
}

impl MixedPlan {
    pub fn resolve(args: &MixedArgs) -> anyhow::Result<MixedPlan> {
        let (set, files, secs) = if args.quick {
            (QUICK_SET_SIZE_BYTES, QUICK_FILES, QUICK_SECS)
        } else {
            (DEFAULT_SET_SIZE_BYTES, DEFAULT_FILES, DEFAULT_SECS)
        };
        let set_size = args.set_size.map_or(set, Size::bytes);
        let files = args.files.unwrap_or(files);
        let duration_s = args.duration.unwrap_or(secs);
        let block = args.block.bytes();
        if block == 0 || block > MAX_BLOCK_BYTES {
            bail!(
                "--block must be between 1 byte and {}; got {block}",
                format_size(MAX_BLOCK_BYTES)
            );
        }
        if files == 0 || files > MAX_FILES {
            bail!("--files must be between 1 and {MAX_FILES}; got {files}");
        }
        if !(duration_s.is_finite() && duration_s > 0.0 && duration_s <= 3600.0) {
            bail!("--duration must be between 0 and 3600 seconds; got {duration_s}");
        }
        let blocks_per_file = set_size / u64::from(files) / block;
        if blocks_per_file == 0 {
            bail!(
                "--set-size {} is too small for {files} files of at least one {} block",
                format_size(set_size),
                format_size(block)
            );
        }
        Ok(MixedPlan {
            dir: args.dir.clone(),
            set_size: blocks_per_file * block * u64::from(files),
            files,
            file_size: blocks_per_file * block,
            threads: args.threads,
            block,
            read_percent: args.read_percent,
            duration_s,
            quick: args.quick,
            json: args.json,
            plot: args.plot.clone(),
        })
    }

    pub fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.duration_s)
    }

    pub fn describe(&self) -> String {
        format!(
            "keel bench mixed: {} threads, random {} reads/writes ({}% reads) over {} files \
             of {} (random data), O_DIRECT reads and writes, {} s per variant, in {}",
            self.threads,
            format_size(self.block),
            self.read_percent,
            self.files,
            format_size(self.file_size),
            self.duration_s,
            self.dir.display()
        )
    }
}

pub fn run(args: MixedArgs) -> anyhow::Result<ExitCode> {
    let plan = MixedPlan::resolve(&args)?;
    let vfs = RealVfs;
    check_dir(&vfs, &plan.dir, plan.set_size, "--set-size")?;
    let machine = Machine::for_path(&plan.dir);
    if !plan.json {
        outln!("{}", plan.describe())?;
        outln!("machine: {}\n", machine.describe())?;
    }
    let outcomes = run::run_all(&vfs as &dyn Vfs, &plan)?;
    if plan.json {
        outln!("{}", json(&plan, &machine, &outcomes))?;
    } else {
        out!("{}", text(&outcomes))?;
    }
    if let Some(path) = &plan.plot {
        let series: Vec<plot::Series<'_>> = outcomes
            .iter()
            .filter_map(|o| o.result.as_ref().ok().map(|m| (o.variant, m)))
            .flat_map(|(v, m)| {
                [
                    plot::Series {
                        label: format!("{} reads", v.name()),
                        latency: &m.read_latency,
                    },
                    plot::Series {
                        label: format!("{} writes", v.name()),
                        latency: &m.write_latency,
                    },
                ]
            })
            .collect();
        plot::percentile_svg(path, "mixed random read/write latency", &series)?;
        if !plan.json {
            outln!("\nlatency plot: {}", path.display())?;
        }
    }
    if !plan.json {
        print!("{}", legend());
    }
    Ok(if outcomes.iter().all(|o| o.result.is_err()) {
        eprintln!("error: every run failed");
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

pub fn json(plan: &MixedPlan, machine: &Machine, outcomes: &[Outcome]) -> String {
    let report = serde_json::json!({
        "bench": "mixed",
        "config": plan,
        "machine": machine,
        "results": outcomes.iter().map(Outcome::json).collect::<Vec<_>>(),
    });
    serde_json::to_string(&report).expect("serialisable")
}

/// What the text report's words mean.
pub fn legend() -> String {
    legend::legend(
        &[
            (
                "no_sync, fsync_every_write",
                "the variants: O_DIRECT writes left without a sync (they may sit in the \
                 device's volatile cache), and each write followed by fsync (sysbench \
                 --file-fsync-freq=1, fio --fsync=1)",
            ),
            (
                "read MiB/s, write MiB/s",
                "2^20 bytes per second read and written, every read from the device (O_DIRECT)",
            ),
            (
                "reads/s, writes/s",
                "requests per second over the variant's whole run, all threads together",
            ),
            (
                "read/write p50, p99, max µs",
                "one request's latency at that percentile (a write's includes its fsync)",
            ),
        ],
        "docs/toolkit.md#keel-bench-mixed--fsync-under-a-mixed-load",
    )
}

pub fn text(outcomes: &[Outcome]) -> String {
    let mut t = Table::new(&[
        ("variant", Align::Left),
        ("read MiB/s", Align::Right),
        ("write MiB/s", Align::Right),
        ("reads/s", Align::Right),
        ("writes/s", Align::Right),
        ("read p50 µs", Align::Right),
        ("read p99 µs", Align::Right),
        ("write p50 µs", Align::Right),
        ("write p99 µs", Align::Right),
        ("write max µs", Align::Right),
    ]);
    let mut errors = String::new();
    for o in outcomes {
        let mut row = vec![o.variant.name().to_string()];
        match &o.result {
            Ok(m) => {
                let (r, w) = (m.read_latency.summary(), m.write_latency.summary());
                row.extend([
                    number(m.read_mib_per_s, 1),
                    number(m.write_mib_per_s, 1),
                    number(m.reads_per_s, 0),
                    number(m.writes_per_s, 0),
                    number(r.p50_us, 0),
                    number(r.p99_us, 0),
                    number(w.p50_us, 0),
                    number(w.p99_us, 0),
                    number(w.max_us, 0),
                ]);
            }
            Err(e) => {
                row.extend(std::iter::repeat_n("error".to_string(), 9));
                errors.push_str(&format!("* {}: {e}\n", o.variant.name()));
            }
        }
        t.push(row);
    }
    let mut out = t.render();
    if !errors.is_empty() {
        out.push_str("\nerrors:\n");
        out.push_str(&errors);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: MixedArgs,
    }

    fn plan(args: &[&str]) -> anyhow::Result<MixedPlan> {
        let cli = Cli::try_parse_from(std::iter::once("mixed").chain(args.iter().copied()))?;
        MixedPlan::resolve(&cli.args)
    }

    #[test]
    fn defaults_and_refusals() {
        let p = plan(&[]).unwrap();
        assert_eq!(
            (p.set_size, p.files, p.block, p.read_percent),
            (1 << 30, 16, 16384, 60)
        );
        let q = plan(&["--quick", "--set-size", "1M", "--files", "3"]).unwrap();
        assert_eq!((q.files, q.file_size), (3, 21 * 16384));
        for bad in [
            &["--set-size", "0"][..],
            &["--files", "0"],
            &["--block", "0"],
            &["--threads", "0"],
            &["--duration", "0"],
            &["--read-percent", "101"],
            &["--set-size", "16K", "--files", "2"],
        ] {
            assert!(plan(bad).is_err(), "{bad:?}");
        }
    }
}
