//! What [`super::super::Database::salvage`] reports: where it started, how
//! far it got, what it wrote, and exactly what it could not recover.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::super::read::PREFIX;
use crate::btree::PageNo;
use crate::journal::Lsn;

/// A meta page of the damaged store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SalvageMeta {
    /// The slot (page) it was read from: 0 or 1.
    pub slot: u8,
    /// Its generation (checkpoints ever taken when it was written).
    pub generation: u64,
    /// Every commit up to this LSN is in its tree.
    pub checkpoint_lsn: Lsn,
    /// The data file's page size in bytes.
    pub page_size: usize,
    /// Pages in the data file, as it counts them.
    pub page_count: u64,
    /// The last LSN its checkpoint and the journal's consecutive records
    /// after it reach: what salvage starting from it would recover.
    pub reach_lsn: Lsn,
}

/// Why salvage started from the meta page it did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MetaChoice {
    /// The other meta page is not valid.
    OnlyValid,
    /// With the journal's records after its checkpoint, it reaches a
    /// higher LSN than the other.
    ReachesFurther,
    /// Both reach the same LSN, and this one is the newer.
    Newer,
    /// Both reach the same LSN, the newer one's tree has pages that fail
    /// their checks and this one's (the older) reads whole: from it, with
    /// the journal since its checkpoint, nothing is lost.
    WholeTree {
        /// The newer tree's pages that failed.
        newer_damaged_pages: Vec<PageNo>,
    },
    /// Neither meta page is valid, and the journal holds every commit from
    /// LSN 1: salvage replays it onto an empty tree (the meta reported is
    /// that empty tree's, with the default page size).
    JournalFromTheStart,
}

/// Why salvage took no journal record past [`SalvageReport::last_lsn`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JournalStop {
    /// No record with this LSN (and a salt that continues its epoch) was
    /// found anywhere in the journal: the journal's end, or a gap when
    /// [`SalvageReport::lost_lsns`] says higher LSNs were seen.
    Missing(Lsn),
    /// The record with this LSN was found and its checksum holds, but its
    /// contents are not a transaction the store can apply (written so, or
    /// corrupted before its checksum was computed). Nothing after it is
    /// applied: a later commit may depend on it.
    Undecodable {
        /// The record's LSN.
        lsn: Lsn,
        /// What is wrong with it.
        reason: String,
    },
}

/// What one change of a lost journal record did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum LostChangeKind {
    /// Set the key to a value.
    Put,
    /// Removed the key.
    Delete,
    /// Created the table (its catalog entry).
    CreateTable,
    /// Dropped the table: its name's catalog entry, or all its keys.
    DropTable,
}

/// A change made by a journal record that lies past the first gap: its
/// checksum holds, but salvage could not apply it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostChange {
    /// The record's LSN.
    pub lsn: Lsn,
    /// What it did.
    pub kind: LostChangeKind,
    /// The table: its name when known, else `table #ID`.
    pub table: String,
    /// The key (empty for a table's creation or drop).
    pub key: Vec<u8>,
}

/// A range of keys the data file's tree covered through a page that could
/// not be read: its entries are lost unless a journal record salvage
/// applied rewrote them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreachableRange {
    /// The first full key of the range (table id, 4 bytes big-endian,
    /// then the key), included; `None`: from the first key.
    pub from: Option<Vec<u8>>,
    /// The full key the range ends before; `None`: to the last key.
    pub to: Option<Vec<u8>>,
    /// The page that failed (the first page of a value's overflow chain
    /// when one value is lost).
    pub page: PageNo,
    /// Why the page was not accepted.
    pub reason: String,
}

/// Damage salvage saw in the journal's files, beyond the records it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalNote {
    /// The segment's sequence number (0 when not about one segment).
    pub segment: u64,
    /// The byte offset in that segment file.
    pub pos: u64,
    /// What was found.
    pub what: String,
    /// Whether the damage proves bytes of the journal gone (a segment file
    /// cut short): records may be lost that no LSN range can name.
    pub loses_data: bool,
}

/// A table whose keys were found without a usable name in the catalog
/// (its catalog entry unreachable, or not a valid name): written under a
/// name salvage made up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenamedTable {
    /// The table's id in the damaged store.
    pub id: u32,
    /// The name it has in the new store.
    pub name: String,
}

/// What [`super::super::Database::salvage`] did, and what it could not
/// recover. Everything up to [`SalvageReport::last_lsn`] that the data
/// file's tree and the journal hold is in the new store; the fields from
/// `lost_lsns` on say what is not.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SalvageReport {
    /// The damaged store, read and left unchanged.
    pub from: PathBuf,
    /// The new store written.
    pub to: PathBuf,
    /// The meta page whose tree salvage started from.
    pub meta: SalvageMeta,
    /// Why that one.
    pub meta_choice: MetaChoice,
    /// The other meta page, when valid.
    pub other_meta: Option<SalvageMeta>,
    /// Why the other meta page is not valid, when it is not.
    pub other_meta_error: Option<String>,
    /// The last LSN recovered: the new store holds every commit up to it
    /// (over the data file's reachable entries).
    pub last_lsn: Lsn,
    /// Journal records applied on top of the data file: those from
    /// `meta.checkpoint_lsn + 1` to `last_lsn`.
    pub journal_records: u64,
    /// Why no record after `last_lsn` was applied.
    pub journal_stop: JournalStop,
    /// The highest LSN any intact record in the journal carries.
    pub highest_lsn_seen: Option<Lsn>,
    /// The journal records lost: from the first not recovered to the
    /// highest LSN seen anywhere in the journal (inclusive). `None` when
    /// no record past `last_lsn` was seen.
    pub lost_lsns: Option<(Lsn, Lsn)>,
    /// Records in `lost_lsns` found intact (they lie past a gap, or past
    /// an undecodable record).
    pub lost_records_found: u64,
    /// The changes those records made, in LSN order, at most
    /// [`super::SalvageOptions::max_lost_changes`] of them.
    pub lost_changes: Vec<LostChange>,
    /// Changes of those records not listed in `lost_changes`.
    pub lost_changes_omitted: u64,
    /// Key ranges of the data file behind pages that could not be read.
    pub unreachable: Vec<UnreachableRange>,
    /// Tree pages read from the data file.
    pub pages_read: u64,
    /// Tables in the new store.
    pub tables: u64,
    /// Entries written to the new store (the catalog's not counted).
    pub entries: u64,
    /// Tables written under a made-up name.
    pub renamed_tables: Vec<RenamedTable>,
    /// Entries found whose key is too short to name a table: not written.
    pub ignored_keys: u64,
    /// Damage seen in the journal's files.
    pub journal_notes: Vec<JournalNote>,
    /// The damaged store's table names by id, as salvaged (and as the
    /// lost records name them), for reading full keys.
    pub table_names: BTreeMap<u32, String>,
}

impl SalvageReport {
    /// Whether anything was lost: journal records past a gap or an
    /// undecodable record, keys behind unreadable pages, table names, or
    /// a journal file cut short. `false` means the new store holds
    /// everything the damaged store's files prove was committed.
    pub fn lost_anything(&self) -> bool {
        self.lost_lsns.is_some()
            || !self.unreachable.is_empty()
            || !self.renamed_tables.is_empty()
            || self.ignored_keys > 0
            || self.journal_notes.iter().any(|n| n.loses_data)
    }

    /// A full key as (table, key): the table's name when known, else
    /// `table #ID`; a key too short to hold a table id is its own table
    /// part.
    pub fn split_key<'k>(&self, full: &'k [u8]) -> (String, &'k [u8]) {
        match table_id(full) {
            Some(id) => (self.table_name(id), &full[PREFIX..]),
            None => (String::from("(no table)"), full),
        }
    }

    /// The name of table `id`, or `table #ID`.
    pub fn table_name(&self, id: u32) -> String {
        name_or_id(&self.table_names, id)
    }
}

/// The table id a full key starts with.
pub(super) fn table_id(full: &[u8]) -> Option<u32> {
    let id: [u8; PREFIX] = full.get(..PREFIX)?.try_into().ok()?;
    Some(u32::from_be_bytes(id))
}

/// The name of table `id` in `names`, or `table #ID`.
pub(super) fn name_or_id(names: &BTreeMap<u32, String>, id: u32) -> String {
    match (id, names.get(&id)) {
        (0, _) => "the catalog".into(),
        (_, Some(name)) => name.clone(),
        (_, None) => format!("table #{id}"),
    }
}
