//! A way out for a damaged store: [`super::Database::salvage`] writes a
//! new, consistent store holding every commit the damaged one's files
//! prove whole, and reports exactly what it could not recover. The
//! damaged store is only read. `docs/store.md` ("A damaged store:
//! salvage") and `docs/salvage.md` are the user's account; the steps:
//!
//! 1. `source`: open the store's files for reading, read both meta slots.
//! 2. `journal::salvage`: every intact record of the journal, and for each
//!    valid meta the run of consecutive LSNs after its checkpoint; take
//!    the meta whose run reaches furthest (a tie: the newer).
//! 3. `overlay`: decode the run's records and apply them in LSN order
//!    into an overlay; stop at the first that does not decode.
//! 4. `tree` and `load`: walk the meta's tree (bounded, skipping pages
//!    that fail their checks), merge the overlay in key order, and write
//!    the result into a new store through the public API, in bounded
//!    transactions; checkpoint, check, close.
//! 5. `report`: the lost LSNs (from the first gap to the highest LSN seen)
//!    and what the readable ones changed; the unreachable key ranges.

mod choose;
mod load;
mod overlay;
mod report;
mod source;
mod tree;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

pub use report::{
    JournalNote, JournalStop, LostChange, LostChangeKind, MetaChoice, RenamedTable, SalvageMeta,
    SalvageReport, UnreachableRange,
};

use super::error::{DbError, Result};
use super::files::JOURNAL_DIR;
use super::record;
use super::Database;
use crate::btree::{Location, PageSize};
use crate::io::{RealVfs, Vfs};
use crate::journal::salvage::{JournalSalvage, Note, PayloadReader};
use crate::journal::{JournalError, JournalOptions, Lsn, DEFAULT_SEGMENT_SIZE_BYTES};
use choose::{Choice, Start};
use load::{Loaded, Loader};
use overlay::Overlay;
pub(super) use source::inside;
use tree::Walk;

/// Where a salvage is: reported to [`SalvageOptions::progress`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SalvageProgress {
    /// Reading the journal's segment files.
    Journal {
        /// Files read so far.
        segments_read: usize,
        /// Files in the journal directory.
        segments: usize,
    },
    /// Walking the data file's tree and writing the new store.
    Copying {
        /// Tree and overflow pages read so far.
        pages_read: u64,
        /// Entries written so far.
        entries: u64,
    },
    /// Walking a meta page's tree without copying it: when both meta
    /// pages reach as far, to find whether the newer one's tree reads
    /// whole.
    Comparing {
        /// Tree and overflow pages read so far.
        pages_read: u64,
    },
    /// Checkpointing and checking the new store.
    Checking,
}

/// What [`SalvageOptions::progress`] calls.
pub type SalvageProgressFn = Arc<dyn Fn(&SalvageProgress) + Send + Sync>;

/// How [`Database::salvage`] works. `SalvageOptions::default()` suits
/// most stores.
#[derive(Clone)]
pub struct SalvageOptions {
    /// The file system (the damaged store is only read through it).
    pub vfs: Arc<dyn Vfs>,
    /// The new store's journal segment size. `None`: the damaged store's
    /// (from a valid segment header; else 64 MiB), so that every value it
    /// held fits a transaction of the new one.
    pub segment_size_bytes: Option<u64>,
    /// The most record bytes of one transaction writing the new store
    /// (never more than its journal takes in one record).
    pub batch_bytes: usize,
    /// The most entries of one transaction writing the new store.
    pub batch_entries: usize,
    /// The most changes of lost journal records listed in the report.
    pub max_lost_changes: usize,
    /// Called as the salvage goes (from the calling thread).
    pub progress: Option<SalvageProgressFn>,
}

impl Default for SalvageOptions {
    fn default() -> Self {
        SalvageOptions {
            vfs: RealVfs::shared(),
            segment_size_bytes: None,
            batch_bytes: 64 << 20,
            batch_entries: 100_000,
            max_lost_changes: 1000,
            progress: None,
        }
    }
}

impl std::fmt::Debug for SalvageOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SalvageOptions")
            .field("segment_size_bytes", &self.segment_size_bytes)
            .field("batch_bytes", &self.batch_bytes)
            .field("batch_entries", &self.batch_entries)
            .field("max_lost_changes", &self.max_lost_changes)
            .finish_non_exhaustive()
    }
}

impl SalvageOptions {
    pub(super) fn report_progress(&self, p: SalvageProgress) {
        if let Some(f) = &self.progress {
            f(&p);
        }
    }
}

/// Entries walked between two progress reports.
const PROGRESS_EVERY_ENTRIES: u64 = 10_000;

impl Database {
    /// Copy what a damaged store's files prove was committed into a new
    /// store at `to` (a new or empty directory), and report what could
    /// not be recovered. The store at `from` is only read (refused while
    /// another process has it open). The new store holds the tree of the
    /// meta page that, with the journal's consecutive records after its
    /// checkpoint, reaches the highest LSN, every entry reachable through
    /// pages that pass their checks, and those records applied in LSN
    /// order up to the first gap. See `docs/store.md`, "A damaged store:
    /// salvage".
    pub fn salvage(
        from: impl AsRef<Path>,
        to: impl AsRef<Path>,
        options: SalvageOptions,
    ) -> Result<SalvageReport> {
        run(from.as_ref(), to.as_ref(), options)
    }
}

/// [`Database::salvage`].
pub(super) fn run(from: &Path, to: &Path, options: SalvageOptions) -> Result<SalvageReport> {
    let vfs = Arc::clone(&options.vfs);
    let source = source::open(vfs.as_ref(), from)?;
    source::check_target(vfs.as_ref(), from, to)?;
    let (journal, mut notes) = read_journal(vfs.as_ref(), from, &options)?;
    let Choice {
        start,
        other,
        other_error,
        why,
    } = choose::choose(from, &source, &journal, &options)?;
    notes.extend(journal.notes.iter().map(|n| note(n, &journal, &start)));
    if !start.journal_applies {
        notes.push(foreign_journal(&journal, &start));
    }
    let ps = PageSize::new(start.meta.page_size)
        .map_err(|e| DbError::BadOptions(format!("the meta page's page size: {e}")))?;
    let mut reader = PayloadReader::default();
    let replay = replay(vfs.as_ref(), &journal, &start, ps, &mut reader)?;
    let (loaded, walk) = write_new(
        &vfs,
        to,
        &source,
        &start,
        &journal,
        replay.overlay,
        &options,
    )?;
    let highest = start
        .journal_applies
        .then(|| journal.highest_lsn())
        .flatten();
    let mut report = SalvageReport {
        from: from.to_path_buf(),
        to: to.to_path_buf(),
        meta: start.meta,
        meta_choice: why,
        other_meta: other,
        other_meta_error: other_error,
        last_lsn: replay.last_lsn,
        journal_records: replay.applied,
        journal_stop: replay.stop,
        highest_lsn_seen: highest,
        lost_lsns: highest
            .filter(|&h| h > replay.last_lsn)
            .map(|h| (replay.last_lsn + 1, h)),
        lost_records_found: 0,
        lost_changes: Vec::new(),
        lost_changes_omitted: 0,
        unreachable: walk.unreachable,
        pages_read: walk.pages_read,
        tables: loaded.tables,
        entries: loaded.entries,
        renamed_tables: loaded.renamed,
        ignored_keys: loaded.ignored_keys,
        journal_notes: notes,
        table_names: loaded.table_names,
    };
    if report.lost_lsns.is_some() {
        list_lost(
            vfs.as_ref(),
            &journal,
            &mut reader,
            ps,
            &options,
            &mut report,
        )?;
    }
    Ok(report)
}

/// The note that the journal belongs to another data file than `start`'s.
fn foreign_journal(journal: &JournalSalvage, start: &Start) -> JournalNote {
    JournalNote {
        segment: 0,
        pos: 0,
        what: format!(
            "the journal (store id {:#x}) does not belong to this data file (store id {:#x}): \
             none of its records is applied",
            journal.store_id.unwrap_or_default(),
            start.tree.journal_id
        ),
        loses_data: true,
    }
}

/// Create the new store and fill it: `start`'s tree walked, the overlay
/// merged over it; then checkpoint, check and close it. Returns what was
/// written and the walk (its pages read and unreachable ranges).
fn write_new<'s>(
    vfs: &Arc<dyn Vfs>,
    to: &Path,
    source: &'s source::Source,
    start: &Start,
    journal: &JournalSalvage,
    overlay: Overlay,
    options: &SalvageOptions,
) -> Result<(Loaded, Walk<'s>)> {
    let ps = PageSize::new(start.meta.page_size)
        .map_err(|e| DbError::BadOptions(format!("the meta page's page size: {e}")))?;
    let db = create_target(vfs, to, start, journal, options)?;
    let mut loader = Loader::new(&db, options.batch_entries, options.batch_bytes);
    let mut walk = Walk::new(source.data.as_ref(), ps, start.tree.page_count);
    copy(&mut walk, start.root(), overlay, &mut loader, options)?;
    let loaded = loader.finish()?;
    options.report_progress(SalvageProgress::Checking);
    verify(&db, to, &loaded)?;
    db.close()?;
    Ok((loaded, walk))
}

/// Read the journal; a missing or empty journal directory is an empty
/// journal, noted as damage. (The damage the journal's files show is
/// noted once the meta page is chosen: see [`note`].)
fn read_journal(
    vfs: &dyn Vfs,
    from: &Path,
    options: &SalvageOptions,
) -> Result<(JournalSalvage, Vec<JournalNote>)> {
    let dir = from.join(JOURNAL_DIR);
    let mut progress = |segments_read, segments| {
        options.report_progress(SalvageProgress::Journal {
            segments_read,
            segments,
        })
    };
    let missing = |what: &str| JournalNote {
        segment: 0,
        pos: 0,
        what: format!("{what}: commits after the checkpoint, if there were any, are lost"),
        loses_data: true,
    };
    if !vfs.exists(&dir)? {
        let notes = vec![missing("the journal directory is missing")];
        return Ok((JournalSalvage::default(), notes));
    }
    match JournalSalvage::read(vfs, &dir, &mut progress) {
        Ok(j) => Ok((j, Vec::new())),
        Err(JournalError::NotAJournal(_)) => Ok((
            JournalSalvage::default(),
            vec![missing("the journal directory holds no segment file")],
        )),
        Err(e) => Err(e.into()),
    }
}

/// The report's note of damage in the journal's files. A file cut short
/// loses data — unless the run salvage applies starts in a later file:
/// a journal's records follow each other in file order, so every record
/// the cut file held, cut or not, lies below the run's first, and the
/// checkpoint the run starts from covers it (a released segment cut
/// short loses nothing).
fn note(n: &Note, journal: &JournalSalvage, start: &Start) -> JournalNote {
    let first = start.run.records.first();
    let covered = n.cut_short
        && start.journal_applies
        && first.is_some_and(|r| journal.segments[r.segment].seq > n.seq);
    let mut what = n.what.clone();
    if covered {
        what += &format!(
            ", but every record it held lies below lsn {}: the checkpoint (lsn {}) covers them",
            start.meta.checkpoint_lsn + 1,
            start.meta.checkpoint_lsn
        );
    }
    JournalNote {
        segment: n.seq,
        pos: n.pos,
        what,
        loses_data: n.loses_data && !covered,
    }
}

/// The journal's run decoded and applied.
struct Replay {
    overlay: Overlay,
    last_lsn: Lsn,
    applied: u64,
    stop: JournalStop,
}

/// Decode the run's records in LSN order into an overlay, up to the first
/// whose payload is not a transaction the store can apply.
fn replay(
    vfs: &dyn Vfs,
    journal: &JournalSalvage,
    start: &Start,
    ps: PageSize,
    reader: &mut PayloadReader,
) -> Result<Replay> {
    let mut r = Replay {
        overlay: Overlay::default(),
        last_lsn: start.meta.checkpoint_lsn,
        applied: 0,
        stop: JournalStop::Missing(start.run.next_lsn),
    };
    for found in &start.run.records {
        let decoded = reader.payload(vfs, journal, found)?.and_then(|payload| {
            let ops = record::decode(&payload, ps.max_key_bytes())
                .map_err(|b| format!("byte {}: {}", b.at, b.reason))?;
            r.overlay.apply(&ops);
            Ok(())
        });
        if let Err(reason) = decoded {
            r.stop = JournalStop::Undecodable {
                lsn: found.lsn,
                reason,
            };
            break;
        }
        r.last_lsn = found.lsn;
        r.applied += 1;
    }
    Ok(r)
}

/// Create the new store: the damaged one's page size, and its journal's
/// largest segment size (the one its headers record, or its largest
/// segment's) unless the options give one.
fn create_target(
    vfs: &Arc<dyn Vfs>,
    to: &Path,
    start: &Start,
    journal: &JournalSalvage,
    options: &SalvageOptions,
) -> Result<Database> {
    let segment_size_bytes = options.segment_size_bytes.unwrap_or_else(|| {
        let largest_file = journal.segments.iter().filter_map(|s| s.segment_size).max();
        journal
            .largest_segment_size
            .max(largest_file)
            .unwrap_or(DEFAULT_SEGMENT_SIZE_BYTES)
    });
    Database::builder()
        .vfs(Arc::clone(vfs))
        .page_size(start.meta.page_size)
        .journal(JournalOptions {
            segment_size_bytes,
            ..JournalOptions::default()
        })
        .background_checkpoints(false)
        .create(to)
}

/// Walk the tree from `root` and merge the overlay over it, in key
/// order, into the loader: an overlay key replaces the tree's (or removes
/// it), a dropped table hides the tree's keys of it.
fn copy(
    walk: &mut Walk<'_>,
    root: Option<Location>,
    overlay: Overlay,
    loader: &mut Loader<'_>,
    options: &SalvageOptions,
) -> Result<()> {
    let Overlay { keys, dropped } = overlay;
    let hidden = Overlay {
        keys: BTreeMap::new(),
        dropped,
    };
    let mut pending = keys.into_iter().peekable();
    let mut last_progress = 0u64;
    let mut emit = |key: &[u8], value: &[u8], pages_read: u64| -> Result<()> {
        while let Some((k, v)) = pending.next_if(|(k, _)| k.as_slice() < key) {
            if let Some(v) = v {
                loader.put(&k, &v)?;
            }
        }
        match pending.next_if(|(k, _)| k.as_slice() == key) {
            Some((k, Some(v))) => loader.put(&k, &v)?,
            Some((_, None)) => {}
            None if hidden.hides(key) => {}
            None => loader.put(key, value)?,
        }
        if loader.entries >= last_progress + PROGRESS_EVERY_ENTRIES {
            last_progress = loader.entries;
            options.report_progress(SalvageProgress::Copying {
                pages_read,
                entries: loader.entries,
            });
        }
        Ok(())
    };
    walk.run(root, &mut emit)?;
    for (k, v) in pending {
        if let Some(v) = v {
            loader.put(&k, &v)?;
        }
    }
    options.report_progress(SalvageProgress::Copying {
        pages_read: walk.pages_read,
        entries: loader.entries,
    });
    Ok(())
}

/// Checkpoint the new store and check it: every page, and as many
/// entries as were written (with the catalog's: one per table, and its
/// next id).
fn verify(db: &Database, to: &Path, loaded: &Loaded) -> Result<()> {
    db.checkpoint()?;
    let check = db.check()?;
    let catalog = loaded.tables + u64::from(loaded.tables > 0);
    if check.disk.entries != loaded.entries + catalog {
        return Err(DbError::Corrupt {
            path: to.to_path_buf(),
            reason: format!(
                "salvage wrote {} entries in {} tables, but the new store's tree holds {} \
                 entries with the catalog's (a bug in salvage)",
                loaded.entries, loaded.tables, check.disk.entries
            ),
        });
    }
    Ok(())
}

/// The lost records that are readable, and the changes they made (at
/// most `max_lost_changes` listed).
fn list_lost(
    vfs: &dyn Vfs,
    journal: &JournalSalvage,
    reader: &mut PayloadReader,
    ps: PageSize,
    options: &SalvageOptions,
    report: &mut SalvageReport,
) -> Result<()> {
    let mut names = std::mem::take(&mut report.table_names);
    for found in journal.found_above(report.last_lsn) {
        report.lost_records_found += 1;
        let Ok(payload) = reader.payload(vfs, journal, &found)? else {
            continue;
        };
        let Ok(ops) = record::decode(&payload, ps.max_key_bytes()) else {
            continue;
        };
        for change in overlay::describe(&ops, found.lsn, &mut names) {
            if report.lost_changes.len() < options.max_lost_changes {
                report.lost_changes.push(change);
            } else {
                report.lost_changes_omitted += 1;
            }
        }
    }
    report.table_names = names;
    Ok(())
}
