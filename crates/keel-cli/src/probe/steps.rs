//! The probe's five steps, each as a list of runs the [`Planner`] scales:
//! what every run costs (the model the budget is planned with) and how it
//! is run at the scale the planner chose.

use std::path::Path;

use keel::io::{Vfs, WriteMethod};

use super::budget::{Planner, Quantity, Rates, RunCost, Step, Term};
use super::{
    FLOOR_METHODS, FLOOR_SIZES, MANY_THREADS, MANY_THREADS_SIZE_BYTES, MIXED_FILES, MIXED_THREADS,
    PROBE_SIZES, SCALING_SIZE_BYTES, SCALING_WRITERS,
};
use crate::bench::report::{Machine, Prealloc};
use crate::bench::{methods, mixed, mmap, sizes};

/// Bytes of one fill-random transaction: 100 puts of a 16-byte key and a
/// 100-byte value.
const MMAP_TX_BYTES: u64 = 11_600;
/// Cost of one small buffered `pwrite` (a `small_writes` put), generous.
const SMALL_WRITE_S: f64 = 5e-6;
/// Starting a writer thread with its payload pool (filled with random
/// bytes) and its latency recorder: 128 threads took 0.6–0.8 s on the
/// project's 2-vCPU VM while others were building.
const THREAD_START_S: f64 = 5e-3;

/// The quantities the budget scales, each with its nominal value (the
/// probe's defaults), its minimum, and the user's value when given.
#[derive(Clone, Copy, Debug)]
pub struct Quantities {
    /// Commits per durable-floor run.
    pub floor_count: Quantity,
    /// Bytes per write size and mode, and per parallel-scaling run.
    pub total_bytes: Quantity,
    /// Seconds per mixed-load variant.
    pub mixed_s: Quantity,
    /// Bytes of the mixed load's file set.
    pub mixed_set_bytes: Quantity,
    /// Transactions per fill-random variant.
    pub transactions: Quantity,
    /// Bytes of the region fill-random's random variants write in.
    pub mmap_region_bytes: Quantity,
}

/// Whether `method` waits for the device (a flush or FUA) on every write.
fn syncs(method: WriteMethod) -> bool {
    !matches!(method, WriteMethod::Odirect | WriteMethod::Buffered)
}

fn prep_s_per_byte(r: &Rates, prealloc: Prealloc) -> f64 {
    match prealloc {
        Prealloc::Zerofill => r.bytes_s(1.0),
        Prealloc::None | Prealloc::Fallocate => 0.0,
    }
}

/// The durable floor's runs, in order: per size, per method, per prealloc.
pub fn floor_specs(count: u64) -> Vec<methods::RunSpec> {
    let mut specs = Vec::new();
    for size in FLOOR_SIZES {
        for method in FLOOR_METHODS {
            for prealloc in [Prealloc::Fallocate, Prealloc::Zerofill] {
                specs.push(methods::RunSpec {
                    method,
                    prealloc,
                    writes_per_commit: 1,
                    size_bytes: size,
                    count,
                    file_size_bytes: count * size,
                });
            }
        }
    }
    specs
}

/// Step 2's runs: one writer, every size, buffered then durable.
pub fn size_runs(total_bytes: u64, prealloc: Prealloc) -> Vec<sizes::SizeRun> {
    let mut runs = Vec::new();
    for size in PROBE_SIZES {
        for mode in [sizes::Mode::Buffered, sizes::Mode::Durable] {
            runs.push(sizes::SizeRun {
                series: "sequential",
                writers: 1,
                layout: sizes::Layout::OneFile,
                mode,
                size_bytes: size,
                writes_per_writer: (total_bytes / size).max(1),
                prealloc,
            });
        }
    }
    runs
}

/// Step 3's runs: 1 … 16 writers on one file, 4 on separate files, 128
/// threads of 8 KiB.
pub fn scaling_runs(total_bytes: u64, prealloc: Prealloc) -> Vec<sizes::SizeRun> {
    let run = |series, writers: u32, layout, size: u64| sizes::SizeRun {
        series,
        writers,
        layout,
        mode: sizes::Mode::Durable,
        size_bytes: size,
        writes_per_writer: (total_bytes / size / u64::from(writers)).max(1),
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

/// What every run of `from` and the steps after it costs. A scaling run
/// of `w` writers is priced at one durable write per write / √w: devices
/// range from no parallelism (a disk, a throttled cloud volume) to the
/// 16× this project's VM showed, and the runs of the step go from 1 to 128
/// writers, so the first ones correct the guess before the large ones run.
pub fn costs(from: Step, q: &Quantities, r: &Rates, prealloc: Prealloc) -> Vec<RunCost> {
    let mut out = Vec::new();
    let term = |per_unit_s: f64, quantity: Quantity| Term {
        per_unit_s,
        quantity,
    };
    if from == Step::DurableFloor {
        for spec in floor_specs(1) {
            let size = spec.size_bytes as f64;
            let write = if syncs(spec.method) {
                r.sync_s
            } else {
                r.plain_s
            };
            let per_commit = write + r.bytes_s(size) + size * prep_s_per_byte(r, spec.prealloc);
            out.push(RunCost {
                step: Step::DurableFloor,
                fixed_s: r.file_s(),
                terms: vec![term(per_commit, q.floor_count)],
            });
        }
    }
    let prep = prep_s_per_byte(r, prealloc);
    if matches!(from, Step::DurableFloor | Step::Sizes) {
        for run in size_runs(1, prealloc) {
            let size = run.size_bytes as f64;
            let (per_byte, fixed) = match run.mode {
                sizes::Mode::Buffered => (2.0 * r.bytes_s(1.0), r.file_s() + r.sync_s),
                sizes::Mode::Durable => (
                    r.sync_s / size + r.bytes_s(1.0),
                    r.file_s() + r.sync_s + r.bytes_s(size),
                ),
            };
            out.push(RunCost {
                step: Step::Sizes,
                fixed_s: fixed,
                terms: vec![term(per_byte + prep, q.total_bytes)],
            });
        }
    }
    if from != Step::Mixed && from != Step::Mmap {
        for run in scaling_runs(1, prealloc) {
            let size = run.size_bytes as f64;
            let parallel = f64::from(run.writers).sqrt();
            out.push(RunCost {
                step: Step::Scaling,
                fixed_s: r.file_s() * f64::from(run.file_count())
                    + THREAD_START_S * f64::from(run.writers)
                    + r.sync_s,
                terms: vec![term(
                    r.sync_s / size / parallel + r.bytes_s(1.0) + prep,
                    q.total_bytes,
                )],
            });
        }
    }
    if from != Step::Mmap {
        out.push(RunCost {
            step: Step::Mixed,
            // Every thread finishes the request it is in when time is up.
            fixed_s: r.file_s() * f64::from(MIXED_FILES)
                + 2.0 * f64::from(MIXED_THREADS) * r.sync_s,
            terms: vec![
                term(2.0, q.mixed_s),
                // Random bytes made, written and synced.
                term(2.0 * r.bytes_s(1.0), q.mixed_set_bytes),
            ],
        });
    }
    out.extend(mmap_costs(q, r, prealloc));
    out
}

/// The five fill-random variants, one run each: one sync per transaction,
/// two for `mmap_random` (`msync` and `fdatasync`); the random variants
/// prepare a region, the others a log of every transaction.
fn mmap_costs(q: &Quantities, r: &Rates, prealloc: Prealloc) -> Vec<RunCost> {
    let tx = MMAP_TX_BYTES as f64;
    let prep = prep_s_per_byte(r, prealloc);
    mmap::Variant::ALL
        .into_iter()
        .map(|v| {
            let per_tx = match v {
                mmap::Variant::Sequential => r.sync_s + r.bytes_s(tx),
                mmap::Variant::SmallWrites => r.sync_s + 100.0 * SMALL_WRITE_S,
                mmap::Variant::Random4k => r.sync_s + r.bytes_s(tx),
                mmap::Variant::MmapRandom => 2.0 * r.sync_s + r.bytes_s(tx),
                // The map's pages are faulted in before the timed loop.
                mmap::Variant::SequentialReadMap => r.sync_s + 2.0 * r.bytes_s(tx),
            };
            let (log_prep, region_prep) = if v.random() {
                (0.0, prep)
            } else {
                (tx * prep, 0.0)
            };
            RunCost {
                step: Step::Mmap,
                fixed_s: r.file_s(),
                terms: vec![
                    Term {
                        per_unit_s: per_tx + log_prep,
                        quantity: q.transactions,
                    },
                    Term {
                        per_unit_s: region_prep,
                        quantity: q.mmap_region_bytes,
                    },
                ],
            }
        })
        .collect()
}

/// Bytes rounded down to whole 4 KiB blocks (at least one).
pub fn blocks(bytes: f64) -> u64 {
    ((bytes as u64) & !4095).max(4096)
}

const MIXED_BLOCK_BYTES: u64 = 16 << 10;

/// The mixed load's file set at `scale`: whole blocks in every file.
pub fn mixed_set_bytes(q: Quantity, scale: f64) -> u64 {
    let per_file = q.at(scale) as u64 / u64::from(MIXED_FILES);
    (per_file / MIXED_BLOCK_BYTES).max(1) * MIXED_BLOCK_BYTES * u64::from(MIXED_FILES)
}

/// Fill random's region at `scale`: whole pages, room for a transaction.
pub fn mmap_region_bytes(q: Quantity, scale: f64) -> u64 {
    blocks(q.at(scale)).max(MMAP_TX_BYTES.next_multiple_of(4096))
}

/// Step 1: every floor run at the count the planner allows.
pub fn durable_floor(
    vfs: &dyn Vfs,
    dir: &Path,
    machine: &Machine,
    q: &Quantities,
    planner: &mut Planner,
) -> Vec<methods::Outcome> {
    let plan = methods::Plan {
        dir: dir.to_path_buf(),
        file_size_bytes: 0,
        size_bytes: 0,
        count: 0,
        preallocs: vec![Prealloc::Fallocate, Prealloc::Zerofill],
        methods: FLOOR_METHODS.to_vec(),
        splits: vec![1],
        quick: true,
        json: false,
        plot: None,
        vs_fio: false,
        rounds: 1,
    };
    floor_specs(1)
        .into_iter()
        .map(|spec| {
            planner.run(|d| {
                let count = q.floor_count.count_at(d.scale);
                let spec = methods::RunSpec {
                    count,
                    file_size_bytes: count * spec.size_bytes,
                    ..spec
                };
                methods::Outcome::run(vfs, &plan, &spec, None, machine)
            })
        })
        .collect()
}

/// Steps 2 and 3: `runs` (built for the total the planner allows).
pub fn size_step(
    vfs: &dyn Vfs,
    dir: &Path,
    q: &Quantities,
    planner: &mut Planner,
    runs: impl Fn(u64) -> Vec<sizes::SizeRun>,
) -> Vec<sizes::Outcome> {
    let n = runs(1).len();
    (0..n)
        .map(|k| {
            planner.run(|d| {
                let total = blocks(q.total_bytes.at(d.scale));
                sizes::Outcome::run(vfs, dir, &runs(total)[k], false)
            })
        })
        .collect()
}

/// Step 4's mixed random load: 60 % reads of 16 KiB blocks over
/// [`MIXED_FILES`] files, [`MIXED_THREADS`] threads.
pub fn mixed_plan(dir: &Path, q: &Quantities, scale: f64) -> mixed::MixedPlan {
    let block = MIXED_BLOCK_BYTES;
    let file_size = mixed_set_bytes(q.mixed_set_bytes, scale) / u64::from(MIXED_FILES);
    mixed::MixedPlan {
        dir: dir.to_path_buf(),
        set_size: file_size * u64::from(MIXED_FILES),
        files: MIXED_FILES,
        file_size,
        threads: MIXED_THREADS,
        block,
        read_percent: 60,
        duration_s: q.mixed_s.at(scale),
        quick: true,
        json: false,
        plot: None,
    }
}

/// Step 5: every fill-random variant once, each at the scale the planner
/// allows; the plan of the first (the step's counts, unless it fell
/// behind) and the outcomes.
pub fn mmap_step(
    vfs: &dyn Vfs,
    dir: &Path,
    q: &Quantities,
    planner: &mut Planner,
    prealloc: Prealloc,
) -> (mmap::MmapPlan, Vec<mmap::Outcome>) {
    let mut first = None;
    let outcomes = mmap::Variant::ALL
        .into_iter()
        .map(|v| {
            planner.run(|d| {
                let plan = mmap_plan(dir, q, d.scale, prealloc);
                let outcome = mmap::Outcome::run(vfs, &plan, v, 0);
                first.get_or_insert(plan);
                outcome
            })
        })
        .collect();
    let plan = first.unwrap_or_else(|| mmap_plan(dir, q, 1.0, prealloc));
    (plan, outcomes)
}

/// Step 5's fill-random transactions (100 puts of 16-byte keys and
/// 100-byte values), every variant once, in files prepared by `prealloc`.
pub fn mmap_plan(dir: &Path, q: &Quantities, scale: f64, prealloc: Prealloc) -> mmap::MmapPlan {
    mmap::MmapPlan {
        dir: dir.to_path_buf(),
        transactions: q.transactions.count_at(scale),
        puts: 100,
        key_size: 16,
        value_size: 100,
        tx_bytes: MMAP_TX_BYTES,
        region: mmap_region_bytes(q.mmap_region_bytes, scale),
        prealloc,
        variants: mmap::Variant::ALL.to_vec(),
        rounds: 1,
        quick: true,
        json: false,
        plot: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quantities() -> Quantities {
        Quantities {
            floor_count: Quantity::new(2048.0, 8.0, None),
            total_bytes: Quantity::new(64.0 * 1048576.0, 262144.0, None),
            mixed_s: Quantity::new(2.0, 0.1, None),
            mixed_set_bytes: Quantity::new(64.0 * 1048576.0, 8.0 * 1048576.0, None),
            transactions: Quantity::new(1000.0, 10.0, None),
            mmap_region_bytes: Quantity::new(64.0 * 1048576.0, 4.0 * 1048576.0, None),
        }
    }

    /// The model against the run recorded on this project's VM while its
    /// syncs took ~4 ms (2026-11-27: floor 180 s, sizes 82 s, scaling 18 s,
    /// mixed 4.7 s, fill random 44 s; 329 s in all).
    #[test]
    fn the_model_prices_a_slow_sync_machine_on_the_long_side() {
        let r = Rates {
            sync_s: 3.6e-3,
            plain_s: 80e-6,
            fill_bytes_per_s: 400e6,
        };
        let all = costs(Step::DurableFloor, &quantities(), &r, Prealloc::Zerofill);
        assert_eq!(all.len(), 28 + 14 + 7 + 1 + 5);
        let step = |s: Step| -> f64 { all.iter().filter(|c| c.step == s).map(|c| c.at(1.0)).sum() };
        let floor = step(Step::DurableFloor);
        assert!((150.0..220.0).contains(&floor), "{floor}");
        let sizes = step(Step::Sizes);
        assert!((70.0..110.0).contains(&sizes), "{sizes}");
        let scaling = step(Step::Scaling);
        assert!((10.0..60.0).contains(&scaling), "{scaling}");
        let mmap = step(Step::Mmap);
        assert!((20.0..60.0).contains(&mmap), "{mmap}");
        // At the minimum of everything the probe fits in a few seconds.
        let least: f64 = all.iter().map(|c| c.at(0.0)).sum();
        assert!(least < 4.0, "{least}");
    }

    #[test]
    fn runs_follow_the_chosen_scale() {
        let q = quantities();
        assert_eq!(floor_specs(16).len(), 28);
        let p = mixed_plan(Path::new("."), &q, 0.0);
        assert_eq!((p.set_size, p.duration_s), (8 << 20, 0.1));
        let m = mmap_plan(Path::new("."), &q, 1.0, Prealloc::Zerofill);
        assert_eq!((m.transactions, m.region), (1000, 64 << 20));
        assert_eq!(
            mmap_plan(Path::new("."), &q, 0.0, Prealloc::None).region,
            4 << 20
        );
        assert_eq!(
            size_runs(blocks(262144.0), Prealloc::Zerofill)[0].writes_per_writer,
            64
        );
    }
}
