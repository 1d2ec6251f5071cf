//! A reader never sees a commit before its journal record is durable, on
//! every path a commit is published by: a lone commit (a transaction that
//! read, `Shared::commit`), blind transactions committed in groups
//! (`combine`), a lone large one published as a run (`pending`), and
//! `Eventual` commits (published from the journal's thread) — while the
//! journal's writes are kept in flight (`SimVfs::set_in_flight`, several
//! writes in flight at once) or one of them fails.
//!
//! Reader threads poll the whole time (`begin_read`, then gets, scans
//! and prefixes). Each value names the commit that wrote it (its writer
//! and sequence number). Two checks:
//!
//! - live: a snapshot's LSN is at most the journal's durable LSN read
//!   right after `begin_read` (it only grows);
//! - at the end: every commit a reader saw is in a durable journal record
//!   (read back with `Journal::read_from`), whose LSN is at most the
//!   durable LSN read right after the value was seen. A failed record is
//!   never durable, so nothing it carried may have been seen.
//!
//! Then a power cut and a reopen: every key holds the commit a reader
//! saw there, or a later one of the same writer.
//!
//! No checkpoint runs here: the journal must keep every record to be read
//! back. That a checkpoint covers only durable commits is `store_crash`'s
//! to find.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::record::{self, Op};
use super::tests::builder;
use super::*;
use crate::io::{CrashMode, OpKind, SimVfs, WriteMethod};

/// How a writer thread commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Reads first, so it takes the writer slot and commits alone
    /// (`Shared::commit`).
    Lone,
    /// Blind, two puts: queued and committed in groups with the other
    /// threads' (`Shared::commit_blind`).
    Blind,
    /// Blind, [`LARGE_PUTS`] puts: alone (nobody queued), an `Immediate`
    /// one is published as a run once durable, its committer holding the
    /// writer slot while its record is written; an `Eventual` one is
    /// written while the helper applies it.
    Large,
}

/// Puts of a [`Kind::Large`] commit: past `START_MIN_OPS`.
const LARGE_PUTS: usize = 24;

/// Commits of one writer at most: the journal is never checkpointed
/// here (it must keep every record to be read back), and the fault
/// layer keeps it in memory twice over (its live and durable images).
const MAX_COMMITS: u32 = 5000;

/// Keys each writer has besides its key 0, which every commit puts.
const SMALL_KEYS: usize = 8;

/// Distinct commits a reader sees before a case's injected failure is
/// armed (`Case::fail`).
///
/// Why: with the failure counted from the set-up, the writers of a loaded
/// machine reached it before the readers had run at all (9 commits seen,
/// about one full run in three of the library's tests), and the test's
/// liveness check failed for want of readers, not of a bug.
const ARM_AFTER_SEEN: usize = 50;

/// One test's set-up.
struct Case {
    seed: u64,
    writers: Vec<(Kind, Durability)>,
    /// `SimVfs::set_in_flight`'s probability.
    in_flight: f64,
    writes_in_flight: usize,
    method: Option<WriteMethod>,
    /// The `n`th write or sync after the failure is armed fails with EIO:
    /// armed once a reader has seen [`ARM_AFTER_SEEN`] commits, so that
    /// the readers have run before the failure stops the writers.
    fail: Option<(OpKind, u64)>,
    /// How long the writers commit at most (less if they all stop on an
    /// error or at [`MAX_COMMITS`]).
    run_for: Duration,
    /// Small blind commits may be made directly (`super::direct`); else
    /// they are all queued for the writer slot.
    direct: bool,
}

impl Case {
    fn new(seed: u64, writers: &[(Kind, Durability)]) -> Case {
        Case {
            seed,
            writers: writers.to_vec(),
            in_flight: 1.0,
            writes_in_flight: 4,
            method: None,
            fail: None,
            run_for: Duration::from_millis(1500),
            direct: true,
        }
    }
}

/// A commit: its writer and its sequence number (from 1).
type CommitId = (u8, u32);

fn key(w: u8, i: usize) -> String {
    format!("{w:02}/{i:03}")
}

/// A value of commit `id`: a mark, the writer, the sequence number, then
/// filler.
fn value(id: CommitId, len: usize) -> Vec<u8> {
    let mut v = b"pub".to_vec();
    v.push(id.0);
    v.extend_from_slice(&id.1.to_le_bytes());
    v.resize(len.max(v.len()), b'.');
    v
}

fn commit_of(v: &[u8]) -> Option<CommitId> {
    (v.len() >= 8 && v.starts_with(b"pub")).then(|| {
        let seq = u32::from_le_bytes(v[4..8].try_into().expect("4 bytes"));
        (v[3], seq)
    })
}

/// What one reader saw.
#[derive(Default)]
struct Seen {
    /// Each commit seen: the lowest durable LSN read right after seeing
    /// it, and when it was first seen (ms from the start).
    commits: HashMap<CommitId, (Lsn, u128)>,
    /// The newest commit seen at each key.
    keys: HashMap<String, u32>,
    snapshots: u64,
    /// Gets of a writer's key 0 (which each of its commits puts): the
    /// snapshot's LSN, the writer, the commit seen there (0: none).
    firsts: Vec<(Lsn, u8, u32)>,
}

impl Seen {
    fn saw(&mut self, key: &[u8], v: &[u8], durable: Lsn, at_ms: u128) {
        let id = commit_of(v).expect("a value of this test");
        let e = self.commits.entry(id).or_insert((durable, at_ms));
        e.0 = e.0.min(durable);
        let k = String::from_utf8(key.to_vec()).expect("keys are text");
        let newest = self.keys.entry(k).or_insert(id.1);
        *newest = (*newest).max(id.1);
    }

    fn merge(&mut self, other: Seen) {
        for (id, (d, at)) in other.commits {
            let e = self.commits.entry(id).or_insert((d, at));
            *e = (e.0.min(d), e.1.min(at));
        }
        for (k, s) in other.keys {
            let e = self.keys.entry(k).or_insert(s);
            *e = (*e).max(s);
        }
        self.snapshots += other.snapshots;
        self.firsts.extend(other.firsts);
    }
}

/// What the writers did.
#[derive(Default)]
struct Done {
    /// Commits that returned an error (their records in doubt, or never
    /// submitted).
    failed: Vec<CommitId>,
    /// The newest acknowledged `Immediate` commit at each key.
    acked: HashMap<String, u32>,
}

/// What a run did, for the tests to check that their path was taken.
struct Report {
    stats: Stats,
    /// Runs published (inserted into the memtable since, or not yet).
    runs: u64,
    commits_seen: usize,
    snapshots: u64,
    failed_commits: usize,
    in_flight: u64,
}

struct Harness<'a> {
    db: &'a Database,
    vfs: &'a SimVfs,
    /// The failure to arm once a reader has seen [`ARM_AFTER_SEEN`]
    /// commits, taken by the reader that arms it.
    fail: Mutex<Option<(OpKind, u64)>>,
    start: Instant,
    stop_writers: AtomicBool,
    stop_readers: AtomicBool,
    /// What went wrong, with when (ms from the start).
    violations: Mutex<Vec<String>>,
    writers_running: AtomicU64,
}

impl Harness<'_> {
    fn ms(&self) -> u128 {
        self.start.elapsed().as_millis()
    }

    fn violation(&self, what: String) {
        let mut v = self.violations.lock().unwrap();
        if v.len() < 20 {
            v.push(what);
        }
        self.stop_writers.store(true, Relaxed);
    }
}

/// One commit of writer `w`; an error ends the writer.
fn commit_one(
    db: &Database,
    w: u8,
    seq: u32,
    kind: Kind,
    durability: Durability,
    rng: &mut SmallRng,
) -> Result<Vec<String>> {
    let mut txn = db.begin_write()?;
    txn.set_durability(durability);
    let mut t = txn.open_table("t")?;
    let keys: Vec<String> = match kind {
        Kind::Large => (0..LARGE_PUTS).map(|i| key(w, i)).collect(),
        Kind::Lone | Kind::Blind => {
            vec![key(w, 0), key(w, rng.random_range(1..=SMALL_KEYS))]
        }
    };
    if kind == Kind::Lone {
        t.get(key(w, 0))?;
    }
    let len = rng.random_range(8..200);
    for k in &keys {
        t.insert(k, value((w, seq), len))?;
    }
    txn.commit()?;
    Ok(keys)
}

fn write(s: &Harness<'_>, w: u8, kind: Kind, durability: Durability, seed: u64) -> Done {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut done = Done::default();
    let mut seq = 0;
    while seq < MAX_COMMITS && !s.stop_writers.load(Relaxed) {
        seq += 1;
        match commit_one(s.db, w, seq, kind, durability, &mut rng) {
            Ok(keys) if durability == Durability::Immediate => {
                for k in keys {
                    done.acked.insert(k, seq);
                }
            }
            Ok(_) => {}
            Err(_) => {
                done.failed.push((w, seq));
                break;
            }
        }
    }
    s.writers_running.fetch_sub(1, Relaxed);
    done
}

fn read(s: &Harness<'_>, writers: u8, seed: u64) -> Seen {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut seen = Seen::default();
    let journal = s.db.journal();
    let mut armed = false;
    while !s.stop_readers.load(Relaxed) {
        let r = s.db.begin_read();
        let durable = journal.durable_lsn();
        seen.snapshots += 1;
        if r.lsn() > durable {
            s.violation(format!(
                "after {} ms: a reader's snapshot is at lsn {}, the journal durable to lsn {}",
                s.ms(),
                r.lsn(),
                durable
            ));
        }
        let t = r.open_table("t").expect("made by the set-up");
        let w = rng.random_range(0..writers);
        if !armed && seen.commits.len() >= ARM_AFTER_SEEN {
            armed = true;
            if let Some((kind, n)) = s.fail.lock().unwrap().take() {
                s.vfs.fail_after(kind, n, libc::EIO);
            }
        }
        let mut saw = |k: &[u8], v: &[u8]| seen.saw(k, v, journal.durable_lsn(), s.ms());
        // Mostly gets: a reader that begins often catches a short window.
        match rng.random_range(0..8) {
            0 => {
                for kv in t.iter() {
                    let kv = kv.expect("a scan");
                    saw(kv.0.as_bytes(), kv.1.as_bytes());
                }
            }
            1 => {
                for kv in t.prefix(format!("{w:02}/")) {
                    let kv = kv.expect("a scan");
                    saw(kv.0.as_bytes(), kv.1.as_bytes());
                }
            }
            _ => {
                let i = rng.random_range(0..LARGE_PUTS);
                let k = key(w, i);
                let got = t.get(&k).expect("a get");
                if let Some(v) = &got {
                    saw(k.as_bytes(), v);
                }
                if i == 0 && seen.firsts.len() < MAX_FIRSTS {
                    let seq = got.as_deref().and_then(commit_of).map_or(0, |id| id.1);
                    seen.firsts.push((r.lsn(), w, seq));
                }
            }
        }
    }
    seen
}

/// Every commit in a durable journal record, with its LSN.
fn durable_commits(db: &Database) -> HashMap<CommitId, Lsn> {
    let mut lsns = HashMap::new();
    for rec in db.journal().read_from(1).expect("the journal reads back") {
        let (lsn, payload) = rec.expect("a durable record reads back");
        for op in record::decode(&payload, usize::from(u16::MAX)).expect("a record") {
            if let Op::Put(_, v) = op {
                if let Some(id) = commit_of(v) {
                    lsns.insert(id, lsn);
                }
            }
        }
    }
    lsns
}

/// Run `case`: writers commit and readers poll for `run_for`, then the
/// checks above; returns what happened for the caller's own checks.
fn run(case: Case) -> Report {
    let vfs = SimVfs::new(case.seed);
    let dir = Path::new("/s");
    let journal = JournalOptions {
        segment_size_bytes: 1 << 20,
        writes_in_flight: case.writes_in_flight,
        method: case.method,
        ..JournalOptions::default()
    };
    let options = || builder(&vfs).journal(journal.clone());
    let db = options().create(dir).unwrap();
    let w = db.begin_write().unwrap();
    // A commit of its own, made by "writer" 255.
    w.open_table("t")
        .unwrap()
        .insert("setup", value((u8::MAX, 0), 8))
        .unwrap();
    w.commit().unwrap();
    vfs.set_in_flight(case.in_flight);
    db.shared.faults.no_direct.store(!case.direct, Relaxed);
    let s = Harness {
        db: &db,
        vfs: &vfs,
        fail: Mutex::new(case.fail),
        start: Instant::now(),
        stop_writers: AtomicBool::new(false),
        stop_readers: AtomicBool::new(false),
        violations: Mutex::new(Vec::new()),
        writers_running: AtomicU64::new(case.writers.len() as u64),
    };
    let n = case.writers.len() as u8;
    let (done, seen) = std::thread::scope(|scope| {
        let s = &s;
        let writers: Vec<_> = case
            .writers
            .iter()
            .enumerate()
            .map(|(i, &(kind, d))| {
                let seed = case.seed * 100 + i as u64;
                scope.spawn(move || write(s, i as u8, kind, d, seed))
            })
            .collect();
        let readers: Vec<_> = (0..2u64)
            .map(|i| scope.spawn(move || read(s, n, case.seed * 100 + 50 + i)))
            .collect();
        while s.start.elapsed() < case.run_for
            && s.writers_running.load(Relaxed) > 0
            && !s.stop_writers.load(Relaxed)
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        s.stop_writers.store(true, Relaxed);
        let done: Vec<Done> = writers.into_iter().map(|h| h.join().unwrap()).collect();
        // `Eventual` commits still in flight, or a failed write's record:
        // readers go on looking while they become durable (or not).
        std::thread::sleep(Duration::from_millis(100));
        s.stop_readers.store(true, Relaxed);
        let mut seen = Seen::default();
        for h in readers {
            seen.merge(h.join().unwrap());
        }
        (done, seen)
    });
    let mut violations = s.violations.into_inner().unwrap();
    let failed: Vec<CommitId> = done.iter().flat_map(|d| d.failed.clone()).collect();
    let durable = durable_commits(&db);
    // A snapshot holds every commit at or below its LSN: a writer's
    // commits get increasing LSNs, so the one seen at its key 0 is its
    // last at or below the snapshot's LSN.
    for &(at, w, seq) in &seen.firsts {
        if let Some(&next) = durable.get(&(w, seq + 1)) {
            if next <= at {
                violations.push(format!(
                    "a snapshot at lsn {at} saw writer {w}'s commit {seq}, not its commit {} (lsn {next})",
                    seq + 1
                ));
            }
        }
    }
    let mut late: Vec<_> = seen.commits.iter().collect();
    late.sort_by_key(|e| e.1 .1);
    for (id, &(durable_after, at)) in late {
        match durable.get(id) {
            None => violations.push(format!(
                "after {at} ms: commit {id:?} was seen, and its record is not durable{}",
                if failed.contains(id) {
                    " (its commit failed)"
                } else {
                    ""
                }
            )),
            Some(&lsn) if lsn > durable_after => violations.push(format!(
                "after {at} ms: commit {id:?} (lsn {lsn}) was seen with the journal durable to lsn {durable_after}"
            )),
            Some(_) => {}
        }
    }
    assert!(
        violations.is_empty(),
        "{} violations (at most 20 live ones kept), the first: {:#?}",
        violations.len(),
        &violations[..violations.len().min(3)]
    );
    let report = Report {
        stats: db.stats(),
        runs: db.shared.unapplied.applied.load(Relaxed) + db.shared.unapplied.len() as u64,
        commits_seen: seen.commits.len(),
        snapshots: seen.snapshots,
        failed_commits: failed.len(),
        in_flight: vfs.stats().in_flight,
    };
    // Whatever a reader saw (and every acknowledged `Immediate` commit)
    // survives a power cut.
    drop(db);
    vfs.crash(CrashMode::PowerLoss);
    let db = options().open(dir).unwrap();
    let r = db.begin_read();
    let t = r.open_table("t").unwrap();
    let mut must: HashMap<String, u32> = seen.keys;
    for d in &done {
        for (k, &s) in &d.acked {
            let e = must.entry(k.clone()).or_insert(s);
            *e = (*e).max(s);
        }
    }
    for (k, s) in must {
        let v = t.get(&k).unwrap();
        let now = v.as_deref().and_then(commit_of).map(|id| id.1);
        assert!(
            now.is_some_and(|n| n >= s),
            "key {k}: commit {s} was seen or acknowledged, the reopened store holds {now:?}"
        );
    }
    report
}

/// Gets of a writer's key 0 a reader keeps for the final check.
const MAX_FIRSTS: usize = 200_000;

/// Enough was seen for the checks to mean something.
fn assert_busy(r: &Report) {
    assert!(r.snapshots > 1000, "{} snapshots", r.snapshots);
    assert!(r.commits_seen > 50, "{} commits seen", r.commits_seen);
}

/// Transactions that read commit alone, two threads at once (one
/// commits while the other's record is in flight).
#[test]
fn a_lone_commit_is_not_visible_before_it_is_durable() {
    let imm = Durability::Immediate;
    let r = run(Case::new(1, &[(Kind::Lone, imm), (Kind::Lone, imm)]));
    assert_busy(&r);
    assert!(r.in_flight > 0);
    assert_eq!(r.stats.grouped_commits, 1, "only the set-up was blind");
}

/// Blind transactions from six threads, committed in groups, beside two
/// threads of lone large ones. A run's committer holds the writer slot
/// while its record is written and the others queue meanwhile; a leader
/// that finds a queue after its group goes on with it, and its finished
/// group is published and told from the journal's thread (`settle`
/// without waiting). With one thread of large ones, a leader went on so
/// 2,300 to 4,600 times in a run, 360 to 1,800 of them before the
/// finished group's record was durable; without it, 0 to 90 times.
#[test]
fn grouped_blind_commits_are_not_visible_before_they_are_durable() {
    let imm = Durability::Immediate;
    let mut writers = vec![(Kind::Blind, imm); 6];
    writers.extend([(Kind::Large, imm); 2]);
    let mut case = Case::new(2, &writers);
    case.direct = false;
    let r = run(case);
    assert_busy(&r);
    assert!(r.in_flight > 0);
    assert!(
        r.stats.grouped_commits > r.stats.commit_groups + 1000,
        "groups of several: {} commits in {} groups",
        r.stats.grouped_commits,
        r.stats.commit_groups
    );
}

/// Small blind transactions from six threads, each committed by its own
/// thread without the writer slot, inserted at once and published in LSN
/// order (`super::direct`, `super::order`); two of them `Eventual`.
#[test]
fn direct_commits_are_not_visible_before_they_are_durable() {
    let imm = Durability::Immediate;
    let mut writers = vec![(Kind::Blind, imm); 4];
    writers.extend([(Kind::Blind, Durability::Eventual); 2]);
    let r = run(Case::new(9, &writers));
    assert_busy(&r);
    assert!(r.in_flight > 0);
    assert!(
        r.stats.direct_commits > 1000,
        "{} direct commits",
        r.stats.direct_commits
    );
}

/// Lone large blind transactions, published as runs before their insert.
#[test]
fn a_run_is_not_visible_before_it_is_durable() {
    let r = run(Case::new(3, &[(Kind::Large, Durability::Immediate)]));
    assert_busy(&r);
    assert!(r.in_flight > 0);
    assert!(r.runs > 100, "{} runs published", r.runs);
}

/// `Eventual` commits: lone ones (published from the journal's thread),
/// blind ones from two threads in groups, large ones (written while the
/// helper applies them).
#[test]
fn an_eventual_commit_is_not_visible_before_it_is_durable() {
    let ev = Durability::Eventual;
    let r = run(Case::new(
        4,
        &[
            (Kind::Lone, ev),
            (Kind::Blind, ev),
            (Kind::Blind, ev),
            (Kind::Large, ev),
        ],
    ));
    assert_busy(&r);
    assert!(r.in_flight > 0);
}

/// The writers of a failure test go on until the failure stops them
/// (0.2 to 0.6 s here), or this long on a machine slowed down.
const UNTIL_THE_FAILURE: Duration = Duration::from_secs(10);

/// Every kind of commit at once; one of the journal's writes fails with
/// EIO: nothing its record (or a later one) carried is ever seen.
#[test]
fn nothing_of_a_failed_journal_write_is_ever_visible() {
    let imm = Durability::Immediate;
    let ev = Durability::Eventual;
    for (seed, nth) in [(5, 300), (6, 900)] {
        let mut case = Case::new(
            seed,
            &[
                (Kind::Lone, imm),
                (Kind::Blind, imm),
                (Kind::Blind, ev),
                (Kind::Large, imm),
                (Kind::Lone, ev),
            ],
        );
        case.fail = Some((OpKind::Write, nth));
        case.run_for = UNTIL_THE_FAILURE;
        let r = run(case);
        assert!(r.failed_commits > 0, "seed {seed}: no commit failed");
        assert!(r.commits_seen > 20, "{} commits seen", r.commits_seen);
    }
}

/// As above with the journal's `fdatasync` method: a batch's sync fails.
#[test]
fn nothing_of_a_failed_journal_sync_is_ever_visible() {
    let imm = Durability::Immediate;
    let ev = Durability::Eventual;
    for (seed, nth) in [(7, 1000), (8, 3000)] {
        let mut case = Case::new(
            seed,
            &[
                (Kind::Lone, imm),
                (Kind::Blind, imm),
                (Kind::Blind, ev),
                (Kind::Large, imm),
                (Kind::Lone, ev),
            ],
        );
        case.method = Some(WriteMethod::Fdatasync);
        case.fail = Some((OpKind::Sync, nth));
        case.run_for = UNTIL_THE_FAILURE;
        let r = run(case);
        assert!(r.failed_commits > 0, "seed {seed}: no commit failed");
        assert!(r.commits_seen > 20, "{} commits seen", r.commits_seen);
    }
}

/// Two direct commits, the first (lower LSN) held between getting its
/// LSN and inserting its puts: the second's record is durable first, and
/// still no reader sees it before the first (publication in LSN order),
/// it returns only once both are visible, and a write transaction that
/// reads meanwhile sees the first.
#[test]
fn a_direct_commit_is_not_visible_before_a_lower_one_is_inserted() {
    let vfs = SimVfs::new(31);
    let db = super::tests::builder(&vfs).create(Path::new("/s")).unwrap();
    let put = |k: &str| {
        let w = db.begin_write().unwrap();
        w.open_table("t").unwrap().insert(k, b"v").unwrap();
        w.commit().unwrap();
    };
    // Through the writer slot (the table is new), then again (the table
    // unknown to the gate, which the slot's holder then opens knowing
    // it).
    put("setup");
    put("setup2");
    let direct = db.stats().direct_commits;
    db.shared.faults.direct_apply_delay_ms.store(300, Relaxed);
    let b_returned = AtomicBool::new(false);
    std::thread::scope(|s| {
        let a = s.spawn(|| put("a"));
        // `a` has its LSN and sleeps before inserting.
        std::thread::sleep(Duration::from_millis(100));
        let b = s.spawn(|| {
            put("b");
            b_returned.store(true, Relaxed);
        });
        let start = Instant::now();
        let mut reads = 0;
        while start.elapsed() < Duration::from_millis(150) {
            let r = db.begin_read();
            let t = r.open_table("t").unwrap();
            let (sa, sb) = (t.get("a").unwrap(), t.get("b").unwrap());
            assert!(sa.is_some() || sb.is_none(), "b is visible before a");
            assert!(
                !b_returned.load(Relaxed),
                "b returned before a was inserted"
            );
            reads += 1;
        }
        assert!(reads > 10);
        // A transaction that reads takes the writer slot, which waits for
        // the direct commits given an LSN to be inserted: it sees `a`.
        let w = db.begin_write().unwrap();
        assert!(
            w.open_table("t").unwrap().get("a").unwrap().is_some(),
            "a write transaction misses a commit given an LSN before it read"
        );
        drop(w);
        a.join().unwrap();
        b.join().unwrap();
    });
    assert_eq!(db.stats().direct_commits, direct + 2, "both were direct");
    let r = db.begin_read();
    let t = r.open_table("t").unwrap();
    assert!(t.get("a").unwrap().is_some() && t.get("b").unwrap().is_some());
}
