//! Opening and recovery, and the commit path after a transaction is built
//! (the state they work on: `state.rs`; checkpoints and page reuse:
//! `checkpoint.rs`; publication to readers: `view.rs`; `check`:
//! `inspect.rs`). `docs/format.md` ("The
//! commit and checkpoint protocol") states the rules this file keeps; each
//! is named where it is kept.

use std::any::Any;
use std::collections::BTreeSet;
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use super::blind::Record;
use super::combine::START_MIN_OPS;
use super::error::{DbError, Result};
use super::files::{CLEAN_FILE, DATA_FILE, JOURNAL_DIR};
use super::freelist;
use super::helper::Helper;
use super::layers::{Base, Layer};
use super::meta::{self, read_metas, Meta, MetaError, PageRef};
use super::options::{Durability, Options};
use super::placement::{allowed_cpus, Placement};
use super::published::Published;
use super::record::{self, Op};
use super::slot::Slot;
use super::state::{Access, CkptCtl, Counters, Shared, Space};
use super::sync::{lock, panic_message};
use super::writer::WriterState;
use crate::btree::{Fork, Location, PageCache, PageNo, PageSize, Tree, FIRST_TREE_PAGE};
use crate::io::{self, LockGuard, OpenMode, OpenOptions, SyncKind, Vfs, VfsFile};
use crate::journal::{CommitHandle, Journal, JournalOptions, Lsn, RecoveryMode};
use crate::memtable::ChunkPool;

/// Free memtable memory the helper keeps faulted in ahead of the writer
/// (see `crate::memtable`: memory the process has not touched before
/// costs ~1 ms per MiB to fault in on these VMs, measured; in w3 a commit
/// takes ~20 KiB).
const PREPARE_AHEAD_BYTES: u64 = 8 << 20;

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

/// A data file of another format version: version 1 stores' journals
/// carry no durable LSN in their records, which this build needs to tell
/// damage from a torn write; a later version is a newer Keel's.
fn unsupported_version(dir: &Path, version: u32) -> DbError {
    let what = if version < meta::DATA_FORMAT_VERSION {
        "an older Keel wrote it"
    } else {
        "a newer Keel wrote it"
    };
    DbError::UnsupportedFormat {
        path: dir.to_path_buf(),
        reason: format!(
            "data format version {version} ({what}; this one reads version {}). Open it with the \
             Keel that wrote it and copy its tables into a new store",
            meta::DATA_FORMAT_VERSION
        ),
    }
}

/// The store's journal options; `needed_from`: the first LSN the data file
/// does not hold (its checkpoint's + 1; 0 while the store is created).
fn journal_options(options: &Options, needed_from: Lsn) -> JournalOptions {
    JournalOptions {
        // Damage inside the journal is an error, never a silent cut...
        recovery_mode: RecoveryMode::RefuseCorruption,
        // ...unless it touches only records the checkpoint holds: those
        // are not needed, and recovery goes past them (and reports them).
        needed_from,
        ..options.journal.clone()
    }
}

/// Whether the directory holds a store whose creation finished.
/// The newest valid meta page of the data file, and its page size, made
/// durable before it is trusted: after a process crash the page cache may
/// hold a meta page (or pages) whose write was never synced — adopting it
/// and then reusing the pages the older meta refers to would leave nothing
/// valid after a power cut. After a failed sync, pages that never reached
/// the disk may read back as written until evicted.
///
/// A store the last process closed cleanly (`CLEAN_FILE`: every write of
/// its synced, no sync failed) has no such pages: its cached pages are
/// kept, so reads after a restart start from the page cache rather than
/// the disk.
fn durable_meta(
    dir: &Path,
    data: &dyn VfsFile,
    read_only: bool,
    closed_clean: bool,
) -> Result<(Meta, PageSize)> {
    if !closed_clean {
        data.evict_clean_pages()?;
    }
    if !read_only {
        // (A read-only open adopts nothing: it reads what is there.)
        data.sync(SyncKind::Data)?;
    }
    let (a, b) = read_metas(data)?;
    let (meta, _other) = meta::choose(&a, &b).map_err(|[e0, e1]| match (&e0, &e1) {
        (MetaError::UnsupportedVersion(v), _) | (_, MetaError::UnsupportedVersion(v)) => {
            unsupported_version(dir, *v)
        }
        _ => corrupt(
            dir,
            format!("neither meta page is valid (page 0: {e0}; page 1: {e1})"),
        ),
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
fn open_journal(
    dir: &Path,
    vfs: &Arc<dyn Vfs>,
    options: &Options,
    meta: &Meta,
    access: Access,
) -> Result<Journal> {
    let jdir = dir.join(JOURNAL_DIR);
    if !vfs.exists(&jdir)? {
        return Err(corrupt(dir, "the journal directory is missing"));
    }
    let jopts = journal_options(options, meta.checkpoint_lsn + 1);
    let vfs = Arc::clone(vfs);
    let journal = match access {
        Access::Write => Journal::open(vfs, &jdir, jopts)?,
        Access::ReadOnly => Journal::open_read_only(vfs, &jdir, jopts)?,
        Access::Live { .. } => Journal::open_live(vfs, &jdir, jopts)?,
    };
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

/// Take the store's lock, with this process's id written in it (`Locked`,
/// naming the store and its holder, when refused): `holder::lock_store`.
fn lock_store(vfs: &dyn Vfs, dir: &Path) -> Result<Box<dyn LockGuard>> {
    super::holder::lock_store(vfs, dir)
}

/// A data file with no meta page: a creation cut short if the journal
/// holds no commit (`create` finishes it), damage if it does (the data file
/// was cut short or overwritten behind the store's back). Looks at the
/// journal without changing it.
fn without_meta(vfs: &dyn Vfs, dir: &Path) -> DbError {
    let committed = crate::journal::inspect(vfs, &dir.join(JOURNAL_DIR))
        .is_ok_and(|scan| scan.last_lsn.is_some());
    if committed {
        corrupt(
            dir,
            "its data file has no meta page but its journal holds commits: the data file was \
             cut short or overwritten. `keel db salvage` (Database::salvage) replays the journal \
             into a new store when it still holds every commit from the first",
        )
    } else {
        not_a_store(
            dir,
            "its data file has no meta page (a creation that never finished: `create` finishes \
             it)",
        )
    }
}

/// Lay down a new store in `dir` (which is locked): the journal first, then
/// the data file with its first meta page, each made durable.
fn initialize(vfs: &Arc<dyn Vfs>, dir: &Path, options: &Options) -> Result<()> {
    let jdir = dir.join(JOURNAL_DIR);
    let journal = Journal::open(Arc::clone(vfs), &jdir, journal_options(options, 0))?;
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
        let guard = lock_store(vfs.as_ref(), dir)?;
        if !initialized(vfs.as_ref(), dir)? {
            let lost = without_meta(vfs.as_ref(), dir);
            if !create || matches!(lost, DbError::Corrupt { .. }) {
                return Err(lost);
            }
            initialize(&vfs, dir, &options)?;
        }
        Self::recover(dir, options, guard, Access::Write)
    }

    /// Open the store in `dir` for reading only: recovery's checks and its
    /// replay into memory, and nothing written (see
    /// `Database::open_read_only`).
    /// `guard`: the store's lock, held; or `NotLocked` beside a writer
    /// (`Access::Live`).
    pub(crate) fn open_read_only(
        dir: &Path,
        options: Options,
        guard: Box<dyn LockGuard>,
        access: Access,
    ) -> Result<Arc<Shared>> {
        let vfs = Arc::clone(&options.vfs);
        if !initialized(vfs.as_ref(), dir)? {
            return Err(without_meta(vfs.as_ref(), dir));
        }
        Self::recover(dir, options, guard, access)
    }

    /// Leave the mark of a clean close: everything this process wrote to
    /// the data file is durable (the caller's checkpoint synced it, and no
    /// sync failed: a failed one poisons the store).
    pub(crate) fn mark_closed_clean(&self) -> Result<()> {
        self.check_poison()?;
        let vfs = &self.options.vfs;
        let path = self.path.join(CLEAN_FILE);
        drop(vfs.open(&path, OpenOptions::new(OpenMode::Buffered).create(true))?);
        vfs.sync_dir(&self.path)?;
        Ok(())
    }

    fn recover(
        dir: &Path,
        options: Options,
        guard: Box<dyn LockGuard>,
        access: Access,
    ) -> Result<Arc<Shared>> {
        let read_only = access != Access::Write;
        let vfs = Arc::clone(&options.vfs);
        let path = dir.join(DATA_FILE);
        let data = vfs.open(
            &path,
            OpenOptions::new(OpenMode::Buffered).read_only(read_only),
        )?;
        // The mark of a clean close goes (durably) before this process
        // writes anything: a crash of this one leaves none.
        let clean = dir.join(CLEAN_FILE);
        let closed_clean = vfs.exists(&clean)?;
        if closed_clean && !read_only {
            vfs.remove_file(&clean)?;
            vfs.sync_dir(dir)?;
        }
        // A live reader leaves the writer's cached pages be: a page it
        // reads is checked against the CRC its parent records anyway.
        let keep_cached = closed_clean || matches!(access, Access::Live { .. });
        let (meta, ps) = durable_meta(dir, data.as_ref(), read_only, keep_cached)?;
        let journal = open_journal(dir, &vfs, &options, &meta, access)?;
        if access == Access::Write {
            super::live::publish(vfs.as_ref(), dir, &journal);
        }
        // No value longer than the journal's records can hold was ever
        // written: a longer length is damage, refused before it is read.
        let max_value = super::txn::max_value_bytes(journal.options().max_record_bytes());
        let cache = PageCache::new(Arc::clone(&data), ps, options.cache_bytes)
            .with_max_value_bytes(max_value)
            .with_mapped_reads(options.read_mapped)?;
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
        let placement = Placement::find(&options.background_cpus, dir, &allowed_cpus())
            .map_err(DbError::BadOptions)?;
        let shared = Shared {
            path: dir.to_path_buf(),
            read_only,
            page_size: ps,
            data,
            cache,
            journal,
            writer: Mutex::new(Slot::default()),
            writer_cv: Condvar::new(),
            bells: super::slot::bells(),
            published: Arc::new(Published::new(Arc::clone(&base), meta.checkpoint_lsn)),
            leases: super::state::leases(),
            read_txns: Default::default(),
            space: Mutex::new(space),
            ckpt_run: Mutex::new(()),
            ckpt: Mutex::new(CkptCtl::default()),
            ckpt_cv: Condvar::new(),
            bytes_since_checkpoint: AtomicU64::new(0),
            dirty_bytes: AtomicU64::new(0),
            counters: Counters::default(),
            helper: Helper::start(options.background_nice, placement.clone()).ok(),
            placement,
            unapplied: Arc::default(),
            options,
            #[cfg(test)]
            faults: super::state::TestFaults::default(),
            _lock: guard,
        };
        let upto = match access {
            Access::Live { durable } => Some(durable),
            _ => None,
        };
        let last = shared.replay(&base.active, meta.checkpoint_lsn, upto)?;
        shared
            .dirty_bytes
            .store(base.mem_bytes(), Ordering::Relaxed);
        shared.published.lsn_now.store(last, Ordering::Release);
        lock(&shared.writer).state = Some(WriterState::new(base, last));
        Ok(Arc::new(shared))
    }

    /// Insert the journal's records after the checkpoint LSN into `layer`
    /// (up to `upto` when given: every one up to it must be there, and
    /// later ones are left out); returns the last LSN.
    fn replay(&self, layer: &Layer, checkpoint: Lsn, upto: Option<Lsn>) -> Result<Lsn> {
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
            if upto.is_some_and(|u| lsn > u) {
                break;
            }
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
        if let Some(upto) = upto {
            if last < upto {
                return Err(corrupt(
                    &self.path,
                    format!("the journal's records end at lsn {last}, before lsn {upto}"),
                ));
            }
        } else if last + 1 != next {
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

    /// After a panic while `w` was being changed (a bug) by `who` (a
    /// commit, a checkpoint): poison the store and give the slot back, so
    /// that whoever waits for it gets the poison instead of waiting
    /// forever; returns why.
    pub(crate) fn writer_panicked(
        &self,
        who: &str,
        w: WriterState,
        p: &(dyn Any + Send),
    ) -> Arc<str> {
        let why = self.panicked(who, p);
        self.put_writer(w);
        why
    }

    /// Poison the store after a panic (a bug) in `who` (a commit, a
    /// checkpoint); returns why.
    pub(crate) fn panicked(&self, who: &str, p: &(dyn Any + Send)) -> Arc<str> {
        self.set_poison(&format!("{who} panicked: {}", panic_message(p)))
    }

    /// Run `f` on the writer's state, taken for it (waiting while another
    /// holds it) and given back after. A panic in `f` (a bug; `who` says
    /// whose) poisons the store and gives the slot back before it goes on
    /// up this thread.
    pub(crate) fn with_writer<T>(
        &self,
        who: &str,
        f: impl FnOnce(&mut WriterState) -> T,
    ) -> Result<T> {
        let mut w = self.take_writer()?;
        match panic::catch_unwind(AssertUnwindSafe(|| f(&mut w))) {
            Ok(t) => {
                self.put_writer(w);
                Ok(t)
            }
            Err(p) => {
                self.writer_panicked(who, w, p.as_ref());
                panic::resume_unwind(p)
            }
        }
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
        let submitted = record.submit(&self.journal);
        let record_bytes = record.len();
        if let Some(buf) = record.into_buf() {
            w.recycle(buf);
        }
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
        let applied = panic::catch_unwind(AssertUnwindSafe(|| {
            w.forget_table_ids();
            w.base.active.apply(ops, lsn);
            self.applied(&w.base, record_bytes);
            self.published.order.complete(lsn);
        }));
        if let Err(p) = applied {
            self.writer_panicked("a commit", w, p.as_ref());
            panic::resume_unwind(p);
        }
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
        #[cfg(test)]
        if self.faults.panic_in_apply.swap(false, Ordering::Relaxed) {
            panic!("injected: the apply failed");
        }
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
}

/// Read the free-list chain of `meta`: its pages, and the pages it lists.
/// Every number in it comes from disk: a chain that comes back to one of
/// its pages, or that lists more pages than the meta counts free, fails at
/// the page where it does, so the walk reads at most `page_count` pages
/// and keeps at most `free_pages` entries.
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
    let mut seen = std::collections::HashSet::new();
    while let Some(loc) = next {
        if !(FIRST_TREE_PAGE..meta.page_count).contains(&loc.page) {
            return Err(format!("page {} is outside the file", loc.page));
        }
        if !seen.insert(loc.page) {
            return Err(format!("page {}: the chain comes back to it", loc.page));
        }
        data.read_exact_at(&mut buf, loc.page * ps.bytes() as u64)
            .map_err(|e| e.to_string())?;
        let p = freelist::decode(&buf, ps, loc, meta.page_count)
            .map_err(|r| format!("page {}: {r}", loc.page))?;
        pages.push(loc.page);
        if (free.len() + p.free.len()) as u64 > meta.free_pages {
            return Err(format!(
                "page {}: the chain lists more than the meta page's {} free pages",
                loc.page, meta.free_pages
            ));
        }
        free.extend(p.free);
        next = p.next;
    }
    Ok((pages, free))
}
