//! Bit flips and garbage planted in segment files, on the fault-injecting
//! file layer: recovery stops at the damage, returns only records that were
//! appended (byte for byte, with consecutive LSNs), keeps every record
//! before a damaged one, and `RecoveryMode::RefuseCorruption` refuses
//! exactly when an intact record follows the damage: records are appended
//! one after another, each made once the one before it was durable, so
//! each later record says the damaged one was durable. Appends then go on
//! and survive a reopen.
//!
//! `KEEL_DAMAGE_SEEDS=N` runs N seeds from `KEEL_DAMAGE_FROM=F` (default 0);
//! `KEEL_DAMAGE_SEED=S` replays one.

mod seeds;

use std::path::PathBuf;

use keel::io::{SimVfs, WriteMethod};
use keel::journal::{self, Journal, JournalError, JournalOptions, Lsn, RecoveryMode};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const CI_SEEDS: u64 = 400;

fn options(mode: RecoveryMode, lz4: bool) -> JournalOptions {
    JournalOptions {
        segment_size_bytes: 64 << 10,
        // Segments of 16, 32 and 64 KiB.
        first_segment_size_bytes: 16 << 10,
        block_size_bytes: 4096,
        max_write_bytes: 16 << 10,
        method: Some(WriteMethod::OdirectDsync),
        recovery_mode: mode,
        lz4_min_bytes: lz4.then_some(64),
        ..JournalOptions::default()
    }
}

fn payload(rng: &mut SmallRng) -> Vec<u8> {
    let len = match rng.random_range(0..4) {
        0 => rng.random_range(0..16),
        1 => rng.random_range(16..600),
        2 => rng.random_range(600..6000),
        _ => rng.random_range(6000..20_000),
    };
    if rng.random_bool(0.5) {
        // Compressible: LZ4 records get damaged too.
        vec![rng.random::<u8>(); len]
    } else {
        (0..len).map(|_| rng.random()).collect()
    }
}

fn all(j: &Journal) -> Result<Vec<(Lsn, Vec<u8>)>, JournalError> {
    j.read_from(1)?.collect()
}

/// What was planted, and the first LSN it may have destroyed (records
/// before it must all survive).
struct Damage {
    seq: u64,
    offset: u64,
    bytes: Vec<u8>,
    first_hit: Option<Lsn>,
    /// Whether a record after the first one hit is intact: its `durable_lsn`
    /// then proves the damage.
    intact_after: bool,
}

fn plant(rng: &mut SmallRng, scan: &journal::Scan, block: u64) -> Damage {
    let chain: Vec<&journal::SegmentScan> = scan.segments.iter().filter(|s| s.in_chain).collect();
    let seg = chain[rng.random_range(0..chain.len())];
    let records = &seg.records;
    if rng.random_bool(0.75) && !records.is_empty() {
        // One flipped bit inside a record, header or payload.
        let r = records[rng.random_range(0..records.len())];
        let span = HEADER + u64::from(r.len);
        let offset = r.pos + rng.random_range(0..span);
        return Damage {
            seq: seg.seq,
            offset,
            bytes: vec![1u8 << rng.random_range(0..8)],
            first_hit: Some(r.lsn),
            intact_after: intact_after(scan, seg.seq, r.lsn, offset, 1),
        };
    }
    // Garbage: a run of random bytes anywhere past the header block.
    let len = rng.random_range(1..3000u64);
    let offset = rng.random_range(block..seg.file_len - len);
    let bytes: Vec<u8> = (0..len).map(|_| rng.random::<u8>() | 1).collect();
    // A record's span starts where the previous one ended: zero padding
    // before a record that starts on a fresh block is its own to lose.
    let mut prev_end = block;
    let first_hit = records
        .iter()
        .map(|r| {
            let start = prev_end.min(r.pos);
            prev_end = r.pos + HEADER + u64::from(r.len);
            (r, start)
        })
        .find(|(r, _)| r.pos + HEADER + u64::from(r.len) > offset)
        .filter(|(_, start)| *start < offset + len)
        .map(|(r, _)| r.lsn);
    Damage {
        seq: seg.seq,
        offset,
        intact_after: first_hit.is_some_and(|l| intact_after(scan, seg.seq, l, offset, len)),
        bytes,
        first_hit,
    }
}

const HEADER: u64 = journal::RECORD_HEADER_BYTES as u64;

/// Whether a record with an LSN above `hit` lies wholly outside the bytes
/// `[offset, offset + len)` of segment `seq`.
fn intact_after(scan: &journal::Scan, seq: u64, hit: Lsn, offset: u64, len: u64) -> bool {
    scan.segments.iter().filter(|s| s.in_chain).any(|s| {
        s.records.iter().any(|r| {
            let end = r.pos + HEADER + u64::from(r.len);
            r.lsn > hit && (s.seq != seq || end <= offset || r.pos >= offset + len)
        })
    })
}

/// Returns (the damage hit a record, strict mode refused to open).
fn run_seed(seed: u64) -> Result<(bool, bool), String> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let vfs = SimVfs::new(seed);
    let dir = PathBuf::from("/j");
    vfs.create_dir_durable(&dir).map_err(|e| e.to_string())?;
    let lz4 = seed % 3 == 0;
    let strict = options(RecoveryMode::RefuseCorruption, lz4);
    let lenient = options(RecoveryMode::StopAtFirstBad, lz4);

    let n = rng.random_range(5..80);
    let mut appended = vec![Vec::new()]; // index = LSN
    {
        let j = Journal::open(vfs.clone(), &dir, lenient.clone()).map_err(|e| e.to_string())?;
        for i in 1..=n {
            let p = payload(&mut rng);
            let lsn = j.append(&p).map_err(|e| e.to_string())?;
            if lsn != i {
                return Err(format!("append returned lsn {lsn}, expected {i}"));
            }
            appended.push(p);
        }
    }
    let before = journal::inspect(vfs.as_ref(), &dir).map_err(|e| e.to_string())?;
    let damage = plant(&mut rng, &before, 4096);
    let path = dir.join(format!("{:020}.seg", damage.seq));
    let image = vfs.contents(&path).ok_or("segment vanished")?;
    let mut bytes = damage.bytes.clone();
    if bytes.len() == 1 {
        // A bit flip: XOR into what is there.
        bytes[0] ^= image[damage.offset as usize];
    }
    vfs.corrupt(&path, damage.offset, &bytes)
        .map_err(|e| e.to_string())?;
    let what = format!(
        "{} byte(s) at segment {} byte {} (first record hit: {:?})",
        damage.bytes.len(),
        damage.seq,
        damage.offset,
        damage.first_hit
    );

    // Strict mode: refuses exactly when an intact record follows the
    // damage (it says the damaged one was durable).
    let later_records = damage.intact_after;
    match Journal::open(vfs.clone(), &dir, strict) {
        Err(JournalError::Corrupt { .. }) if later_records => {}
        Err(e) => return Err(format!("{what}: strict open failed: {e}")),
        Ok(_) if later_records => {
            return Err(format!(
                "{what}: strict open accepted damage before valid records"
            ))
        }
        Ok(j) => drop(j),
    }
    let outcome = (damage.first_hit.is_some(), later_records);

    // Lenient mode: a run of consecutive appended records, byte for byte,
    // holding every record before the damage.
    let j = Journal::open(vfs.clone(), &dir, lenient.clone())
        .map_err(|e| format!("{what}: open: {e}"))?;
    let got = all(&j).map_err(|e| format!("{what}: read: {e}"))?;
    check_run(&got, &appended).map_err(|e| format!("{what}: {e}"))?;
    let keep_upto = damage.first_hit.map_or(n, |l| l - 1);
    let last = got.last().map_or(0, |r| r.0);
    if damage.first_hit.is_some() && got.first().is_some_and(|r| r.0 != 1) {
        return Err(format!(
            "{what}: recovery skipped records before the damage"
        ));
    }
    if last < keep_upto {
        return Err(format!(
            "{what}: recovered up to lsn {last}, but records up to {keep_upto} were intact"
        ));
    }
    if damage.first_hit.is_some() && last >= damage.first_hit.unwrap() {
        return Err(format!(
            "{what}: recovered past the damaged record (lsn {last})"
        ));
    }

    // Appends go on after the damage and survive a reopen.
    let mut expected = got.clone();
    for _ in 0..3 {
        let p = payload(&mut rng);
        let lsn = j.append(&p).map_err(|e| format!("{what}: append: {e}"))?;
        expected.push((lsn, p));
    }
    drop(j);
    let j = Journal::open(vfs.clone(), &dir, lenient).map_err(|e| format!("{what}: {e}"))?;
    let again = all(&j).map_err(|e| format!("{what}: reread: {e}"))?;
    if again != expected {
        return Err(format!(
            "{what}: after appending past the damage and reopening, {} records instead of {}",
            again.len(),
            expected.len()
        ));
    }
    Ok(outcome)
}

/// `got` must be consecutive LSNs, each record exactly what was appended.
fn check_run(got: &[(Lsn, Vec<u8>)], appended: &[Vec<u8>]) -> Result<(), String> {
    for (i, (lsn, bytes)) in got.iter().enumerate() {
        if i > 0 && *lsn != got[i - 1].0 + 1 {
            return Err(format!("gap before lsn {lsn}"));
        }
        match appended.get(*lsn as usize) {
            Some(p) if *lsn > 0 && p == bytes => {}
            _ => return Err(format!("lsn {lsn} is not the record that was appended")),
        }
    }
    Ok(())
}

#[test]
fn recovery_never_returns_damaged_records() {
    let seeds = seeds::from_env("KEEL_DAMAGE", CI_SEEDS);
    let mut failures = Vec::new();
    let (mut hit, mut refused) = (0, 0);
    for &seed in &seeds {
        match run_seed(seed) {
            Ok((h, r)) => {
                hit += usize::from(h);
                refused += usize::from(r);
            }
            Err(e) => {
                eprintln!(
                "FAILED seed {seed}: {e}  (replay: KEEL_DAMAGE_SEED={seed} cargo test --release \
                 --test damage)"
            );
                failures.push(seed);
            }
        }
    }
    println!(
        "damage: {} seeds ({hit} hit a record, {refused} refused by RefuseCorruption), {} failed",
        seeds.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "failing seeds: {failures:?}");
}
