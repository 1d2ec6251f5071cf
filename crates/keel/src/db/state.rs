//! The store's shared state: what every transaction, commit and
//! checkpoint of a store works on (`Shared`), and the leases read
//! transactions hold of it. The code is in the files above: opening and
//! recovery in `store.rs`, readers in `view.rs`, the commit path in
//! `combine.rs` and `direct.rs`, checkpoints in `checkpoint.rs`.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
#[cfg(test)]
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};

use crossbeam_utils::CachePadded;

use super::helper::Helper;
use super::layers::Base;
use super::meta::Meta;
use super::options::Options;
use super::pending::Unapplied;
use super::placement::Placement;
use super::published::Published;
use super::run::Runs;
use super::slot::Slot;
use crate::bell::Bell;
use crate::btree::{PageCache, PageNo, PageSize};
use crate::io::{LockGuard, VfsFile};
use crate::journal::{Journal, Lsn};
use crate::stripe::STRIPES;

/// How `Shared::recover` opens a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Writable, the store's lock held: recovery may write.
    Write,
    /// Read-only, the store's lock held: nothing is written.
    ReadOnly,
    /// Read-only beside a writer in another process (or `Database`),
    /// without its lock (`live.rs`): nothing is written, the data file's
    /// cached pages are kept, and the journal is replayed up to `durable`
    /// (the LSN the writer published durable), not to its end.
    Live {
        /// The last LSN to replay.
        durable: Lsn,
    },
}

/// The data file's pages: the durable meta, which pages are free, and which
/// were freed by commits but may not be reused yet.
#[derive(Debug)]
pub(super) struct Space {
    pub(super) meta: Meta,
    /// Pages holding the durable meta's free list.
    pub(super) freelist_pages: Vec<PageNo>,
    /// Pages that no durable meta and no reader can reach: reusable now.
    pub(super) free: BTreeSet<PageNo>,
    /// Pages the fold that made the tree of the generation beside them
    /// freed: the durable meta (of an older generation) or a reader of an
    /// older tree may still reach them.
    pub(super) pending: Vec<(u64, PageNo)>,
    /// The generation of the tree the durable meta page holds.
    pub(super) durable_gen: u64,
    /// By page number, for the pages checkpoints wrote since open: the
    /// generation of the tree that first held the node (or value) in it.
    /// A reader of an older tree never sees the page. 0 (and pages past
    /// the end): written before open, seen by every reader.
    pub(super) born_after: Vec<u64>,
}

impl Space {
    pub(super) fn born_after(&self, page: PageNo) -> u64 {
        usize::try_from(page)
            .ok()
            .and_then(|p| self.born_after.get(p))
            .copied()
            .unwrap_or(0)
    }

    pub(super) fn set_born_after(&mut self, page: PageNo, gen: u64) {
        let p = usize::try_from(page).expect("page numbers fit in memory");
        if self.born_after.len() <= p {
            self.born_after.resize(p + 1, 0);
        }
        self.born_after[p] = gen;
    }
}

/// Checkpointer control.
#[derive(Debug, Default)]
pub(super) struct CkptCtl {
    pub(super) stop: bool,
    pub(super) requested: bool,
}

/// Counters for `stats`.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Read transactions expired by `reader_pinned_bytes`.
    pub snapshots_expired: AtomicU64,
    pub checkpoints: AtomicU64,
    pub checkpoint_pages: AtomicU64,
    pub checkpoint_us: AtomicU64,
    /// Parts checkpoints wrote before their last (`Options::fold_bytes`).
    pub fold_parts: AtomicU64,
    /// Writers that waited past a backpressure budget, and the checkpoints
    /// they ran themselves.
    pub backpressure_waits: AtomicU64,
    pub backpressure_checkpoints: AtomicU64,
    pub commits: AtomicU64,
    pub groups: AtomicU64,
    pub grouped_commits: AtomicU64,
    /// Blind commits made without the writer slot (`super::direct`),
    /// counted per thread.
    pub direct_commits: crate::stripe::Striped<1>,
    /// Nanoseconds commits held the writer slot inside `commit`.
    pub commit_writer_ns: AtomicU64,
    pub overlap: OverlapCounters,
}

/// Lone large commits whose journal write (on the committer) and apply
/// (on the helper) ran side by side: see `Stats::overlapped_commits`.
#[derive(Debug, Default)]
pub(crate) struct OverlapCounters {
    pub commits: AtomicU64,
    pub write_ns: AtomicU64,
    pub apply_ns: AtomicU64,
    pub slow_writes: AtomicU64,
    pub slow_applies: AtomicU64,
    pub applied_after_write: AtomicU64,
}

pub(crate) struct Shared {
    pub path: PathBuf,
    pub options: Options,
    /// Opened with `Database::open_read_only`: nothing is written, every
    /// write transaction and checkpoint is refused.
    pub read_only: bool,
    pub page_size: PageSize,
    pub data: Arc<dyn VfsFile>,
    pub cache: PageCache,
    pub journal: Journal,
    /// The writer's state, taken by a write transaction (or a checkpoint)
    /// for its whole life: `None` while taken.
    pub(super) writer: Mutex<Slot>,
    pub(super) writer_cv: Condvar,
    /// What queued blind commits sleep on (`combine`).
    pub(super) bells: Arc<[Bell]>,
    /// What readers see, and the poison: shared with journal callbacks
    /// (which must not hold the store itself: the last reference dropped
    /// on a journal thread would join that thread).
    pub(super) published: Arc<Published>,
    /// Each thread stripe's lease of the published snapshot
    /// (`Shared::lease`).
    pub(super) leases: Leases,
    /// Read transactions begun and ended (counted per thread: see
    /// `crate::stripe`); their difference is how many live.
    pub(super) read_txns: crate::stripe::Striped<2>,
    pub(super) space: Mutex<Space>,
    /// One checkpoint at a time.
    pub(super) ckpt_run: Mutex<()>,
    pub(super) ckpt: Mutex<CkptCtl>,
    pub(super) ckpt_cv: Condvar,
    /// Record bytes committed since the last checkpoint started.
    pub bytes_since_checkpoint: AtomicU64,
    /// Bytes the memtables hold, as of the last commit or checkpoint (see
    /// `Options::checkpoint_dirty_bytes`).
    pub dirty_bytes: AtomicU64,
    pub counters: Counters,
    /// A second thread for large folds and for freeing replaced bases
    /// (none if it could not be started).
    pub(crate) helper: Option<Helper>,
    /// The CPUs the helper and the checkpointer run on.
    pub(crate) placement: Placement,
    /// Durable commits published as runs, not yet in the memtable
    /// (`super::pending`).
    pub(super) unapplied: Arc<Unapplied>,
    /// Faults tests inject into the commit path.
    #[cfg(test)]
    pub(crate) faults: TestFaults,
    pub(super) _lock: Box<dyn LockGuard>,
}

/// Faults tests inject into the commit path.
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct TestFaults {
    /// The next commit's apply panics.
    pub panic_in_apply: std::sync::atomic::AtomicBool,
    /// Runs published by lone commits are left for writers to insert (the
    /// helper is not asked to).
    pub hold_runs: std::sync::atomic::AtomicBool,
    /// The next group told its results panics first.
    pub panic_in_settle: std::sync::atomic::AtomicBool,
    /// Blind commits are queued for the writer slot, never made directly
    /// (`super::direct`): for tests of the groups.
    pub no_direct: std::sync::atomic::AtomicBool,
    /// The next direct commit sleeps this long (ms) between getting its
    /// LSN and inserting its puts.
    pub direct_apply_delay_ms: AtomicU64,
    /// The next checkpoint panics at this step (`CKPT_*`; 0: none).
    pub panic_in_checkpoint: std::sync::atomic::AtomicU8,
    /// The next checkpoint's fold sleeps this long (ms) before it starts.
    pub fold_delay_ms: AtomicU64,
}

#[cfg(test)]
impl TestFaults {
    /// Panic if a checkpoint panic was asked for at `step`.
    pub(crate) fn checkpoint_step(&self, step: u8) {
        if self
            .panic_in_checkpoint
            .compare_exchange(step, 0, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            panic!("injected: the checkpoint failed");
        }
    }
}

/// Checkpoint steps a test can make panic: freezing the memtable (under
/// the writer slot), folding (without it), adopting the folded tree
/// (under it).
#[cfg(test)]
pub(crate) const CKPT_FREEZE: u8 = 1;
#[cfg(test)]
pub(crate) const CKPT_FOLD: u8 = 2;
#[cfg(test)]
pub(crate) const CKPT_ADOPT: u8 = 3;

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

/// A published snapshot held for read transactions: the ones a thread
/// begins while nothing new is published share one, so beginning one
/// writes only to this thread's stripe and to the lease's count (which
/// only this thread's transactions change). A publish that moves only
/// the LSN (the base and the runs unchanged: a commit made without the
/// writer slot) gives the thread's next transaction a new lease on the
/// same [`LeaseBase`], made without the view's lock.
pub(crate) struct Lease {
    pub base: Arc<LeaseBase>,
    /// The LSN read: at least `base`'s, at most the published one.
    pub lsn: Lsn,
    /// Table ids the catalog gave at `lsn`, by name: a thread's read
    /// transactions at one LSN look a table up once (at most
    /// [`TABLE_IDS`]; a lock only this thread's transactions take).
    pub table_ids: Mutex<Vec<(Box<str>, u32)>>,
}

impl std::ops::Deref for Lease {
    type Target = LeaseBase;
    fn deref(&self) -> &LeaseBase {
        &self.base
    }
}

/// What a lease reads, registered as a reader of its base's generation
/// from its making until its last lease drops it.
pub(crate) struct LeaseBase {
    pub shared: Arc<Shared>,
    pub tree: Arc<Base>,
    /// Commits not yet in `tree`'s memtable when it was made, oldest first
    /// (`super::pending`); the view's version says it is still the list.
    pub runs: Option<Runs>,
    /// The view's version when it was made: while the view still has it,
    /// `tree` and `runs` are what is published (only the LSN may have
    /// moved).
    pub(super) version: u64,
}

/// Table ids a [`Lease`] remembers.
pub(crate) const TABLE_IDS: usize = 8;

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("lsn", &self.lsn)
            .finish_non_exhaustive()
    }
}

impl Drop for LeaseBase {
    fn drop(&mut self) {
        self.shared.unpin(self.tree.gen);
    }
}

/// The stripes' leases (see [`Shared::lease`]).
pub(crate) type Leases = Box<[CachePadded<Mutex<Option<Arc<Lease>>>>]>;

/// Empty stripes.
pub(crate) fn leases() -> Leases {
    (0..STRIPES)
        .map(|_| CachePadded::new(Mutex::new(None)))
        .collect()
}
