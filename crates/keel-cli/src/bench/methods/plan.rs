//! What `keel bench methods` will run: the flags resolved into a checked
//! plan, and one [`RunSpec`] per (method, prealloc, split).

use std::path::PathBuf;

use anyhow::bail;
use clap::ValueEnum;
use keel::io::{Vfs, WriteMethod};

use super::MethodsArgs;
use crate::util::format_size;

/// The original experiment: a 1 GiB journal, 65,536 commits of 16 KiB.
const DEFAULT_FILE_SIZE_BYTES: u64 = 1 << 30;
const DEFAULT_SIZE_BYTES: u64 = 16 << 10;
const DEFAULT_COUNT: u64 = 65_536;
/// `--quick`: ~0.5 s per durable method on an SSD-backed VM, so that all
/// nine methods finish in well under 20 s.
const QUICK_FILE_SIZE_BYTES: u64 = 32 << 20;
const QUICK_COUNT: u64 = 2_048;
/// `--split`: pg_test_fsync's 1×16, 2×8, 4×4, 8×2, 16×1 KiB.
const SPLITS: [u32; 5] = [1, 2, 4, 8, 16];
/// Limits that keep a typo from allocating or running forever.
pub const MAX_WRITES_PER_COMMIT: i64 = 1024;
const MAX_SIZE_BYTES: u64 = 1 << 30;
const MAX_COUNT: u64 = 1 << 32;

/// `--prealloc` as given on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PreallocArg {
    None,
    Fallocate,
    Zerofill,
    Both,
}

pub use crate::bench::report::Prealloc;

/// One timed run: `count` commits of `size_bytes` with `method` into a
/// fresh file prepared with `prealloc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunSpec {
    pub method: WriteMethod,
    pub prealloc: Prealloc,
    pub writes_per_commit: u32,
    pub size_bytes: u64,
    pub count: u64,
    pub file_size_bytes: u64,
}

impl RunSpec {
    /// Bytes of one write (a commit is `writes_per_commit` of them).
    pub fn write_size_bytes(&self) -> u64 {
        self.size_bytes / u64::from(self.writes_per_commit)
    }

    /// `fdatasync/fallocate`, with `(2 × 8 KiB)` when a commit is split.
    pub fn label(&self) -> String {
        let mut s = format!("{}/{}", self.method, self.prealloc.name());
        if self.writes_per_commit > 1 {
            s.push_str(&format!(
                " ({} × {})",
                self.writes_per_commit,
                format_size(self.write_size_bytes())
            ));
        }
        s
    }

    /// The bench file's name: `keel-bench-<pid>-<method>-<prealloc>-<n>x.dat`.
    /// Method names have no `-`, so the syscall audit can parse it back.
    pub fn file_name(&self) -> String {
        format!(
            "keel-bench-{}-{}-{}-{}x.dat",
            std::process::id(),
            self.method,
            self.prealloc.name(),
            self.writes_per_commit
        )
    }

    /// Free space the file needs: the whole file when preallocated, else
    /// what the commits write.
    pub fn space_needed_bytes(&self) -> u64 {
        match self.prealloc {
            Prealloc::None => self.size_bytes * self.count,
            Prealloc::Fallocate | Prealloc::Zerofill => self.file_size_bytes,
        }
    }
}

/// The checked configuration of one `keel bench methods` invocation.
#[derive(Clone, Debug)]
pub struct Plan {
    pub dir: PathBuf,
    pub file_size_bytes: u64,
    pub size_bytes: u64,
    pub count: u64,
    pub preallocs: Vec<Prealloc>,
    pub methods: Vec<WriteMethod>,
    pub splits: Vec<u32>,
    pub quick: bool,
    pub json: bool,
    pub plot: Option<PathBuf>,
    pub vs_fio: bool,
    pub rounds: u32,
}

impl Plan {
    /// Apply defaults (the original's, or `--quick`'s) and check the flags.
    pub fn resolve(args: &MethodsArgs) -> anyhow::Result<Plan> {
        let (default_file, default_count) = if args.quick {
            (QUICK_FILE_SIZE_BYTES, QUICK_COUNT)
        } else {
            (DEFAULT_FILE_SIZE_BYTES, DEFAULT_COUNT)
        };
        let plan = Plan {
            dir: args.dir.clone(),
            file_size_bytes: args.file_size.map_or(default_file, |s| s.bytes()),
            size_bytes: args.size.map_or(DEFAULT_SIZE_BYTES, |s| s.bytes()),
            count: args.count.unwrap_or(default_count),
            preallocs: match args.prealloc {
                PreallocArg::None => vec![Prealloc::None],
                PreallocArg::Fallocate => vec![Prealloc::Fallocate],
                PreallocArg::Zerofill => vec![Prealloc::Zerofill],
                PreallocArg::Both => vec![Prealloc::Fallocate, Prealloc::Zerofill],
            },
            methods: choose_methods(args),
            splits: if args.split {
                SPLITS.to_vec()
            } else {
                vec![args.writes_per_commit]
            },
            quick: args.quick,
            json: args.json,
            plot: args.plot.clone(),
            vs_fio: args.vs_fio,
            rounds: args.rounds,
        };
        plan.check()?;
        Ok(plan)
    }

    fn check(&self) -> anyhow::Result<()> {
        if self.size_bytes == 0 || self.size_bytes > MAX_SIZE_BYTES {
            bail!(
                "--size must be between 1 byte and {}; got {}",
                format_size(MAX_SIZE_BYTES),
                self.size_bytes
            );
        }
        if self.count == 0 || self.count > MAX_COUNT {
            bail!(
                "--count must be between 1 and {MAX_COUNT}; got {}",
                self.count
            );
        }
        for &n in &self.splits {
            if self.size_bytes % u64::from(n) != 0 {
                bail!(
                    "--size {} cannot be split into {n} equal writes; choose a size that is a \
                     multiple of {n}",
                    self.size_bytes
                );
            }
        }
        let written = self.size_bytes * self.count;
        if written > self.file_size_bytes {
            bail!(
                "--count {} × --size {} = {} does not fit in --file-size {}; raise --file-size \
                 or lower --count",
                self.count,
                format_size(self.size_bytes),
                format_size(written),
                format_size(self.file_size_bytes)
            );
        }
        if self.vs_fio
            && self
                .methods
                .iter()
                .all(|m| super::fio::fio_flags(*m).is_none())
        {
            bail!("--vs-fio compares only fdatasync, odsync and odirect_dsync; none was selected");
        }
        Ok(())
    }

    /// Create the directory if missing, and check that it takes files and
    /// has room for the largest one (each run removes its file before the
    /// next starts).
    pub fn check_dir(&self, vfs: &dyn Vfs) -> anyhow::Result<()> {
        let needed = self.runs().iter().map(RunSpec::space_needed_bytes).max();
        crate::bench::report::check_dir(vfs, &self.dir, needed.unwrap_or(0), "--file-size")
    }

    /// Every run, method by method: each prealloc mode, each split.
    pub fn runs(&self) -> Vec<RunSpec> {
        let mut runs = Vec::new();
        for &method in &self.methods {
            for &prealloc in &self.preallocs {
                for &writes_per_commit in &self.splits {
                    runs.push(RunSpec {
                        method,
                        prealloc,
                        writes_per_commit,
                        size_bytes: self.size_bytes,
                        count: self.count,
                        file_size_bytes: self.file_size_bytes,
                    });
                }
            }
        }
        runs
    }

    /// The header line of the text report.
    pub fn describe(&self) -> String {
        let preallocs: Vec<&str> = self.preallocs.iter().map(|p| p.name()).collect();
        format!(
            "keel bench methods: {} commits of {} into a {} file (prealloc {}) in {}",
            self.count,
            format_size(self.size_bytes),
            format_size(self.file_size_bytes),
            preallocs.join(" and "),
            self.dir.display()
        )
    }
}

fn choose_methods(args: &MethodsArgs) -> Vec<WriteMethod> {
    if !args.methods.is_empty() {
        let mut chosen = Vec::new();
        for &m in &args.methods {
            if !chosen.contains(&m) {
                chosen.push(m);
            }
        }
        return chosen;
    }
    if args.split {
        vec![WriteMethod::Odsync]
    } else if args.vs_fio {
        WriteMethod::ALL
            .into_iter()
            .filter(|m| super::fio::fio_flags(*m).is_some())
            .collect()
    } else {
        WriteMethod::ALL.to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: MethodsArgs,
    }

    fn plan(args: &[&str]) -> anyhow::Result<Plan> {
        let cli = Cli::try_parse_from(std::iter::once("methods").chain(args.iter().copied()))?;
        Plan::resolve(&cli.args)
    }

    #[test]
    fn defaults_are_the_original_experiment() {
        let p = plan(&[]).unwrap();
        assert_eq!(
            (p.file_size_bytes, p.size_bytes, p.count),
            (1 << 30, 16384, 65536)
        );
        assert_eq!(p.preallocs, [Prealloc::Fallocate]);
        assert_eq!(p.methods, WriteMethod::ALL);
        let q = plan(&["--quick", "--count", "100"]).unwrap();
        assert_eq!((q.file_size_bytes, q.count), (32 << 20, 100));
    }

    #[test]
    fn runs_go_method_by_method() {
        let p = plan(&["--methods", "odsync,fsync,odsync", "--prealloc", "both"]).unwrap();
        let runs: Vec<(WriteMethod, Prealloc)> =
            p.runs().iter().map(|r| (r.method, r.prealloc)).collect();
        assert_eq!(
            runs,
            [
                (WriteMethod::Odsync, Prealloc::Fallocate),
                (WriteMethod::Odsync, Prealloc::Zerofill),
                (WriteMethod::Fsync, Prealloc::Fallocate),
                (WriteMethod::Fsync, Prealloc::Zerofill),
            ]
        );
    }

    #[test]
    fn split_and_fio_choose_their_methods() {
        let s = plan(&["--split"]).unwrap();
        assert_eq!(s.methods, [WriteMethod::Odsync]);
        assert_eq!(s.runs().len(), 5);
        assert_eq!(s.runs()[4].write_size_bytes(), 1024);
        assert_eq!(s.runs()[4].label(), "odsync/fallocate (16 × 1 KiB)");
        let f = plan(&["--vs-fio"]).unwrap();
        assert_eq!(
            f.methods,
            [
                WriteMethod::Fdatasync,
                WriteMethod::Odsync,
                WriteMethod::OdirectDsync
            ]
        );
    }

    #[test]
    fn bad_combinations_are_refused() {
        for args in [
            &["--size", "0"][..],
            &["--count", "0"],
            &["--size", "2G"],
            &["--count", "3", "--size", "1M", "--file-size", "2M"],
            &["--writes-per-commit", "5"],
            &["--vs-fio", "--methods", "odirect"],
        ] {
            assert!(plan(args).is_err(), "{args:?}");
        }
        let none = plan(&["--prealloc", "none", "--count", "4"]).unwrap();
        assert_eq!(none.runs()[0].space_needed_bytes(), 4 * 16384);
    }
}
