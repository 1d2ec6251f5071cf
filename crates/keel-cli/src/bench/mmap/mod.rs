//! `keel bench mmap`: the fill-random experiment's raw variants. 10,000
//! transactions, each 100 puts of a random 16-byte key and a 100-byte value
//! (11,600 bytes), every transaction made durable, written five ways:
//! sequentially with one write, as 100 small writes, at random 4 KiB-aligned
//! offsets, through a shared memory map (`msync` + `fdatasync`), and
//! sequentially while a read-only map of the file is held open.

mod run;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use clap::Args;
use keel::io::RealVfs;
use serde::Serialize;

use crate::bench::report::{
    check_dir, legend, median, number, plot, Align, Machine, Prealloc, Table,
};
use crate::util::{format_size, Size};
pub use run::{Outcome, Variant};

const DEFAULT_TRANSACTIONS: u64 = 10_000;
const QUICK_TRANSACTIONS: u64 = 500;
const DEFAULT_REGION_BYTES: u64 = 512 << 20;
const QUICK_REGION_BYTES: u64 = 64 << 20;
const MAX_TRANSACTIONS: u64 = 100_000_000;
const MAX_TX_BYTES: u64 = 64 << 20;
const MAX_REGION_BYTES: u64 = 1 << 40;

/// Flags of `keel bench mmap`.
#[derive(Args, Debug, Clone)]
pub struct MmapArgs {
    /// Transactions per variant [default: 10000, 500 with --quick]
    #[arg(long)]
    pub transactions: Option<u64>,
    /// Puts per transaction
    #[arg(long, default_value_t = 100)]
    pub puts: u64,
    /// Bytes of one key
    #[arg(long, default_value_t = 16)]
    pub key_size: u64,
    /// Bytes of one value
    #[arg(long, default_value_t = 100)]
    pub value_size: u64,
    /// The region random-offset variants write into [default: 512M, 64M
    /// with --quick]
    #[arg(long, value_name = "SIZE")]
    pub region: Option<Size>,
    /// How the files are prepared: `none` (a sparse file, as the original),
    /// `fallocate`, `zerofill`
    #[arg(long, value_enum, default_value_t = Prealloc::None)]
    pub prealloc: Prealloc,
    /// Run every variant this many times, each round in a rotated order;
    /// "× sequential" is then the median of per-round ratios, which cancels
    /// the machine's drift between variants
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub rounds: u32,
    /// Only these variants, comma-separated [default: all]
    #[arg(long, value_delimiter = ',', value_enum, value_name = "VARIANT,...")]
    pub variants: Vec<Variant>,
    /// Directory for the bench files (created if missing; files are removed
    /// afterwards, also on Ctrl-C)
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// A short run: 500 transactions per variant, a 64 MiB region
    #[arg(long)]
    pub quick: bool,
    /// Print one JSON object on stdout instead of a table
    #[arg(long)]
    pub json: bool,
    /// Also draw the latency distribution of every variant into this SVG
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
}

/// The checked configuration.
#[derive(Clone, Debug, Serialize)]
pub struct MmapPlan {
    pub dir: PathBuf,
    pub transactions: u64,
    pub puts: u64,
    pub key_size: u64,
    pub value_size: u64,
    /// Bytes of one transaction: `puts × (key_size + value_size)`.
    pub tx_bytes: u64,
    pub region: u64,
    pub prealloc: Prealloc,
    pub variants: Vec<Variant>,
    pub rounds: u32,
    pub quick: bool,
    #[serde(skip)]
    pub json: bool,
    #[serde(skip)]
    pub plot: Option<PathBuf>,
}

impl MmapPlan {
    pub fn resolve(args: &MmapArgs) -> anyhow::Result<MmapPlan> {
        let (tx, region) = if args.quick {
            (QUICK_TRANSACTIONS, QUICK_REGION_BYTES)
        } else {
            (DEFAULT_TRANSACTIONS, DEFAULT_REGION_BYTES)
        };
        let transactions = args.transactions.unwrap_or(tx);
        let region = args.region.map_or(region, Size::bytes);
        if transactions == 0 || transactions > MAX_TRANSACTIONS {
            bail!("--transactions must be between 1 and {MAX_TRANSACTIONS}; got {transactions}");
        }
        if args.puts == 0 || args.key_size + args.value_size == 0 {
            bail!("--puts and --key-size + --value-size must be at least 1");
        }
        let tx_bytes = args
            .puts
            .checked_mul(args.key_size + args.value_size)
            .filter(|&b| b <= MAX_TX_BYTES)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "a transaction of --puts × (--key-size + --value-size) must be at most {}",
                    format_size(MAX_TX_BYTES)
                )
            })?;
        if region < tx_bytes || region > MAX_REGION_BYTES {
            bail!(
                "--region must hold one transaction ({tx_bytes} bytes) and be at most {}; got {region}",
                format_size(MAX_REGION_BYTES)
            );
        }
        let variants = if args.variants.is_empty() {
            Variant::ALL.to_vec()
        } else {
            let mut v = Vec::new();
            for &x in &args.variants {
                if !v.contains(&x) {
                    v.push(x);
                }
            }
            v
        };
        Ok(MmapPlan {
            dir: args.dir.clone(),
            transactions,
            puts: args.puts,
            key_size: args.key_size,
            value_size: args.value_size,
            tx_bytes,
            region,
            prealloc: args.prealloc,
            variants,
            rounds: args.rounds,
            quick: args.quick,
            json: args.json,
            plot: args.plot.clone(),
        })
    }

    /// Bytes the sequential variants write: every transaction, one after
    /// the other.
    pub fn log_bytes(&self) -> u64 {
        self.transactions * self.tx_bytes
    }

    /// The file size one variant needs.
    pub fn file_bytes(&self, v: Variant) -> u64 {
        if v.random() {
            self.region
        } else {
            self.log_bytes()
        }
    }

    pub fn describe(&self) -> String {
        format!(
            "keel bench mmap: {} transactions of {} puts × ({} B key + {} B value) = {} B, each \
             made durable; random variants in a {} region; prealloc {}; in {}",
            self.transactions,
            self.puts,
            self.key_size,
            self.value_size,
            self.tx_bytes,
            format_size(self.region),
            self.prealloc.name(),
            self.dir.display()
        )
    }
}

pub fn run(args: MmapArgs) -> anyhow::Result<ExitCode> {
    let plan = MmapPlan::resolve(&args)?;
    let vfs = RealVfs;
    let needed = plan.variants.iter().map(|&v| plan.file_bytes(v)).max();
    check_dir(
        &vfs,
        &plan.dir,
        needed.unwrap_or(0),
        "--region or --transactions",
    )?;
    let machine = Machine::for_path(&plan.dir);
    if !plan.json {
        outln!("{}", plan.describe())?;
        outln!("machine: {}\n", machine.describe())?;
    }
    let outcomes = run_rounds(&vfs, &plan);
    if plan.json {
        outln!("{}", json(&plan, &machine, &outcomes))?;
    } else {
        out!("{}", text(&plan, &outcomes))?;
    }
    if let Some(path) = &plan.plot {
        let series: Vec<plot::Series<'_>> = outcomes
            .iter()
            .filter_map(|o| {
                Some(plot::Series {
                    label: if plan.rounds > 1 {
                        format!("{} #{}", o.variant.name(), o.round + 1)
                    } else {
                        o.variant.name().to_string()
                    },
                    latency: &o.result.as_ref().ok()?.latency,
                })
            })
            .collect();
        plot::percentile_svg(path, "transaction latency (fill random, raw)", &series)?;
        if !plan.json {
            outln!("\nlatency plot: {}", path.display())?;
        }
    }
    if !plan.json {
        print!("{}", legend(&plan));
    }
    Ok(if outcomes.iter().all(|o| o.result.is_err()) {
        eprintln!("error: every run failed");
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Every variant, `plan.rounds` times; round `r` starts at variant `r`
/// (mod the count), so no variant always runs first.
pub fn run_rounds(vfs: &dyn keel::io::Vfs, plan: &MmapPlan) -> Vec<Outcome> {
    let n = plan.variants.len();
    let mut outcomes = Vec::new();
    for round in 0..plan.rounds {
        for k in 0..n {
            let v = plan.variants[(k + round as usize) % n];
            outcomes.push(Outcome::run(vfs, plan, v, round));
        }
    }
    outcomes
}

/// Per variant: its tx/s in each round, and its time per transaction over
/// `sequential`'s in the same round (adjacent in time), with medians.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub variant: Variant,
    pub tx_per_s: Vec<f64>,
    pub median_tx_per_s: Option<f64>,
    pub vs_sequential: Vec<f64>,
    pub median_vs_sequential: Option<f64>,
}

pub fn summarize(plan: &MmapPlan, outcomes: &[Outcome]) -> Vec<Summary> {
    let tx = |v: Variant, r: u32| {
        outcomes
            .iter()
            .find(|o| o.variant == v && o.round == r)
            .and_then(|o| o.result.as_ref().ok())
            .map(|m| m.tx_per_s)
    };
    plan.variants
        .iter()
        .map(|&v| {
            let tx_per_s: Vec<f64> = (0..plan.rounds).filter_map(|r| tx(v, r)).collect();
            let vs_sequential: Vec<f64> = (0..plan.rounds)
                .filter_map(|r| Some(tx(Variant::Sequential, r)? / tx(v, r)?))
                .collect();
            Summary {
                variant: v,
                median_tx_per_s: median(&tx_per_s),
                median_vs_sequential: median(&vs_sequential),
                tx_per_s,
                vs_sequential,
            }
        })
        .collect()
}

pub fn json(plan: &MmapPlan, machine: &Machine, outcomes: &[Outcome]) -> String {
    let report = serde_json::json!({
        "bench": "mmap",
        "config": plan,
        "machine": machine,
        "results": outcomes.iter().map(Outcome::json).collect::<Vec<_>>(),
        "summary": summarize(plan, outcomes),
    });
    serde_json::to_string(&report).expect("serialisable")
}

/// What the text report's words mean.
pub fn legend(plan: &MmapPlan) -> String {
    let mut terms = vec![
        (
            "variant, how",
            "how a transaction's bytes reach the file, and the calls one transaction makes; each \
             variant writes into a fresh file and makes every transaction durable",
        ),
        (
            "total ms, tx/s, ops/s",
            "the timed loop's wall time, transactions per second, and puts per second (100 per \
             transaction by default)",
        ),
        (
            "× sequential",
            "how many times longer a transaction takes than with `sequential` in the same round",
        ),
        (
            "p50, p99, max µs",
            "one transaction's latency, its sync included, at that percentile",
        ),
    ];
    if plan.rounds > 1 {
        terms.push((
            "round, medians",
            "round r runs the variants starting at the r-th, so none always runs first; the \
             medians are across rounds",
        ));
    }
    legend::legend(
        &terms,
        "docs/toolkit.md#keel-bench-mmap--fill-random-raw-variants",
    )
}

pub fn text(plan: &MmapPlan, outcomes: &[Outcome]) -> String {
    let rounds = plan.rounds > 1;
    let mut headers = vec![("variant", Align::Left), ("how", Align::Left)];
    if rounds {
        headers.push(("round", Align::Right));
    }
    headers.extend([
        ("total ms", Align::Right),
        ("tx/s", Align::Right),
        ("ops/s", Align::Right),
        ("× sequential", Align::Right),
        ("p50 µs", Align::Right),
        ("p99 µs", Align::Right),
        ("max µs", Align::Right),
    ]);
    let mut t = Table::new(&headers);
    let base = |round: u32| {
        outcomes
            .iter()
            .find(|o| o.variant == Variant::Sequential && o.round == round)
            .and_then(|o| o.result.as_ref().ok())
            .map(|m| m.tx_per_s)
    };
    let mut errors = String::new();
    let mut sorted: Vec<&Outcome> = outcomes.iter().collect();
    sorted.sort_by_key(|o| (plan.variants.iter().position(|&v| v == o.variant), o.round));
    for o in sorted {
        let mut row = vec![o.variant.name().to_string(), o.variant.how().to_string()];
        if rounds {
            row.push((o.round + 1).to_string());
        }
        match &o.result {
            Ok(m) => {
                let s = m.latency.summary();
                row.extend([
                    number(m.total_ms, 0),
                    number(m.tx_per_s, 0),
                    number(m.ops_per_s, 0),
                    base(o.round).map_or(String::new(), |b| format!("{:.2}", b / m.tx_per_s)),
                    number(s.p50_us, 0),
                    number(s.p99_us, 0),
                    number(s.max_us, 0),
                ]);
            }
            Err(e) => {
                row.extend(std::iter::repeat_n("error".to_string(), 7));
                errors.push_str(&format!("* {}: {e}\n", o.variant.name()));
            }
        }
        t.push(row);
    }
    let mut out = t.render();
    if rounds {
        out.push_str(&format!("\nmedians of {} rounds:\n\n", plan.rounds));
        out.push_str(&medians_table(plan, outcomes).render());
    }
    if !errors.is_empty() {
        out.push_str("\nerrors:\n");
        out.push_str(&errors);
    }
    out
}

/// Each variant's median over the rounds, and its ratio to `sequential`
/// per round.
fn medians_table(plan: &MmapPlan, outcomes: &[Outcome]) -> Table {
    let mut m = Table::new(&[
        ("variant", Align::Left),
        ("median tx/s", Align::Right),
        ("median × sequential", Align::Right),
        ("× sequential per round", Align::Left),
    ]);
    for s in summarize(plan, outcomes) {
        let per_round: Vec<String> = s.vs_sequential.iter().map(|r| format!("{r:.2}")).collect();
        m.push(vec![
            s.variant.name().to_string(),
            s.median_tx_per_s.map_or("error".into(), |x| number(x, 0)),
            s.median_vs_sequential
                .map_or("error".into(), |x| format!("{x:.2}")),
            per_round.join(", "),
        ]);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: MmapArgs,
    }

    fn plan(args: &[&str]) -> anyhow::Result<MmapPlan> {
        let cli = Cli::try_parse_from(std::iter::once("mmap").chain(args.iter().copied()))?;
        MmapPlan::resolve(&cli.args)
    }

    #[test]
    fn defaults_are_the_original_and_bad_input_is_refused() {
        let p = plan(&[]).unwrap();
        assert_eq!(
            (p.transactions, p.tx_bytes, p.region),
            (10_000, 11_600, 512 << 20)
        );
        assert_eq!(p.prealloc, Prealloc::None);
        assert_eq!(p.variants, Variant::ALL);
        assert_eq!(p.rounds, 1);
        assert_eq!(p.file_bytes(Variant::Sequential), 116_000_000);
        for bad in [
            &["--transactions", "0"][..],
            &["--puts", "0"],
            &["--region", "4K"],
            &["--prealloc", "sparse"],
            &["--variants", "nope"],
            &["--rounds", "0"],
        ] {
            assert!(plan(bad).is_err(), "{bad:?}");
        }
    }
}

#[cfg(test)]
mod summary_tests {
    use super::*;
    use crate::bench::report::LatencyRecorder;

    fn outcome(variant: Variant, round: u32, tx_per_s: f64) -> Outcome {
        Outcome {
            variant,
            round,
            transactions: 100,
            result: Ok(run::Measured {
                total_ms: 1.0,
                tx_per_s,
                ops_per_s: tx_per_s * 100.0,
                latency: LatencyRecorder::new(),
            }),
        }
    }

    #[test]
    fn ratios_are_taken_within_a_round_and_medians_across() {
        let cli = <MmapPlanCli as clap::Parser>::try_parse_from([
            "mmap",
            "--rounds",
            "3",
            "--variants",
            "sequential,mmap_random",
        ])
        .unwrap();
        let plan = MmapPlan::resolve(&cli.args).unwrap();
        let outcomes = vec![
            outcome(Variant::Sequential, 0, 1000.0),
            outcome(Variant::MmapRandom, 0, 500.0),
            outcome(Variant::Sequential, 1, 2000.0),
            outcome(Variant::MmapRandom, 1, 500.0),
            outcome(Variant::Sequential, 2, 900.0),
            outcome(Variant::MmapRandom, 2, 300.0),
        ];
        let s = summarize(&plan, &outcomes);
        assert_eq!(s[0].median_vs_sequential, Some(1.0));
        assert_eq!(s[1].vs_sequential, [2.0, 4.0, 3.0]);
        assert_eq!(s[1].median_vs_sequential, Some(3.0));
        assert_eq!(s[1].median_tx_per_s, Some(500.0));
        let text = text(&plan, &outcomes);
        assert!(
            text.contains("medians of 3 rounds") && text.contains("2.00, 4.00, 3.00"),
            "{text}"
        );
    }

    #[derive(clap::Parser)]
    struct MmapPlanCli {
        #[command(flatten)]
        args: MmapArgs,
    }
}
