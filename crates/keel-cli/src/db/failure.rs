//! Why a command failed, in words and as an exit code (see `EXIT_CODES` in
//! `args.rs`).

use std::path::Path;

use keel::db::DbError;
use keel::journal::JournalError;
use serde::Serialize;

use crate::out::StdoutError;

/// The kinds of failure, named in `--json` output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// The key or table does not exist (exit 1).
    Absent,
    /// The store is damaged (exit 1 from `check`, 2 from the others).
    Damaged,
    /// Bad input on the command line: bad hex, a bad table name, a key or
    /// value over the limits, text that is not UTF-8.
    BadInput,
    /// No store at the path.
    NotAStore,
    /// Another process has the store open.
    Locked,
    /// Another process has the store open, and no consistent snapshot of
    /// it could be read within the attempts (exit 3).
    SnapshotUnavailable,
    /// A read, write or sync failed, or the store refused the write.
    Failed,
    /// Standard output was closed by its reader: the command stopped
    /// there, and `keel` exits 0 saying nothing (see `crate::out`).
    StdoutClosed,
}

/// A failed command: the message for stderr and the exit code.
#[derive(Debug, Clone)]
pub struct Failure {
    pub kind: Kind,
    pub code: u8,
    pub message: String,
}

#[derive(Serialize)]
struct FailureJson<'a> {
    error: &'a str,
    kind: Kind,
    exit_code: u8,
}

impl Failure {
    pub fn new(kind: Kind, message: impl Into<String>) -> Failure {
        let code = match kind {
            Kind::StdoutClosed => 0,
            Kind::Absent => 1,
            Kind::SnapshotUnavailable => super::live::EXIT_NO_SNAPSHOT,
            _ => 2,
        };
        Failure {
            kind,
            code,
            message: message.into(),
        }
    }

    pub fn bad_input(message: impl Into<String>) -> Failure {
        Failure::new(Kind::BadInput, message)
    }

    pub fn internal(message: impl Into<String>) -> Failure {
        Failure::new(Kind::Failed, message)
    }

    /// A store error met while using the store at `store`.
    pub fn from_db(e: DbError, store: &Path) -> Failure {
        let kind = kind_of(&e);
        let mut message = e.to_string();
        if kind == Kind::Damaged {
            message += &format!(
                " (run `keel db check {0}` for the whole picture, and `keel db salvage {0} --to \
                 NEW` to copy every commit its files prove whole into a new store)",
                store.display()
            );
        }
        Failure::new(kind, message)
    }

    /// What `--json` prints for this failure.
    pub fn json(&self) -> impl Serialize + '_ {
        FailureJson {
            error: &self.message,
            kind: self.kind,
            exit_code: self.code,
        }
    }
}

impl From<StdoutError> for Failure {
    fn from(e: StdoutError) -> Failure {
        match e {
            StdoutError::Closed => Failure::new(Kind::StdoutClosed, e.to_string()),
            StdoutError::Failed(_) => Failure::internal(e.to_string()),
        }
    }
}

/// Which kind of failure a store error is.
pub fn kind_of(e: &DbError) -> Kind {
    match e {
        DbError::NotAStore { .. } => Kind::NotAStore,
        DbError::Locked { .. } => Kind::Locked,
        DbError::SnapshotUnavailable { .. } => Kind::SnapshotUnavailable,
        DbError::Journal(JournalError::Locked(_)) => Kind::Locked,
        DbError::Corrupt { .. } | DbError::Tree(_) => Kind::Damaged,
        DbError::Journal(
            JournalError::Corrupt { .. }
            | JournalError::ForeignSegment { .. }
            | JournalError::BlockSizeMismatch { .. }
            | JournalError::BadCompressedRecord { .. }
            | JournalError::NotAJournal(_),
        ) => Kind::Damaged,
        DbError::KeyTooLong { .. }
        | DbError::ValueTooLong { .. }
        | DbError::TransactionTooLarge { .. }
        | DbError::BadTableName { .. }
        | DbError::SalvageTarget { .. }
        | DbError::BackupTarget { .. } => Kind::BadInput,
        DbError::NoSuchTable(_) => Kind::Absent,
        _ => Kind::Failed,
    }
}

/// When nothing is at `store`, put back the store a compaction cut
/// between its two renames left beside it (`swap::finish_interrupted`):
/// every command runs this before it opens or creates a store there.
pub fn finish_interrupted_compact(store: &Path) -> Result<(), Failure> {
    if std::fs::symlink_metadata(store).is_ok() {
        return Ok(());
    }
    super::swap::finish_interrupted(store)
        .map(drop)
        .map_err(|e| {
            Failure::internal(format!(
                "{}: finishing an interrupted compact: {e}",
                store.display()
            ))
        })
}

/// Refuse a path that is missing or is not a directory, with words that
/// say which (the store's own error would only say it holds no store).
///
/// A missing path may be a store whose compaction was interrupted between
/// its two renames (where the file system refuses an atomic exchange): the
/// compacted copy is renamed into place first (`swap::finish_interrupted`).
pub fn check_store_dir(store: &Path) -> Result<(), Failure> {
    finish_interrupted_compact(store)?;
    match std::fs::metadata(store) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Failure::new(
            Kind::NotAStore,
            format!(
                "{}: no such directory (create a store with `keel db create`)",
                store.display()
            ),
        )),
        Ok(m) if !m.is_dir() => Err(Failure::new(
            Kind::NotAStore,
            format!(
                "{} is not a directory, so not a Keel store",
                store.display()
            ),
        )),
        // Other errors (permissions) surface, with the path, when the store
        // is opened.
        _ => Ok(()),
    }
}
