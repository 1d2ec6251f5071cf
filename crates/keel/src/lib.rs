//! Keel: an embedded transactional key-value store whose write-ahead journal
//! makes a commit durable at the disk's physical floor, and the I/O layer
//! that Keel's durability toolkit measures disks with.
//!
//! * [`io`] — every file operation, with a real and a fault-injecting
//!   implementation.
//! * [`journal`] — the write-ahead journal.
//! * [`btree`] — the store's B+tree: persistent in memory, fixed-size
//!   pages on disk.
//! * [`db`] — the store on top of them: transactions, checkpoints,
//!   recovery.

#![warn(missing_docs)]

mod bell;
pub mod btree;
pub mod db;
mod era;
mod hint;
pub mod io;
pub mod journal;
mod le;
pub(crate) mod memtable;
mod stripe;

/// The examples of `docs/store.md`, compiled and run as doctests.
#[doc = include_str!("../../../docs/store.md")]
#[cfg(doctest)]
pub struct StoreGuideExamples;

/// The examples of `docs/salvage.md`, compiled and run as doctests.
#[doc = include_str!("../../../docs/salvage.md")]
#[cfg(doctest)]
pub struct SalvageGuideExamples;

/// The allocator the `keel` binary uses, for the library's own tests and
/// measurements (glibc's malloc spent a memtable insert's time trimming
/// and consolidating freed nodes).
#[cfg(test)]
#[global_allocator]
static TEST_ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
