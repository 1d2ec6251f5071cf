//! `keel db salvage STORE --to NEW`: copy what a damaged store's files
//! prove was committed into a new store (`Database::salvage`), and say
//! exactly what could not be recovered. Exit 0 when nothing was lost, 1
//! when the new store was written and losses are reported, 2 when no new
//! store could be written.

use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel::db::{
    Database, JournalStop, LostChangeKind, MetaChoice, SalvageMeta, SalvageOptions,
    SalvageProgress, SalvageReport,
};
use serde::Serialize;

use super::args::SalvageArgs;
use super::bytes::{encode_hex, Encoding};
use super::failure::{check_store_dir, kind_of, Failure};
use super::print_json;

/// Progress goes to stderr at most this often, and only once a salvage
/// has run this long.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

pub fn run(a: SalvageArgs) -> Result<ExitCode, Failure> {
    check_store_dir(&a.store)?;
    let options = SalvageOptions {
        max_lost_changes: a.max_lost_changes,
        progress: Some(progress_printer()),
        ..SalvageOptions::default()
    };
    let was_empty = !holds_anything(&a.to);
    let report = Database::salvage(&a.store, &a.to, options).map_err(|e| {
        let mut message = e.to_string();
        if was_empty && holds_anything(&a.to) {
            message += &format!(
                " (the new store at {} may be partly written: remove it before trying again)",
                a.to.display()
            );
        }
        Failure::new(kind_of(&e), message)
    })?;
    if a.out.json {
        print_json(&Json::new(&report))?;
    } else {
        out!("{}", render(&report))?;
    }
    Ok(ExitCode::from(u8::from(report.lost_anything())))
}

/// Whether `path` is a file, or a directory with anything in it.
fn holds_anything(path: &Path) -> bool {
    match std::fs::read_dir(path) {
        Ok(mut entries) => entries.next().is_some(),
        Err(_) => path.exists(),
    }
}

/// Print where a long salvage is, on stderr, once a second.
fn progress_printer() -> keel::db::SalvageProgressFn {
    let started = Instant::now();
    let last = Mutex::new(started);
    Arc::new(move |p: &SalvageProgress| {
        let now = Instant::now();
        let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
        if now.duration_since(started) < PROGRESS_EVERY
            || now.duration_since(*last) < PROGRESS_EVERY
        {
            return;
        }
        *last = now;
        let what = match *p {
            SalvageProgress::Journal {
                segments_read,
                segments,
            } => format!("reading the journal: {segments_read} of {segments} segment files"),
            SalvageProgress::Copying {
                pages_read,
                entries,
            } => format!("copying: {pages_read} pages read, {entries} entries written"),
            SalvageProgress::Comparing { pages_read } => {
                format!("reading the newer tree to compare it with the older: {pages_read} pages")
            }
            SalvageProgress::Checking => "checking the new store".into(),
            _ => return,
        };
        errln!("salvage: {what}");
    })
}

fn meta_text(m: &SalvageMeta) -> String {
    format!(
        "slot {}, generation {}, checkpoint lsn {} (with the journal: reaches lsn {})",
        m.slot, m.generation, m.checkpoint_lsn, m.reach_lsn
    )
}

/// Why the meta page was taken, in words, and its JSON name.
fn choice_text(c: &MetaChoice) -> (String, &'static str) {
    match c {
        MetaChoice::OnlyValid => ("the only valid one".into(), "only_valid"),
        MetaChoice::ReachesFurther => ("it reaches further".into(), "reaches_further"),
        MetaChoice::Newer => ("both reach as far; the newer".into(), "newer"),
        MetaChoice::WholeTree {
            newer_damaged_pages,
        } => (
            format!(
                "both reach as far, and the newer one's tree has damaged pages \
                 ({newer_damaged_pages:?}) where this one's reads whole"
            ),
            "whole_tree",
        ),
        MetaChoice::JournalFromTheStart => (
            "neither meta page is valid; the journal holds every commit from lsn 1, replayed \
             onto an empty tree"
                .into(),
            "journal_from_the_start",
        ),
        _ => ("".into(), "other"),
    }
}

fn kind_text(k: LostChangeKind) -> &'static str {
    match k {
        LostChangeKind::Put => "put",
        LostChangeKind::Delete => "delete",
        LostChangeKind::CreateTable => "create table",
        LostChangeKind::DropTable => "drop table",
        _ => "change",
    }
}

/// A full key as `table "T" key "K"` (the key in hex when not UTF-8).
fn full_key_text(r: &SalvageReport, full: Option<&[u8]>, none: &str) -> String {
    match full {
        None => none.to_string(),
        Some(full) => {
            let (table, key) = r.split_key(full);
            format!("table {table:?} key {}", Encoding::Text.name(key))
        }
    }
}

fn render(r: &SalvageReport) -> String {
    let mut out = format!(
        "salvaged store {} into {}\n",
        r.from.display(),
        r.to.display()
    );
    out += &format!(
        "  meta page    {}: {}\n",
        meta_text(&r.meta),
        choice_text(&r.meta_choice).0
    );
    match (&r.other_meta, &r.other_meta_error) {
        (Some(m), _) => out += &format!("  other meta   {} (not used)\n", meta_text(m)),
        (None, Some(e)) => out += &format!("  other meta   not valid: {e}\n"),
        (None, None) => {}
    }
    let stop = match &r.journal_stop {
        JournalStop::Missing(lsn) => format!("no intact record with lsn {lsn} anywhere"),
        JournalStop::Undecodable { lsn, reason } => {
            format!("record {lsn} is intact but not a transaction ({reason})")
        }
        other => format!("{other:?}"),
    };
    out += &format!(
        "  journal      {} records applied after the checkpoint; stopped: {stop}\n",
        r.journal_records
    );
    out += &format!(
        "  recovered    every commit up to lsn {}; {} tree page(s) read\n",
        r.last_lsn, r.pages_read
    );
    out += &format!(
        "  new store    {} tables, {} entries; checkpointed and checked\n",
        r.tables, r.entries
    );
    out += &render_losses(r);
    out += &if r.lost_anything() {
        "LOSSES reported above (exit 1)\n".to_string()
    } else {
        "OK: nothing the damaged store's files prove committed was lost\n".to_string()
    };
    out
}

fn render_losses(r: &SalvageReport) -> String {
    let mut out = String::new();
    if let Some((first, last)) = r.lost_lsns {
        out += &format!(
            "LOST: journal records lsn {first} to {last} ({} lsns; {} of them found intact past \
             the gap, listed below)\n",
            last - first + 1,
            r.lost_records_found
        );
        for c in &r.lost_changes {
            let key = if c.key.is_empty() {
                String::new()
            } else {
                format!(" key {}", Encoding::Text.name(&c.key))
            };
            out += &format!(
                "  lsn {}: {} {:?}{key}\n",
                c.lsn,
                kind_text(c.kind),
                c.table
            );
        }
        if r.lost_changes_omitted > 0 {
            out += &format!("  … and {} more changes\n", r.lost_changes_omitted);
        }
    }
    for u in &r.unreachable {
        out += &format!(
            "LOST: data file entries from {} to before {} (page {}: {}), except those the \
             journal rewrote\n",
            full_key_text(r, u.from.as_deref(), "the first key"),
            full_key_text(r, u.to.as_deref(), "the end"),
            u.page,
            u.reason
        );
    }
    for t in &r.renamed_tables {
        out += &format!(
            "LOST: the name of table #{}: its entries are in table {:?}\n",
            t.id, t.name
        );
    }
    if r.ignored_keys > 0 {
        out += &format!(
            "LOST: {} entries whose key names no table (not written)\n",
            r.ignored_keys
        );
    }
    for n in &r.journal_notes {
        let label = if n.loses_data { "LOST" } else { "note" };
        out += &format!(
            "{label}: journal segment {}, byte {}: {}\n",
            n.segment, n.pos, n.what
        );
    }
    out
}

/// What `--json` prints.
#[derive(Serialize)]
struct Json {
    store: String,
    to: String,
    /// `complete` (exit 0) or `losses` (exit 1).
    status: &'static str,
    meta: MetaJson,
    /// `only_valid`, `reaches_further`, `newer` or `whole_tree`.
    meta_choice: &'static str,
    /// With `whole_tree`: the newer tree's pages that failed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    newer_damaged_pages: Vec<u64>,
    other_meta: Option<MetaJson>,
    other_meta_error: Option<String>,
    last_lsn: u64,
    journal_records: u64,
    journal_stop: StopJson,
    highest_lsn_seen: Option<u64>,
    lost_lsns: Option<LsnRange>,
    lost_records_found: u64,
    lost_changes: Vec<ChangeJson>,
    lost_changes_omitted: u64,
    unreachable: Vec<RangeJson>,
    pages_read: u64,
    tables: u64,
    entries: u64,
    renamed_tables: Vec<RenamedJson>,
    ignored_keys: u64,
    journal_notes: Vec<NoteJson>,
}

#[derive(Serialize)]
struct MetaJson {
    slot: u8,
    generation: u64,
    checkpoint_lsn: u64,
    reach_lsn: u64,
    page_size_bytes: usize,
    page_count: u64,
}

#[derive(Serialize)]
struct StopJson {
    /// `missing` or `undecodable`.
    kind: &'static str,
    lsn: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

#[derive(Serialize)]
struct LsnRange {
    first: u64,
    last: u64,
}

/// A key: as text when it is UTF-8 (else `null`), and always in hex.
#[derive(Serialize)]
struct KeyJson {
    table: String,
    key: Option<String>,
    key_hex: String,
}

#[derive(Serialize)]
struct ChangeJson {
    lsn: u64,
    /// `put`, `delete`, `create table` or `drop table`.
    kind: &'static str,
    table: String,
    key: Option<String>,
    key_hex: String,
}

#[derive(Serialize)]
struct RangeJson {
    /// `null`: from the first key.
    from: Option<KeyJson>,
    /// `null`: to the end (excluded otherwise).
    to: Option<KeyJson>,
    page: u64,
    reason: String,
}

#[derive(Serialize)]
struct RenamedJson {
    id: u32,
    name: String,
}

#[derive(Serialize)]
struct NoteJson {
    segment: u64,
    pos: u64,
    what: String,
    loses_data: bool,
}

impl MetaJson {
    fn new(m: &SalvageMeta) -> MetaJson {
        MetaJson {
            slot: m.slot,
            generation: m.generation,
            checkpoint_lsn: m.checkpoint_lsn,
            reach_lsn: m.reach_lsn,
            page_size_bytes: m.page_size,
            page_count: m.page_count,
        }
    }
}

fn key_json(r: &SalvageReport, full: &[u8]) -> KeyJson {
    let (table, key) = r.split_key(full);
    KeyJson {
        table,
        key: std::str::from_utf8(key).ok().map(str::to_owned),
        key_hex: encode_hex(key),
    }
}

impl Json {
    fn new(r: &SalvageReport) -> Json {
        let (kind, lsn, reason) = match &r.journal_stop {
            JournalStop::Undecodable { lsn, reason } => ("undecodable", *lsn, Some(reason.clone())),
            JournalStop::Missing(lsn) => ("missing", *lsn, None),
            _ => ("other", r.last_lsn + 1, None),
        };
        Json {
            store: r.from.display().to_string(),
            to: r.to.display().to_string(),
            status: if r.lost_anything() {
                "losses"
            } else {
                "complete"
            },
            meta: MetaJson::new(&r.meta),
            meta_choice: choice_text(&r.meta_choice).1,
            newer_damaged_pages: match &r.meta_choice {
                MetaChoice::WholeTree {
                    newer_damaged_pages,
                } => newer_damaged_pages.clone(),
                _ => Vec::new(),
            },
            other_meta: r.other_meta.as_ref().map(MetaJson::new),
            other_meta_error: r.other_meta_error.clone(),
            last_lsn: r.last_lsn,
            journal_records: r.journal_records,
            journal_stop: StopJson { kind, lsn, reason },
            highest_lsn_seen: r.highest_lsn_seen,
            lost_lsns: r.lost_lsns.map(|(first, last)| LsnRange { first, last }),
            lost_records_found: r.lost_records_found,
            lost_changes: r
                .lost_changes
                .iter()
                .map(|c| ChangeJson {
                    lsn: c.lsn,
                    kind: kind_text(c.kind),
                    table: c.table.clone(),
                    key: std::str::from_utf8(&c.key).ok().map(str::to_owned),
                    key_hex: encode_hex(&c.key),
                })
                .collect(),
            lost_changes_omitted: r.lost_changes_omitted,
            unreachable: r
                .unreachable
                .iter()
                .map(|u| RangeJson {
                    from: u.from.as_deref().map(|k| key_json(r, k)),
                    to: u.to.as_deref().map(|k| key_json(r, k)),
                    page: u.page,
                    reason: u.reason.clone(),
                })
                .collect(),
            pages_read: r.pages_read,
            tables: r.tables,
            entries: r.entries,
            renamed_tables: r
                .renamed_tables
                .iter()
                .map(|t| RenamedJson {
                    id: t.id,
                    name: t.name.clone(),
                })
                .collect(),
            ignored_keys: r.ignored_keys,
            journal_notes: r
                .journal_notes
                .iter()
                .map(|n| NoteJson {
                    segment: n.segment,
                    pos: n.pos,
                    what: n.what.clone(),
                    loses_data: n.loses_data,
                })
                .collect(),
        }
    }
}
