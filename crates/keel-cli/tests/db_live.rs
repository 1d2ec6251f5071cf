//! `keel db scan --read-only`, `keel db check --read-only` and `keel db
//! backup` on a store another process is committing to: every answer is the store at a
//! prefix of the commits holding every commit acknowledged before the
//! command began and none that was not yet issued, through checkpoints
//! that reuse pages and recycle journal segments under the readers; and
//! the writer keeps committing while they run.
//!
//! The writer is this test binary run again (`writer_child`, with
//! `KEEL_LIVE_WRITER` naming the store): commit *i* inserts key *i*,
//! deletes key *i* − `WINDOW` and rewrites a key scattered over the rest
//! (so that each checkpoint copies leaves all over the tree, and frees
//! pages a reader is about to read). The child appends `i` to a file
//! before `commit()` (one `write` each: once a command ends, the file
//! holds every commit issued before) and prints `ack i` once it returned,
//! on a pipe the test reads (a line may arrive late: the lower bound only
//! gets looser).

use std::collections::BTreeMap;

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{json, keel, scratch};
use keel::db::Database;
use keel::journal::JournalOptions;

/// Keys the store holds once past the start: commit i deletes key i − WINDOW.
const WINDOW: u64 = 1500;
/// Commands of each kind (scan, check) the test runs beside the writer.
const READERS: usize = 100;

fn key(i: u64) -> String {
    format!("{i:08}")
}

/// The value commit `i` writes.
fn value(i: u64) -> String {
    format!("{i}-{}", "x".repeat(120))
}

/// The older key commit `i` rewrites, if any: one of the keys it keeps.
fn rewritten(i: u64) -> Option<u64> {
    (i > WINDOW).then(|| i - 1 - i.wrapping_mul(2_654_435_761) % (WINDOW - 1))
}

/// The store after commits 1..=n: key → the commit whose value it holds.
fn model(n: u64) -> BTreeMap<u64, u64> {
    let mut m = BTreeMap::new();
    for i in 1..=n {
        m.insert(i, i);
        if i > WINDOW {
            m.remove(&(i - WINDOW));
        }
        if let Some(k) = rewritten(i) {
            m.insert(k, i);
        }
    }
    m
}

/// The writer (only when run by `a_live_store_reads_as_a_prefix_...`).
#[test]
fn writer_child() {
    let Ok(dir) = std::env::var("KEEL_LIVE_WRITER") else {
        return;
    };
    let issued = std::env::var("KEEL_LIVE_ISSUED").unwrap();
    let mut issued = std::fs::File::create(issued).unwrap();
    // Small segments and frequent checkpoints: pages are reused and
    // segments recycled under the readers all the time.
    let journal = JournalOptions {
        segment_size_bytes: 256 << 10,
        first_segment_size_bytes: 256 << 10,
        ..JournalOptions::default()
    };
    let db = Database::builder()
        .journal(journal)
        .checkpoint_journal_bytes(32 << 10)
        .paced_checkpoints(false)
        .create(&dir)
        .unwrap();
    for i in 1.. {
        issued.write_all(format!("{i}\n").as_bytes()).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table("t").unwrap();
            t.insert(key(i).as_bytes(), value(i).as_bytes()).unwrap();
            if i > WINDOW {
                t.remove(key(i - WINDOW).as_bytes()).unwrap();
            }
            if let Some(k) = rewritten(i) {
                t.insert(key(k).as_bytes(), value(i).as_bytes()).unwrap();
            }
        }
        txn.commit().unwrap();
        println!("ack {i}");
    }
}

/// What the writer said, as the test heard it.
#[derive(Default)]
struct Heard {
    acked: u64,
    /// When each ack arrived.
    acks: Vec<Instant>,
}

struct Writer {
    child: Child,
    heard: Arc<Mutex<Heard>>,
    /// The file of commits issued.
    issued: std::path::PathBuf,
}

impl Writer {
    fn start(store: &Path, issued: &Path) -> Writer {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["writer_child", "--exact", "--nocapture", "--test-threads=1"])
            .env("KEEL_LIVE_WRITER", store)
            .env("KEEL_LIVE_ISSUED", issued)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let heard = Arc::new(Mutex::new(Heard::default()));
        let out = BufReader::new(child.stdout.take().unwrap());
        let h = Arc::clone(&heard);
        std::thread::spawn(move || {
            for line in out.lines() {
                let Ok(line) = line else { break };
                let mut h = h.lock().unwrap();
                if let Some(i) = line.strip_prefix("ack ") {
                    h.acked = i.parse().unwrap();
                    h.acks.push(Instant::now());
                }
            }
        });
        Writer {
            child,
            heard,
            issued: issued.to_path_buf(),
        }
    }

    fn acked(&self) -> u64 {
        self.heard.lock().unwrap().acked
    }

    /// The last commit issued so far (the file's last whole line).
    fn issued(&self) -> u64 {
        let text = std::fs::read_to_string(&self.issued).unwrap();
        let whole = &text[..text.rfind('\n').map_or(0, |n| n + 1)];
        whole.lines().last().map_or(0, |l| l.parse().unwrap())
    }

    /// Acks that arrived in `[from, to)`, and the longest gap between two
    /// of them (or from `from` to the first).
    fn acks_between(&self, from: Instant, to: Instant) -> (usize, Duration) {
        let h = self.heard.lock().unwrap();
        let mut last = from;
        let (mut n, mut gap) = (0, Duration::ZERO);
        for &t in h.acks.iter().filter(|&&t| t >= from && t < to) {
            gap = gap.max(t - last);
            last = t;
            n += 1;
        }
        (n, gap.max(to - last))
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run `keel ARGS`; with `pause`, the command sleeps that long between
/// taking its first snapshot and reading it (a fail point), so that the
/// writer's checkpoints reuse the pages it is about to read.
fn run(args: &[&str], pause: Option<Duration>) -> Output {
    let mut cmd = keel();
    if let Some(p) = pause {
        cmd.env("KEEL_FAILPOINT_LIVE_PAUSE_MS", p.as_millis().to_string());
    }
    let out = cmd.args(args).output().expect("run keel");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "keel panicked:\n{stderr}");
    out
}

/// The `n` such that `lines` (a scan of table `t`) is the store after
/// commits 1..=n, or why not.
fn prefix_of(lines: &str) -> Result<u64, String> {
    let rows: Vec<(&str, &str)> = lines
        .lines()
        .map(|l| {
            l.split_once('\t')
                .ok_or(format!("not KEY<TAB>VALUE: {l:?}"))
        })
        .collect::<Result<_, _>>()?;
    let Some(&(last, _)) = rows.last() else {
        return Err("no entries".into());
    };
    let n: u64 = last.parse().map_err(|_| format!("key {last:?}"))?;
    let want = model(n);
    if rows.len() != want.len() {
        return Err(format!(
            "{} entries up to key {n}: commits 1..={n} leave {}",
            rows.len(),
            want.len()
        ));
    }
    for ((k, by), (got_k, got_v)) in want.iter().zip(&rows) {
        if *got_k != key(*k) || *got_v != value(*by) {
            return Err(format!(
                "entry {got_k:?}={got_v:?} where key {k} holding commit {by}'s value was expected"
            ));
        }
    }
    Ok(n)
}

#[test]
fn a_live_store_reads_as_a_prefix_of_its_commits_and_the_writer_goes_on() {
    let dir = scratch("live");
    let store = dir.join("store");
    let st = store.to_str().unwrap();
    let writer = Writer::start(&store, &dir.join("issued"));
    let started = Instant::now();
    while writer.acked() < WINDOW + 200 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the writer is stuck"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The writer alone, for comparison.
    let quiet_from = Instant::now();
    std::thread::sleep(Duration::from_millis(1500));
    let quiet_to = Instant::now();

    // Snapshots the library's open took again, and those a command took
    // again after a read of its snapshot failed.
    let (mut retries, mut rereads, mut lsns) = (0, 0, Vec::new());
    for r in 0..READERS {
        // Every 10th command reads its snapshot only after a pause.
        let pause = (r % 10 == 5).then_some(Duration::from_millis(300));
        let before = writer.acked();
        let out = run(&["db", "scan", st, "-t", "t", "--read-only"], pause);
        let issued = writer.issued();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "scan {r}: {stderr}");
        assert!(
            stderr.contains("is in use by process"),
            "scan {r}: {stderr}"
        );
        rereads += stderr.matches("taking a new snapshot").count();
        retries += stderr.matches("taken at attempt").count();
        let n = prefix_of(&String::from_utf8_lossy(&out.stdout))
            .unwrap_or_else(|e| panic!("scan {r}: not the store at any prefix: {e}"));
        assert!(
            (before..=issued).contains(&n),
            "scan {r}: the store after commit {n}, but {before} were acknowledged before it \
             began and {issued} issued when it ended"
        );
        lsns.push(n);

        let before = writer.acked();
        let out = run(&["db", "check", st, "--read-only", "--json"], pause);
        let issued = writer.issued();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "check {r}: {stderr}");
        rereads += stderr.matches("taking a new snapshot").count();
        retries += stderr.matches("taken at attempt").count();
        let report = json(&out);
        assert_eq!(report["status"], "ok", "check {r}: {report}");
        assert_eq!(report["checked"]["live"], true);
        // One record a commit, from lsn 1: the lsn is the commit's number.
        let lsn = report["checked"]["newest_lsn"].as_u64().unwrap();
        assert!(
            (before..=issued).contains(&lsn),
            "check {r}: lsn {lsn}, but {before} were acknowledged before it began and {issued} \
             issued when it ended"
        );
        let entries = report["checked"]["entries"].as_u64().unwrap();
        assert_eq!(entries, lsn.min(WINDOW), "check {r}: {report}");
    }
    // Backups of the live store: each copy is a prefix too, and checks
    // clean (one reads its snapshot after a pause, and takes it again).
    for (b, pause) in [None, Some(Duration::from_millis(300)), None]
        .into_iter()
        .enumerate()
    {
        let copy = dir.join(format!("copy-{b}"));
        let before = writer.acked();
        let out = run(&["db", "backup", st, "--to", copy.to_str().unwrap()], pause);
        let issued = writer.issued();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "backup {b}: {stderr}");
        rereads += stderr.matches("taking a new snapshot").count();
        let cp = copy.to_str().unwrap();
        let out = run(&["db", "scan", cp, "-t", "t"], None);
        let n = prefix_of(&String::from_utf8_lossy(&out.stdout))
            .unwrap_or_else(|e| panic!("backup {b}: not the store at any prefix: {e}"));
        assert!(
            (before..=issued).contains(&n),
            "backup {b}: commit {n}, not in {before}..={issued}"
        );
        assert_eq!(
            run(&["db", "check", cp], None).status.code(),
            Some(0),
            "backup {b}"
        );
    }
    let busy_to = Instant::now();
    let (quiet_acks, quiet_gap) = writer.acks_between(quiet_from, quiet_to);
    let (busy_acks, busy_gap) = writer.acks_between(quiet_to, busy_to);
    let per_s = |n: usize, from: Instant, to: Instant| n as f64 / (to - from).as_secs_f64();
    eprintln!(
        "writer alone: {:.0} commits/s, longest gap {:?}; beside {} scans and {} checks ({:?}): \
         {:.0} commits/s, longest gap {:?}; snapshots taken again: {retries} at the open, {rereads} \
         after a failed read",
        per_s(quiet_acks, quiet_from, quiet_to),
        quiet_gap,
        READERS,
        READERS,
        busy_to - quiet_to,
        per_s(busy_acks, quiet_to, busy_to),
        busy_gap,
    );
    assert!(
        lsns.windows(2).any(|w| w[0] != w[1]),
        "the readers saw commits go on"
    );
    // The paused commands read pages the writer's checkpoints had reused.
    assert!(
        rereads > 0,
        "no read met a reused page: the test lost its teeth"
    );
    // Readers never make the writer wait: it commits throughout (the gap
    // bound is loose for a shared 2-vCPU machine; the figures above are
    // what it did).
    assert!(
        busy_acks > READERS,
        "the writer all but stopped: {busy_acks} commits"
    );
    assert!(
        busy_gap < Duration::from_secs(1).max(quiet_gap * 10),
        "the writer stalled for {busy_gap:?} beside the readers (alone: {quiet_gap:?})"
    );
    drop(writer);
    std::fs::remove_dir_all(&dir).unwrap();
}
