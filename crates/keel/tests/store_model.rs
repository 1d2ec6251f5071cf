//! The store against a model (a map of tables to ordered maps): seeded
//! random transactions — commits, rollbacks, deletes that empty pages,
//! large values, tables created and dropped, scans — with readers holding
//! old snapshots across later commits and checkpoints (whose pages must not
//! be reused under them), checkpoints, and reopens. Every read must give
//! exactly the model's answer.
//!
//! `KEEL_STORE_SEEDS=N` runs N seeds from `KEEL_STORE_FROM=F` (default 0);
//! `KEEL_STORE_SEED=S` replays one.

mod seeds;
mod store_support;

use std::path::Path;
use std::sync::Arc;

use keel::db::{Database, Durability, ReadTxn};
use keel::io::{CrashMode, SimVfs, Vfs};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use store_support::*;

#[derive(Default, Debug)]
struct Coverage {
    max_depth: usize,
    overflow_values: u64,
    checkpoints: u64,
    recycled_segments: u64,
    reused_pages: u64,
    snapshot_checks: u64,
}

fn run_seed(seed: u64, cov: &mut Coverage) -> Result<(), String> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let sim = SimVfs::new(seed);
    let vfs: Arc<dyn Vfs> = sim.clone();
    let dir = Path::new("/store");
    let mut db: Database = open(&vfs, dir).map_err(|e| e.to_string())?;
    let mut model = Tables::new();
    let mut readers: Vec<(ReadTxn, Tables)> = Vec::new();
    let key_space = rng.random_range(200..900);
    for step in 0..160 {
        let durability = if rng.random_ratio(1, 6) {
            Durability::Eventual
        } else {
            Durability::Immediate
        };
        // Readers see the newest durable commit: the model's state only
        // right after an `Immediate` commit (earlier `Eventual` ones may
        // still be in flight otherwise).
        let out = random_txn(&db, &model, &mut rng, key_space, durability)?;
        if std::env::var_os("KEEL_STORE_VERBOSE").is_some() {
            let what = match &out {
                Outcome::Committed(_) => "committed",
                Outcome::Aborted => "aborted",
                Outcome::Refused => "refused",
                Outcome::InDoubt(_) => "in doubt",
            };
            let s = db.stats();
            eprintln!(
                "step {step}: {durability:?} {what}; published {} checkpoint {} readers {}",
                s.published_lsn,
                s.checkpoint_lsn,
                readers.len()
            );
        }
        let synced = match out {
            Outcome::Committed(m) => {
                model = m;
                durability == Durability::Immediate
            }
            Outcome::Aborted | Outcome::Refused => false,
            Outcome::InDoubt(_) => return Err(format!("step {step}: a commit failed")),
        };
        if synced {
            if rng.random_ratio(1, 8) {
                let r = db.begin_read();
                let got = dump(&r).map_err(|e| e.to_string())?;
                if got != model {
                    return Err(format!("step {step}: read {}", diff(&got, &model)));
                }
            }
            if readers.len() < 3 && rng.random_ratio(1, 10) {
                readers.push((db.begin_read(), model.clone()));
            }
        }
        if !readers.is_empty() && rng.random_ratio(1, 12) {
            let (r, want) = readers.remove(rng.random_range(0..readers.len()));
            let got = dump(&r).map_err(|e| e.to_string())?;
            if got != want {
                return Err(format!("step {step}: old snapshot {}", diff(&got, &want)));
            }
            cov.snapshot_checks += 1;
        }
        if rng.random_ratio(1, 8) {
            let before = db.stats().free_pages;
            db.checkpoint().map_err(|e| e.to_string())?;
            let s = db.stats();
            cov.reused_pages += before.saturating_sub(s.free_pages);
        }
        if readers.is_empty() && rng.random_ratio(1, 40) {
            let t = db.tree_stats().map_err(|e| e.to_string())?;
            cov.max_depth = cov.max_depth.max(t.depth);
            cov.overflow_values = cov.overflow_values.max(t.overflow_values);
            let s = db.stats();
            cov.checkpoints += s.checkpoints;
            cov.recycled_segments += s.journal.segments_recycled;
            if rng.random() {
                db.close().map_err(|e| format!("close: {e}"))?;
                // A clean close leaves nothing to replay, even after a
                // power cut.
                sim.crash(CrashMode::PowerLoss);
            } else {
                drop(db);
                sim.crash(CrashMode::Process);
            }
            db = open(&vfs, dir).map_err(|e| format!("reopen: {e}"))?;
            let got = dump(&db.begin_read()).map_err(|e| e.to_string())?;
            if got != model {
                return Err(format!("step {step}: after reopen {}", diff(&got, &model)));
            }
        }
    }
    for (r, want) in readers.drain(..) {
        let got = dump(&r).map_err(|e| e.to_string())?;
        if got != want {
            return Err(format!("end: old snapshot {}", diff(&got, &want)));
        }
        cov.snapshot_checks += 1;
    }
    db.checkpoint().map_err(|e| e.to_string())?;
    db.check().map_err(|e| format!("check: {e}"))?;
    let t = db.tree_stats().map_err(|e| e.to_string())?;
    cov.max_depth = cov.max_depth.max(t.depth);
    let s = db.stats();
    cov.checkpoints += s.checkpoints;
    cov.recycled_segments += s.journal.segments_recycled;
    db.close().map_err(|e| format!("close: {e}"))?;
    Ok(())
}

#[test]
fn store_equals_the_model() {
    let seeds = seeds::from_env("KEEL_STORE", 40);
    let mut cov = Coverage::default();
    for &seed in &seeds {
        if let Err(e) = run_seed(seed, &mut cov) {
            panic!("seed {seed}: {e}  (replay: KEEL_STORE_SEED={seed} cargo test --release --test store_model)");
        }
    }
    println!("{cov:?}");
    if seeds.len() >= 40 {
        assert!(
            cov.max_depth >= 3,
            "the workload must reach depth 3: {cov:?}"
        );
        assert!(cov.overflow_values > 0, "{cov:?}");
        assert!(cov.checkpoints >= 2, "{cov:?}");
        assert!(cov.recycled_segments > 0, "{cov:?}");
        assert!(cov.reused_pages > 0, "{cov:?}");
        assert!(cov.snapshot_checks > 20, "{cov:?}");
    }
}
