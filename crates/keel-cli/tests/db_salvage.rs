//! `keel db salvage` through the real binary: an undamaged store copied
//! whole (exit 0), a store whose journal is damaged in the middle copied
//! up to the damage with the loss named (exit 1, text and JSON), the
//! damaged store's files unchanged, the other commands pointing at
//! salvage, and the refusals (exit 2).

mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Output;

use common::{files, json, keel, scratch};
use keel::db::{Database, JOURNAL_DIR};
use keel::io::RealVfs;
use keel::journal::{self, JournalOptions, RECORD_HEADER_BYTES};

fn db(args: &[&str]) -> Output {
    let out = keel().arg("db").args(args).output().expect("run keel");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "keel panicked:\n{stderr}");
    out
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("an exit code")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A store with two tables: 30 commits checkpointed, then 30 only in
/// the journal (small segments, so they fill several). Returns the LSN
/// of the last commit.
fn build(store: &Path) -> u64 {
    let db = Database::builder()
        .journal(JournalOptions {
            segment_size_bytes: 32 << 10,
            ..JournalOptions::default()
        })
        .background_checkpoints(false)
        .create(store)
        .unwrap();
    for i in 0..60u32 {
        let w = db.begin_write().unwrap();
        let table = if i % 2 == 0 { "users" } else { "orders" };
        w.open_table(table)
            .unwrap()
            .insert(format!("key{i:03}"), format!("value {i}"))
            .unwrap();
        w.commit().unwrap();
        if i == 29 {
            db.checkpoint().unwrap();
        }
    }
    let last = db.begin_read().lsn();
    drop(db);
    last
}

/// Flip a byte in the payload of the record with `lsn`.
fn damage_record(store: &Path, lsn: u64) {
    let scan = journal::inspect(&RealVfs, &store.join(JOURNAL_DIR)).unwrap();
    let (path, r) = scan
        .segments
        .iter()
        .flat_map(|s| s.records.iter().map(move |r| (&s.path, *r)))
        .find(|(_, r)| r.lsn == lsn)
        .unwrap();
    let at = r.pos + RECORD_HEADER_BYTES as u64 + 1;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0x5a], at).unwrap();
}

#[test]
fn an_undamaged_store_is_salvaged_whole_exit_0() {
    let dir = scratch("salvage-whole");
    let (store, to) = (dir.join("store"), dir.join("new"));
    let last = build(&store);
    let out = db(&["salvage", s(&store), "--to", s(&to)]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!("every commit up to lsn {last}")),
        "{text}"
    );
    assert!(text.contains("2 tables, 60 entries"), "{text}");
    assert!(text.contains("OK: nothing"), "{text}");
    assert!(!text.contains("LOST"), "{text}");
    assert_eq!(code(&db(&["check", s(&to)])), 0);
    let got = db(&["get", s(&to), "key059", "-t", "orders"]);
    assert_eq!(stdout(&got), "value 59\n");
    let again = dir.join("again");
    let out = db(&["salvage", s(&store), "--to", s(&again), "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["status"], "complete");
    assert_eq!(v["last_lsn"], last);
    assert_eq!(v["lost_lsns"], serde_json::Value::Null);
    assert_eq!(v["entries"], 60);
    assert_eq!(v["journal_stop"]["kind"], "missing");
}

#[test]
fn a_damaged_journal_is_salvaged_up_to_the_damage_exit_1() {
    let dir = scratch("salvage-damaged");
    let (store, to) = (dir.join("store"), dir.join("new"));
    let last = build(&store);
    let lost = last - 10;
    damage_record(&store, lost);
    // The store no longer opens, and every command says what to do.
    let out = db(&["get", s(&store), "key000"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("keel db salvage"), "{}", stderr(&out));
    let out = db(&["check", s(&store)]);
    assert_eq!(code(&out), 1);
    assert!(stdout(&out).contains("keel db salvage"), "{}", stdout(&out));
    let before = files(&store);
    let out = db(&["salvage", s(&store), "--to", s(&to)]);
    assert_eq!(code(&out), 1, "{}{}", stdout(&out), stderr(&out));
    assert!(files(&store) == before, "salvage changed the damaged store");
    let text = stdout(&out);
    assert!(
        text.contains(&format!("every commit up to lsn {}", lost - 1)),
        "{text}"
    );
    assert!(
        text.contains(&format!("LOST: journal records lsn {lost} to {last}")),
        "{text}"
    );
    // The puts of the intact records past the gap are listed.
    assert!(
        text.contains(&format!("lsn {}: put \"", lost + 1)),
        "{text}"
    );
    assert!(text.contains("LOSSES"), "{text}");
    assert_eq!(code(&db(&["check", s(&to)])), 0);
    let out = db(&["salvage", s(&store), "--to", s(&dir.join("json")), "--json"]);
    assert_eq!(code(&out), 1);
    let v = json(&out);
    assert_eq!(v["status"], "losses");
    assert_eq!(v["lost_lsns"]["first"], lost);
    assert_eq!(v["lost_lsns"]["last"], last);
    assert_eq!(v["lost_records_found"], last - lost);
    assert_eq!(v["lost_changes"][0]["kind"], "put");
    assert!(v["lost_changes"][0]["key"]
        .as_str()
        .unwrap()
        .starts_with("key"));
}

#[test]
fn salvage_refuses_what_it_cannot_do_exit_2() {
    let dir = scratch("salvage-refused");
    let store = dir.join("store");
    build(&store);
    let full = dir.join("full");
    std::fs::create_dir_all(&full).unwrap();
    std::fs::write(full.join("file"), b"x").unwrap();
    let refused = |args: &[&str], says: &str| {
        let out = db(args);
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    };
    refused(&["salvage", s(&store), "--to", s(&full)], "not empty");
    refused(
        &["salvage", s(&store), "--to", s(&store.join("inside"))],
        "inside the damaged store",
    );
    refused(
        &[
            "salvage",
            s(&dir.join("nothing")),
            "--to",
            s(&dir.join("n")),
        ],
        "no such directory",
    );
    refused(&["salvage", s(&store)], "--to");
    let held = Database::open(&store).unwrap();
    refused(&["salvage", s(&store), "--to", s(&dir.join("n"))], "in use");
    drop(held);
    assert!(!dir.join("n").exists());
    let out = db(&["salvage", s(&store), "--to", s(&full), "--json"]);
    assert_eq!(code(&out), 2);
    assert_eq!(json(&out)["kind"], "bad_input");
}

#[test]
fn salvage_help_explains_what_it_does_and_its_exit_codes() {
    let out = db(&["salvage", "--help"]);
    assert_eq!(code(&out), 0);
    let help = stdout(&out);
    for needle in [
        "--to <NEW>",
        "first gap",
        "Exit codes",
        "1  salvaged, with losses",
        "2  nothing salvaged",
    ] {
        assert!(help.contains(needle), "{needle}: {help}");
    }
}
