//! `Database::backup`: a copy taken while another thread commits holds a
//! prefix of the commits, opens and checks clean; every table is copied
//! byte for byte (empty ones, keys and values that are not UTF-8, values
//! on overflow pages); a directory that is not empty, or lies inside the
//! store, is refused with nothing written. And `BulkWriter`'s bounds.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel::db::{Database, DbError};
use keel::journal::JournalOptions;

type Tables = BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>;

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("keel-backup-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A store with 4 MiB journal segments (the default 64 MiB would write
/// 128 MiB of zeros per store).
fn create(path: &Path) -> Database {
    Database::builder()
        .journal(JournalOptions {
            segment_size_bytes: 4 << 20,
            ..JournalOptions::default()
        })
        .create(path)
        .unwrap()
}

/// Every table of `db` and its entries, from one snapshot.
fn contents(db: &Database) -> Tables {
    let read = db.begin_read();
    let mut out = Tables::new();
    for name in read.list_tables().unwrap() {
        let t = read.open_table(&name).unwrap();
        let entries = t
            .iter()
            .map(|kv| {
                let kv = kv.unwrap();
                (kv.0.as_bytes().to_vec(), kv.1.as_bytes().to_vec())
            })
            .collect();
        out.insert(name, entries);
    }
    out
}

/// Key `i` of the committer's tables: big-endian, so key order is commit
/// order, and not UTF-8 for most `i`.
fn key(i: u64) -> Vec<u8> {
    [&[0xfe][..], &i.to_be_bytes()].concat()
}

/// Open the copy at `dir`, check it, and return what it holds.
fn open_and_check(dir: &Path) -> Tables {
    let copy = Database::open(dir).unwrap();
    let check = copy.check().unwrap();
    assert_eq!(check.disk.entries, check.memory.entries);
    // Checkpointed by the backup: the journal holds nothing past it.
    let stats = copy.stats();
    assert_eq!(stats.checkpoint_lsn, stats.published_lsn);
    let tables = contents(&copy);
    copy.close().unwrap();
    tables
}

/// Commit `i` writes key `i` into both `a` and `z` in one transaction; a
/// backup taken meanwhile holds keys 0..n in both, for one n at least the
/// count acknowledged before the backup began (and at most one more than
/// acknowledged when it returned), beside the untouched tables, whole.
/// The large table `m` is copied between `a` and `z`, while commits go
/// on: a copy that read each table from a snapshot of its own would hold
/// more of `z` than of `a`.
#[test]
fn a_backup_while_another_thread_commits_holds_a_prefix() {
    let dir = scratch("live");
    let db = Arc::new(create(&dir.join("store")));
    let mut bulk = BTreeMap::new();
    {
        let mut w = db.bulk_writer();
        w.create_table("empty").unwrap();
        for i in 0..30_000u32 {
            let k = [&b"bulk"[..], &i.to_le_bytes()].concat();
            let v = vec![(i % 251) as u8; (i % 97) as usize];
            w.insert("m", &k, &v).unwrap();
            bulk.insert(k, v);
        }
        w.finish().unwrap();
    }
    let acked = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let committer = {
        let (db, acked, stop) = (Arc::clone(&db), Arc::clone(&acked), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let txn = db.begin_write().unwrap();
                let v = i.to_le_bytes();
                txn.open_table("a").unwrap().insert(key(i), v).unwrap();
                txn.open_table("z").unwrap().insert(key(i), v).unwrap();
                txn.commit().unwrap();
                i += 1;
                acked.store(i, Ordering::Release);
            }
        })
    };
    let started = Instant::now();
    while acked.load(Ordering::Acquire) < 200 {
        assert!(started.elapsed() < Duration::from_secs(60), "no commits");
        std::thread::sleep(Duration::from_millis(1));
    }
    let before = acked.load(Ordering::Acquire);
    let copy = dir.join("copies").join("one");
    let report = db.backup(&copy).unwrap();
    let after = acked.load(Ordering::Acquire);
    // Let the committer go on past the backup, then stop it.
    while acked.load(Ordering::Acquire) < after + 50 {
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::Relaxed);
    committer.join().unwrap();
    assert!(
        after > before,
        "no commit completed during the backup ({before} before, {after} after): the test \
         would not see a backup that mixes snapshots"
    );

    let tables = open_and_check(&copy);
    let names: Vec<&str> = tables.keys().map(String::as_str).collect();
    assert_eq!(names, ["a", "empty", "m", "z"]);
    let n = tables["a"].len() as u64;
    let prefix: BTreeMap<Vec<u8>, Vec<u8>> =
        (0..n).map(|i| (key(i), i.to_le_bytes().to_vec())).collect();
    // (Compared without printing thousands of keys on a failure.)
    assert!(tables["a"] == prefix, "table a is not commits 0..{n}");
    assert!(
        tables["z"] == prefix,
        "table z holds {} keys, not the same prefix as table a's {n}",
        tables["z"].len()
    );
    assert!(
        (before..=after + 1).contains(&n),
        "the backup holds {n} commits: {before} were acknowledged before it began, {after} \
         when it returned"
    );
    assert_eq!(tables["m"], bulk);
    assert!(tables["empty"].is_empty());
    assert_eq!(report.tables, 4);
    assert_eq!(report.entries, 30_000 + 2 * n);
    assert!(report.lsn > 0);
    eprintln!(
        "backup of {} entries while committing: {n} commits in the copy, {before} acknowledged \
         before, {after} after; {} commits ran during the backup",
        report.entries,
        after - before
    );
    Arc::into_inner(db).unwrap().close().unwrap();
}

/// Every table, byte for byte: keys of every byte, the empty key, the
/// longest key, empty values, values on overflow pages, an empty table,
/// names that are not ASCII; from a store opened read-only too.
#[test]
fn a_backup_copies_every_table_byte_for_byte() {
    let dir = scratch("bytes");
    let store = dir.join("store");
    let db = create(&store);
    let max_key = db.limits().max_key_bytes;
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table("bytes").unwrap();
        for b in 0..=255u8 {
            t.insert([b], [b, 0xff, b]).unwrap();
            t.insert([0xc3, b], []).unwrap();
        }
        t.insert([], b"the empty key").unwrap();
        t.insert(vec![0x80; max_key], vec![0x00; 200_000]).unwrap();
    }
    w.open_table("tëble\nwith a line break").unwrap();
    w.open_table("large")
        .unwrap()
        .insert(b"v", vec![0xab; 3 << 20])
        .unwrap();
    w.commit().unwrap();
    let want = contents(&db);
    db.close().unwrap();

    let db = Database::open_read_only(&store).unwrap();
    let report = db.backup(dir.join("copy")).unwrap();
    assert_eq!(open_and_check(&dir.join("copy")), want);
    assert_eq!(report.tables, 3);
    assert_eq!(report.entries, 2 * 256 + 2 + 1);
    let on_disk = std::fs::metadata(dir.join("copy").join("data.keel")).unwrap();
    assert_eq!(report.data_file_bytes, on_disk.len());
}

/// A typed table's recorded types come along: the copy refuses an open
/// with other types, as the store does, and reads it with its own.
#[test]
fn a_backup_keeps_the_types_typed_tables_record() {
    use keel::db::TableDefinition;
    const SCORES: TableDefinition<u64, &str> = TableDefinition::new("scores");
    const WRONG: TableDefinition<&str, &str> = TableDefinition::new("scores");
    let dir = scratch("types");
    let store = dir.join("store");
    let db = create(&store);
    let w = db.begin_write().unwrap();
    w.open_typed(&SCORES).unwrap().insert(7, "seven").unwrap();
    w.open_table("plain").unwrap().insert(b"k", b"v").unwrap();
    w.commit().unwrap();
    let report = db.backup(dir.join("copy")).unwrap();
    db.close().unwrap();
    assert_eq!((report.tables, report.typed_tables), (2, 1));

    let copy = Database::open(dir.join("copy")).unwrap();
    let read = copy.begin_read();
    assert!(matches!(
        read.open_typed(&WRONG),
        Err(DbError::TableTypeMismatch { .. })
    ));
    let scores = read.open_typed(&SCORES).unwrap();
    assert_eq!(scores.get(7).unwrap().as_deref(), Some("seven"));
    drop(scores);
    drop(read);
    copy.close().unwrap();
}

#[test]
fn a_backup_refuses_a_directory_that_is_not_empty_or_inside_the_store() {
    let dir = scratch("refuse");
    let store = dir.join("store");
    let db = create(&store);
    let w = db.begin_write().unwrap();
    w.open_table("t").unwrap().insert(b"k", b"v").unwrap();
    w.commit().unwrap();

    let full = dir.join("full");
    std::fs::create_dir_all(&full).unwrap();
    std::fs::write(full.join("mine"), b"keep me").unwrap();
    let file = dir.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    for (target, why) in [
        (full.clone(), "not empty"),
        (store.join("inner"), "inside the store"),
        (file.clone(), "not a directory"),
    ] {
        match db.backup(&target) {
            Err(DbError::BackupTarget { reason, .. }) => {
                assert!(reason.contains(why), "{target:?}: {reason}")
            }
            other => panic!("{target:?}: {other:?}"),
        }
    }
    assert_eq!(std::fs::read_dir(&full).unwrap().count(), 1);
    assert_eq!(std::fs::read(full.join("mine")).unwrap(), b"keep me");
    assert!(!store.join("inner").exists());
    assert_eq!(std::fs::read(&file).unwrap(), b"x");
    // An empty directory is taken.
    let empty = dir.join("empty");
    std::fs::create_dir(&empty).unwrap();
    db.backup(&empty).unwrap();
    assert_eq!(open_and_check(&empty)["t"].len(), 1);
    db.close().unwrap();
}

/// `BulkWriter` commits every `max_entries` entries, and before a
/// transaction's record would pass `max_bytes`.
#[test]
fn a_bulk_writer_commits_in_bounded_transactions() {
    let dir = scratch("bulk");
    let db = create(&dir.join("store"));
    let mut w = db.bulk_writer().max_entries(7);
    for i in 0..50u32 {
        w.insert("t", i.to_be_bytes(), b"v").unwrap();
    }
    assert_eq!(w.pending_entries(), 50 % 7);
    let stats = w.finish().unwrap();
    assert_eq!((stats.entries, stats.transactions), (50, 8));

    let mut w = db.bulk_writer().max_bytes(10_000);
    for i in 0..40u32 {
        w.insert("u", i.to_be_bytes(), [1u8; 1000]).unwrap();
    }
    let stats = w.finish().unwrap();
    // At most 9 puts of 1,015 bytes in 10,000 (the first with the table).
    assert_eq!((stats.entries, stats.transactions), (40, 5));
    assert_eq!(contents(&db)["u"].len(), 40);
    // A value past the store's limit is refused, and what came before it
    // is committed by `finish`.
    let mut w = db.bulk_writer();
    w.insert("v", b"ok", b"1").unwrap();
    let max = db.limits().max_value_bytes as usize;
    assert!(matches!(
        w.insert("v", b"too long", vec![0; max + 1]),
        Err(DbError::ValueTooLong { .. })
    ));
    assert_eq!(w.finish().unwrap().entries, 1);
    assert_eq!(contents(&db)["v"].len(), 1);
    db.close().unwrap();
}
