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
//! `txn.rs`), the newest layer winning.

use std::collections::BTreeMap;
use std::ops::{
    self, Bound, Deref, RangeFrom, RangeFull, RangeInclusive, RangeTo, RangeToInclusive,
};
use std::path::Path;
use std::sync::Arc;

use super::error::{DbError, Result};
use super::layers::{Base, Found};
use super::pending::Run;
use super::store::Shared;
use super::view::Lease;
use crate::btree::{Entry, PageCache, Range};
use crate::journal::Lsn;

/// The longest table name, in bytes of UTF-8.
pub const MAX_TABLE_NAME_BYTES: usize = 255;

pub(super) const CATALOG: u32 = 0;
pub(super) const PREFIX: usize = 4;

pub(crate) fn max_key_bytes(s: &Shared) -> usize {
    s.page_size.max_key_bytes() - PREFIX
}

pub(super) fn full_key(id: u32, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(PREFIX + key.len());
    k.extend_from_slice(&id.to_be_bytes());
    k.extend_from_slice(key);
    k
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

pub(super) fn decode_id(path: &Path, v: &[u8]) -> Result<u32> {
    let b: [u8; 4] = v.try_into().map_err(|_| DbError::Corrupt {
        path: path.to_path_buf(),
        reason: "a catalog entry whose table id is not 4 bytes".into(),
    })?;
    Ok(u32::from_be_bytes(b))
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

/// A value read from the store. Dereferences to its bytes.
#[derive(Debug, Clone)]
pub struct Value(ValueInner);

#[derive(Debug, Clone)]
enum ValueInner {
    Tree(Entry),
    Owned(Arc<[u8]>),
}

impl Value {
    pub(super) fn owned(v: Arc<[u8]>) -> Value {
        Value(ValueInner::Owned(v))
    }

    pub(super) fn found(f: Found) -> Value {
        Value(match f {
            Found::Tree(e) => ValueInner::Tree(e),
            Found::Mem(v) => ValueInner::Owned(v),
        })
    }

    /// The value's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            ValueInner::Tree(e) => e.value(),
            ValueInner::Owned(v) => v,
        }
    }
}

impl Deref for Value {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl AsRef<[u8]> for Value {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// An entry found by a scan.
#[derive(Debug, Clone)]
pub struct KeyValue(KvInner);

#[derive(Debug, Clone)]
enum KvInner {
    Tree(Entry),
    Owned(Vec<u8>, Arc<[u8]>),
}

impl KeyValue {
    /// The key (without the table's prefix).
    pub fn key(&self) -> &[u8] {
        match &self.0 {
            KvInner::Tree(e) => &e.key()[PREFIX..],
            KvInner::Owned(k, _) => &k[PREFIX..],
        }
    }
    /// The value.
    pub fn value(&self) -> &[u8] {
        match &self.0 {
            KvInner::Tree(e) => e.value(),
            KvInner::Owned(_, v) => v,
        }
    }
}

/// A transaction's changes: full key → new value (`None`: deleted). Values
/// are shared (`Arc`) so that a large one becomes the tree's overflow value
/// without another copy.
pub(super) type Overlay = BTreeMap<Vec<u8>, Option<Arc<[u8]>>>;

/// A layer's item: a key and its value, `None` for a deletion.
pub(super) type LayerItem<'a> = (&'a [u8], Option<&'a [u8]>);
/// A layer's scan, in key order.
pub(super) type LayerScan<'a> = Box<dyn Iterator<Item = LayerItem<'a>> + 'a>;

/// A scan in key order: the tree's entries under the layers above it (the
/// memtables, and a write transaction's own changes), the newest layer's
/// version of each key winning and deletions hiding what is below.
pub struct Iter<'a> {
    base: Range<'a>,
    base_next: Option<Entry>,
    /// Newest first, each with its next item.
    upper: Vec<(LayerScan<'a>, Option<LayerItem<'a>>)>,
    /// An error to report first (taking the writer slot failed).
    error: Option<DbError>,
    /// A read transaction's scan: checked at every step (it may expire).
    reader: Option<&'a ReadTxn>,
    done: bool,
}

impl<'a> Iter<'a> {
    pub(super) fn new(
        base: &'a Base,
        src: &'a PageCache,
        s: &Bound<Vec<u8>>,
        e: &Bound<Vec<u8>>,
        at: Lsn,
        overlay: Option<&'a Overlay>,
        runs: &'a [Arc<Run>],
    ) -> Iter<'a> {
        // `BTreeMap::range` (the overlay's) panics on such bounds; the
        // other layers would find nothing.
        if names_no_key(as_ref(s), as_ref(e)) {
            return Iter::empty(src);
        }
        let mut upper: Vec<LayerScan<'a>> = Vec::with_capacity(3 + runs.len());
        if let Some(o) = overlay {
            upper.push(Box::new(
                o.range::<[u8], _>((as_ref(s), as_ref(e)))
                    .map(|(k, v)| (k.as_slice(), v.as_deref())),
            ));
        }
        // Newer than the memtables, newest first (`super::pending`).
        for run in runs.iter().rev() {
            upper.push(Box::new(run.range(as_ref(s), as_ref(e))));
        }
        for r in base.mem_ranges(as_ref(s), as_ref(e), at) {
            upper.push(Box::new(r));
        }
        Iter {
            base: base.tree.range(src, as_ref(s), as_ref(e)),
            base_next: None,
            upper: upper
                .into_iter()
                .map(|mut scan| {
                    let first = scan.next();
                    (scan, first)
                })
                .collect(),
            error: None,
            reader: None,
            done: false,
        }
    }

    /// A read transaction's scan: fails once `txn` expires.
    fn of_reader(txn: &'a ReadTxn, s: &Bound<Vec<u8>>, e: &Bound<Vec<u8>>) -> Iter<'a> {
        if let Err(e) = txn.live() {
            return Iter::failed(&txn.lease.shared.cache, e);
        }
        Iter {
            reader: Some(txn),
            ..Iter::new(
                &txn.lease.base,
                &txn.lease.shared.cache,
                s,
                e,
                txn.lease.lsn,
                None,
                txn.runs(),
            )
        }
    }

    pub(super) fn failed(src: &'a PageCache, e: DbError) -> Iter<'a> {
        Iter {
            error: Some(e),
            ..Iter::empty(src)
        }
    }

    /// A scan that yields nothing.
    fn empty(src: &'a PageCache) -> Iter<'a> {
        Iter {
            base: Range::new(None, src, Bound::Unbounded, Bound::Unbounded),
            base_next: None,
            upper: Vec::new(),
            error: None,
            reader: None,
            done: false,
        }
    }

    /// The smallest key the upper layers have next, and the newest layer
    /// that has it.
    fn upper_min(&self) -> Option<(usize, &'a [u8])> {
        let mut best: Option<(usize, &'a [u8])> = None;
        for (i, (_, next)) in self.upper.iter().enumerate() {
            if let Some((k, _)) = *next {
                if best.is_none_or(|(_, b)| k < b) {
                    best = Some((i, k));
                }
            }
        }
        best
    }
}

impl Iterator for Iter<'_> {
    type Item = Result<KeyValue>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.error.take() {
            self.done = true;
            return Some(Err(e));
        }
        if let Some(Err(e)) = self.reader.filter(|_| !self.done).map(ReadTxn::live) {
            self.done = true;
            return Some(Err(e));
        }
        while !self.done {
            if self.base_next.is_none() {
                match self.base.next() {
                    Some(Ok(e)) => self.base_next = Some(e),
                    Some(Err(e)) => {
                        self.done = true;
                        return Some(Err(e.into()));
                    }
                    None => {}
                }
            }
            let upper = self.upper_min();
            let (layer, key) = match (&self.base_next, upper) {
                (None, None) => {
                    self.done = true;
                    return None;
                }
                (Some(b), Some((_, k))) if b.key() < k => {
                    let e = self.base_next.take().expect("a tree entry");
                    return Some(Ok(KeyValue(KvInner::Tree(e))));
                }
                (Some(_), None) => {
                    let e = self.base_next.take().expect("a tree entry");
                    return Some(Ok(KeyValue(KvInner::Tree(e))));
                }
                (_, Some(u)) => u,
            };
            // The newest layer's version replaces the others'.
            if self.base_next.as_ref().is_some_and(|b| b.key() == key) {
                self.base_next = None;
            }
            let mut value = None;
            for (i, (scan, next)) in self.upper.iter_mut().enumerate() {
                if next.is_some_and(|(k, _)| k == key) {
                    let (_, v) = std::mem::replace(next, scan.next()).expect("checked");
                    if i == layer {
                        value = v;
                    }
                }
            }
            if let Some(v) = value {
                return Some(Ok(KeyValue(KvInner::Owned(key.to_vec(), Arc::from(v)))));
            }
            // A deletion: skip.
        }
        None
    }
}

// ----- read transactions ------------------------------------------------

/// A read transaction: a snapshot of the newest durable commit at its
/// start. Later commits never change what it reads. Holding it a long time
/// keeps the pages of its snapshot from being reused (the data file grows
/// meanwhile).
#[derive(Debug)]
pub struct ReadTxn {
    /// The snapshot: shared with the transactions this thread began since
    /// the last publish (`super::view::Lease`).
    lease: Arc<Lease>,
}

impl ReadTxn {
    pub(crate) fn begin(shared: &Arc<Shared>) -> ReadTxn {
        ReadTxn {
            lease: shared.lease(),
        }
    }

    /// Whether this snapshot may still be read (see
    /// [`DbError::SnapshotTooOld`]).
    fn live(&self) -> Result<()> {
        let l = &self.lease;
        l.shared.check_snapshot(l.base.gen, l.lsn)
    }

    fn get_full(&self, key: &[u8]) -> Result<Option<Value>> {
        self.live()?;
        for run in self.runs().iter().rev() {
            if let Some(v) = run.get(key) {
                return Ok(Some(Value::owned(Arc::from(v))));
            }
        }
        let l = &self.lease;
        Ok(l.base.get(&l.shared.cache, key, l.lsn)?.map(Value::found))
    }

    fn runs(&self) -> &[Arc<Run>] {
        self.lease.runs.as_deref().map_or(&[], Vec::as_slice)
    }

    /// The LSN of the commit this snapshot shows (0 before any).
    pub fn lsn(&self) -> Lsn {
        self.lease.lsn
    }

    fn table_id(&self, name: &str) -> Result<Option<u32>> {
        check_name(name)?;
        match self.get_full(&full_key(CATALOG, name.as_bytes()))? {
            Some(v) => Ok(Some(decode_id(&self.lease.shared.path, &v)?)),
            None => Ok(None),
        }
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
        collect_names(&self.lease.shared.path, Iter::of_reader(self, &s, &e))
    }
}

pub(super) fn collect_names(path: &Path, it: Iter<'_>) -> Result<Vec<String>> {
    it.map(|kv| {
        let kv = kv?;
        String::from_utf8(kv.key().to_vec()).map_err(|_| DbError::Corrupt {
            path: path.to_path_buf(),
            reason: "a table name that is not UTF-8".into(),
        })
    })
    .collect()
}

/// A table seen by a read transaction.
#[derive(Debug, Clone, Copy)]
pub struct Table<'t> {
    txn: &'t ReadTxn,
    id: u32,
}

impl<'t> Table<'t> {
    /// The value of `key`, if present.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        self.txn.get_full(&full_key(self.id, key.as_ref()))
    }

    /// The entries with keys in `range` (see [`KeyRange`]), in key order.
    pub fn range(&self, range: impl KeyRange) -> Iter<'t> {
        let (s, e) = table_bounds(self.id, &range);
        self.iter_bounds(s, e)
    }

    /// Every entry, in key order.
    pub fn iter(&self) -> Iter<'t> {
        self.range(..)
    }

    /// The entries whose keys start with `prefix`, in key order.
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Iter<'t> {
        let (s, e) = prefix_bounds(self.id, prefix.as_ref());
        self.iter_bounds(s, e)
    }

    fn iter_bounds(&self, s: Bound<Vec<u8>>, e: Bound<Vec<u8>>) -> Iter<'t> {
        Iter::of_reader(self.txn, &s, &e)
    }
}
