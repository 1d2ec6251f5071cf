//! What the store's operations fail with.

use std::path::PathBuf;
use std::sync::Arc;

use crate::btree::BtreeError;
use crate::io::IoError;
use crate::journal::JournalError;

/// An error of the store.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum DbError {
    /// A file operation failed.
    #[error(transparent)]
    Io(Arc<IoError>),
    /// The journal failed or refused to open.
    #[error("journal: {0}")]
    Journal(#[from] JournalError),
    /// Reading the tree failed: a page is damaged or unreadable.
    #[error("data file: {0}")]
    Tree(Arc<BtreeError>),
    /// The path holds no store (or a store whose creation never finished).
    #[error("{path} is not a Keel store: {reason}")]
    NotAStore {
        /// The path given.
        path: PathBuf,
        /// What is missing or wrong there.
        reason: String,
    },
    /// The store is open already, by this process or another: `holder`
    /// says which, and what holds it.
    #[error("store {path} is in use by {holder}")]
    Locked {
        /// The store's directory.
        path: PathBuf,
        /// Who holds its lock.
        holder: LockHolder,
    },
    /// The store's files are damaged or do not belong together. The store
    /// cannot be opened as it is; [`super::Database::salvage`] (`keel db
    /// salvage STORE --to NEW`) copies every commit its files prove whole
    /// into a new store and says what is lost.
    #[error("store {path} is damaged: {reason}")]
    Corrupt {
        /// The store's directory.
        path: PathBuf,
        /// What is damaged, and where.
        reason: String,
    },
    /// The store was written in a format this build does not read (an
    /// older or newer Keel): nothing was changed.
    #[error("store {path} is in a format this Keel does not read: {reason}")]
    UnsupportedFormat {
        /// The store's directory.
        path: PathBuf,
        /// Which format was found, and what to do.
        reason: String,
    },
    /// The store was opened with `Database::open_read_only`: it takes no
    /// write transaction and runs no checkpoint.
    #[error("store {0} was opened read-only: open it with `Database::open` to write")]
    ReadOnly(PathBuf),
    /// A key longer than the store accepts.
    #[error("a key of {len} bytes is longer than the {max}-byte limit")]
    KeyTooLong {
        /// The key's length in bytes.
        len: usize,
        /// The longest key the store takes, in bytes (`Limits::max_key_bytes`).
        max: usize,
    },
    /// A value longer than the store accepts.
    #[error("a value of {len} bytes is longer than the {max}-byte limit")]
    ValueTooLong {
        /// The value's length in bytes.
        len: u64,
        /// The longest value the store takes, in bytes (`Limits::max_value_bytes`).
        max: u64,
    },
    /// The transaction's changes do not fit in one journal record.
    #[error(
        "the transaction's changes take {len} bytes, more than the {max}-byte limit of one \
         journal record (raise the journal segment size, or commit in smaller transactions)"
    )]
    TransactionTooLarge {
        /// The bytes the transaction's record would take.
        len: usize,
        /// The largest record the journal takes, in bytes.
        max: usize,
    },
    /// No table has this name.
    #[error("no table named {0:?}")]
    NoSuchTable(String),
    /// A table name that is empty or too long.
    #[error("bad table name {name:?}: {reason}")]
    BadTableName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An earlier failure stopped the store from accepting writes.
    #[error(
        "the store stopped accepting writes after a failure ({0}); reads of durable data still \
         work; close and reopen the store to recover"
    )]
    Poisoned(Arc<str>),
    /// A commit failed after its record was handed to the journal: the
    /// commit may or may not be durable (reopening tells).
    #[error(
        "commit outcome unknown: {0}; the store stopped accepting writes. Reopen it: the commit \
         is there if its record reached the disk"
    )]
    CommitFailed(Arc<str>),
    /// A read transaction began before checkpoints that replaced the
    /// memory it reads, and keeping that memory alive for it (and older
    /// ones) would pass the store's `reader_pinned_bytes`: it can no longer
    /// read. Drop it (which frees that memory) and begin a new one.
    #[error(
        "the read transaction at lsn {lsn} is too old: checkpoints since it began replaced the \
         memory it reads, and old read transactions would keep more than {limit} bytes of it \
         alive (reader_pinned_bytes); drop it and begin a new one"
    )]
    SnapshotTooOld {
        /// The LSN of the snapshot the read transaction reads.
        lsn: u64,
        /// The store's `reader_pinned_bytes`.
        limit: u64,
    },
    /// [`super::Database::open_read_only`] of a store another process
    /// (or `Database`) has open found no consistent snapshot within its
    /// attempts: each time, the writer's checkpoint reused a page or
    /// recycled a journal segment under the reader (or the writer was
    /// still opening). Nothing was written; try again, or later.
    #[error(
        "store {path} is in use and no consistent snapshot of it could be read in {attempts} \
         attempts (the writer's checkpoints kept changing what the reader read); last: {reason}"
    )]
    SnapshotUnavailable {
        /// The store's directory.
        path: PathBuf,
        /// How many snapshots were tried.
        attempts: u32,
        /// What went wrong with the last one.
        reason: String,
    },
    /// The calling thread holds the store's writer slot — one of its own
    /// write transactions has read, and has not ended — and the call would
    /// wait for that slot: it would wait forever. Nothing was done.
    #[error(
        "{0} would wait forever: this thread holds the store's writer slot (one of its write \
         transactions has read and is still open); commit or drop that transaction first, or \
         call this from another thread"
    )]
    WouldDeadlock(&'static str),
    /// Options that cannot work.
    #[error("invalid store options: {0}")]
    BadOptions(String),
    /// A typed table opened with other key or value types than it was
    /// made with (see [`super::TableDefinition`]): nothing was changed.
    #[error(
        "table {table:?} holds {stored}, not {requested}: open it with the types it was made \
         with (or as bytes, with `open_table`)"
    )]
    TableTypeMismatch {
        /// The table's name.
        table: Box<str>,
        /// Its key and value types as the store records them, `<K, V>`.
        stored: Box<str>,
        /// The types it was opened with, `<K, V>`.
        requested: Box<str>,
    },
    /// A typed table's key or value does not decode as its type: it was
    /// written as bytes (`open_table`) or by another program, or with
    /// other types before the table recorded its own.
    #[error("table {table:?}: {what} does not decode {reason}")]
    Decode {
        /// The table's name.
        table: Box<str>,
        /// `"a key"` or `"a value"`.
        what: &'static str,
        /// The type it should decode as, and what is wrong with the
        /// bytes: `as u64: 3 bytes where u64 takes 8`.
        reason: Box<str>,
    },
    /// [`super::Database::salvage`] was given a path for the new store
    /// that it must not write to.
    #[error("cannot salvage into {path}: {reason}")]
    SalvageTarget {
        /// The path given for the new store.
        path: PathBuf,
        /// Why salvage refuses it.
        reason: String,
    },
    /// [`super::Database::backup`] was given a directory it must not
    /// write the copy into. Nothing was written.
    #[error("cannot back up into {path}: {reason}")]
    BackupTarget {
        /// The directory given for the copy.
        path: PathBuf,
        /// Why backup refuses it.
        reason: String,
    },
}

/// Who holds a store's lock (see [`DbError::Locked`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockHolder {
    /// A `Database` of this process has it open (`read_only`: opened with
    /// `open_read_only`); close or drop it first.
    OpenDatabase {
        /// Whether it was opened read-only.
        read_only: bool,
    },
    /// The `Database` of this process that had it open was closed or
    /// dropped, but transactions of it are still alive: they read its
    /// files, and keep the store locked until they are dropped.
    ClosedDatabase {
        /// Read transactions of it still alive (a write transaction, or
        /// a scan, may hold it too).
        read_transactions: usize,
    },
    /// This process, otherwise (opening or closing it at this moment, or
    /// salvage reading it).
    ThisProcess,
    /// Another process.
    OtherProcess {
        /// Its id, as written in the store's `LOCK` file (`None`: the
        /// file names no living process: a Keel that does not write it,
        /// or not yet).
        pid: Option<u32>,
    },
}

impl std::fmt::Display for LockHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockHolder::OpenDatabase { read_only } => write!(
                f,
                "this process: a Database opened on it{} is still open (close or drop it first)",
                if *read_only { " read-only" } else { "" }
            ),
            LockHolder::ClosedDatabase { read_transactions } => write!(
                f,
                "this process: its Database was closed, but transactions of it are still alive \
                 ({read_transactions} read transaction(s)) and keep the store open until they \
                 are dropped"
            ),
            LockHolder::ThisProcess => write!(f, "this process (it is being opened or closed)"),
            LockHolder::OtherProcess { pid: Some(pid) } => {
                write!(
                    f,
                    "another process (pid {pid}; it holds the store's LOCK file)"
                )
            }
            LockHolder::OtherProcess { pid: None } => {
                write!(f, "another process (it holds the store's LOCK file)")
            }
        }
    }
}

impl From<IoError> for DbError {
    fn from(e: IoError) -> Self {
        match e {
            IoError::Locked { path } => DbError::Locked {
                path,
                holder: LockHolder::OtherProcess { pid: None },
            },
            e => DbError::Io(Arc::new(e)),
        }
    }
}

impl From<BtreeError> for DbError {
    fn from(e: BtreeError) -> Self {
        DbError::Tree(Arc::new(e))
    }
}

/// Results of the store.
pub type Result<T, E = DbError> = std::result::Result<T, E>;

// Every result of the store carries a `DbError`'s room: variants hold
// boxed strings, not `String`s, to keep it at seven words (a fourth
// `String` in one variant made it eleven, and a scan's every step moved
// the difference).
const _: () = assert!(std::mem::size_of::<DbError>() <= 56);
