//! Crash campaign of the store on the fault-injecting file layer.
//!
//! Each seed runs several rounds: open (recover; sometimes with a crash
//! point inside recovery, then again) → check → random transactions and
//! checkpoints while a crash point waits somewhere in the sequence of file
//! operations (or a sync fails with EIO) → crash (power loss or process)
//! → next round. A third of the transactions commit with
//! `Durability::Eventual` (not waited for). After every open the store
//! must equal the model as of the last commit acknowledged durable
//! (`Immediate`), or of one of the commits after it — each `Eventual`
//! commit since, then the one in flight at the crash — whole, never
//! partial, never skipping one; and `check` must find every page
//! accounted for. In a third of the seeds the store also checkpoints in
//! its background thread, triggered every few KiB of records or changed
//! pages, concurrently with the commits. Pages are read through the
//! simulated twin of a memory map (the default); in half of the seeds the
//! page cache is too small for the tree, so most lookups search mapped
//! leaves in place.
//!
//! Crash points are counted by where they stopped the store (phase) and
//! printed. `KEEL_STORE_CRASH_SEEDS=N` runs N seeds (default: the CI
//! amount) from `KEEL_STORE_CRASH_FROM=F` (default 0); `KEEL_STORE_CRASH_SEED=S` replays one seed (the journal's
//! threads make the order of file operations vary a little between runs).

mod seeds;
mod store_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use keel::db::{Database, DbError, Durability, DATA_FILE};
use keel::io::{CrashMode, OpKind, SimVfs, Vfs};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use store_support::*;

const ROUNDS_PER_SEED: usize = 5;
const CI_SEEDS: u64 = 2200;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    /// A commit's journal write or sync.
    Commit,
    /// A journal segment being created or recycled (any time).
    SegmentRecycle,
    /// A checkpoint writing tree and free-list pages, or syncing the data
    /// file.
    CheckpointPages,
    /// A checkpoint writing the meta page.
    MetaSwitch,
    /// Recovery at open.
    Recovery,
    /// After the workload (nothing in flight).
    EndOfRound,
}

#[derive(Default, Debug)]
struct Counts {
    phases: BTreeMap<Phase, u64>,
    rounds: u64,
    power: u64,
    process: u64,
    failed_syncs: u64,
    in_doubt_applied: u64,
    in_doubt_dropped: u64,
    eventual_commits: u64,
    /// Eventual commits found after a crash / lost by it.
    eventual_kept: u64,
    eventual_lost: u64,
    max_depth: usize,
    checkpoints: u64,
    /// Checkpoints the background thread took.
    background_checkpoints: u64,
    /// Parts checkpoints wrote before their last (`fold_bytes`).
    fold_parts: u64,
    /// Pages read through the map, and lookups that searched a mapped
    /// leaf in place.
    mapped_reads: u64,
    searched_in_place: u64,
}

enum Stop {
    Crashed,
    Done,
}

/// Where the crash point stopped the store, from the operation it hit.
fn classify(sim: &SimVfs, during_checkpoint: bool, page_bytes: u64) -> Phase {
    let Some(op) = sim.crash_op() else {
        return Phase::EndOfRound;
    };
    let path = op.path.to_string_lossy();
    let in_journal = path.contains("/journal");
    // Segment preparation: renaming a released segment, creating one,
    // sizing it, writing its header (block 0: appends never write there),
    // syncing the directory.
    let preparing = matches!(
        op.op,
        "rename" | "create" | "fallocate" | "truncate" | "remove" | "fsync directory"
    ) || op.offset == Some(0);
    if in_journal && preparing {
        return Phase::SegmentRecycle;
    }
    if path.ends_with(DATA_FILE) {
        // The meta pages are pages 0 and 1 (syncs count as page work).
        return match op.offset {
            Some(o) if o < 2 * page_bytes => Phase::MetaSwitch,
            _ => Phase::CheckpointPages,
        };
    }
    if during_checkpoint {
        // The journal release (and what it sets off) inside a checkpoint.
        return Phase::SegmentRecycle;
    }
    Phase::Commit
}

/// Verify the reopened store against the model: it must equal `acked`
/// (the last state acknowledged durable) or one of `after` (the states
/// after each later commit, in order: `Eventual` ones, then the one in
/// flight). Returns the model to go on with.
fn verify(
    db: &Database,
    acked: Tables,
    after: Vec<Tables>,
    c: &mut Counts,
) -> Result<Tables, String> {
    let got = dump(&db.begin_read()).map_err(|e| format!("read after open: {e}"))?;
    db.check().map_err(|e| format!("check after open: {e}"))?;
    let n = after.len() as u64;
    if got == acked {
        if n > 0 {
            c.in_doubt_dropped += 1;
            c.eventual_lost += n;
        }
        return Ok(acked);
    }
    if let Some(i) = after.iter().position(|m| *m == got) {
        c.in_doubt_applied += 1;
        c.eventual_kept += i as u64 + 1;
        c.eventual_lost += n - i as u64 - 1;
        return Ok(got);
    }
    match after.last() {
        Some(m) => Err(format!(
            "the store equals neither the acknowledged state ({}) nor any of the {n} after it (the last: {})",
            diff(&got, &acked),
            diff(&got, m)
        )),
        None => Err(format!(
            "lost or changed acknowledged data: {}",
            diff(&got, &acked)
        )),
    }
}

/// Open (or create) the store; with `background`, its checkpoint thread
/// runs every few KiB of records or changed pages; with `small_cache`, a
/// page cache of 16 KiB.
fn open_store(
    vfs: &Arc<dyn Vfs>,
    dir: &Path,
    background: bool,
    small_cache: bool,
) -> Result<Database, DbError> {
    let mut b = builder(Arc::clone(vfs));
    if small_cache {
        b = b.cache_bytes(16 << 10);
    }
    if !background {
        return b.create(dir);
    }
    b.background_checkpoints(true)
        .checkpoint_journal_bytes(8 << 10)
        .checkpoint_dirty_bytes(64 << 10)
        .create(dir)
}

fn run_seed(seed: u64, c: &mut Counts) -> Result<(), String> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let sim = SimVfs::new(seed);
    let vfs: Arc<dyn Vfs> = sim.clone();
    let dir = Path::new("/store");
    let background = rng.random_ratio(1, 3);
    // From the seed, not the generator: the rest of the run stays as it was.
    let small_cache = seed % 2 == 1;
    let open = |vfs: &Arc<dyn Vfs>, dir: &Path| open_store(vfs, dir, background, small_cache);
    let key_space = rng.random_range(100..700);
    let mut acked = Tables::new();
    // States after the commits since `acked`: Eventual ones, and the one
    // in flight at a crash.
    let mut after: Vec<Tables> = Vec::new();
    for round in 0..ROUNDS_PER_SEED {
        // A crash inside recovery, then the real open.
        if round > 0 && rng.random_ratio(1, 3) {
            sim.crash_after_ops(rng.random_range(0..30));
            let opened = open(&vfs, dir);
            if sim.is_down() {
                drop(opened);
                *c.phases.entry(Phase::Recovery).or_default() += 1;
                sim.crash(if rng.random() {
                    CrashMode::PowerLoss
                } else {
                    CrashMode::Process
                });
            } else {
                let db = opened.map_err(|e| format!("round {round}: open: {e}"))?;
                drop(db);
                sim.crash(CrashMode::Process);
            }
        }
        let db = open(&vfs, dir).map_err(|e| format!("round {round}: open: {e}"))?;
        acked = verify(&db, acked, std::mem::take(&mut after), c)
            .map_err(|e| format!("round {round}: {e}"))?;
        c.rounds += 1;

        // The workload, with a crash point (or a failing sync) armed.
        let page_bytes = db.stats().page_size as u64;
        let targeted = rng.random_ratio(1, 3);
        let fail_sync = rng.random_ratio(1, 10);
        if fail_sync {
            sim.fail_after(OpKind::Sync, rng.random_range(0..12), libc::EIO);
        }
        if !targeted {
            sim.crash_after_ops(rng.random_range(0..120));
        }
        let txns = rng.random_range(5..40);
        let mut during_checkpoint = false;
        // File operations the last checkpoint took: targeted crash points
        // aim at the end of the next one, where the meta switch is.
        let mut last_ckpt_ops = 8u64;
        let mut stop = Stop::Done;
        let mut explicit = 0;
        for _ in 0..txns {
            let durability = if rng.random_ratio(1, 3) {
                Durability::Eventual
            } else {
                Durability::Immediate
            };
            let latest = after.last().unwrap_or(&acked);
            let out = match random_txn(&db, latest, &mut rng, key_space, durability) {
                Ok(out) => out,
                // A read inside the transaction hit the crash (a journal
                // thread reached the crash point meanwhile): nothing was
                // submitted.
                Err(_) if sim.is_down() => {
                    stop = Stop::Crashed;
                    break;
                }
                Err(e) => return Err(e),
            };
            match out {
                Outcome::Committed(m) if durability == Durability::Eventual => {
                    c.eventual_commits += 1;
                    after.push(m);
                }
                // Durable, and so is every commit before it.
                Outcome::Committed(m) => {
                    acked = m;
                    after.clear();
                }
                Outcome::Aborted | Outcome::Refused => {}
                Outcome::InDoubt(m) => {
                    after.push(m);
                    stop = Stop::Crashed;
                    break;
                }
            }
            if sim.is_down() {
                stop = Stop::Crashed;
                break;
            }
            if rng.random_ratio(1, 4) {
                if targeted {
                    let n = if rng.random() {
                        last_ckpt_ops.saturating_sub(rng.random_range(1..5))
                    } else {
                        rng.random_range(0..=last_ckpt_ops)
                    };
                    sim.crash_after_ops(n);
                }
                during_checkpoint = true;
                let ops_before = sim.op_count();
                let r = db.checkpoint();
                if sim.is_down() || r.is_err() {
                    stop = Stop::Crashed;
                    break;
                }
                during_checkpoint = false;
                explicit += u64::from(r.is_ok_and(|l| l.is_some()));
                last_ckpt_ops = (sim.op_count() - ops_before).max(2);
                if targeted {
                    sim.crash_after_ops(u64::MAX);
                }
            }
        }
        if let Ok(t) = db.tree_stats() {
            c.max_depth = c.max_depth.max(t.depth);
        }
        let stats = db.stats();
        let taken = stats.checkpoints;
        c.checkpoints += taken;
        c.fold_parts += stats.fold_parts;
        c.searched_in_place += stats.cache.searched_in_place;
        c.background_checkpoints += taken.saturating_sub(explicit);
        if matches!(stop, Stop::Crashed) && !sim.is_down() {
            // A failed sync stopped the store (fail-stop), not a crash.
            c.failed_syncs += 1;
        }
        let phase = match stop {
            Stop::Crashed if sim.is_down() => classify(&sim, during_checkpoint, page_bytes),
            // A failed sync poisoned the store: the crash comes after.
            Stop::Crashed => Phase::Commit,
            Stop::Done => Phase::EndOfRound,
        };
        *c.phases.entry(phase).or_default() += 1;
        // Stop the world at once: nothing more reaches the file layer.
        sim.crash_after_ops(0);
        drop(db);
        if rng.random() {
            c.power += 1;
            sim.crash(CrashMode::PowerLoss);
        } else {
            c.process += 1;
            sim.crash(CrashMode::Process);
        }
    }
    // The last round's crash, recovered and checked.
    let db = open(&vfs, dir).map_err(|e| format!("final open: {e}"))?;
    verify(&db, acked, after, c).map_err(|e| format!("final: {e}"))?;
    c.mapped_reads += sim.stats().mapped_reads;
    Ok(())
}

#[test]
fn store_survives_crashes() {
    let seeds = seeds::from_env("KEEL_STORE_CRASH", CI_SEEDS);
    let started = std::time::Instant::now();
    let mut c = Counts::default();
    for &seed in &seeds {
        if let Err(e) = run_seed(seed, &mut c) {
            panic!(
                "seed {seed}: {e}  (replay: KEEL_STORE_CRASH_SEED={seed} cargo test --release --test store_crash)"
            );
        }
    }
    let total: u64 = c.phases.values().sum();
    println!(
        "store crash campaign: {} seeds, {total} crash points in {:.1} s; by phase {:?}; {c:?}",
        seeds.len(),
        started.elapsed().as_secs_f64(),
        c.phases
    );
    if seeds.len() as u64 >= CI_SEEDS {
        assert!(total >= 10_000, "{total} crash points");
        for p in [
            Phase::Commit,
            Phase::SegmentRecycle,
            Phase::CheckpointPages,
            Phase::MetaSwitch,
            Phase::Recovery,
        ] {
            let n = c.phases.get(&p).copied().unwrap_or(0);
            assert!(n >= 500, "only {n} crash points in {p:?}: {:?}", c.phases);
        }
        assert!(c.max_depth >= 3, "{c:?}");
        assert!(c.in_doubt_applied > 0 && c.in_doubt_dropped > 0, "{c:?}");
        assert!(c.eventual_kept > 0 && c.eventual_lost > 0, "{c:?}");
        assert!(c.background_checkpoints >= 500, "{c:?}");
        assert!(c.fold_parts >= 500, "{c:?}");
        assert!(c.mapped_reads >= 10_000, "{c:?}");
        assert!(c.searched_in_place >= 1_000, "{c:?}");
    }
}
