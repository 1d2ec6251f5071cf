//! The damage matrix through the library: for every kind of damage (a
//! flipped record byte, a zeroed record, a segment cut short, a damaged
//! segment header, a damaged leaf, a damaged newest meta page) in every
//! place it can lie (inside the last write, before it, in a record the
//! checkpoint covers, in a released segment), on a store written by one
//! writer and on one written by eight threads with writes overlapping:
//! what `Database::open` (and `open_read_only`) does must be what
//! `matrix::MATRIX` says — the commits kept compared with a model of the
//! acknowledged ones, exactly — and `Database::salvage` must recover every
//! commit the files prove into a store that passes `check`, reporting as
//! lost exactly what was damaged. The table and why each cell is what it
//! is: `docs/testing-store.md`, "The damage matrix".

mod matrix;

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::Instant;

use keel::db::{Database, DbError, SalvageOptions, SalvageReport};
use keel::journal::{JournalError, Skipped};
use matrix::{builder, Built, Cell, Loss, Mode, Open, Target, MATRIX, TABLE};

type Contents = BTreeMap<Vec<u8>, Vec<u8>>;

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("damage-matrix-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Every entry of the table.
fn contents(db: &Database) -> Contents {
    let r = db.begin_read();
    let t = r.open_table(TABLE).unwrap();
    t.iter()
        .map(|kv| {
            let kv = kv.unwrap();
            (kv.0.as_bytes().to_vec(), kv.1.as_bytes().to_vec())
        })
        .collect()
}

/// The opened store (or its refusal) against the cell's promise; the
/// store when it opened with the commits it should hold.
fn check_open(
    b: &Built,
    open: Open,
    t: &Target,
    got: Result<Database, DbError>,
    how: &str,
) -> Option<(Database, Contents)> {
    let db = match (open, got) {
        (Open::Corrupt, Err(DbError::Journal(JournalError::Corrupt { seq, pos, .. }))) => {
            assert_eq!(
                Some((seq, pos)),
                t.named,
                "{how}: the place the refusal names"
            );
            return None;
        }
        (Open::Corrupt, Err(e)) => panic!("{how}: refused, but not as corruption: {e}"),
        (Open::Corrupt, Ok(db)) => panic!(
            "{how}: opened with proven damage to needed records (lsn {:?}, {} commits)",
            db.journal().recovery_report().last_lsn,
            contents(&db).len()
        ),
        (_, Err(e)) => panic!("{how}: refused what it must open: {e}"),
        (_, Ok(db)) => db,
    };
    let report = db.journal().recovery_report().clone();
    let want = match open {
        Open::TornTail => b.model_upto(t.lsn.unwrap() - 1),
        _ => b.model_upto(b.last),
    };
    match open {
        Open::TornTail => {
            let d = t.lsn.unwrap();
            assert_eq!(contents(&db), want, "{how}: every commit before lsn {d}");
            assert_eq!(report.last_lsn, Some(d - 1), "{how}");
            assert!(report.skipped.is_empty(), "{how}: {:?}", report.skipped);
        }
        Open::Skipped => {
            assert_eq!(contents(&db), b.model_upto(b.last), "{how}: every commit");
            let skipped = &report.skipped;
            assert!(!skipped.is_empty(), "{how}: nothing reported");
            assert!(
                skipped.iter().all(|s| s.lsns.1 <= b.c1),
                "{how}: {skipped:?}"
            );
            assert!(
                skipped.iter().any(|s| Some((s.seq, s.pos)) == t.named),
                "{how}: {skipped:?}"
            );
            if let Some(d) = t.lsn {
                let covers = |s: &Skipped| s.lsns.0 <= d && d <= s.lsns.1;
                assert!(
                    skipped.iter().any(covers),
                    "{how}: {skipped:?}, damaged {d}"
                );
            }
        }
        Open::Whole => {
            assert_eq!(contents(&db), b.model_upto(b.last), "{how}: every commit");
            assert!(report.skipped.is_empty(), "{how}: {:?}", report.skipped);
        }
        Open::BadPage => {
            check_bad_page(b, t, &db, how);
            return None;
        }
        Open::Corrupt => unreachable!(),
    }
    db.check().unwrap_or_else(|e| panic!("{how}: check: {e}"));
    Some((db, want))
}

/// A store that opened goes on: a commit after the damage survives a
/// close and a reopen, with every commit before it.
fn goes_on(b: &Built, path: &Path, db: Database, mut want: Contents) {
    let (k, v) = (b"z-after-damage".to_vec(), b"AFTER".to_vec());
    let w = db.begin_write().unwrap();
    w.open_table(TABLE).unwrap().insert(&k, &v).unwrap();
    w.commit().unwrap();
    db.close().unwrap();
    want.insert(k, v);
    let db = builder(b.mode).open(path).unwrap();
    assert_eq!(contents(&db), want, "after a commit, a close and a reopen");
    db.check().unwrap();
}

/// A damaged leaf: reads through it fail naming it, every other commit
/// reads back, and `check` fails there.
fn check_bad_page(b: &Built, t: &Target, db: &Database, how: &str) {
    let page = t.page.unwrap();
    let names_it = |e: &DbError| {
        matches!(e, DbError::Tree(_)) && e.to_string().contains(&format!("page {page}"))
    };
    match db.check() {
        Err(e) if names_it(&e) => {}
        other => panic!("{how}: check: {other:?}"),
    }
    assert!(!t.leaf_keys.is_empty());
    let r = db.begin_read();
    let table = r.open_table(TABLE).unwrap();
    for (k, v) in b.commits.values() {
        match table.get(k) {
            Err(e) if t.leaf_keys.contains(k) && names_it(&e) => {}
            Ok(Some(got)) if !t.leaf_keys.contains(k) => assert_eq!(got.as_ref(), &v[..]),
            other => panic!("{how}: key {}: {other:?}", String::from_utf8_lossy(k)),
        }
    }
}

/// The salvage report and the new store against what was damaged.
fn check_salvage(b: &Built, cell: &Cell, t: &Target, report: &SalvageReport, to: &Path) {
    let db = Database::open(to).unwrap();
    db.check().unwrap();
    let got = contents(&db);
    drop(db);
    let cut_notes = || report.journal_notes.iter().filter(|n| n.loses_data).count();
    match cell.loss {
        Loss::Nothing => {
            assert!(!report.lost_anything(), "{report:#?}");
            assert_eq!(report.last_lsn, b.last);
            assert_eq!(got, b.model_upto(b.last));
        }
        Loss::Residual => {
            let d = t.first_lost.unwrap();
            assert_eq!(report.last_lsn, d - 1, "{report:#?}");
            assert_eq!(got, b.model_upto(d - 1));
            if d < b.last {
                assert_eq!(report.lost_lsns, Some((d, b.last)), "{report:#?}");
            } else {
                assert!(!report.lost_anything(), "{report:#?}");
                let stops: Vec<_> = report
                    .journal_notes
                    .iter()
                    .map(|n| (n.segment, n.pos))
                    .collect();
                let want = if cell.row == matrix::Row::Flip {
                    t.named.into_iter().collect()
                } else {
                    vec![]
                };
                assert_eq!(stops, want, "{:#?}", report.journal_notes);
            }
        }
        Loss::FromDamaged | Loss::CutFromDamaged => {
            let d = t.first_lost.unwrap();
            assert_eq!(report.last_lsn, d - 1, "{report:#?}");
            assert_eq!(got, b.model_upto(d - 1));
            assert!(report.unreachable.is_empty());
            // What lies past a cut is gone unseen; what lies in later
            // files is seen, from the damaged record on.
            let seen_after = cell.loss == Loss::FromDamaged || t.seq != Some(b.segments[b.l].seq);
            let want = seen_after.then_some((d, b.last));
            assert_eq!(report.lost_lsns, want, "{report:#?}");
            let want_notes = usize::from(cell.loss == Loss::CutFromDamaged);
            assert_eq!(cut_notes(), want_notes, "{:#?}", report.journal_notes);
        }
        Loss::LeafRange => {
            assert_eq!(report.last_lsn, b.last);
            assert_eq!(report.lost_lsns, None);
            assert_eq!(report.unreachable.len(), 1, "{:#?}", report.unreachable);
            assert_eq!(Some(report.unreachable[0].page), t.page);
            let mut want = b.model_upto(b.last);
            want.retain(|k, _| !t.leaf_keys.contains(k));
            assert_eq!(got, want);
            assert_eq!(cut_notes(), 0);
        }
    }
}

/// Run one cell on a copy of the built store; a line for the printed
/// table.
fn run_cell(root: &Path, b: &Built, cell: &Cell, open: Open) -> String {
    let name = format!("{:?}-{:?}-{:?}", b.mode, cell.row, cell.col);
    let (store, to) = (root.join(&name), root.join(format!("{name}-salvaged")));
    matrix::copy_store(&b.dir, &store);
    let t = matrix::damage(&store, b, cell.row, cell.col);
    let before = matrix::files(&store);
    let report = Database::salvage(&store, &to, SalvageOptions::default())
        .unwrap_or_else(|e| panic!("salvage: {e}"));
    assert!(
        matrix::files(&store) == before,
        "salvage changed the damaged store"
    );
    check_salvage(b, cell, &t, &report, &to);
    check_open(
        b,
        open,
        &t,
        builder(b.mode).open_read_only(&store),
        "read-only open",
    );
    assert!(
        matrix::files(&store) == before,
        "a read-only open changed the store"
    );
    if let Some((db, want)) = check_open(b, open, &t, builder(b.mode).open(&store), "open") {
        goes_on(b, &store, db, want);
    }
    let lost = match report.lost_lsns {
        Some((a, z)) => format!("lsn {a}..={z}"),
        None if report.lost_anything() => "see notes".into(),
        None => "nothing".into(),
    };
    let _ = std::fs::remove_dir_all(&store);
    let _ = std::fs::remove_dir_all(&to);
    format!(
        "{:<7} {:<10} {:<9} {:<9} salvage lost {lost:<14} {}",
        format!("{:?}", cell.row),
        format!("{:?}", cell.col),
        format!("{open:?}"),
        format!("{:?}", cell.loss),
        t.what
    )
}

/// Build the store of `mode`, run every cell on it, and fail listing
/// every cell that broke its promise.
fn matrix_of(mode: Mode) {
    let start = Instant::now();
    let root = scratch(&format!("{mode:?}"));
    let b = matrix::build(&root, mode);
    let s = &b.stats;
    println!(
        "{mode:?}: {} commits, checkpoints at lsn {} and {}, the last write lsn {}..={}; \
         journal: {} writes, {} records, {} writes overlapped another, {} records made while \
         the one before was not durable; built in {:.2} s",
        b.commits.len(),
        b.c0,
        b.c1,
        b.last_write,
        b.last,
        s.writes,
        s.records,
        s.overlapped_writes,
        b.early_records,
        start.elapsed().as_secs_f64()
    );
    match mode {
        // Each record made after the one before it was durable.
        Mode::OneWriter => assert_eq!(b.early_records, 0),
        Mode::Threads => {
            assert!(s.overlapped_writes > 0, "no write overlapped another");
            assert!(
                b.early_records > 0,
                "no record was made while another was in flight"
            );
        }
    }
    let mut failed = Vec::new();
    for cell in &MATRIX {
        let Some(open) = cell.open else {
            println!(
                "{:<7} {:<10} n/a: {}",
                format!("{:?}", cell.row),
                format!("{:?}", cell.col),
                cell.why
            );
            continue;
        };
        match catch_unwind(AssertUnwindSafe(|| run_cell(&root, &b, cell, open))) {
            Ok(line) => println!("{line}"),
            Err(e) => {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                println!("FAILED {:?} × {:?}: {msg}", cell.row, cell.col);
                failed.push(format!("{:?} × {:?}", cell.row, cell.col));
            }
        }
    }
    println!("{mode:?}: done in {:.2} s", start.elapsed().as_secs_f64());
    let _ = std::fs::remove_dir_all(&root);
    assert!(
        failed.is_empty(),
        "{mode:?}: cells that broke their promise: {failed:?}"
    );
}

#[test]
fn one_writer() {
    matrix_of(Mode::OneWriter);
}

#[test]
fn eight_threads_with_overlapping_writes() {
    matrix_of(Mode::Threads);
}
