//! A store's settings ([`Options`]) and what a commit guarantees
//! ([`Durability`]).

use std::sync::Arc;
use std::time::Duration;

use super::placement::BackgroundCpus;
use crate::io::{RealVfs, Vfs};
use crate::journal::JournalOptions;

/// What a commit guarantees when it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Durable on return (the default): the commit's journal record and
    /// every earlier one are on stable storage. Survives a process crash,
    /// an OS crash and a power cut on a disk that honours flushes.
    #[default]
    Immediate,
    /// Not waited for: `commit` returns once the record is handed to the
    /// journal, whose writer thread starts writing it at once, in the
    /// background. Until that write completes, a process crash, an OS
    /// crash or a power cut can lose this commit (and any later one), but
    /// never a part of it, and never an earlier `Immediate` commit. The
    /// next transaction sees it; readers see it once it is durable.
    Eventual,
}

/// Settings of a store. Build with
/// [`Database::builder`](super::Database::builder).
#[derive(Debug, Clone)]
pub struct Options {
    /// Page size of a new store's data file (an existing store keeps its
    /// own): a power of two from 4 KiB to 64 KiB.
    pub page_size: usize,
    /// The most bytes of decoded pages the page cache holds.
    pub cache_bytes: usize,
    /// Read the data file's clean pages through a read-only memory map
    /// (the default) rather than with `pread`: no system call and no copy
    /// per page, and a lookup in a leaf the cache does not hold searches
    /// the mapped page in place. The price: an I/O error while reading a
    /// mapped page raises `SIGBUS`, which kills the process (docs/store.md,
    /// "Reading through a memory map"); turn this off to get such errors
    /// as [`DbError::Io`](super::DbError::Io) instead.
    pub read_mapped: bool,
    /// A checkpoint starts once commits appended this many record bytes
    /// since the last one.
    pub checkpoint_journal_bytes: u64,
    /// A checkpoint starts this long after the last one when anything was
    /// committed since (`None`: only by bytes).
    pub checkpoint_interval: Option<Duration>,
    /// Writers stop (they wait for the checkpoint under way, or run one
    /// themselves if none is) when this many record bytes are not covered
    /// by a checkpoint (the background checkpointer fell
    /// behind): bounds the replay time.
    pub backpressure_journal_bytes: u64,
    /// A checkpoint starts once the memtable holding the commits since the
    /// last one reaches about this many bytes (keys, values and their
    /// bookkeeping). Memtables are outside the page cache's budget.
    pub checkpoint_dirty_bytes: u64,
    /// Writers stop (they wait for the checkpoint under way, or run one
    /// themselves if none is) when the memtables (the active one and one
    /// being folded by a checkpoint) reach this many bytes: with `cache_bytes`, this bounds the store's memory. 512 MiB
    /// by default: a 10M-key fill ran as fast as with 1 GiB (3,841 against
    /// 3,858 transactions/s, medians of 3) and peaked 345 MiB lower
    /// (docs/store-performance.md, "A 10M-key fill").
    pub backpressure_dirty_bytes: u64,
    /// A checkpoint writes the pages its fold changed whenever they reach
    /// about this many bytes in memory, then folds on: bounds a
    /// checkpoint's memory (a fold of random keys changes nearly every
    /// leaf, whatever the memtable's size).
    pub fold_bytes: u64,
    /// The background checkpointer folds at most about a fifth of the
    /// time while commits arrive and the budgets have room (it sleeps
    /// after each batch four times as long as the batch took): a busy
    /// second vCPU slows the journal's writes (docs/store.md,
    /// "Checkpoints").
    pub paced_checkpoints: bool,
    /// Run checkpoints in a background thread (otherwise only writers'
    /// backpressure, [`Database::checkpoint`](super::Database::checkpoint) and `close` do).
    pub background_checkpoints: bool,
    /// How many nice levels below the thread that opens the store its
    /// helper thread runs (it inserts large commits into the memtable and
    /// faults the memtable's memory in ahead); the background
    /// checkpointer runs twice as many below (nice 10 by default). 0 to
    /// 19 (a sum past 19 stops there); 0 keeps both at the opener's
    /// priority. When they compete with a committing thread for a CPU,
    /// the commit goes first. With the default, w1 (one 16 KiB value per
    /// commit) ran at 10,472 against 9,597 commits/s with the helper at
    /// the opener's priority, p99 148 against 333 µs (6 interleaved
    /// rounds; docs/store-performance.md, "The helper at a lower
    /// priority").
    pub background_nice: u8,
    /// Which CPUs the helper and the checkpointer may run on: any the
    /// opener may run on (the default), those away from the CPUs that
    /// take the interrupts of the disk the store is on (found when the
    /// store opens; [`Stats::background_cpus`](super::Stats::background_cpus) and
    /// [`Stats::disk_interrupt_cpus`](super::Stats::disk_interrupt_cpus) tell), or given ones. Kept off the
    /// interrupts' CPU, they leave it to a committer, which its write's
    /// completion wakes there; but on a 2-vCPU VM whose disk interrupts
    /// all go to one vCPU that did not pay: w1 (one 16 KiB value per
    /// commit) ran at 0.951 of the journal engine against 0.988 with any
    /// CPU, and 0.908 against 0.964 in a second set (16 interleaved
    /// rounds each); w2 and w3 moved within the noise
    /// (docs/store-performance.md, "Background threads off the disk's
    /// interrupts").
    pub background_cpus: BackgroundCpus,
    /// The most memory read transactions may keep alive that checkpoints
    /// have replaced (the memtables a fold folded while an older reader
    /// still read them). Past it, the oldest read transactions expire:
    /// their every call fails with [`DbError::SnapshotTooOld`](super::DbError::SnapshotTooOld), and the
    /// memory is freed when they are dropped. Writers never wait for
    /// readers.
    pub reader_pinned_bytes: u64,
    /// The journal's settings; its recovery mode is always
    /// `RefuseCorruption` (damage inside the journal is an error).
    pub journal: JournalOptions,
    /// The file system (the fault-injecting `SimVfs` in tests).
    pub vfs: Arc<dyn Vfs>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            page_size: crate::btree::DEFAULT_PAGE_BYTES,
            cache_bytes: 256 << 20,
            read_mapped: true,
            checkpoint_journal_bytes: 64 << 20,
            checkpoint_interval: Some(Duration::from_secs(30)),
            backpressure_journal_bytes: 256 << 20,
            checkpoint_dirty_bytes: 256 << 20,
            backpressure_dirty_bytes: 512 << 20,
            fold_bytes: 16 << 20,
            background_checkpoints: true,
            background_nice: 5,
            background_cpus: BackgroundCpus::Any,
            paced_checkpoints: true,
            reader_pinned_bytes: 1 << 30,
            journal: JournalOptions::default(),
            vfs: RealVfs::shared(),
        }
    }
}
