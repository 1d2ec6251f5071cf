//! The damage matrix: what is damaged (a row) × where (a column), each cell
//! with the outcome `docs/testing-store.md` ("The damage matrix") promises. This
//! module builds the stores and damages them; `damage_matrix.rs` checks
//! each cell through the library, and `crates/keel-cli/tests/
//! db_damage_matrix.rs` (which includes this file by path, so the two run
//! the same table) through the `keel` binary.
//!
//! A store is built once per way of committing ([`Mode`]) and copied for
//! each cell. Its history, in journal segments of 64 KiB all made ahead
//! (`Journal::preallocate`, so that no released segment is recycled):
//! commits, checkpoint *C0*, commits, checkpoint *C1* (which releases
//! every segment below the one holding *C1*), then commits only in the
//! journal over at least two more segments. The last write is the last
//! batch of those commits; nothing is written after it.

#![allow(dead_code, reason = "each test binary uses a different part")]

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use keel::btree::{decode_node, Body, Location, PageSize};
use keel::db::meta::Meta;
use keel::db::{Database, DATA_FILE, JOURNAL_DIR};
use keel::io::RealVfs;
use keel::journal::fuzzing::RecordHeader;
use keel::journal::{self, BatchStart, JournalOptions, JournalStats, Lsn, RECORD_HEADER_BYTES};

pub const SEGMENT_BYTES: u64 = 64 << 10;
pub const BLOCK_BYTES: u64 = 4096;
pub const PAGE_BYTES: usize = 4096;
/// Every segment the history needs, made before the first commit: the
/// journal then never recycles, and released segments stay as they were.
const PREALLOCATE_BYTES: u64 = 24 * SEGMENT_BYTES;
pub const TABLE: &str = "t";
/// Committer threads in [`Mode::Threads`].
const THREADS: usize = 8;
/// Commits per committer in one burst.
const PER_THREAD: usize = 6;
/// Commits of the single writer in one burst.
const ONE_WRITER_BURST: usize = 40;

/// How the store's commits were made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One thread commits one transaction after another: one write in
    /// flight, and each record is made after the one before it is
    /// durable.
    OneWriter,
    /// Eight threads commit at once, with `writes_in_flight` 4 (batches
    /// start on a fresh block): writes overlap.
    Threads,
}

impl Mode {
    pub const ALL: [Mode; 2] = [Mode::OneWriter, Mode::Threads];

    fn journal(self) -> JournalOptions {
        let (writes_in_flight, batch_start) = match self {
            Mode::OneWriter => (1, BatchStart::Auto),
            Mode::Threads => (4, BatchStart::FreshBlock),
        };
        JournalOptions {
            segment_size_bytes: SEGMENT_BYTES,
            writes_in_flight,
            batch_start,
            ..JournalOptions::default()
        }
    }
}

/// What is damaged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Row {
    /// One byte of a journal record's payload flipped.
    Flip,
    /// A whole journal record (header and payload) zeroed.
    Zero,
    /// A segment file shortened, in the middle of a record.
    Cut,
    /// A byte of a segment header flipped.
    Header,
    /// A byte of a data-file leaf page flipped.
    Leaf,
    /// A byte of the newest meta page flipped.
    Meta,
}

/// Where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Col {
    /// Inside the last write: the journal's very last batch, nothing
    /// written after it.
    LastWrite,
    /// Before it: a durable record that the checkpoint does not cover,
    /// with records after it.
    Before,
    /// In a record the last checkpoint covers, in the segment that holds
    /// the checkpoint's LSN (and needed records after it).
    Covered,
    /// In a segment the journal released at the last checkpoint and has
    /// not recycled.
    Released,
}

/// What opening the damaged store does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Open {
    /// A torn tail: opens with every commit before the damaged record; the
    /// commits from it on are lost although they were acknowledged (the
    /// residual: nothing written after them vouches for them).
    TornTail,
    /// Opens with every commit, the damaged records the checkpoint covers
    /// skipped and listed in `recovery_report().skipped`.
    Skipped,
    /// Opens with every commit; nothing the store needs is damaged.
    Whole,
    /// Refused: `DbError::Journal(JournalError::Corrupt)`, naming the
    /// segment and byte.
    Corrupt,
    /// Opens (tree pages are read when needed), but every read through the
    /// damaged page fails with `DbError::Tree` naming it, and so does
    /// `check`.
    BadPage,
}

/// What `Database::salvage` reports lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// Nothing: the new store holds every commit.
    Nothing,
    /// The journal records from the first damaged needed record to the
    /// last (`lost_lsns`); every commit before it is in the new store.
    FromDamaged,
    /// Inside the last write: every commit before the damaged record is in
    /// the new store; the records from it on are reported lost when one
    /// after it was found intact (the last write held several). When the
    /// damaged record was the last, nothing proves a commit was there:
    /// nothing is reported lost, and only a damaged (not zeroed) record
    /// leaves a note, where recovery's chain stops.
    Residual,
    /// The same, and a note that the file was cut short (what followed
    /// the cut is gone unseen).
    CutFromDamaged,
    /// The damaged leaf's key range (`unreachable`); every other commit
    /// is in the new store.
    LeafRange,
}

/// One cell of the matrix.
#[derive(Debug, Clone, Copy)]
pub struct Cell {
    pub row: Row,
    pub col: Col,
    /// `None`: the row does not apply to the column (`why` says why).
    pub open: Option<Open>,
    pub loss: Loss,
    pub why: &'static str,
}

const fn cell(row: Row, col: Col, open: Open, loss: Loss, why: &'static str) -> Cell {
    Cell {
        row,
        col,
        open: Some(open),
        loss,
        why,
    }
}

const fn none(row: Row, col: Col, why: &'static str) -> Cell {
    Cell {
        row,
        col,
        open: None,
        loss: Loss::Nothing,
        why,
    }
}

use Col::*;
use Loss::*;
use Open::*;
use Row::*;

/// The matrix, as `docs/testing-store.md` ("The damage matrix") states it, with
/// why each cell is what it is.
#[rustfmt::skip]
pub const MATRIX: [Cell; 24] = [
    cell(Flip, LastWrite, TornTail, Residual, "nothing later vouches for it"),
    cell(Flip, Before, Corrupt, FromDamaged, "a later record claims it durable"),
    cell(Flip, Covered, Skipped, Nothing, "the checkpoint holds it"),
    cell(Flip, Released, Skipped, Nothing, "the checkpoint holds it"),
    cell(Zero, LastWrite, TornTail, Residual, "nothing later vouches for it"),
    cell(Zero, Before, Corrupt, FromDamaged, "a later record claims it durable"),
    cell(Zero, Covered, Skipped, Nothing, "the checkpoint holds it"),
    cell(Zero, Released, Skipped, Nothing, "the checkpoint holds it"),
    cell(Cut, LastWrite, Corrupt, CutFromDamaged, "no crash changes a file's length"),
    cell(Cut, Before, Corrupt, CutFromDamaged, "no crash changes a file's length"),
    cell(Cut, Covered, Corrupt, CutFromDamaged, "the needed records after it go too"),
    cell(Cut, Released, Skipped, Nothing, "the segment holds only covered records"),
    none(Header, LastWrite, "commits do not write segment headers"),
    cell(Header, Before, Corrupt, Nothing, "later records claim its records durable"),
    cell(Header, Covered, Corrupt, Nothing, "its needed records cannot be chained"),
    cell(Header, Released, Skipped, Nothing, "the segment holds only covered records"),
    none(Leaf, LastWrite, "commits do not write the data file"),
    none(Leaf, Before, "commits do not write the data file"),
    cell(Leaf, Covered, BadPage, LeafRange, "a leaf both trees hold"),
    cell(Leaf, Released, Whole, Nothing, "a leaf only the older tree holds"),
    none(Meta, LastWrite, "commits do not write meta pages"),
    none(Meta, Before, "commits do not write meta pages"),
    cell(Meta, Covered, Whole, Nothing, "the older meta and the journal hold all"),
    none(Meta, Released, "a meta page is in no segment"),
];

/// A commit: its key and value (one put into [`TABLE`]).
pub type Commit = (Vec<u8>, Vec<u8>);

/// One segment of the built store's journal.
#[derive(Debug, Clone)]
pub struct Segment {
    pub seq: u64,
    pub path: PathBuf,
    /// Its records, in the chain's order.
    pub records: Vec<Rec>,
}

/// A record of recovery's chain.
#[derive(Debug, Clone, Copy)]
pub struct Rec {
    pub lsn: Lsn,
    pub pos: u64,
    pub len: u32,
    /// The journal's contiguous durable LSN when the record was made.
    pub claim: Lsn,
}

impl Rec {
    pub fn end(&self) -> u64 {
        self.pos + (RECORD_HEADER_BYTES as u64) + u64::from(self.len)
    }
}

/// A built store, undamaged.
#[derive(Debug)]
pub struct Built {
    pub mode: Mode,
    pub dir: PathBuf,
    /// Every acknowledged commit, by the LSN of its record.
    pub commits: BTreeMap<Lsn, Commit>,
    /// The two checkpoints' LSNs.
    pub c0: Lsn,
    pub c1: Lsn,
    pub last: Lsn,
    /// The journal's counters when the store was dropped.
    pub stats: JournalStats,
    /// Records made while the record before them was not yet durable
    /// (their `durable_lsn` below their LSN − 1).
    pub early_records: u64,
    /// Every segment, in order (all of them in recovery's chain).
    pub segments: Vec<Segment>,
    /// Indexes into `segments`: the one holding `c1` (S), the one after it
    /// (M), the last (L), and the released one just below S.
    pub s: usize,
    pub m: usize,
    pub l: usize,
    pub released: usize,
    /// The first record of the last write (a record at a block boundary
    /// in the last segment, after which nothing but that write's records
    /// lie).
    pub last_write: Lsn,
}

impl Built {
    /// The record with `lsn`, and its segment's index.
    pub fn rec(&self, lsn: Lsn) -> (usize, Rec) {
        self.segments
            .iter()
            .enumerate()
            .find_map(|(i, s)| s.records.iter().find(|r| r.lsn == lsn).map(|r| (i, *r)))
            .unwrap_or_else(|| panic!("no record {lsn}"))
    }

    /// The commits up to and including `lsn`, as the table's contents.
    pub fn model_upto(&self, lsn: Lsn) -> BTreeMap<Vec<u8>, Vec<u8>> {
        self.commits.range(..=lsn).map(|(_, c)| c.clone()).collect()
    }

    /// The most any record after `lsn` claims durable.
    pub fn claim_after(&self, lsn: Lsn) -> Lsn {
        self.segments
            .iter()
            .flat_map(|s| &s.records)
            .filter(|r| r.lsn > lsn)
            .map(|r| r.claim)
            .max()
            .unwrap_or(0)
    }
}

pub fn builder(mode: Mode) -> keel::db::Builder {
    Database::builder()
        .page_size(PAGE_BYTES)
        .journal(mode.journal())
        .background_checkpoints(false)
        .checkpoint_journal_bytes(1 << 30)
        .backpressure_journal_bytes(1 << 30)
}

fn key(phase: u32, thread: usize, i: usize) -> Vec<u8> {
    format!("k{phase}-{thread:02}-{i:04}").into_bytes()
}

/// Keys are this long, and values hold no `k`: the key of a record is
/// found in its payload by looking for it.
const KEY_BYTES: usize = 10;

fn value(key: &[u8]) -> Vec<u8> {
    let h = key.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let len = 200 + (h % 400) as usize;
    (0..len)
        .map(|i| b'A' + ((h as usize + i * 7) % 26) as u8)
        .collect()
}

fn commit(db: &Database, key: &[u8]) -> Commit {
    let v = value(key);
    let w = db.begin_write().unwrap();
    w.open_table(TABLE).unwrap().insert(key, &v).unwrap();
    w.commit().unwrap();
    (key.to_vec(), v)
}

/// One burst of commits: the single writer's, or every thread's at once.
/// `round` keeps keys of later bursts of a phase apart.
fn burst(db: &Database, mode: Mode, phase: u32, round: usize, acked: &mut Vec<Commit>) {
    match mode {
        Mode::OneWriter => {
            for i in 0..ONE_WRITER_BURST {
                acked.push(commit(db, &key(phase, 0, round * 100 + i)));
            }
        }
        Mode::Threads => std::thread::scope(|s| {
            let threads: Vec<_> = (0..THREADS)
                .map(|t| {
                    s.spawn(move || {
                        (0..PER_THREAD)
                            .map(|i| commit(db, &key(phase, t, round * 100 + i)))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            for t in threads {
                acked.extend(t.join().unwrap());
            }
        }),
    }
}

/// The journal's segments as recovery's chain has them, each record with
/// its claim.
fn segments(store: &Path) -> Vec<Segment> {
    let scan = journal::inspect(&RealVfs, &store.join(JOURNAL_DIR)).unwrap();
    scan.segments
        .iter()
        .filter(|s| s.in_chain)
        .map(|s| {
            let bytes = std::fs::read(&s.path).unwrap();
            let records = s
                .records
                .iter()
                .map(|r| {
                    let (h, _) = RecordHeader::decode(&bytes[r.pos as usize..]).unwrap();
                    Rec {
                        lsn: r.lsn,
                        pos: r.pos,
                        len: r.len,
                        claim: h.durable_lsn,
                    }
                })
                .collect();
            Segment {
                seq: s.seq,
                path: s.path.clone(),
                records,
            }
        })
        .collect()
}

/// Whether the active segment has room for one more small record after
/// its last (a block: the next batch may start on a fresh one).
fn room_for_one_more(store: &Path) -> bool {
    let segs = segments(store);
    let last = segs.iter().rev().find_map(|s| s.records.last()).unwrap();
    last.end().next_multiple_of(BLOCK_BYTES) + BLOCK_BYTES <= SEGMENT_BYTES
}

fn last_seq(store: &Path) -> u64 {
    segments(store)
        .iter()
        .rev()
        .find(|s| !s.records.is_empty())
        .unwrap()
        .seq
}

/// Build the store of `mode` in `root` (see the module's comment).
pub fn build(root: &Path, mode: Mode) -> Built {
    let dir = root.join(format!("{mode:?}"));
    let _ = std::fs::remove_dir_all(&dir);
    let db = builder(mode).create(&dir).unwrap();
    db.journal().preallocate(PREALLOCATE_BYTES).unwrap();
    let mut acked = Vec::new();
    burst(&db, mode, 0, 0, &mut acked);
    let c0 = db.checkpoint().unwrap().expect("a checkpoint");
    burst(&db, mode, 1, 0, &mut acked);
    // The record after the checkpoint must land in the checkpoint's
    // segment: then that segment holds covered and needed records.
    let mut i = 0;
    while !room_for_one_more(&dir) {
        acked.push(commit(&db, &key(1, 99, i)));
        i += 1;
    }
    let c1 = db.checkpoint().unwrap().expect("a checkpoint");
    let s_seq = last_seq(&dir);
    acked.push(commit(&db, &key(2, 99, 0)));
    assert_eq!(
        last_seq(&dir),
        s_seq,
        "lsn {} left the checkpoint's segment",
        c1 + 1
    );
    let mut round = 0;
    while round < 2 || last_seq(&dir) < s_seq + 2 {
        burst(&db, mode, 2, round, &mut acked);
        round += 1;
    }
    if mode == Mode::Threads {
        // The last write: every thread commits at once, so that it likely
        // holds several records.
        let barrier = std::sync::Barrier::new(THREADS);
        std::thread::scope(|s| {
            let threads: Vec<_> = (0..THREADS)
                .map(|t| {
                    let barrier = &barrier;
                    let db = &db;
                    s.spawn(move || {
                        barrier.wait();
                        commit(db, &key(3, t, 0))
                    })
                })
                .collect();
            acked.extend(threads.into_iter().map(|t| t.join().unwrap()));
        });
    }
    let stats = db.journal().stats();
    drop(db);
    finish(dir, mode, acked, (c0, c1), stats)
}

/// The built store's layout, every commit matched to its record.
fn finish(
    dir: PathBuf,
    mode: Mode,
    acked: Vec<Commit>,
    (c0, c1): (Lsn, Lsn),
    stats: JournalStats,
) -> Built {
    let segments = segments(&dir);
    let by_key: BTreeMap<Vec<u8>, Vec<u8>> = acked.iter().cloned().collect();
    assert_eq!(by_key.len(), acked.len(), "keys are unique");
    let keys: HashSet<&[u8]> = by_key.keys().map(|k| k.as_slice()).collect();
    let mut commits = BTreeMap::new();
    let mut lsn = 0;
    for seg in &segments {
        let bytes = std::fs::read(&seg.path).unwrap();
        for r in &seg.records {
            assert_eq!(r.lsn, lsn + 1, "the chain holds every record from lsn 1");
            lsn = r.lsn;
            let payload = &bytes[(r.pos as usize + RECORD_HEADER_BYTES)..r.end() as usize];
            let found: BTreeSet<&[u8]> = payload
                .windows(KEY_BYTES)
                .filter(|w| keys.contains(w))
                .collect();
            assert_eq!(found.len(), 1, "record {} holds one commit", r.lsn);
            let k = found.into_iter().next().unwrap().to_vec();
            let v = by_key[&k].clone();
            commits.insert(r.lsn, (k, v));
        }
    }
    assert_eq!(
        commits.len(),
        acked.len(),
        "every acknowledged commit is a record"
    );
    let last = lsn;
    let early_records = segments
        .iter()
        .flat_map(|s| &s.records)
        .filter(|r| r.claim + 1 < r.lsn)
        .count() as u64;
    let seg_of = |lsn: Lsn| {
        segments
            .iter()
            .position(|s| s.records.iter().any(|r| r.lsn == lsn))
            .unwrap()
    };
    let s = seg_of(c1);
    let l = segments.len() - 1;
    assert!(
        l >= s + 2,
        "the journal goes on two segments past the checkpoint's"
    );
    assert!(s >= 1, "a released segment below the checkpoint's");
    let released = s - 1;
    assert!(segments[released].records.iter().all(|r| r.lsn <= c1));
    assert_eq!(
        stats.segments_recycled, 0,
        "no released segment was recycled"
    );
    let last_write = last_batch(&segments[l]);
    Built {
        mode,
        dir,
        commits,
        c0,
        c1,
        last,
        stats,
        early_records,
        segments,
        s,
        m: s + 1,
        l,
        released,
        last_write,
    }
}

/// The first record of the last batch written into `seg`: records of one
/// batch lie back to back, and every batch starts on a fresh block (the
/// single writer's batches are one block each). A record that starts a
/// block right where the one before it ends may start a batch or not:
/// taken as a start, which keeps the record inside the last write.
fn last_batch(seg: &Segment) -> Lsn {
    let r = &seg.records;
    let mut i = r.len() - 1;
    while i > 0 && r[i - 1].end() == r[i].pos && r[i].pos % BLOCK_BYTES != 0 {
        i -= 1;
    }
    assert_eq!(r[i].pos % BLOCK_BYTES, 0, "a batch starts on a block");
    r[i].lsn
}

/// What a cell damaged.
#[derive(Debug, Clone)]
pub struct Target {
    /// In words, for the test's output.
    pub what: String,
    /// The journal record damaged, if one was.
    pub lsn: Option<Lsn>,
    /// The first record the store needs (not covered) that the damage
    /// destroys: where salvage's lost range starts.
    pub first_lost: Option<Lsn>,
    /// The damaged segment (its `seq`).
    pub seq: Option<u64>,
    /// The segment and byte a refusal, or the report of what recovery
    /// skipped, names: where recovery's chain stops (the end of the last
    /// good record before the damage), a damaged header below the chain,
    /// or, for a file cut short, where it ends now.
    pub named: Option<(u64, u64)>,
    /// The damaged data-file page, and the keys (of [`TABLE`]) its leaf
    /// held.
    pub page: Option<u64>,
    pub leaf_keys: BTreeSet<Vec<u8>>,
}

impl Target {
    fn journal(what: String, seq: u64, named: (u64, u64)) -> Target {
        Target {
            what,
            lsn: None,
            first_lost: None,
            seq: Some(seq),
            named: Some(named),
            page: None,
            leaf_keys: BTreeSet::new(),
        }
    }
}

/// The path of `seg` inside the copy at `store`.
fn in_copy(store: &Path, seg: &Segment) -> PathBuf {
    store.join(JOURNAL_DIR).join(seg.path.file_name().unwrap())
}

/// The record a journal row damages in column `col`: its segment's index,
/// the record, and the first needed record lost with it.
fn record_for(b: &Built, row: Row, col: Col) -> (usize, Rec, Option<Lsn>) {
    let middle = |i: usize| b.segments[i].records[b.segments[i].records.len() / 2];
    match col {
        LastWrite => {
            let (i, r) = b.rec(b.last_write);
            let claim = b.claim_after(r.lsn);
            assert!(
                claim < r.lsn,
                "record {} claims lsn {} durable",
                r.lsn,
                claim
            );
            (i, r, Some(r.lsn))
        }
        Before => {
            let r = middle(b.m);
            let claim = b.claim_after(r.lsn);
            assert!(
                claim >= r.lsn,
                "no record after lsn {} claims it durable",
                r.lsn
            );
            (b.m, r, Some(r.lsn))
        }
        Covered => {
            let r = b.segments[b.s].records[0];
            assert!(r.lsn <= b.c1);
            // A cut there takes every later record of the file with it.
            let lost = (row == Cut).then_some(b.c1 + 1);
            (b.s, r, lost)
        }
        Released => (b.released, middle(b.released), None),
    }
}

/// Damage the copy at `store` as cell (`row`, `col`) says.
pub fn damage(store: &Path, b: &Built, row: Row, col: Col) -> Target {
    match row {
        Flip | Zero | Cut => {
            let (i, r, first_lost) = record_for(b, row, col);
            let seg = &b.segments[i];
            let path = in_copy(store, seg);
            let middle = r.pos + RECORD_HEADER_BYTES as u64 + u64::from(r.len) / 2;
            match row {
                Flip => flip(&path, middle),
                Zero => write_at(&path, r.pos, &vec![0; (r.end() - r.pos) as usize]),
                _ => cut(&path, middle),
            }
            let what = match row {
                Flip => "flipped a byte of record",
                Zero => "zeroed record",
                _ => "cut its segment short in record",
            };
            // Recovery's chain stops at the end of the record before the
            // damaged one; before a segment's first record, zeroed, it
            // stops at the end of the segment before (zeros there are a
            // clean end); and a cut no later record contradicts is
            // refused for the file's length alone.
            let before = seg.records.iter().take_while(|x| x.lsn < r.lsn).last();
            let named = match (row, col, before) {
                (Cut, LastWrite, _) => (seg.seq, middle),
                (_, _, Some(p)) => (seg.seq, p.end()),
                (Zero, _, None) => {
                    let prev = &b.segments[i - 1];
                    (prev.seq, prev.records.last().unwrap().end())
                }
                (_, _, None) => (seg.seq, BLOCK_BYTES),
            };
            let what = format!("{what} lsn {} (segment {}, byte {})", r.lsn, seg.seq, r.pos);
            Target {
                lsn: Some(r.lsn),
                first_lost,
                ..Target::journal(what, seg.seq, named)
            }
        }
        Header => {
            let i = match col {
                Before => b.m,
                Covered => b.s,
                Released => b.released,
                LastWrite => unreachable!("not applicable"),
            };
            let seg = &b.segments[i];
            // A byte inside the store id.
            flip(&in_copy(store, seg), 20);
            // A damaged header ends the chain before the segment, and the
            // refusal names the header itself (byte 0 of its segment), as
            // it does below where the chain starts again.
            let named = (seg.seq, 0);
            let what = format!("flipped a byte of segment {}'s header", seg.seq);
            Target::journal(what, seg.seq, named)
        }
        Leaf | Meta => damage_data(store, row, col),
    }
}

fn damage_data(store: &Path, row: Row, col: Col) -> Target {
    let data = store.join(DATA_FILE);
    let bytes = std::fs::read(&data).unwrap();
    let metas = [0, PAGE_BYTES].map(|at| Meta::decode(&bytes[at..]).unwrap());
    let newest = if metas[0].generation > metas[1].generation {
        0
    } else {
        1
    };
    let (page, leaf_keys, what) = match (row, col) {
        (Meta, Covered) => {
            let what = format!("flipped a byte of the newest meta page (slot {newest})");
            (newest as u64, BTreeSet::new(), what)
        }
        (Leaf, Covered) => {
            // A leaf both trees hold (the older checkpoint wrote it; the
            // newer did not change it), of the table: its commits are in
            // no tree and, checkpointed twice, in no needed record.
            let older: BTreeSet<u64> = leaves(&bytes, &metas[1 - newest])
                .into_iter()
                .map(|(p, _)| p)
                .collect();
            let (page, keys) = leaves(&bytes, &metas[newest])
                .into_iter()
                .find(|(p, keys)| older.contains(p) && keys.iter().all(|k| k[..4] != [0; 4]))
                .expect("a leaf of the table both trees hold");
            let what = format!("flipped a byte of page {page}, a leaf both trees hold");
            (page, keys, what)
        }
        (Leaf, Released) => {
            let newer: BTreeSet<u64> = leaves(&bytes, &metas[newest])
                .into_iter()
                .map(|(p, _)| p)
                .collect();
            let (page, keys) = leaves(&bytes, &metas[1 - newest])
                .into_iter()
                .rev()
                .find(|(p, _)| !newer.contains(p))
                .expect("a leaf the last checkpoint replaced");
            let what = format!("flipped a byte of page {page}, a leaf only the older tree holds");
            (page, keys, what)
        }
        _ => unreachable!("not applicable"),
    };
    let at = page * PAGE_BYTES as u64 + if row == Meta { 40 } else { 100 };
    flip(&data, at);
    let table_keys = leaf_keys
        .into_iter()
        .filter(|k| k[..4] != [0; 4])
        .map(|k| k[4..].to_vec())
        .collect();
    Target {
        what,
        lsn: None,
        first_lost: None,
        seq: None,
        named: None,
        page: Some(page),
        leaf_keys: if row == Leaf && col == Covered {
            table_keys
        } else {
            BTreeSet::new()
        },
    }
}

/// Every leaf of `meta`'s tree in key order: (page, its full keys).
fn leaves(data: &[u8], meta: &Meta) -> Vec<(u64, BTreeSet<Vec<u8>>)> {
    let ps = PageSize::new(PAGE_BYTES).unwrap();
    let mut out = Vec::new();
    let mut todo = vec![Location {
        page: meta.root.page,
        crc: meta.root.crc,
    }];
    while let Some(loc) = todo.pop() {
        let at = loc.page as usize * PAGE_BYTES;
        let node = decode_node(&data[at..at + PAGE_BYTES], ps, loc).unwrap();
        match node.body() {
            Body::Branch(b) => {
                todo.extend((0..b.len()).rev().map(|i| b.child_location(i).unwrap()));
            }
            Body::Leaf(l) => {
                out.push((loc.page, (0..l.len()).map(|i| l.key(i).to_vec()).collect()));
            }
        }
    }
    assert!(out.len() >= 2, "the tree has a branch above its leaves");
    out
}

fn write_at(path: &Path, at: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, at).unwrap();
}

fn flip(path: &Path, at: u64) {
    use std::os::unix::fs::FileExt;
    let mut b = [0u8];
    std::fs::File::open(path)
        .unwrap()
        .read_exact_at(&mut b, at)
        .unwrap();
    write_at(path, at, &[b[0] ^ 0x5a]);
}

fn cut(path: &Path, at: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(at)
        .unwrap();
}

/// Copy the store at `from` to `to` (a new directory), file by file.
pub fn copy_store(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_store(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// Every file under `dir`, by path, with its bytes.
pub fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.insert(p.clone(), std::fs::read(&p).unwrap());
        }
    }
    out
}
