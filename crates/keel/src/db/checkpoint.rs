//! Checkpoints: freeze the active memtable, fold it into a copy of the
//! tree (in parts of `fold_bytes`, paced while commits arrive), write the
//! changed pages and the free list to pages no durable meta page or
//! reader uses, sync, write the meta page, sync, and only then adopt the
//! folded tree and release the journal; and the page-reuse rule that
//! decides which pages are free. `docs/format.md` ("Checkpoint", "The
//! page-reuse rule") states the protocol this file keeps.

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::error::{DbError, Result};
use super::freelist;
use super::layers::{Base, Layer};
use super::meta::{Meta, PageRef};
use super::pagewrite::PageWriter;
use super::state::{Shared, Space};
use super::sync::lock;
use crate::btree::{detach_clean, reserve_pages, Fork, PageNo, Placed, Tree, TreeMut};
use crate::io::SyncKind;
use crate::journal::Lsn;

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

/// The background checkpointer's pacing: while commits keep arriving and
/// the budgets have room, the fold sleeps after each batch
/// [`PACE_SLEEP_RATIO`] times as long as the batch took, so that it keeps
/// a vCPU busy at most a fifth of the time.
///
/// Why: on these 2-vCPU VMs, a thread that keeps one vCPU busy more than
/// ~60 % of the time stalls blocking I/O on the other for ~20 ms every
/// 100 ms (a C program, 12 KiB `O_DIRECT|O_DSYNC` writes beside a busy
/// loop: 24 stalls and 399 ms lost in 2 s; busy 1 ms in every 2 ms: 0 or 1
/// stall), and a full-speed fold is such a thread. Measured on w3
/// (`keel bench commit --workload w3`, interleaved pairs, the same hour):
/// 25,000 transactions ran at 3,529–4,175 transactions/s paced against
/// 2,865–3,007 unpaced (3 pairs; CPU per commit 233–284 µs against
/// 314–369: the paced folds were fewer, 1–2 finished in the run against
/// 3, each folding more changes per leaf); 50,000 at 3,677–3,958 against
/// 3,048–3,339 (2 pairs; the final checkpoint at `close` 4.5–5.6 s
/// against 6.5–6.9 s); 10,000 at 3,803–4,726 against 3,583–4,262 (8
/// pairs: within the noise).
///
/// Why a fifth and not half: the helper thread now inserts lone large
/// commits into the memtable on the same second vCPU (w3: 50–70 µs of
/// every ~110 µs transaction), so a fold busy half the time made that
/// vCPU busier than the stall threshold. 40,000 w3 transactions, 13
/// interleaved pairs (2026-11-26): sleeping 4× the batch, median 7,164
/// transactions/s against 6,224 sleeping 1× (better in 9 pairs), with
/// fewer, larger checkpoints finished in the run (1–3 against 1–4);
/// 10,000 transactions (the protocol's w3): 6 rounds, 8,174 against
/// 8,534; 8 more against the build before, 7,728 against 7,279 (the
/// journal 8,431), p99 251 against 364 µs: no worse, within the noise.
struct Pace {
    /// When the current batch began.
    since: Instant,
    /// The commits counted when it began.
    commits: u64,
}

impl Pace {
    fn new(s: &Shared) -> Pace {
        Pace {
            since: Instant::now(),
            commits: s.counters.commits.load(Ordering::Relaxed),
        }
    }

    /// After a batch: sleep as long as it took if commits arrived during
    /// it and the budgets have room ([`budgets_have_room`]). Returns
    /// whether they had.
    fn after_batch(&mut self, s: &Shared) -> bool {
        let commits = s.counters.commits.load(Ordering::Relaxed);
        let room = budgets_have_room(s);
        if let Some(pause) = pace_pause(self.since.elapsed(), commits != self.commits, room) {
            std::thread::sleep(pause);
        }
        self.commits = commits;
        self.since = Instant::now();
        room
    }
}

/// Whether neither the memtables nor the journal are past half their
/// backpressure budget: past it, a writer would soon have to wait for
/// the checkpoint under way, which had better finish at full speed.
fn budgets_have_room(s: &Shared) -> bool {
    let o = &s.options;
    s.dirty_bytes.load(Ordering::Relaxed) < o.backpressure_dirty_bytes / 2
        && s.bytes_since_checkpoint.load(Ordering::Relaxed) < o.backpressure_journal_bytes / 2
}

/// The helper for a background checkpoint's fold, but only while the
/// budgets have no room ([`budgets_have_room`]): then writers will soon
/// wait for this checkpoint, and a fold on two threads ends sooner. With
/// room it folds alone, leaving the helper to committers: on these 2-vCPU
/// VMs, checkpoints folding on two threads all the time slowed w3 (see
/// [`Shared::run_checkpointer`]).
struct WhenPressed<'s> {
    shared: &'s Shared,
    helper: &'s dyn Fork,
}

impl Fork for WhenPressed<'_> {
    fn fork(&self, work: &(dyn Fn() + Sync)) {
        if budgets_have_room(self.shared) {
            work();
        } else {
            self.helper.fork(work);
        }
    }
}

/// How long a paced fold sleeps after a batch that took `worked`:
/// [`PACE_SLEEP_RATIO`] times as long, up to [`PACE_MAX_SLEEP`], if
/// commits arrived meanwhile and the budgets have room; else not at all.
fn pace_pause(worked: Duration, commits_arrived: bool, room: bool) -> Option<Duration> {
    (commits_arrived && room).then(|| (worked * PACE_SLEEP_RATIO).min(PACE_MAX_SLEEP))
}

/// A paced fold's sleep per unit of work (see [`Pace`]).
const PACE_SLEEP_RATIO: u32 = 4;

/// The longest a paced fold sleeps after one batch.
const PACE_MAX_SLEEP: Duration = Duration::from_millis(80);

impl Shared {
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
    /// runs at a lower priority (twice `Options::background_nice` below
    /// the opener, set when it starts: nice 10 by default, where
    /// committers win a contended CPU ~9 times in 10), and folds alone,
    /// leaving the helper to committers, while the budgets have room.
    /// On these 2-vCPU VMs, with checkpoints folding on two threads at
    /// normal priority, w3 ran at 4,500–4,800 transactions/s against
    /// 5,600–5,900 with background checkpoints off (same hour). Past half
    /// a budget, writers will soon wait for the checkpoint anyway, and it
    /// folds with the helper too ([`WhenPressed`]): a 10M-key fill ran
    /// 1.12× faster to its close.
    pub(crate) fn run_checkpointer(self: Arc<Self>) {
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
            if !matches!(
                panic::catch_unwind(AssertUnwindSafe(|| self.background_checkpoint())),
                Ok(Ok(_))
            ) {
                // The checkpoint failed or panicked: it poisoned the store,
                // and writers see why.
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
    /// time and memory stay bounded): for the checkpoint under way, if
    /// one is (its memtable goes when it ends, which may leave room
    /// enough), else running one themselves.
    ///
    /// Waiting for the background checkpoint rather than running the next
    /// one: a writer that checkpointed itself held up its commits for a
    /// whole checkpoint (seconds, in a 10M-key fill) while the next
    /// memtable had room, and the background checkpointer sat idle.
    pub(crate) fn backpressure(&self) -> Result<()> {
        if !self.past_backpressure() {
            return Ok(());
        }
        self.refuse_if_holder(
            "begin_write past the backpressure budgets (it waits for a checkpoint)",
        )?;
        let c = &self.counters;
        c.backpressure_waits.fetch_add(1, Ordering::Relaxed);
        if self.options.background_checkpoints {
            // Held by whoever checkpoints, for the whole checkpoint.
            drop(lock(&self.ckpt_run));
            self.check_poison()?;
            if !self.past_backpressure() {
                return Ok(());
            }
        }
        c.backpressure_checkpoints.fetch_add(1, Ordering::Relaxed);
        self.checkpoint()?;
        Ok(())
    }

    /// Whether the journal bytes since the last checkpoint's freeze or the
    /// memtables' bytes are at their backpressure budget.
    fn past_backpressure(&self) -> bool {
        let o = &self.options;
        self.bytes_since_checkpoint.load(Ordering::Relaxed) >= o.backpressure_journal_bytes
            || self.dirty_bytes.load(Ordering::Relaxed) >= o.backpressure_dirty_bytes
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
        self.checkpoint_with(self.fork(), false)
    }

    /// The background checkpointer's [`Shared::checkpoint`]: paced, and
    /// folding alone while the budgets have room; past half of one, with
    /// the helper too (see [`WhenPressed`]).
    fn background_checkpoint(&self) -> Result<Option<Lsn>> {
        match self.fork() {
            Some(helper) => self.checkpoint_with(
                Some(&WhenPressed {
                    shared: self,
                    helper,
                }),
                true,
            ),
            None => self.checkpoint_with(None, true),
        }
    }

    /// [`Shared::checkpoint`], folding on the threads `fork` offers (or
    /// this one alone), paced if `paced` (and `Options::paced_checkpoints`).
    ///
    /// A panic (a bug) poisons the store before it goes on up this
    /// thread: a frozen memtable left unfolded would never be checkpointed,
    /// and writers would wait for room forever.
    fn checkpoint_with(&self, fork: Option<&dyn Fork>, paced: bool) -> Result<Option<Lsn>> {
        let _one = lock(&self.ckpt_run);
        self.check_poison()?;
        match panic::catch_unwind(AssertUnwindSafe(|| self.checkpoint_steps(fork, paced))) {
            Ok(r) => r,
            Err(p) => {
                self.panicked("a checkpoint", p.as_ref());
                panic::resume_unwind(p)
            }
        }
    }

    /// The steps of [`Shared::checkpoint_with`], one checkpoint at a time.
    fn checkpoint_steps(&self, fork: Option<&dyn Fork>, paced: bool) -> Result<Option<Lsn>> {
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
        let folded = self.fold(&layer, &mut tm, fork, paced, &mut run);
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
    /// free list, release the journal up to `lsn`; the written nodes are
    /// kept in the page cache only, before any reader can reach them.
    fn adopt(
        &self,
        tree: &Tree,
        layer: Arc<Layer>,
        gen: u64,
        (meta, list_pages, placed): (Meta, Vec<PageNo>, Placed),
        lsn: Lsn,
    ) -> Result<()> {
        // Before readers can reach the tree: a reader of it then finds
        // every node below the root through the page cache, lock-free
        // (docs/store-performance.md, "Shared writes"), never a child the
        // tree still holds in memory.
        self.keep_in_cache_only(placed, tree);
        #[cfg(test)]
        assert_eq!(
            crate::btree::children_in_memory(tree),
            0,
            "a checkpoint published a tree holding children in memory"
        );
        self.with_writer("a checkpoint", |w| {
            #[cfg(test)]
            self.faults.checkpoint_step(super::state::CKPT_ADOPT);
            let folded = w.base.folded(tree.clone());
            debug_assert_eq!(folded.gen, gen);
            self.set_base(w, folded);
            self.dirty_bytes
                .store(w.base.mem_bytes(), Ordering::Relaxed);
        })?;
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
        paced: bool,
        run: &mut Writing<'_>,
    ) -> Result<()> {
        #[cfg(test)]
        {
            self.faults.checkpoint_step(super::state::CKPT_FOLD);
            let ms = self.faults.fold_delay_ms.swap(0, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(ms));
        }
        let ps = self.page_size.bytes() as u64;
        let budget = self.options.fold_bytes.max(ps);
        // A node copied since the last part either had a page (reported
        // freed) or was made by a split: their count bounds the nodes the
        // working copy holds in memory.
        let copied = |tm: &TreeMut| tm.freed().len() as u64 + tm.created();
        let mut mark = copied(tm);
        let batch = usize::try_from(budget / ps).unwrap_or(usize::MAX);
        // Only the background checkpointer is paced: a writer under
        // backpressure, `checkpoint` and `close` wait for theirs.
        let mut pace = (paced && self.options.paced_checkpoints).then(|| Pace::new(self));
        // A paced fold keeps the disk free for the journal while the
        // budgets have room; any other writes at full speed.
        run.out
            .overlap_writeback(pace.is_none() || !budgets_have_room(self));
        layer.fold_into(
            tm,
            &self.cache,
            fork,
            batch.clamp(FOLD_MIN_BATCH, FOLD_MAX_BATCH),
            &mut |tm: &mut TreeMut| -> Result<()> {
                if let Some(p) = &mut pace {
                    let room = p.after_batch(self);
                    run.out.overlap_writeback(!room);
                }
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
        self.keep_in_cache_only(placed, &tree);
        // `tree` goes: the working copy owns its root alone again.
        Ok(())
    }

    /// The nodes just written that readers may want (every branch, and
    /// the leaves made from leaves the cache held: `Node::keep_cached`)
    /// go to the page cache, and `tree` drops its in-memory copies of
    /// every node that is on disk: the others are read from the data file
    /// when needed.
    fn keep_in_cache_only(&self, placed: Placed, tree: &Tree) {
        for (loc, node) in placed.nodes {
            if node.keep_cached() {
                self.cache.insert(loc, node);
            }
        }
        detach_clean(tree);
    }

    /// Under the writer slot: wait until everything the writer applied is
    /// durable and published (a checkpoint never covers an LSN that is
    /// not), then freeze the active memtable. Returns the LSN the frozen
    /// memtable ends at and the new base, or `None` when nothing was
    /// committed since the last checkpoint.
    fn freeze(&self) -> Result<Option<(Lsn, Arc<Base>)>> {
        self.with_writer("a checkpoint", |w| {
            #[cfg(test)]
            self.faults.checkpoint_step(super::state::CKPT_FREEZE);
            self.wait_published(w.last_lsn)?;
            let lsn = w.last_lsn;
            if lsn == lock(&self.space).meta.checkpoint_lsn {
                return Ok(None);
            }
            let frozen = w.base.freeze();
            self.set_base(w, frozen);
            let base = Arc::clone(&w.base);
            self.bytes_since_checkpoint.store(0, Ordering::Relaxed);
            Ok(Some((lsn, base)))
        })?
    }

    /// Begin a checkpoint's writes: the generation of the tree it makes
    /// and the data file's size so far.
    fn start_writing(&self) -> Writing<'_> {
        let sp = lock(&self.space);
        Writing {
            gen: sp.durable_gen + 1,
            page_count: sp.meta.page_count,
            out: PageWriter::new(self.data.as_ref(), self.page_size.bytes()),
            pages: 0,
            parts: 0,
        }
    }

    /// A page for the checkpoint making generation `gen`: a free one, else
    /// one past the end of the file (`page_count` grows).
    fn allocate(&self, sp: &mut Space, page_count: &mut u64, gen: u64) -> PageNo {
        let page = match sp.free.pop_first() {
            Some(p) => {
                self.cache.invalidate(p);
                p
            }
            None => {
                *page_count += 1;
                *page_count - 1
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
        let (list_pages, listed, old_meta) = {
            let mut sp = lock(&self.space);
            let (list_pages, listed) = self.new_free_list(&mut sp, run);
            (list_pages, listed, sp.meta)
        };
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

    /// The new meta's free list: its own pages, and the pages it lists —
    /// what is free now, what the folds up to this one freed (readers do
    /// not survive a restart), and the pages of the old list, sorted. None
    /// of the listed pages may be reused before the new meta is durable;
    /// the list's own pages come from pages free now.
    fn new_free_list(&self, sp: &mut Space, run: &mut Writing<'_>) -> (Vec<PageNo>, Vec<PageNo>) {
        let gen = run.gen;
        let mut listed: Vec<PageNo> = sp
            .pending
            .iter()
            .filter(|(g, _)| *g <= gen)
            .map(|(_, p)| *p)
            .chain(sp.freelist_pages.iter().copied())
            .collect();
        let upper = sp.free.len() + listed.len();
        let list_pages: Vec<PageNo> = (0..freelist::pages_needed(self.page_size, upper))
            .map(|_| self.allocate(sp, &mut run.page_count, gen))
            .collect();
        listed.extend(sp.free.iter().copied());
        listed.sort_unstable();
        (list_pages, listed)
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

#[cfg(test)]
mod pace_tests {
    use super::*;

    #[test]
    fn a_paced_fold_sleeps_only_while_commits_arrive_and_budgets_have_room() {
        let ms = Duration::from_millis;
        assert_eq!(pace_pause(ms(2), true, true), Some(ms(8)));
        assert_eq!(pace_pause(ms(500), true, true), Some(PACE_MAX_SLEEP));
        assert_eq!(pace_pause(ms(2), false, true), None, "an idle store");
        assert_eq!(pace_pause(ms(2), true, false), None, "near backpressure");
    }
}
