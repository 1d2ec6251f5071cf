//! `keel db dump`, `load` and `backup` through the binary: a dump loaded
//! into a fresh store reproduces every table byte for byte (keys and
//! values that are not UTF-8, empty keys and values, values on overflow
//! pages, empty tables, table names with line breaks), through a file and
//! through a pipe; a bad line stops a load with every line before it
//! loaded and none after; an input cut short is exit 1; `backup` copies
//! a store, and refuses one in use and a directory that is not empty.

mod common;
use common::{contents, Tables};

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Output, Stdio};

use common::{json, keel, scratch};
use keel::db::Database;
use keel::journal::JournalOptions;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn run(args: &[&str]) -> Output {
    let out = keel().args(args).output().expect("run keel");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked"),
        "keel {args:?} panicked:\n{stderr}"
    );
    out
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("an exit code")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A store of odd bytes: every byte as a key, keys and values that are not
/// UTF-8 (and invalid sequences inside text), control characters, the
/// empty key and value, the longest key, a value on overflow pages, two
/// empty tables (one emptied by deletes), names with a line break and a
/// quote. 1 MiB journal segments.
fn odd_store(path: &Path) -> Tables {
    let db = Database::builder()
        .journal(JournalOptions {
            segment_size_bytes: 1 << 20,
            ..JournalOptions::default()
        })
        .create(path)
        .unwrap();
    let max_key = db.limits().max_key_bytes;
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table("default").unwrap();
        for b in 0..=255u8 {
            t.insert([b], [0xff, b, b'\n', 0x80]).unwrap();
            t.insert(format!("text {b}"), format!("\t\"{b}\"\\\u{0}é"))
                .unwrap();
        }
        t.insert([], []).unwrap();
        t.insert(b"caf\xc3", b"\xc3\x28 half a character").unwrap();
        t.insert(vec![b'k'; max_key], vec![0xfe; 100_000]).unwrap();
    }
    w.open_table("empty").unwrap();
    w.open_table("line\nbreak \"quoted\"")
        .unwrap()
        .insert(b"\x00", b"\x00")
        .unwrap();
    w.open_table("emptied")
        .unwrap()
        .insert(b"gone", b"x")
        .unwrap();
    w.commit().unwrap();
    let w = db.begin_write().unwrap();
    w.open_table("emptied").unwrap().remove(b"gone").unwrap();
    w.commit().unwrap();
    db.close().unwrap();
    let tables = contents(path);
    assert_eq!(tables.len(), 4);
    assert!(tables["empty"].is_empty() && tables["emptied"].is_empty());
    tables
}

#[test]
fn a_dump_loaded_into_a_fresh_store_reproduces_every_table() {
    let dir = scratch("dump-load");
    let store = dir.join("store");
    let want = odd_store(&store);

    // Through a file, into a store whose directory does not exist yet.
    let file = dir.join("dump.jsonl");
    let dumped = run(&["db", "dump", s(&store), "--out", s(&file), "--json"]);
    assert_eq!(code(&dumped), 0, "{}", stderr(&dumped));
    let summary = json(&dumped);
    let entries: usize = want.values().map(BTreeMap::len).sum();
    assert_eq!(summary["tables"], 4);
    assert_eq!(summary["entries"], entries);
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4 + entries + 1);
    assert_eq!(
        lines.last().unwrap(),
        &serde_json::json!({"end": true, "tables": 4, "entries": entries,
            "lsn": summary["lsn"]})
    );
    assert!(lines.contains(&serde_json::json!({"table": "empty", "create": true})));
    assert!(lines.contains(&serde_json::json!({"table": "default",
        "key": {"hex": "ff"}, "value": {"hex": "ffff0a80"}})));
    // No file is left beside the dump.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);

    let copy = dir.join("new").join("copy");
    let loaded = run(&[
        "db",
        "load",
        s(&copy),
        "--in",
        s(&file),
        "--segment-size",
        "1M",
        "--json",
    ]);
    assert_eq!(code(&loaded), 0, "{}", stderr(&loaded));
    let report = json(&loaded);
    assert_eq!(
        (&report["created"], &report["entries"], &report["complete"]),
        (&true.into(), &entries.into(), &true.into())
    );
    assert_eq!(contents(&copy), want);
    assert_eq!(
        run(&["db", "check", s(&copy)]).status.code(),
        Some(0),
        "the loaded store does not check clean"
    );

    // Through a pipe, dump's stdout into load's stdin, small batches.
    let piped = dir.join("piped");
    let mut dump = keel()
        .args(["db", "dump", s(&store)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let load = keel()
        .args([
            "db",
            "load",
            s(&piped),
            "--batch",
            "100",
            "--segment-size",
            "1M",
        ])
        .arg("--json")
        .stdin(dump.stdout.take().unwrap())
        .output()
        .unwrap();
    let dump = dump.wait_with_output().unwrap();
    assert!(dump.status.success(), "{}", stderr(&dump));
    assert!(stderr(&dump).starts_with("dumped"), "{}", stderr(&dump));
    assert_eq!(code(&load), 0, "{}", stderr(&load));
    // 517 entries and 4 tables in batches of at most 100 entries.
    assert!(json(&load)["transactions"].as_u64().unwrap() >= 6);
    assert_eq!(contents(&piped), want);

    // Loaded again into the copy: the same entries, replaced; and a dump
    // of the copy is the same dump (but for the LSN, the copy's own).
    let again = run(&["db", "load", s(&copy), "--in", s(&file)]);
    assert_eq!(code(&again), 0, "{}", stderr(&again));
    assert_eq!(contents(&copy), want);
    let redump = run(&["db", "dump", s(&copy)]);
    let without_end = |t: &str| t.lines().rev().skip(1).collect::<Vec<_>>().join("\n");
    assert_eq!(
        without_end(std::str::from_utf8(&redump.stdout).unwrap()),
        without_end(&text)
    );

    // One table, by name.
    let one = run(&["db", "dump", s(&store), "--table", "line\nbreak \"quoted\""]);
    let one: Vec<&str> = std::str::from_utf8(&one.stdout).unwrap().lines().collect();
    assert_eq!(one.len(), 3, "{one:?}");
    let missing = run(&["db", "dump", s(&store), "--table", "none", "--out"])
        .status
        .code();
    assert_eq!(
        missing,
        Some(2),
        "--out without a file is a wrong command line"
    );
    let none = dir.join("none.jsonl");
    let missing = run(&["db", "dump", s(&store), "-t", "none", "--out", s(&none)]);
    assert_eq!(code(&missing), 1, "{}", stderr(&missing));
    assert!(stderr(&missing).contains("no table named \"none\""));
    assert!(!none.exists());
}

/// Run `keel db load STORE` with `input` on stdin.
fn load_stdin(store: &Path, input: &[u8], args: &[&str]) -> Output {
    let mut child = keel()
        .args(["db", "load", s(store), "--segment-size", "1M"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let _ = stdin.write_all(input);
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    out
}

fn entry(table: &str, i: u32) -> String {
    format!("{{\"table\":\"{table}\",\"key\":\"k{i:03}\",\"value\":\"v{i}\"}}\n")
}

#[test]
fn a_load_stops_at_a_bad_line_with_every_line_before_it_loaded() {
    let dir = scratch("bad-lines");
    // Line 26 is not an entry: lines 1-25 (25 entries, in 3 batches of at
    // most 10) are loaded, none after.
    let mut input = String::new();
    for i in 0..25 {
        input += &entry("t", i);
    }
    input += "{\"table\":\"t\",\"key\":\"k\",\"value\":{\"hex\":\"zz\"}}\n";
    for i in 25..30 {
        input += &entry("t", i);
    }
    let store = dir.join("store");
    let out = load_stdin(&store, input.as_bytes(), &["--batch", "10"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("line 26: \"value\""), "{err}");
    assert!(
        err.contains("every line before it is loaded (25 entries)"),
        "{err}"
    );
    let got = contents(&store);
    assert_eq!(got["t"].len(), 25);
    assert!(got["t"].contains_key(&b"k024"[..]) && !got["t"].contains_key(&b"k025"[..]));

    // A key the store refuses (too long) names its line too, as JSON.
    let long = format!(
        "{}{{\"table\":\"t\",\"key\":\"{}\",\"value\":\"\"}}\n",
        entry("u", 1),
        "k".repeat(5000)
    );
    let out = load_stdin(&store, long.as_bytes(), &["--json"]);
    assert_eq!(code(&out), 2);
    let report = json(&out);
    assert_eq!(report["kind"], "bad_input");
    assert!(
        report["error"]
            .as_str()
            .unwrap()
            .starts_with("line 2: a key of 5000 bytes"),
        "{report}"
    );
    assert_eq!(contents(&store)["u"].len(), 1);

    // An end line whose counts disagree with the lines before it.
    let cut = format!(
        "{{\"table\":\"v\",\"create\":true}}\n{}{}{{\"end\":true,\"tables\":1,\"entries\":3}}\n",
        entry("v", 1),
        entry("v", 2)
    );
    let out = load_stdin(&store, cut.as_bytes(), &[]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("line 4: the end line counts 1 tables and 3 entries"));

    // No end line: loaded, exit 1, a warning. Blank lines are skipped.
    let open = format!("{}\n\n{}", entry("w", 1), entry("w", 2));
    let out = load_stdin(&store, open.as_bytes(), &[]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("may be cut short"),
        "{}",
        stderr(&out)
    );
    assert_eq!(contents(&store)["w"].len(), 2);
    // A hand-written end line without counts; two dumps one after the other.
    let two = format!(
        "{}{{\"end\":true}}\n{}{{\"end\":true,\"entries\":1}}\n",
        entry("x", 1),
        entry("x", 2)
    );
    let out = load_stdin(&store, two.as_bytes(), &["--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out)["end_lines"], 2);

    // An input that is not a dump at all changes nothing: no store is
    // created (its first line is read before).
    let fresh = dir.join("fresh");
    let out = load_stdin(&fresh, b"key\tvalue\n", &[]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("line 1: not JSON"),
        "{}",
        stderr(&out)
    );
    assert!(!fresh.exists());
    // A directory that holds something other than a store is refused.
    let other = dir.join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("notes.txt"), b"mine").unwrap();
    let out = load_stdin(&other, entry("t", 1).as_bytes(), &[]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("load creates a store only in a new or empty directory"));
    assert_eq!(std::fs::read_dir(&other).unwrap().count(), 1);
    // An input file that does not exist.
    let out = run(&["db", "load", s(&store), "--in", s(&dir.join("nope"))]);
    assert_eq!(code(&out), 2);
}

#[test]
fn backup_copies_a_store_and_refuses_one_in_use() {
    let dir = scratch("backup");
    let store = dir.join("store");
    let want = odd_store(&store);
    let copy = dir.join("copies").join("first");
    let out = run(&["db", "backup", s(&store), "--to", s(&copy), "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(report["tables"], 4);
    assert_eq!(contents(&copy), want);
    assert_eq!(run(&["db", "check", s(&copy)]).status.code(), Some(0));
    // Not empty now.
    let again = run(&["db", "backup", s(&store), "--to", s(&copy)]);
    assert_eq!(code(&again), 2);
    assert!(
        stderr(&again).contains("is not empty"),
        "{}",
        stderr(&again)
    );
    assert_eq!(contents(&copy), want);
    // Inside the store.
    let inner = run(&["db", "backup", s(&store), "--to", s(&store.join("b"))]);
    assert_eq!(code(&inner), 2);
    assert!(!store.join("b").exists());
    // A store another process (this test) has open: a live snapshot of
    // it is copied, and the copy opens and checks clean.
    let held = Database::open(&store).unwrap();
    let second = dir.join("second");
    let live = run(&["db", "backup", s(&store), "--to", s(&second), "--json"]);
    assert_eq!(code(&live), 0, "{}", stderr(&live));
    assert!(
        stderr(&live).contains("reading a snapshot"),
        "{}",
        stderr(&live)
    );
    assert_eq!(json(&live)["tables"], 4);
    assert_eq!(contents(&second), want);
    assert_eq!(run(&["db", "check", s(&second)]).status.code(), Some(0));
    // `dump` streams, and refuses a store in use, saying what to do.
    let dump = run(&["db", "dump", s(&store)]);
    assert_eq!(code(&dump), 2, "{}", stderr(&dump));
    assert!(
        stderr(&dump).contains("keel db backup"),
        "{}",
        stderr(&dump)
    );
    drop(held);
}
