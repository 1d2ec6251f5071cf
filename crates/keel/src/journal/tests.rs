//! Unit tests of the journal on the simulated file layer.

use std::path::PathBuf;
use std::sync::Arc;

use super::*;
use crate::io::{CrashMode, OpKind, SimVfs, Vfs};

pub(crate) fn small_options() -> JournalOptions {
    JournalOptions {
        segment_size_bytes: 64 << 10,
        block_size_bytes: 4096,
        max_write_bytes: 16 << 10,
        method: Some(WriteMethod::OdirectDsync),
        ..JournalOptions::default()
    }
}

fn sim() -> (Arc<SimVfs>, PathBuf) {
    let vfs = SimVfs::new(1);
    let dir = PathBuf::from("/j");
    vfs.create_dir_durable(&dir).unwrap();
    (vfs, dir)
}

fn payload(lsn: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (lsn as usize * 31 + i) as u8).collect()
}

fn all(j: &Journal) -> Vec<(Lsn, Vec<u8>)> {
    j.read_from(1).unwrap().map(|r| r.unwrap()).collect()
}

#[test]
fn append_read_reopen() {
    let (vfs, dir) = sim();
    let j = Journal::open(vfs.clone(), &dir, small_options()).unwrap();
    for i in 1..=50u64 {
        assert_eq!(j.append(&payload(i, (i * 7 % 300) as usize)).unwrap(), i);
    }
    assert_eq!(j.durable_lsn(), 50);
    let got = all(&j);
    assert_eq!(got.len(), 50);
    for (lsn, p) in &got {
        assert_eq!(p, &payload(*lsn, (*lsn * 7 % 300) as usize));
    }
    drop(j);
    let j = Journal::open(vfs.clone(), &dir, small_options()).unwrap();
    assert_eq!(j.recovery_report().last_lsn, Some(50));
    assert_eq!(j.append(b"next").unwrap(), 51);
    assert_eq!(all(&j).len(), 51);
}

#[test]
fn rollover_and_records_of_every_size() {
    let (vfs, dir) = sim();
    let opts = small_options();
    let max = opts.max_record_bytes();
    let j = Journal::open(vfs.clone(), &dir, opts.clone()).unwrap();
    let sizes = [0usize, 1, 4095, 4096, 4097, 20_000, max, 3, max - 1];
    for (i, &len) in sizes.iter().enumerate() {
        j.append(&payload(i as u64 + 1, len)).unwrap();
    }
    assert!(matches!(
        j.append(&vec![0u8; max + 1]),
        Err(JournalError::RecordTooLarge { .. })
    ));
    assert!(j.stats().rollovers >= 2);
    drop(j);
    let j = Journal::open(vfs, &dir, opts).unwrap();
    let got = all(&j);
    assert_eq!(got.len(), sizes.len());
    for (i, (lsn, p)) in got.iter().enumerate() {
        assert_eq!(*lsn, i as u64 + 1);
        assert_eq!(p, &payload(*lsn, sizes[i]));
    }
}

#[test]
fn concurrent_committers_group_and_all_survive() {
    let (vfs, dir) = sim();
    let j = Arc::new(Journal::open(vfs.clone(), &dir, small_options()).unwrap());
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let j = Arc::clone(&j);
            std::thread::spawn(move || {
                (0..200)
                    .map(|i| j.append(format!("t{t}-{i}").as_bytes()).unwrap())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut lsns: Vec<u64> = threads
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    lsns.sort();
    assert_eq!(lsns, (1..=1600).collect::<Vec<_>>());
    let stats = j.stats();
    assert_eq!(stats.records, 1600);
    drop(j);
    vfs.crash(CrashMode::PowerLoss);
    let j = Journal::open(vfs, &dir, small_options()).unwrap();
    assert_eq!(all(&j).len(), 1600);
}

#[test]
fn submit_then_wait_and_callback() {
    let (vfs, dir) = sim();
    let j = Journal::open(vfs, &dir, small_options()).unwrap();
    let h1 = j.submit(b"a").unwrap();
    let h2 = j.submit(b"b").unwrap();
    assert_eq!(h1.lsn(), 1);
    let (tx, rx) = std::sync::mpsc::channel();
    h2.on_durable(move |r| tx.send(r.unwrap()).unwrap());
    assert_eq!(
        rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap(),
        2
    );
    assert!(h1.is_durable());
    assert_eq!(h1.wait().unwrap(), 1);
}

#[test]
fn second_open_is_locked() {
    let (vfs, dir) = sim();
    let _j = Journal::open(vfs.clone(), &dir, small_options()).unwrap();
    assert!(matches!(
        Journal::open(vfs, &dir, small_options()),
        Err(JournalError::Locked(_))
    ));
}

#[test]
fn failed_write_poisons_everything_after() {
    let (vfs, dir) = sim();
    let j = Journal::open(vfs.clone(), &dir, small_options()).unwrap();
    j.append(b"ok").unwrap();
    vfs.fail_after(OpKind::Write, 0, libc::EIO);
    let e = j.append(b"fails").unwrap_err();
    assert!(matches!(e, JournalError::Poisoned(_)), "{e}");
    assert!(matches!(j.append(b"later"), Err(JournalError::Poisoned(_))));
    assert!(j.poisoned().is_some());
    drop(j);
    let j = Journal::open(vfs, &dir, small_options()).unwrap();
    let got = all(&j);
    assert_eq!(got.first().map(|r| r.1.as_slice()), Some(&b"ok"[..]));
    assert!(got.iter().all(|r| r.1 != b"later"));
}

#[test]
fn fallback_method_syncs_and_recovers() {
    let (vfs, dir) = sim();
    let opts = JournalOptions {
        method: Some(WriteMethod::Fdatasync),
        ..small_options()
    };
    let j = Journal::open(vfs.clone(), &dir, opts.clone()).unwrap();
    for i in 1..=30 {
        j.append(&payload(i, 500)).unwrap();
    }
    drop(j);
    vfs.crash(CrashMode::PowerLoss);
    let j = Journal::open(vfs, &dir, opts).unwrap();
    assert_eq!(all(&j).len(), 30);
}

#[test]
fn release_recycles_segments() {
    let (vfs, dir) = sim();
    let j = Journal::open(vfs.clone(), &dir, small_options()).unwrap();
    for i in 1..=100 {
        j.append(&payload(i, 3000)).unwrap();
    }
    let before = vfs.read_dir(&dir).unwrap().len();
    let s0 = j.stats();
    j.release(80);
    for i in 101..=200 {
        j.append(&payload(i, 3000)).unwrap();
    }
    let after = vfs.read_dir(&dir).unwrap().len();
    let s1 = j.stats();
    let used = s1.rollovers - s0.rollovers;
    // About 3 segments hold only records <= 80; the preparer may have made
    // one new spare before the release, but every later spare comes from
    // the freed files first.
    assert!(
        s1.segments_recycled >= 2,
        "released segments were not recycled: {s1:?}"
    );
    assert!(
        (after - before) as u64 + 2 <= used,
        "segments were not recycled: {before} -> {after} files for {used} rollovers"
    );
    drop(j);
    let j = Journal::open(vfs, &dir, small_options()).unwrap();
    let got = all(&j);
    assert_eq!(got.last().unwrap().0, 200);
    assert!(got.first().unwrap().0 <= 81);
    for (lsn, p) in got {
        assert_eq!(p, payload(lsn, 3000));
    }
}

#[test]
fn truncate_after_discards_durably() {
    let (vfs, dir) = sim();
    let j = Journal::open(vfs.clone(), &dir, small_options()).unwrap();
    for i in 1..=60 {
        j.append(&payload(i, 2000)).unwrap();
    }
    j.truncate_after(25).unwrap();
    assert_eq!(j.next_lsn(), 26);
    assert_eq!(j.append(b"new 26").unwrap(), 26);
    drop(j);
    vfs.crash(CrashMode::PowerLoss);
    let j = Journal::open(vfs.clone(), &dir, small_options()).unwrap();
    let got = all(&j);
    assert_eq!(got.len(), 26);
    assert_eq!(got[25].1, b"new 26");
    j.truncate_after(26).unwrap();
    j.truncate_after(10).unwrap();
    drop(j);
    vfs.crash(CrashMode::PowerLoss);
    let j = Journal::open(vfs, &dir, small_options()).unwrap();
    assert_eq!(all(&j).len(), 10);
}

#[test]
fn bad_options_are_rejected() {
    let (vfs, dir) = sim();
    let bad = JournalOptions {
        method: Some(WriteMethod::Buffered),
        ..small_options()
    };
    assert!(matches!(
        Journal::open(vfs.clone(), &dir, bad),
        Err(JournalError::BadOptions(_))
    ));
    let bad = JournalOptions {
        segment_size_bytes: 5000,
        ..small_options()
    };
    assert!(matches!(
        Journal::open(vfs, &dir, bad),
        Err(JournalError::BadOptions(_))
    ));
}

#[test]
fn lz4_records_round_trip_and_shrink_the_writes() {
    let run = |lz4: Option<usize>, compressible: bool| {
        let (vfs, dir) = sim();
        let opts = JournalOptions {
            lz4_min_bytes: lz4,
            ..small_options()
        };
        let j = Journal::open(vfs.clone(), &dir, opts.clone()).unwrap();
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut written = Vec::new();
        for i in 1..=60u64 {
            let len = if i % 3 == 0 { 40 } else { 3000 };
            let p: Vec<u8> = if compressible {
                payload(i, len)
            } else {
                (0..len)
                    .map(|_| {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        rng as u8
                    })
                    .collect()
            };
            j.append(&p).unwrap();
            written.push((i, p));
        }
        assert_eq!(all(&j), written);
        drop(j);
        vfs.crash(CrashMode::PowerLoss);
        let j = Journal::open(vfs.clone(), &dir, opts).unwrap();
        assert_eq!(all(&j), written, "recovered after a power loss");
        drop(j);
        // Bytes the records take in the segments.
        let scan = inspect(vfs.as_ref(), &dir).unwrap();
        scan.segments
            .iter()
            .flat_map(|s| s.records.iter())
            .map(|r| u64::from(r.len) + RECORD_HEADER_BYTES as u64)
            .sum::<u64>()
    };
    let plain = run(None, true);
    let packed = run(Some(256), true);
    assert!(
        packed * 2 < plain,
        "compressible records take less room: {packed} vs {plain} bytes"
    );
    // Incompressible payloads are stored as they are.
    assert_eq!(run(Some(256), false), run(None, false));
}

#[test]
fn preallocate_prepares_the_segments_a_run_needs() {
    let (vfs, dir) = sim();
    // Records packed byte for byte (with fresh blocks each of these
    // one-record batches would take a whole block).
    let opts = JournalOptions {
        batch_start: BatchStart::RewriteTail,
        ..small_options()
    };
    let j = Journal::open(vfs.clone(), &dir, opts).unwrap();
    let seg = small_options().segment_size_bytes;
    // Room for five segments' worth of records.
    let made = j.preallocate(5 * (seg - 4096)).unwrap();
    assert!(made >= 4, "prepared {made}");
    let before = j.stats();
    // Four rollovers' worth of appends: no segment is prepared meanwhile.
    let n = (4 * seg / 1032) as usize;
    for i in 0..n {
        j.append(&payload(i as u64, 1000)).unwrap();
    }
    let after = j.stats();
    assert!(after.rollovers >= before.rollovers + 3, "{after:?}");
    assert_eq!(after.segments_created, before.segments_created);
    assert_eq!(after.rollover_waits, 0);
    assert_eq!(j.preallocate(0).unwrap(), 0);
    drop(j);
    let j = Journal::open(vfs.clone(), &dir, small_options()).unwrap();
    assert_eq!(all(&j).len(), n);
}

/// Several writes in flight, one of which fails: that batch and every later
/// one fail, no record after it is acknowledged, earlier ones still are, and
/// reopening recovers every acknowledged record.
#[test]
fn a_failed_write_in_flight_fails_it_and_everything_after() {
    let (mut overlapped, mut failures, mut acked_total) = (0, 0, 0);
    for seed in 0..40u64 {
        let vfs = SimVfs::new(seed);
        vfs.set_in_flight(1.0);
        let dir = PathBuf::from("/j");
        vfs.create_dir_durable(&dir).unwrap();
        let opts = JournalOptions {
            segment_size_bytes: 1 << 20,
            writes_in_flight: 2 + (seed % 3) as usize,
            batch_start: BatchStart::FreshBlock,
            ..small_options()
        };
        let j = Arc::new(Journal::open(vfs.clone(), &dir, opts.clone()).unwrap());
        vfs.fail_after(OpKind::Write, 5 + seed % 40, libc::EIO);
        let threads: Vec<_> = (0..6u64)
            .map(|t| {
                let j = Arc::clone(&j);
                std::thread::spawn(move || {
                    let (mut acked, mut failed) = (Vec::new(), Vec::new());
                    for i in 0..30u64 {
                        let p = payload(t * 1000 + i, 40 + (i as usize * 97) % 3000);
                        let Ok(h) = j.submit(&p) else { break };
                        let lsn = h.lsn();
                        match h.wait() {
                            Ok(l) => acked.push((l, p)),
                            Err(JournalError::Poisoned(_)) => failed.push(lsn),
                            Err(e) => panic!("unexpected error {e}"),
                        }
                    }
                    (acked, failed)
                })
            })
            .collect();
        let (mut acked, mut failed) = (Vec::new(), Vec::new());
        for t in threads {
            let (a, f) = t.join().unwrap();
            acked.extend(a);
            failed.extend(f);
        }
        overlapped += j.stats().overlapped_writes;
        assert!(
            j.poisoned().is_some(),
            "seed {seed}: the failure was not seen"
        );
        if let (Some(first_failed), Some(last_acked)) =
            (failed.iter().min(), acked.iter().map(|a| a.0).max())
        {
            assert!(
                last_acked < *first_failed,
                "seed {seed}: lsn {last_acked} acknowledged after lsn {first_failed} failed"
            );
        }
        failures += failed.len();
        acked_total += acked.len();
        drop(j);
        vfs.crash(CrashMode::PowerLoss);
        let j = Journal::open(vfs, &dir, opts).unwrap();
        let got: std::collections::BTreeMap<Lsn, Vec<u8>> = all(&j).into_iter().collect();
        for (lsn, p) in &acked {
            assert_eq!(got.get(lsn), Some(p), "seed {seed}: acknowledged lsn {lsn}");
        }
    }
    assert!(overlapped > 0, "no write overlapped another");
    assert!(failures > 0 && acked_total > 0);
}
