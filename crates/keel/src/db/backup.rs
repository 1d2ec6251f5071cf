//! A consistent copy of a store taken while it is in use
//! ([`Database::backup`]), and the bounded transactions such a copy is
//! written in ([`BulkWriter`], which `keel db load` uses too).
//!
//! The copy is *logical*: one read transaction's snapshot, every table and
//! every entry of it, written into a fresh store through the public write
//! path. So the copy holds exactly the commits that snapshot shows — every
//! commit acknowledged before `backup` was called, and a prefix of those
//! that arrive during it (readers only ever see durable commits, in LSN
//! order) — and nothing that was not durable. Its data file is compact:
//! written in key order, with no free pages. What it costs: the source
//! store reads every entry once (through its page cache), and the snapshot
//! held meanwhile keeps the pages it reads from being reused (the source's
//! data file may grow while commits go on) and may expire under
//! `reader_pinned_bytes` ([`DbError::SnapshotTooOld`]); the copy writes
//! every entry once to its journal and once to its data file, then reads
//! its data file back to check it.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::Ordering;

use super::error::{DbError, Result};
use super::files::DATA_FILE;
use super::read::{ReadTxn, PREFIX};
use super::record::PUT_FIXED_BYTES;
use super::{salvage, typed, Database, WriteTxn};
use crate::io::{OpenMode, OpenOptions};
use crate::journal::{JournalOptions, Lsn};

/// The most entries a [`BulkWriter`] puts in one transaction by default.
pub const BULK_TXN_ENTRIES: usize = 10_000;

/// The most journal record bytes a [`BulkWriter`] puts in one transaction
/// by default (less when the store's journal takes less in one record:
/// [`super::Limits::max_transaction_bytes`]).
pub const BULK_TXN_BYTES: usize = 64 << 20;

/// Journal record bytes a table's first use in a transaction may add (the
/// catalog's entries, should the table need creating), beside its name:
/// the bound `WriteTxn` itself counts.
const TABLE_RECORD_BYTES: usize = 2 * (PUT_FIXED_BYTES + PREFIX + 4);

/// A [`BulkWriter`]'s first transaction holds about this many pages of
/// record, and is checkpointed at once. Why: a checkpoint folds its
/// changes into a tree whose root is a leaf (or nothing) one by one, and
/// every leaf that fills splits in two even halves, so keys arriving in
/// order leave every leaf half full; into a tree whose root is a branch,
/// it merges each run of ascending keys into its leaf and cuts that into
/// full pages. Four pages of entries make the root a branch. Measured
/// (`keel db compact` of 5,000 entries of 114 bytes, 4 KiB pages): a data
/// file of 275 pages without this (268 leaves, half full), 163 with it
/// (155 leaves, 32 entries each).
const FIRST_TXN_PAGES: usize = 4;

/// [`Database::backup_with_progress`] reports after every this many
/// entries copied.
const PROGRESS_EVERY_ENTRIES: u64 = 10_000;

/// Writes many entries into a store in bounded transactions: each commits
/// once it holds [`BULK_TXN_ENTRIES`] entries or about [`BULK_TXN_BYTES`]
/// of journal record (or the bounds set), and a checkpoint runs on the
/// writing thread whenever the store's own checkpoint triggers
/// ([`super::Options::checkpoint_journal_bytes`],
/// [`super::Options::checkpoint_dirty_bytes`]) are passed, so memory stays
/// bounded without a background checkpointer. The first transaction is
/// kept to a few pages and checkpointed at once, so that entries written
/// in key order fill their pages (see `FIRST_TXN_PAGES` in the source).
/// Made by [`Database::bulk_writer`].
///
/// Not atomic: the transactions committed stay committed if a later one
/// fails, and the entries not yet committed are dropped with the writer
/// (call [`BulkWriter::finish`]). Every commit is
/// [`super::Durability::Immediate`].
pub struct BulkWriter<'d> {
    db: &'d Database,
    txn: Option<WriteTxn>,
    /// Tables the open transaction has used.
    txn_tables: HashSet<String>,
    txn_entries: usize,
    /// An upper bound of the open transaction's record bytes.
    txn_bytes: usize,
    max_entries: usize,
    max_bytes: usize,
    /// Whether the first transaction, kept small, is committed and
    /// checkpointed (see [`FIRST_TXN_PAGES`]).
    primed: bool,
    stats: BulkStats,
    /// A commit failed: its entries are lost, and every later call fails
    /// with this error.
    failed: Option<DbError>,
}

/// What a [`BulkWriter`] committed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BulkStats {
    /// Entries committed.
    pub entries: u64,
    /// Transactions committed.
    pub transactions: u64,
    /// Checkpoints run by the writer.
    pub checkpoints: u64,
}

impl std::fmt::Debug for BulkWriter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BulkWriter")
            .field("pending_entries", &self.txn_entries)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<'d> BulkWriter<'d> {
    fn new(db: &'d Database) -> BulkWriter<'d> {
        BulkWriter {
            db,
            txn: None,
            txn_tables: HashSet::new(),
            txn_entries: 0,
            txn_bytes: 0,
            max_entries: BULK_TXN_ENTRIES,
            max_bytes: BULK_TXN_BYTES.min(db.limits().max_transaction_bytes),
            primed: false,
            stats: BulkStats::default(),
            failed: None,
        }
    }

    /// Commit after at most `n` entries (at least 1).
    pub fn max_entries(mut self, n: usize) -> Self {
        self.max_entries = n.max(1);
        self
    }

    /// Commit before a transaction's record would pass about `bytes`
    /// (never more than the store's journal takes in one record; an entry
    /// larger than this goes alone).
    pub fn max_bytes(mut self, bytes: usize) -> Self {
        self.max_bytes = bytes.min(self.db.limits().max_transaction_bytes).max(1);
        self
    }

    /// Create the table `name` if it does not exist (an empty table is
    /// kept as one).
    pub fn create_table(&mut self, name: &str) -> Result<()> {
        self.make_room(TABLE_RECORD_BYTES + name.len())?;
        self.use_table(name);
        self.txn()?.open_table(name)?;
        Ok(())
    }

    /// Insert `key` with `value` into the table `name` (created if
    /// missing), replacing any value it had.
    pub fn insert(
        &mut self,
        table: &str,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Result<()> {
        let (key, value) = (key.as_ref(), value.as_ref());
        let put = PUT_FIXED_BYTES + PREFIX + key.len() + value.len();
        let first_use = !self.txn_tables.contains(table);
        self.make_room(
            put + if first_use {
                TABLE_RECORD_BYTES + table.len()
            } else {
                0
            },
        )?;
        // A commit to make room starts a transaction the table is new to.
        self.use_table(table);
        self.txn()?.open_table(table)?.insert(key, value)?;
        self.txn_bytes += put;
        self.txn_entries += 1;
        Ok(())
    }

    /// Entries inserted and not committed yet.
    pub fn pending_entries(&self) -> usize {
        self.txn_entries
    }

    /// What was committed so far.
    pub fn stats(&self) -> BulkStats {
        self.stats
    }

    /// Commit what is pending now (nothing when nothing is). After a
    /// failed commit, whose entries are lost, every call fails with its
    /// error.
    pub fn commit(&mut self) -> Result<()> {
        self.refuse_failed()?;
        let entries = std::mem::take(&mut self.txn_entries);
        self.txn_tables.clear();
        self.txn_bytes = 0;
        if let Some(txn) = self.txn.take() {
            if let Err(e) = txn.commit() {
                self.failed = Some(e.clone());
                return Err(e);
            }
            self.stats.transactions += 1;
            self.stats.entries += entries as u64;
            if !self.primed {
                self.primed = true;
                self.db.checkpoint()?;
                self.stats.checkpoints += 1;
                return Ok(());
            }
        }
        let s = &self.db.shared;
        let o = &s.options;
        if s.bytes_since_checkpoint.load(Ordering::Relaxed) >= o.checkpoint_journal_bytes
            || s.dirty_bytes.load(Ordering::Relaxed) >= o.checkpoint_dirty_bytes
        {
            self.db.checkpoint()?;
            self.stats.checkpoints += 1;
        }
        Ok(())
    }

    /// Commit what is pending; what was committed in all.
    pub fn finish(mut self) -> Result<BulkStats> {
        self.commit()?;
        Ok(self.stats)
    }

    fn refuse_failed(&self) -> Result<()> {
        match &self.failed {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Count a table's creation in the open transaction's bound, once.
    fn use_table(&mut self, name: &str) {
        if self.txn_tables.insert(name.to_owned()) {
            self.txn_bytes += TABLE_RECORD_BYTES + name.len();
        }
    }

    /// Commit the open transaction first if `bytes` more would take it
    /// past its bounds.
    fn make_room(&mut self, bytes: usize) -> Result<()> {
        let max_bytes = match self.primed {
            true => self.max_bytes,
            false => self
                .max_bytes
                .min(FIRST_TXN_PAGES * self.db.shared.page_size.bytes()),
        };
        let full = self.txn_entries >= self.max_entries || self.txn_bytes + bytes > max_bytes;
        if self.txn.is_some() && full {
            self.commit()?;
        }
        Ok(())
    }

    fn txn(&mut self) -> Result<&mut WriteTxn> {
        self.refuse_failed()?;
        if self.txn.is_none() {
            self.txn = Some(self.db.begin_write()?);
        }
        Ok(self.txn.as_mut().expect("set above"))
    }
}

/// What [`Database::backup`] copied.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackupReport {
    /// The LSN of the snapshot copied: the copy holds every commit up to
    /// it and none after.
    pub lsn: Lsn,
    /// Tables copied (empty ones included).
    pub tables: u64,
    /// Of those, typed tables whose recorded key and value types were
    /// copied too.
    pub typed_tables: u64,
    /// Entries copied.
    pub entries: u64,
    /// The bytes of their keys and values.
    pub key_value_bytes: u64,
    /// The copy's page size (the store's).
    pub page_size: usize,
    /// The length of the copy's data file, closed.
    pub data_file_bytes: u64,
}

/// Where a backup is, for [`Database::backup_with_progress`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackupProgress {
    /// Tables in the snapshot.
    pub tables: u64,
    /// Tables copied whole so far.
    pub tables_done: u64,
    /// Entries copied so far.
    pub entries: u64,
    /// The bytes of their keys and values.
    pub key_value_bytes: u64,
}

impl Database {
    /// Write many entries in bounded transactions: see [`BulkWriter`].
    pub fn bulk_writer(&self) -> BulkWriter<'_> {
        BulkWriter::new(self)
    }

    /// Copy the store, while it is in use, into a new store at `dir` (a
    /// new or empty directory, created with its parents if missing, not
    /// inside this store): every table, empty ones too, and every key and
    /// value byte for byte, as one read transaction sees them. Other
    /// threads go on committing meanwhile; the copy holds exactly the
    /// commits of that snapshot, so every commit acknowledged before the
    /// call, a prefix of those during it, and nothing not durable.
    ///
    /// The copy is logical, not a copy of the files: written through the
    /// write path in transactions of [`BULK_TXN_ENTRIES`] entries, its
    /// data file compact (key order, no free pages), with this store's
    /// page size and journal segment size. Once written it is
    /// checkpointed, checked (every page read back, its entries counted)
    /// and closed: it opens with nothing to replay. It costs a read of
    /// every entry here and a write of each to the copy's journal and data
    /// file; the snapshot, held throughout, keeps the pages it reads from
    /// reuse, and can expire ([`DbError::SnapshotTooOld`]) when commits
    /// meanwhile make checkpoints replace more memory than
    /// `reader_pinned_bytes`. Works on a store opened read-only.
    ///
    /// Refused, with nothing written, when `dir` is not empty or lies
    /// inside this store ([`DbError::BackupTarget`]). On a failure after
    /// that, the copy's data file is removed (so the partial copy never
    /// opens as a store; remove the directory before trying again); a
    /// crash during the backup leaves a store holding part of the entries:
    /// a backup is whole only once this returns `Ok`.
    pub fn backup(&self, dir: impl AsRef<Path>) -> Result<BackupReport> {
        self.backup_with_progress(dir, |_| {})
    }

    /// [`Database::backup`], calling `progress` after every 10,000 entries
    /// copied and once at the end of the copy.
    pub fn backup_with_progress(
        &self,
        dir: impl AsRef<Path>,
        mut progress: impl FnMut(&BackupProgress),
    ) -> Result<BackupReport> {
        let dir = dir.as_ref();
        check_target(self, dir)?;
        let copy = self.create_copy(dir)?;
        let result = fill(self, &copy, &mut progress).and_then(|r| seal(copy, dir, r));
        if result.is_err() {
            // The copy is dropped by now: its data file goes, so that what
            // was written never opens as a store.
            let _ = self.shared.options.vfs.remove_file(&dir.join(DATA_FILE));
        }
        result
    }

    /// A new store at `dir` with this one's settings, page size and
    /// journal segment size, checkpointed by its writer only.
    fn create_copy(&self, dir: &Path) -> Result<Database> {
        let s = &self.shared;
        let mut options = s.options.clone();
        options.page_size = s.page_size.bytes();
        options.journal = JournalOptions {
            segment_size_bytes: s.journal.options().segment_size_bytes,
            needed_from: 0,
            ..s.options.journal.clone()
        };
        options.background_checkpoints = false;
        super::Builder { options }.create(dir)
    }
}

/// Refuse a `dir` that exists and is not an empty directory, or that lies
/// inside the store (the copy would change it).
fn check_target(db: &Database, dir: &Path) -> Result<()> {
    let refuse = |reason: String| DbError::BackupTarget {
        path: dir.to_path_buf(),
        reason,
    };
    let store = &db.shared.path;
    if salvage::inside(dir, store) {
        return Err(refuse(format!(
            "it is inside the store {}; a backup goes to a new or empty directory outside it",
            store.display()
        )));
    }
    let vfs = &db.shared.options.vfs;
    if !vfs.exists(dir)? {
        return Ok(());
    }
    match vfs.read_dir(dir) {
        Ok(names) if names.is_empty() => Ok(()),
        Ok(names) => Err(refuse(format!(
            "it is not empty ({} entries); a backup goes to a new or empty directory",
            names.len()
        ))),
        Err(_) => Err(refuse("it exists and is not a directory".into())),
    }
}

/// Copy one snapshot of `db`, every table, into `copy`; the report without
/// the data file's size.
fn fill(
    db: &Database,
    copy: &Database,
    progress: &mut dyn FnMut(&BackupProgress),
) -> Result<BackupReport> {
    let read = db.begin_read();
    let tables = read.list_tables()?;
    let mut at = BackupProgress {
        tables: tables.len() as u64,
        tables_done: 0,
        entries: 0,
        key_value_bytes: 0,
    };
    let mut writer = copy.bulk_writer();
    let mut typed = Vec::new();
    for name in &tables {
        writer.create_table(name)?;
        copy_table(&read, name, &mut writer, &mut at, progress)?;
        if let Some(types) = typed::recorded_types(&read, name)? {
            typed.push((name, types));
        }
        at.tables_done += 1;
    }
    writer.finish()?;
    // The types typed tables record, so that the copy refuses a wrong-type
    // open as the store does.
    if !typed.is_empty() {
        let txn = copy.begin_write()?;
        for (name, types) in typed.iter().cloned() {
            typed::set_recorded_types(&txn, name, types)?;
        }
        txn.commit()?;
    }
    progress(&at);
    Ok(BackupReport {
        lsn: read.lsn(),
        typed_tables: typed.len() as u64,
        tables: at.tables,
        entries: at.entries,
        key_value_bytes: at.key_value_bytes,
        page_size: db.shared.page_size.bytes(),
        data_file_bytes: 0,
    })
}

fn copy_table(
    read: &ReadTxn,
    name: &str,
    writer: &mut BulkWriter<'_>,
    at: &mut BackupProgress,
    progress: &mut dyn FnMut(&BackupProgress),
) -> Result<()> {
    for kv in read.open_table(name)?.iter() {
        let kv = kv?;
        writer.insert(name, kv.0.as_bytes(), kv.1.as_bytes())?;
        at.entries += 1;
        at.key_value_bytes += (kv.0.as_bytes().len() + kv.1.as_bytes().len()) as u64;
        if at.entries % PROGRESS_EVERY_ENTRIES == 0 {
            progress(at);
        }
    }
    Ok(())
}

/// Checkpoint the copy, check it (every page, and as many entries as were
/// copied, with the catalog's: one per table and its next id), close it,
/// and measure its data file.
fn seal(copy: Database, dir: &Path, mut report: BackupReport) -> Result<BackupReport> {
    copy.checkpoint()?;
    let check = copy.check()?;
    let catalog = report.tables + u64::from(report.tables > 0) + report.typed_tables;
    if check.disk.entries != report.entries + catalog {
        return Err(DbError::Corrupt {
            path: dir.to_path_buf(),
            reason: format!(
                "the backup copied {} entries in {} tables, but the copy's tree holds {} \
                 entries with the catalog's (a bug in backup)",
                report.entries, report.tables, check.disk.entries
            ),
        });
    }
    let vfs = std::sync::Arc::clone(&copy.shared.options.vfs);
    copy.close()?;
    let data = vfs.open(
        &dir.join(DATA_FILE),
        OpenOptions::new(OpenMode::Buffered).read_only(true),
    )?;
    report.data_file_bytes = data.len()?;
    Ok(report)
}
