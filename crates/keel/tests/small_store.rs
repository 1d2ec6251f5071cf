//! The disk space of a store with default options: a new store is small
//! (its journal starts with small segments), its segments grow to the
//! largest size under a stream of commits, and the largest value commits
//! all the same, on a new store and after a reopen.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use keel::db::Database;
use keel::journal::DEFAULT_SEGMENT_SIZE_BYTES;

/// A directory of its own, removed at the end.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("keel-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// (bytes allocated on disk, apparent size in bytes) of every file under
/// `dir`: `st_blocks` counts 512-byte units.
fn disk_usage(dir: &Path) -> (u64, u64) {
    let (mut allocated, mut apparent) = (0, 0);
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        if meta.is_dir() {
            let (a, b) = disk_usage(&entry.path());
            allocated += a;
            apparent += b;
        } else {
            allocated += meta.blocks() * 512;
            apparent += meta.len();
        }
    }
    (allocated, apparent)
}

/// The journal's segment files' lengths, in sequence order.
fn segment_sizes(store: &Path) -> Vec<u64> {
    let mut segs: Vec<(String, u64)> = std::fs::read_dir(store.join("journal"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".seg"))
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name, e.metadata().unwrap().len())
        })
        .collect();
    segs.sort();
    segs.into_iter().map(|s| s.1).collect()
}

#[test]
fn a_new_store_takes_at_most_8_mib_on_disk() {
    let dir = TempDir::new("small-new");
    Database::create(&dir.0).unwrap().close().unwrap();
    let (allocated, apparent) = disk_usage(&dir.0);
    eprintln!("a new store: {allocated} bytes allocated, {apparent} bytes apparent");
    assert!(allocated <= 8 << 20, "{allocated} bytes allocated");
    assert!(apparent <= 8 << 20, "{apparent} bytes apparent");
    // Its journal's two segments (the active one and a spare) are
    // zero-filled: allocated, not sparse.
    assert_eq!(segment_sizes(&dir.0), [1 << 20, 1 << 20]);
    assert!(allocated >= 2 << 20, "{allocated} bytes allocated");
    // Opened again, it stays as small.
    let db = Database::open(&dir.0).unwrap();
    db.close().unwrap();
    assert!(disk_usage(&dir.0).0 <= 8 << 20);
}

#[test]
fn the_largest_value_commits_on_a_new_store_and_after_reopen() {
    let dir = TempDir::new("small-largest");
    let db = Database::create(&dir.0).unwrap();
    let limits = db.limits();
    // What the limits were with 64 MiB segments from the start: the
    // journal's largest record, 64 MiB less a block and a record header.
    assert_eq!(
        limits.max_transaction_bytes as u64,
        DEFAULT_SEGMENT_SIZE_BYTES - 4096 - 40
    );
    let max = usize::try_from(limits.max_value_bytes).unwrap();
    let value = |fill: u8| vec![fill; max];
    // Into a table that exists (what the limit assumes).
    let txn = db.begin_write().unwrap();
    txn.open_table("t").unwrap();
    txn.commit().unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table("t").unwrap().insert(b"", value(1)).unwrap();
    txn.commit().unwrap();
    assert!(db
        .begin_write()
        .unwrap()
        .open_table("t")
        .unwrap()
        .insert(b"", vec![0u8; max + 1])
        .is_err());
    drop(db);
    let db = Database::open(&dir.0).unwrap();
    assert_eq!(db.limits(), limits);
    let read = db.begin_read();
    let got = read.open_table("t").unwrap().get(b"").unwrap().unwrap();
    assert!(*got == value(1)[..]);
    drop(read);
    let txn = db.begin_write().unwrap();
    txn.open_table("t").unwrap().insert(b"", value(2)).unwrap();
    txn.commit().unwrap();
    db.close().unwrap();
    let db = Database::open(&dir.0).unwrap();
    let read = db.begin_read();
    let got = read.open_table("t").unwrap().get(b"").unwrap().unwrap();
    assert!(*got == value(2)[..]);
}

#[test]
fn segments_grow_to_the_largest_size_under_a_stream_of_commits() {
    let dir = TempDir::new("small-growth");
    let db = Database::create(&dir.0).unwrap();
    // 256 KiB values: every segment fills within a fraction of a second.
    let value = vec![7u8; 256 << 10];
    let mut i = 0u32;
    while !segment_sizes(&dir.0).contains(&DEFAULT_SEGMENT_SIZE_BYTES) {
        assert!(
            i < 600,
            "no segment reached 64 MiB: {:?}",
            segment_sizes(&dir.0)
        );
        let txn = db.begin_write().unwrap();
        txn.open_table("t")
            .unwrap()
            .insert(i.to_be_bytes(), &value)
            .unwrap();
        txn.commit().unwrap();
        i += 1;
    }
    let stats = db.stats().journal;
    db.close().unwrap();
    let sizes = segment_sizes(&dir.0);
    eprintln!("after {i} commits of 256 KiB: segments of {sizes:?} bytes; {stats:?}");
    // 1, 1, 2, 4, 8, 16, 32, 64 MiB. (Made ahead of need: `rollover_waits`
    // in the line above says whether a commit waited for one anyway, which
    // a loaded machine can make happen.)
    let mib = |m: u64| m << 20;
    assert_eq!(
        sizes[..8],
        [
            mib(1),
            mib(1),
            mib(2),
            mib(4),
            mib(8),
            mib(16),
            mib(32),
            mib(64)
        ]
    );
    assert!(sizes.iter().all(|&s| s <= mib(64)), "{sizes:?}");
}
