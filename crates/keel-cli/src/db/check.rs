//! `keel db check`: open the store read-only (recovery validates the meta
//! pages, the journal and the pages replay touches, and replays the journal
//! into memory; nothing is written), then check every page the last
//! checkpoint reaches. A store that cannot be opened because of what is in
//! its files is damaged too (exit 1), as is one that opens only by going
//! past damaged journal records its checkpoint holds; a torn tail of
//! records that were never durable (what a crash leaves) is a note, exit 0.
//! A path that holds no store, or a store in use, cannot be checked
//! (exit 2).

use std::path::Path;
use std::process::ExitCode;

use keel::btree::{BtreeError, PageError, TreeStats};
use keel::db::{Database, DbError, DATA_FILE, LIVE_ATTEMPTS};
use keel::journal::StopReason;
use serde::Serialize;

use super::args::ReadArgs;
use super::failure::{check_store_dir, kind_of, Failure, Kind};
use super::live::{again, no_snapshot, pause_first, say_live};
use super::print_json;

#[derive(Serialize)]
struct Report {
    store: String,
    /// `ok` or `damaged`.
    status: &'static str,
    /// What is wrong and where, when damaged.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// The damaged file, when known: `data.keel` or `journal`.
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<&'static str>,
    /// The damaged page of the data file, when the damage is one page.
    #[serde(skip_serializing_if = "Option::is_none")]
    page: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    checked: Option<Checked>,
    /// What is worth knowing but not damage (a torn tail a crash left).
    notes: Vec<String>,
}

/// What a clean check covered.
#[derive(Serialize)]
struct Checked {
    page_size_bytes: usize,
    pages_in_file: u64,
    free_pages: u64,
    tables: usize,
    checkpoint_lsn: u64,
    newest_lsn: u64,
    /// A live snapshot of a store another process has open.
    live: bool,
    /// The tree the last checkpoint wrote, read back from the file.
    disk: Tree,
    /// The newest tree: the checkpoint's with the journal replayed.
    memory: Tree,
    /// Entries a reader sees now, in every table: the checkpoint's and
    /// the journal's records after it.
    entries: u64,
}

#[derive(Serialize)]
struct Tree {
    depth: usize,
    branches: u64,
    leaves: u64,
    entries: u64,
    overflow_values: u64,
    pages: u64,
}

impl From<&TreeStats> for Tree {
    fn from(t: &TreeStats) -> Tree {
        Tree {
            depth: t.depth,
            branches: t.branches,
            leaves: t.leaves,
            entries: t.entries,
            overflow_values: t.overflow_values,
            pages: t.pages.len() as u64,
        }
    }
}

pub fn run(a: ReadArgs) -> Result<ExitCode, Failure> {
    let store = &a.store;
    check_store_dir(store)?;
    let report = check_snapshot(store)?;
    if a.out.json {
        print_json(&report)?;
        if let Some(r) = &report.reason {
            errln!("error: store {} is damaged: {r}", report.store);
            errln!("{}", salvage_hint(&report.store));
        }
    } else {
        out!("{}", render(&report))?;
    }
    Ok(ExitCode::from(if report.status == "ok" { 0 } else { 1 }))
}

/// Check the store. On a live snapshot of a store in use, damage is
/// checked again on a new snapshot, up to `LIVE_ATTEMPTS` in all (then
/// exit 3), when the writer has checkpointed since the snapshot was taken
/// (it may have reused the pages read), and reported only once two
/// snapshots in a row of one checkpoint find it alike: the writer
/// recycles journal segments of records its checkpoint holds at any time,
/// and a scan of one half rewritten looks like damage to those records.
fn check_snapshot(store: &Path) -> Result<Report, Failure> {
    let mut said = false;
    let mut attempt = 0;
    let mut seen: Option<String> = None;
    loop {
        let db = match open_for_check(store)? {
            Ok(db) => db,
            Err(damage) => return Ok(damage),
        };
        say_live(&db, store, &mut said);
        pause_first(&db, attempt);
        let report = check_open(&db, store);
        let why = report.reason.clone().unwrap_or_default();
        let stale = db.live_snapshot_stale();
        let settled = !stale && seen.as_deref() == Some(why.as_str());
        if report.status == "ok" || !db.is_live() || settled {
            return Ok(report);
        }
        seen = (!stale).then_some(why.clone());
        attempt += 1;
        if attempt >= LIVE_ATTEMPTS {
            return Err(no_snapshot(store, attempt, &why));
        }
        drop(db);
        again(attempt, &why);
    }
}

/// Open the store: the database, or the report of the damage that kept it
/// from opening; a failure when there is nothing to check.
fn open_for_check(store: &Path) -> Result<Result<Database, Report>, Failure> {
    let e = match Database::builder()
        .background_checkpoints(false)
        .open_read_only(store)
    {
        Ok(db) => return Ok(Ok(db)),
        Err(e) => e,
    };
    let data = store.join(DATA_FILE);
    match (&e, kind_of(&e)) {
        // A data file with no meta page at all: cut short or overwritten
        // (a creation cut short leaves the same, but `create` finishes that).
        (DbError::NotAStore { .. }, _) if data.is_file() => {
            let len = std::fs::metadata(&data).map_or(0, |m| m.len());
            // (The store calls it damage when the journal holds commits:
            // below.)
            let reason = format!(
                "{DATA_FILE} ({len} bytes) holds no meta page: it was truncated or overwritten, \
                 or the store's creation never finished (its journal holds no commit: `keel db \
                 create` finishes it)"
            );
            Ok(Err(damaged(store, reason, Some(DATA_FILE), None)))
        }
        // The same, under a journal that holds commits: the store says so.
        (DbError::Corrupt { reason, .. }, _) if reason.contains("data file has no meta page") => {
            let len = std::fs::metadata(&data).map_or(0, |m| m.len());
            let reason = format!(
                "{DATA_FILE} ({len} bytes) holds no meta page: its journal holds commits, so the \
                 data file was truncated or overwritten"
            );
            Ok(Err(damaged(store, reason, Some(DATA_FILE), None)))
        }
        (_, Kind::Damaged) => Ok(Err(damage_report(store, &e))),
        // A file that cannot be read is damage as far as a check can tell.
        (DbError::Io(_), _) => Ok(Err(damaged(store, e.to_string(), None, None))),
        _ => Err(Failure::from_db(e, store)),
    }
}

fn check_open(db: &Database, store: &Path) -> Report {
    let checked = db.check().and_then(|c| {
        let r = db.begin_read();
        let tables = r.list_tables()?;
        let mut entries = 0u64;
        for name in &tables {
            for kv in r.open_table(name)?.iter() {
                kv?;
                entries += 1;
            }
        }
        Ok((c, tables.len(), entries))
    });
    let (c, tables, entries) = match checked {
        Ok(x) => x,
        Err(e) => return damage_report(store, &e),
    };
    let s = db.stats();
    let journal = db.journal().recovery_report();
    let mut report = Report {
        store: store.display().to_string(),
        status: "ok",
        reason: None,
        file: None,
        page: None,
        checked: Some(Checked {
            page_size_bytes: s.page_size,
            pages_in_file: s.page_count,
            free_pages: s.free_pages,
            tables,
            checkpoint_lsn: s.checkpoint_lsn,
            newest_lsn: s.published_lsn,
            live: db.is_live(),
            disk: Tree::from(&c.disk),
            memory: Tree::from(&c.memory),
            entries,
        }),
        notes: Vec::new(),
    };
    if let Some((seq, pos, why @ StopReason::Damaged(_))) = &journal.stop {
        report.notes.push(format!(
            "the journal ends at segment {seq} byte {pos} ({why}): no later record says lsn {} \
             was ever durable — the torn tail a crash leaves, which loses no acknowledged \
             commit (damage inside the journal's last write, with nothing written after it, \
             looks the same: docs/format.md, \"Recovery modes\")",
            journal.last_lsn.map_or(1, |l| l + 1)
        ));
    }
    if !journal.skipped.is_empty() {
        report.status = "damaged";
        report.file = Some("journal");
        // Every place: a damaged header below the chain comes after the
        // end of the segment before it, and names the segment itself.
        let places: Vec<String> = journal
            .skipped
            .iter()
            .map(|k| {
                let lsns = match k.lsns {
                    (0, b) => format!("up to lsn {b}"),
                    (a, b) => format!("lsn {a}..={b}"),
                };
                format!("{lsns} (segment {} byte {}: {})", k.seq, k.pos, k.reason)
            })
            .collect();
        report.reason = Some(format!(
            "journal records {} are damaged or missing; the checkpoint (lsn {}) holds them, so \
             the store opens and keeps every commit",
            places.join(" and "),
            s.checkpoint_lsn
        ));
    }
    report
}

fn damaged(store: &Path, reason: String, file: Option<&'static str>, page: Option<u64>) -> Report {
    Report {
        store: store.display().to_string(),
        status: "damaged",
        reason: Some(reason),
        file,
        page,
        checked: None,
        notes: Vec::new(),
    }
}

/// The report of a store error that means damage: which file, which page.
fn damage_report(store: &Path, e: &DbError) -> Report {
    let (file, page) = match e {
        DbError::Tree(t) => (Some(DATA_FILE), damaged_page(t)),
        DbError::Journal(_) => (Some("journal"), None),
        _ => (None, None),
    };
    let reason = match e {
        // Its message starts "store … is damaged", which the report says.
        DbError::Corrupt { reason, .. } => reason.clone(),
        e => e.to_string(),
    };
    damaged(store, reason, file, page)
}

/// The page a tree error names.
fn damaged_page(e: &BtreeError) -> Option<u64> {
    match e {
        BtreeError::Page(p) => match *p {
            PageError::WrongSize { page, .. }
            | PageError::BadChecksum { page, .. }
            | PageError::UnexpectedChecksum { page, .. }
            | PageError::WrongType { page, .. }
            | PageError::BadLayout { page, .. } => Some(page),
            PageError::WrongPageNo { expected, .. } => Some(expected),
            _ => None,
        },
        BtreeError::Corrupt { page, .. } => Some(*page),
        _ => None,
    }
}

/// What to do about a damaged store.
fn salvage_hint(store: &str) -> String {
    format!(
        "to copy every commit its files prove whole into a new store: keel db salvage {store} \
         --to NEW"
    )
}

fn render(r: &Report) -> String {
    let Some(c) = &r.checked else {
        let reason = r.reason.as_deref().unwrap_or("unknown");
        return format!(
            "DAMAGED: store {}: {reason}\n{}\n",
            r.store,
            salvage_hint(&r.store)
        );
    };
    let d = &c.disk;
    let mut out = format!(
        "checked store {} (read-only): {} pages of {} bytes\n",
        r.store, c.pages_in_file, c.page_size_bytes
    );
    out += &format!(
        "  on disk (checkpoint lsn {}): tree of depth {}, {} branches, {} leaves, {} pages, \
         {} entries with the table catalog's ({} with overflow values); {} free pages\n",
        c.checkpoint_lsn,
        d.depth,
        d.branches,
        d.leaves,
        d.pages,
        d.entries,
        d.overflow_values,
        c.free_pages
    );
    out += &format!(
        "  as readers see it (newest lsn {}, the journal replayed in memory): {} entries in {} \
         table(s)\n",
        c.newest_lsn, c.entries, c.tables
    );
    for n in &r.notes {
        out += &format!("note: {n}\n");
    }
    match &r.reason {
        Some(reason) => out += &format!("DAMAGED: {reason}\n"),
        None => {
            out += "OK: every checksum, every B+tree rule and every page's owner checked\n";
        }
    }
    out
}
