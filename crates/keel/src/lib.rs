//! Keel: an embedded transactional key-value store whose write-ahead journal
//! makes a commit durable at the disk's physical floor, and the I/O layer
//! that Keel's durability toolkit measures disks with.
//!
//! * [`io`] — every file operation, with a real and a fault-injecting
//!   implementation.
//! * [`journal`] — the write-ahead journal.
//! * [`btree`] — the store's B+tree: persistent in memory, fixed-size
//!   pages on disk.
//! * [`db`] — the store on top of them (being built: its meta pages).

pub mod btree;
pub mod db;
pub mod io;
pub mod journal;
mod le;

/// The examples of `docs/store.md`, compiled and run as doctests.
#[doc = include_str!("../../../docs/store.md")]
#[cfg(doctest)]
pub struct StoreGuideExamples;
