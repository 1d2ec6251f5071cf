//! The store: transactions over a B+tree data file, on the write-ahead
//! journal.
//!
//! ```no_run
//! use keel::db::Database;
//!
//! # fn main() -> Result<(), keel::db::DbError> {
//! let db = Database::create("/tmp/my-store")?;
//! let txn = db.begin_write()?;
//! txn.open_table("users")?.insert(b"alice", b"admin")?;
//! txn.commit()?; // durable when it returns
//!
//! let read = db.begin_read();
//! let users = read.open_table("users")?;
//! assert_eq!(users.get(b"alice")?.as_deref(), Some(&b"admin"[..]));
//! drop(read);
//! db.close()?;
//! # Ok(())
//! # }
//! ```
//!
//! Several tables may be open at once in a write transaction; scans run
//! from either end; [`TableDefinition`] gives a table typed keys and
//! values (`docs/store.md`, "Tables and typed keys").
//!
//! A store is a directory: `data.keel` (the B+tree's pages and two meta
//! pages), `journal/` (the write-ahead journal), `LOCK` and `LIVE` (what
//! the writer tells readers in other processes: see
//! [`Database::open_read_only`]). A commit
//! appends one record to the journal and is durable once that record is;
//! checkpoints write the tree's changed pages to the data file in the
//! background and let the journal recycle what they cover. See
//! `docs/store.md` for the guarantees and `docs/format.md` for the bytes.
//!
//! The module's files in layers, bottom first; each imports only from its
//! own layer and those below (`tests/db_layers.rs` checks):
//!
//! 1. Foundation — `error`, `options`, `files`, `sync`, `meta`, `freelist`,
//!    `pagewrite`, `record`, `item`, `kept`, `order`, `placement`,
//!    `helper`: errors, settings, file names, the bytes on disk, keys and
//!    values, locks and kept buffers, the helper thread. Nothing of a store.
//! 2. What a snapshot reads — `layers` (the tree under the memtables),
//!    `writer` (the writer's base), `blind` (a blind transaction's puts,
//!    which are its journal record), `run` (committed puts that readers
//!    search until the memtable has them).
//! 3. The store's state — `gate` (the direct commits' gate), `published`
//!    (what new readers see, and the poison), `pending` (runs not yet in
//!    the memtable), `slot` (the writer slot and the blind transactions
//!    queued for it), `state` (`Shared`, which holds them all, and the
//!    leases readers take of it).
//! 4. Reads — `view` (taking, releasing and expiring snapshots), `read`
//!    (read transactions, tables, scans).
//! 5. Write transactions — `txn`.
//! 6. The commit path — `combine` (groups of commits under the slot),
//!    `direct` (blind commits without the slot).
//! 7. The store — `holder` (the lock), `live` (reading beside another
//!    process's writer), `store` (opening, recovery, a commit's write),
//!    `checkpoint`, `inspect` (`check`), and [`Database`] here.
//! 8. On the store's API — `typed`, `backup`, `salvage/`, `fuzzing`.
//!
//! No import goes up. (A group's members are write transactions, which
//! hold the `Shared`: the vectors groups are made in are kept by
//! `combine` itself, not by the `Shared`.)

#![deny(unsafe_code)]

mod backup;
mod blind;
mod checkpoint;
mod combine;
mod direct;
mod error;
mod files;
mod freelist;
#[doc(hidden)]
pub mod fuzzing;
mod gate;
mod helper;
mod holder;
mod inspect;
mod item;
mod kept;
mod layers;
mod live;
pub mod meta;
mod options;
mod order;
mod pagewrite;
mod pending;
mod placement;
mod published;
mod read;
mod record;
mod run;
mod salvage;
mod slot;
mod state;
mod store;
mod sync;
mod txn;
mod typed;
mod view;
mod writer;

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

pub use backup::{
    BackupProgress, BackupReport, BulkStats, BulkWriter, BULK_TXN_BYTES, BULK_TXN_ENTRIES,
};
pub use error::{DbError, LockHolder, Result};
pub use files::{CLEAN_FILE, DATA_FILE, JOURNAL_DIR, LOCK_FILE};
pub use item::{Key, KeyValue, Value};
pub use live::{LIVE_ATTEMPTS, LIVE_FILE};
pub use options::{Durability, Options};
pub use placement::BackgroundCpus;
pub use read::{Iter, KeyRange, ReadTxn, Table, MAX_TABLE_NAME_BYTES};
pub use salvage::{
    JournalNote, JournalStop, LostChange, LostChangeKind, MetaChoice, RenamedTable, SalvageMeta,
    SalvageOptions, SalvageProgress, SalvageProgressFn, SalvageReport, UnreachableRange,
};
pub use txn::{TableMut, WriteTxn};
pub use typed::{
    DecodeError, KeyCodec, TableDefinition, TypedIter, TypedTable, TypedTableMut, ValueCodec,
};

use crate::btree::{CacheStats, PageSize};
use crate::io::Vfs;
use crate::journal::{JournalOptions, JournalStats, Lsn};
use state::Shared;

/// The most nice levels [`Options::background_nice`] takes (from 0, the
/// highest, to 19, the lowest).
const MAX_NICE_LEVELS: u8 = 19;

/// Builds a [`Database`] with non-default [`Options`].
#[derive(Debug, Clone, Default)]
pub struct Builder {
    options: Options,
}

impl Builder {
    /// Page size of a new store (bytes; a power of two, 4 KiB to 64 KiB).
    pub fn page_size(mut self, bytes: usize) -> Self {
        self.options.page_size = bytes;
        self
    }
    /// Page cache budget in bytes.
    pub fn cache_bytes(mut self, bytes: usize) -> Self {
        self.options.cache_bytes = bytes;
        self
    }
    /// Read clean pages through a memory map (`true`, the default) or
    /// with `pread` (see [`Options::read_mapped`]).
    pub fn read_mapped(mut self, yes: bool) -> Self {
        self.options.read_mapped = yes;
        self
    }
    /// Checkpoint after this many journal record bytes.
    pub fn checkpoint_journal_bytes(mut self, bytes: u64) -> Self {
        self.options.checkpoint_journal_bytes = bytes;
        self
    }
    /// Checkpoint at least this often while commits arrive.
    pub fn checkpoint_interval(mut self, every: Option<Duration>) -> Self {
        self.options.checkpoint_interval = every;
        self
    }
    /// Writers wait for a checkpoint (or run one) past this many
    /// uncovered bytes.
    pub fn backpressure_journal_bytes(mut self, bytes: u64) -> Self {
        self.options.backpressure_journal_bytes = bytes;
        self
    }
    /// Checkpoint after about this many bytes of pages changed in memory.
    pub fn checkpoint_dirty_bytes(mut self, bytes: u64) -> Self {
        self.options.checkpoint_dirty_bytes = bytes;
        self
    }
    /// Writers wait for a checkpoint (or run one) past this many bytes of
    /// memtables.
    pub fn backpressure_dirty_bytes(mut self, bytes: u64) -> Self {
        self.options.backpressure_dirty_bytes = bytes;
        self
    }
    /// A checkpoint writes its fold's changed pages whenever they reach
    /// this many bytes.
    pub fn fold_bytes(mut self, bytes: u64) -> Self {
        self.options.fold_bytes = bytes;
        self
    }
    /// Whether the background checkpointer paces its fold while commits
    /// arrive.
    pub fn paced_checkpoints(mut self, yes: bool) -> Self {
        self.options.paced_checkpoints = yes;
        self
    }

    /// Whether a background thread checkpoints.
    pub fn background_checkpoints(mut self, yes: bool) -> Self {
        self.options.background_checkpoints = yes;
        self
    }

    /// How many nice levels (0 to 19) below the opener the store's helper
    /// thread runs, the checkpointer twice as many (see
    /// [`Options::background_nice`]).
    pub fn background_nice(mut self, levels: u8) -> Self {
        self.options.background_nice = levels;
        self
    }
    /// Which CPUs the store's helper and checkpointer may run on (see
    /// [`Options::background_cpus`]).
    pub fn background_cpus(mut self, cpus: BackgroundCpus) -> Self {
        self.options.background_cpus = cpus;
        self
    }
    /// Expire the oldest read transactions once they keep more than this
    /// many bytes of replaced memtables alive.
    pub fn reader_pinned_bytes(mut self, bytes: u64) -> Self {
        self.options.reader_pinned_bytes = bytes;
        self
    }
    /// The journal's settings.
    pub fn journal(mut self, options: JournalOptions) -> Self {
        self.options.journal = options;
        self
    }
    /// The file system to use.
    pub fn vfs(mut self, vfs: Arc<dyn Vfs>) -> Self {
        self.options.vfs = vfs;
        self
    }
    /// The options as set.
    pub fn options(&self) -> &Options {
        &self.options
    }
    /// Open the store at `path`, creating it (and missing parent
    /// directories) if it holds none.
    pub fn create(self, path: impl AsRef<Path>) -> Result<Database> {
        Database::start(path.as_ref(), self.options, true)
    }
    /// Open the existing store at `path`.
    pub fn open(self, path: impl AsRef<Path>) -> Result<Database> {
        Database::start(path.as_ref(), self.options, false)
    }
    /// Open the existing store at `path` for reading only: see
    /// [`Database::open_read_only`].
    pub fn open_read_only(self, path: impl AsRef<Path>) -> Result<Database> {
        Database::start_read_only(path.as_ref(), self.options)
    }
}

/// An open store. `Send + Sync`: share it between threads by reference or
/// in an `Arc`. One process at a time may open a store.
#[derive(Debug)]
pub struct Database {
    shared: Arc<Shared>,
    checkpointer: Option<JoinHandle<()>>,
    /// A live snapshot beside a writer (`live.rs`), not holding the lock.
    live: bool,
    /// The attempts the open took (1 but for a live snapshot).
    open_attempts: u32,
}

/// What [`Database::stats`] reports.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// The data file's page size in bytes.
    pub page_size: usize,
    /// Pages in the data file (its high-water mark), meta pages included.
    pub page_count: u64,
    /// Pages free for reuse now.
    pub free_pages: u64,
    /// Pages freed by commits, reusable once a checkpoint covers them and
    /// no reader needs them.
    pub pending_free_pages: u64,
    /// The LSN the durable meta page covers.
    pub checkpoint_lsn: Lsn,
    /// The meta page's generation (checkpoints ever taken).
    pub checkpoint_generation: u64,
    /// The newest LSN readers see.
    pub published_lsn: Lsn,
    /// Checkpoints taken since open.
    pub checkpoints: u64,
    /// Pages those checkpoints wrote (tree, overflow and free-list pages).
    pub checkpoint_pages: u64,
    /// Time those checkpoints took, start to end, in milliseconds.
    pub checkpoint_ms: f64,
    /// Parts checkpoints wrote before their last: each time a fold's
    /// changed pages reached `fold_bytes`.
    pub fold_parts: u64,
    /// Times `begin_write` found the store past a backpressure budget
    /// (`Options::backpressure_dirty_bytes`,
    /// `Options::backpressure_journal_bytes`) and waited.
    pub backpressure_waits: u64,
    /// Checkpoints those writers ran themselves: when no checkpoint was
    /// under way, or the one they waited for left the store past a budget.
    pub backpressure_checkpoints: u64,
    /// Transactions committed (with a record) since open.
    pub commits: u64,
    /// Groups of blind transactions committed together by one leader
    /// (see [`WriteTxn`]): `commits` per group says how many each
    /// committer's one wait covered.
    pub commit_groups: u64,
    /// Transactions committed in those groups.
    pub grouped_commits: u64,
    /// Small blind transactions each committed by its own thread, without
    /// the writer slot: it submitted its record and inserted its changes
    /// itself, at once with others (see store.md, "Shared writes on the
    /// read and commit paths").
    pub direct_commits: u64,
    /// Time commits held the writer slot inside `WriteTxn::commit` (a
    /// group's leader, for the group): replaying blind changes, encoding
    /// the record, submitting it to the journal, inserting its changes
    /// into the memtable (while the journal writes it). No other write transaction runs
    /// meanwhile; the wait for durability that follows is not counted.
    /// The time between `begin_write` and `commit` is the caller's, and
    /// not counted either.
    pub commit_writer_ms: f64,
    /// Lone commits of 16 changes or more (nobody else queued) whose
    /// journal write, on the committing thread, and apply to the memtable,
    /// on the store's helper thread, ran side by side: the commit path of
    /// a single writer of large transactions that are `Eventual`, read, or
    /// create a table (the others are counted in `run_commits`). The
    /// fields below split their time, to tell which leg a slow commit
    /// waited on.
    pub overlapped_commits: u64,
    /// Time their writes took: from the committer starting the journal's
    /// write until the record was durable.
    pub overlapped_write_ms: f64,
    /// Time their applies took (on the helper, or on the committer after
    /// the write when the helper had not woken by then).
    pub overlapped_apply_ms: f64,
    /// Writes among them that took over 1 ms.
    pub slow_overlapped_writes: u64,
    /// Applies among them that took over 1 ms.
    pub slow_overlapped_applies: u64,
    /// Applies that ran after the write, not beside it: the helper had not
    /// woken by the time the write was durable.
    pub applied_after_write: u64,
    /// Lone commits of 16 changes or more (nobody else queued,
    /// `Durability::Immediate`) that returned once their record was
    /// durable, published as a run that readers search above the
    /// memtable, and whose changes the helper thread then inserted into
    /// the memtable off the commit's path (docs/store.md, "Write
    /// transactions and tables"): how many were inserted so far.
    pub run_commits: u64,
    /// Time their inserts into the memtable took.
    pub run_apply_ms: f64,
    /// Of `run_commits`, those a committer inserted itself, on its
    /// commit's path, because too many runs were waiting for the helper.
    pub run_commits_by_committers: u64,
    /// Record bytes committed that no checkpoint covers yet.
    pub uncheckpointed_bytes: u64,
    /// Bytes the memtables hold (an estimate): what was committed since
    /// the last checkpoint, and what a running checkpoint is folding.
    pub dirty_bytes: u64,
    /// Keys in the memtables.
    pub memtable_keys: u64,
    /// Versions of those keys in the memtables (each commit that changed
    /// a key adds one).
    pub memtable_versions: u64,
    /// Bytes of memtables that checkpoints replaced and that open read
    /// transactions keep alive (bounded by `reader_pinned_bytes`).
    pub reader_pinned_bytes: u64,
    /// Read transactions expired since open ([`DbError::SnapshotTooOld`]).
    pub snapshots_expired: u64,
    /// The CPUs the store's helper and checkpointer are kept to (`None`:
    /// any the opener may run on; see [`Options::background_cpus`]).
    pub background_cpus: Option<Vec<usize>>,
    /// The CPUs found taking the interrupts of the disk the store is on,
    /// when the store opened (empty when not found).
    pub disk_interrupt_cpus: Vec<usize>,
    /// The page cache's counters since open.
    pub cache: CacheStats,
    /// The journal's counters since open.
    pub journal: JournalStats,
}

impl Database {
    /// Open the store at `path` with default options, creating it (and
    /// missing parent directories) if it holds none.
    pub fn create(path: impl AsRef<Path>) -> Result<Database> {
        Self::builder().create(path)
    }

    /// Open the existing store at `path` with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<Database> {
        Self::builder().open(path)
    }

    /// Open the existing store at `path` for reading only, with default
    /// options: recovery runs as for [`Database::open`] — the same checks,
    /// the same refusals, the journal's records past the checkpoint
    /// replayed into memory — but nothing on disk changes: no journal
    /// segment is synced, zeroed, recycled or created, no checkpoint runs,
    /// and damage the journal skips (records the checkpoint covers) is only
    /// reported. Read transactions see every durable commit;
    /// [`Database::begin_write`] and [`Database::checkpoint`] fail with
    /// [`DbError::ReadOnly`].
    ///
    /// When nobody has the store open it takes the store's lock, like a
    /// writer. When another process (or a `Database` of this one) has it
    /// open, it opens a **live snapshot** instead
    /// ([`Database::is_live`]), without the lock and writing nothing: the
    /// store as of the open — every commit the writer acknowledged before
    /// the call, nothing it had not made durable — and it stays at that
    /// point; open it again to see later commits. A checkpoint of the
    /// writer may reuse pages the snapshot reads: a read then fails (a
    /// checksum mismatch) and [`Database::live_snapshot_stale`] says so;
    /// reopen. Opening tries [`LIVE_ATTEMPTS`] times before it fails with
    /// [`DbError::SnapshotUnavailable`]; a holder that publishes no
    /// durable LSN (a Keel before live readers) is refused with
    /// [`DbError::Locked`], as before. docs/store.md, "Reading a store in
    /// use".
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Database> {
        Self::builder().open_read_only(path)
    }

    /// Options for [`Builder::create`] or [`Builder::open`].
    pub fn builder() -> Builder {
        Builder::default()
    }

    fn start(path: &Path, options: Options, create: bool) -> Result<Database> {
        if options.checkpoint_journal_bytes == 0
            || options.backpressure_journal_bytes == 0
            || options.checkpoint_dirty_bytes == 0
            || options.backpressure_dirty_bytes == 0
            || options.fold_bytes == 0
        {
            return Err(DbError::BadOptions(
                "checkpoint, backpressure and fold byte counts must be above 0".into(),
            ));
        }
        PageSize::new(options.page_size).map_err(|e| DbError::BadOptions(e.to_string()))?;
        if options.background_nice > MAX_NICE_LEVELS {
            return Err(DbError::BadOptions(format!(
                "background_nice is {}: at most {MAX_NICE_LEVELS}",
                options.background_nice
            )));
        }
        if let BackgroundCpus::Only(cpus) = &options.background_cpus {
            // Refused before the store's files are touched.
            placement::only(cpus, &placement::allowed_cpus()).map_err(DbError::BadOptions)?;
        }
        let background = options.background_checkpoints;
        let nice = options.background_nice;
        let shared = Shared::open(path, options, create)?;
        Ok(Self::with_checkpointer(shared, background, nice))
    }

    fn start_read_only(path: &Path, options: Options) -> Result<Database> {
        let (shared, live, attempts) = live::open_read_only(path, options)?;
        let mut db = Self::unregistered(shared, false, 0);
        if !live {
            // (A live snapshot holds no lock: it names no holder.)
            holder::opened(&db.shared);
        }
        db.live = live;
        db.open_attempts = attempts;
        Ok(db)
    }

    fn with_checkpointer(shared: Arc<Shared>, background: bool, nice: u8) -> Database {
        let db = Self::unregistered(shared, background, nice);
        holder::opened(&db.shared);
        db
    }

    /// The `Database` of `shared`, not yet in the registry of the stores
    /// this process holds (`holder`).
    fn unregistered(shared: Arc<Shared>, background: bool, nice: u8) -> Database {
        let checkpointer = background.then(|| {
            let s = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("keel-checkpoint".into())
                .spawn(move || {
                    s.placement.enter();
                    helper::lower_priority(nice.saturating_mul(2));
                    s.run_checkpointer()
                })
                .expect("spawn the checkpoint thread")
        });
        Database {
            shared,
            checkpointer,
            live: false,
            open_attempts: 1,
        }
    }

    /// Begin a write transaction. Does not wait for another one: the
    /// transaction takes the writer slot at its first read, or at
    /// `commit` (see [`WriteTxn`]). Past the store's backpressure budgets
    /// it first waits for the checkpoint under way, or runs one if none is
    /// or the store is still past them after it (on a thread whose own
    /// write transaction holds the writer slot, that fails with
    /// [`DbError::WouldDeadlock`]). Readers are never blocked by writers.
    pub fn begin_write(&self) -> Result<WriteTxn> {
        self.refuse_read_only()?;
        self.shared.backpressure()?;
        WriteTxn::begin(Arc::clone(&self.shared))
    }

    /// Begin a read transaction: a consistent snapshot of the newest
    /// durable commit, which no later commit changes. Never blocks on the
    /// writer.
    pub fn begin_read(&self) -> ReadTxn {
        ReadTxn::begin(&self.shared)
    }

    /// Checkpoint now: write every durable change to the data file and let
    /// the journal recycle what it covers. Returns the LSN covered, or
    /// `None` when nothing was new. On a thread whose own write
    /// transaction holds the writer slot (it has read):
    /// [`DbError::WouldDeadlock`].
    pub fn checkpoint(&self) -> Result<Option<Lsn>> {
        self.refuse_read_only()?;
        self.shared.refuse_if_holder("checkpoint")?;
        self.shared.checkpoint()
    }

    /// Whether the store was opened with [`Database::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.shared.read_only
    }

    /// Whether this is a live snapshot of a store another process (or
    /// `Database`) has open: [`Database::open_read_only`] found the
    /// store's lock held and read the store beside its writer.
    pub fn is_live(&self) -> bool {
        self.live
    }

    /// How many snapshots a live open tried before one held (1 for any
    /// other open): the others failed because the writer's checkpoint
    /// changed what they read, or it was still opening.
    pub fn open_attempts(&self) -> u32 {
        self.open_attempts
    }

    /// For a live snapshot: whether the writer has checkpointed since it
    /// was taken (the data file's newest meta page is another), so that
    /// the checkpoints may have reused pages it reads. A read that fails
    /// then (`Tree`: a checksum mismatch) is the snapshot growing old,
    /// not damage: open a new one. `false` for a store this `Database`
    /// holds the lock of.
    pub fn live_snapshot_stale(&self) -> bool {
        self.live
            && live::newest_generation(self.shared.options.vfs.as_ref(), &self.shared.path)
                != Some(self.shared.meta().generation)
    }

    fn refuse_read_only(&self) -> Result<()> {
        match self.shared.read_only {
            true => Err(DbError::ReadOnly(self.shared.path.clone())),
            false => Ok(()),
        }
    }

    /// Check the store: every page the durable meta page reaches, read
    /// from the file and validated (checksums, page numbers, B+tree order
    /// and balance, overflow chains), every page accounted for exactly
    /// once (tree, free list, or free), and the newest snapshot in memory.
    /// Returns the on-disk and in-memory tree statistics.
    pub fn check(&self) -> Result<CheckReport> {
        let (disk, memory) = self.shared.check()?;
        Ok(CheckReport { disk, memory })
    }

    /// Counters and sizes.
    pub fn stats(&self) -> Stats {
        let s = &self.shared;
        let meta = s.meta();
        let (free, pending) = s.free_counts();
        let c = &s.counters;
        let mem = s.base();
        Stats {
            page_size: s.page_size.bytes(),
            page_count: meta.page_count,
            free_pages: free,
            pending_free_pages: pending,
            checkpoint_lsn: meta.checkpoint_lsn,
            checkpoint_generation: meta.generation,
            published_lsn: s.published_lsn(),
            checkpoints: c.checkpoints.load(Ordering::Relaxed),
            checkpoint_pages: c.checkpoint_pages.load(Ordering::Relaxed),
            checkpoint_ms: c.checkpoint_us.load(Ordering::Relaxed) as f64 / 1000.0,
            fold_parts: c.fold_parts.load(Ordering::Relaxed),
            backpressure_waits: c.backpressure_waits.load(Ordering::Relaxed),
            backpressure_checkpoints: c.backpressure_checkpoints.load(Ordering::Relaxed),
            commits: c.commits.load(Ordering::Relaxed) + c.direct_commits.sum()[0],
            direct_commits: c.direct_commits.sum()[0],
            commit_groups: c.groups.load(Ordering::Relaxed),
            grouped_commits: c.grouped_commits.load(Ordering::Relaxed),
            commit_writer_ms: c.commit_writer_ns.load(Ordering::Relaxed) as f64 / 1e6,
            overlapped_commits: c.overlap.commits.load(Ordering::Relaxed),
            overlapped_write_ms: c.overlap.write_ns.load(Ordering::Relaxed) as f64 / 1e6,
            overlapped_apply_ms: c.overlap.apply_ns.load(Ordering::Relaxed) as f64 / 1e6,
            slow_overlapped_writes: c.overlap.slow_writes.load(Ordering::Relaxed),
            slow_overlapped_applies: c.overlap.slow_applies.load(Ordering::Relaxed),
            applied_after_write: c.overlap.applied_after_write.load(Ordering::Relaxed),
            run_commits: s.unapplied.applied.load(Ordering::Relaxed),
            run_apply_ms: s.unapplied.apply_ns.load(Ordering::Relaxed) as f64 / 1e6,
            run_commits_by_committers: s.unapplied.by_committer.load(Ordering::Relaxed),
            uncheckpointed_bytes: s.bytes_since_checkpoint.load(Ordering::Relaxed),
            dirty_bytes: s.dirty_bytes.load(Ordering::Relaxed),
            memtable_keys: mem.layers().map(|l| l.mem.len()).sum(),
            memtable_versions: mem.layers().map(|l| l.mem.versions()).sum(),
            reader_pinned_bytes: s.reader_pinned_bytes(),
            snapshots_expired: c.snapshots_expired.load(Ordering::Relaxed),
            background_cpus: s.placement.cpus.clone(),
            disk_interrupt_cpus: s.placement.disk_interrupt_cpus.clone(),
            cache: s.cache.stats(),
            journal: s.journal.stats(),
        }
    }

    /// Statistics of the newest snapshot's tree (depth, pages, entries):
    /// walks the whole tree.
    pub fn tree_stats(&self) -> Result<crate::btree::TreeStats> {
        self.shared.tree_stats()
    }

    /// The journal under the store (for its statistics and recovery
    /// report).
    pub fn journal(&self) -> &crate::journal::Journal {
        &self.shared.journal
    }

    /// The largest key, value and transaction the store accepts.
    pub fn limits(&self) -> Limits {
        let max_transaction_bytes = self.shared.journal.options().max_record_bytes();
        Limits {
            max_key_bytes: read::max_key_bytes(&self.shared),
            max_value_bytes: txn::max_value_bytes(max_transaction_bytes),
            max_transaction_bytes,
        }
    }

    /// Close the store: wait for commits not yet durable, checkpoint
    /// everything (so the next open replays nothing), and report any error
    /// (dropping a `Database` cannot). Read transactions still open keep
    /// their snapshots readable. On a thread whose own write transaction
    /// holds the writer slot (it has read): [`DbError::WouldDeadlock`].
    pub fn close(mut self) -> Result<()> {
        self.shared.refuse_if_holder("close")?;
        self.stop_checkpointer();
        if self.shared.read_only {
            return Ok(());
        }
        let s = &self.shared;
        s.check_poison()?;
        let w = s.take_writer()?;
        let last = w.last_lsn;
        s.put_writer(w);
        s.wait_published(last)?;
        s.checkpoint()?;
        s.mark_closed_clean()
    }

    fn stop_checkpointer(&mut self) {
        self.shared.drop_leases();
        self.shared.stop_checkpointer();
        // A checkpoint under way may wait for the writer slot this thread
        // holds: joining it would wait forever. It stops by itself once
        // the slot is given back.
        if self.shared.writer_held_here() {
            self.checkpointer = None;
            return;
        }
        if let Some(h) = self.checkpointer.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Database {
    /// Stops the checkpointer. Commits are durable (or were not waited
    /// for); what no checkpoint covers is replayed from the journal at the
    /// next open. Use [`Database::close`] to see errors.
    fn drop(&mut self) {
        self.stop_checkpointer();
        holder::closed(&self.shared);
    }
}

/// What [`Database::check`] found.
#[derive(Debug, Clone)]
pub struct CheckReport {
    /// The tree the durable meta page refers to, read from the file.
    pub disk: crate::btree::TreeStats,
    /// The newest snapshot readers see.
    pub memory: crate::btree::TreeStats,
}

/// The store's size limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest key, in bytes (it depends on the page size).
    pub max_key_bytes: usize,
    /// The longest value, in bytes: the most one transaction's record can
    /// hold (a put under an empty key, alone in its transaction, into a
    /// table that exists: `max_transaction_bytes` less 12), at most
    /// 2³² − 1 (the format's limit): 64 MiB less 4,148 bytes with the
    /// default largest journal segment size, 64 MiB
    /// (`JournalOptions::segment_size_bytes`, whatever size the segments
    /// have grown to); a larger one takes larger values.
    pub max_value_bytes: u64,
    /// The most bytes of one transaction's journal record: 1, plus 11 and
    /// its key and value for each put, 7 and its key for each delete (the
    /// key's 4-byte table prefix included), 5 for each dropped table, and
    /// the catalog's entries: its name + 15 for each table created (and 15
    /// once for the next table id), its name + 7 for each table dropped.
    pub max_transaction_bytes: usize,
}

#[cfg(test)]
mod bound_tests;
#[cfg(test)]
mod edge_tests;
#[cfg(test)]
mod publish_tests;
#[cfg(test)]
mod run_tests;
#[cfg(test)]
mod scan_tests;
#[cfg(test)]
mod tests;
