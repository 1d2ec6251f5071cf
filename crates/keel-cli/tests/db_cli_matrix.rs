//! Every `keel db` command (and the other commands that print) against
//! what pipelines and stores do to it: its stdout read whole, closed before
//! it writes a byte, closed after a few bytes, and closed together with
//! its stderr (`2>&1 | head`); on a store whose keys, values and table
//! names hold bytes that are not printable UTF-8; in text, `--hex` and
//! `--json`. No run may panic (exit 101, "panicked" on stderr), and every
//! exit code is the one docs/cli-db.md gives: the command's own, or 0 when
//! a closed stdout cut its output.
//!
//! Also: `put --value-file -` reads standard input before it takes the
//! store's lock.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{keel, scratch};
use keel::db::Database;

/// What the reader of a command's stdout does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reader {
    /// Reads it to the end.
    All,
    /// Closes it before the command writes anything.
    ClosedAtOnce,
    /// Reads this many bytes, then closes it (`head -c N`).
    ClosedAfter(usize),
    /// Closes it at once, and stderr is the same pipe (`2>&1 | true`): no
    /// message can be read then, only the exit code.
    BothClosed,
}

const READERS: [Reader; 4] = [
    Reader::All,
    Reader::ClosedAtOnce,
    Reader::ClosedAfter(100),
    Reader::BothClosed,
];

/// The bytes Linux's pipe holds by default (16 pages): a command whose
/// output is longer than this past what was read must meet the closed
/// pipe.
const PIPE_BYTES: usize = 64 << 10;

struct Ran {
    code: i32,
    stdout: Vec<u8>,
    stderr: String,
}

impl Ran {
    fn text(&self) -> &str {
        std::str::from_utf8(&self.stdout).expect("stdout is UTF-8")
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not one JSON object ({e}): {}",
                String::from_utf8_lossy(&self.stdout)
            )
        })
    }
}

/// The write end of a pipe whose read end is closed already: a write to
/// it fails with `EPIPE` however early it comes (closing the read end
/// after the spawn would race with the command's first write).
fn closed_pipe() -> OwnedFd {
    let mut fds = [0; 2];
    // SAFETY: `pipe2` stores two new descriptors in `fds`, of the size it
    // expects.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors are new, open, and owned by nothing else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    write
}

/// Run `keel ARGS` with its stdout on `/dev/full`, where every write fails
/// with `ENOSPC`: a failure, not a reader that went away.
fn run_into_full_disk(args: &[&str]) -> Ran {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = keel().args(args).stdout(full).output().expect("run keel");
    let ran = Ran {
        code: out.status.code().expect("an exit code"),
        stdout: Vec::new(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(!ran.stderr.contains("panicked"), "{}", ran.stderr);
    assert!(
        ran.stderr
            .contains("writing to standard output: No space left on device"),
        "keel {args:?}: {}",
        ran.stderr
    );
    ran
}

/// Run `keel ARGS` with its stdout treated as `reader` says; it must never
/// panic.
fn run(args: &[&str], reader: Reader) -> Ran {
    let mut cmd = keel();
    cmd.args(args).stdin(Stdio::null()).stderr(Stdio::piped());
    match reader {
        Reader::All | Reader::ClosedAfter(_) => cmd.stdout(Stdio::piped()),
        Reader::ClosedAtOnce => cmd.stdout(closed_pipe()),
        Reader::BothClosed => {
            let pipe = closed_pipe();
            cmd.stderr(pipe.try_clone().unwrap()).stdout(pipe)
        }
    };
    let mut child = cmd.spawn().expect("run keel");
    let mut read = Vec::new();
    if let Some(mut stdout) = child.stdout.take() {
        let n = match reader {
            Reader::ClosedAfter(n) => n as u64,
            _ => u64::MAX,
        };
        (&mut stdout).take(n).read_to_end(&mut read).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let ran = Ran {
        code: out.status.code().expect("an exit code, not a signal"),
        stdout: read,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        ran.code != 101 && !ran.stderr.contains("panicked"),
        "keel {args:?} ({reader:?}) panicked (exit {}):\n{}",
        ran.code,
        ran.stderr
    );
    ran
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0, "{s}");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The bytes an escaped text field stands for, read as docs/cli-db.md
/// specifies it: `\\` a backslash, `\xNN` a byte, anything else its UTF-8.
/// It must not hold a tab, a line break or a control character.
fn unescape(text: &str) -> Vec<u8> {
    assert!(!text.chars().any(char::is_control), "{text:?}");
    let mut out = Vec::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
            continue;
        }
        match chars.next() {
            Some('\\') => out.push(b'\\'),
            Some('x') => {
                let digits: String = chars.by_ref().take(2).collect();
                out.push(u8::from_str_radix(&digits, 16).expect("\\xNN"));
            }
            other => panic!("{text:?}: a backslash before {other:?}"),
        }
    }
    out
}

/// A key or value in `--json`: a string (its UTF-8) or `{"hex": …}`, which
/// is used only for bytes that are not UTF-8.
fn from_json(v: &serde_json::Value) -> Vec<u8> {
    match v {
        serde_json::Value::String(s) => s.as_bytes().to_vec(),
        serde_json::Value::Object(o) => {
            assert_eq!(o.len(), 1, "{v}");
            let bytes = unhex(o["hex"].as_str().expect("a hex string"));
            assert!(std::str::from_utf8(&bytes).is_err(), "UTF-8 as hex: {v}");
            bytes
        }
        _ => panic!("not a key or value: {v}"),
    }
}

/// A key and value that are not UTF-8 and hold a backslash, a tab and a
/// line break.
const ODD_KEY: &[u8] = b"\x00\xff\\\t";
const ODD_VALUE: &[u8] = b"\x80\nx\\xff";
/// Table names that a one-name-a-line listing must escape.
const ODD_TABLES: [&str; 2] = ["two\nlines", "back\\slash\t"];
/// `key000` in hex: `scan --to` it ends before the text keys.
const TO: &str = "6b6579303030";
/// Enough entries that a scan's text is far longer than a pipe holds.
const ENTRIES: u32 = 4000;

/// The default table's entries: every fifth key and every third value not
/// UTF-8, with tabs, line breaks and backslashes.
fn entries() -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut m = BTreeMap::new();
    for i in 0..ENTRIES {
        let key = if i % 5 == 0 {
            [&b"bin"[..], &i.to_be_bytes(), b"\xff"].concat()
        } else {
            format!("key{i:05}").into_bytes()
        };
        let value = if i % 3 == 0 {
            [
                &format!("v{i}\t\\\n").into_bytes()[..],
                b"\xc3\x28\x80",
                "é".as_bytes(),
            ]
            .concat()
        } else {
            format!("value {i:05} of a text entry long enough to fill pipes").into_bytes()
        };
        m.insert(key, value);
    }
    m.insert(ODD_KEY.to_vec(), ODD_VALUE.to_vec());
    m
}

/// A store holding [`entries`] in `default` and a key in each odd table.
fn odd_store(name: &str) -> PathBuf {
    let store = scratch(name).join("store");
    let created = run(
        &["db", "create", s(&store), "--segment-size", "1M"],
        Reader::All,
    );
    assert_eq!(created.code, 0, "{}", created.stderr);
    let db = Database::open(&store).unwrap();
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table("default").unwrap();
        for (k, v) in entries() {
            t.insert(&k, &v).unwrap();
        }
    }
    for name in ODD_TABLES {
        w.open_table(name).unwrap().insert(b"k", b"v").unwrap();
    }
    w.commit().unwrap();
    db.close().unwrap();
    store
}

/// In a row's arguments: a new directory for each run (`salvage --to`
/// needs an empty one), under `{store}-salvaged/`.
const FRESH: &str = "{fresh}";

fn fresh_dir(store: &Path) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = store.with_file_name("salvaged").join(n.to_string());
    dir.to_str().unwrap().to_owned()
}

/// The `keel db` subcommands `keel db --help` lists.
fn db_subcommands() -> Vec<String> {
    let help = run(&["db", "--help"], Reader::All);
    assert_eq!(help.code, 0);
    help.text()
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect()
}

/// One row of the matrix: a command line and its exit code when its
/// stdout is read whole.
struct Row {
    args: Vec<String>,
    code: i32,
}

fn row(code: i32, args: &[&str]) -> Row {
    Row {
        args: args.iter().map(|a| (*a).to_owned()).collect(),
        code,
    }
}

/// Every `keel db` command, in text and (where it has it) `--json` and
/// `--hex`, on the odd store; rows that change the store come in an order
/// that gives the same answers every time the list runs.
fn db_rows(store: &Path, value_file: &Path) -> Vec<Row> {
    let st = s(store);
    let odd = hex(ODD_KEY);
    let vf = s(value_file);
    let missing = store.with_file_name("no-such-store");
    let missing = s(&missing);
    let dump = store.with_file_name("dump.jsonl");
    let dump = s(&dump);
    vec![
        row(0, &["db", "create", st]),
        row(0, &["db", "create", st, "--json"]),
        row(0, &["db", "put", st, "--hex", "ff01", "80ff"]),
        row(0, &["db", "put", st, "--hex", "ff01", "80ff", "--json"]),
        row(0, &["db", "put", st, "--hex", "ff02", "--value-file", vf]),
        row(
            0,
            &["db", "put", st, "file", "so that the next put finds it"],
        ),
        row(0, &["db", "put", st, "--json", "file", "--value-file", vf]),
        row(0, &["db", "get", st, "--key-hex", &odd]),
        row(0, &["db", "get", st, "--key-hex", &odd, "--json"]),
        row(0, &["db", "get", st, "--hex", &odd]),
        row(0, &["db", "get", st, "--hex", &odd, "--json"]),
        row(0, &["db", "get", st, "--key-hex", &odd, "--raw"]),
        row(0, &["db", "get", st, "--key-hex", "ff02"]),
        row(0, &["db", "get", st, "key00001"]),
        row(1, &["db", "get", st, "absent"]),
        row(1, &["db", "get", st, "absent", "--json"]),
        row(1, &["db", "get", st, "k", "--table", "none"]),
        row(0, &["db", "del", st, "--hex", "ff01"]),
        row(1, &["db", "del", st, "--hex", "ff01"]),
        row(0, &["db", "put", st, "--hex", "ff01", "00"]),
        row(0, &["db", "del", st, "--key-hex", "ff01", "--json"]),
        row(1, &["db", "del", st, "--key-hex", "ff01", "--json"]),
        row(0, &["db", "scan", st]),
        row(0, &["db", "scan", st, "--json"]),
        row(0, &["db", "scan", st, "--hex"]),
        row(0, &["db", "scan", st, "--hex", "--json"]),
        row(
            0,
            &["db", "scan", st, "--key-hex", "--from", "00", "--to", TO],
        ),
        row(
            0,
            &["db", "scan", st, "--hex", "--prefix", "62696e", "--json"],
        ),
        row(0, &["db", "scan", st, "--limit", "10"]),
        row(0, &["db", "scan", st, "--table", "two\nlines"]),
        row(1, &["db", "scan", st, "--table", "none"]),
        row(1, &["db", "scan", st, "--table", "none", "--json"]),
        row(0, &["db", "tables", st]),
        row(0, &["db", "tables", st, "--json"]),
        row(0, &["db", "stats", st]),
        row(0, &["db", "stats", st, "--json"]),
        row(0, &["db", "check", st]),
        row(0, &["db", "check", st, "--json"]),
        row(2, &["db", "get", st, "--hex", "zz"]),
        row(2, &["db", "scan", missing]),
        row(2, &["db", "stats", missing, "--json"]),
        row(2, &["db", "check", missing, "--json"]),
        row(2, &["db", "salvage", missing, "--to", FRESH]),
        row(0, &["db", "salvage", st, "--to", FRESH]),
        row(0, &["db", "salvage", st, "--to", FRESH, "--json"]),
        row(0, &["db", "dump", st]),
        row(0, &["db", "dump", st, "--table", "two\nlines"]),
        row(0, &["db", "dump", st, "--out", dump, "--json"]),
        row(1, &["db", "dump", st, "--table", "none"]),
        row(2, &["db", "dump", st, "--json"]),
        row(2, &["db", "dump", missing]),
        row(
            0,
            &["db", "load", FRESH, "--in", dump, "--segment-size", "1M"],
        ),
        row(
            0,
            &[
                "db",
                "load",
                FRESH,
                "--in",
                dump,
                "--segment-size",
                "1M",
                "--json",
            ],
        ),
        // Standard input is empty: a new, empty store, and no end line.
        row(1, &["db", "load", FRESH, "--segment-size", "1M"]),
        row(2, &["db", "load", FRESH, "--in", missing]),
        row(0, &["db", "backup", st, "--to", FRESH]),
        row(0, &["db", "backup", st, "--to", FRESH, "--json"]),
        row(2, &["db", "backup", missing, "--to", FRESH]),
        row(0, &["db", "compact", st]),
        row(0, &["db", "compact", st, "--json"]),
        row(2, &["db", "compact", missing, "--json"]),
    ]
}

/// What a run of `row` with `reader` must exit with, given what the same
/// row printed when read whole (`whole` bytes): 0 when a closed stdout cut
/// its output; its own code when it printed nothing, or when what it
/// printed may all have fitted in the pipe before the reader left.
fn expected(row: &Row, reader: Reader, whole: usize) -> Vec<i32> {
    let cut = match reader {
        Reader::All => false,
        Reader::ClosedAtOnce | Reader::BothClosed => whole > 0,
        Reader::ClosedAfter(n) if whole > n + PIPE_BYTES => true,
        Reader::ClosedAfter(n) if whole > n => return vec![row.code, 0],
        Reader::ClosedAfter(_) => false,
    };
    vec![if cut { 0 } else { row.code }]
}

/// Whether running a row with `reader` tests more than its run with
/// [`Reader::ClosedAtOnce`] does, given its run read whole (`all`): a cut
/// after some bytes only when the output is too long for the pipe to
/// swallow, a closed stderr only when the command writes to it. (Fewer
/// runs keep the test short; every row runs with stdout closed at once.)
fn worth_running(reader: Reader, all: &Ran) -> bool {
    match reader {
        Reader::All | Reader::ClosedAtOnce => true,
        Reader::ClosedAfter(n) => all.stdout.len() > n + PIPE_BYTES,
        Reader::BothClosed => !all.stderr.is_empty(),
    }
}

/// Run every row with each reader in turn (all rows in order for one
/// reader, then for the next, so that rows which change the store meet
/// the same store every time) and check each exit code; `store` is where
/// [`FRESH`] directories go. Return what each row printed when read whole.
fn run_matrix(rows: &[Row], store: &Path) -> Vec<Ran> {
    let args_of = |r: &Row| -> Vec<String> {
        r.args
            .iter()
            .map(|a| {
                if a == FRESH {
                    fresh_dir(store)
                } else {
                    a.clone()
                }
            })
            .collect()
    };
    let mut whole = Vec::new();
    for r in rows {
        let args = args_of(r);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let all = run(&args, Reader::All);
        assert_eq!(all.code, r.code, "keel {args:?}:\n{}", all.stderr);
        whole.push(all);
    }
    for reader in READERS.into_iter().skip(1) {
        for (r, all) in rows.iter().zip(&whole) {
            if !worth_running(reader, all) {
                continue;
            }
            let args = args_of(r);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let ran = run(&args, reader);
            let want = expected(r, reader, all.stdout.len());
            assert!(
                want.contains(&ran.code),
                "keel {args:?} with {reader:?}: exit {}, not {want:?} (it prints {} bytes \
                 when read whole)\n{}",
                ran.code,
                all.stdout.len(),
                ran.stderr
            );
            assert!(all.stdout.starts_with(&ran.stdout), "{args:?} {reader:?}");
            // A quiet stop: the command says what it says anyway, nothing
            // about the pipe.
            assert!(
                !ran.stderr.contains("Broken pipe") && !ran.stderr.contains("standard output"),
                "keel {args:?} with {reader:?}:\n{}",
                ran.stderr
            );
        }
    }
    let _ = std::fs::remove_dir_all(store.with_file_name("salvaged"));
    whole
}

/// Every `keel db` subcommand, with stdout closed early and read whole, in
/// text, hex and JSON, on a store full of bytes that are not UTF-8.
#[test]
fn every_db_command_survives_closed_stdout_and_odd_bytes() {
    let store = odd_store("matrix");
    let value_file = store.with_file_name("value");
    std::fs::write(&value_file, b"\xfe\xff file value \n").unwrap();
    let rows = db_rows(&store, &value_file);
    let covered: Vec<&str> = rows.iter().map(|r| r.args[1].as_str()).collect();
    for sub in db_subcommands() {
        assert!(
            covered.contains(&sub.as_str()),
            "`keel db {sub}` is not in the matrix"
        );
    }
    let whole = run_matrix(&rows, &store);
    let printed = |args: &[&str]| -> &Ran {
        let i = rows
            .iter()
            .position(|r| r.args == args)
            .unwrap_or_else(|| panic!("no row {args:?}"));
        &whole[i]
    };
    let st = s(&store);
    let mut want = entries();
    want.insert(b"\xff\x02".to_vec(), std::fs::read(&value_file).unwrap());
    want.insert(b"file".to_vec(), std::fs::read(&value_file).unwrap());

    // Text: one KEY<TAB>VALUE line an entry, reading back to the bytes.
    let text = printed(&["db", "scan", st]).text();
    let lines: BTreeMap<Vec<u8>, Vec<u8>> = text
        .lines()
        .map(|l| {
            let (k, v) = l.split_once('\t').expect("KEY<TAB>VALUE");
            (unescape(k), unescape(v))
        })
        .collect();
    assert_eq!(text.lines().count(), want.len());
    assert!(text.len() > 2 * PIPE_BYTES, "{} bytes", text.len());
    assert_eq!(lines, want);
    // JSON: strings, or {"hex": …} for what is not UTF-8.
    let json = printed(&["db", "scan", st, "--json"]).json();
    let from: BTreeMap<Vec<u8>, Vec<u8>> = json["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (from_json(&e["key"]), from_json(&e["value"])))
        .collect();
    assert_eq!(from, want);
    assert_eq!(json["count"], want.len());
    let odd_entry = json["entries"][0].clone();
    assert_eq!(
        odd_entry,
        serde_json::json!({"key": {"hex": "00ff5c09"}, "value": {"hex": "800a785c786666"}})
    );
    // Hex: every key and value as hex, in text and JSON.
    let hexed: BTreeMap<Vec<u8>, Vec<u8>> = printed(&["db", "scan", st, "--hex"])
        .text()
        .lines()
        .map(|l| {
            let (k, v) = l.split_once('\t').unwrap();
            (unhex(k), unhex(v))
        })
        .collect();
    assert_eq!(hexed, want);
    let hex_json = printed(&["db", "scan", st, "--hex", "--json"]).json();
    assert_eq!(hex_json["entries"][0]["key"], "00ff5c09");
    // A range and a prefix given in hex.
    let range = printed(&["db", "scan", st, "--key-hex", "--from", "00", "--to", TO]);
    let range_keys: Vec<Vec<u8>> = range
        .text()
        .lines()
        .map(|l| unescape(l.split('\t').next().unwrap()))
        .collect();
    let in_range: Vec<Vec<u8>> = want
        .keys()
        .filter(|k| k.as_slice() >= b"\x00" && k.as_slice() < b"key000")
        .cloned()
        .collect();
    assert_eq!(range_keys, in_range);
    let prefixed = printed(&["db", "scan", st, "--hex", "--prefix", "62696e", "--json"]).json();
    assert_eq!(prefixed["count"], ENTRIES / 5);
    // `get`: escaped, JSON, hex, raw bytes.
    let odd = hex(ODD_KEY);
    assert_eq!(
        printed(&["db", "get", st, "--key-hex", &odd]).text(),
        "\\x80\\x0ax\\\\xff\n"
    );
    assert_eq!(
        printed(&["db", "get", st, "--key-hex", &odd, "--json"]).json(),
        serde_json::json!({"table": "default", "key": {"hex": "00ff5c09"}, "found": true,
            "value": {"hex": "800a785c786666"}})
    );
    assert_eq!(
        printed(&["db", "get", st, "--hex", &odd]).text(),
        "800a785c786666\n"
    );
    let got = printed(&["db", "get", st, "--hex", &odd, "--json"]).json();
    assert_eq!(
        (&got["key"], &got["value"]),
        (&"00ff5c09".into(), &"800a785c786666".into())
    );
    assert_eq!(
        printed(&["db", "get", st, "--key-hex", &odd, "--raw"]).stdout,
        ODD_VALUE
    );
    assert_eq!(
        printed(&["db", "get", st, "--key-hex", "ff02"]).text(),
        "\\xfe\\xff file value \\x0a\n"
    );
    let put = printed(&[
        "db",
        "put",
        st,
        "--json",
        "file",
        "--value-file",
        s(&value_file),
    ])
    .json();
    let file_bytes = std::fs::metadata(&value_file).unwrap().len();
    assert_eq!(
        (put["key"].as_str(), put["value_bytes"].as_u64()),
        (Some("file"), Some(file_bytes))
    );
    // Table names, one a line, escaped; as strings in JSON.
    assert_eq!(
        printed(&["db", "tables", st]).text(),
        "back\\\\slash\\x09\ndefault\ntwo\\x0alines\n"
    );
    assert_eq!(
        printed(&["db", "tables", st, "--json"]).json()["tables"],
        serde_json::json!(["back\\slash\t", "default", "two\nlines"])
    );
    assert!(
        printed(&["db", "stats", st])
            .text()
            .contains("two\\x0alines (1 keys)"),
        "{}",
        printed(&["db", "stats", st]).text()
    );
    // `dump`: every entry as JSON lines that read back to the bytes.
    let dumped = printed(&["db", "dump", st]).text();
    let from_dump: BTreeMap<Vec<u8>, Vec<u8>> = dumped
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|l| l["table"] == "default" && l.get("key").is_some())
        .map(|l| (from_json(&l["key"]), from_json(&l["value"])))
        .collect();
    assert_eq!(from_dump, want);
    assert!(dumped.len() > 2 * PIPE_BYTES, "{} bytes", dumped.len());
    let compacted = printed(&["db", "compact", st, "--json"]).json();
    assert_eq!(compacted["entries"], want.len() + ODD_TABLES.len());
    // A stdout that fails otherwise (a full disk) is an error.
    assert_eq!(run_into_full_disk(&["db", "scan", st]).code, 2);
    assert_eq!(run_into_full_disk(&["db", "stats", st, "--json"]).code, 2);
    // Failures in JSON are one object with the exit code.
    let absent = printed(&["db", "get", st, "absent", "--json"]).json();
    assert_eq!(absent["found"], false);
    let no_table = printed(&["db", "scan", st, "--table", "none", "--json"]).json();
    assert_eq!(
        (no_table["kind"].as_str(), no_table["exit_code"].as_u64()),
        (Some("absent"), Some(1))
    );
}

/// The other commands that print: the help of every command, `keel
/// journal` on the odd store's journal, and benches cut at their first
/// line.
#[test]
fn other_commands_survive_a_closed_stdout() {
    let store = odd_store("others");
    let journal = store.join("journal");
    let bench_dir = store.with_file_name("bench");
    let mut rows: Vec<Row> = vec![
        row(0, &["--help"]),
        row(0, &["--version"]),
        row(
            0,
            &[
                "journal",
                "dump",
                s(&journal),
                "--records",
                "--payload",
                "64",
            ],
        ),
        row(0, &["journal", "dump", s(&journal), "--json", "--records"]),
        row(0, &["journal", "check", s(&journal)]),
        row(0, &["journal", "check", s(&journal), "--json"]),
    ];
    // `--help` of every command and subcommand.
    for top in ["probe", "bench", "diskcheck", "journal", "db"] {
        rows.push(row(0, &[top, "--help"]));
        let help = run(&[top, "--help"], Reader::All);
        let subs: Vec<String> = help
            .text()
            .lines()
            .skip_while(|l| *l != "Commands:")
            .skip(1)
            .take_while(|l| !l.is_empty())
            .filter_map(|l| l.split_whitespace().next())
            .filter(|c| *c != "help")
            .map(str::to_owned)
            .collect();
        for sub in subs {
            rows.push(row(0, &[top, &sub, "--help"]));
        }
    }
    run_matrix(&rows, &store);
    let check = run_into_full_disk(&["journal", "check", s(&journal)]);
    assert_eq!(check.code, 1);
    // A bench prints its plan first: a closed stdout stops it there, before
    // it writes a file (running one whole is bench_methods.rs's job).
    for bench in ["methods", "sizes"] {
        let dir = bench_dir.join(bench);
        for reader in [Reader::ClosedAtOnce, Reader::BothClosed] {
            let ran = run(&["bench", bench, "--quick", "--dir", s(&dir)], reader);
            assert_eq!(ran.code, 0, "bench {bench} {reader:?}:\n{}", ran.stderr);
            assert_eq!(common::leftovers(&dir), Vec::<String>::new());
        }
    }
}

/// Wait until `child` blocks reading its standard input (a pipe).
fn wait_reading_stdin(child: &Child) {
    let pid = child.id();
    let started = Instant::now();
    loop {
        let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
        let syscall = std::fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
        // read(0, …): syscall 0 on x86_64, 63 on aarch64.
        let reads_fd0 = syscall.starts_with(if cfg!(target_arch = "aarch64") {
            "63 0x0 "
        } else {
            "0 0x0 "
        });
        if wchan.contains("pipe_read") || reads_fd0 {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "put never blocked reading stdin (wchan {wchan:?}, syscall {syscall:?})"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `put --value-file -` reads all of stdin before it opens the store: a
/// writer that is slow to send the value keeps no one else out.
#[test]
fn put_reads_stdin_before_taking_the_lock() {
    let store = odd_store("stdin");
    let st = s(&store);
    let mut put = keel()
        .args(["db", "put", st, "--hex", "ff03", "--value-file", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = put.stdin.take().unwrap();
    stdin.write_all(b"first half, ").unwrap();
    wait_reading_stdin(&put);
    // While put waits for the rest, the store is free: another command
    // opens it (and would be refused, exit 2, were the lock held).
    let other = run(&["db", "get", st, "key00001"], Reader::All);
    assert_eq!(
        other.code, 0,
        "the store is locked while put reads stdin:\n{}",
        other.stderr
    );
    let other = run(&["db", "put", st, "--hex", "ff04", "00"], Reader::All);
    assert_eq!(other.code, 0, "{}", other.stderr);
    stdin.write_all(b"second half").unwrap();
    drop(stdin);
    let out = put.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = run(&["db", "get", st, "--hex", "ff03", "--raw"], Reader::All);
    assert_eq!(got.stdout, b"first half, second half");
    // A standard input longer than the store's largest journal segment
    // (1 MiB here) is refused once that much is read, before the store is
    // opened; one shorter but past the store's exact limit, once it is.
    for (len, before_open) in [(3 << 20, true), ((1 << 20) - 100, false)] {
        let mut put = keel()
            .args(["db", "put", st, "big", "--value-file", "-"])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = put.stdin.take().unwrap();
        let _ = stdin.write_all(&vec![7u8; len]);
        drop(stdin);
        let out = put.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("the most one value can be"), "{stderr}");
        assert_eq!(
            stderr.contains("the largest journal segment of this store"),
            before_open,
            "{stderr}"
        );
    }
    assert_eq!(run(&["db", "get", st, "big"], Reader::All).code, 1);
}
