//! Which meta page salvage starts from. Each valid meta, with the
//! journal's run of consecutive records after its checkpoint, recovers
//! the commits up to some LSN: the one that reaches the highest is taken.
//! When both reach as far, both give the state at that LSN, and the newer
//! is taken — unless its tree has pages that fail their checks and the
//! older one's tree reads whole (a page the last checkpoint wrote is
//! damaged; the older tree holds its predecessor, which the checkpoint
//! did not touch, and the journal since the older checkpoint redoes what
//! changed): then the older one, which loses nothing.

use std::convert::Infallible;
use std::path::Path;

use super::super::error::{DbError, Result};
use super::super::meta::Meta;
use super::report::{MetaChoice, SalvageMeta};
use super::source::Source;
use super::tree::Walk;
use super::{SalvageOptions, SalvageProgress, PROGRESS_EVERY_ENTRIES};
use crate::btree::{Location, PageNo, PageSize};
use crate::journal::salvage::{JournalSalvage, Run};

/// A meta page salvage may start from, and the journal's run after it.
pub(super) struct Start {
    pub meta: SalvageMeta,
    pub tree: Meta,
    pub run: Run,
    /// Whether the journal belongs to this data file (its records apply).
    pub journal_applies: bool,
}

impl Start {
    /// The tree's root (none: an empty tree).
    pub(super) fn root(&self) -> Option<Location> {
        (self.tree.root.page != 0).then_some(Location {
            page: self.tree.root.page,
            crc: self.tree.root.crc,
        })
    }
}

/// The meta page taken, the other one, and why.
pub(super) struct Choice {
    pub start: Start,
    /// The other meta, when valid.
    pub other: Option<SalvageMeta>,
    /// Why the other meta is not valid, when it is not.
    pub other_error: Option<String>,
    pub why: MetaChoice,
}

/// Take the meta page to start from (see the module's comment).
pub(super) fn choose(
    from: &Path,
    source: &Source,
    journal: &JournalSalvage,
    options: &SalvageOptions,
) -> Result<Choice> {
    let mut starts = candidates(source, journal);
    if starts.is_empty() {
        if let Some(start) = from_nothing(journal) {
            let [e0, e1] = source
                .metas
                .each_ref()
                .map(|m| m.err().map(|e| e.to_string()).unwrap_or_default());
            return Ok(Choice {
                start,
                other: None,
                other_error: Some(format!("page 0: {e0}; page 1: {e1}")),
                why: MetaChoice::JournalFromTheStart,
            });
        }
    }
    let Some(mut start) = starts.pop() else {
        let [e0, e1] = source
            .metas
            .each_ref()
            .map(|m| m.err().map(|e| e.to_string()).unwrap_or_default());
        return Err(DbError::Corrupt {
            path: from.to_path_buf(),
            reason: format!(
                "neither meta page is valid (page 0: {e0}; page 1: {e1}): salvage has no tree to \
                 start from"
            ),
        });
    };
    let other_error = source.metas[1 - usize::from(start.meta.slot)]
        .err()
        .map(|e| e.to_string());
    let Some(mut other) = starts.pop() else {
        return Ok(Choice {
            start,
            other: None,
            other_error,
            why: MetaChoice::OnlyValid,
        });
    };
    let mut why = MetaChoice::ReachesFurther;
    if other.meta.reach_lsn == start.meta.reach_lsn {
        why = MetaChoice::Newer;
        let damaged = damaged_pages(source, &start, options)?;
        if !damaged.is_empty() && damaged_pages(source, &other, options)?.is_empty() {
            std::mem::swap(&mut start, &mut other);
            why = MetaChoice::WholeTree {
                newer_damaged_pages: damaged,
            };
        }
    }
    Ok(Choice {
        start,
        other: Some(other.meta),
        other_error,
        why,
    })
}

/// Neither meta page is valid (a data file cut short or overwritten), but
/// the journal holds the store's commits from its very first, LSN 1:
/// replayed onto an empty tree they give the store back. The page size is
/// the default's (the data file no longer says which it was).
fn from_nothing(journal: &JournalSalvage) -> Option<Start> {
    let store_id = journal.store_id?;
    let run = journal.follow(0);
    run.records.first()?;
    let page_size = crate::btree::DEFAULT_PAGE_BYTES;
    let tree = Meta {
        page_size: page_size as u32,
        generation: 0,
        checkpoint_lsn: 0,
        root: Default::default(),
        page_count: crate::btree::FIRST_TREE_PAGE,
        freelist: Default::default(),
        free_pages: 0,
        journal_id: store_id,
    };
    Some(Start {
        meta: SalvageMeta {
            slot: 0,
            generation: 0,
            checkpoint_lsn: 0,
            page_size,
            page_count: tree.page_count,
            reach_lsn: run.next_lsn - 1,
        },
        tree,
        run,
        journal_applies: true,
    })
}

/// The valid metas, each with its run, the best last: the highest reach,
/// then the highest generation.
fn candidates(source: &Source, journal: &JournalSalvage) -> Vec<Start> {
    let mut starts: Vec<Start> = Vec::new();
    for (slot, m) in source.metas.iter().enumerate() {
        let Ok(m) = m else { continue };
        let applies = journal.store_id.is_none_or(|id| id == m.journal_id);
        let run = if applies {
            journal.follow(m.checkpoint_lsn)
        } else {
            Run {
                records: Vec::new(),
                next_lsn: m.checkpoint_lsn + 1,
            }
        };
        starts.push(Start {
            meta: SalvageMeta {
                slot: slot as u8,
                generation: m.generation,
                checkpoint_lsn: m.checkpoint_lsn,
                page_size: m.page_size as usize,
                page_count: m.page_count,
                reach_lsn: run.next_lsn - 1,
            },
            tree: *m,
            run,
            journal_applies: applies,
        });
    }
    starts.sort_by_key(|s| (s.meta.reach_lsn, s.meta.generation));
    starts
}

/// The pages of `start`'s tree that fail their checks, from a walk that
/// copies nothing.
fn damaged_pages(source: &Source, start: &Start, options: &SalvageOptions) -> Result<Vec<PageNo>> {
    let ps = PageSize::new(start.meta.page_size)
        .map_err(|e| DbError::BadOptions(format!("the meta page's page size: {e}")))?;
    let mut walk = Walk::new(source.data.as_ref(), ps, start.tree.page_count);
    let mut entries = 0u64;
    let mut count = |_: &[u8], _: &[u8], pages_read: u64| -> std::result::Result<(), Infallible> {
        entries += 1;
        if entries % PROGRESS_EVERY_ENTRIES == 0 {
            options.report_progress(SalvageProgress::Comparing { pages_read });
        }
        Ok(())
    };
    let Ok(()) = walk.run(start.root(), &mut count);
    Ok(walk.unreachable.iter().map(|u| u.page).collect())
}
