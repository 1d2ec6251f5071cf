//! `Database::salvage` on stores damaged on purpose. Each test builds a
//! store through the public API (several tables, puts, deletes, a table
//! created empty and one dropped, values on overflow pages; two
//! checkpoints, then commits only in the journal), drops it without
//! closing, damages one thing — a flipped byte in a journal record in the
//! middle, a zeroed record, the last segment cut short, a damaged segment
//! header, a damaged leaf page, a damaged meta page, a record whose
//! payload is not a transaction — and salvages it. The new store must
//! open and pass `check`, hold exactly what a model of the commits says
//! (the commits up to the first gap, over the data file's reachable
//! entries), and the report must name exactly what was damaged; the
//! damaged store's files must be byte for byte what they were.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use keel::btree::{decode_node, Body, Location, PageSize};
use keel::db::meta::Meta;
use keel::db::{
    Database, DbError, JournalStop, LostChangeKind, MetaChoice, SalvageOptions, SalvageReport,
    JOURNAL_DIR,
};
use keel::io::RealVfs;
use keel::journal::{self, JournalOptions, Lsn, RecordInfo, RECORD_HEADER_BYTES};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Journal segments small enough that the commits after the last
/// checkpoint fill several.
const SEGMENT_BYTES: u64 = 32 << 10;
const PAGE_BYTES: usize = 4096;

type Tables = BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>;

/// One change of a commit.
#[derive(Debug, Clone)]
enum Change {
    Put(String, Vec<u8>, Vec<u8>),
    Del(String, Vec<u8>),
    Create(String),
    Drop(String),
}

/// The tables, and the ids the store gives them (1, 2, … in order of
/// creation, never reused).
#[derive(Debug, Clone, Default)]
struct Model {
    tables: Tables,
    ids: BTreeMap<String, u32>,
    next_id: u32,
}

impl Model {
    fn create(&mut self, t: &str) {
        if !self.tables.contains_key(t) {
            self.tables.insert(t.to_string(), BTreeMap::new());
            self.next_id = self.next_id.max(1);
            self.ids.insert(t.to_string(), self.next_id);
            self.next_id += 1;
        }
    }

    fn apply(&mut self, changes: &[Change]) {
        for c in changes {
            match c {
                Change::Put(t, k, v) => {
                    self.create(t);
                    self.tables.get_mut(t).unwrap().insert(k.clone(), v.clone());
                }
                Change::Del(t, k) => {
                    self.tables.get_mut(t).unwrap().remove(k);
                }
                Change::Create(t) => self.create(t),
                Change::Drop(t) => {
                    self.tables.remove(t);
                    self.ids.remove(t);
                }
            }
        }
    }

    /// The table and key a full tree key stands for.
    fn split(&self, full: &[u8]) -> (String, Vec<u8>) {
        let id = u32::from_be_bytes(full[..4].try_into().unwrap());
        let name = self.ids.iter().find(|(_, &i)| i == id).unwrap().0;
        (name.clone(), full[4..].to_vec())
    }
}

/// Every commit with its LSN, and the checkpoints' LSNs.
struct History {
    commits: Vec<(Lsn, Vec<Change>)>,
    checkpoints: Vec<Lsn>,
}

impl History {
    fn last(&self) -> Lsn {
        self.commits.last().unwrap().0
    }

    fn model_at(&self, lsn: Lsn) -> Model {
        let mut m = Model::default();
        for (_, c) in self.commits.iter().filter(|(l, _)| *l <= lsn) {
            m.apply(c);
        }
        m
    }

    fn changes_of(&self, lsn: Lsn) -> &[Change] {
        &self.commits.iter().find(|(l, _)| *l == lsn).unwrap().1
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("salvage-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn builder() -> keel::db::Builder {
    Database::builder()
        .page_size(PAGE_BYTES)
        .journal(JournalOptions {
            segment_size_bytes: SEGMENT_BYTES,
            ..JournalOptions::default()
        })
        .background_checkpoints(false)
        .checkpoint_journal_bytes(1 << 30)
        .backpressure_journal_bytes(1 << 30)
}

fn value(rng: &mut SmallRng) -> Vec<u8> {
    let len = match rng.random_range(0..12) {
        0 => rng.random_range(1100..3000), // overflow pages
        _ => rng.random_range(1..160),
    };
    let b: u8 = rng.random();
    (0..len).map(|i| b.wrapping_add(i as u8)).collect()
}

/// A commit of random puts and deletes into the tables `model` holds.
fn random_commit(rng: &mut SmallRng, model: &Model) -> Vec<Change> {
    let tables: Vec<&String> = ["alpha", "beta", "gamma"]
        .iter()
        .filter_map(|t| model.tables.get_key_value(*t).map(|(k, _)| k))
        .collect();
    let mut changes = Vec::new();
    let mut touched = BTreeSet::new();
    for _ in 0..rng.random_range(1..6) {
        let t = tables[rng.random_range(0..tables.len())].clone();
        let existing: Vec<&Vec<u8>> = model.tables[&t].keys().collect();
        if rng.random_range(0..5) == 0 && !existing.is_empty() {
            let k = existing[rng.random_range(0..existing.len())].clone();
            if touched.insert((t.clone(), k.clone())) {
                changes.push(Change::Del(t, k));
            }
        } else {
            let n = rng.random_range(0..400u32);
            let k = format!("key-{n:05}-{}", "x".repeat((n % 9) as usize * 10)).into_bytes();
            if touched.insert((t.clone(), k.clone())) {
                changes.push(Change::Put(t, k, value(rng)));
            }
        }
    }
    changes
}

fn commit(db: &Database, changes: &[Change]) -> Lsn {
    let mut txn = db.begin_write().unwrap();
    for c in changes {
        match c {
            Change::Put(t, k, v) => txn.open_table(t).unwrap().insert(k, v).unwrap(),
            Change::Del(t, k) => assert!(txn.open_table(t).unwrap().remove(k).unwrap()),
            Change::Create(t) => {
                let _ = txn.open_table(t).unwrap();
            }
            Change::Drop(t) => assert!(txn.delete_table(t).unwrap()),
        }
    }
    txn.commit().unwrap();
    db.begin_read().lsn()
}

/// Build the store: tables created (one empty, one later dropped), 40
/// commits, a checkpoint, 30 more and the drop, a checkpoint, then
/// `tail` commits only in the journal; dropped without `close`.
fn build(store: &Path, tail: usize) -> History {
    let db = builder().create(store).unwrap();
    let mut rng = SmallRng::seed_from_u64(7);
    let mut model = Model::default();
    let mut h = History {
        commits: Vec::new(),
        checkpoints: Vec::new(),
    };
    let run = |changes: Vec<Change>, model: &mut Model, h: &mut History| {
        let lsn = commit(&db, &changes);
        assert_eq!(
            lsn,
            h.commits.last().map_or(1, |c| c.0 + 1),
            "one record per commit"
        );
        model.apply(&changes);
        h.commits.push((lsn, changes));
    };
    for t in ["alpha", "beta", "gamma", "empty", "doomed"] {
        let c = match t {
            "empty" => Change::Create(t.into()),
            _ => Change::Put(t.into(), b"first".to_vec(), t.as_bytes().to_vec()),
        };
        run(vec![c], &mut model, &mut h);
    }
    for round in 0..3 {
        let commits = [35, 30, tail][round];
        for i in 0..commits {
            let mut changes = random_commit(&mut rng, &model);
            if round == 1 && i == 10 {
                changes = vec![Change::Drop("doomed".into())];
            }
            run(changes, &mut model, &mut h);
        }
        if round < 2 {
            assert_eq!(db.checkpoint().unwrap(), Some(h.last()));
            h.checkpoints.push(h.last());
        }
    }
    drop(db);
    h
}

/// Every file under `dir`, by path, with its bytes.
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
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

/// Salvage `store` into `to`; the store's files must be unchanged.
fn salvage_with(store: &Path, to: &Path, options: SalvageOptions) -> SalvageReport {
    let before = files(store);
    let report = Database::salvage(store, to, options).unwrap();
    assert!(
        files(store) == before,
        "salvage changed the damaged store's files"
    );
    report
}

fn salvage(store: &Path, to: &Path) -> SalvageReport {
    salvage_with(store, to, SalvageOptions::default())
}

/// Open the new store, check it, and read every table.
fn contents(to: &Path) -> Tables {
    let db = Database::open(to).unwrap();
    db.check().unwrap();
    let r = db.begin_read();
    let mut out = Tables::new();
    for name in r.list_tables().unwrap() {
        let t = r.open_table(&name).unwrap();
        let m = t
            .iter()
            .map(|kv| {
                let kv = kv.unwrap();
                (kv.0.as_bytes().to_vec(), kv.1.as_bytes().to_vec())
            })
            .collect();
        out.insert(name, m);
    }
    out
}

fn entries(t: &Tables) -> u64 {
    t.values().map(|m| m.len() as u64).sum()
}

/// Recovery's chain of records, each with its segment file.
fn chain(store: &Path) -> Vec<(PathBuf, RecordInfo)> {
    let scan = journal::inspect(&RealVfs, &store.join(JOURNAL_DIR)).unwrap();
    scan.segments
        .iter()
        .filter(|s| s.in_chain)
        .flat_map(|s| s.records.iter().map(|r| (s.path.clone(), *r)))
        .collect()
}

fn record(store: &Path, lsn: Lsn) -> (PathBuf, RecordInfo) {
    chain(store)
        .into_iter()
        .find(|(_, r)| r.lsn == lsn)
        .unwrap()
}

fn write_at(path: &Path, at: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, at).unwrap();
}

fn flip(path: &Path, at: u64) {
    let mut b = [0u8];
    use std::os::unix::fs::FileExt;
    std::fs::File::open(path)
        .unwrap()
        .read_exact_at(&mut b, at)
        .unwrap();
    write_at(path, at, &[b[0] ^ 0x5a]);
}

/// What a clean salvage of the whole history must show.
fn assert_whole(report: &SalvageReport, h: &History, to: &Path) {
    let want = h.model_at(h.last()).tables;
    assert_eq!(contents(to), want);
    assert_eq!(report.last_lsn, h.last());
    assert_eq!(report.lost_lsns, None);
    assert_eq!(report.entries, entries(&want));
    assert_eq!(report.tables, want.len() as u64);
    assert_eq!(report.journal_stop, JournalStop::Missing(h.last() + 1));
}

#[test]
fn an_undamaged_store_is_copied_whole() {
    let dir = scratch("whole");
    let (store, to) = (dir.join("store"), dir.join("new"));
    let h = build(&store, 30);
    let report = salvage(&store, &to);
    assert_whole(&report, &h, &to);
    assert!(!report.lost_anything(), "{report:#?}");
    assert_eq!(report.meta.generation, 2, "the newest meta");
    assert_eq!(report.meta_choice, MetaChoice::ReachesFurther);
    assert_eq!(report.meta.checkpoint_lsn, h.checkpoints[1]);
    assert_eq!(report.other_meta.unwrap().generation, 1);
    assert_eq!(report.journal_records, h.last() - h.checkpoints[1]);
    assert!(report.unreachable.is_empty() && report.journal_notes.is_empty());
    assert!(
        contents(&to).contains_key("empty"),
        "an empty table survives"
    );
    assert!(!contents(&to).contains_key("doomed"));
}

#[test]
fn of_two_metas_that_reach_as_far_the_newer_is_taken() {
    let dir = scratch("tie");
    let (store, to) = (dir.join("store"), dir.join("new"));
    let h = build(&store, 3);
    assert!(chain(&store)[0].1.lsn <= h.checkpoints[0] + 1);
    let report = salvage(&store, &to);
    assert_whole(&report, &h, &to);
    let other = report.other_meta.unwrap();
    assert_eq!((other.generation, other.reach_lsn), (1, h.last()));
    assert_eq!(
        (report.meta.generation, report.meta.reach_lsn),
        (2, h.last())
    );
    assert_eq!(report.meta_choice, MetaChoice::Newer);
    assert_eq!(report.journal_records, h.last() - h.checkpoints[1]);
}

#[test]
fn a_damaged_root_of_the_newer_tree_is_read_from_the_older_when_both_reach_as_far() {
    let dir = scratch("root");
    let (store, to) = (dir.join("store"), dir.join("new"));
    let h = build(&store, 3);
    let data = store.join(keel::db::DATA_FILE);
    let bytes = std::fs::read(&data).unwrap();
    let metas = [0, PAGE_BYTES].map(|at| Meta::decode(&bytes[at..]).unwrap());
    let newest = metas.iter().max_by_key(|m| m.generation).unwrap();
    let older = metas.iter().min_by_key(|m| m.generation).unwrap();
    assert_ne!(newest.root.page, older.root.page);
    flip(&data, newest.root.page * PAGE_BYTES as u64 + 100);
    let report = salvage(&store, &to);
    assert_whole(&report, &h, &to);
    assert_eq!(report.meta.generation, older.generation);
    assert_eq!(
        report.meta_choice,
        MetaChoice::WholeTree {
            newer_damaged_pages: vec![newest.root.page]
        }
    );
    assert!(report.unreachable.is_empty());
    assert!(!report.lost_anything(), "{report:#?}");
}

/// A record in the middle of the commits after the last checkpoint,
/// damaged by `damage`: the new store holds the commits before it, and
/// the report names it and every later LSN as lost, with the keys the
/// later (readable) records touched.
fn damaged_record(name: &str, damage: impl FnOnce(&Path, RecordInfo)) {
    let dir = scratch(name);
    let (store, to) = (dir.join("store"), dir.join("new"));
    let h = build(&store, 30);
    let lost = h.checkpoints[1] + 12;
    let (path, info) = record(&store, lost);
    damage(&path, info);
    assert!(Database::open(&store).is_err(), "a normal open refuses it");
    let report = salvage(&store, &to);
    assert_eq!(contents(&to), h.model_at(lost - 1).tables);
    assert_eq!(report.last_lsn, lost - 1);
    assert_eq!(report.journal_stop, JournalStop::Missing(lost));
    assert_eq!(report.lost_lsns, Some((lost, h.last())));
    assert_eq!(report.lost_records_found, h.last() - lost);
    assert!(report.lost_anything());
    // The changes of the record after the lost one are listed.
    let listed: BTreeSet<_> = report
        .lost_changes
        .iter()
        .filter(|c| c.lsn == lost + 1)
        .map(|c| (c.kind, c.table.clone(), c.key.clone()))
        .collect();
    let made: BTreeSet<_> = h
        .changes_of(lost + 1)
        .iter()
        .map(|c| match c {
            Change::Put(t, k, _) => (LostChangeKind::Put, t.clone(), k.clone()),
            Change::Del(t, k) => (LostChangeKind::Delete, t.clone(), k.clone()),
            c => panic!("unexpected change {c:?}"),
        })
        .collect();
    assert_eq!(listed, made);
    // The list is bounded, and a second salvage writes the same.
    let options = SalvageOptions {
        max_lost_changes: 2,
        ..SalvageOptions::default()
    };
    let again = salvage_with(&store, &dir.join("again"), options);
    assert_eq!(again.lost_changes.len(), 2);
    assert_eq!(
        again.lost_changes_omitted as usize,
        report.lost_changes.len() - 2
    );
    assert_eq!(contents(&dir.join("again")), contents(&to));
}

#[test]
fn a_flipped_byte_in_a_journal_record_loses_it_and_what_follows() {
    damaged_record("flip", |path, r| {
        flip(
            path,
            r.pos + RECORD_HEADER_BYTES as u64 + u64::from(r.len) / 2,
        )
    });
}

#[test]
fn a_zeroed_journal_record_loses_it_and_what_follows() {
    damaged_record("zero", |path, r| {
        let len = RECORD_HEADER_BYTES + r.len as usize;
        write_at(path, r.pos, &vec![0u8; len]);
    });
}

#[test]
fn a_last_segment_cut_short_keeps_every_whole_record_before_the_cut() {
    let dir = scratch("cut");
    let (store, to) = (dir.join("store"), dir.join("new"));
    let h = build(&store, 30);
    let records = chain(&store);
    let (path, cut) = records[records.len() - 2].clone();
    assert!(cut.lsn > h.checkpoints[1] + 1);
    let at = cut.pos + RECORD_HEADER_BYTES as u64 + u64::from(cut.len) / 2;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(at)
        .unwrap();
    let report = salvage(&store, &to);
    assert_eq!(contents(&to), h.model_at(cut.lsn - 1).tables);
    assert_eq!(report.last_lsn, cut.lsn - 1);
    // The records after the cut are gone, unseen: no LSN range names
    // them, but the note that the file was cut short does.
    assert_eq!(report.lost_lsns, None);
    assert!(report.lost_anything());
    let notes: Vec<_> = report
        .journal_notes
        .iter()
        .filter(|n| n.loses_data)
        .collect();
    assert_eq!(notes.len(), 1, "{:#?}", report.journal_notes);
    assert_eq!(notes[0].pos, at);
    assert!(notes[0].what.contains("cut short"), "{}", notes[0].what);
}

#[test]
fn a_damaged_segment_header_loses_nothing() {
    let dir = scratch("header");
    let (store, to) = (dir.join("store"), dir.join("new"));
    let h = build(&store, 30);
    let records = chain(&store);
    // A segment whose first record comes after the checkpoint, with
    // segments of the chain before and after it.
    let segments: Vec<&PathBuf> = records
        .iter()
        .filter(|(_, r)| r.lsn > h.checkpoints[1])
        .map(|(p, _)| p)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert!(
        segments.len() >= 3,
        "{} segments after the checkpoint",
        segments.len()
    );
    let victim = segments[1].clone();
    flip(&victim, 8); // the format version
    assert!(Database::open(&store).is_err(), "a normal open refuses it");
    let report = salvage(&store, &to);
    assert_whole(&report, &h, &to);
    assert!(!report.lost_anything(), "{report:#?}");
    assert!(
        report
            .journal_notes
            .iter()
            .any(|n| n.what.contains("header is not valid") && !n.loses_data),
        "{:#?}",
        report.journal_notes
    );
}

/// The newest meta's tree, walked down its last (or first) children to
/// a leaf: (the leaf's page, its full keys).
fn edge_leaf(store: &Path, last: bool) -> (u64, Vec<Vec<u8>>) {
    let data = std::fs::read(store.join(keel::db::DATA_FILE)).unwrap();
    let ps = PageSize::new(PAGE_BYTES).unwrap();
    let metas = [0, PAGE_BYTES].map(|at| Meta::decode(&data[at..]).unwrap());
    let meta = metas.iter().max_by_key(|m| m.generation).unwrap();
    let mut loc = Location {
        page: meta.root.page,
        crc: meta.root.crc,
    };
    loop {
        let at = loc.page as usize * PAGE_BYTES;
        let node = decode_node(&data[at..at + PAGE_BYTES], ps, loc).unwrap();
        match node.body() {
            Body::Branch(b) => {
                let i = if last { b.len() - 1 } else { 0 };
                loc = b.child_location(i).unwrap();
            }
            Body::Leaf(l) => {
                return (loc.page, (0..l.len()).map(|i| l.key(i).to_vec()).collect());
            }
        }
    }
}

#[test]
fn a_damaged_leaf_loses_its_key_range_and_the_journal_rewrites_what_it_can() {
    let dir = scratch("leaf");
    let (store, to) = (dir.join("store"), dir.join("new"));
    let h = build(&store, 30);
    let (page, keys) = edge_leaf(&store, true);
    let cp = h.checkpoints[1];
    let mut want = h.model_at(cp);
    assert!(
        keys.iter().all(|k| k[..4] != [0; 4]),
        "a leaf of the tables, not the catalog"
    );
    for k in &keys {
        let (t, key) = want.split(k);
        assert!(want.tables.get_mut(&t).unwrap().remove(&key).is_some());
    }
    for (_, c) in h.commits.iter().filter(|(l, _)| *l > cp) {
        want.apply(c);
    }
    flip(
        &store.join(keel::db::DATA_FILE),
        page * PAGE_BYTES as u64 + 100,
    );
    let report = salvage(&store, &to);
    assert_eq!(contents(&to), want.tables);
    assert_eq!(report.last_lsn, h.last());
    assert_eq!(report.lost_lsns, None);
    assert_eq!(report.unreachable.len(), 1, "{:#?}", report.unreachable);
    let range = &report.unreachable[0];
    assert_eq!(range.page, page);
    assert!(range.reason.contains("checksum"), "{}", range.reason);
    // The range covers the leaf's keys: from its first (or below) to the
    // end, as the last leaf of the tree.
    assert!(range.from.as_deref().is_some_and(|f| f <= &keys[0][..]));
    assert_eq!(range.to, None);
    assert!(report.lost_anything());
}

#[test]
fn a_damaged_catalog_leaf_keeps_the_tables_under_made_up_names() {
    let dir = scratch("catalog");
    let (store, to) = (dir.join("store"), dir.join("new"));
    let h = build(&store, 30);
    let (page, keys) = edge_leaf(&store, false);
    assert!(keys[0][..4] == [0; 4], "the first leaf holds the catalog");
    let cp = h.checkpoints[1];
    let mut model = h.model_at(cp);
    for k in keys.iter().filter(|k| k[..4] != [0; 4]) {
        let (t, key) = model.split(k);
        model.tables.get_mut(&t).unwrap().remove(&key);
    }
    for (_, c) in h.commits.iter().filter(|(l, _)| *l > cp) {
        model.apply(c);
    }
    // Every table with entries comes back, under a name made of its id.
    let want: Tables = model
        .tables
        .iter()
        .filter(|(_, m)| !m.is_empty())
        .map(|(t, m)| (format!("salvaged-table-{}", model.ids[t]), m.clone()))
        .collect();
    flip(
        &store.join(keel::db::DATA_FILE),
        page * PAGE_BYTES as u64 + 100,
    );
    let report = salvage(&store, &to);
    assert_eq!(contents(&to), want);
    let renamed: Vec<String> = report
        .renamed_tables
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert_eq!(renamed, want.keys().cloned().collect::<Vec<_>>());
    assert_eq!(report.unreachable.len(), 1);
    assert_eq!(
        (
            report.unreachable[0].page,
            report.unreachable[0].from.as_deref()
        ),
        (page, None)
    );
    assert!(report.lost_anything());
}

/// Damage the newest meta page; the older one is taken.
fn damage_newest_meta(store: &Path) {
    let data = store.join(keel::db::DATA_FILE);
    let bytes = std::fs::read(&data).unwrap();
    let gen = |at: usize| Meta::decode(&bytes[at..]).unwrap().generation;
    let newest = if gen(0) > gen(PAGE_BYTES) {
        0
    } else {
        PAGE_BYTES
    };
    flip(&data, newest as u64 + 40);
}

#[test]
fn a_damaged_newest_meta_page_falls_back_on_the_older_one() {
    let dir = scratch("meta");
    let (store, to) = (dir.join("store"), dir.join("new"));
    let h = build(&store, 3);
    // Few commits after the second checkpoint: no segment was recycled,
    // so the journal still holds every record since the first.
    assert!(chain(&store)[0].1.lsn <= h.checkpoints[0] + 1);
    damage_newest_meta(&store);
    let report = salvage(&store, &to);
    assert_whole(&report, &h, &to);
    assert_eq!(report.meta.generation, 1, "the older meta");
    assert_eq!(report.meta_choice, MetaChoice::OnlyValid);
    assert_eq!(report.meta.checkpoint_lsn, h.checkpoints[0]);
    assert_eq!(report.other_meta, None);
    assert!(report
        .other_meta_error
        .as_deref()
        .unwrap()
        .contains("checksum"));
    assert_eq!(report.journal_records, h.last() - h.checkpoints[0]);
    assert!(!report.lost_anything(), "{report:#?}");
}

#[test]
fn a_damaged_newest_meta_page_with_the_journal_recycled_loses_the_gap() {
    let dir = scratch("meta-gap");
    let (store, to) = (dir.join("store"), dir.join("new"));
    let h = build(&store, 60);
    let first = chain(&store)[0].1.lsn;
    assert!(
        first > h.checkpoints[0] + 1,
        "segments after the first checkpoint were recycled"
    );
    damage_newest_meta(&store);
    let report = salvage(&store, &to);
    assert_eq!(report.meta.generation, 1);
    assert_eq!(contents(&to), h.model_at(h.checkpoints[0]).tables);
    assert_eq!(report.last_lsn, h.checkpoints[0]);
    assert_eq!(report.lost_lsns, Some((h.checkpoints[0] + 1, h.last())));
    assert_eq!(report.lost_records_found, h.last() - first + 1);
}

#[test]
fn a_record_that_is_not_a_transaction_ends_the_salvage() {
    let dir = scratch("payload");
    let (store, to) = (dir.join("store"), dir.join("new"));
    let h = build(&store, 5);
    let options = JournalOptions {
        segment_size_bytes: SEGMENT_BYTES,
        ..JournalOptions::default()
    };
    let j = journal::Journal::open(RealVfs::shared(), &store.join(JOURNAL_DIR), options).unwrap();
    let bad = j.append(b"\x09 not a transaction").unwrap();
    drop(j);
    assert_eq!(bad, h.last() + 1);
    let report = salvage(&store, &to);
    assert_eq!(contents(&to), h.model_at(h.last()).tables);
    assert_eq!(report.last_lsn, h.last());
    assert!(
        matches!(&report.journal_stop, JournalStop::Undecodable { lsn, .. } if *lsn == bad),
        "{:?}",
        report.journal_stop
    );
    assert_eq!(report.lost_lsns, Some((bad, bad)));
    assert_eq!(report.lost_records_found, 1);
    assert!(report.lost_changes.is_empty());
}

#[test]
fn salvage_refuses_a_target_it_must_not_write_and_a_store_in_use() {
    let dir = scratch("refuse");
    let store = dir.join("store");
    build(&store, 2);
    let before = files(&store);
    let full = dir.join("full");
    std::fs::create_dir_all(&full).unwrap();
    std::fs::write(full.join("x"), b"x").unwrap();
    let refused = |to: &Path| Database::salvage(&store, to, SalvageOptions::default());
    assert!(matches!(refused(&full), Err(DbError::SalvageTarget { .. })));
    assert!(matches!(
        refused(&full.join("x")),
        Err(DbError::SalvageTarget { .. })
    ));
    assert!(matches!(
        refused(&store.join("new")),
        Err(DbError::SalvageTarget { .. })
    ));
    assert!(matches!(
        refused(&store),
        Err(DbError::SalvageTarget { .. })
    ));
    assert!(matches!(
        Database::salvage(
            dir.join("nothing"),
            dir.join("new"),
            SalvageOptions::default()
        ),
        Err(DbError::NotAStore { .. })
    ));
    assert!(
        files(&store) == before,
        "a refused salvage changed the store"
    );
    let open = Database::open(&store).unwrap();
    assert!(matches!(
        refused(&dir.join("new")),
        Err(DbError::Locked { .. })
    ));
    drop(open);
    assert!(!dir.join("new").exists());
}
