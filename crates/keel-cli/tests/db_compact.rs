//! `keel db compact` through the binary: it shrinks a store whose keys
//! were mostly deleted; a `SIGKILL` at every step of it leaves the old
//! store or the new one, whole, for both ways of swapping directories;
//! under `strace`, every file and directory of the copy is fsynced before
//! the swap and the parent after it; a store in use is refused, and what
//! an interrupted compact left beside the store is removed by the next
//! one (unless its process still runs).
//!
//! `KEEL_COMPACT_KEYS` sets the key count of the size test (default
//! 50,000; docs/testing.md gives the 1M run).

mod common;
use common::{contents, Tables};

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::{json, keel, require_tool, scratch};
use keel::db::Database;
use keel::journal::JournalOptions;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn compact(store: &Path, env: &[(&str, &str)]) -> Output {
    let out = keel()
        .args(["db", "compact", s(store), "--json"])
        .envs(env.iter().copied())
        .output()
        .expect("run keel");
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    out
}

fn key(i: u64) -> Vec<u8> {
    format!("key{i:010}").into_bytes()
}

/// A value of 100 bytes that differs from key to key.
fn value(i: u64) -> Vec<u8> {
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..100)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Remove these keys of table `data`, 10,000 a transaction.
fn remove_keys(db: &Database, keys: &[u64]) {
    for chunk in keys.chunks(10_000) {
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table("data").unwrap();
            for &i in chunk {
                assert!(t.remove(key(i)).unwrap());
            }
        }
        txn.commit().unwrap();
    }
}

/// A store of `n` keys put in a scattered order, of which all but every
/// `keep_every`-th are then deleted, with an empty table beside; closed.
/// Returns what it holds.
fn thinned_store(path: &Path, n: u64, keep_every: u64, segment_bytes: u64) -> Tables {
    let db = Database::builder()
        .journal(JournalOptions {
            segment_size_bytes: segment_bytes,
            ..JournalOptions::default()
        })
        .create(path)
        .unwrap();
    let mut w = db.bulk_writer();
    w.create_table("empty").unwrap();
    // 7919 is prime, so `i * 7919 % n` visits every key once.
    for i in 0..n {
        let k = i * 7919 % n;
        w.insert("data", key(k), value(k)).unwrap();
    }
    w.finish().unwrap();
    // Every key on disk before the deletes (which free their pages).
    db.checkpoint().unwrap();
    let doomed: Vec<u64> = (0..n).filter(|i| i % keep_every != 0).collect();
    remove_keys(&db, &doomed);
    db.close().unwrap();
    let mut want = Tables::new();
    want.insert("empty".into(), BTreeMap::new());
    want.insert(
        "data".into(),
        (0..n)
            .filter(|i| i % keep_every == 0)
            .map(|i| (key(i), value(i)))
            .collect(),
    );
    want
}

/// After deleting 90 % of the keys, compact leaves the data file at most
/// 15 % of its allocated size. The journal's segment files are
/// preallocated (two of them in a new store, whatever it holds), so they
/// are reported, not compared.
#[test]
fn compact_after_deleting_90_percent_leaves_at_most_15_percent() {
    let n: u64 = std::env::var("KEEL_COMPACT_KEYS")
        .ok()
        .map(|v| v.parse().expect("KEEL_COMPACT_KEYS is a count"))
        .unwrap_or(50_000);
    let dir = scratch("shrink");
    let store = dir.join("store");
    let started = std::time::Instant::now();
    let want = thinned_store(&store, n, 10, 16 << 20);
    let built = started.elapsed();
    let started = std::time::Instant::now();
    let out = compact(&store, &[]);
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = json(&out);
    let (before, after) = (&report["before"], &report["after"]);
    let bytes = |v: &serde_json::Value, f: &str| v[f].as_u64().unwrap();
    let (b, a) = (
        bytes(before, "data_file_allocated_bytes"),
        bytes(after, "data_file_allocated_bytes"),
    );
    eprintln!(
        "{n} keys, 90 % deleted (store built in {built:.1?}); compact took {took:.1?}: data file \
         {b} -> {a} bytes allocated ({:.1} %), length {} -> {}; journal {} -> {} bytes \
         allocated in {} -> {} segment files; whole directory {} -> {} bytes",
        a as f64 * 100.0 / b as f64,
        bytes(before, "data_file_bytes"),
        bytes(after, "data_file_bytes"),
        bytes(before, "journal_allocated_bytes"),
        bytes(after, "journal_allocated_bytes"),
        bytes(before, "journal_segments"),
        bytes(after, "journal_segments"),
        bytes(before, "allocated_bytes"),
        bytes(after, "allocated_bytes"),
    );
    assert!(
        a * 100 <= b * 15,
        "the data file takes {a} bytes after compaction, more than 15 % of {b}"
    );
    assert_eq!(report["entries"], n / 10);
    assert_eq!(report["swap"], "exchange");
    assert_eq!(contents(&store), want);
}

/// Every step `KEEL_COMPACT_CRASH_AT` names, and which store a crash there
/// leaves at the path: the old one until the swap, the new one after.
const STEPS: [(&str, Which); 10] = [
    ("opened", Which::Old),
    ("copying", Which::Old),
    ("copied", Which::Old),
    ("synced", Which::Old),
    ("marked", Which::Old),
    ("half-swapped", Which::New),
    ("swapped", Which::New),
    ("swap-synced", Which::New),
    ("removing", Which::New),
    ("done", Which::New),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Which {
    Old,
    New,
}

/// Copy the directory `from` to `to`, recursively.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// The names in `dir` that an interrupted compact of `store` leaves.
fn siblings(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".store.compact-"))
        .collect()
}

/// A `SIGKILL` at each step of a compact, with the atomic exchange and
/// with the two renames: the store opens at its path (for the two
/// renames, after any `keel db` command finished the swap), holds exactly
/// what it held, and is the old store before the swap and the new one
/// after; the next compact removes what was left beside it.
#[test]
fn a_crash_at_each_step_of_compact_leaves_the_old_or_the_new_store() {
    let dir = scratch("crash");
    let template = dir.join("template");
    // 30,000 keys, a third deleted: the copy reports progress (where the
    // `copying` crash lands) after 10,000 of its 20,000 entries.
    let want = thinned_store(&template, 30_000, 1, 1 << 20);
    let want = {
        let db = Database::open(&template).unwrap();
        let thirds: Vec<u64> = (0..30_000).filter(|i| i % 3 == 0).collect();
        remove_keys(&db, &thirds);
        db.close().unwrap();
        let mut want = want;
        want.get_mut("data").unwrap().retain(|k, _| {
            let i: u64 = std::str::from_utf8(&k[3..]).unwrap().parse().unwrap();
            i % 3 != 0
        });
        want
    };
    let old_size = std::fs::metadata(template.join("data.keel")).unwrap().len();
    for protocol in ["exchange", "renames"] {
        for (step, which) in STEPS {
            let case = dir.join(format!("{protocol}-{step}"));
            let store = case.join("store");
            copy_dir(&template, &store);
            let mut env = vec![("KEEL_COMPACT_CRASH_AT", step)];
            if protocol == "renames" {
                env.push(("KEEL_COMPACT_SWAP", "renames"));
            }
            let out = compact(&store, &env);
            let applies = protocol == "renames" || !["marked", "half-swapped"].contains(&step);
            let what = format!("{protocol}, crash at {step}");
            if applies {
                assert_eq!(
                    out.status.signal(),
                    Some(9),
                    "{what}: not killed ({:?}): {}",
                    out.status,
                    stderr(&out)
                );
            } else {
                assert_eq!(out.status.code(), Some(0), "{what}: {}", stderr(&out));
            }
            if protocol == "renames" {
                // Any `keel db` command finishes a swap cut between its
                // two renames: `create` too, rather than make an empty
                // store there.
                for args in [["db", "create", s(&store)], ["db", "check", s(&store)]] {
                    let ran = keel().args(args).output().unwrap();
                    assert_eq!(ran.status.code(), Some(0), "{what}: {}", stderr(&ran));
                }
            }
            assert!(
                store.join("data.keel").exists(),
                "{what}: no store at the path; beside it: {:?}",
                siblings(&case)
            );
            let size = std::fs::metadata(store.join("data.keel")).unwrap().len();
            let found = if size == old_size {
                Which::Old
            } else {
                Which::New
            };
            let expected = if applies { which } else { Which::New };
            assert_eq!(found, expected, "{what}: data file of {size} bytes");
            assert!(
                contents(&store) == want,
                "{what}: the store's entries differ"
            );
            // The next compact removes what was left, and compacts.
            let left = siblings(&case);
            let again = compact(&store, &[]);
            assert_eq!(again.status.code(), Some(0), "{what}: {}", stderr(&again));
            let removed = json(&again)["leftovers_removed"].as_array().unwrap().len();
            assert_eq!(removed, left.len(), "{what}: left {left:?}");
            assert_eq!(siblings(&case), Vec::<String>::new(), "{what}");
            assert!(contents(&store) == want, "{what}: after the second compact");
            eprintln!("{what}: killed {applies}, left {left:?}, found {found:?}");
            std::fs::remove_dir_all(&case).unwrap();
        }
    }
}

/// Under `strace`: every file of the copy is fsynced after its last write
/// and before the exchange, every directory after the last entry created
/// in it, and the parent directory before the exchange and after it,
/// before the old store is removed.
#[test]
fn compact_syncs_the_copy_before_the_swap_and_the_parent_after() {
    require_tool("strace");
    let dir = scratch("strace");
    let store = dir.join("store");
    thinned_store(&store, 2_000, 2, 1 << 20);
    let trace = dir.join("trace.txt");
    let out = std::process::Command::new("strace")
        .args(["-f", "-qq", "-y", "-s", "256", "-e"])
        .arg("trace=fsync,fdatasync,renameat2,pwrite64,pwritev2,write,fallocate,openat,mkdir,unlink,unlinkat,rmdir")
        .arg("-o")
        .arg(&trace)
        .arg(env!("CARGO_BIN_EXE_keel"))
        .args(["db", "compact", s(&store)])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let trace = std::fs::read_to_string(&trace).unwrap();
    let parent = std::fs::canonicalize(&dir).unwrap();
    let exchange = trace
        .lines()
        .position(|l| l.contains("renameat2(") && l.contains("RENAME_EXCHANGE"))
        .expect("a renameat2(RENAME_EXCHANGE)");
    let exchange_line = trace.lines().nth(exchange).unwrap();
    assert!(exchange_line.trim_end().ends_with("= 0"), "{exchange_line}");
    let copy = exchange_line
        .split('"')
        .nth(3)
        .map(PathBuf::from)
        .expect("the copy's path");
    // The files of the copy (now the store), and its directories.
    let mut files = vec![copy.join("data.keel"), copy.join("LOCK")];
    for e in std::fs::read_dir(store.join("journal")).unwrap() {
        files.push(copy.join("journal").join(e.unwrap().file_name()));
    }
    let dirs = [copy.clone(), copy.join("journal")];
    let lines: Vec<&str> = trace.lines().collect();
    let on = |l: &str, p: &Path| l.contains(&format!("<{}>", p.display()));
    let fsync_of = |l: &str, p: &Path| on(l, p) && l.contains("fsync(");
    // A file changes when it is created and with each write to it (but a
    // sync); a directory when an entry is created in it.
    let is_sync = |l: &str| l.contains("fsync(") || l.contains("fdatasync(");
    let created = |l: &str| {
        let creates = (l.contains("openat(") && l.contains("O_CREAT")) || l.contains("mkdir(");
        creates
            .then(|| l.split('"').nth(1).map(PathBuf::from))
            .flatten()
    };
    let writes = |l: &str, p: &Path| {
        (on(l, p) && !is_sync(l) && !l.contains("openat(")) || created(l).as_deref() == Some(p)
    };
    let creates_in = |l: &str, d: &Path| created(l).is_some_and(|p| p.parent() == Some(d));
    let checks = files
        .iter()
        .map(|f| (f, &writes as &dyn Fn(&str, &Path) -> bool))
        .chain(
            dirs.iter()
                .map(|d| (d, &creates_in as &dyn Fn(&str, &Path) -> bool)),
        );
    for (p, changes) in checks {
        let last = lines[..exchange]
            .iter()
            .rposition(|l| changes(l, p))
            .unwrap_or_else(|| panic!("no change to {} in the trace", p.display()));
        let synced = lines[last..exchange].iter().any(|l| fsync_of(l, p));
        assert!(
            synced,
            "{} is not fsynced after its last change and before the exchange",
            p.display()
        );
    }
    let parent_synced = |range: &[&str]| range.iter().any(|l| fsync_of(l, &parent));
    assert!(
        parent_synced(&lines[..exchange]),
        "the parent before the exchange"
    );
    // The exchange is durable before the old store's first file goes.
    let removal = lines[exchange..]
        .iter()
        .position(|l| l.contains("unlink"))
        .map(|i| exchange + i)
        .expect("the old store is removed");
    assert!(
        parent_synced(&lines[exchange..removal]),
        "the parent is not fsynced between the exchange and the removal of the old store"
    );
}

/// A store in use is refused, with nothing left beside it; a leftover of a
/// process that still runs is kept, one of a process gone is removed; a
/// store named through a symbolic link is compacted where it lies.
#[test]
fn compact_refuses_a_store_in_use_and_sorts_out_leftovers() {
    let dir = scratch("refuse");
    let store = dir.join("store");
    let want = thinned_store(&store, 3_000, 3, 1 << 20);
    let held = Database::open(&store).unwrap();
    let out = compact(&store, &[]);
    assert_eq!(out.status.code(), Some(2));
    let report = json(&out);
    assert_eq!(report["kind"], "locked");
    assert!(report["error"]
        .as_str()
        .unwrap()
        .contains("Stop the process"));
    drop(held);
    assert_eq!(siblings(&dir), Vec::<String>::new());

    // This test's own pid is a running process; 4194305 is past Linux's
    // largest pid.
    let running = dir.join(format!(".store.compact-{}", std::process::id()));
    let gone = dir.join(".store.compact-4194305");
    for d in [&running, &gone] {
        std::fs::create_dir_all(d.join("journal")).unwrap();
        std::fs::write(d.join("data.keel"), b"partial").unwrap();
    }
    std::fs::write(dir.join(".store.compact-4194305.swap"), b"").unwrap();
    let link = dir.join("link");
    std::os::unix::fs::symlink(&store, &link).unwrap();
    let out = compact(&link, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(report["leftovers_removed"].as_array().unwrap().len(), 2);
    assert_eq!(report["leftovers_kept"].as_array().unwrap().len(), 1);
    assert!(stderr(&out).contains("still running"), "{}", stderr(&out));
    assert!(running.exists() && !gone.exists());
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(contents(&store), want);
}
