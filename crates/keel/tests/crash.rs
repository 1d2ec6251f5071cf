//! Randomized, chained crash tests of the journal on the fault-injecting
//! file layer.
//!
//! Each seed runs several rounds: open (recover) → check → append from
//! several threads (with rollovers, releases, truncations) while a crash
//! point waits somewhere in the sequence of file operations → crash (power
//! loss or process) → next round. Every recovery must return exactly a
//! gap-free prefix of the append order holding every acknowledged record,
//! byte for byte, and nothing that was never appended.
//!
//! `KEEL_CRASH_SEEDS=N` runs N seeds (default: the CI amount) from
//! `KEEL_CRASH_FROM=F` (default 0);
//! `KEEL_CRASH_SEED=S` replays one seed; a failure prints the seed.

mod seeds;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use keel::io::{CrashMode, OpKind, SimVfs, Vfs, WriteMethod};
use keel::journal::{BatchStart, Journal, JournalError, JournalOptions, Lsn, RecoveryMode};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const ROUNDS_PER_SEED: usize = 8;
const CI_SEEDS: u64 = 3200;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Append,
    /// An append crash in a round where writes overlapped (several in
    /// flight at once).
    AppendOverlapped,
    Rollover,
    Recycle,
    Recovery,
    Truncate,
    EndOfRound,
}

#[derive(Default)]
struct Model {
    /// Records known durable (recovered at the last open).
    durable: BTreeMap<Lsn, Vec<u8>>,
    /// Acknowledged this round.
    acked: BTreeMap<Lsn, Vec<u8>>,
    /// Submitted this round (acknowledged or not), by LSN.
    submitted: BTreeMap<Lsn, Vec<u8>>,
    /// Records ≤ this may be gone (released).
    released: Lsn,
    /// Every record ever recovered, minus truncated ones: a released
    /// segment not yet recycled may legitimately come back at recovery.
    history: BTreeMap<Lsn, Vec<u8>>,
    /// A truncation that may or may not have happened (crashed inside).
    truncate_in_doubt: Option<Lsn>,
    /// One line per round so far (what ran, where it crashed), printed
    /// with a failure: a failure found only under some thread timing may
    /// not replay, and then this is all there is to go on.
    trail: Vec<String>,
}

/// What the campaign covered.
#[derive(Default)]
struct Counts {
    /// Crash points by where they stopped the journal.
    phases: BTreeMap<Phase, u64>,
    /// The same, for the power cuts that came in the round after a process
    /// crash (process crash → reopen → append and acknowledge → power
    /// loss): what the process crash left only in the page cache must have
    /// been made durable by the reopen.
    chained: BTreeMap<Phase, u64>,
    /// Rounds in which an injected `fdatasync`/`fsync` failure fired (the
    /// layer may then drop the file's dirty pages, as Linux does).
    failed_sync_rounds: u64,
}

impl Counts {
    fn add(&mut self, phase: Phase, chained: bool) {
        *self.phases.entry(phase).or_default() += 1;
        if chained {
            *self.chained.entry(phase).or_default() += 1;
        }
    }
}

fn options(seed: u64) -> JournalOptions {
    JournalOptions {
        segment_size_bytes: 64 << 10,
        // Segments of 16, 32 and 64 KiB (growing again after every
        // reopen, recycled at their own sizes, made to fit records larger
        // than the next one), except in a quarter of the seeds: all of 64
        // KiB.
        first_segment_size_bytes: if seed / 5 % 4 == 0 {
            64 << 10
        } else {
            16 << 10
        },
        block_size_bytes: 4096,
        max_write_bytes: 16 << 10,
        // A third of the seeds write through the page cache: half of
        // those with `fdatasync`, the rest with a sync inside each write
        // (`O_DSYNC`, `RWF_DSYNC`), whose writes linger in flight like
        // direct ones and are ordered by the journal's sync gate.
        method: Some(if seed % 3 == 0 {
            [
                WriteMethod::Fdatasync,
                WriteMethod::Fdatasync,
                WriteMethod::Odsync,
                WriteMethod::Pwritev2Dsync,
            ][(seed / 27 % 4) as usize]
        } else {
            WriteMethod::OdirectDsync
        }),
        lz4_min_bytes: (seed % 4 == 1).then_some(64),
        writes_in_flight: [1, 2, 4][(seed / 3 % 3) as usize],
        // With one write in flight, a third of the seeds each use every
        // setting; with several, two thirds the default (`Auto`, which then
        // starts every batch on a fresh block) and a third `FreshBlock`.
        batch_start: match (seed / 3 % 3, seed / 9 % 3) {
            (0, 0) => BatchStart::RewriteTail,
            (_, 2) => BatchStart::FreshBlock,
            _ => BatchStart::Auto,
        },
        // Crashes alone must never look like corruption: the strict mode
        // refuses to open exactly when they would.
        recovery_mode: RecoveryMode::RefuseCorruption,
        ..JournalOptions::default()
    }
}

fn payload(rng: &mut SmallRng, max: usize) -> Vec<u8> {
    let len = match rng.random_range(0..10) {
        0..=6 => rng.random_range(1..200),
        7 | 8 => rng.random_range(200..6000),
        _ => rng.random_range(6000..=max),
    };
    let mut v = vec![0u8; len];
    if rng.random_bool(0.5) {
        rng.fill(&mut v[..]);
    } else {
        // Compressible: a short random pattern repeated.
        let pattern: [u8; 7] = rng.random();
        for (i, b) in v.iter_mut().enumerate() {
            *b = pattern[i % 7];
        }
    }
    v
}

/// Check a recovered journal against the model; on success the recovered
/// records become the new durable truth.
fn verify(j: &Journal, m: &mut Model) -> Result<(), String> {
    let recovered: Vec<(Lsn, Vec<u8>)> = j
        .read_from(0)
        .map_err(|e| e.to_string())?
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    for w in recovered.windows(2) {
        if w[1].0 != w[0].0 + 1 {
            return Err(format!("gap in recovered LSNs: {} then {}", w[0].0, w[1].0));
        }
    }
    let got: BTreeMap<Lsn, Vec<u8>> = recovered.into_iter().collect();
    if got.is_empty() {
        // LSNs never restart: with no record left (released and recycled,
        // or truncated away), numbering still goes on above every record
        // the journal ever held (that was not truncated).
        let cut = m.truncate_in_doubt.unwrap_or(Lsn::MAX);
        let floor = m
            .history
            .keys()
            .chain(m.durable.keys())
            .chain(m.acked.keys())
            .filter(|&&l| l <= cut)
            .max();
        if let Some(&floor) = floor {
            if j.next_lsn() <= floor {
                return Err(format!(
                    "empty journal numbers on from {} but lsn {floor} existed",
                    j.next_lsn()
                ));
            }
        }
    }
    if std::env::var_os("KEEL_CRASH_VERBOSE").is_some() {
        eprintln!(
            "recovered {:?}..={:?} (next {}); model: durable {:?}..={:?}, acked {:?}..={:?}, submitted {:?}..={:?}, released {}, truncate in doubt {:?}",
            got.keys().next(), got.keys().last(), j.next_lsn(),
            m.durable.keys().next(), m.durable.keys().last(),
            m.acked.keys().next(), m.acked.keys().last(),
            m.submitted.keys().next(), m.submitted.keys().last(),
            m.released, m.truncate_in_doubt
        );
    }
    let cut = m.truncate_in_doubt.unwrap_or(Lsn::MAX);
    for (lsn, p) in m.durable.iter().chain(m.acked.iter()) {
        if *lsn <= m.released {
            continue;
        }
        match got.get(lsn) {
            Some(g) if g == p => {}
            Some(_) => {
                return Err(format!(
                    "lsn {lsn}: recovered bytes differ from the acknowledged ones"
                ))
            }
            None if *lsn > cut => {}
            None => return Err(format!("acknowledged lsn {lsn} lost")),
        }
    }
    for (lsn, g) in &got {
        let expected = m
            .acked
            .get(lsn)
            .or_else(|| m.submitted.get(lsn))
            .or_else(|| m.durable.get(lsn))
            .or_else(|| m.history.get(lsn).filter(|_| *lsn <= m.released));
        match expected {
            Some(p) if p == g => {}
            Some(_) => {
                return Err(format!(
                    "lsn {lsn}: recovered record is not the one appended"
                ))
            }
            None => {
                return Err(format!(
                    "lsn {lsn}: recovered a record that was never appended (released up to {})",
                    m.released
                ))
            }
        }
    }
    if let (Some(first), true) = (got.keys().next(), m.durable.keys().any(|&l| l > m.released)) {
        if *first > m.released + 1 {
            return Err(format!(
                "journal starts at {first} but only {} was released",
                m.released
            ));
        }
    }
    let expected_next = got.keys().last().map_or(1, |l| l + 1);
    if j.next_lsn() != expected_next {
        return Err(format!(
            "next lsn {} but recovered records end at {}",
            j.next_lsn(),
            expected_next - 1
        ));
    }
    if let Some(cut) = m.truncate_in_doubt {
        if got.keys().last().is_none_or(|&l| l <= cut) {
            m.history.retain(|&l, _| l <= cut);
        }
    }
    m.history.extend(got.iter().map(|(l, p)| (*l, p.clone())));
    m.durable = got;
    m.acked.clear();
    m.submitted.clear();
    m.truncate_in_doubt = None;
    Ok(())
}

fn classify(sim: &SimVfs, truncating: bool) -> Phase {
    if truncating {
        return Phase::Truncate;
    }
    match sim.crash_op() {
        Some(c) if c.op == "rename" => Phase::Recycle,
        Some(c) if matches!(c.op, "create" | "zero-fill" | "fsync directory" | "remove") => {
            Phase::Rollover
        }
        Some(c) if c.op == "write" && c.offset == Some(0) => Phase::Rollover,
        _ => Phase::Append,
    }
}

/// Append from `threads` threads until each did `per_thread` records or
/// hit an error; returns the acknowledged records.
fn append_concurrently(
    j: &Arc<Journal>,
    seed: u64,
    round: usize,
    threads: usize,
    per_thread: usize,
    m: &mut Model,
) {
    let max = j.options().max_record_bytes();
    let submitted = Arc::new(Mutex::new(Vec::new()));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (j, submitted, acked) = (Arc::clone(j), Arc::clone(&submitted), Arc::clone(&acked));
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(
                    seed ^ ((round as u64) << 32) ^ ((t as u64 + 1) * 7919),
                );
                for _ in 0..per_thread {
                    let p = payload(&mut rng, max);
                    let Ok(h) = j.submit(&p) else { return };
                    submitted.lock().unwrap().push((h.lsn(), p.clone()));
                    match h.wait() {
                        Ok(lsn) => acked.lock().unwrap().push((lsn, p)),
                        Err(_) => return,
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("appender thread");
    }
    m.submitted.extend(submitted.lock().unwrap().drain(..));
    m.acked.extend(acked.lock().unwrap().drain(..));
}

fn run_round(
    sim: &Arc<SimVfs>,
    dir: &Path,
    (seed, round): (u64, usize),
    rng: &mut SmallRng,
    m: &mut Model,
    (mode, chained): (CrashMode, bool),
    counts: &mut Counts,
) -> Result<(), String> {
    let opts = options(seed);
    let crash_in_open = rng.random_bool(0.15);
    if crash_in_open {
        sim.crash_after_ops(rng.random_range(0..15));
    }
    let j = match Journal::open(sim.clone(), dir, opts) {
        Ok(j) => Arc::new(j),
        Err(_) if sim.is_down() => {
            counts.add(Phase::Recovery, chained);
            sim.crash(mode);
            return Ok(());
        }
        Err(e) => {
            let scan = keel::journal::inspect(sim.as_ref(), dir).map(|s| {
                let segs: Vec<_> = s
                    .segments
                    .iter()
                    .map(|g| {
                        let recs: Vec<_> = g
                            .records
                            .iter()
                            .map(|r| (r.lsn, r.pos, r.salt, r.flags))
                            .collect();
                        (
                            g.seq,
                            g.header.map(|h| h.base_lsn),
                            g.in_chain,
                            recs,
                            g.end_pos,
                            g.stop.clone(),
                        )
                    })
                    .collect();
                (segs, s.stop, s.valid_after_damage)
            });
            if let Ok(d) = std::env::var("KEEL_CRASH_DUMP") {
                for name in sim.read_dir(dir).unwrap_or_default() {
                    if let Some(bytes) = sim.contents(&dir.join(&name)) {
                        let _ = std::fs::write(format!("{d}/{name}"), bytes);
                    }
                }
            }
            return Err(format!("open failed without a crash: {e}; scan: {scan:?}"));
        }
    };
    sim.crash_after_ops(u64::MAX);
    verify(&j, m)?;
    sim.crash_after_ops(rng.random_range(0..160));
    // Now and then a sync fails: the journal stops, and the next open must
    // not trust what the failed sync left only in the page cache.
    let failing = rng.random_bool(0.1);
    if failing {
        sim.fail_after(OpKind::Sync, rng.random_range(0..6), libc::EIO);
    }
    let failed = |j: &Journal| failing && j.poisoned().is_some();
    let mut truncating = false;
    if rng.random_bool(0.2) {
        // A single-threaded round with a truncation in the middle.
        append_concurrently(&j, seed, round, 1, rng.random_range(1..20), m);
        let first = m
            .durable
            .keys()
            .next()
            .copied()
            .unwrap_or(1)
            .max(m.released + 1);
        let last = j.durable_lsn();
        if last >= first && !sim.is_down() {
            let lsn = rng.random_range(first - 1..=last);
            truncating = true;
            m.truncate_in_doubt = Some(lsn);
            if std::env::var_os("KEEL_CRASH_VERBOSE").is_some() {
                eprintln!("truncate_after({lsn}), durable {last}");
            }
            match j.truncate_after(lsn) {
                Ok(()) => {
                    truncating = false;
                    m.durable.retain(|&l, _| l <= lsn);
                    m.acked.retain(|&l, _| l <= lsn);
                    m.submitted.retain(|&l, _| l <= lsn);
                    m.history.retain(|&l, _| l <= lsn);
                    m.truncate_in_doubt = None;
                }
                Err(JournalError::Poisoned(_)) | Err(JournalError::Io(_))
                    if sim.is_down() || failed(&j) => {}
                Err(e) => return Err(format!("truncate_after({lsn}) failed without a crash: {e}")),
            }
        }
        if !truncating {
            append_concurrently(&j, seed, round + 100, 1, rng.random_range(1..20), m);
        }
    } else {
        let threads = rng.random_range(1..=4);
        if rng.random_bool(0.2) {
            // Segments prepared in the foreground, racing the preparer.
            let bytes = rng.random_range(0..3 * (64 << 10));
            match j.preallocate(bytes) {
                Ok(_) => {}
                Err(_) if sim.is_down() || failed(&j) => {}
                Err(e) => return Err(format!("preallocate failed without a crash: {e}")),
            }
        }
        append_concurrently(&j, seed, round, threads, rng.random_range(1..40), m);
        if rng.random_bool(0.4) && !sim.is_down() {
            let upto = rng.random_range(0..=j.durable_lsn());
            j.release(upto);
            m.released = m.released.max(upto);
            append_concurrently(&j, seed, round + 200, threads, rng.random_range(1..20), m);
        }
    }
    let phase = match sim.is_down() {
        true => match classify(sim, truncating) {
            Phase::Append if j.stats().overlapped_writes > 0 => Phase::AppendOverlapped,
            p => p,
        },
        false => Phase::EndOfRound,
    };
    let line = format!(
        "round {round}: crash {phase:?} {:?} ({mode:?}), sync failure injected {failing}, poisoned {:?}, method {:?}, {:?}, {} in flight, acked {:?}..={:?}, submitted {:?}..={:?}, released {}, durable lsn {}",
        sim.crash_op(),
        j.poisoned().map(|e| e.to_string()),
        j.method(),
        j.options().batch_start,
        j.options().writes_in_flight,
        m.acked.keys().next(),
        m.acked.keys().last(),
        m.submitted.keys().next(),
        m.submitted.keys().last(),
        m.released,
        j.durable_lsn(),
    );
    if std::env::var_os("KEEL_CRASH_VERBOSE").is_some() {
        eprintln!("{line}");
    }
    m.trail.push(line);
    counts.add(phase, chained);
    if failed(&j) {
        counts.failed_sync_rounds += 1;
    }
    drop(j);
    sim.crash(mode);
    Ok(())
}

fn run_seed(seed: u64, counts: &mut Counts) -> Result<(), String> {
    let sim = SimVfs::new(seed);
    // Durable writes linger in flight, so that with several writes in
    // flight a later one can complete before an earlier one, and a crash
    // can catch several at once.
    sim.set_in_flight(0.5);
    // The journal creates its directory (durably) at the first open.
    let dir = PathBuf::from("/data/journal");
    let mut rng = SmallRng::seed_from_u64(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut m = Model::default();
    let mut previous = CrashMode::PowerLoss;
    for round in 0..ROUNDS_PER_SEED {
        // Half the crashes are process crashes, so that a power cut often
        // follows one.
        let mode = if rng.random_bool(0.5) {
            CrashMode::Process
        } else {
            CrashMode::PowerLoss
        };
        let chained = previous == CrashMode::Process && mode == CrashMode::PowerLoss;
        run_round(
            &sim,
            &dir,
            (seed, round),
            &mut rng,
            &mut m,
            (mode, chained),
            counts,
        )
        .map_err(|e| format!("seed {seed} round {round}: {e}\n  {}", m.trail.join("\n  ")))?;
        previous = mode;
    }
    // Final recovery check.
    let j = Journal::open(sim.clone(), &dir, options(seed))
        .map_err(|e| format!("seed {seed}: final open: {e}"))?;
    verify(&j, &mut m).map_err(|e| format!("seed {seed} final: {e}\n  {}", m.trail.join("\n  ")))
}

#[test]
fn randomized_chained_crashes_recover_a_prefix_with_every_ack() {
    let seeds = seeds::from_env("KEEL_CRASH", CI_SEEDS);
    let mut counts = Counts::default();
    let mut failures = Vec::new();
    for &seed in &seeds {
        if let Err(e) = run_seed(seed, &mut counts) {
            eprintln!(
                "FAILED: {e}  (replay: KEEL_CRASH_SEED={seed} cargo test --release --test crash)"
            );
            failures.push(e);
            if failures.len() >= 5 {
                break;
            }
        }
    }
    let points = |c: &BTreeMap<Phase, u64>| -> u64 {
        c.iter()
            .filter(|(p, _)| **p != Phase::EndOfRound)
            .map(|(_, n)| n)
            .sum()
    };
    let (total, chained) = (points(&counts.phases), points(&counts.chained));
    println!("crash points covered per phase over {} seeds:", seeds.len());
    for (phase, n) in &counts.phases {
        let c = counts.chained.get(phase).copied().unwrap_or(0);
        println!("  {phase:?}: {n} (of them power cuts after a process crash: {c})");
    }
    println!("  total crash points (excluding end-of-round crashes): {total}");
    println!("  chained (process crash, reopen, append, then power loss): {chained}");
    println!("  rounds with a failed sync: {}", counts.failed_sync_rounds);
    assert!(
        failures.is_empty(),
        "{} seeds failed; first: {}",
        failures.len(),
        failures[0]
    );
    if seeds.len() as u64 >= CI_SEEDS {
        assert!(total >= 10_000, "only {total} crash points covered");
        assert!(chained >= 1_000, "only {chained} chained crash points");
        assert!(
            counts.failed_sync_rounds > 0,
            "no injected sync failure fired"
        );
        for phase in [
            Phase::Append,
            Phase::AppendOverlapped,
            Phase::Rollover,
            Phase::Recycle,
            Phase::Recovery,
            Phase::Truncate,
        ] {
            assert!(
                counts.phases.get(&phase).copied().unwrap_or(0) > 0,
                "no crash point in phase {phase:?}"
            );
        }
    }
}
