//! The store under real `SIGKILL`, on real files.
//!
//! The test binary re-runs itself as a child (`KEEL_STORE_CHILD_DIR` set):
//! the child opens the store (recovering what the last child left), and
//! 1–4 threads commit transactions, each putting a few keys
//! `t{thread}/c{counter}/{i}` with values derived from them, and print
//! `ack THREAD COUNTER KEYS` once `commit` returned. Checkpoints run in the
//! background, often (small thresholds), so kills land inside them too.
//! The parent kills the child at a random moment, reopens the store, and
//! checks that every acknowledged transaction is there, that every
//! transaction present is whole (all its keys or none), that nothing else
//! is, and that `check` finds every page accounted for. The next child
//! starts on the same directory.
//!
//! `KEEL_STORE_SIGKILL_ROUNDS=N` runs N kills (default: the CI amount).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use keel::db::{Builder, Database, DbError};
use keel::journal::JournalOptions;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod kill_support;
use kill_support::kill_and_collect;

const CI_ROUNDS: usize = 220;

fn builder() -> Builder {
    Database::builder()
        .journal(JournalOptions {
            segment_size_bytes: 256 << 10,
            // Segments growing from 16 KiB after every start.
            first_segment_size_bytes: 16 << 10,
            ..JournalOptions::default()
        })
        .checkpoint_journal_bytes(96 << 10)
        .checkpoint_interval(Some(Duration::from_millis(5)))
        .cache_bytes(1 << 20)
        // Folds in parts of a few pages: kills land between parts too.
        .fold_bytes(32 << 10)
}

fn key(t: u32, c: u64, i: usize) -> Vec<u8> {
    format!("t{t}/c{c:012}/{i}").into_bytes()
}

fn value(t: u32, c: u64, i: usize) -> Vec<u8> {
    let len = ((c as usize * 31 + i * 7) % 300) + (t as usize);
    let seed = format!("{t}.{c}.{i}");
    seed.bytes().cycle().take(len.max(seed.len())).collect()
}

/// Open, retrying while the killed child's lock is still being released.
fn open(dir: &Path) -> Database {
    for _ in 0..500 {
        match builder().create(dir) {
            Ok(db) => return db,
            Err(DbError::Locked { .. }) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!("open {}: {e}", dir.display()),
        }
    }
    panic!("the store stayed locked");
}

fn child_main(dir: &Path) {
    let threads: u32 = std::env::var("KEEL_STORE_CHILD_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    let base: u64 = std::env::var("KEEL_STORE_CHILD_BASE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let db = open(dir);
    println!("open");
    std::thread::scope(|s| {
        for t in 0..threads {
            let db = &db;
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(base ^ t as u64);
                for c in base.. {
                    // One in six: 16 puts or more, which a lone committer
                    // publishes as a run before the helper inserts it.
                    let keys = if rng.random_ratio(1, 6) {
                        rng.random_range(16..40)
                    } else {
                        rng.random_range(1..6)
                    };
                    let w = db.begin_write().unwrap();
                    {
                        let mut tab = w.open_table("kv").unwrap();
                        for i in 0..keys {
                            tab.insert(key(t, c, i), value(t, c, i)).unwrap();
                        }
                    }
                    w.commit().unwrap();
                    // One write(2) per line: the line is the acknowledgement.
                    let line = format!("ack {t} {c} {keys}\n");
                    let mut out = std::io::stdout().lock();
                    out.write_all(line.as_bytes()).unwrap();
                    out.flush().unwrap();
                }
            });
        }
    });
}

/// Not a test on its own: the entry point of the child process.
#[test]
fn store_child_entry() {
    if let Some(dir) = std::env::var_os("KEEL_STORE_CHILD_DIR") {
        child_main(Path::new(&dir));
    }
}

fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// (thread, counter) → number of keys, for every acknowledged transaction.
type Acks = BTreeMap<(u32, u64), usize>;

fn parse_acks(out: &str, acks: &mut Acks) -> usize {
    let mut n = 0;
    for l in out.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.first() == Some(&"ack") {
            acks.insert(
                (f[1].parse().unwrap(), f[2].parse().unwrap()),
                f[3].parse().unwrap(),
            );
            n += 1;
        }
    }
    n
}

/// Reopen and check: every acknowledged transaction whole, every present
/// one whole and correct, pages accounted for. Returns the transactions
/// present.
fn check_recovered(dir: &Path, acks: &Acks) -> BTreeSet<(u32, u64)> {
    let db = open(dir);
    db.check()
        .unwrap_or_else(|e| panic!("check after a kill: {e}"));
    let r = db.begin_read();
    let mut present: BTreeMap<(u32, u64), BTreeSet<usize>> = BTreeMap::new();
    if let Ok(t) = r.open_table("kv") {
        for kv in t.iter() {
            let kv = kv.unwrap();
            let k = String::from_utf8(kv.0.as_bytes().to_vec()).expect("a key no child wrote");
            let f: Vec<&str> = k.split('/').collect();
            let (t, c, i): (u32, u64, usize) = (
                f[0][1..].parse().unwrap(),
                f[1][1..].parse().unwrap(),
                f[2].parse().unwrap(),
            );
            assert_eq!(kv.1.as_bytes(), value(t, c, i), "key {k}: wrong value");
            present.entry((t, c)).or_default().insert(i);
        }
    }
    for (id, &keys) in acks {
        let got = present.get(id).map_or(0, |s| s.len());
        assert_eq!(
            got, keys,
            "acknowledged transaction {id:?} has {got} of {keys} keys"
        );
    }
    for (id, is) in &present {
        // Keys are 0..n: a partial transaction misses some of its upper keys
        // or holds a gap.
        let n = is.len();
        assert!(
            is.iter().copied().eq(0..n),
            "transaction {id:?} is partial: keys {is:?}"
        );
        if let Some(&k) = acks.get(id) {
            assert_eq!(k, n);
        }
    }
    drop(r);
    db.close().unwrap();
    present.into_keys().collect()
}

#[test]
fn sigkill_loses_no_acknowledged_transaction() {
    let rounds: usize = std::env::var("KEEL_STORE_SIGKILL_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(CI_ROUNDS);
    let dir = scratch("store-sigkill");
    let mut rng = SmallRng::seed_from_u64(7);
    let mut acks = Acks::new();
    let mut total = 0;
    let mut round = 0;
    // On a loaded machine a child may spend the first rounds' kill delays
    // opening the store, acknowledging nothing: then more rounds, killed
    // later, until the children have acknowledged more than `rounds`
    // transactions (at most twice the rounds: the assertion below).
    while round < rounds || (total <= rounds && round < 2 * rounds) {
        let late = round >= rounds;
        round += 1;
        let threads = rng.random_range(1..=4);
        let exe = std::env::current_exe().unwrap();
        let child = Command::new(exe)
            .args([
                "--exact",
                "store_child_entry",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("KEEL_STORE_CHILD_DIR", &dir)
            .env("KEEL_STORE_CHILD_THREADS", threads.to_string())
            .env("KEEL_STORE_CHILD_BASE", ((round as u64) << 32).to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn child");
        // Kill anywhere from inside open/recovery to well into committing.
        let after = match late {
            false => Duration::from_micros(rng.random_range(2_000..80_000)),
            true => Duration::from_micros(rng.random_range(80_000..400_000)),
        };
        let out = kill_and_collect(child, after);
        total += parse_acks(&out, &mut acks);
        check_recovered(&dir, &acks);
    }
    println!("store: {round} SIGKILLs, {total} acknowledged transactions, all recovered whole");
    assert!(
        total > rounds,
        "the children acknowledged too little ({total})"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
