//! The files of a store's directory (docs/format.md, "The store
//! directory").

/// The data file's name inside the store directory.
pub const DATA_FILE: &str = "data.keel";
/// The journal directory's name inside the store directory.
pub const JOURNAL_DIR: &str = "journal";
/// The lock file's name inside the store directory.
pub const LOCK_FILE: &str = "LOCK";
/// The file a close that made everything durable leaves: the next open
/// keeps the data file's cached pages (see docs/format.md, "Recovery") and removes
/// it, durably, before it writes anything.
pub const CLEAN_FILE: &str = "CLEAN";
