//! Tests for holes a review of the journal found: each fails on a journal
//! (or a simulated file layer) without the fix it names.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use super::leader::test_hooks::{self, Point};
use super::tests::small_options;
use super::*;
use crate::io::{CrashMode, OpKind, OpenMode, OpenOptions, SimVfs, Vfs};

fn payload(lsn: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (lsn as usize * 31 + i) as u8).collect()
}

fn all(j: &Journal) -> Vec<(Lsn, Vec<u8>)> {
    j.read_from(1).unwrap().map(|r| r.unwrap()).collect()
}

fn sim(seed: u64) -> (Arc<SimVfs>, PathBuf) {
    let vfs = SimVfs::new(seed);
    let dir = PathBuf::from("/j");
    vfs.create_dir_durable(&dir).unwrap();
    (vfs, dir)
}

/// Append 1..=100, release everything but the active segment, truncate
/// to just before the first retained record, and recycle the released
/// segments: the journal holds no record. Returns the journal and the
/// first retained LSN (what the next record must get).
fn emptied_journal(vfs: &Arc<SimVfs>, dir: &Path) -> (Journal, Lsn) {
    let j = Journal::open(vfs.clone(), dir, small_options()).unwrap();
    for i in 1..=100 {
        j.append(&payload(i, 3000)).unwrap();
    }
    j.release(100);
    let first = all(&j)[0].0;
    assert!(first > 1, "records were released");
    (j, first)
}

/// Fix 1: LSNs never restart at 1 when a journal is emptied — neither
/// after a clean reopen nor after a power cut, nor after a crash at any
/// point of the truncation or the recycling.
#[test]
fn next_lsn_survives_emptying_the_journal() {
    for crash in [None, Some(CrashMode::Process), Some(CrashMode::PowerLoss)] {
        let (vfs, dir) = sim(1);
        let (j, first) = emptied_journal(&vfs, &dir);
        j.truncate_after(first - 1).unwrap();
        assert_eq!(j.next_lsn(), first);
        let seg = small_options().segment_size_bytes;
        // Enough spares to recycle every released segment.
        assert!(j.preallocate(10 * seg).unwrap() >= 6);
        assert!(j.stats().segments_recycled >= 1, "{:?}", j.stats());
        drop(j);
        if let Some(mode) = crash {
            vfs.crash(mode);
        }
        let j = Journal::open(vfs.clone(), &dir, small_options()).unwrap();
        let left: Vec<Lsn> = all(&j).iter().map(|r| r.0).collect();
        assert!(
            left.is_empty(),
            "{crash:?}: {left:?} {:?}",
            j.recovery_report()
        );
        assert_eq!(j.next_lsn(), first, "{crash:?}: numbering restarted");
        assert_eq!(j.append(b"next").unwrap(), first);
    }
}

/// Fix 1 under crashes: whatever operation of truncate + recycle a power
/// cut stops, the reopened journal numbers on from where it was.
#[test]
fn next_lsn_survives_a_crash_inside_truncate_and_recycle() {
    for at in 0..40u64 {
        let (vfs, dir) = sim(at);
        let (j, first) = emptied_journal(&vfs, &dir);
        vfs.crash_after_ops(at);
        let truncated = j.truncate_after(first - 1).is_ok();
        let _ = j.preallocate(10 * small_options().segment_size_bytes);
        drop(j);
        vfs.crash(CrashMode::PowerLoss);
        let j = Journal::open(vfs.clone(), &dir, small_options()).unwrap();
        let got = all(&j);
        match got.last() {
            Some((last, _)) => assert_eq!(j.next_lsn(), last + 1),
            None => assert_eq!(j.next_lsn(), first, "crash at op {at}"),
        }
        assert!(
            j.next_lsn() >= first,
            "crash at op {at} (truncation done: {truncated}): next lsn {}",
            j.next_lsn()
        );
    }
}

/// Fix 2: a process crash leaves unsynced writes pending, not durable.
/// A record whose write a process crash left in the page cache only is
/// adopted by recovery; records acknowledged after it must survive a
/// later power cut, so recovery must make what it adopts durable.
#[test]
fn process_crash_then_power_loss_keeps_what_was_acknowledged_after() {
    let mut adopted = 0;
    for seed in 0..40u64 {
        let (vfs, dir) = sim(seed);
        // One record per block: the chain ends on a block boundary, so
        // the next write does not overlap (and flush) the adopted one.
        let opts = JournalOptions {
            batch_start: BatchStart::FreshBlock,
            ..small_options()
        };
        let one_block = 4096 - RECORD_HEADER_BYTES;
        let j = Journal::open(vfs.clone(), &dir, opts.clone()).unwrap();
        for i in 1..=3 {
            j.append(&payload(i, one_block)).unwrap();
        }
        // The next write is the crash point: half the time it is left in
        // the page cache, pending.
        vfs.crash_after_ops(0);
        assert!(j.append(&payload(4, one_block)).is_err());
        drop(j);
        vfs.crash(CrashMode::Process);
        let j = Journal::open(vfs.clone(), &dir, opts.clone()).unwrap();
        if j.recovery_report().last_lsn != Some(4) {
            continue;
        }
        adopted += 1;
        let lsn = j.append(&payload(5, one_block)).unwrap();
        assert_eq!(lsn, 5);
        drop(j);
        vfs.crash(CrashMode::PowerLoss);
        let j = Journal::open(vfs.clone(), &dir, opts).unwrap();
        let got = all(&j);
        assert_eq!(
            got.last().map(|r| r.0),
            Some(5),
            "seed {seed}: acknowledged lsn 5 lost"
        );
        assert_eq!(got[4].1, payload(5, one_block));
    }
    assert!(adopted >= 5, "only {adopted} seeds left the crashed write");
}

/// Fix 3 (fsyncgate): a failed `fdatasync` marks the batch's pages clean
/// without writing them. A reopen in the same boot would read the batch
/// from the page cache; recovery must not adopt it (it evicts clean pages
/// and reads the disk), or records acknowledged after it are lost at the
/// next power cut.
#[test]
fn a_batch_whose_sync_failed_is_not_adopted_from_the_page_cache() {
    let mut dropped = 0;
    for seed in 0..20u64 {
        let (vfs, dir) = sim(seed);
        vfs.set_failed_sync_drops(1.0);
        let opts = JournalOptions {
            method: Some(WriteMethod::Fdatasync),
            ..small_options()
        };
        let j = Journal::open(vfs.clone(), &dir, opts.clone()).unwrap();
        j.append(&payload(1, 100)).unwrap();
        vfs.fail_after(OpKind::Sync, 0, libc::EIO);
        // Several blocks: the next batch rewrites only the last one.
        let failed = j.append(&payload(2, 10_000));
        assert!(matches!(failed, Err(JournalError::Poisoned(_))));
        dropped += vfs.stats().failed_sync_drops;
        drop(j);
        // The failed record still reads back through the page cache ...
        let seg = dir.join(format::segment_file_name(1));
        let cached = vfs.contents(&seg).unwrap();
        assert!(cached.windows(64).any(|w| w == &payload(2, 10_000)[..64]));
        let j = Journal::open(vfs.clone(), &dir, opts.clone()).unwrap();
        // ... but recovery reads what the disk holds: it is not adopted.
        assert_eq!(j.recovery_report().last_lsn, Some(1), "seed {seed}");
        let lsn = j.append(&payload(3, 100)).unwrap();
        drop(j);
        vfs.crash(CrashMode::PowerLoss);
        // ... and what was acknowledged after it survives.
        let j = Journal::open(vfs.clone(), &dir, opts).unwrap();
        let got = all(&j);
        assert_eq!(got.last().map(|r| r.0), Some(lsn), "seed {seed}");
        assert_eq!(got[1].1, payload(3, 100));
    }
    assert!(dropped > 0);
}

/// Fix 4: each `on_durable` callback hears its own batch's outcome. Batch A
/// is durable, batch B (later) fails: A's callback gets success. Both are
/// registered from inside an earlier callback, so the flusher thread takes
/// them in one round.
#[test]
fn callbacks_get_their_own_batchs_result() {
    let (vfs, dir) = sim(3);
    let opts = small_options();
    let max_write = opts.max_write_bytes;
    let j = Arc::new(Journal::open(vfs.clone(), &dir, opts).unwrap());
    let (tx, rx) = mpsc::channel();
    let first = j.submit(b"z").unwrap();
    let (j2, vfs2) = (Arc::clone(&j), Arc::clone(&vfs));
    first.on_durable(move |r| {
        r.unwrap();
        // Batch A holds a small record; a record larger than what is left
        // of A's capacity seals A and opens batch B.
        let a = j2.submit(b"a").unwrap();
        let b = j2.submit(&vec![7u8; max_write]).unwrap();
        // A's write is the next write, B's the one after: fail B's.
        vfs2.fail_after(OpKind::Write, 1, libc::EIO);
        let (ta, tb) = (tx.clone(), tx);
        a.on_durable(move |r| ta.send(("a", r.is_ok())).unwrap());
        b.on_durable(move |r| tb.send(("b", r.is_ok())).unwrap());
    });
    let mut got: Vec<_> = (0..2)
        .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
        .collect();
    got.sort();
    assert_eq!(got, vec![("a", true), ("b", false)]);
}

/// `CommitHandle::start` writes the batch without a waiter: the record
/// becomes durable while the caller does something else.
#[test]
fn start_writes_a_batch_nobody_waits_on() {
    let (vfs, dir) = sim(4);
    let j = Journal::open(vfs, &dir, small_options()).unwrap();
    let h = j.submit(b"started").unwrap();
    started_becomes_durable(&h);
    assert_eq!(h.wait().unwrap(), 1);
    assert_eq!(j.durable_lsn(), 1);
}

/// Start `h`'s write and wait (10 s at most) until it is durable, without
/// waiting on the handle itself.
fn started_becomes_durable(h: &super::CommitHandle) {
    h.start();
    let t0 = std::time::Instant::now();
    while !h.is_durable() {
        assert!(t0.elapsed() < Duration::from_secs(10), "never written");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A callback that panics (the caller's code) does not end the journal's
/// thread: a later record's callback is still called, and `start` still
/// gets a batch written with nobody waiting.
#[test]
fn a_panicking_callback_does_not_stop_the_journal_thread() {
    let (vfs, dir) = sim(6);
    let j = Journal::open(vfs, &dir, small_options()).unwrap();
    j.submit(b"first")
        .unwrap()
        .on_durable(|_| panic!("a caller's callback panicked"));
    let (tx, rx) = std::sync::mpsc::channel();
    j.submit(b"second")
        .unwrap()
        .on_durable(move |r| tx.send(r.unwrap()).unwrap());
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(2));
    let h = j.submit(b"third").unwrap();
    started_becomes_durable(&h);
}

/// Fix 6: the journal directory's own name is made durable: a power cut
/// right after acknowledged appends into a new directory keeps them.
#[test]
fn a_new_journal_directory_survives_a_power_cut() {
    for seed in 0..20u64 {
        let vfs = SimVfs::new(seed);
        let dir = PathBuf::from("/new/j");
        let j = Journal::open(vfs.clone(), &dir, small_options()).unwrap();
        j.append(b"acknowledged").unwrap();
        drop(j);
        vfs.crash(CrashMode::PowerLoss);
        let j = Journal::open(vfs.clone(), &dir, small_options()).unwrap();
        assert_eq!(all(&j).len(), 1, "seed {seed}: the directory was lost");
    }
}

/// Fix 6: a segment header with a valid checksum but a block size of 0 is
/// not a segment (it once divided the scan by zero).
#[test]
fn a_header_with_block_size_zero_is_refused_without_panic() {
    let (vfs, dir) = sim(5);
    let mut bytes = vec![0u8; 64 << 10];
    fuzzing::SegmentHeader {
        block_size: 0,
        store_id: 9,
        seq: 1,
        segment_size: 64 << 10,
        base_lsn: 1,
        max_write_bytes: 16 << 10,
        cut_from: 0,
    }
    .encode(&mut bytes);
    bytes[4096..4096 + 40].fill(0xab);
    let path = dir.join(format::segment_file_name(1));
    let f = vfs
        .open(&path, OpenOptions::new(OpenMode::Buffered).create(true))
        .unwrap();
    f.write_at(&bytes, 0).unwrap();
    let scan = inspect(vfs.as_ref(), &dir).unwrap();
    assert_eq!(scan.segments[0].header, Err(HeaderError::BadGeometry));
    assert!(!scan.segments[0].in_chain);
}

/// Fix 6: damage tolerated at the end of the chain is measured with the
/// write size of the journal that wrote it (from the segment headers), not
/// the opener's: a torn 6 MiB batch of a journal with 8 MiB writes is a
/// torn tail for an opener with the default 1 MiB.
#[test]
fn torn_tail_reach_comes_from_the_writer_not_the_opener() {
    let (vfs, dir) = sim(6);
    let big = JournalOptions {
        segment_size_bytes: 16 << 20,
        // The batch goes into the first segment.
        first_segment_size_bytes: 16 << 20,
        max_write_bytes: 8 << 20,
        recovery_mode: RecoveryMode::RefuseCorruption,
        ..small_options()
    };
    let j = Journal::open(vfs.clone(), &dir, big.clone()).unwrap();
    j.append(b"before").unwrap();
    // One batch of ~6.4 MiB: 100 records submitted before anyone waits.
    let handles: Vec<_> = (0..100)
        .map(|i| j.submit(&payload(i, 64 << 10)).unwrap())
        .collect();
    let last = handles.into_iter().map(|h| h.wait().unwrap()).max();
    assert_eq!(last, Some(101));
    assert_eq!(j.stats().writes, 2, "{:?}", j.stats());
    drop(j);
    // Tear the batch: its first sector never landed.
    let seg = dir.join(format::segment_file_name(1));
    let bytes = vfs.contents(&seg).unwrap();
    let block = 4096;
    let first_of_batch = block + RECORD_HEADER_BYTES + 6;
    vfs.corrupt(&seg, first_of_batch as u64, &vec![0x5a; 512])
        .unwrap();
    assert_ne!(vfs.contents(&seg).unwrap(), bytes);
    let opener = JournalOptions {
        segment_size_bytes: 16 << 20,
        recovery_mode: RecoveryMode::RefuseCorruption,
        ..JournalOptions {
            method: Some(WriteMethod::OdirectDsync),
            ..JournalOptions::default()
        }
    };
    let j = Journal::open(vfs, &dir, opener).expect("a torn tail, not corruption");
    assert_eq!(j.recovery_report().last_lsn, Some(1));
}

/// Fix 6: with `StopAtFirstBad`, a segment whose header is damaged below
/// the chain is set aside (renamed, reported), never recycled.
#[test]
fn a_damaged_segment_below_the_chain_is_set_aside_not_recycled() {
    let (vfs, dir) = sim(7);
    let j = Journal::open(vfs.clone(), &dir, small_options()).unwrap();
    for i in 1..=60 {
        j.append(&payload(i, 3000)).unwrap();
    }
    drop(j);
    let seg1 = dir.join(format::segment_file_name(1));
    vfs.corrupt(&seg1, 0, b"XXXX").unwrap();
    let damaged = vfs.contents(&seg1).unwrap();
    let j = Journal::open(vfs.clone(), &dir, small_options()).unwrap();
    let aside = PathBuf::from(format!("{}{SET_ASIDE_SUFFIX}", seg1.display()));
    assert_eq!(j.recovery_report().set_aside, vec![aside.clone()]);
    // Appends and new spares reuse free files first: not this one.
    j.preallocate(4 * small_options().segment_size_bytes)
        .unwrap();
    for i in 0..60 {
        j.append(&payload(i, 3000)).unwrap();
    }
    drop(j);
    assert_eq!(vfs.contents(&aside), Some(damaged));
    let scan = inspect(vfs.as_ref(), &dir).unwrap();
    assert_eq!(scan.set_aside, vec![aside]);
    // The strict mode refuses a journal with such a segment.
    vfs.corrupt(&dir.join(format::segment_file_name(2)), 0, b"XXXX")
        .unwrap();
    let strict = JournalOptions {
        recovery_mode: RecoveryMode::RefuseCorruption,
        ..small_options()
    };
    assert!(matches!(
        Journal::open(vfs, &dir, strict),
        Err(JournalError::Corrupt { .. })
    ));
}

/// Fix 7: a file system that reports no size (0 total blocks) is not full.
#[test]
fn a_file_system_without_a_size_is_not_full() {
    let (vfs, dir) = sim(8);
    vfs.set_space(0, 0);
    let j = Journal::open(vfs.clone(), &dir, small_options()).unwrap();
    j.append(b"fits").unwrap();
    drop(j);
    let (vfs, dir) = sim(8);
    vfs.set_space(1 << 40, 1000);
    assert!(matches!(
        Journal::open(vfs, &dir, small_options()),
        Err(JournalError::Io(e)) if matches!(*e, IoError::NoSpace { .. })
    ));
}

/// Fix 8: `writes_in_flight` alone (default batch start) gives a working
/// journal; only an explicit `RewriteTail` is refused.
#[test]
fn several_writes_in_flight_work_with_the_default_batch_start() {
    let (vfs, dir) = sim(9);
    vfs.set_in_flight(1.0);
    let opts = JournalOptions {
        writes_in_flight: 4,
        ..small_options()
    };
    let j = Arc::new(Journal::open(vfs.clone(), &dir, opts.clone()).unwrap());
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let j = Arc::clone(&j);
            std::thread::spawn(move || {
                for i in 0..50 {
                    j.append(&payload(t * 100 + i, 200)).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    drop(j);
    vfs.crash(CrashMode::PowerLoss);
    let j = Journal::open(vfs.clone(), &dir, opts).unwrap();
    assert_eq!(all(&j).len(), 200);
    let bad = JournalOptions {
        writes_in_flight: 2,
        batch_start: BatchStart::RewriteTail,
        ..small_options()
    };
    drop(j);
    assert!(matches!(
        Journal::open(vfs, &dir, bad),
        Err(JournalError::BadOptions(_))
    ));
}

/// Fix: a waiter whose journal is poisoned between its check of
/// `poisoned` and its read of the slot word must not sleep forever. The
/// hook poisons the journal at that point, with every write permit taken
/// (so the waiter cannot turn writer and must sleep): the wait fails with
/// `Poisoned` instead of hanging. Before the fix the word was read after
/// the check, and this test hung (a chained-crash run once did, in CI).
#[test]
fn a_poisoning_just_before_a_waiter_sleeps_wakes_it() {
    let (vfs, dir) = sim(11);
    let j = Journal::open(vfs.clone(), &dir, small_options()).unwrap();
    let h = j.submit(b"in the open batch").unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        test_hooks::set(Point::BeforeSleepDecision, |shared| {
            shared.writers.fetch_add(
                shared.options.writes_in_flight,
                std::sync::atomic::Ordering::SeqCst,
            );
            writer::poison_all(shared, shared.lock(), Arc::new(IoError::Crashed));
        });
        let _ = tx.send(h.wait());
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(result) => assert!(
            matches!(result, Err(JournalError::Poisoned(_))),
            "{result:?}"
        ),
        Err(_) => panic!("the waiter slept through the poisoning (lost wake-up)"),
    }
}

/// Fix (fsyncgate with several writes in flight): with a method that
/// syncs after writing (`fdatasync`), two writers' batches sit in the
/// same file's page cache, and a sync that fails may drop both — but
/// Linux reports a writeback error once per open file, to whichever sync
/// looks first. Here batch A is written, batch B is written and its sync
/// fails (dropping A's pages too), then A's sync runs and succeeds, and
/// A's writer gets to the journal's state before B's writer can report
/// its failure. A must not be acknowledged, or a power cut loses an
/// acknowledged record. Before the fix it was (the chained-crash campaign
/// caught it once in ~100,000 seeds).
#[test]
fn a_sync_after_a_failed_one_does_not_acknowledge() {
    let (vfs, dir) = sim(12);
    vfs.set_failed_sync_drops(1.0);
    let opts = JournalOptions {
        method: Some(WriteMethod::Fdatasync),
        writes_in_flight: 2,
        batch_start: BatchStart::FreshBlock,
        ..small_options()
    };
    let j = Arc::new(Journal::open(vfs.clone(), &dir, opts.clone()).unwrap());
    // Not the segment's first batch: that one is written alone.
    assert_eq!(j.append(b"first").unwrap(), 1);
    let segment = j.shared.lock().active.path.clone();
    let (written_tx, written_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (a_tx, a_rx) = mpsc::channel();
    let a = {
        let j = Arc::clone(&j);
        std::thread::spawn(move || {
            test_hooks::set(Point::BeforeBatchSync, move |_| {
                written_tx.send(()).unwrap();
                go_rx.recv().unwrap();
            });
            a_tx.send(j.append(b"record A")).unwrap();
        })
    };
    written_rx.recv().unwrap();
    // B's sync is the next sync of the segment file: it fails. Then A
    // syncs and finishes before B's writer goes on.
    vfs.fail_after_on(&segment, OpKind::Sync, 0, libc::EIO);
    let a_result = Arc::new(std::sync::Mutex::new(None));
    let a_slot = Arc::clone(&a_result);
    test_hooks::set(Point::AfterBatchSync, move |_| {
        go_tx.send(()).unwrap();
        let a = a_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("A's append returned");
        *a_slot.lock().unwrap() = Some(a);
    });
    let b = j.append(b"record B");
    assert!(b.is_err(), "{b:?}");
    a.join().unwrap();
    let a = a_result
        .lock()
        .unwrap()
        .take()
        .expect("B's sync ran its hook");
    drop(j);
    vfs.crash(CrashMode::PowerLoss);
    let j = Journal::open(vfs.clone(), &dir, opts).unwrap();
    let got = all(&j);
    if let Ok(lsn) = a {
        assert!(
            got.iter().any(|(l, p)| *l == lsn && p == b"record A"),
            "acknowledged lsn {lsn} lost: recovered {:?}",
            got.iter().map(|r| r.0).collect::<Vec<_>>()
        );
    }
}

/// Twenty records appended one after another (each made once the one
/// before it was durable), then 64 bytes of garbage in record 9, near the
/// end of the journal: the records after it say record 9 was durable, so
/// this is corruption wherever it lies — refused by `RefuseCorruption`,
/// reported (and cut there) by `StopAtFirstBad`. Before each record carried
/// its durable LSN, damage this close to the end passed for a torn tail.
#[test]
fn damage_near_the_end_is_corruption_when_a_later_record_proves_it() {
    let (vfs, dir) = sim(11);
    let j = Journal::open(vfs.clone(), &dir, small_options()).unwrap();
    for i in 1..=20 {
        j.append(&payload(i, 100)).unwrap();
    }
    drop(j);
    let scan = inspect(vfs.as_ref(), &dir).unwrap();
    let seg = &scan.segments[0];
    let r9 = seg.records.iter().find(|r| r.lsn == 9).unwrap();
    vfs.corrupt(&seg.path, r9.pos + 20, &[0xa5; 64]).unwrap();
    let strict = JournalOptions {
        recovery_mode: RecoveryMode::RefuseCorruption,
        ..small_options()
    };
    match Journal::open(vfs.clone(), &dir, strict) {
        Err(JournalError::Corrupt { later_lsn, .. }) => assert!(later_lsn > 9),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("damage before durable records was taken for a torn tail"),
    }
    let scan = inspect(vfs.as_ref(), &dir).unwrap();
    assert_eq!(scan.last_lsn, Some(8));
    let e = scan.valid_after_damage.expect("evidence");
    assert!(e.durable_lsn >= 9 && e.lsn > 9, "{e:?}");
    // The same bytes, when the records after them were made while record 9
    // was in flight (several writes overlapping), are a torn tail.
    for s in &scan.segments {
        let mut bytes = vfs.contents(&s.path).unwrap();
        fuzzing::lower_claims(&mut bytes, s.seq, 9, 8);
        vfs.corrupt(&s.path, 0, &bytes).unwrap();
    }
    let strict = JournalOptions {
        recovery_mode: RecoveryMode::RefuseCorruption,
        ..small_options()
    };
    let j = Journal::open(vfs.clone(), &dir, strict).expect("a torn tail");
    assert_eq!(j.recovery_report().last_lsn, Some(8));
}

/// A segment file cut short behind the journal's back is corruption for
/// `RefuseCorruption`, wherever the cut falls: no crash changes a
/// segment's length once its header is written.
#[test]
fn a_segment_shorter_than_its_header_says_is_refused() {
    for keep in [12 << 10, 40 << 10] {
        let (vfs, dir) = sim(12);
        let j = Journal::open(vfs.clone(), &dir, small_options()).unwrap();
        for i in 1..=40 {
            j.append(&payload(i, 3000)).unwrap();
        }
        drop(j);
        let scan = inspect(vfs.as_ref(), &dir).unwrap();
        let last = scan.segments.iter().rfind(|s| s.in_chain).unwrap();
        let file = vfs
            .open(&last.path, OpenOptions::new(OpenMode::Buffered))
            .unwrap();
        file.set_len(keep).unwrap();
        file.sync(crate::io::SyncKind::Data).unwrap();
        drop(file);
        let strict = JournalOptions {
            recovery_mode: RecoveryMode::RefuseCorruption,
            ..small_options()
        };
        match Journal::open(vfs.clone(), &dir, strict) {
            Err(JournalError::Corrupt { seq, pos, .. }) => {
                assert_eq!((seq, pos), (last.seq, keep), "cut to {keep}")
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("a segment cut to {keep} bytes was accepted"),
        }
        let scan = inspect(vfs.as_ref(), &dir).unwrap();
        assert_eq!(scan.wrong_length.map(|w| w.0), Some(last.seq));
    }
}

/// A `truncate_after` cut short by a crash leaves its mark in a segment
/// header; the next writable open zeroes what the truncation may have left
/// and clears the mark, so that records written after it prove damage
/// again.
#[test]
fn an_interrupted_truncation_is_finished_by_the_next_open() {
    let (vfs, dir) = sim(13);
    let j = Journal::open(vfs.clone(), &dir, small_options()).unwrap();
    for i in 1..=30 {
        j.append(&payload(i, 3000)).unwrap();
    }
    // Spares enough that the preparer thread starts nothing while the
    // crash point counts the truncation's operations.
    j.preallocate(4 * (64 << 10)).unwrap();
    // The mark and the zeroing of the last segment land; the rest does
    // not (a segment is one chunk of zeros here).
    vfs.crash_after_ops(2);
    assert!(j.truncate_after(10).is_err());
    drop(j);
    vfs.crash(CrashMode::Process);
    let scan = inspect(vfs.as_ref(), &dir).unwrap();
    let cut = scan.pending_cut.expect("the mark");
    assert_eq!(cut.cut_from, 11);
    let j = Journal::open(vfs.clone(), &dir, small_options()).unwrap();
    let kept = j.recovery_report().last_lsn.unwrap();
    assert!((10..=30).contains(&kept), "{kept}");
    drop(j);
    let scan = inspect(vfs.as_ref(), &dir).unwrap();
    assert_eq!(scan.pending_cut, None, "the open cleared the mark");
    assert_eq!(scan.last_lsn, Some(kept));
    let beyond = scan.segments.iter().any(|s| {
        let bytes = vfs.contents(&s.path).unwrap();
        let from = if s.in_chain { s.end_pos as usize } else { 0 };
        let found = scan::valid_records(&bytes, s.seq, from).count();
        found > 0
    });
    assert!(
        !beyond,
        "records from before the cut are left past the chain"
    );
}

/// A damaged header in the middle of the chain is named as such: the
/// chain ends cleanly in the segment before it, and the refusal says the
/// next segment's header is what is damaged (not the intact place where
/// the chain stopped).
#[test]
fn a_damaged_header_inside_the_chain_is_named() {
    let (vfs, dir) = sim(14);
    let j = Journal::open(vfs.clone(), &dir, small_options()).unwrap();
    for i in 1..=40 {
        j.append(&payload(i, 3000)).unwrap();
    }
    drop(j);
    vfs.corrupt(&dir.join(format::segment_file_name(2)), 20, &[0xff])
        .unwrap();
    let strict = JournalOptions {
        recovery_mode: RecoveryMode::RefuseCorruption,
        ..small_options()
    };
    match Journal::open(vfs, &dir, strict) {
        Err(JournalError::Corrupt {
            seq, pos, reason, ..
        }) => {
            assert_eq!((seq, pos), (2, 0), "{reason}");
            assert!(reason.contains("header is not valid"), "{reason}");
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a damaged header before durable records was accepted"),
    }
}
