//! Damage to a store's journal, judged against its data file's checkpoint:
//! records the checkpoint covers are not needed, so damage confined to
//! them opens the store (and is reported); damage to a record the
//! checkpoint does not cover is refused, whatever its distance from the
//! journal's end.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use keel::db::{Database, DbError, JOURNAL_DIR};
use keel::io::{SimVfs, Vfs};
use keel::journal::{self, JournalOptions};

fn builder(vfs: &Arc<SimVfs>) -> keel::db::Builder {
    let vfs: Arc<dyn Vfs> = vfs.clone();
    Database::builder()
        .vfs(vfs)
        .journal(JournalOptions {
            segment_size_bytes: 1 << 20,
            ..JournalOptions::default()
        })
        .background_checkpoints(false)
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

fn value(i: u32) -> Vec<u8> {
    vec![i as u8; 200 + i as usize % 50]
}

/// A store with `checkpointed` commits in its data file and `after` more
/// only in its journal (one put each, committed one after another).
fn store(checkpointed: u32, after: u32) -> (Arc<SimVfs>, PathBuf) {
    let vfs = SimVfs::new(3);
    let dir = PathBuf::from("/s");
    let db = builder(&vfs).create(&dir).unwrap();
    let put = |i: u32| {
        let w = db.begin_write().unwrap();
        w.open_table("t").unwrap().insert(key(i), value(i)).unwrap();
        w.commit().unwrap();
    };
    (0..checkpointed).for_each(put);
    db.checkpoint().unwrap();
    (checkpointed..checkpointed + after).for_each(put);
    // Dropped, not closed: closing would checkpoint the rest too.
    drop(db);
    (vfs, dir)
}

/// Write 64 bytes of garbage into the journal record with LSN `lsn`.
fn damage(vfs: &SimVfs, dir: &Path, lsn: u64) {
    let scan = journal::inspect(vfs, &dir.join(JOURNAL_DIR)).unwrap();
    let (seg, r) = scan
        .segments
        .iter()
        .find_map(|s| s.records.iter().find(|r| r.lsn == lsn).map(|r| (s, r)))
        .expect("the record");
    vfs.corrupt(&seg.path, r.pos + 10, &[0x5a; 64]).unwrap();
}

fn check_all(db: &Database, n: u32) {
    let r = db.begin_read();
    let t = r.open_table("t").unwrap();
    for i in 0..n {
        let v = t
            .get(key(i))
            .unwrap()
            .unwrap_or_else(|| panic!("key {i} lost"));
        assert_eq!(v.as_ref(), &value(i)[..], "key {i}");
    }
}

/// Every record is covered by the checkpoint: damage among them used to
/// make the store impossible to open ("the journal ends before lsn 10, but
/// the data file's checkpoint covers up to lsn 40").
#[test]
fn damage_the_checkpoint_covers_opens_and_is_reported() {
    let (vfs, dir) = store(40, 0);
    let checkpoint = builder(&vfs).open(&dir).unwrap().stats().checkpoint_lsn;
    damage(&vfs, &dir, 10);
    let db = builder(&vfs).open(&dir).unwrap();
    check_all(&db, 40);
    let skipped = &db.journal().recovery_report().skipped;
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(skipped[0].lsns.0, 10, "{skipped:?}");
    assert!(skipped[0].lsns.1 <= checkpoint, "{skipped:?}");
    // The store goes on, and what it commits now survives a reopen.
    let w = db.begin_write().unwrap();
    w.open_table("t")
        .unwrap()
        .insert(key(40), value(40))
        .unwrap();
    w.commit().unwrap();
    db.close().unwrap();
    let db = builder(&vfs).open(&dir).unwrap();
    check_all(&db, 41);
}

/// Damage to a covered record with needed records after it: recovery goes
/// past the damage to them.
#[test]
fn damage_below_the_checkpoint_keeps_the_records_after_it() {
    let (vfs, dir) = store(40, 20);
    damage(&vfs, &dir, 10);
    let db = builder(&vfs).open(&dir).unwrap();
    check_all(&db, 60);
    let report = db.journal().recovery_report();
    assert_eq!(
        report.skipped.iter().map(|s| s.lsns.0).collect::<Vec<_>>(),
        [10]
    );
    assert!(report.first_lsn.unwrap() > 10, "{report:?}");
    assert!(db.stats().checkpoint_lsn < report.last_lsn.unwrap());
    drop(db);
    let db = builder(&vfs).open(&dir).unwrap();
    check_all(&db, 60);
}

/// Damage to a record the checkpoint does not cover, with records after
/// it that say it was durable: refused, however near the end it lies.
#[test]
fn damage_to_a_needed_record_is_refused() {
    let (vfs, dir) = store(40, 20);
    let last = journal::inspect(vfs.as_ref(), &dir.join(JOURNAL_DIR))
        .unwrap()
        .last_lsn
        .unwrap();
    damage(&vfs, &dir, last - 3);
    match builder(&vfs).open(&dir) {
        Err(DbError::Journal(journal::JournalError::Corrupt { later_lsn, .. })) => {
            assert!(later_lsn > last - 3)
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("opened without durable records"),
    }
}

/// Every file of the store, by name, with its bytes.
fn files(vfs: &SimVfs, dir: &Path) -> Vec<(PathBuf, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    for d in [dir.to_path_buf(), dir.join(JOURNAL_DIR)] {
        let mut names = vfs.read_dir(&d).unwrap();
        names.sort();
        out.extend(
            names
                .into_iter()
                .map(|n| (d.join(&n), vfs.contents(&d.join(n)))),
        );
    }
    out
}

/// A read-only open replays the journal into memory and reads every
/// commit, refuses writes and checkpoints, and changes no byte of any file
/// — even with damage the journal goes past, which a writable open would
/// overwrite as it goes on.
#[test]
fn a_read_only_open_reads_everything_and_changes_no_byte() {
    let (vfs, dir) = store(40, 20);
    damage(&vfs, &dir, 10);
    let before = files(&vfs, &dir);
    let ops = vfs.op_count();
    let db = builder(&vfs).open_read_only(&dir).unwrap();
    assert!(db.is_read_only());
    check_all(&db, 60);
    assert_eq!(db.journal().recovery_report().skipped.len(), 1);
    assert!(matches!(db.begin_write(), Err(DbError::ReadOnly(_))));
    assert!(matches!(db.checkpoint(), Err(DbError::ReadOnly(_))));
    db.check().unwrap();
    db.close().unwrap();
    assert!(
        files(&vfs, &dir) == before,
        "a read-only open changed the store's files"
    );
    // Not a write, a sync, a rename or a file created: nothing at all.
    assert_eq!(vfs.op_count(), ops, "a read-only open wrote");
    // Damage to a needed record is refused read-only as well.
    let (vfs, dir) = store(40, 20);
    let last = journal::inspect(vfs.as_ref(), &dir.join(JOURNAL_DIR))
        .unwrap()
        .last_lsn
        .unwrap();
    damage(&vfs, &dir, last - 3);
    assert!(matches!(
        builder(&vfs).open_read_only(&dir),
        Err(DbError::Journal(journal::JournalError::Corrupt { .. }))
    ));
}

/// A data file cut to nothing under a journal that still holds every
/// commit from the first: opening and creating say it is damaged and name
/// salvage (not "a creation that never finished"), and salvage replays
/// the journal onto an empty tree, losing nothing.
#[test]
fn a_lost_data_file_is_salvaged_from_a_journal_that_starts_at_the_first_commit() {
    let vfs = SimVfs::new(5);
    let dir = PathBuf::from("/s");
    let db = builder(&vfs).create(&dir).unwrap();
    for i in 0..40 {
        let w = db.begin_write().unwrap();
        w.open_table("t").unwrap().insert(key(i), value(i)).unwrap();
        w.commit().unwrap();
    }
    drop(db);
    let data = vfs
        .open(
            &dir.join(keel::db::DATA_FILE),
            keel::io::OpenOptions::new(keel::io::OpenMode::Buffered),
        )
        .unwrap();
    data.set_len(0).unwrap();
    drop(data);
    for e in [
        builder(&vfs).open(&dir).unwrap_err(),
        builder(&vfs).create(&dir).unwrap_err(),
        builder(&vfs).open_read_only(&dir).unwrap_err(),
    ] {
        assert!(
            matches!(&e, DbError::Corrupt { reason, .. } if reason.contains("salvage")),
            "{e}"
        );
    }
    let options = keel::db::SalvageOptions {
        vfs: vfs.clone(),
        ..Default::default()
    };
    let report = Database::salvage(&dir, "/new", options).unwrap();
    assert!(!report.lost_anything(), "{report:?}");
    let db = builder(&vfs).open("/new").unwrap();
    check_all(&db, 40);
    db.check().unwrap();
}

/// A segment cut short whose records the checkpoint covers (the chain
/// resumes past it) opens and is reported; cut short where it held needed
/// records, it is refused.
#[test]
fn a_shortened_segment_is_refused_only_where_it_held_needed_records() {
    let mut seen = [false; 2];
    for (checkpointed, after) in [(200, 40), (0, 200)] {
        let vfs = SimVfs::new(9);
        let dir = PathBuf::from("/s");
        let db = Database::builder()
            .vfs(vfs.clone())
            .journal(JournalOptions {
                segment_size_bytes: 64 << 10,
                ..JournalOptions::default()
            })
            .background_checkpoints(false)
            .create(&dir)
            .unwrap();
        let put = |i: u32| {
            let w = db.begin_write().unwrap();
            w.open_table("t").unwrap().insert(key(i), value(i)).unwrap();
            w.commit().unwrap();
        };
        (0..checkpointed).for_each(put);
        db.checkpoint().unwrap();
        (checkpointed..checkpointed + after).for_each(put);
        let covered = db.stats().checkpoint_lsn;
        drop(db);
        let scan = journal::inspect(vfs.as_ref(), &dir.join(JOURNAL_DIR)).unwrap();
        let first = scan.segments.iter().find(|s| s.in_chain).unwrap();
        // What the cut loses: its second half's records, up to the next
        // segment's first.
        let cut = first.file_len / 2;
        let lost_from = first.records.iter().find(|r| r.pos >= cut).unwrap().lsn;
        let needed_lost =
            lost_from > covered || first.records.last().is_some_and(|r| r.lsn > covered);
        let file = vfs
            .open(
                &first.path,
                keel::io::OpenOptions::new(keel::io::OpenMode::Buffered),
            )
            .unwrap();
        file.set_len(cut).unwrap();
        drop(file);
        seen[usize::from(needed_lost)] = true;
        let what =
            format!("{checkpointed}+{after}, checkpoint {covered}, cut from lsn {lost_from}");
        match builder(&vfs).open(&dir) {
            Ok(db) if !needed_lost => {
                check_all(&db, checkpointed + after);
                assert!(!db.journal().recovery_report().skipped.is_empty(), "{what}");
            }
            Err(DbError::Journal(journal::JournalError::Corrupt { .. })) if needed_lost => {}
            Err(e) => panic!("{what}: {e}"),
            Ok(_) => panic!("{what}: opened with needed records cut away"),
        }
    }
    assert_eq!(seen, [true, true], "both cases ran");
}
