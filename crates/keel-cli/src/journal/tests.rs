//! The report's verdicts on journals built and damaged on the simulated
//! file layer.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use keel::io::{SimVfs, WriteMethod};
use keel::journal::{Journal, JournalOptions};

use super::report::{build, Status};
use super::RecordFilter;

fn options() -> JournalOptions {
    JournalOptions {
        segment_size_bytes: 64 << 10,
        block_size_bytes: 4096,
        max_write_bytes: 16 << 10,
        method: Some(WriteMethod::OdirectDsync),
        ..JournalOptions::default()
    }
}

/// A journal of `n` records of 3000 bytes (about 20 per segment).
fn journal(n: u64) -> (Arc<SimVfs>, PathBuf) {
    let vfs = SimVfs::new(7);
    let dir = PathBuf::from("/j");
    vfs.create_dir_durable(&dir).unwrap();
    let j = Journal::open(vfs.clone(), &dir, options()).unwrap();
    for i in 0..n {
        j.append(&vec![i as u8; 3000]).unwrap();
    }
    drop(j);
    (vfs, dir)
}

fn seg(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:020}.seg"))
}

/// Flip a byte in the payload of segment `seq`'s first record (the block
/// after the header).
fn flip_first_record(vfs: &SimVfs, dir: &Path, seq: u64) {
    vfs.corrupt(&seg(dir, seq), 4096 + 40, &[0x55]).unwrap();
}

#[test]
fn clean_journal_lists_every_record() {
    let (vfs, dir) = journal(50);
    let filter = RecordFilter {
        from: 10,
        limit: 5,
        payload_bytes: 4,
    };
    let r = build(vfs.as_ref(), &dir, Some(filter)).unwrap();
    assert_eq!(r.status, Status::Clean, "{}", r.summary);
    assert_eq!(
        (r.records, r.first_lsn, r.last_lsn),
        (50, Some(1), Some(50))
    );
    assert!(r.chain_segments >= 3);
    let rows = r.listed_records.unwrap();
    assert_eq!(
        rows.iter().map(|r| r.lsn).collect::<Vec<_>>(),
        [10, 11, 12, 13, 14]
    );
    assert_eq!(rows[0].payload_hex.as_deref(), Some("09090909"));
    assert_eq!(r.stop.unwrap().reason, "clean_end");
    let text = super::print::render(&build(vfs.as_ref(), &dir, None).unwrap());
    assert!(text.contains("CLEAN"), "{text}");
}

#[test]
fn torn_last_record_is_a_torn_tail() {
    let (vfs, dir) = journal(30);
    let r = build(vfs.as_ref(), &dir, None).unwrap();
    let stop = r.stop.unwrap();
    // Damage the last record's payload: a write cut short.
    let last = r.segments.iter().rfind(|s| s.in_chain).unwrap();
    let at = stop.offset - 10;
    vfs.corrupt(&seg(&dir, last.seq), at, &[0xff]).unwrap();
    let r = build(vfs.as_ref(), &dir, None).unwrap();
    assert_eq!(r.status, Status::TornTail, "{}", r.summary);
    assert_eq!(r.last_lsn, Some(29));
    assert_eq!(r.stop.as_ref().unwrap().checksum, Some("bad"));
}

#[test]
fn damage_in_the_middle_is_corrupt() {
    let (vfs, dir) = journal(60);
    // A bit flip in the first record of segment 1: everything after is
    // valid, so records would be lost.
    flip_first_record(&vfs, &dir, 1);
    let r = build(vfs.as_ref(), &dir, None).unwrap();
    assert_eq!(r.status, Status::Corrupt, "{}", r.summary);
    assert_eq!(r.problems[0].kind, "damage_before_valid_records");
    assert_eq!(r.records, 0);
}

#[test]
fn damaged_header_is_corrupt() {
    for seq in [1u64, 2] {
        let (vfs, dir) = journal(60);
        vfs.corrupt(&seg(&dir, seq), 3, b"X").unwrap();
        let r = build(vfs.as_ref(), &dir, None).unwrap();
        assert_eq!(r.status, Status::Corrupt, "segment {seq}: {}", r.summary);
        let header = &r.segments.iter().find(|s| s.seq == seq).unwrap().header;
        assert_eq!(header, "bad magic");
    }
}

#[test]
fn missing_journal_is_an_error() {
    let vfs = SimVfs::new(1);
    vfs.create_dir_durable(Path::new("/empty")).unwrap();
    let e = build(vfs.as_ref(), Path::new("/empty"), None).unwrap_err();
    assert!(e.to_string().contains("not a journal"), "{e}");
}

#[test]
fn records_past_a_torn_first_write_are_a_notice() {
    // The chain ends in segment 3's first record; valid records of the same
    // epoch follow it within one torn write's reach, as when the first
    // write into a segment is torn: never acknowledged, not corruption.
    let (vfs, dir) = journal(45);
    flip_first_record(&vfs, &dir, 3);
    // The records after it were made while it was in flight: none says it
    // was durable.
    let mut bytes = vfs.contents(&seg(&dir, 3)).unwrap();
    keel::journal::fuzzing::lower_claims(&mut bytes, 3, 31, 30);
    vfs.corrupt(&seg(&dir, 3), 0, &bytes).unwrap();
    let r = build(vfs.as_ref(), &dir, None).unwrap();
    assert_eq!(r.status, Status::TornTail, "{}", r.summary);
    assert_eq!(r.records, 30);
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    assert_eq!(r.notices.len(), 1, "{:?}", r.notices);
    assert_eq!(r.notices[0].kind, "unacknowledged_records_after_chain");
    assert_eq!(r.notices[0].segment, Some(3));
    assert!(r.summary.contains("zeroes them"), "{}", r.summary);
    let text = super::print::render(&r);
    assert!(
        text.contains("note [unacknowledged_records_after_chain]"),
        "{text}"
    );
    // Opening the journal zeroes them, as the notice says.
    drop(Journal::open(vfs.clone(), &dir, options()).unwrap());
    let r = build(vfs.as_ref(), &dir, None).unwrap();
    assert!(r.notices.is_empty(), "{:?}", r.notices);
    assert_eq!(r.records, 30, "{}", r.summary);
    // A clean journal: no notice.
    let (vfs, dir) = journal(45);
    let r = build(vfs.as_ref(), &dir, None).unwrap();
    assert!(r.notices.is_empty(), "{:?}", r.notices);
}

#[test]
fn a_segment_set_aside_by_an_open_is_reported() {
    let (vfs, dir) = journal(60);
    vfs.corrupt(&seg(&dir, 1), 3, b"X").unwrap();
    // The default mode keeps the chain above it and sets the file aside.
    let j = Journal::open(vfs.clone(), &dir, options()).unwrap();
    assert_eq!(j.recovery_report().set_aside.len(), 1);
    drop(j);
    let r = build(vfs.as_ref(), &dir, None).unwrap();
    assert_eq!(r.status, Status::Corrupt, "{}", r.summary);
    assert_eq!(r.problems[0].kind, "segment_set_aside", "{:?}", r.problems);
    assert!(r.problems[0].message.contains(".seg.damaged"));
}
