//! What `keel bench sizes` will run: the flags resolved into a list of
//! [`SizeRun`]s, grouped in series (one writer, several writers on one file
//! or on separate files, many threads).

use std::path::PathBuf;

use anyhow::bail;
use keel::io::Vfs;
use serde::Serialize;

use super::SizesArgs;
use crate::bench::report::{check_dir, Prealloc};
use crate::util::{format_size, format_size_approx};

/// The original write-up's sizes: 4 KiB … 16 MiB.
pub const DEFAULT_SIZES: [u64; 11] = [
    4 << 10,
    16 << 10,
    32 << 10,
    64 << 10,
    128 << 10,
    256 << 10,
    1 << 20,
    2 << 20,
    4 << 20,
    8 << 20,
    16 << 20,
];
/// Sizes of the multi-writer series in `--quick` (all sizes otherwise).
const QUICK_PARALLEL_SIZES: [u64; 3] = [4 << 10, 64 << 10, 1 << 20];
/// The original's parallel runs: 4 writers; its many-threads run: 128
/// threads of 8 KiB writes.
const DEFAULT_PARALLEL: u32 = 4;
const DEFAULT_MANY_THREADS: u32 = 128;
const MANY_THREADS_SIZE_BYTES: u64 = 8 << 10;
const DEFAULT_TOTAL_BYTES: u64 = 1 << 30;
const QUICK_TOTAL_BYTES: u64 = 16 << 20;
/// Limits that keep a typo from allocating or running forever.
pub const MAX_WRITERS: i64 = 1024;
const MAX_SIZE_BYTES: u64 = 1 << 30;

/// How writes are made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// `pwrite` into the page cache; after the last write, one `fdatasync`
    /// per file, timed apart (so "buffered" is not just a memcpy).
    Buffered,
    /// `pwrite` on an `O_DIRECT|O_DSYNC` descriptor: every write durable
    /// when it returns.
    Durable,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Buffered => "buffered",
            Mode::Durable => "durable",
        }
    }

    /// What the mode does, for reports.
    pub fn method(self) -> &'static str {
        match self {
            Mode::Buffered => "pwrite64, then one fdatasync",
            Mode::Durable => "pwrite64 (O_DIRECT|O_DSYNC fd)",
        }
    }
}

/// Where several writers write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// One file; writer `w` writes sequentially in its own region.
    OneFile,
    /// One file per writer.
    SeparateFiles,
}

/// One timed run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeRun {
    /// `sequential`, `parallel`, `separate_files` or `threads`.
    pub series: &'static str,
    pub writers: u32,
    pub layout: Layout,
    pub mode: Mode,
    pub size_bytes: u64,
    pub writes_per_writer: u64,
    pub prealloc: Prealloc,
}

impl SizeRun {
    pub fn writes(&self) -> u64 {
        self.writes_per_writer * u64::from(self.writers)
    }

    pub fn total_bytes(&self) -> u64 {
        self.writes() * self.size_bytes
    }

    /// `durable 16 KiB × 4 writers (one file)`.
    pub fn label(&self) -> String {
        let mut s = format!("{} {}", self.mode.name(), format_size(self.size_bytes));
        if self.writers > 1 {
            let layout = match self.layout {
                Layout::OneFile => "one file",
                Layout::SeparateFiles => "separate files",
            };
            s.push_str(&format!(" × {} writers ({layout})", self.writers));
        }
        s
    }

    /// The files this run writes: one, or one per writer.
    pub fn file_count(&self) -> u32 {
        match self.layout {
            Layout::OneFile => 1,
            Layout::SeparateFiles => self.writers,
        }
    }

    pub fn file_name(&self, k: u32) -> String {
        format!(
            "keel-bench-{}-sizes-{}-{}-{}w-{k}.dat",
            std::process::id(),
            self.mode.name(),
            self.size_bytes,
            self.writers
        )
    }
}

/// The checked configuration of one `keel bench sizes` invocation.
#[derive(Clone, Debug)]
pub struct SizesPlan {
    pub dir: PathBuf,
    pub prealloc: Prealloc,
    pub runs: Vec<SizeRun>,
    pub quick: bool,
    pub json: bool,
    pub plot: Option<PathBuf>,
    /// Bytes per size and mode, durable runs and multi-writer runs.
    pub total_bytes: u64,
    /// Bytes per size of the buffered single-writer runs.
    pub buffered_total_bytes: u64,
    /// The kernel's dirty-page limit, when it could be read.
    pub dirty_limit_bytes: Option<u64>,
}

impl SizesPlan {
    pub fn resolve(args: &SizesArgs) -> anyhow::Result<SizesPlan> {
        let dirty_limit_bytes = dirty_limit_bytes();
        let (total_bytes, buffered_total_bytes) = totals(args, dirty_limit_bytes)?;
        let sizes = checked_sizes(args)?;
        let writers = args.parallel.or(args.threads);
        if args.separate_files && writers.is_none() {
            bail!("--separate-files needs --parallel N or --threads N");
        }
        let mut plan = SizesPlan {
            dir: args.dir.clone(),
            prealloc: args.prealloc,
            runs: Vec::new(),
            quick: args.quick,
            json: args.json,
            plot: args.plot.clone(),
            total_bytes,
            buffered_total_bytes,
            dirty_limit_bytes,
        };
        let all_sizes = if sizes.is_empty() {
            DEFAULT_SIZES.to_vec()
        } else {
            sizes.clone()
        };
        let layout = if args.separate_files {
            Layout::SeparateFiles
        } else {
            Layout::OneFile
        };
        plan.add_all_series(args, layout, sizes, all_sizes);
        Ok(plan)
    }

    /// The series `args` ask for (`--parallel`, `--threads`, or by
    /// default sequential, parallel, separate files and many threads).
    fn add_all_series(
        &mut self,
        args: &SizesArgs,
        layout: Layout,
        sizes: Vec<u64>,
        all_sizes: Vec<u64>,
    ) {
        let plan = self;
        match (args.parallel, args.threads) {
            (Some(n), _) => plan.add_series("parallel", n, layout, &all_sizes),
            (None, Some(n)) => {
                let sizes = if sizes.is_empty() {
                    vec![MANY_THREADS_SIZE_BYTES]
                } else {
                    sizes
                };
                plan.add_series("threads", n, layout, &sizes)
            }
            (None, None) => {
                let parallel_sizes = if args.quick && args.sizes.is_empty() {
                    QUICK_PARALLEL_SIZES.to_vec()
                } else {
                    all_sizes.clone()
                };
                plan.add_series("sequential", 1, Layout::OneFile, &all_sizes);
                plan.add_series(
                    "parallel",
                    DEFAULT_PARALLEL,
                    Layout::OneFile,
                    &parallel_sizes,
                );
                plan.add_series(
                    "separate_files",
                    DEFAULT_PARALLEL,
                    Layout::SeparateFiles,
                    &parallel_sizes,
                );
                plan.add_series(
                    "threads",
                    DEFAULT_MANY_THREADS,
                    Layout::OneFile,
                    &[MANY_THREADS_SIZE_BYTES],
                );
            }
        }
    }

    /// Runs for every size, buffered then durable. Each writer makes at
    /// least one write, so a run may write more than the total.
    fn add_series(&mut self, series: &'static str, writers: u32, layout: Layout, sizes: &[u64]) {
        for &size_bytes in sizes {
            for mode in [Mode::Buffered, Mode::Durable] {
                let total = if mode == Mode::Buffered && writers == 1 {
                    self.buffered_total_bytes
                } else {
                    self.total_bytes
                };
                let per_writer = (total / size_bytes / u64::from(writers)).max(1);
                self.runs.push(SizeRun {
                    series,
                    writers,
                    layout,
                    mode,
                    size_bytes,
                    writes_per_writer: per_writer,
                    prealloc: self.prealloc,
                });
            }
        }
    }

    /// Create the directory if missing, and check that it takes files and
    /// has room for the largest run (each run removes its files before the
    /// next starts).
    pub fn check_dir(&self, vfs: &dyn Vfs) -> anyhow::Result<()> {
        let needed = self.runs.iter().map(SizeRun::total_bytes).max();
        check_dir(vfs, &self.dir, needed.unwrap_or(0), "--total")
    }

    /// The header line of the text report.
    pub fn describe(&self) -> String {
        let dirty = self
            .dirty_limit_bytes
            .map_or("unknown".to_string(), format_size_approx);
        format!(
            "keel bench sizes: {} per size and mode ({} for buffered single-writer runs; \
             the kernel's dirty-page limit is {dirty}); buffered = pwrite then one fdatasync, \
             durable = O_DIRECT|O_DSYNC; prealloc {}; in {}",
            format_size_approx(self.total_bytes),
            format_size_approx(self.buffered_total_bytes),
            self.prealloc.name(),
            self.dir.display()
        )
    }
}

/// How many dirty page-cache bytes the kernel lets writers accumulate
/// before it throttles them to the disk's speed: `vm.dirty_bytes`, or
/// `vm.dirty_ratio` % of available memory (the kernel's base is its
/// "dirtyable" memory, close to MemAvailable).
pub fn dirty_limit_bytes() -> Option<u64> {
    let read = |p: &str| -> Option<u64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
    if let Some(bytes) = read("/proc/sys/vm/dirty_bytes").filter(|&b| b > 0) {
        return Some(bytes);
    }
    let ratio = read("/proc/sys/vm/dirty_ratio")?;
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let available_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(available_kib * 1024 / 100 * ratio)
}

/// The bytes each durable and each buffered run writes: `--total`, or
/// the quick or default totals (buffered: at least twice the kernel's
/// dirty limit, so that buffered runs reach the disk).
fn totals(args: &SizesArgs, dirty_limit_bytes: Option<u64>) -> anyhow::Result<(u64, u64)> {
    let (total_bytes, buffered_total_bytes) = match (args.total, args.quick) {
        (Some(t), _) => (t.bytes(), t.bytes()),
        (None, true) => (QUICK_TOTAL_BYTES, QUICK_TOTAL_BYTES),
        (None, false) => {
            let twice_dirty = dirty_limit_bytes.map_or(0, |d| d.saturating_mul(2));
            // Round up to a GiB so that every size divides it.
            let rounded = twice_dirty.div_ceil(1 << 30) << 30;
            (DEFAULT_TOTAL_BYTES, rounded.max(DEFAULT_TOTAL_BYTES))
        }
    };
    if total_bytes == 0 {
        bail!("--total must be at least 1 byte");
    }
    Ok((total_bytes, buffered_total_bytes))
}

/// `--sizes` in bytes, each between 1 byte and [`MAX_SIZE_BYTES`].
fn checked_sizes(args: &SizesArgs) -> anyhow::Result<Vec<u64>> {
    let sizes: Vec<u64> = args.sizes.iter().map(|s| s.bytes()).collect();
    for &s in &sizes {
        if s == 0 || s > MAX_SIZE_BYTES {
            bail!(
                "--sizes: each write size must be between 1 byte and {}; got {s}",
                format_size(MAX_SIZE_BYTES)
            );
        }
    }
    Ok(sizes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: SizesArgs,
    }

    fn plan(args: &[&str]) -> anyhow::Result<SizesPlan> {
        let cli = Cli::try_parse_from(std::iter::once("sizes").chain(args.iter().copied()))?;
        SizesPlan::resolve(&cli.args)
    }

    #[test]
    fn default_runs_every_series() {
        let p = plan(&["--quick"]).unwrap();
        let series: Vec<(&str, u32)> = p.runs.iter().map(|r| (r.series, r.writers)).collect();
        assert_eq!(series.iter().filter(|s| s.0 == "sequential").count(), 22);
        assert!(series.contains(&("parallel", 4)) && series.contains(&("separate_files", 4)));
        assert!(series.contains(&("threads", 128)));
        let t = p.runs.iter().find(|r| r.series == "threads").unwrap();
        assert_eq!((t.size_bytes, t.writes_per_writer), (8192, 16));
        let big = p.runs.iter().find(|r| r.size_bytes == 16 << 20).unwrap();
        assert_eq!(big.writes(), 1);
    }

    #[test]
    fn full_buffered_total_exceeds_the_dirty_limit() {
        let p = plan(&[]).unwrap();
        if let Some(dirty) = p.dirty_limit_bytes {
            assert!(p.buffered_total_bytes >= 2 * dirty);
        }
        let seq_buffered = p
            .runs
            .iter()
            .find(|r| r.series == "sequential" && r.mode == Mode::Buffered)
            .unwrap();
        assert_eq!(seq_buffered.total_bytes(), p.buffered_total_bytes);
        let par = p.runs.iter().find(|r| r.series == "parallel").unwrap();
        assert_eq!(par.total_bytes(), 1 << 30);
    }

    #[test]
    fn chosen_writers_and_sizes() {
        let p = plan(&["--threads", "128", "--size", "8K", "--total", "1M"]).unwrap();
        assert_eq!(p.runs.len(), 2);
        assert_eq!((p.runs[0].writers, p.runs[0].writes_per_writer), (128, 1));
        let s = plan(&["--parallel", "2", "--separate-files", "--sizes", "4K,1M"]).unwrap();
        assert!(s.runs.iter().all(|r| r.layout == Layout::SeparateFiles));
        assert_eq!(s.runs.len(), 4);
        for bad in [
            &["--sizes", "0"][..],
            &["--total", "0"],
            &["--separate-files"],
            &["--parallel", "0"],
            &["--parallel", "2", "--threads", "3"],
            &["--prealloc", "sparse"],
        ] {
            assert!(plan(bad).is_err(), "{bad:?}");
        }
    }
}
