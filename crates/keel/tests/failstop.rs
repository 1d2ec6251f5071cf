//! Fail-stop: a failed write or sync poisons the journal.
//!
//! Several threads append while the fault layer fails one write (or one
//! sync) with EIO or ENOSPC. Then: the committers waiting on the failed
//! batch and every later one get an error, no record at or after the failed
//! one is ever acknowledged, every later submit fails at once, nothing is
//! retried — and a reopen recovers every record acknowledged before the
//! failure, byte for byte.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use keel::io::{OpKind, SimVfs, WriteMethod};
use keel::journal::{Journal, JournalError, JournalOptions, Lsn};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn options(method: WriteMethod) -> JournalOptions {
    JournalOptions {
        // Large enough that no rollover happens: every write after open is
        // a batch write, so the injected failure hits the commit path.
        segment_size_bytes: 8 << 20,
        max_write_bytes: 64 << 10,
        method: Some(method),
        ..JournalOptions::default()
    }
}

#[derive(Default)]
struct Outcome {
    acked: BTreeMap<Lsn, Vec<u8>>,
    failed: Vec<Lsn>,
    submit_refused: usize,
}

fn run(method: WriteMethod, kind: OpKind, nth: u64, errno: i32, seed: u64) {
    let sim = SimVfs::new(seed);
    let dir = PathBuf::from("/j");
    sim.create_dir_durable(&dir).unwrap();
    let j = Arc::new(Journal::open(sim.clone(), &dir, options(method)).unwrap());
    // Counted from here: the failure lands among the commits.
    sim.fail_after(kind, nth, errno);
    let outcome = Arc::new(Mutex::new(Outcome::default()));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (j, outcome) = (Arc::clone(&j), Arc::clone(&outcome));
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(seed * 31 + t);
                let mut poisoned_seen = false;
                for _ in 0..200 {
                    let mut p = vec![0u8; rng.random_range(1..3000)];
                    rng.fill(&mut p[..]);
                    let h = match j.submit(&p) {
                        Ok(h) => h,
                        Err(JournalError::Poisoned(_)) => {
                            outcome.lock().unwrap().submit_refused += 1;
                            poisoned_seen = true;
                            continue;
                        }
                        Err(e) => panic!("unexpected submit error: {e}"),
                    };
                    assert!(
                        !poisoned_seen,
                        "a submit succeeded after the journal failed"
                    );
                    let lsn = h.lsn();
                    match h.wait() {
                        Ok(l) => {
                            assert_eq!(l, lsn);
                            outcome.lock().unwrap().acked.insert(lsn, p);
                        }
                        Err(JournalError::Poisoned(e)) => {
                            assert!(
                                e.raw_os_error() == Some(errno),
                                "the waiter gets the original error, got {e}"
                            );
                            outcome.lock().unwrap().failed.push(lsn);
                            poisoned_seen = true;
                        }
                        Err(e) => panic!("unexpected wait error: {e}"),
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let o = outcome.lock().unwrap();
    assert!(
        !o.failed.is_empty(),
        "the injected failure reached a committer"
    );
    assert!(o.submit_refused > 0, "later submits were refused");
    let first_failed = *o.failed.iter().min().unwrap();
    let last_acked = o.acked.keys().last().copied().unwrap_or(0);
    assert!(
        last_acked < first_failed,
        "lsn {last_acked} acknowledged after lsn {first_failed} failed"
    );
    // Acknowledgements are a gap-free prefix: everything before the failed
    // batch was acknowledged.
    assert_eq!(o.acked.len() as u64, last_acked);
    assert!(j.poisoned().is_some());
    assert!(matches!(j.append(b"late"), Err(JournalError::Poisoned(_))));
    drop(j);

    // Nothing was retried behind our back: reopen (no crash needed — the
    // failed write may or may not have reached the file) and check.
    let j = Journal::open(sim.clone(), &dir, options(method)).unwrap();
    let got: BTreeMap<Lsn, Vec<u8>> = j.read_from(0).unwrap().map(|r| r.unwrap()).collect();
    for (lsn, p) in &o.acked {
        assert_eq!(
            got.get(lsn),
            Some(p),
            "acknowledged lsn {lsn} lost or changed"
        );
    }
    // The journal works again after the reopen.
    let next = j.append(b"after reopen").unwrap();
    assert_eq!(next, got.keys().last().map_or(1, |l| l + 1));
    println!(
        "{method:?} {kind:?} errno {errno}: {} acked, {} failed waiters, {} refused submits",
        o.acked.len(),
        o.failed.len(),
        o.submit_refused
    );
}

#[test]
fn eio_on_a_direct_write_fails_every_waiter_from_there_on() {
    for (i, nth) in [0u64, 3, 17, 40].into_iter().enumerate() {
        run(
            WriteMethod::OdirectDsync,
            OpKind::Write,
            nth,
            libc::EIO,
            i as u64,
        );
    }
}

#[test]
fn enospc_on_a_write_fails_every_waiter_from_there_on() {
    run(WriteMethod::Fdatasync, OpKind::Write, 9, libc::ENOSPC, 11);
}

#[test]
fn eio_on_a_sync_fails_every_waiter_from_there_on() {
    for (i, nth) in [0u64, 5, 23].into_iter().enumerate() {
        run(
            WriteMethod::Fdatasync,
            OpKind::Sync,
            nth,
            libc::EIO,
            20 + i as u64,
        );
    }
}
