//! A write transaction's blind changes (puts made before it read
//! anything), kept as the journal record they make, and that record.
//! Committed, its puts are a run readers search (`run.rs`) until the
//! memtable has them (`pending.rs`).

use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;

use super::error::Result;
use super::item::{decode_id, full_key, Value, CATALOG, PREFIX};
use super::layers::Layer;
use super::record::{self, PUT_FIXED_BYTES, RECORD_TXN};
use super::sync::lock;
use super::writer::WriterState;
use crate::btree::PageCache;
use crate::journal::{CommitHandle, Journal, JournalError, Lsn};

/// A write transaction's changes before it took the writer slot: the
/// tables it opened (by name) and its puts into them, in order.
///
/// The puts' bytes are kept one after the other in one buffer: a key and
/// a value allocated apiece made a transaction of 100 puts 200
/// allocations before its record could be written (and 200 frees after).
///
/// A committed one is kept for the next transaction, buffers and all
/// (`pending::Unapplied::spare_blind`), so that a commit allocates nothing
/// on the committing thread: with 64 committing threads, each one's
/// allocations took fresh pages of its own allocator heap (2 MiB pages,
/// zeroed by the kernel, in a process with transparent huge pages), and
/// freeing them on the leader's thread cost every commit again.
#[derive(Debug, Default)]
pub(crate) struct Blind {
    pub(crate) tables: Vec<String>,
    /// The journal record, being written put by put: [`RECORD_TXN`], then
    /// each put as the record has it (`record::push_put_head_unresolved`:
    /// its full key with the table id left as zeros until
    /// [`Blind::encode_direct`] sets it; a small value after it, a large
    /// one gathered at submit). A commit whose tables all exist submits
    /// these bytes as they are, and the memtable takes the full keys from
    /// them: no second copy of the puts on the commit's path.
    bytes: Vec<u8>,
    puts: Vec<BlindPut>,
    /// An upper bound of the record's bytes once replayed: every put as
    /// if no other replaced it, every table as if it had to be created.
    pub(super) bound: usize,
    /// Set by [`Blind::encode_direct`]: each table's id (by index in
    /// `tables`).
    ids: Vec<u32>,
    /// Names of tables emptied out of `tables`, for the next ones.
    spare_names: Vec<String>,
}

/// Where a put's full key starts, from the put's start in a [`Blind`]'s
/// bytes.
const KEY_AT: usize = PUT_FIXED_BYTES;

/// One put of a [`Blind`]: its table (index in `tables`), where it starts
/// in `bytes`.
#[derive(Debug)]
struct BlindPut {
    slot: usize,
    at: usize,
    /// The user's key's length (the full key has [`PREFIX`] more).
    key_len: usize,
    value_len: usize,
    /// A value of [`GATHER_VALUE_BYTES`] or more, kept whole: the record
    /// gathers it and the tree shares it (an overflow value) without
    /// another copy.
    large: Option<Arc<[u8]>>,
}

impl BlindPut {
    /// Where its full key is in the [`Blind`]'s bytes.
    fn full_key(&self) -> std::ops::Range<usize> {
        self.at + KEY_AT..self.value_at()
    }

    /// Where its value is (or, large, would be) in the bytes.
    fn value_at(&self) -> usize {
        self.at + KEY_AT + PREFIX + self.key_len
    }
}

impl Blind {
    pub(crate) fn new() -> Blind {
        Blind {
            bound: 1,
            ..Blind::default()
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.tables.is_empty() && self.puts.is_empty()
    }

    /// Bytes its buffers hold (their capacity).
    pub(crate) fn held_bytes(&self) -> usize {
        self.bytes.capacity()
            + self.puts.capacity() * std::mem::size_of::<BlindPut>()
            + self.ids.capacity() * 4
    }

    /// Empty it for reuse, keeping its buffers' capacity; `false` (and
    /// left as it was) when they are larger than is worth keeping.
    pub(crate) fn clear_to_keep(&mut self) -> bool {
        const KEEP_BYTES: usize = 1 << 20;
        if self.held_bytes() > KEEP_BYTES {
            return false;
        }
        self.spare_names.append(&mut self.tables);
        self.spare_names.truncate(KEEP_SPARE_NAMES);
        self.bytes.clear();
        self.puts.clear();
        self.ids.clear();
        self.bound = 1;
        true
    }

    /// Add table `name` (not among `tables` yet), in a kept name's
    /// buffer if there is one.
    pub(super) fn push_table(&mut self, name: &str) {
        let mut s = self.spare_names.pop().unwrap_or_default();
        s.clear();
        s.push_str(name);
        self.tables.push(s);
    }

    /// A blind transaction of `puts` (table index, key, value), its
    /// tables' ids `ids` resolved, for tests.
    #[cfg(test)]
    pub(crate) fn of_puts(puts: &[(usize, &[u8], &[u8])], ids: &[u32]) -> Blind {
        let mut b = Blind::new();
        for &(slot, key, value) in puts {
            b.push(slot, key, value);
        }
        b.ids = ids.to_vec();
        b.set_table_ids();
        b
    }

    /// Puts made.
    pub(crate) fn len(&self) -> usize {
        self.puts.len()
    }

    pub(super) fn push(&mut self, slot: usize, key: &[u8], value: &[u8]) {
        if self.bytes.is_empty() {
            self.bytes.push(RECORD_TXN);
        }
        let at = self.bytes.len();
        record::push_put_head_unresolved(&mut self.bytes, key, value.len());
        let large = (value.len() >= GATHER_VALUE_BYTES).then(|| Arc::from(value));
        if large.is_none() {
            self.bytes.extend_from_slice(value);
        }
        self.puts.push(BlindPut {
            slot,
            at,
            key_len: key.len(),
            value_len: value.len(),
            large,
        });
    }

    /// Write each put's table id (from `ids`) into its full key.
    fn set_table_ids(&mut self) {
        for p in &self.puts {
            record::set_put_table(&mut self.bytes, p.at, self.ids[p.slot]);
        }
    }

    /// A put's key and value: the value from `bytes`, or the large one
    /// kept whole.
    fn key_value<'b>(&'b self, p: &'b BlindPut) -> (&'b [u8], &'b [u8]) {
        let key = &self.bytes[p.at + KEY_AT + PREFIX..p.value_at()];
        let value = match &p.large {
            Some(v) => &v[..],
            None => &self.bytes[p.value_at()..p.value_at() + p.value_len],
        };
        (key, value)
    }

    /// Put `i` (in the order made): table index, key, value.
    pub(crate) fn put(&self, i: usize) -> (usize, &[u8], &[u8]) {
        let p = &self.puts[i];
        let (key, value) = self.key_value(p);
        (p.slot, key, value)
    }

    /// The puts in order, for `Active::replay`: a large value shared.
    pub(crate) fn replay_puts(&self) -> impl Iterator<Item = (usize, &[u8], Arc<[u8]>)> + '_ {
        self.puts.iter().map(|p| {
            let (key, value) = self.key_value(p);
            let value = match &p.large {
                Some(v) => Arc::clone(v),
                None => Arc::from(value),
            };
            (p.slot, key, value)
        })
    }

    /// The record straight from the puts, in the order they were made:
    /// the transaction's own bytes, once each table's id is set in its
    /// puts' full keys (which the memtable's insert and readers of a run
    /// then take from them) — when every table exists in `base` (as the
    /// writer sees it) and the record fits (its bound does). Large values
    /// are gathered at submit, not copied (see [`Record`]). Else `None`:
    /// replay it (`Active::replay`).
    ///
    /// Why: a blind transaction of 100 puts spent ~15 µs in its replay
    /// (a sorted overlay of freshly allocated full keys), before its
    /// record's write could start; one put of 16 KiB (w1) spent ~3 µs. A
    /// key put twice is in the record twice; replaying it and inserting
    /// it into the memtable in order leave the later value, as the overlay
    /// does.
    pub(crate) fn encode_direct(
        &mut self,
        cache: &PageCache,
        path: &Path,
        max_record: usize,
        w: &WriterState,
    ) -> Result<Option<Record<'_>>> {
        if self.puts.is_empty() || self.bound > max_record {
            return Ok(None);
        }
        self.ids.clear();
        let mut known = lock(&w.table_ids);
        for name in &self.tables {
            if let Some(&(_, id)) = known.iter().find(|(n, _)| **n == **name) {
                self.ids.push(id);
                continue;
            }
            let catalog_key = full_key(CATALOG, name.as_bytes());
            match w.base.get(cache, &catalog_key, Lsn::MAX)? {
                Some(found) => {
                    let id = decode_id(path, &Value::found(found))?;
                    // A few tables at most are in use at once; a store
                    // with many keeps the last few dozen.
                    if known.len() >= KEEP_TABLE_IDS {
                        known.remove(0);
                    }
                    known.push((name.as_str().into(), id));
                    self.ids.push(id);
                }
                None => return Ok(None),
            }
        }
        drop(known);
        Ok(Some(self.record_with_ids()))
    }

    /// The record straight from the puts (as [`Blind::encode_direct`]),
    /// with table ids from `known` (name, id) only: `None` if a table is
    /// not among them, or the record may be too large for `max_record`.
    pub(crate) fn encode_known(
        &mut self,
        known: &[(Box<str>, u32)],
        max_record: usize,
    ) -> Option<Record<'_>> {
        if self.puts.is_empty() || self.bound > max_record {
            return None;
        }
        self.ids.clear();
        for name in &self.tables {
            let &(_, id) = known.iter().find(|(n, _)| **n == **name)?;
            self.ids.push(id);
        }
        Some(self.record_with_ids())
    }

    /// The record, once `ids` holds each table's id: set in the bytes.
    fn record_with_ids(&mut self) -> Record<'_> {
        self.set_table_ids();
        let large = self
            .puts
            .iter()
            .filter_map(|p| p.large.as_ref().map(|v| (p.value_at(), v)))
            .collect();
        Record {
            buf: Cow::Borrowed(&self.bytes),
            large,
        }
    }

    /// The record's bytes: each put's full key is in them (its table's
    /// id set once [`Blind::encode_direct`] has run).
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Where put `i`'s full key is in [`Blind::bytes`].
    pub(crate) fn full_key_range(&self, i: usize) -> std::ops::Range<usize> {
        self.puts[i].full_key()
    }

    /// Insert the puts into `layer` under `lsn`, in order (after
    /// [`Blind::encode_direct`] set their tables' ids).
    pub(crate) fn apply_direct(&self, layer: &Layer, lsn: Lsn) {
        let mut w = layer.mem.writer();
        w.insert_all(
            lsn,
            self.puts.iter().map(|p| {
                let (_, value) = self.key_value(p);
                (&self.bytes[p.full_key()], Some(value))
            }),
        );
    }
}

/// Table ids a writer keeps for blind transactions (see
/// `WriterState::table_ids`).
const KEEP_TABLE_IDS: usize = 32;

/// Table names an emptied [`Blind`] keeps for the next transaction's.
const KEEP_SPARE_NAMES: usize = 8;

/// Values at least this large are not copied into a record's buffer: the
/// journal gathers them from the transaction (`Journal::submit_parts`).
pub(super) const GATHER_VALUE_BYTES: usize = 1024;

/// A transaction's journal record: `buf`, with each large value spliced in
/// at its offset (the record is `buf[..o1]`, value 1, `buf[o1..o2]`, …).
pub(crate) struct Record<'s> {
    /// Its own buffer (kept for the next record), or a blind
    /// transaction's bytes, which are the record already.
    pub(super) buf: Cow<'s, [u8]>,
    pub(super) large: Vec<(usize, &'s Arc<[u8]>)>,
}

impl Record<'_> {
    /// Submit the record to `journal` (`Journal::submit_parts`; no list
    /// of parts to allocate when it has no large value).
    pub(crate) fn submit(
        &self,
        journal: &Journal,
    ) -> std::result::Result<CommitHandle, JournalError> {
        if self.large.is_empty() {
            return journal.submit_parts(&[&self.buf[..]]);
        }
        journal.submit_parts(&self.parts())
    }

    /// The record's bytes, in order, for `Journal::submit_parts`.
    pub(crate) fn parts(&self) -> Vec<&[u8]> {
        let mut parts = Vec::with_capacity(2 * self.large.len() + 1);
        let mut from = 0;
        for &(at, v) in &self.large {
            parts.push(&self.buf[from..at]);
            parts.push(&v[..]);
            from = at;
        }
        parts.push(&self.buf[from..]);
        parts
    }

    /// The record's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.buf.len() + self.large.iter().map(|(_, v)| v.len()).sum::<usize>()
    }

    /// The buffer, to keep for the next record (none when the record
    /// was a blind transaction's bytes).
    pub(crate) fn into_buf(self) -> Option<Vec<u8>> {
        match self.buf {
            Cow::Owned(b) => Some(b),
            Cow::Borrowed(_) => None,
        }
    }
}
