//! What a snapshot reads: the checkpointed B+tree, under the memtables
//! that hold what was committed since.
//!
//! A commit inserts its changes into the *active* memtable, each under the
//! commit's LSN; readers at snapshot *S* take the newest version at or
//! below *S*, so a commit applied before it is durable stays invisible
//! until its LSN is published. A checkpoint *freezes* the active memtable
//! (a new, empty one takes its place), *folds* the frozen one into a copy
//! of the tree — all its changes at once, so the many landing in one leaf
//! share one copy of it — writes that tree to the data file and then
//! publishes it without the frozen memtable. See `crate::memtable` for
//! why.
//!
//! A [`Base`] never changes: a freeze or a fold makes a new one, which the
//! writer and new readers take; a reader keeps the one it began with.

use std::ops::Bound;
use std::sync::{Arc, Mutex};

use super::item::{Found, FoundRef};
use super::record::Op;
use super::sync::lock;
use crate::btree::{BtreeError, Change, Fork, Got, PageCache, Tree, TreeMut};
use crate::journal::Lsn;
use crate::memtable::{ChunkPool, MemRange, MemTable};

/// A memtable, and the tables dropped by the commits it holds.
///
/// A dropped table's keys are not deleted one by one: table ids are never
/// reused, so after the drop no snapshot that can see it looks the id up
/// (the catalog no longer names it), and snapshots from before the drop
/// still read the keys. The fold removes them from the tree.
#[derive(Debug)]
pub(crate) struct Layer {
    pub mem: MemTable,
    drops: Mutex<Vec<u32>>,
    /// Where the memtable's memory comes from and goes back to.
    pool: Arc<ChunkPool>,
}

impl Layer {
    /// An empty layer whose memtable allocates from `pool`.
    pub(crate) fn new(pool: Arc<ChunkPool>) -> Layer {
        Layer {
            mem: MemTable::with_pool(Some(Arc::clone(&pool))),
            drops: Mutex::new(Vec::new()),
            pool,
        }
    }

    /// Insert a record's changes under `lsn` (the one writer).
    pub(crate) fn apply(&self, ops: &[Op<'_>], lsn: Lsn) {
        let mut w = self.mem.writer();
        // In order: the changes before a dropped table, then the drop.
        for run in ops.split_inclusive(|op| matches!(op, Op::DropTable(_))) {
            w.insert_all(
                lsn,
                run.iter().filter_map(|op| match *op {
                    Op::Put(k, v) => Some((k, Some(v))),
                    Op::PutShared(k, v) => Some((k, Some(&v[..]))),
                    Op::Delete(k) => Some((k, None)),
                    Op::DropTable(_) => None,
                }),
            );
            if let Some(&Op::DropTable(id)) = run.last() {
                lock(&self.drops).push(id);
            }
        }
    }

    /// Where the memtable's memory comes from.
    pub(crate) fn pool(&self) -> &Arc<ChunkPool> {
        &self.pool
    }

    /// Bytes of memory held (an estimate).
    pub(crate) fn bytes(&self) -> u64 {
        self.mem.bytes()
    }

    /// Fold every change (the newest version of each key) into `tm`: the
    /// dropped tables' key ranges first, then the rest, in key order, in
    /// batches of up to `batch` changes (the tree copies a node once per
    /// fold, not per batch). `after` runs after each batch: there the
    /// checkpoint writes out what the fold changed so far when it outgrew
    /// its memory budget (`Options::fold_bytes`).
    pub(crate) fn fold_into<E: From<BtreeError>>(
        &self,
        tm: &mut TreeMut,
        src: &PageCache,
        fork: Option<&dyn Fork>,
        batch: usize,
        after: &mut dyn FnMut(&mut TreeMut) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut drops = lock(&self.drops).clone();
        drops.sort_unstable();
        for &id in &drops {
            let start = id.to_be_bytes();
            match id.checked_add(1) {
                Some(next) => tm.remove_range(
                    src,
                    Bound::Included(&start[..]),
                    Bound::Excluded(&next.to_be_bytes()[..]),
                )?,
                None => tm.remove_range(src, Bound::Included(&start[..]), Bound::Unbounded)?,
            };
            after(tm)?;
        }
        let batch = batch.max(1);
        let mut run: Vec<Change<'_>> = Vec::with_capacity(batch);
        for (key, value) in self.mem.range(Bound::Unbounded, Bound::Unbounded, Lsn::MAX) {
            let id = key
                .get(..4)
                .map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")));
            if id.is_some_and(|id| drops.binary_search(&id).is_ok()) {
                continue;
            }
            run.push(match value {
                Some(v) => Change::Put {
                    key,
                    value: v,
                    shared: None,
                },
                None => Change::Remove(key),
            });
            if run.len() == batch {
                tm.apply(src, &run, fork)?;
                run.clear();
                after(tm)?;
            }
        }
        tm.apply(src, &run, fork)?;
        Ok(())
    }
}

/// A tree and the memtables above it: what the writer changes and what a
/// snapshot reads.
#[derive(Debug)]
pub(crate) struct Base {
    /// The tree as of the last checkpoint's fold.
    pub tree: Tree,
    /// Where commits go.
    pub active: Arc<Layer>,
    /// The memtable a checkpoint is folding into the next tree.
    pub frozen: Option<Arc<Layer>>,
    /// The number of folds published since the store was opened: which
    /// tree this is (readers are counted by it, for page reuse).
    pub gen: u64,
}

impl Base {
    /// The base with the current memtable frozen and a new one active.
    pub(crate) fn freeze(&self) -> Base {
        debug_assert!(self.frozen.is_none(), "one checkpoint at a time");
        Base {
            tree: self.tree.clone(),
            active: Arc::new(Layer::new(Arc::clone(&self.active.pool))),
            frozen: Some(Arc::clone(&self.active)),
            gen: self.gen,
        }
    }

    /// The base with the frozen memtable replaced by `tree`, its fold.
    pub(crate) fn folded(&self, tree: Tree) -> Base {
        Base {
            tree,
            active: Arc::clone(&self.active),
            frozen: None,
            gen: self.gen + 1,
        }
    }

    /// The memtables, newest first.
    pub(crate) fn layers(&self) -> impl Iterator<Item = &Layer> {
        std::iter::once(&*self.active).chain(self.frozen.as_deref())
    }

    /// Bytes the memtables hold.
    pub(crate) fn mem_bytes(&self) -> u64 {
        self.layers().map(Layer::bytes).sum()
    }

    /// The value of `key` at snapshot `at`.
    pub(crate) fn get(
        &self,
        src: &PageCache,
        key: &[u8],
        at: Lsn,
    ) -> Result<Option<Found>, BtreeError> {
        for layer in self.layers().filter(|l| !l.mem.is_empty()) {
            if let Some(v) = layer.mem.get(key, at) {
                return Ok(v.map(|v| Found::Mem(Arc::from(v))));
            }
        }
        Ok(self.tree.get(src, key)?.map(Found::Tree))
    }

    /// The value of `key` at snapshot `at`, borrowed from `self` or the
    /// cache where it can be (see [`FoundRef`]).
    pub(crate) fn get_ref<'a>(
        &'a self,
        src: &PageCache,
        key: &[u8],
        at: Lsn,
    ) -> Result<Option<FoundRef<'a>>, BtreeError> {
        for layer in self.layers().filter(|l| !l.mem.is_empty()) {
            if let Some(v) = layer.mem.get(key, at) {
                return Ok(v.map(FoundRef::Mem));
            }
        }
        Ok(self.tree.get_pinned(src, key)?.map(|g| match g {
            Got::Borrowed(b) => FoundRef::Pinned(b),
            Got::Entry(e) => FoundRef::Tree(e),
        }))
    }

    /// The memtables' scans from `start` to `end` at `at`, newest first.
    pub(crate) fn mem_ranges(
        &self,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        at: Lsn,
    ) -> Vec<MemRange<'_>> {
        self.layers().map(|l| l.mem.range(start, end, at)).collect()
    }
}
