//! Keys, tables and reads.
//!
//! All tables share one B+tree: a table's keys are its 4-byte big-endian id
//! followed by the user's key, so a table is a contiguous key range. Table
//! 0 is the catalog: its key `name` maps to the table's id (4 bytes, big
//! endian), and its empty key holds the next id to give. Ids are never
//! reused, so a dropped table's keys can never reappear under a new table.
//!
//! Reads see the checkpointed tree under the memtables (see `layers.rs`);
//! a scan merges them (and a write transaction's own changes, see
//! `txn.rs`), the newest layer winning, from either end.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::ops::{self, Bound, RangeFrom, RangeFull, RangeInclusive, RangeTo, RangeToInclusive};
use std::path::Path;
use std::sync::Arc;

use super::error::{DbError, Result};
use super::item::FoundRef;
use super::item::{with_full_key, Key, KeyValue, Value};
use super::layers::Base;
use super::run::Run;
use super::state::{Lease, Shared, TABLE_IDS};
use super::sync::lock;
use crate::btree::{Entry, PageCache, Range};
use crate::journal::Lsn;

pub(super) use super::item::{decode_id, full_key, CATALOG, PREFIX};

/// The longest table name, in bytes of UTF-8.
pub const MAX_TABLE_NAME_BYTES: usize = 255;

/// The table of typed tables' key and value types (see `typed.rs`): an id
/// no table is given (ids stop below it), so an older Keel, which knows
/// nothing of it, never lists nor reads it.
pub(super) const TYPES: u32 = u32::MAX;

pub(crate) fn max_key_bytes(s: &Shared) -> usize {
    s.page_size.max_key_bytes() - PREFIX
}

pub(super) fn check_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "empty"
    } else if name.len() > MAX_TABLE_NAME_BYTES {
        "longer than 255 bytes"
    } else {
        return Ok(());
    };
    Err(DbError::BadTableName {
        name: name.into(),
        reason,
    })
}

/// A range of keys, for `range` on a table: `..`, `a..b`, `a..=b`,
/// `a..`, `..b`, `..=b`, or a pair of [`Bound`]s, with keys of any type
/// that is `AsRef<[u8]>` (`&[u8]`, `&str`, `Vec<u8>`, `&[u8; N]`, ...):
/// `t.range(&b"a"[..]..&b"c"[..])`, `t.range("carol"..)`.
pub trait KeyRange {
    /// Where the range starts.
    fn start_key(&self) -> Bound<&[u8]>;
    /// Where the range ends.
    fn end_key(&self) -> Bound<&[u8]>;
}

impl KeyRange for RangeFull {
    fn start_key(&self) -> Bound<&[u8]> {
        Bound::Unbounded
    }
    fn end_key(&self) -> Bound<&[u8]> {
        Bound::Unbounded
    }
}

impl<K: AsRef<[u8]>> KeyRange for ops::Range<K> {
    fn start_key(&self) -> Bound<&[u8]> {
        Bound::Included(self.start.as_ref())
    }
    fn end_key(&self) -> Bound<&[u8]> {
        Bound::Excluded(self.end.as_ref())
    }
}

impl<K: AsRef<[u8]>> KeyRange for RangeInclusive<K> {
    fn start_key(&self) -> Bound<&[u8]> {
        Bound::Included(self.start().as_ref())
    }
    fn end_key(&self) -> Bound<&[u8]> {
        Bound::Included(self.end().as_ref())
    }
}

impl<K: AsRef<[u8]>> KeyRange for RangeFrom<K> {
    fn start_key(&self) -> Bound<&[u8]> {
        Bound::Included(self.start.as_ref())
    }
    fn end_key(&self) -> Bound<&[u8]> {
        Bound::Unbounded
    }
}

impl<K: AsRef<[u8]>> KeyRange for RangeTo<K> {
    fn start_key(&self) -> Bound<&[u8]> {
        Bound::Unbounded
    }
    fn end_key(&self) -> Bound<&[u8]> {
        Bound::Excluded(self.end.as_ref())
    }
}

impl<K: AsRef<[u8]>> KeyRange for RangeToInclusive<K> {
    fn start_key(&self) -> Bound<&[u8]> {
        Bound::Unbounded
    }
    fn end_key(&self) -> Bound<&[u8]> {
        Bound::Included(self.end.as_ref())
    }
}

impl<K: AsRef<[u8]>> KeyRange for (Bound<K>, Bound<K>) {
    fn start_key(&self) -> Bound<&[u8]> {
        self.0.as_ref().map(AsRef::as_ref)
    }
    fn end_key(&self) -> Bound<&[u8]> {
        self.1.as_ref().map(AsRef::as_ref)
    }
}

/// The full-key bounds of `range` inside table `id`.
pub(super) fn table_bounds(id: u32, range: &impl KeyRange) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let start = match range.start_key() {
        Bound::Included(k) => Bound::Included(full_key(id, k)),
        Bound::Excluded(k) => Bound::Excluded(full_key(id, k)),
        Bound::Unbounded => Bound::Included(full_key(id, &[])),
    };
    let end = match range.end_key() {
        Bound::Included(k) => Bound::Included(full_key(id, k)),
        Bound::Excluded(k) => Bound::Excluded(full_key(id, k)),
        Bound::Unbounded => table_end(id),
    };
    (start, end)
}

pub(super) fn table_end(id: u32) -> Bound<Vec<u8>> {
    match id.checked_add(1) {
        Some(next) => Bound::Excluded(next.to_be_bytes().to_vec()),
        None => Bound::Unbounded,
    }
}

/// The full-key bounds of the keys of table `id` starting with `prefix`.
pub(super) fn prefix_bounds(id: u32, prefix: &[u8]) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let start = Bound::Included(full_key(id, prefix));
    // The first key after every key with the prefix: the prefix with its
    // last byte below 0xff raised by one and the rest cut.
    let mut p = prefix.to_vec();
    while let Some(&last) = p.last() {
        if last < 0xff {
            *p.last_mut().expect("not empty") += 1;
            return (start, Bound::Excluded(full_key(id, &p)));
        }
        p.pop();
    }
    (start, table_end(id))
}

/// Whether no key lies between `start` and `end`: the start above the
/// end, or both at one key and either excluded. (A key range is the
/// caller's: `a..b` with `a > b` is no error, only empty.)
pub(super) fn names_no_key(start: Bound<&[u8]>, end: Bound<&[u8]>) -> bool {
    match (start, end) {
        (Bound::Included(s), Bound::Included(e)) => s > e,
        (Bound::Included(s) | Bound::Excluded(s), Bound::Included(e) | Bound::Excluded(e)) => {
            s >= e
        }
        _ => false,
    }
}

pub(super) fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k),
        Bound::Excluded(k) => Bound::Excluded(k),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// A transaction's changes: full key → new value (`None`: deleted). Values
/// are shared (`Arc`) so that a large one becomes the tree's overflow value
/// without another copy.
pub(super) type Overlay = BTreeMap<Vec<u8>, Option<Arc<[u8]>>>;

/// A change of a transaction's: a full key and its new value (`None`:
/// deleted).
pub(super) type Change = (Vec<u8>, Option<Arc<[u8]>>);

/// A write transaction's own changes as a scan reads them: afresh at each
/// step (the transaction may change between two steps: a scan of one
/// table while another table of the transaction, or this one, is
/// written).
pub(super) trait Changes {
    /// The first change with a full key between `lo` and `hi`, going up
    /// (`rev`: down), if it comes no later than `limit` (the key the other
    /// layers have next): its full key and its value (`None`: deleted).
    fn first_change(
        &self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        rev: bool,
        limit: Option<&[u8]>,
    ) -> Option<Change>;
}

impl Changes for Overlay {
    fn first_change(
        &self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        rev: bool,
        limit: Option<&[u8]>,
    ) -> Option<Change> {
        // `BTreeMap::range` panics on bounds that name no key.
        if names_no_key(lo, hi) {
            return None;
        }
        let mut range = self.range::<[u8], _>((lo, hi));
        let (k, v) = if rev {
            range.next_back()?
        } else {
            range.next()?
        };
        let later = |l: &[u8]| if rev { &k[..] < l } else { &k[..] > l };
        if limit.is_some_and(later) {
            return None;
        }
        Some((k.clone(), v.clone()))
    }
}

/// A layer's item: a key and its value, `None` for a deletion.
pub(super) type LayerItem<'a> = (&'a [u8], Option<&'a [u8]>);
/// A layer's scan, in key order (or descending, for a scan's back end).
pub(super) type LayerScan<'a> = Box<dyn Iterator<Item = LayerItem<'a>> + 'a>;

/// A scan over a table's key range, from its start (`next`) or its end
/// (`next_back`, `rev()`), or both at once: the two ends meet in the
/// middle and no entry comes out twice. Each item is a `(key, value)`
/// pair (`let (key, value) = item?;`), in key order from the start.
///
/// It merges the tree's entries with the layers above them (the runs and
/// memtables of commits since the last checkpoint, and a write
/// transaction's own changes), the newest layer's version of each key
/// winning and deletions hiding what is below. In a write transaction
/// the scan reads the transaction's changes as they are at each step:
/// a key it has not reached yet that the transaction inserts or removes
/// meanwhile (through any table handle) is seen so. After an error it
/// ends.
pub struct Iter<'a> {
    /// What it reads; `None` for a scan that yields nothing.
    src: Option<Sources<'a>>,
    /// The two ends, each made at its first step.
    front: Option<Merge<'a>>,
    back: Option<Merge<'a>>,
    /// An error to report first (taking the writer slot failed).
    error: Option<DbError>,
    done: bool,
}

impl std::fmt::Debug for Iter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Iter")
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

/// What a scan reads.
struct Sources<'a> {
    base: &'a Base,
    cache: &'a PageCache,
    start: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
    /// The snapshot's LSN in the memtables.
    at: Lsn,
    /// Runs above the memtables, oldest first (`super::pending`).
    runs: &'a [Arc<Run>],
    /// A write transaction's own changes.
    changes: Option<&'a dyn Changes>,
    /// A read transaction's scan: checked at every step (it may expire).
    reader: Option<&'a ReadTxn>,
}

/// One end of a scan: a k-way merge of its layers, going up or down.
struct Merge<'a> {
    rev: bool,
    tree: Range<'a>,
    tree_next: Option<Entry>,
    /// Newest first, each with its next item.
    upper: Vec<(LayerScan<'a>, Option<LayerItem<'a>>)>,
    /// The last full key this end took (returned, or found deleted): the
    /// other end stops before it.
    last: Vec<u8>,
    moved: bool,
}

impl<'a> Merge<'a> {
    fn new(src: &Sources<'a>, rev: bool) -> Merge<'a> {
        let (s, e) = (as_ref(&src.start), as_ref(&src.end));
        let mut upper: Vec<LayerScan<'a>> = Vec::with_capacity(2 + src.runs.len());
        // Newer than the memtables, newest first (`super::pending`).
        for run in src.runs.iter().rev() {
            upper.push(match rev {
                false => Box::new(run.range(s, e)),
                true => Box::new(run.range(s, e).rev()),
            });
        }
        match rev {
            false => upper.extend(
                src.base
                    .mem_ranges(s, e, src.at)
                    .into_iter()
                    .map(|r| Box::new(r) as LayerScan<'a>),
            ),
            true => upper.extend(
                src.base
                    .layers()
                    .map(|l| Box::new(l.mem.range_rev(s, e, src.at)) as LayerScan<'a>),
            ),
        }
        Merge {
            rev,
            tree: src.base.tree.range(src.cache, s, e),
            tree_next: None,
            upper: upper
                .into_iter()
                .map(|mut scan| {
                    let first = scan.next();
                    (scan, first)
                })
                .collect(),
            last: Vec::new(),
            moved: false,
        }
    }

    /// The last full key this end took.
    fn last(&self) -> Option<&[u8]> {
        self.moved.then_some(&self.last[..])
    }

    /// The next entry from this end, stopping before `other` (the last
    /// key the other end took).
    ///
    /// Inlined (one caller), as `take`: the item, nine words, is then
    /// built where it is returned (4 % fewer instructions in a scan of
    /// the tree's entries).
    #[inline(always)]
    fn step(
        &mut self,
        changes: Option<&dyn Changes>,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        other: Option<&[u8]>,
    ) -> Option<Result<KeyValue>> {
        loop {
            let rev = self.rev;
            if self.tree_next.is_none() {
                match if rev {
                    self.tree.next_back()
                } else {
                    self.tree.next()
                } {
                    Some(Ok(e)) => self.tree_next = Some(e),
                    Some(Err(e)) => return Some(Err(e.into())),
                    None => {}
                }
            }
            // In this end's direction: `Less` is ahead.
            let order = |a: &[u8], b: &[u8]| if rev { b.cmp(a) } else { a.cmp(b) };
            // The key the tree, runs and memtables have next, and which of
            // them have it: one comparison per layer (with a dozen runs
            // above the memtable, comparing again to find them doubled a
            // scan's cost).
            let mut next: Option<&[u8]> = self.tree_next.as_ref().map(Entry::key);
            let (mut in_tree, mut in_upper) = (next.is_some(), false);
            for &(_, item) in &self.upper {
                let Some((k, _)) = item else { continue };
                match next.map_or(Ordering::Less, |n| order(k, n)) {
                    Ordering::Less => (next, in_tree, in_upper) = (Some(k), false, true),
                    Ordering::Equal => in_upper = true,
                    Ordering::Greater => {}
                }
            }
            // The transaction's own change, if one comes first (or at it).
            let change = changes.and_then(|c| {
                let from = self.moved.then_some(Bound::Excluded(&self.last[..]));
                let (lo, hi) = match rev {
                    false => (from.unwrap_or(start), end),
                    true => (start, from.unwrap_or(end)),
                };
                c.first_change(lo, hi, rev, next)
            });
            let key = match &change {
                Some((k, _)) => {
                    if next.is_some_and(|n| n != &k[..]) {
                        (in_tree, in_upper) = (false, false); // only the change has it
                    }
                    &k[..]
                }
                None => next?,
            };
            if other.is_some_and(|o| order(key, o).is_ge()) {
                return None; // the ends met
            }
            self.last.clear();
            self.last.extend_from_slice(key);
            self.moved = true;
            if let Some(kv) = self.take(change, in_tree, in_upper) {
                return Some(Ok(kv));
            }
            // A deletion: on.
        }
    }

    /// Move every layer past `self.last` (the key taken: the tree has it
    /// if `in_tree`, some runs or memtables if `in_upper`); its newest
    /// version: `change` (the transaction's), else the newest layer's.
    #[inline(always)]
    fn take(&mut self, change: Option<Change>, in_tree: bool, in_upper: bool) -> Option<KeyValue> {
        let key = &self.last[..];
        let mut upper_value: Option<Option<&'a [u8]>> = None;
        if in_upper {
            for (scan, item) in &mut self.upper {
                if item.is_some_and(|(k, _)| k == key) {
                    let (_, v) = std::mem::replace(item, scan.next()).expect("checked");
                    upper_value.get_or_insert(v);
                }
            }
        }
        let tree = in_tree.then(|| self.tree_next.take()).flatten();
        if let Some((k, v)) = change {
            return v.map(|v| (Key::owned_full(k), Value::owned(v)));
        }
        if let Some(v) = upper_value {
            return v.map(|v| (Key::owned_full(key.to_vec()), Value::owned(Arc::from(v))));
        }
        let e = tree.expect("the key came from a layer");
        Some((Key::tree(e.clone()), Value::tree(e)))
    }
}

impl<'a> Iter<'a> {
    /// A scan from `s` to `e` (full keys) at `at`, over `base` and the
    /// runs above it, and a write transaction's own changes.
    pub(super) fn new(
        base: &'a Base,
        cache: &'a PageCache,
        s: Bound<Vec<u8>>,
        e: Bound<Vec<u8>>,
        at: Lsn,
        changes: Option<&'a dyn Changes>,
        runs: &'a [Arc<Run>],
    ) -> Iter<'a> {
        if names_no_key(as_ref(&s), as_ref(&e)) {
            return Iter::empty();
        }
        Iter {
            src: Some(Sources {
                base,
                cache,
                start: s,
                end: e,
                at,
                runs,
                changes,
                reader: None,
            }),
            front: None,
            back: None,
            error: None,
            done: false,
        }
    }

    /// A read transaction's scan: fails once `txn` expires.
    fn of_reader(txn: &'a ReadTxn, s: Bound<Vec<u8>>, e: Bound<Vec<u8>>) -> Iter<'a> {
        if let Err(e) = txn.live() {
            return Iter::failed(e);
        }
        let mut it = Iter::new(
            &txn.lease.tree,
            &txn.lease.shared.cache,
            s,
            e,
            txn.lease.lsn,
            None,
            txn.runs(),
        );
        if let Some(src) = &mut it.src {
            src.reader = Some(txn);
        }
        it
    }

    /// A scan that fails with `e` at its first step.
    pub(super) fn failed(e: DbError) -> Iter<'a> {
        Iter {
            error: Some(e),
            ..Iter::empty()
        }
    }

    /// A scan that yields nothing.
    fn empty() -> Iter<'a> {
        Iter {
            src: None,
            front: None,
            back: None,
            error: None,
            done: false,
        }
    }

    /// The next entry from the start (`rev`: from the end).
    fn advance(&mut self, rev: bool) -> Option<Result<KeyValue>> {
        if let Some(e) = self.error.take() {
            self.done = true;
            return Some(Err(e));
        }
        if self.done {
            return None;
        }
        let Some(src) = &self.src else {
            self.done = true;
            return None;
        };
        if let Some(Err(e)) = src.reader.map(ReadTxn::live) {
            self.done = true;
            return Some(Err(e));
        }
        let (this, other) = match rev {
            false => (&mut self.front, &self.back),
            true => (&mut self.back, &self.front),
        };
        let this = this.get_or_insert_with(|| Merge::new(src, rev));
        let other = other.as_ref().and_then(Merge::last);
        let item = this.step(src.changes, as_ref(&src.start), as_ref(&src.end), other);
        // An end that stops (at the range's end, where the other end
        // was, or on an error) leaves nothing for the other either.
        if !matches!(item, Some(Ok(_))) {
            self.done = true;
        }
        item
    }
}

impl Iterator for Iter<'_> {
    type Item = Result<KeyValue>;

    fn next(&mut self) -> Option<Self::Item> {
        self.advance(false)
    }
}

/// From the range's end, in descending key order. Mixed with `next`, the
/// two ends meet in the middle: each entry comes out once.
impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.advance(true)
    }
}

impl std::iter::FusedIterator for Iter<'_> {}

// ----- read transactions ------------------------------------------------

/// A read transaction: a snapshot of the newest durable commit at its
/// start. Later commits never change what it reads. Holding it a long time
/// keeps the pages of its snapshot from being reused (the data file grows
/// meanwhile).
pub struct ReadTxn {
    /// The snapshot: shared with the transactions this thread began since
    /// the last publish (`super::state::Lease`).
    lease: Arc<Lease>,
}

impl std::fmt::Debug for ReadTxn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadTxn")
            .field("store", &self.lease.shared.path)
            .field("lsn", &self.lease.lsn)
            .finish()
    }
}

impl ReadTxn {
    pub(crate) fn begin(shared: &Arc<Shared>) -> ReadTxn {
        shared.read_txns.add(0, 1);
        ReadTxn {
            lease: shared.lease(),
        }
    }

    /// The store this snapshot is of.
    pub(super) fn shared(&self) -> &Arc<Shared> {
        &self.lease.shared
    }

    /// Whether this snapshot may still be read (see
    /// [`DbError::SnapshotTooOld`]).
    fn live(&self) -> Result<()> {
        let l = &self.lease;
        l.shared.check_snapshot(l.tree.gen, l.lsn)
    }

    /// The value of a full key in this snapshot.
    pub(super) fn get_full(&self, key: &[u8]) -> Result<Option<Value<'static>>> {
        self.live()?;
        for run in self.runs().iter().rev() {
            if let Some(v) = run.get(key) {
                return Ok(Some(Value::owned(Arc::from(v))));
            }
        }
        let l = &self.lease;
        Ok(l.tree.get(&l.shared.cache, key, l.lsn)?.map(Value::found))
    }

    /// The value of a full key in this snapshot, borrowed where it lies
    /// in memory (a pending run or a memtable, which the snapshot holds; a
    /// cached leaf, under a reader-era pin).
    fn get_full_ref(&self, key: &[u8]) -> Result<Option<Value<'_>>> {
        self.live()?;
        for run in self.runs().iter().rev() {
            if let Some(v) = run.get(key) {
                return Ok(Some(Value::found_ref(FoundRef::Mem(v))));
            }
        }
        let l = &self.lease;
        Ok(l.tree
            .get_ref(&l.shared.cache, key, l.lsn)?
            .map(Value::found_ref))
    }

    fn runs(&self) -> &[Arc<Run>] {
        self.lease.runs.as_deref().map_or(&[], Vec::as_slice)
    }

    /// The LSN of the commit this snapshot shows (0 before any).
    pub fn lsn(&self) -> Lsn {
        self.lease.lsn
    }

    pub(super) fn table_id(&self, name: &str) -> Result<Option<u32>> {
        check_name(name)?;
        self.live()?;
        let known = |ids: &[(Box<str>, u32)]| ids.iter().find(|(n, _)| **n == *name).map(|e| e.1);
        if let Some(id) = known(&lock(&self.lease.table_ids)) {
            return Ok(Some(id));
        }
        let Some(v) = self.get_full(&full_key(CATALOG, name.as_bytes()))? else {
            return Ok(None);
        };
        let id = decode_id(&self.lease.shared.path, &v)?;
        let mut ids = lock(&self.lease.table_ids);
        if ids.len() == TABLE_IDS {
            ids.remove(0);
        }
        ids.push((name.into(), id));
        Ok(Some(id))
    }

    /// The table `name`; an error when it does not exist.
    pub fn open_table(&self, name: &str) -> Result<Table<'_>> {
        match self.table_id(name)? {
            Some(id) => Ok(Table { txn: self, id }),
            None => Err(DbError::NoSuchTable(name.into())),
        }
    }

    /// The names of the tables, sorted.
    pub fn list_tables(&self) -> Result<Vec<String>> {
        let (s, e) = table_bounds(CATALOG, &(Bound::Excluded(&[][..]), Bound::Unbounded));
        collect_names(&self.lease.shared.path, Iter::of_reader(self, s, e))
    }
}

pub(super) fn collect_names(path: &Path, it: Iter<'_>) -> Result<Vec<String>> {
    it.map(|kv| {
        let (k, _) = kv?;
        String::from_utf8(k.to_vec()).map_err(|_| DbError::Corrupt {
            path: path.to_path_buf(),
            reason: "a table name that is not UTF-8".into(),
        })
    })
    .collect()
}

impl Drop for ReadTxn {
    fn drop(&mut self) {
        self.lease.shared.read_txns.add(1, 1);
    }
}

/// How many entries `it` yields (the first error, if any).
pub(super) fn count(it: Iter<'_>) -> Result<u64> {
    let mut n = 0;
    for kv in it {
        kv?;
        n += 1;
    }
    Ok(n)
}

/// A table seen by a read transaction.
#[derive(Clone, Copy)]
pub struct Table<'t> {
    pub(super) txn: &'t ReadTxn,
    pub(super) id: u32,
}

impl std::fmt::Debug for Table<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("id", &self.id)
            .field("lsn", &self.txn.lsn())
            .finish()
    }
}

impl<'t> Table<'t> {
    /// The value of `key`, if present.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Value<'t>>> {
        with_full_key(self.id, key.as_ref(), |k| self.txn.get_full_ref(k))
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        Ok(self.get(key)?.is_some())
    }

    /// The entries with keys in `range` (see [`KeyRange`]), in key order;
    /// `.rev()` for descending order.
    pub fn range(&self, range: impl KeyRange) -> Iter<'t> {
        let (s, e) = table_bounds(self.id, &range);
        Iter::of_reader(self.txn, s, e)
    }

    /// Every entry, in key order; `.rev()` for descending order.
    pub fn iter(&self) -> Iter<'t> {
        self.range(..)
    }

    /// The entries whose keys start with `prefix`, in key order.
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Iter<'t> {
        let (s, e) = prefix_bounds(self.id, prefix.as_ref());
        Iter::of_reader(self.txn, s, e)
    }

    /// The entry with the smallest key, if any.
    pub fn first(&self) -> Result<Option<KeyValue>> {
        self.iter().next().transpose()
    }

    /// The entry with the largest key, if any.
    pub fn last(&self) -> Result<Option<KeyValue>> {
        self.iter().next_back().transpose()
    }

    /// How many entries the table holds. O(n): it counts them (a scan of
    /// the whole table).
    pub fn len(&self) -> Result<u64> {
        count(self.iter())
    }

    /// Whether the table holds no entry (reads at most one).
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.first()?.is_none())
    }
}
