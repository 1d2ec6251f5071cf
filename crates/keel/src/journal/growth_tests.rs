//! Segments of several sizes: a journal starts with small segments, grows
//! them while they fill fast, makes a segment to fit a record larger than
//! the next spare, and recycles every segment at its own size.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::format::{parse_segment_file_name, segment_file_name};
use super::tests::small_options;
use super::*;
use crate::io::{CrashMode, SimVfs, Vfs};

const BLOCK: u64 = 4096;

/// Segments start at 4 blocks and grow to 256 KiB.
fn growing() -> JournalOptions {
    JournalOptions {
        segment_size_bytes: 256 << 10,
        first_segment_size_bytes: 4 * BLOCK,
        ..small_options()
    }
}

fn sim(seed: u64) -> (Arc<SimVfs>, PathBuf) {
    let vfs = SimVfs::new(seed);
    let dir = PathBuf::from("/j");
    vfs.create_dir_durable(&dir).unwrap();
    (vfs, dir)
}

fn payload(lsn: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (lsn as usize * 17 + i) as u8).collect()
}

/// Every segment file: (seq, file length), in sequence order, each checked
/// against the size its header states.
fn segment_sizes(vfs: &SimVfs, dir: &Path) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = vfs
        .read_dir(dir)
        .unwrap()
        .into_iter()
        .filter_map(|name| parse_segment_file_name(&name))
        .map(|seq| {
            let bytes = vfs.contents(&dir.join(segment_file_name(seq))).unwrap();
            let h = SegmentHeader::decode(&bytes).expect("a valid header");
            assert_eq!(h.segment_size, bytes.len() as u64, "segment {seq}");
            (seq, bytes.len() as u64)
        })
        .collect();
    out.sort();
    out
}

fn check_all(j: &Journal, lens: &[(Lsn, usize)]) {
    let got: Vec<(Lsn, Vec<u8>)> = j.read_from(1).unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(got.len(), lens.len());
    for ((lsn, p), (want_lsn, len)) in got.iter().zip(lens) {
        assert_eq!(lsn, want_lsn);
        assert_eq!(p, &payload(*lsn, *len), "lsn {lsn}");
    }
}

#[test]
fn segments_start_small_and_double_while_they_fill_fast() {
    let (vfs, dir) = sim(1);
    let opts = growing();
    let j = Journal::open(vfs.clone(), &dir, opts.clone()).unwrap();
    // A new journal: the active segment and one spare, both of the first
    // size.
    assert_eq!(
        segment_sizes(&vfs, &dir),
        vec![(1, 4 * BLOCK), (2, 4 * BLOCK)]
    );
    let mut lens = Vec::new();
    for i in 1..=400u64 {
        let len = 500 + (i as usize * 37) % 2500;
        assert_eq!(j.append(&payload(i, len)).unwrap(), i);
        lens.push((i, len));
    }
    assert!(j.stats().rollovers >= 7, "{:?}", j.stats());
    // The preparer finishes the segment it is making before the journal
    // closes.
    drop(j);
    let sizes: Vec<u64> = segment_sizes(&vfs, &dir).iter().map(|s| s.1).collect();
    // Each rollover doubles the next new segment, up to the largest size,
    // then stays there.
    let kib = |k: u64| k << 10;
    assert_eq!(
        sizes[..7],
        [
            kib(16),
            kib(16),
            kib(32),
            kib(64),
            kib(128),
            kib(256),
            kib(256)
        ],
        "{sizes:?}"
    );
    assert!(sizes[7..].iter().all(|&s| s == kib(256)), "{sizes:?}");
    vfs.crash(CrashMode::PowerLoss);
    let j = Journal::open(vfs, &dir, opts).unwrap();
    check_all(&j, &lens);
}

/// The doubling waits for a segment that filled within
/// `GROW_IF_FILLED_WITHIN`: one that took longer keeps the size.
#[test]
fn a_segment_filled_slowly_does_not_grow_the_next() {
    let (vfs, dir) = sim(2);
    let j = Journal::open(vfs.clone(), &dir, growing()).unwrap();
    let fill = |from: u64| {
        // Two records of 5 KiB fill a 16 KiB segment: the third rolls over.
        for i in from..from + 2 {
            j.append(&payload(i, 5 << 10)).unwrap();
        }
    };
    fill(1); // segment 1
    fill(3); // segment 2: rolled over fast, segment 3 will be 32 KiB
    std::thread::sleep(GROW_IF_FILLED_WITHIN + std::time::Duration::from_millis(200));
    fill(5); // segment 3, entered more than the window after segment 2
    assert_eq!(j.stats().rollovers, 2);
    // Segment 4 is being made; the journal closes once it is.
    let seg4 = dir.join(segment_file_name(4));
    let t0 = std::time::Instant::now();
    while !vfs.exists(&seg4).unwrap() {
        assert!(t0.elapsed().as_secs() < 30, "segment 4 never made");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    drop(j);
    let sizes: Vec<u64> = segment_sizes(&vfs, &dir).iter().map(|s| s.1).collect();
    assert_eq!(
        sizes[..4],
        [16 << 10, 16 << 10, 32 << 10, 32 << 10],
        "{sizes:?}"
    );
}

#[test]
fn a_record_larger_than_the_next_spare_gets_a_segment_that_holds_it() {
    let (vfs, dir) = sim(3);
    let opts = JournalOptions {
        segment_size_bytes: 1 << 20,
        ..growing()
    };
    let max = opts.max_record_bytes();
    assert_eq!(max, (1 << 20) - 4096 - RECORD_HEADER_BYTES);
    let j = Journal::open(vfs.clone(), &dir, opts.clone()).unwrap();
    let lens = [(1, 10), (2, max), (3, 100), (4, 200_000), (5, max)];
    for &(lsn, len) in &lens {
        assert_eq!(j.append(&payload(lsn, len)).unwrap(), lsn);
    }

    assert!(matches!(
        j.append(&vec![0u8; max + 1]),
        Err(JournalError::RecordTooLarge { .. })
    ));
    drop(j);
    // The segment made for record 2 and every one after it holds a
    // record of the largest size: none is made for record 5.
    let sizes = segment_sizes(&vfs, &dir);
    assert!(sizes[1..].iter().all(|s| s.1 == 1 << 20), "{sizes:?}");
    // Every segment of the chain holds a record (an empty one would end
    // the chain before the records after it).
    let scan = inspect(vfs.as_ref(), &dir).unwrap();
    let chain: Vec<_> = scan.segments.iter().filter(|s| s.in_chain).collect();
    assert!(chain.iter().all(|s| !s.records.is_empty()), "{chain:?}");
    assert_eq!(scan.last_lsn, Some(5));
    vfs.crash(CrashMode::PowerLoss);
    let j = Journal::open(vfs.clone(), &dir, opts.clone()).unwrap();
    check_all(&j, &lens);
    // After a reopen too, with the segments back at the first size.
    assert_eq!(j.append(&payload(6, max)).unwrap(), 6);
    drop(j);
    vfs.crash(CrashMode::PowerLoss);
    let j = Journal::open(vfs, &dir, opts).unwrap();
    let mut all = lens.to_vec();
    all.push((6, max));
    check_all(&j, &all);
}

#[test]
fn segments_recycle_at_their_own_size() {
    let (vfs, dir) = sim(4);
    let opts = growing();
    let j = Journal::open(vfs.clone(), &dir, opts.clone()).unwrap();
    let mut lens = Vec::new();
    for i in 1..=600u64 {
        let len = 300 + (i as usize * 53) % 3000;
        j.append(&payload(i, len)).unwrap();
        lens.push((i, len));
        if i % 50 == 0 {
            j.release(i - 20);
        }
    }
    let stats = j.stats();
    assert!(stats.segments_recycled >= 3, "{stats:?}");
    drop(j);
    // Free files smaller than the size segments have grown to are removed
    // once a larger one exists: the small ones of the start do not pile up.
    let files = segment_sizes(&vfs, &dir);
    assert!(
        files.iter().filter(|f| f.1 < 128 << 10).count() <= 3,
        "{files:?}"
    );
    vfs.crash(CrashMode::PowerLoss);
    let j = Journal::open(vfs.clone(), &dir, opts.clone()).unwrap();
    let first = j.read_from(1).unwrap().next().unwrap().unwrap().0;
    assert!(first <= 581, "first recovered lsn {first}");
    check_all(&j, &lens[first as usize - 1..]);
    // Reopened, the journal starts again from the first size, but a free
    // file at least that large is recycled at its own size.
    for i in 601..=700u64 {
        j.append(&payload(i, 2000)).unwrap();
        lens.push((i, 2000));
        j.release(i - 20);
    }
    assert!(j.stats().segments_recycled >= 1, "{:?}", j.stats());
    drop(j);
    let sizes = segment_sizes(&vfs, &dir);
    assert!(sizes.iter().all(|s| s.1 <= 256 << 10), "{sizes:?}");
    let j = Journal::open(vfs, &dir, opts).unwrap();
    let first = j.read_from(1).unwrap().next().unwrap().unwrap().0;
    check_all(&j, &lens[first as usize - 1..]);
}

/// An existing journal keeps its largest segment size, whatever the
/// opener asks for (its headers record it): its record limit never drops
/// below a record it holds, and a store's value limit stays what it was.
#[test]
fn an_existing_journal_keeps_its_largest_segment_size() {
    let (vfs, dir) = sim(5);
    let big = JournalOptions {
        segment_size_bytes: 1 << 20,
        ..growing()
    };
    let j = Journal::open(vfs.clone(), &dir, big.clone()).unwrap();
    let max = big.max_record_bytes();
    j.append(&payload(1, 10)).unwrap();
    drop(j);
    // Its segments are still all of the first size.
    assert!(segment_sizes(&vfs, &dir).iter().all(|s| s.1 == 4 * BLOCK));
    let j = Journal::open(vfs.clone(), &dir, growing()).unwrap();
    assert_eq!(j.options().segment_size_bytes, 1 << 20);
    assert_eq!(j.options().max_record_bytes(), max);
    j.append(&payload(2, max)).unwrap();
    drop(j);
    let j = Journal::open(vfs.clone(), &dir, growing()).unwrap();
    check_all(&j, &[(1, 10), (2, max)]);
    drop(j);
    // The other way: a larger option does not raise a journal's limit.
    let (vfs, dir) = sim(6);
    drop(Journal::open(vfs.clone(), &dir, growing()).unwrap());
    let j = Journal::open(vfs.clone(), &dir, big).unwrap();
    assert_eq!(j.options().segment_size_bytes, 256 << 10);
    drop(j);
    // A journal whose headers record no largest size (an older one: zeros
    // after the header) keeps its largest segment's.
    let (vfs, dir) = sim(7);
    let j = Journal::open(vfs.clone(), &dir, small_options()).unwrap();
    for i in 1..=40 {
        j.append(&payload(i, 3000)).unwrap();
    }
    drop(j);
    for (seq, _) in segment_sizes(&vfs, &dir) {
        let path = dir.join(segment_file_name(seq));
        vfs.corrupt(&path, SEGMENT_HEADER_BYTES as u64, &[0u8; 12])
            .unwrap();
    }
    let j = Journal::open(vfs, &dir, growing()).unwrap();
    assert_eq!(j.options().segment_size_bytes, 64 << 10);
    assert_eq!(j.read_from(1).unwrap().count(), 40);
}

#[test]
fn preallocate_makes_segments_as_large_as_the_bytes_asked_for_need() {
    let (vfs, dir) = sim(7);
    let j = Journal::open(vfs.clone(), &dir, growing()).unwrap();
    // The spare made at open (16 KiB) and segments of the largest size.
    let made = j.preallocate(600 << 10).unwrap();
    assert_eq!(made, 3);
    drop(j);
    // What is still missing after two of the largest: 600 − 12 − 2 × 252
    // KiB of records, in a segment of 84 KiB + its header block.
    let sizes: Vec<u64> = segment_sizes(&vfs, &dir).iter().map(|s| s.1).collect();
    assert_eq!(sizes, [16 << 10, 16 << 10, 256 << 10, 256 << 10, 88 << 10]);
    // A small amount: one segment for it, not one of the largest size.
    let (vfs, dir) = sim(8);
    let j = Journal::open(vfs.clone(), &dir, growing()).unwrap();
    assert_eq!(j.preallocate(40 << 10).unwrap(), 1);
    drop(j);
    let sizes: Vec<u64> = segment_sizes(&vfs, &dir).iter().map(|s| s.1).collect();
    assert_eq!(sizes, [16 << 10, 16 << 10, (40 << 10) - (12 << 10) + BLOCK]);
}

#[test]
fn first_segment_size_must_be_whole_blocks() {
    let (vfs, dir) = sim(9);
    let bad = JournalOptions {
        first_segment_size_bytes: 5000,
        ..growing()
    };
    assert!(matches!(
        Journal::open(vfs, &dir, bad),
        Err(JournalError::BadOptions(_))
    ));
    // Less than 4 blocks, or more than the largest size, is taken as that.
    let o = JournalOptions {
        first_segment_size_bytes: BLOCK,
        ..growing()
    };
    assert_eq!(o.first_segment_bytes(), 4 * BLOCK);
    let o = JournalOptions {
        first_segment_size_bytes: 1 << 30,
        ..growing()
    };
    assert_eq!(o.first_segment_bytes(), 256 << 10);
}

/// A crash at every step of making a segment for a record too large for
/// the one it would go into — the empty active segment replaced under a
/// temporary name, or the next spare replaced — loses no acknowledged
/// record, leaves no temporary file behind the next open, and the journal
/// goes on.
#[test]
fn a_crash_while_a_segment_is_made_for_a_large_record_loses_nothing() {
    let opts = JournalOptions {
        segment_size_bytes: 1 << 20,
        recovery_mode: RecoveryMode::RefuseCorruption,
        ..growing()
    };
    let big = 600 << 10;
    for small_first in [false, true] {
        let mut crashed_at = std::collections::BTreeSet::new();
        for ops in 0..30u64 {
            let (vfs, dir) = sim(100 + ops);
            let j = Journal::open(vfs.clone(), &dir, opts.clone()).unwrap();
            let mut acked = Vec::new();
            if small_first {
                j.append(&payload(1, 100)).unwrap();
                acked.push((1, 100));
            }
            let lsn = acked.len() as u64 + 1;
            vfs.crash_after_ops(ops);
            if j.append(&payload(lsn, big)).is_ok() {
                acked.push((lsn, big));
            }
            if let Some(c) = vfs.crash_op() {
                crashed_at.insert(c.op);
            }
            drop(j);
            vfs.crash(if ops % 2 == 0 {
                CrashMode::PowerLoss
            } else {
                CrashMode::Process
            });
            let j = Journal::open(vfs.clone(), &dir, opts.clone())
                .unwrap_or_else(|e| panic!("crash after {ops} ops: {e}"));
            let got: Vec<Lsn> = j.read_from(1).unwrap().map(|r| r.unwrap().0).collect();
            assert!(got.len() >= acked.len(), "crash after {ops} ops: {got:?}");
            let names = vfs.read_dir(&dir).unwrap();
            assert!(
                !names.iter().any(|n| n.ends_with(".new")),
                "crash after {ops} ops: {names:?}"
            );
            let next = j.next_lsn();
            assert_eq!(j.append(&payload(next, big)).unwrap(), next);
            drop(j);
            let j = Journal::open(vfs, &dir, opts.clone()).unwrap();
            let mut want: Vec<(Lsn, usize)> = got
                .iter()
                .map(|&l| (l, if l == 1 && small_first { 100 } else { big }))
                .collect();
            want.push((next, big));
            check_all(&j, &want);
        }
        // Every kind of step of the replacement, and the record's write,
        // was crashed at.
        let mut steps = vec![
            "create",
            "zero-fill",
            "fdatasync",
            "write",
            "fsync directory",
        ];
        steps.push(if small_first { "remove" } else { "rename" });
        for step in steps {
            assert!(crashed_at.contains(step), "{step}: {crashed_at:?}");
        }
    }
}

/// A committer that finds no open batch while the active segment is being
/// replaced for a record too large for it is woken once it is (alone, no
/// other waiter wakes it).
#[test]
fn a_committer_waiting_behind_a_replaced_segment_goes_on() {
    for seed in 0..40 {
        let (vfs, dir) = sim(200 + seed);
        let opts = JournalOptions {
            segment_size_bytes: 4 << 20,
            ..growing()
        };
        let max = opts.max_record_bytes();
        let j = Arc::new(Journal::open(vfs, &dir, opts).unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        for t in 0..2u64 {
            let (j, tx) = (Arc::clone(&j), tx.clone());
            std::thread::spawn(move || {
                let ok = if t == 0 {
                    // Larger than the first segment: it is replaced.
                    j.append(&payload(0, max)).is_ok()
                } else {
                    (0..200).all(|i| j.append(&payload(i, 10)).is_ok())
                };
                tx.send(ok).unwrap();
            });
        }
        for _ in 0..2 {
            let ok = rx
                .recv_timeout(std::time::Duration::from_secs(60))
                .expect("a committer never returned");
            assert!(ok);
        }
    }
}
