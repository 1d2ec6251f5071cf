//! Write → power cut → verify through the fault-injecting file layer, with
//! the server on loopback in this process (and on its own simulated disk).
//!
//! The expected counts are derived from the post-crash image directly: for
//! every block, what the recorded acknowledged generation is and what the
//! disk holds, read with the block decoder alone.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use keel::io::{CrashMode, IoError, OpKind, SimVfs, SyncKind, Vfs, WriteMethod};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::block::{decode, Decoded};
use super::client::{self, Target};
use super::cycle_tests::{check, config, start_server, write};
use super::recorder::query;
use super::server::ServerHandle;
use super::state::RunState;
use super::verify::Report;

const BLOCKS: u64 = 128;
const BLOCK_BYTES: usize = 4096;
const WRITES: u64 = 300;

#[derive(Clone, Copy, Debug)]
enum Fault {
    Honest,
    Lying(f64),
    Misdirect(f64),
}

/// What the test itself finds wrong in the post-crash image.
#[derive(Debug, Default, PartialEq, Eq)]
struct Truth {
    lost: BTreeSet<u64>,
    torn: BTreeSet<u64>,
    misdirected: BTreeSet<u64>,
    in_flight_torn: u64,
}

fn disk_file() -> PathBuf {
    PathBuf::from("/disk/dc.bin")
}

/// Create and fill the file honestly, before any fault is switched on:
/// the test is about the run's writes, not the file's creation.
fn prepare(disk: &SimVfs, method: WriteMethod) {
    disk.create_dir_durable(Path::new("/disk")).unwrap();
    let f = disk.open(&disk_file(), method.open_options()).unwrap();
    f.zero_fill(0, BLOCKS * BLOCK_BYTES as u64).unwrap();
    f.sync(SyncKind::All).unwrap();
    disk.sync_dir(Path::new("/disk")).unwrap();
}

/// One seeded cycle: write until the simulated machine dies, cut the
/// power, verify. Returns the report, the expected errors and the record.
fn cycle(seed: u64, method: WriteMethod, fault: Fault) -> (Report, Truth, RunState, Arc<SimVfs>) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let server_disk = SimVfs::new(seed ^ 0x5EED);
    let (_server, handle) = start_server(server_disk, Path::new("/state"));
    let disk = SimVfs::new(seed);
    prepare(&disk, method);
    match fault {
        Fault::Honest => {}
        Fault::Lying(p) => disk.set_lying(p),
        Fault::Misdirect(p) => disk.set_misdirect(p),
    }
    let ops_per_write = if method.sync_after_writes().is_some() {
        2
    } else {
        1
    };
    disk.crash_after_ops(rng.random_range(20..WRITES * ops_per_write));
    let threads = rng.random_range(1..=3);
    let cfg = config(&disk_file(), BLOCKS, threads, method, WRITES, seed);
    let vfs: Arc<dyn Vfs> = disk.clone();
    if let Err(e) = write(vfs, &handle, &cfg) {
        let crashed = e
            .chain()
            .any(|c| matches!(c.downcast_ref::<IoError>(), Some(IoError::Crashed)));
        assert!(crashed, "seed {seed}: {e:#}");
    }
    disk.crash(CrashMode::PowerLoss);
    let report = check(disk.as_ref(), &handle, &disk_file());
    let state = query(handle.addr(), cfg.run_id)
        .unwrap()
        .expect("run recorded");
    let truth = truth(&disk, &state);
    handle.shutdown();
    (report, truth, state, disk)
}

/// Classify the post-crash image from first principles: a block is right
/// if it holds its acknowledged generation or the announced one after it
/// (whole, or torn between exactly those two).
fn truth(disk: &SimVfs, state: &RunState) -> Truth {
    let image = disk.contents(&disk_file()).expect("file survives");
    let run = state.meta().run_id;
    let mut t = Truth::default();
    for (pos, block) in image.chunks_exact(BLOCK_BYTES).enumerate() {
        let pos = pos as u64;
        let rec = state.blocks.get(&pos).copied().unwrap_or_default();
        let allowed = |g: u64| {
            g == rec.acked_gen || (g == rec.acked_gen + 1 && rec.intent_gen > rec.acked_gen)
        };
        match decode(block) {
            Decoded::Valid(h) if h.run_id == run && h.index != pos => {
                t.misdirected.insert(pos);
            }
            Decoded::Valid(h) if h.run_id == run => {
                if h.generation < rec.acked_gen {
                    t.lost.insert(pos);
                }
                assert!(
                    allowed(h.generation) || h.generation < rec.acked_gen,
                    "unannounced at {pos}"
                );
            }
            Decoded::Valid(_) => unreachable!("only one run writes here"),
            Decoded::Zero => {
                if rec.acked_gen > 0 {
                    t.lost.insert(pos);
                }
            }
            Decoded::Damaged(sectors) => {
                if sectors.iter().flatten().any(|s| s.index != pos) {
                    t.misdirected.insert(pos);
                } else if sectors
                    .iter()
                    .all(|s| s.map_or(rec.acked_gen == 0, |s| allowed(s.generation)))
                    && rec.intent_gen > rec.acked_gen
                {
                    t.in_flight_torn += 1;
                } else {
                    t.torn.insert(pos);
                }
            }
        }
    }
    t
}

fn error_set(r: &Report, kind: super::verify::Verdict) -> BTreeSet<u64> {
    r.error_blocks
        .iter()
        .filter(|e| e.kind == kind)
        .map(|e| e.block)
        .collect()
}

fn assert_matches(seed: u64, r: &Report, t: &Truth) {
    use super::verify::Verdict;
    assert_eq!(error_set(r, Verdict::Lost), t.lost, "seed {seed}: lost");
    assert_eq!(error_set(r, Verdict::Torn), t.torn, "seed {seed}: torn");
    assert_eq!(
        error_set(r, Verdict::Misdirected),
        t.misdirected,
        "seed {seed}: misdirected"
    );
    assert_eq!(r.unannounced, 0, "seed {seed}");
    let expected = (t.lost.len() + t.torn.len() + t.misdirected.len()) as u64;
    assert_eq!(r.errors, expected, "seed {seed}");
    assert_eq!(
        (r.lost, r.torn, r.misdirected),
        (
            t.lost.len() as u64,
            t.torn.len() as u64,
            t.misdirected.len() as u64
        )
    );
}

/// An honest disk: whatever the power cut drops or tears, nothing
/// acknowledged is missing — zero errors on every seed, with both a method
/// that syncs after the write and one whose writes are durable by
/// themselves.
#[test]
fn honest_disk_has_no_error() {
    let mut in_flight = 0;
    let mut torn_in_flight = 0;
    for seed in 0..40 {
        let method = [WriteMethod::Fdatasync, WriteMethod::OdirectDsync][seed as usize % 2];
        let (r, t, _, _) = cycle(seed, method, Fault::Honest);
        assert_eq!(r.errors, 0, "seed {seed}: {r:?}");
        assert_matches(seed, &r, &t);
        assert!(r.acked > 0 && r.fine > 0, "seed {seed}: {r:?}");
        in_flight += r.in_flight;
        torn_in_flight += t.in_flight_torn;
    }
    // The cases the verifier must forgive did occur.
    assert!(
        in_flight > 0 && torn_in_flight > 0,
        "{in_flight} {torn_in_flight}"
    );
}

/// A lying disk acknowledges syncs and loses some of those writes at the
/// power cut: every acknowledged block whose content is older is reported
/// lost (or torn, when a later unsynced write tore over the stale data).
#[test]
fn lying_disk_every_lost_write_is_reported() {
    for seed in 100..112 {
        let method = [WriteMethod::OdirectDsync, WriteMethod::Fdatasync][seed as usize % 2];
        let (r, t, _, disk) = cycle(seed, method, Fault::Lying(0.3));
        assert_matches(seed, &r, &t);
        assert!(t.misdirected.is_empty());
        if disk.stats().lies >= 10 {
            assert!(
                r.lost >= 1,
                "seed {seed}: the disk lied {} times: {r:?}",
                disk.stats().lies
            );
        }
        if method == WriteMethod::OdirectDsync {
            // Every write is durable when it returns: only the one write
            // hit by the crash point can be torn, and it shows as torn only
            // if the acknowledged write under it was lost by a lie.
            assert!(r.torn <= 1, "seed {seed}: {r:?}");
        }
    }
}

/// The worst lying disk: every write it acknowledged is gone at the power
/// cut, so the file holds no block of the run at all. The run is found from
/// the server's record of the file, and every acknowledged block is
/// reported lost: the ordinary report, not "wrong file".
#[test]
fn disk_that_loses_every_write_is_reported_lost() {
    for seed in 300..304 {
        let (r, t, state, _) = cycle(seed, WriteMethod::OdirectDsync, Fault::Lying(1.0));
        assert_matches(seed, &r, &t);
        assert_eq!(r.run_id, format!("{:016x}", state.meta().run_id));
        assert!(r.acked > 0, "seed {seed}: {r:?}");
        assert_eq!(
            (r.lost, r.fine, r.errors),
            (r.acked, 0, r.acked),
            "seed {seed}"
        );
        assert!(
            r.warnings
                .iter()
                .any(|w| w.contains("holds no block of run")),
            "seed {seed}: {:?}",
            r.warnings
        );
    }
}

/// A disk that misdirects writes: the block that received another's data
/// is `misdirected`, and the block that should have received it `lost`.
#[test]
fn misdirecting_disk_is_caught() {
    let mut misdirected = 0;
    for seed in 200..210 {
        let (r, t, _, disk) = cycle(seed, WriteMethod::OdirectDsync, Fault::Misdirect(0.05));
        assert_matches(seed, &r, &t);
        if disk.stats().misdirects >= 3 {
            assert!(r.misdirected >= 1, "seed {seed}: {r:?}");
        }
        misdirected += r.misdirected;
    }
    assert!(misdirected > 0);
}

/// A failed write (disk full) or sync (EIO) stops the client (every
/// writer) with a clear error, and is not retried: the block stays "in flight" and everything
/// acknowledged before verifies.
#[test]
fn write_and_sync_errors_stop_the_client() {
    for (kind, errno, words) in [
        (OpKind::Write, libc::ENOSPC, "disk is full"),
        (OpKind::Sync, libc::EIO, "writing block"),
    ] {
        let server_disk = SimVfs::new(1);
        let (_server, handle) = start_server(server_disk, Path::new("/state"));
        let disk = SimVfs::new(2);
        prepare(&disk, WriteMethod::Fdatasync);
        disk.fail_after(kind, 40, errno);
        let mut cfg = config(&disk_file(), BLOCKS, 2, WriteMethod::Fdatasync, WRITES, 3);
        // No limit: the failing writer must stop the other one.
        cfg.max_writes = None;
        let err = write(disk.clone(), &handle, &cfg).unwrap_err();
        assert!(format!("{err:#}").contains(words), "{err:#}");
        disk.crash(CrashMode::PowerLoss);
        let r = check(disk.as_ref(), &handle, &disk_file());
        assert_eq!(r.errors, 0, "{r:?}");
        assert!(r.fine > 0 && r.in_flight >= 1, "{r:?}");
        handle.shutdown();
    }
}

/// The server is killed mid-run (its disk loses power) and restarted on
/// the same port: the client reconnects, sends again what was not
/// confirmed, and in the end every acknowledged write is recorded.
#[test]
fn server_restart_mid_run_loses_nothing() {
    let server_disk = SimVfs::new(7);
    let state_dir = Path::new("/state");
    let (server, handle) = start_server(server_disk.clone(), state_dir);
    let addr = handle.addr();
    let disk = SimVfs::new(8);
    let mut cfg = config(&disk_file(), BLOCKS, 2, WriteMethod::OdirectDsync, 4000, 9);
    cfg.max_writes = Some(4000);
    prepare(&disk, cfg.method);
    let stop = AtomicBool::new(false);
    let (summary, restarts) = std::thread::scope(|s| {
        let client = s.spawn(|| {
            let target = Target::Server {
                addr,
                retry_for: Duration::from_secs(20),
            };
            client::run(disk.clone(), &target, &cfg, &stop, &mut |_, _| {})
        });
        let mut handle: Option<ServerHandle> = Some(handle);
        let mut server = Some(server);
        let mut restarts = 0;
        for threshold in [1000, 2500] {
            while disk.op_count() < threshold && !client.is_finished() {
                std::thread::sleep(Duration::from_millis(1));
            }
            if client.is_finished() {
                break;
            }
            handle.take().unwrap().shutdown();
            drop(server.take());
            server_disk.crash(CrashMode::PowerLoss);
            let (s2, _) =
                super::server::Server::open(server_disk.clone(), state_dir, false).unwrap();
            let listener = std::net::TcpListener::bind(addr).unwrap();
            handle = Some(s2.serve(listener).unwrap());
            server = Some(s2);
            restarts += 1;
        }
        let summary = client.join().unwrap().unwrap();
        handle.take().unwrap().shutdown();
        (summary, restarts)
    });
    assert!(stop.load(Ordering::Relaxed) || summary.writes == 4000);
    assert!(
        restarts >= 1,
        "the run ended before the server could be restarted"
    );
    let (s3, _) = super::server::Server::open(server_disk.clone(), state_dir, false).unwrap();
    let handle = s3
        .serve(std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .unwrap();
    let state = query(handle.addr(), cfg.run_id).unwrap().unwrap();
    assert_eq!(
        state.summary.acked_writes, summary.writes,
        "every acknowledgement recorded once"
    );
    assert!(state.summary.ended);
    let r = check(disk.as_ref(), &handle, &disk_file());
    assert_eq!((r.errors, r.in_flight), (0, 0), "{r:?}");
    assert_eq!(r.fine, r.acked);
    handle.shutdown();
}
