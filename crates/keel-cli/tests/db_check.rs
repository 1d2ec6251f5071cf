//! `keel db check` through the real binary: it never writes to the store
//! (every file byte for byte the same after it), it counts the entries
//! readers see (the journal past the checkpoint included), it calls the
//! torn tail a crash leaves a note (exit 0), and damage — to a record the
//! checkpoint covers (the store still opens) or to one it does not —
//! damage (exit 1), saying where.

mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Output;

use common::{files, json, keel, scratch};
use keel::db::{Database, JOURNAL_DIR};
use keel::io::RealVfs;
use keel::journal::{self, JournalOptions, RECORD_HEADER_BYTES};

fn check(store: &Path) -> (i32, serde_json::Value, Output) {
    let out = keel()
        .args(["db", "check", "--json"])
        .arg(store)
        .output()
        .expect("run keel");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "keel panicked:\n{stderr}");
    (out.status.code().expect("exit code"), json(&out), out)
}

/// 60 commits, one a transaction: the first 30 checkpointed, the rest
/// only in the journal. Returns the last commit's LSN and the checkpoint's.
fn build(store: &Path) -> (u64, u64) {
    let db = Database::builder()
        .journal(JournalOptions {
            segment_size_bytes: 1 << 20,
            ..JournalOptions::default()
        })
        .background_checkpoints(false)
        .create(store)
        .unwrap();
    let mut checkpoint = 0;
    for i in 0..60u32 {
        let w = db.begin_write().unwrap();
        w.open_table("t")
            .unwrap()
            .insert(format!("key{i:03}"), format!("value {i}"))
            .unwrap();
        w.commit().unwrap();
        if i == 29 {
            checkpoint = db.checkpoint().unwrap().unwrap();
        }
    }
    let last = db.begin_read().lsn();
    // Dropped, not closed: closing would checkpoint the rest.
    drop(db);
    (last, checkpoint)
}

/// XOR `0x5a` into 16 bytes of the payload of the record with `lsn`.
fn damage_record(store: &Path, lsn: u64) {
    let scan = journal::inspect(&RealVfs, &store.join(JOURNAL_DIR)).unwrap();
    let (path, r) = scan
        .segments
        .iter()
        .flat_map(|s| s.records.iter().map(move |r| (&s.path, *r)))
        .find(|(_, r)| r.lsn == lsn)
        .unwrap();
    let at = r.pos + RECORD_HEADER_BYTES as u64;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 16];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&b.map(|x| x ^ 0x5a), at).unwrap();
}

#[test]
fn check_writes_nothing_and_counts_what_readers_see() {
    let store = scratch("check-clean");
    let (last, _) = build(&store);
    let before = files(&store);
    let (code, j, out) = check(&store);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(j["status"], "ok");
    assert_eq!(j["checked"]["entries"], 60, "{j}");
    assert_eq!(j["checked"]["newest_lsn"], last, "{j}");
    assert_eq!(j["notes"].as_array().map(Vec::len), Some(0), "{j}");
    assert!(files(&store) == before, "check changed the store's files");
    let _ = std::fs::remove_dir_all(&store);
}

#[test]
fn check_tells_a_torn_tail_from_damage() {
    // The last record, nothing after it: what a crash leaves. A note.
    let store = scratch("check-torn");
    let (last, _) = build(&store);
    damage_record(&store, last);
    let before = files(&store);
    let (code, j, _) = check(&store);
    assert_eq!(code, 0, "{j}");
    let note = j["notes"][0].as_str().unwrap_or_default();
    assert!(
        note.contains(&format!("no later record says lsn {last} was ever durable")),
        "{j}"
    );
    assert_eq!(j["checked"]["entries"], 59, "{j}");
    assert!(files(&store) == before, "check changed the store's files");
    let _ = std::fs::remove_dir_all(&store);

    // A record the checkpoint covers: the store opens, but it is damage.
    let store = scratch("check-covered");
    let (_, checkpoint) = build(&store);
    damage_record(&store, checkpoint - 5);
    let (code, j, out) = check(&store);
    assert_eq!(code, 1, "{j}");
    let reason = j["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("the store opens and keeps every commit"),
        "{j}"
    );
    assert_eq!(j["checked"]["entries"], 60, "{j}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("damaged"), "{stderr}");
    let _ = std::fs::remove_dir_all(&store);

    // A record past the checkpoint with records after it: refused.
    let store = scratch("check-needed");
    let (last, _) = build(&store);
    damage_record(&store, last - 5);
    let (code, j, _) = check(&store);
    assert_eq!(code, 1, "{j}");
    assert_eq!(j["file"], "journal", "{j}");
    let reason = j["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("says every record up to") && reason.contains("segment 1, byte"),
        "{j}"
    );
    let _ = std::fs::remove_dir_all(&store);
}
