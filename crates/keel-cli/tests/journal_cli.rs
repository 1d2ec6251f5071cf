//! `keel journal dump` and `keel journal check` through the real binary on
//! a real journal: clean, torn at the tail, corrupt in the middle, missing.

mod common;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use common::{json, keel, scratch};
use keel::io::RealVfs;
use keel::journal::{self, Journal, JournalOptions};

fn options() -> JournalOptions {
    JournalOptions {
        segment_size_bytes: 64 << 10,
        ..JournalOptions::default()
    }
}

/// A journal of 60 records of 3000 bytes: about 20 per segment.
fn make_journal(name: &str) -> PathBuf {
    let dir = scratch(name);
    let j = Journal::open(RealVfs::shared(), &dir, options()).unwrap();
    for i in 0..60u32 {
        j.append(&vec![i as u8; 3000]).unwrap();
    }
    drop(j);
    dir
}

fn check(dir: &Path) -> (i32, serde_json::Value) {
    let out = keel()
        .args(["journal", "check", "--json"])
        .arg(dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    (out.status.code().unwrap(), json(&out))
}

fn flip(dir: &Path, seq: u64, offset: u64) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join(format!("{seq:020}.seg")))
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset).unwrap();
    b[0] ^= 0x40;
    f.write_all_at(&b, offset).unwrap();
}

#[test]
fn clean_journal_checks_and_dumps() {
    let dir = make_journal("clean");
    let (code, v) = check(&dir);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "clean");
    assert_eq!(v["records"], 60);
    assert_eq!(
        (v["first_lsn"].as_u64(), v["last_lsn"].as_u64()),
        (Some(1), Some(60))
    );
    let out = keel()
        .args([
            "journal",
            "dump",
            "--json",
            "--from",
            "20",
            "--limit",
            "2",
            "--payload",
            "2",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success());
    let v = json(&out);
    let rows = v["listed_records"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["lsn"], 20);
    assert_eq!(rows[0]["payload_hex"], "1313");
    // The text form names the verdict.
    let out = keel().args(["journal", "dump"]).arg(&dir).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("CLEAN"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn torn_tail_passes_and_damage_in_the_middle_fails() {
    let dir = make_journal("damaged");
    let scan = journal::inspect(RealVfs::shared().as_ref(), &dir).unwrap();
    let last = scan
        .segments
        .iter()
        .rfind(|s| !s.records.is_empty())
        .unwrap();
    let r = last.records.last().unwrap();
    // The last record damaged: what a torn write leaves.
    flip(&dir, last.seq, r.pos + 100);
    let (code, v) = check(&dir);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "torn_tail");
    assert_eq!(v["last_lsn"], 59);
    // A record of the first segment damaged: later records would be lost.
    let first = &scan.segments[0];
    flip(&dir, first.seq, first.records[3].pos + 40);
    let (code, v) = check(&dir);
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["status"], "corrupt");
    assert_eq!(v["problems"][0]["kind"], "damage_before_valid_records");
    assert_eq!(v["last_lsn"], 3);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn nothing_to_inspect_exits_2() {
    let dir = scratch("empty");
    for d in [dir.clone(), dir.join("missing")] {
        let out = keel().args(["journal", "check"]).arg(&d).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", d.display());
        assert!(!out.stderr.is_empty());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A store's directory given where its journal is meant: refused, with
/// where the journal is.
#[test]
fn a_store_directory_points_at_its_journal() {
    let store = scratch("a-store").join("store");
    let made = keel().args(["db", "create"]).arg(&store).output().unwrap();
    assert!(made.status.success());
    for cmd in ["check", "dump"] {
        let out = keel().args(["journal", cmd]).arg(&store).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{cmd}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let journal = store.join("journal");
        assert!(
            stderr.contains(&format!("whose journal is {}", journal.display())),
            "{cmd}: {stderr}"
        );
    }
    let out = keel()
        .args(["journal", "check"])
        .arg(store.join("journal"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
}
