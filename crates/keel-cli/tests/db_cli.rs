//! `keel db …` through the real binary on real stores: the round trip of
//! every command in text, JSON and hex; absent keys; paths that hold no
//! store; a store another process has open; damaged and truncated data
//! files; input over the limits.

mod common;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::{json, keel, scratch};
use keel::db::{Database, DATA_FILE};

/// Run `keel db ARGS`; it must never panic.
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

/// Run `keel db ARGS`, expecting exit 0.
fn ok(args: &[&str]) -> Output {
    let out = db(args);
    assert_eq!(code(&out), 0, "keel db {args:?}:\n{}", stderr(&out));
    out
}

/// A new store under a scratch directory (with small journal segments: a
/// store's first segments are zero-filled).
fn new_store(name: &str) -> PathBuf {
    let store = scratch(name).join("nested").join("store");
    let out = ok(&["create", s(&store), "--segment-size", "1M"]);
    assert!(stdout(&out).contains("created store"), "{}", stdout(&out));
    store
}

/// Fill the default table with `n` keys of 200-byte values through the
/// library, and close the store (checkpointed: every page on disk).
fn fill(store: &Path, n: u32) {
    let db = Database::open(store).unwrap();
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table("default").unwrap();
        for i in 0..n {
            t.insert(format!("key{i:06}"), [b'v'; 200]).unwrap();
        }
    }
    w.commit().unwrap();
    db.close().unwrap();
}

#[test]
fn text_round_trip() {
    let store = new_store("text");
    let st = s(&store);
    // `create` again leaves the store as it is.
    let out = ok(&["create", st]);
    assert!(stdout(&out).contains("already exists"), "{}", stdout(&out));
    for (k, v) in [
        ("apple", "red"),
        ("banana", "yellow"),
        ("cherry", "dark red"),
    ] {
        assert_eq!(stdout(&ok(&["put", st, k, v])), "");
    }
    ok(&["put", st, "--table", "other", "k", "in other"]);
    assert_eq!(stdout(&ok(&["get", st, "banana"])), "yellow\n");
    assert_eq!(stdout(&ok(&["get", st, "k", "-t", "other"])), "in other\n");
    ok(&["put", st, "banana", "green"]);
    assert_eq!(stdout(&ok(&["get", st, "banana"])), "green\n");
    assert_eq!(
        stdout(&ok(&["scan", st])),
        "apple\tred\nbanana\tgreen\ncherry\tdark red\n"
    );
    let range = ok(&["scan", st, "--from", "b", "--to", "cherry"]);
    assert_eq!(stdout(&range), "banana\tgreen\n");
    assert_eq!(
        stdout(&ok(&["scan", st, "--prefix", "ch"])),
        "cherry\tdark red\n"
    );
    let limited = ok(&["scan", st, "--limit", "2"]);
    assert_eq!(stdout(&limited), "apple\tred\nbanana\tgreen\n");
    assert!(stderr(&limited).contains("more entries follow"));
    assert_eq!(stdout(&ok(&["tables", st])), "default\nother\n");
    ok(&["del", st, "apple"]);
    let gone = db(&["get", st, "apple"]);
    assert_eq!(code(&gone), 1);
    assert!(
        stderr(&gone).contains("not found: key \"apple\""),
        "{}",
        stderr(&gone)
    );
    let stats = stdout(&ok(&["stats", st]));
    for word in [
        "data file",
        "depth 1",
        "free",
        "checkpoint",
        "journal",
        "cache",
    ] {
        assert!(stats.contains(word), "{word}:\n{stats}");
    }
    let check = stdout(&ok(&["check", st]));
    assert!(check.contains("OK:"), "{check}");
}

/// Binary values too long for a command line go in with `--value-file`
/// (a file, or standard input for `-`) and come out with `get --raw`,
/// byte for byte.
#[test]
fn binary_values_through_a_file_stdin_and_raw_output() {
    let store = new_store("binary");
    let st = s(&store);
    // 300 KiB of every byte value: past an argument's size limit, past a
    // page (overflow pages), not UTF-8.
    let blob: Vec<u8> = (0..300 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let file = store.with_file_name("blob");
    std::fs::write(&file, &blob).unwrap();
    let put = json(&ok(&[
        "put",
        st,
        "blob",
        "--value-file",
        s(&file),
        "--json",
    ]));
    assert_eq!(put["value_bytes"], 300 * 1024);
    assert_eq!(ok(&["get", st, "blob", "--raw"]).stdout, blob);
    // As text it is escaped: one line, every byte that is not printable
    // UTF-8 as \xNN (db_cli_matrix.rs reads such lines back).
    let text = stdout(&ok(&["get", st, "blob"]));
    assert_eq!(text.find('\n'), Some(text.len() - 1));
    assert!(text.contains("\\x"), "{}", &text[..100]);
    // Standard input; --hex then applies to the key alone.
    let mut child = keel()
        .args(["db", "put", st, "6b32", "--hex", "--value-file", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), &blob[..5000]).unwrap();
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    assert_eq!(ok(&["get", st, "k2", "--raw"]).stdout, &blob[..5000]);
    // An empty file is an empty value.
    let empty = store.with_file_name("empty");
    std::fs::write(&empty, b"").unwrap();
    ok(&["put", st, "nothing", "--value-file", s(&empty)]);
    assert_eq!(stdout(&ok(&["get", st, "nothing"])), "\n");
    // A VALUE and a file at once, neither, a missing file, --raw with
    // --json: refused, exit 2, nothing written.
    for args in [
        &["put", st, "k", "v", "--value-file", s(&file)][..],
        &["put", st, "k"][..],
        &["put", st, "k", "--value-file", "/no/such/file"][..],
        &["get", st, "blob", "--raw", "--json"][..],
    ] {
        assert_eq!(code(&db(args)), 2, "{args:?}");
    }
    assert_eq!(code(&db(&["get", st, "k"])), 1);
    // A file larger than a transaction of this store may be (1 MiB
    // segments) is refused, before it is read whole.
    let huge = store.with_file_name("huge");
    std::fs::write(&huge, vec![7u8; 3 << 20]).unwrap();
    let refused = db(&["put", st, "huge", "--value-file", s(&huge)]);
    assert_eq!(code(&refused), 2);
    assert!(
        stderr(&refused).contains("the most one value can be"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(code(&db(&["get", st, "huge"])), 1);
    ok(&["check", st]);
}

/// A new store's segments start at 1 MiB and grow up to its largest
/// segment size (64 MiB by default), which bounds a value: a value file
/// larger than today's segment files but within that bound goes in.
#[test]
fn a_value_file_larger_than_the_first_segments_goes_in() {
    let store = scratch("grown").join("store");
    let st = s(&store);
    ok(&["create", st]);
    let seg = std::fs::read_dir(store.join("journal"))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".seg"))
        .map(|e| e.metadata().unwrap().len())
        .max()
        .unwrap();
    let blob: Vec<u8> = (0..3u32 << 20).map(|i| (i % 251) as u8).collect();
    assert!(blob.len() as u64 > seg, "segments of {seg} bytes already");
    let file = store.with_file_name("blob");
    std::fs::write(&file, &blob).unwrap();
    let put = json(&ok(&["put", st, "big", "--value-file", s(&file), "--json"]));
    assert_eq!(put["value_bytes"], 3 << 20);
    assert_eq!(ok(&["get", st, "big", "--raw"]).stdout, blob);
    ok(&["check", st]);
}

#[test]
fn json_and_hex_round_trip() {
    let store = new_store("json");
    let st = s(&store);
    let put = json(&ok(&["put", st, "--hex", "--json", "0x00FF", "deadbeef"]));
    assert_eq!(put["key"], "00ff");
    assert_eq!(
        (put["existed"].as_bool(), put["value_bytes"].as_u64()),
        (Some(false), Some(4))
    );
    let put = json(&ok(&[
        "put", st, "--hex", "--json", "00ff", "", "--table", "default",
    ]));
    assert_eq!(put["existed"], true);
    ok(&["put", st, "--hex", "01", "c3a9"]);
    let got = json(&ok(&["get", st, "--hex", "--json", "00ff"]));
    assert_eq!(
        (got["found"].as_bool(), got["value"].as_str()),
        (Some(true), Some(""))
    );
    // Text output of UTF-8 bytes given in hex.
    let got = json(&ok(&["get", st, "--json", "--hex", "01"]));
    assert_eq!(got["value"], "c3a9");
    let scan = json(&ok(&["scan", st, "--hex", "--json", "--from", "01"]));
    assert_eq!(
        (scan["count"].as_u64(), scan["more"].as_bool()),
        (Some(1), Some(false))
    );
    assert_eq!(scan["entries"][0]["key"], "01");
    assert_eq!(scan["entries"][0]["value"], "c3a9");
    let scan = json(&ok(&["scan", st, "--hex", "--json", "--limit", "1"]));
    assert_eq!(
        (scan["count"].as_u64(), scan["more"].as_bool()),
        (Some(1), Some(true))
    );
    // Keys that are not printable UTF-8 are escaped in text.
    assert_eq!(stdout(&ok(&["scan", st])), "\\x00\\xff\t\n\\x01\té\n");
    let tables = json(&ok(&["tables", st, "--json"]));
    assert_eq!(tables["tables"], serde_json::json!(["default"]));
    let del = json(&ok(&["del", st, "--hex", "--json", "00ff"]));
    assert_eq!(del["existed"], true);
    let stats = json(&ok(&["stats", st, "--json"]));
    assert_eq!(stats["page_size_bytes"], 4096);
    assert_eq!(stats["tree"]["depth"], 1);
    assert_eq!(
        stats["tables"],
        serde_json::json!([{"name": "default", "keys": 1}])
    );
    assert_eq!(stats["journal"]["segment_bytes"], 1 << 20);
    // `del` closed the store, which checkpointed every commit.
    assert_eq!(stats["checkpoint"]["commits_after"], 0);
    assert!(stats["pages"]["in_file"].as_u64().unwrap() >= 3, "{stats}");
    let check = json(&ok(&["check", st, "--json"]));
    assert_eq!(check["status"], "ok");
    assert!(
        check["checked"]["disk"]["entries"].as_u64().unwrap() >= 1,
        "{check}"
    );
}

/// A tab or a line break in a key or value is escaped in a
/// `KEY<TAB>VALUE` line (`\x09`, `\x0a`), as a backslash is (`\\`), and
/// a line break in a table name in `tables`; --json shows them as JSON
/// strings.
#[test]
fn text_lines_escape_tabs_and_line_breaks() {
    let tabbed = new_store("tabbed");
    let tb = s(&tabbed);
    ok(&["put", tb, "a\tb", "1"]);
    assert_eq!(stdout(&ok(&["scan", tb])), "a\\x09b\t1\n");
    ok(&["put", tb, "a\tb", "line\nbreak"]);
    let scan = json(&ok(&["scan", tb, "--json"]));
    assert_eq!(scan["entries"][0]["value"], "line\nbreak");
    ok(&["del", tb, "a\tb"]);
    ok(&["put", tb, "k", "line\r\nbreak\\"]);
    assert_eq!(stdout(&ok(&["scan", tb])), "k\tline\\x0d\\x0abreak\\\\\n");
    assert_eq!(stdout(&ok(&["get", tb, "k"])), "line\\x0d\\x0abreak\\\\\n");
    ok(&["put", tb, "k", "v"]);
    assert_eq!(stdout(&ok(&["scan", tb])), "k\tv\n");
    // A table name with a line break.
    ok(&["put", tb, "--table", "two\nlines", "k", "v"]);
    assert_eq!(stdout(&ok(&["tables", tb])), "default\ntwo\\x0alines\n");
    let tables = json(&ok(&["tables", tb, "--json"]));
    assert_eq!(
        tables["tables"],
        serde_json::json!(["default", "two\nlines"])
    );
}

#[test]
fn absent_keys_and_tables_exit_1() {
    let store = new_store("absent");
    let st = s(&store);
    // No table yet: every lookup is absent.
    let out = db(&["get", st, "k", "--json"]);
    assert_eq!(code(&out), 1);
    assert_eq!(json(&out)["found"], false);
    assert!(stderr(&out).contains("no tables yet"), "{}", stderr(&out));
    let out = db(&["scan", st]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    ok(&["put", st, "k", "v"]);
    let out = db(&["get", st, "other", "--json"]);
    assert_eq!(code(&out), 1);
    assert_eq!(json(&out)["value"], serde_json::Value::Null);
    let out = db(&["get", st, "k", "--table", "nope"]);
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains("its tables: default"),
        "{}",
        stderr(&out)
    );
    let out = db(&["del", st, "other", "--json"]);
    assert_eq!(
        (code(&out), json(&out)["existed"].as_bool()),
        (1, Some(false))
    );
}

#[test]
fn paths_that_hold_no_store_exit_2() {
    let dir = scratch("nostore");
    let missing = dir.join("missing");
    let file = dir.join("file");
    std::fs::write(&file, b"not a store").unwrap();
    for cmd in ["get", "check", "stats", "tables", "scan", "del"] {
        for path in [&missing, &file, &dir] {
            let mut args = vec![cmd, s(path)];
            if matches!(cmd, "get" | "del") {
                args.push("k");
            }
            let out = db(&args);
            assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
            assert!(stderr(&out).contains("store"), "{args:?}: {}", stderr(&out));
        }
    }
    // Nothing was created by the attempts.
    assert!(!missing.exists());
    let out = db(&["put", s(&missing), "k", "v", "--json"]);
    assert_eq!(code(&out), 2);
    assert_eq!(json(&out)["kind"], "not_a_store");
    assert!(!missing.exists());
}

/// A store another process (this test) has open: the writing commands
/// are refused, the reading ones read a live snapshot and say so.
#[test]
fn a_store_in_use_is_refused_for_writes_and_read_live() {
    let store = new_store("locked");
    let st = s(&store);
    ok(&["put", st, "k", "v"]);
    let held = Database::open(&store).unwrap();
    for args in [vec!["put", st, "k", "w"], vec!["del", st, "k"]] {
        let out = db(&args);
        assert_eq!(code(&out), 2, "{args:?}");
        assert!(
            stderr(&out).contains("in use by another process"),
            "{}",
            stderr(&out)
        );
    }
    let out = db(&["put", st, "k", "w", "--json"]);
    assert_eq!(json(&out)["kind"], "locked");
    for args in [
        vec!["get", st, "k"],
        vec!["get", st, "k", "--read-only"],
        vec!["check", st],
        vec!["tables", st, "--read-only"],
    ] {
        let out = ok(&args);
        assert!(
            stderr(&out).contains("is in use by process")
                && stderr(&out).contains("reading a snapshot"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    assert_eq!(stdout(&ok(&["get", st, "k"])), "v\n");
    let stats = json(&ok(&["stats", st, "--json"]));
    assert_eq!(stats["live"], true);
    drop(held);
    assert_eq!(stdout(&ok(&["get", st, "k"])), "v\n");
    let stats = json(&ok(&["stats", st, "--json", "--read-only"]));
    assert_eq!(stats["live"], false);
}

/// Flip a byte in page `page` of the store's data file.
fn flip(store: &Path, page: u64, at: u64) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(store.join(DATA_FILE))
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, page * 4096 + at).unwrap();
    b[0] ^= 0x5a;
    f.write_all_at(&b, page * 4096 + at).unwrap();
}

#[test]
fn a_corrupt_page_is_found_and_named() {
    let store = new_store("corrupt");
    let st = s(&store);
    fill(&store, 2000);
    let pages = {
        let db = Database::open(&store).unwrap();
        db.tree_stats().unwrap().pages
    };
    assert!(pages.len() > 20, "{pages:?}");
    ok(&["check", st]);
    // A page in the middle of the tree: a leaf, read only by the check.
    let page = pages[pages.len() / 2];
    flip(&store, page, 300);
    let out = db(&["check", st]);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    let text = stdout(&out);
    assert!(text.starts_with("DAMAGED"), "{text}");
    assert!(text.contains(&format!("page {page}")), "{text}");
    assert!(text.contains("checksum"), "{text}");
    let out = db(&["check", st, "--json"]);
    assert_eq!(code(&out), 1);
    let v = json(&out);
    assert_eq!(v["status"], "damaged");
    assert_eq!(v["file"], "data.keel");
    assert_eq!(v["page"], page);
    assert!(
        stderr(&out).contains(&format!("page {page}")),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_truncated_data_file_is_damage() {
    let store = new_store("truncated");
    let st = s(&store);
    fill(&store, 2000);
    let data = store.join(DATA_FILE);
    let len = std::fs::metadata(&data).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&data).unwrap();
    f.set_len(len / 2).unwrap();
    let out = db(&["check", st]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stdout(&out).contains("truncated"), "{}", stdout(&out));
    // Reading commands refuse it too, and point at `check`.
    let out = db(&["get", st, "key000001"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("keel db check"), "{}", stderr(&out));
    // Cut to nothing: no meta page is left, which is damage, not "no store".
    f.set_len(0).unwrap();
    let out = db(&["check", st, "--json"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(
        (v["status"].as_str(), v["file"].as_str()),
        (Some("damaged"), Some("data.keel"))
    );
    assert!(
        v["reason"].as_str().unwrap().contains("no meta page"),
        "{v}"
    );
}

#[test]
fn bad_input_is_a_clear_error() {
    let store = new_store("input");
    let st = s(&store);
    let long = "k".repeat(5000);
    let out = db(&["put", st, &long, "v"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("a key of 5000 bytes is longer than"),
        "{}",
        stderr(&out)
    );
    let out = db(&["get", st, &long, "--json"]);
    assert_eq!(code(&out), 2);
    assert_eq!(json(&out)["kind"], "bad_input");
    for (key, why) in [
        ("zz", "not a hex digit"),
        ("abc", "odd"),
        ("é0", "not a hex digit"),
    ] {
        let out = db(&["put", st, "--hex", key, "00"]);
        assert_eq!(code(&out), 2, "{key}");
        assert!(stderr(&out).contains(why), "{key}: {}", stderr(&out));
    }
    let out = db(&["put", st, "k", "v", "--table", ""]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("bad table name"), "{}", stderr(&out));
    let out = db(&["scan", st, "--prefix", "a", "--from", "b"]);
    assert_eq!(code(&out), 2, "clap refuses --prefix with --from");
    // Nothing was written by the refused commands.
    let tables = json(&ok(&["tables", st, "--json"]));
    assert_eq!(tables["tables"], serde_json::json!([]));
}

#[test]
fn help_explains_exit_codes() {
    let out = keel().args(["db", "get", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = stdout(&out);
    assert!(help.contains("Exit codes"), "{help}");
    assert!(help.contains("--hex"), "{help}");
}
