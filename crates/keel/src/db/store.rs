//! The store's shared state: opening and recovery, the commit path after a
//! transaction is built, checkpoints and page reuse (publication to
//! readers: `view.rs`; `check`: `inspect.rs`). `docs/format.md` ("The
//! commit and checkpoint protocol") states the rules this file keeps; each
//! is named where it is kept.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::combine::Slot;
use super::error::{DbError, Result};
use super::freelist;
use super::helper::Helper;
use super::layers::{Base, Layer};
use super::meta::{self, Meta, MetaError, PageRef};
use super::pagewrite::PageWriter;
use super::record::{self, Op};
use super::txn::Record;
use super::view::Published;
use super::{Durability, Options};
use crate::btree::{
    detach_clean, reserve_pages, Fork, Location, PageCache, PageNo, PageSize, Placed, Tree,
    TreeMut, FIRST_TREE_PAGE, MAX_PAGE_BYTES, MIN_PAGE_BYTES,
};
use crate::io::{self, LockGuard, OpenMode, OpenOptions, SyncKind, Vfs, VfsFile};
use crate::journal::{CommitHandle, Journal, JournalOptions, Lsn, RecoveryMode};
use crate::memtable::ChunkPool;

/// The data file's name inside the store directory.
pub const DATA_FILE: &str = "data.keel";
/// The journal directory's name inside the store directory.
pub const JOURNAL_DIR: &str = "journal";
/// The lock file's name inside the store directory.
pub const LOCK_FILE: &str = "LOCK";

/// Recover from a poisoned mutex: every critical section here leaves its
/// state consistent before anything can panic, and a panic elsewhere must
/// not take the store down with it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Commits of at least this many changes hand their record's write to the
/// journal's flusher thread before inserting them into the memtable, so
/// that the apply overlaps the write; smaller ones apply first and then write the
/// record themselves in `wait` (the journal's lone-committer path). Waking
/// the flusher costs tens of µs on these VMs (an idle vCPU halts and needs
/// an interrupt from the hypervisor), more than a small apply takes: with
/// the hand-off on every commit, w1 (one 16 KiB put per commit) ran at
/// 0.69x the journal alone, the committer itself writing the batch in 775
/// of 2,000 commits because the flusher had not yet run (perf sched,
/// 2026-11-23, when a change cost about 3 µs to apply to the tree; into
/// the memtable it costs about 1 µs at a million keys).
pub(super) const START_MIN_OPS: usize = 16;

/// Free memtable memory the helper keeps faulted in ahead of the writer
/// (see `crate::memtable`: memory the process has not touched before
/// costs ~1 ms per MiB to fault in on these VMs, measured; in w3 a commit
/// takes ~20 KiB).
const PREPARE_AHEAD_BYTES: u64 = 8 << 20;

/// What only the one writer touches: the base its commits go into (its
/// active memtable holds every commit, perhaps not yet durable) and the
/// LSN of the last one.
#[derive(Debug)]
pub(crate) struct WriterState {
    pub base: Arc<Base>,
    pub last_lsn: Lsn,
    /// The buffer records are encoded into, kept between commits: a fresh
    /// one per commit came from memory the allocator had not touched yet,
    /// and the kernel zeroing it was a tenth of w1's time (perf,
    /// 2026-11-23). See [`WriterState::recycle`].
    pub record_buf: Vec<u8>,
}

/// A record buffer larger than this is not kept for the next commit.
pub(crate) const KEEP_RECORD_BUF_BYTES: usize = 1 << 20;

impl WriterState {
    pub(crate) fn new(base: Arc<Base>, last_lsn: Lsn) -> WriterState {
        WriterState {
            base,
            last_lsn,
            record_buf: Vec::new(),
        }
    }

    /// Keep `buf` (emptied) for the next commit's record, unless a large
    /// transaction grew it past [`KEEP_RECORD_BUF_BYTES`].
    pub(crate) fn recycle(&mut self, mut buf: Vec<u8>) {
        if buf.capacity() <= KEEP_RECORD_BUF_BYTES {
            buf.clear();
            self.record_buf = buf;
        }
    }
}

/// The data file's pages: the durable meta, which pages are free, and which
/// were freed by commits but may not be reused yet.
#[derive(Debug)]
struct Space {
    meta: Meta,
    /// Pages holding the durable meta's free list.
    freelist_pages: Vec<PageNo>,
    /// Pages that no durable meta and no reader can reach: reusable now.
    free: BTreeSet<PageNo>,
    /// Pages the fold that made the tree of the generation beside them
    /// freed: the durable meta (of an older generation) or a reader of an
    /// older tree may still reach them.
    pending: Vec<(u64, PageNo)>,
    /// The generation of the tree the durable meta page holds.
    durable_gen: u64,
    /// By page number, for the pages checkpoints wrote since open: the
    /// generation of the tree that first held the node (or value) in it.
    /// A reader of an older tree never sees the page. 0 (and pages past
    /// the end): written before open, seen by every reader.
    born_after: Vec<u64>,
}

impl Space {
    /// The pages of the data file as `meta` leaves them: its free list
    /// read, with cheap checks before the list is trusted with allocations
    /// (the full one, against the tree's pages, is `check`).
    fn load(dir: &Path, data: &dyn VfsFile, ps: PageSize, meta: Meta) -> Result<Space> {
        let (freelist_pages, free) =
            read_freelist(data, ps, &meta).map_err(|r| corrupt(dir, format!("free list: {r}")))?;
        let listed: BTreeSet<PageNo> = free.iter().copied().collect();
        if listed.len() != free.len()
            || free.len() as u64 != meta.free_pages
            || freelist_pages.iter().any(|p| listed.contains(p))
        {
            return Err(corrupt(
                dir,
                format!(
                    "free list: {} entries ({} distinct) for the meta page's {}, or listing its \
                     own pages",
                    free.len(),
                    listed.len(),
                    meta.free_pages
                ),
            ));
        }
        Ok(Space {
            meta,
            freelist_pages,
            free: listed,
            pending: Vec::new(),
            durable_gen: 0,
            born_after: Vec::new(),
        })
    }

    fn born_after(&self, page: PageNo) -> u64 {
        usize::try_from(page)
            .ok()
            .and_then(|p| self.born_after.get(p))
            .copied()
            .unwrap_or(0)
    }

    fn set_born_after(&mut self, page: PageNo, gen: u64) {
        let p = usize::try_from(page).expect("page numbers fit in memory");
        if self.born_after.len() <= p {
            self.born_after.resize(p + 1, 0);
        }
        self.born_after[p] = gen;
    }
}

/// A checkpoint's page writes, across the parts of its fold.
struct Writing<'s> {
    /// The generation of the tree the checkpoint makes.
    gen: u64,
    /// The data file's pages, with those the checkpoint added.
    page_count: u64,
    out: PageWriter<'s>,
    /// Pages handed to `out`.
    pages: u64,
    /// Parts written before the last (the fold outgrew `fold_bytes`).
    parts: u64,
}

/// Changes per fold batch, at least and at most (with `fold_bytes` of a
/// page per change between the two): the checkpoint looks at the fold's
/// memory between batches.
const FOLD_MIN_BATCH: usize = 16;
const FOLD_MAX_BATCH: usize = 4096;

/// Checkpointer control.
#[derive(Debug, Default)]
struct CkptCtl {
    stop: bool,
    requested: bool,
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
    pub commits: AtomicU64,
    pub groups: AtomicU64,
    pub grouped_commits: AtomicU64,
    /// Nanoseconds commits held the writer slot inside `commit`.
    pub commit_writer_ns: AtomicU64,
}

pub(crate) struct Shared {
    pub path: PathBuf,
    pub options: Options,
    pub page_size: PageSize,
    pub data: Arc<dyn VfsFile>,
    /// What checkpoints write pages through: the data file opened again
    /// with `O_DIRECT` where it can be (see `pagewrite`), else `data`.
    page_writes: Arc<dyn VfsFile>,
    pub cache: PageCache,
    pub journal: Journal,
    /// The writer's state, taken by a write transaction (or a checkpoint)
    /// for its whole life: `None` while taken.
    pub(super) writer: Mutex<Slot>,
    pub(super) writer_cv: Condvar,
    /// What readers see, and the poison: shared with journal callbacks
    /// (which must not hold the store itself: the last reference dropped
    /// on a journal thread would join that thread).
    pub(super) published: Arc<Published>,
    space: Mutex<Space>,
    /// One checkpoint at a time.
    pub(super) ckpt_run: Mutex<()>,
    ckpt: Mutex<CkptCtl>,
    ckpt_cv: Condvar,
    /// Record bytes committed since the last checkpoint started.
    pub bytes_since_checkpoint: AtomicU64,
    /// Bytes the memtables hold, as of the last commit or checkpoint (see
    /// `Options::checkpoint_dirty_bytes`).
    pub dirty_bytes: AtomicU64,
    pub counters: Counters,
    /// A second thread for large folds and for freeing replaced bases
    /// (none if it could not be started).
    pub(crate) helper: Option<Helper>,
    _lock: Box<dyn LockGuard>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

fn not_a_store(path: &Path, reason: impl Into<String>) -> DbError {
    DbError::NotAStore {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

pub(super) fn corrupt(path: &Path, reason: impl Into<String>) -> DbError {
    DbError::Corrupt {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn journal_options(options: &Options) -> JournalOptions {
    JournalOptions {
        // Damage inside the journal is an error, never a silent cut.
        recovery_mode: RecoveryMode::RefuseCorruption,
        ..options.journal.clone()
    }
}

/// The two meta slots' bytes. Slot 1 is page 1, whose offset is the page
/// size, which the meta itself states: take it from slot 0, or, when slot
/// 0 is not valid, try every page size for a slot 1 that states its own
/// offset.
fn read_metas(data: &dyn VfsFile) -> Result<(Vec<u8>, Vec<u8>)> {
    let len = data.len()?;
    let read = |at: u64| -> Result<Vec<u8>> {
        let mut b = vec![0u8; meta::META_BYTES];
        if at + b.len() as u64 <= len {
            data.read_exact_at(&mut b, at)?;
        }
        Ok(b)
    };
    let slot0 = read(0)?;
    let sizes: Vec<u64> = match Meta::decode(&slot0) {
        Ok(m) => vec![m.page_size as u64],
        Err(_) => {
            let mut v = Vec::new();
            let mut s = MIN_PAGE_BYTES as u64;
            while s <= MAX_PAGE_BYTES as u64 {
                v.push(s);
                s *= 2;
            }
            v
        }
    };
    let mut slot1 = None;
    for &size in &sizes {
        let b = read(size)?;
        if Meta::decode(&b).is_ok_and(|m| m.page_size as u64 == size) {
            slot1 = Some(b);
            break;
        }
    }
    let slot1 = match slot1 {
        Some(b) => b,
        None => read(sizes[0])?,
    };
    Ok((slot0, slot1))
}

/// Whether the directory holds a store whose creation finished.
/// The newest valid meta page of the data file, and its page size, made
/// durable before it is trusted: after a process crash the page cache may
/// hold a meta page (or pages) whose write was never synced — adopting it
/// and then reusing the pages the older meta refers to would leave nothing
/// valid after a power cut. After a failed sync, pages that never reached
/// the disk may read back as written until evicted.
fn durable_meta(dir: &Path, data: &dyn VfsFile) -> Result<(Meta, PageSize)> {
    data.evict_clean_pages()?;
    data.sync(SyncKind::Data)?;
    let (a, b) = read_metas(data)?;
    let (meta, _other) = meta::choose(&a, &b).map_err(|[e0, e1]| {
        corrupt(
            dir,
            format!("neither meta page is valid (page 0: {e0}; page 1: {e1})"),
        )
    })?;
    let ps = PageSize::new(meta.page_size as usize)
        .map_err(|e| corrupt(dir, format!("meta page: {e}")))?;
    let file_pages = data.len()? / ps.bytes() as u64;
    if file_pages < meta.page_count {
        return Err(corrupt(
            dir,
            format!(
                "the data file holds {file_pages} pages but its meta page counts {} (truncated?)",
                meta.page_count
            ),
        ));
    }
    Ok((meta, ps))
}

/// The store's journal (damage inside it is an error), checked to belong
/// to the data file of `meta`.
fn open_journal(dir: &Path, vfs: &Arc<dyn Vfs>, options: &Options, meta: &Meta) -> Result<Journal> {
    let jdir = dir.join(JOURNAL_DIR);
    if !vfs.exists(&jdir)? {
        return Err(corrupt(dir, "the journal directory is missing"));
    }
    let journal = Journal::open(Arc::clone(vfs), &jdir, journal_options(options))?;
    if journal.store_id() != meta.journal_id {
        return Err(corrupt(
            dir,
            format!(
                "the journal (store id {:#x}) does not belong to this data file (store id {:#x})",
                journal.store_id(),
                meta.journal_id
            ),
        ));
    }
    Ok(journal)
}

fn initialized(vfs: &dyn Vfs, dir: &Path) -> Result<bool> {
    let path = dir.join(DATA_FILE);
    if !vfs.exists(&path)? {
        return Ok(false);
    }
    let data = vfs.open(&path, OpenOptions::new(OpenMode::Buffered).read_only(true))?;
    let (a, b) = read_metas(data.as_ref())?;
    Ok(!(Meta::decode(&a) == Err(MetaError::Blank) && Meta::decode(&b) == Err(MetaError::Blank)))
}

/// Lay down a new store in `dir` (which is locked): the journal first, then
/// the data file with its first meta page, each made durable.
fn initialize(vfs: &Arc<dyn Vfs>, dir: &Path, options: &Options) -> Result<()> {
    let jdir = dir.join(JOURNAL_DIR);
    let journal = Journal::open(Arc::clone(vfs), &jdir, journal_options(options))?;
    if journal.recovery_report().last_lsn.is_some() {
        return Err(corrupt(
            dir,
            "the journal holds records but the data file has no meta page",
        ));
    }
    let ps = PageSize::new(options.page_size).map_err(|e| DbError::BadOptions(e.to_string()))?;
    let meta = Meta {
        page_size: ps.bytes() as u32,
        generation: 0,
        checkpoint_lsn: journal.next_lsn() - 1,
        root: PageRef::default(),
        page_count: FIRST_TREE_PAGE,
        freelist: PageRef::default(),
        free_pages: 0,
        journal_id: journal.store_id(),
    };
    drop(journal);
    let path = dir.join(DATA_FILE);
    let data = vfs.open(&path, OpenOptions::new(OpenMode::Buffered).create(true))?;
    let mut pages = vec![0u8; 2 * ps.bytes()];
    meta.encode(&mut pages[..ps.bytes()]);
    data.set_len(0)?;
    data.write_at(&pages, 0)?;
    data.sync(SyncKind::Data)?;
    vfs.sync_dir(dir)?;
    Ok(())
}

impl Shared {
    /// Open the store in `dir`, creating it first when `create` and it
    /// holds none. Recovery replays the journal past the checkpoint.
    pub(crate) fn open(dir: &Path, options: Options, create: bool) -> Result<Arc<Shared>> {
        let vfs = Arc::clone(&options.vfs);
        if create {
            io::create_dir_all_durable(vfs.as_ref(), dir)?;
        } else if !vfs.exists(dir)? {
            return Err(not_a_store(dir, "no such directory"));
        }
        if !vfs.exists(&dir.join(DATA_FILE))? && !create {
            return Err(not_a_store(dir, format!("no {DATA_FILE} in it")));
        }
        let guard = vfs.lock(&dir.join(LOCK_FILE)).map_err(|e| match e {
            io::IoError::Locked { .. } => DbError::Locked(dir.to_path_buf()),
            e => e.into(),
        })?;
        if !initialized(vfs.as_ref(), dir)? {
            if !create {
                return Err(not_a_store(
                    dir,
                    "its data file has no meta page (a creation that never finished?)",
                ));
            }
            initialize(&vfs, dir, &options)?;
        }
        Self::recover(dir, options, guard)
    }

    fn recover(dir: &Path, options: Options, guard: Box<dyn LockGuard>) -> Result<Arc<Shared>> {
        let vfs = Arc::clone(&options.vfs);
        let path = dir.join(DATA_FILE);
        let data = vfs.open(&path, OpenOptions::new(OpenMode::Buffered))?;
        let (meta, ps) = durable_meta(dir, data.as_ref())?;
        let journal = open_journal(dir, &vfs, &options, &meta)?;
        let cache = PageCache::new(Arc::clone(&data), ps, options.cache_bytes);
        let root = (meta.root.page != 0).then_some(Location {
            page: meta.root.page,
            crc: meta.root.crc,
        });
        let tree = Tree::open(ps, &cache, root)?;
        let space = Space::load(dir, data.as_ref(), ps, meta)?;
        let base = Arc::new(Base {
            tree,
            active: Arc::new(Layer::new(ChunkPool::new(
                options.checkpoint_dirty_bytes / 2,
            ))),
            frozen: None,
            gen: 0,
        });
        let page_writes = open_page_writes(vfs.as_ref(), &path, ps, &data);
        let shared = Shared {
            path: dir.to_path_buf(),
            page_size: ps,
            data,
            page_writes,
            cache,
            journal,
            writer: Mutex::new(Slot::default()),
            writer_cv: Condvar::new(),
            published: Arc::new(Published::new(Arc::clone(&base), meta.checkpoint_lsn)),
            space: Mutex::new(space),
            ckpt_run: Mutex::new(()),
            ckpt: Mutex::new(CkptCtl::default()),
            ckpt_cv: Condvar::new(),
            bytes_since_checkpoint: AtomicU64::new(0),
            dirty_bytes: AtomicU64::new(0),
            counters: Counters::default(),
            helper: Helper::start().ok(),
            options,
            _lock: guard,
        };
        let last = shared.replay(&base.active, meta.checkpoint_lsn)?;
        shared
            .dirty_bytes
            .store(base.mem_bytes(), Ordering::Relaxed);
        lock(&shared.published.view).lsn = last;
        lock(&shared.writer).state = Some(WriterState::new(base, last));
        Ok(Arc::new(shared))
    }

    /// Insert the journal's records after the checkpoint LSN into `layer`;
    /// returns the last LSN.
    fn replay(&self, layer: &Layer, checkpoint: Lsn) -> Result<Lsn> {
        let next = self.journal.next_lsn();
        if next <= checkpoint {
            return Err(corrupt(
                &self.path,
                format!(
                    "the journal ends before lsn {next}, but the data file's checkpoint covers up \
                     to lsn {checkpoint}"
                ),
            ));
        }
        let mut last = checkpoint;
        for rec in self.journal.read_from(checkpoint + 1)? {
            let (lsn, payload) = rec?;
            if lsn != last + 1 {
                return Err(corrupt(
                    &self.path,
                    format!(
                        "the journal's records after the checkpoint (lsn {checkpoint}) start at \
                         lsn {lsn}: records {}..{lsn} are missing",
                        last + 1
                    ),
                ));
            }
            let ops = record::decode(&payload, self.page_size.max_key_bytes()).map_err(|b| {
                corrupt(
                    &self.path,
                    format!("journal record {lsn}, byte {}: {}", b.at, b.reason),
                )
            })?;
            layer.apply(&ops, lsn);
            self.bytes_since_checkpoint
                .fetch_add(payload.len() as u64, Ordering::Relaxed);
            last = lsn;
        }
        if last + 1 != next {
            return Err(corrupt(
                &self.path,
                format!("the journal's next lsn is {next} but replay ended at lsn {last}"),
            ));
        }
        Ok(last)
    }

    // ----- poison -------------------------------------------------------

    pub(crate) fn check_poison(&self) -> Result<()> {
        match &*lock(&self.published.poison) {
            Some(why) => Err(DbError::Poisoned(Arc::clone(why))),
            None => Ok(()),
        }
    }

    /// Stop accepting writes; wake everyone who waits on the store.
    pub(crate) fn set_poison(&self, why: &str) -> Arc<str> {
        let why = self.published.set_poison(why);
        // Waiting transactions fail; queued ones are failed by the
        // committer the slot goes to.
        self.dispatch(lock(&self.writer));
        self.writer_cv.notify_all();
        self.ckpt_cv.notify_all();
        why
    }

    // ----- the commit path ------------------------------------------------

    /// The helper, for folding on two threads.
    pub(crate) fn fork(&self) -> Option<&dyn Fork> {
        self.helper.as_ref().map(|h| h as &dyn Fork)
    }

    /// Commit a validated record: submit it, start its write, insert its
    /// changes into the active memtable under its LSN while the write is
    /// in flight, give the writer slot back, then wait for durability (or
    /// not) and publish. `started` is when `WriteTxn::commit` began
    /// encoding the record: the time from there to giving the writer slot
    /// back is counted in `commit_writer_ns`.
    pub(crate) fn commit(
        self: &Arc<Self>,
        mut w: WriterState,
        record: Record<'_>,
        ops: &[Op<'_>],
        durability: Durability,
        started: Instant,
    ) -> Result<()> {
        if let Err(e) = self.check_poison() {
            self.put_writer(w);
            return Err(e);
        }
        let submitted = self.journal.submit_parts(&record.parts());
        let record_bytes = record.len();
        w.recycle(record.into_buf());
        let handle = match submitted {
            Ok(h) => h,
            Err(e) => {
                // Nothing was queued, but the journal refuses more.
                let why = self.set_poison(&format!("the journal refused a record: {e}"));
                self.put_writer(w);
                return Err(DbError::Poisoned(why));
            }
        };
        if ops.len() >= START_MIN_OPS {
            handle.start();
        }
        let lsn = handle.lsn();
        // Invisible to readers until `lsn` is published.
        w.base.active.apply(ops, lsn);
        self.applied(&w.base, record_bytes);
        w.last_lsn = lsn;
        self.put_writer(w);
        self.counters
            .commit_writer_ns
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.counters.commits.fetch_add(1, Ordering::Relaxed);
        match durability {
            Durability::Immediate => match handle.wait() {
                Ok(_) => {
                    self.publish(lsn);
                    Ok(())
                }
                Err(e) => {
                    let why = self.set_poison(&format!("writing lsn {lsn} failed: {e}"));
                    Err(DbError::CommitFailed(why))
                }
            },
            Durability::Eventual => {
                self.publish_on_durable(handle, lsn, |_| {});
                Ok(())
            }
        }
    }

    /// Publish the state after `lsn` once the journal reports `handle`'s
    /// record durable, from a journal thread, or poison the store if the
    /// write fails; then call `then` with the outcome (why the store
    /// failed).
    pub(crate) fn publish_on_durable(
        &self,
        handle: CommitHandle,
        lsn: Lsn,
        then: impl FnOnce(std::result::Result<(), Arc<str>>) + Send + 'static,
    ) {
        let published = Arc::clone(&self.published);
        handle.on_durable(move |r| match r {
            Ok(_) => {
                published.publish(lsn);
                then(Ok(()));
            }
            Err(e) => then(Err(
                published.set_poison(&format!("writing lsn {lsn} failed: {e}"))
            )),
        });
    }

    /// Account for a record inserted into `base`'s active memtable: its
    /// journal bytes, and the memory the memtables hold; ask for a
    /// checkpoint when a budget is reached.
    pub(crate) fn applied(&self, base: &Base, record_bytes: usize) {
        self.dirty_bytes.store(base.mem_bytes(), Ordering::Relaxed);
        let pool = base.active.pool();
        if let Some(h) = &self.helper {
            if pool.wants(PREPARE_AHEAD_BYTES) {
                let pool = Arc::clone(pool);
                h.chore(move |pause| {
                    pool.prepare(PREPARE_AHEAD_BYTES, &|| pause.run_posted());
                });
            }
        }
        let since = self
            .bytes_since_checkpoint
            .fetch_add(record_bytes as u64, Ordering::Relaxed)
            + record_bytes as u64;
        // The active memtable only: a frozen one is being folded already.
        if since >= self.options.checkpoint_journal_bytes
            || base.active.bytes() >= self.options.checkpoint_dirty_bytes
        {
            self.request_checkpoint();
        }
    }

    // ----- checkpoints ----------------------------------------------------

    /// The durable meta page.
    pub(crate) fn meta(&self) -> Meta {
        lock(&self.space).meta
    }

    /// Free pages now, and pages waiting to be reusable.
    pub(crate) fn free_counts(&self) -> (u64, u64) {
        let sp = lock(&self.space);
        (sp.free.len() as u64, sp.pending.len() as u64)
    }

    pub(crate) fn request_checkpoint(&self) {
        lock(&self.ckpt).requested = true;
        self.ckpt_cv.notify_all();
    }

    /// The background checkpointer: checkpoints when asked (journal bytes
    /// since the last one) or when the interval passed with commits since.
    ///
    /// Background checkpoints must not slow commits down: this thread
    /// runs at a lower priority (nice 10; committers win a contended CPU
    /// ~9 times in 10), and folds alone, leaving the helper to committers.
    /// On these 2-vCPU VMs, with checkpoints folding on two threads at
    /// normal priority, w3 ran at 4,500–4,800 transactions/s against
    /// 5,600–5,900 with background checkpoints off (same hour).
    pub(crate) fn run_checkpointer(self: Arc<Self>) {
        // Best effort: a failure leaves the thread at normal priority.
        let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 10);
        let mut last = Instant::now();
        loop {
            let mut c = lock(&self.ckpt);
            loop {
                if c.stop {
                    return;
                }
                let due = self
                    .options
                    .checkpoint_interval
                    .is_some_and(|i| last.elapsed() >= i)
                    && self.bytes_since_checkpoint.load(Ordering::Relaxed) > 0;
                if c.requested || due {
                    c.requested = false;
                    break;
                }
                let wait =
                    self.options
                        .checkpoint_interval
                        .map_or(Duration::from_secs(3600), |i| {
                            i.saturating_sub(last.elapsed())
                                .max(Duration::from_millis(1))
                        });
                c = self
                    .ckpt_cv
                    .wait_timeout(c, wait)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            drop(c);
            last = Instant::now();
            if self.checkpoint_with(None).is_err() {
                // The checkpoint poisoned the store; writers see why.
                return;
            }
        }
    }

    pub(crate) fn stop_checkpointer(&self) {
        lock(&self.ckpt).stop = true;
        self.ckpt_cv.notify_all();
    }

    /// Writers wait here while the journal holds too much that no
    /// checkpoint covers, or too many changed pages are in memory (replay
    /// time and memory stay bounded): they run a checkpoint themselves.
    pub(crate) fn backpressure(&self) -> Result<()> {
        let o = &self.options;
        if self.bytes_since_checkpoint.load(Ordering::Relaxed) >= o.backpressure_journal_bytes
            || self.dirty_bytes.load(Ordering::Relaxed) >= o.backpressure_dirty_bytes
        {
            self.checkpoint()?;
        }
        Ok(())
    }

    /// Write every change up to the published (durable) LSN to the data
    /// file and switch the meta page to it; then release the journal up to
    /// there. Returns the checkpoint's LSN, or `None` when there was
    /// nothing to do.
    ///
    /// The steps (docs/format.md, "Checkpoint"): under the writer slot,
    /// wait until everything applied is durable and freeze the active
    /// memtable; without the slot, fold it into a copy of the tree, give
    /// the copy's new nodes pages, write them, sync, write the meta page,
    /// sync; under the slot again, make the folded tree the base (the
    /// frozen memtable goes); release the journal.
    pub(crate) fn checkpoint(&self) -> Result<Option<Lsn>> {
        self.checkpoint_with(self.fork())
    }

    /// [`Shared::checkpoint`], folding on this thread alone (`fork: None`)
    /// or with the helper.
    fn checkpoint_with(&self, fork: Option<&dyn Fork>) -> Result<Option<Lsn>> {
        let _one = lock(&self.ckpt_run);
        self.check_poison()?;
        let started = Instant::now();
        let Some((lsn, frozen)) = self.freeze()? else {
            return Ok(None);
        };
        let old_tree = frozen.tree.clone();
        let layer = Arc::clone(frozen.frozen.as_ref().expect("frozen"));
        drop(frozen);
        let mut run = self.start_writing();
        // The fold: only this thread changes this copy; no reader sees it
        // before it is durable. Whenever the nodes it copied outgrow
        // `fold_bytes`, they are written out and dropped from memory.
        let mut tm = old_tree.edit();
        let folded = self.fold(&layer, &mut tm, fork, &mut run);
        if let Err(e) = folded {
            let why = self.set_poison(&format!("checkpoint: folding up to lsn {lsn}: {e}"));
            return Err(DbError::Poisoned(why));
        }
        let (tree, freed) = tm.finish();
        drop(old_tree);
        let written = self.write_checkpoint(&mut run, &tree, freed, lsn);
        let (meta, list_pages, placed) = match written {
            Ok(w) => w,
            Err(e) => {
                let why = self.set_poison(&format!("checkpoint at lsn {lsn}: {e}"));
                return Err(DbError::Poisoned(why));
            }
        };
        self.adopt(&tree, layer, run.gen, (meta, list_pages, placed), lsn)?;
        let c = &self.counters;
        c.checkpoints.fetch_add(1, Ordering::Relaxed);
        c.checkpoint_pages.fetch_add(run.pages, Ordering::Relaxed);
        c.fold_parts.fetch_add(run.parts, Ordering::Relaxed);
        c.checkpoint_us
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        Ok(Some(lsn))
    }

    /// The checkpoint's meta page is durable: make the folded `tree` (of
    /// generation `gen`) the base of the writer and of new readers in
    /// place of the folded memtable `layer`, adopt the meta page and its
    /// free list, release the journal up to `lsn`, and keep the written
    /// nodes in the page cache only.
    fn adopt(
        &self,
        tree: &Tree,
        layer: Arc<Layer>,
        gen: u64,
        (meta, list_pages, placed): (Meta, Vec<PageNo>, Placed),
        lsn: Lsn,
    ) -> Result<()> {
        let mut w = self.take_writer()?;
        let folded = w.base.folded(tree.clone());
        debug_assert_eq!(folded.gen, gen);
        self.set_base(&mut w, folded);
        self.dirty_bytes
            .store(w.base.mem_bytes(), Ordering::Relaxed);
        self.put_writer(w);
        self.retire(gen, &layer);
        drop(layer);
        {
            let mut sp = lock(&self.space);
            sp.meta = meta;
            sp.durable_gen = gen;
            let old_list = std::mem::replace(&mut sp.freelist_pages, list_pages);
            // The old list's pages are no tree's: free once the new meta is
            // durable.
            sp.free.extend(old_list);
            self.reclaim(&mut sp);
        }
        // Only now may the journal drop what the checkpoint covers.
        self.journal.release(lsn);
        for (loc, node) in placed.nodes {
            self.cache.insert(loc, node);
        }
        detach_clean(tree);
        Ok(())
    }

    /// Fold `layer` into `tm`, writing out the nodes the fold changed so
    /// far each time they reach `Options::fold_bytes`: a fold of random
    /// keys copies nearly every leaf of the tree, many times the memtable's
    /// own size, so without this a checkpoint's memory would grow with the
    /// data file instead of staying within the budgets.
    ///
    /// A part written early is the finished left side of the tree plus the
    /// path down to where the fold stands: later batches copy that path
    /// (and now and then a left neighbour they merge with) again, which
    /// frees the pages just written; the last part and the meta page
    /// follow as in any checkpoint. No meta page names a part's pages
    /// before the checkpoint completes, so a crash midway leaves the store
    /// as the durable meta describes it.
    fn fold(
        &self,
        layer: &Layer,
        tm: &mut TreeMut,
        fork: Option<&dyn Fork>,
        run: &mut Writing<'_>,
    ) -> Result<()> {
        let ps = self.page_size.bytes() as u64;
        let budget = self.options.fold_bytes.max(ps);
        // A node copied since the last part either had a page (reported
        // freed) or was made by a split: their count bounds the nodes the
        // working copy holds in memory.
        let copied = |tm: &TreeMut| tm.freed().len() as u64 + tm.created();
        let mut mark = copied(tm);
        let batch = usize::try_from(budget / ps).unwrap_or(usize::MAX);
        layer.fold_into(
            tm,
            &self.cache,
            fork,
            batch.clamp(FOLD_MIN_BATCH, FOLD_MAX_BATCH),
            &mut |tm: &mut TreeMut| -> Result<()> {
                if (copied(tm) - mark) * ps < budget {
                    return Ok(());
                }
                self.write_part(run, tm)?;
                mark = copied(tm);
                Ok(())
            },
        )
    }

    /// Write the nodes the working copy holds only in memory, then keep
    /// only the path to its root in memory: the rest is on disk (and in
    /// the page cache), where the fold loads it again if it needs it.
    fn write_part(&self, run: &mut Writing<'_>, tm: &TreeMut) -> Result<()> {
        let tree = tm.snapshot();
        let placed = self.place(run, &tree)?;
        run.out.flush()?;
        run.parts += 1;
        for (loc, node) in placed.nodes {
            self.cache.insert(loc, node);
        }
        detach_clean(&tree);
        // `tree` goes: the working copy owns its root alone again.
        Ok(())
    }

    /// Under the writer slot: wait until everything the writer applied is
    /// durable and published (a checkpoint never covers an LSN that is
    /// not), then freeze the active memtable. Returns the LSN the frozen
    /// memtable ends at and the new base, or `None` when nothing was
    /// committed since the last checkpoint.
    fn freeze(&self) -> Result<Option<(Lsn, Arc<Base>)>> {
        let mut w = self.take_writer()?;
        if let Err(e) = self.wait_published(w.last_lsn) {
            self.put_writer(w);
            return Err(e);
        }
        let lsn = w.last_lsn;
        if lsn == lock(&self.space).meta.checkpoint_lsn {
            self.put_writer(w);
            return Ok(None);
        }
        let frozen = w.base.freeze();
        self.set_base(&mut w, frozen);
        let base = Arc::clone(&w.base);
        self.bytes_since_checkpoint.store(0, Ordering::Relaxed);
        self.put_writer(w);
        Ok(Some((lsn, base)))
    }

    /// Begin a checkpoint's writes: the generation of the tree it makes
    /// and the data file's size so far.
    fn start_writing(&self) -> Writing<'_> {
        let sp = lock(&self.space);
        Writing {
            gen: sp.durable_gen + 1,
            page_count: sp.meta.page_count,
            out: PageWriter::new(self.page_writes.as_ref(), self.page_size.bytes()),
            pages: 0,
            parts: 0,
        }
    }

    /// A page for the checkpoint `run`: a free one, else one past the end
    /// of the file.
    fn allocate(&self, sp: &mut Space, run_pages: &mut u64, gen: u64) -> PageNo {
        let page = match sp.free.pop_first() {
            Some(p) => {
                self.cache.invalidate(p);
                p
            }
            None => {
                *run_pages += 1;
                *run_pages - 1
            }
        };
        sp.set_born_after(page, gen);
        page
    }

    /// Give the nodes `tree` holds only in memory pages, encode them and
    /// hand them to the run's page writer.
    fn place(&self, run: &mut Writing<'_>, tree: &Tree) -> Result<Placed> {
        let plan = {
            let mut sp = lock(&self.space);
            let (gen, count) = (run.gen, &mut run.page_count);
            reserve_pages(tree, &mut || self.allocate(&mut sp, count, gen))?
        };
        let out = &mut run.out;
        let placed = plan.encode_with(&mut |page, bytes| out.push(page, bytes))?;
        run.pages += placed.pages;
        Ok(placed)
    }

    /// Give the folded `tree`'s new nodes pages, write them and the new
    /// free list, sync, write the meta page for `lsn` and sync. Returns
    /// the meta page, the free list's pages and the last part placed.
    fn write_checkpoint(
        &self,
        run: &mut Writing<'_>,
        tree: &Tree,
        freed: Vec<PageNo>,
        lsn: Lsn,
    ) -> Result<(Meta, Vec<PageNo>, Placed)> {
        let gen = run.gen;
        {
            // Pages of the older tree that the fold replaced (and pages of
            // this checkpoint's early parts that the fold copied again):
            // readers of an older tree, and the durable meta, may still
            // reach the former.
            let mut sp = lock(&self.space);
            sp.pending.extend(freed.into_iter().map(|p| (gen, p)));
            self.reclaim(&mut sp);
        }
        let placed = self.place(run, tree)?;
        let mut sp = lock(&self.space);
        // The new meta's free list: what is free now, what the folds up to
        // this one freed (readers do not survive a restart), and the pages
        // of the old list. None of these may be reused before the new meta
        // is durable; the list's own pages come from pages free now.
        let upper = sp.free.len()
            + sp.pending.iter().filter(|(g, _)| *g <= gen).count()
            + sp.freelist_pages.len();
        let list_pages: Vec<PageNo> = (0..freelist::pages_needed(self.page_size, upper))
            .map(|_| self.allocate(&mut sp, &mut run.page_count, gen))
            .collect();
        let mut listed: Vec<PageNo> = sp.free.iter().copied().collect();
        listed.extend(
            sp.pending
                .iter()
                .filter(|(g, _)| *g <= gen)
                .map(|(_, p)| *p),
        );
        listed.extend(sp.freelist_pages.iter().copied());
        listed.sort_unstable();
        let old_meta = sp.meta;
        drop(sp);
        // Pages, then sync, then the meta page, then sync: the meta never
        // reaches the disk before the pages it refers to.
        let (list_writes, list_first) =
            freelist::encode_chain(self.page_size, &list_pages, &listed);
        for (page, bytes) in &list_writes {
            run.out.push(*page, bytes)?;
        }
        run.out.flush()?;
        run.pages += list_writes.len() as u64;
        debug_assert_eq!(
            run.pages, run.out.written,
            "every page handed out is written"
        );
        self.data.sync(SyncKind::Data)?;
        let meta = Meta {
            page_size: self.page_size.bytes() as u32,
            generation: old_meta.generation + 1,
            checkpoint_lsn: lsn,
            root: placed.root.map_or(PageRef::default(), |l| PageRef {
                page: l.page,
                crc: l.crc,
            }),
            page_count: run.page_count,
            freelist: list_first.map_or(PageRef::default(), |l| PageRef {
                page: l.page,
                crc: l.crc,
            }),
            free_pages: listed.len() as u64,
            journal_id: old_meta.journal_id,
        };
        self.write_meta(&meta)?;
        Ok((meta, list_pages, placed))
    }

    /// Move pending pages to free where the rule allows: freed by a fold
    /// whose tree the durable meta holds, and no reader can reach them.
    ///
    /// A reader of the tree of generation *h* can reach the page freed by
    /// the fold that made generation *g* only if the node it held was in
    /// that tree: first held at or before *h* (at or after the page's
    /// `born_after`) and replaced after it (*h* < *g*). Readers that begin
    /// later read generation *g* or newer. So a long reader holds back
    /// only the pages of nodes that were in its tree, not every page freed
    /// while it lives.
    fn reclaim(&self, sp: &mut Space) {
        let readers: Vec<u64> = lock(&self.published.view).readers.keys().copied().collect();
        let durable = sp.durable_gen;
        let mut keep = Vec::with_capacity(sp.pending.len());
        for (g, p) in std::mem::take(&mut sp.pending) {
            let born = sp.born_after(p);
            let first = readers.partition_point(|&h| h < born);
            let seen = readers.get(first).is_some_and(|&h| h < g);
            if g <= durable && !seen {
                sp.free.insert(p);
            } else {
                keep.push((g, p));
            }
        }
        sp.pending = keep;
    }

    fn write_meta(&self, meta: &Meta) -> Result<()> {
        let ps = self.page_size.bytes();
        let mut page = vec![0u8; ps];
        meta.encode(&mut page);
        self.data.write_at(&page, meta.slot() * ps as u64)?;
        self.data.sync(SyncKind::Data)?;
        Ok(())
    }
}

/// The data file opened again with `O_DIRECT`, for checkpoints' page
/// writes (see `pagewrite`), when pages are whole blocks of the device
/// and the file system takes direct I/O; else the buffered descriptor
/// (tmpfs, for one, refuses `O_DIRECT`). Both name one file: a sync
/// through either covers writes through both, and the kernel keeps
/// buffered reads coherent with direct writes.
fn open_page_writes(
    vfs: &dyn Vfs,
    path: &Path,
    ps: PageSize,
    data: &Arc<dyn VfsFile>,
) -> Arc<dyn VfsFile> {
    let aligned = vfs
        .block_size(path)
        .is_ok_and(|b| b > 0 && ps.bytes() % b == 0);
    if aligned {
        if let Ok(f) = vfs.open(path, OpenOptions::new(OpenMode::Direct)) {
            return f;
        }
    }
    Arc::clone(data)
}

/// Read the free-list chain of `meta`: its pages, and the pages it lists.
pub(super) fn read_freelist(
    data: &dyn VfsFile,
    ps: PageSize,
    meta: &Meta,
) -> std::result::Result<(Vec<PageNo>, Vec<PageNo>), String> {
    let mut pages = Vec::new();
    let mut free = Vec::new();
    let mut next = (meta.freelist.page != 0).then_some(Location {
        page: meta.freelist.page,
        crc: meta.freelist.crc,
    });
    let mut buf = vec![0u8; ps.bytes()];
    while let Some(loc) = next {
        if pages.len() as u64 >= meta.page_count {
            return Err("the chain loops".into());
        }
        if !(FIRST_TREE_PAGE..meta.page_count).contains(&loc.page) {
            return Err(format!("page {} is outside the file", loc.page));
        }
        data.read_exact_at(&mut buf, loc.page * ps.bytes() as u64)
            .map_err(|e| e.to_string())?;
        let p = freelist::decode(&buf, ps, loc, meta.page_count)
            .map_err(|r| format!("page {}: {r}", loc.page))?;
        pages.push(loc.page);
        free.extend(p.free);
        next = p.next;
    }
    Ok((pages, free))
}
