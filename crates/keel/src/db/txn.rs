//! Write transactions.
//!
//! A write transaction keeps its changes in an ordered overlay over the
//! writer's base; its reads merge the two. `commit` turns the overlay into
//! one journal record (see `record.rs`) and hands it to the commit path.
//! Keys, tables and reads: `read.rs`.

use std::borrow::Cow;
use std::cell::{Cell, OnceCell, RefCell};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;
use std::thread::ThreadId;
use std::time::Instant;

use super::blind::{Blind, Record, GATHER_VALUE_BYTES};
use super::error::{DbError, Result};
use super::item::{Key, KeyValue, Value};
use super::layers::Base;
use super::options::Durability;
use super::read::{
    as_ref, check_name, collect_names, count, decode_id, full_key, max_key_bytes, prefix_bounds,
    table_bounds, Change, Changes, Iter, KeyRange, Overlay, CATALOG, PREFIX, TYPES,
};
use super::record::{self, Op, DELETE_FIXED_BYTES, DROP_BYTES, PUT_FIXED_BYTES, RECORD_TXN};
use super::state::Shared;
use super::sync::this_thread;
use super::writer::{WriterState, KEEP_RECORD_BUF_BYTES};
use crate::btree::MAX_VALUE_BYTES;
use crate::journal::Lsn;

// ----- write transactions -----------------------------------------------

/// The write transaction. Its own reads see its own changes; nothing is
/// visible to others before `commit`. Dropping it without committing
/// rolls it back.
///
/// Write transactions run one at a time, each holding the store's writer
/// slot — but only from the moment it needs the tree. `begin_write` does
/// not wait: while a transaction has only opened tables and inserted
/// (*blind* changes, which read nothing), it keeps them to itself. Its
/// first read (`get`, `remove`, a scan, `list_tables`, …) takes the slot,
/// waiting while another transaction holds it (one of the same thread's:
/// [`DbError::WouldDeadlock`] instead), and replays the blind
/// changes over the newest state. A transaction still blind at `commit` is
/// queued and committed by whichever committer holds the slot next,
/// together with the others queued (see `combine.rs`): having read
/// nothing, it gives the same result whenever it runs, so running it then
/// is running it serially. A small one into tables the store knows exist
/// is committed by its own thread instead, without the slot, at once
/// with others (`direct.rs`), and published in LSN order.
pub struct WriteTxn {
    shared: Arc<Shared>,
    durability: Durability,
    /// The blind changes made before the transaction took the slot.
    blind: RefCell<Blind>,
    /// The transaction once it holds the writer slot.
    active: OnceCell<Holding>,
}

/// A write transaction holding the writer slot: its changes, and the base
/// they are over, which no one changes while the transaction holds the
/// slot (its scans borrow it).
///
/// The changes are in a `RefCell` so that several tables of the
/// transaction can be open at once, each handle borrowing the transaction
/// (`&WriteTxn`): a `WriteTxn` is used by one thread at a time (it is
/// `Send`, not `Sync`), and no borrow of the cell outlives the call that
/// took it — a scan borrows it anew at each step, never while the caller's
/// code runs — so no borrow can find it taken.
pub(super) struct Holding {
    pub(super) base: Arc<Base>,
    pub(super) active: RefCell<Active>,
}

impl Holding {
    /// A scan of the transaction's view from `s` to `e` (full keys).
    pub(super) fn iter_bounds<'a>(
        &'a self,
        cache: &'a crate::btree::PageCache,
        s: Bound<Vec<u8>>,
        e: Bound<Vec<u8>>,
    ) -> Iter<'a> {
        // The writer's memtable holds every run: taking the slot drained
        // them.
        Iter::new(&self.base, cache, s, e, Lsn::MAX, Some(&self.active), &[])
    }
}

impl Changes for RefCell<Active> {
    fn first_change(
        &self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        rev: bool,
        limit: Option<&[u8]>,
    ) -> Option<Change> {
        self.borrow().overlay.first_change(lo, hi, rev, limit)
    }
}

impl std::fmt::Debug for WriteTxn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("WriteTxn");
        d.field("store", &self.shared.path);
        match self.active.get().map(|h| h.active.try_borrow()) {
            Some(Ok(a)) => d
                .field("changes", &a.overlay.len())
                .field("record_bytes", &a.size),
            Some(Err(_)) => d.field("changes", &"(being changed)"),
            None => match self.blind.try_borrow() {
                Ok(b) => d.field("blind_puts", &b.len()),
                Err(_) => d.field("blind_puts", &"(being changed)"),
            },
        };
        d.finish()
    }
}

/// The longest value a transaction can hold with records of at most
/// `max_record` bytes: one put of it under an empty key, alone in its
/// transaction, into a table that exists (the record's kind byte, the
/// put's fixed bytes and the table's id), and never more than the format's
/// [`MAX_VALUE_BYTES`].
pub(crate) fn max_value_bytes(max_record: usize) -> u64 {
    let overhead = 1 + PUT_FIXED_BYTES + PREFIX;
    (max_record.saturating_sub(overhead) as u64).min(MAX_VALUE_BYTES)
}

/// The catalog entries creating table `name` adds to a record: the next
/// id's counter and the name's entry.
fn create_table_bytes(name: &str) -> usize {
    2 * (PUT_FIXED_BYTES + PREFIX + 4) + name.len()
}

fn op_bytes(key: &[u8], value: &Option<Arc<[u8]>>) -> usize {
    match value {
        Some(v) => PUT_FIXED_BYTES + key.len() + v.len(),
        None => DELETE_FIXED_BYTES + key.len(),
    }
}

/// A write transaction holding the writer slot (or, committed with others,
/// a view of the state the leader is building: `owns_slot` false).
pub(crate) struct Active {
    shared: Arc<Shared>,
    state: Option<WriterState>,
    owns_slot: bool,
    /// The thread it was last used on (holding the slot: see
    /// [`Active::follow_thread`]).
    thread: Cell<ThreadId>,
    overlay: Overlay,
    dropped: Vec<u32>,
    /// Bytes of the journal record the changes make.
    size: usize,
    /// Table ids, by `TableMut::slot`.
    ids: Vec<u32>,
}

impl Drop for Active {
    fn drop(&mut self) {
        if let Some(state) = self.state.take().filter(|_| self.owns_slot) {
            self.shared.put_writer(state);
        }
    }
}

impl Active {
    /// Keep the writer slot's holder the thread this transaction is used
    /// on: moved to another thread since it took the slot, it is that
    /// thread that must not wait for the slot (`DbError::WouldDeadlock`),
    /// and the first may again.
    fn follow_thread(&self) {
        let here = this_thread();
        if self.owns_slot && self.thread.get() != here {
            self.thread.set(here);
            self.shared.hold_here();
        }
    }

    /// The transaction over `state`'s tree with `tables` opened and `puts`
    /// made, in order.
    pub(crate) fn replay<'p>(
        shared: Arc<Shared>,
        state: WriterState,
        owns_slot: bool,
        tables: &[String],
        puts: impl IntoIterator<Item = (usize, &'p [u8], Arc<[u8]>)>,
    ) -> Result<Active> {
        let mut a = Active {
            shared,
            state: Some(state),
            owns_slot,
            thread: Cell::new(this_thread()),
            overlay: BTreeMap::new(),
            dropped: Vec::new(),
            size: 1,
            ids: Vec::with_capacity(tables.len()),
        };
        for name in tables {
            let id = a.open_id(name)?;
            a.ids.push(id);
        }
        for (slot, key, value) in puts {
            a.set_full(full_key(a.ids[slot], key), Some(value))?;
        }
        Ok(a)
    }

    fn base(&self) -> &Base {
        &self.state.as_ref().expect("an open transaction").base
    }

    /// Whether `key` is in the committed state (not counting this
    /// transaction's changes).
    fn committed(&self, key: &[u8]) -> Result<bool> {
        Ok(self
            .base()
            .get(&self.shared.cache, key, Lsn::MAX)?
            .is_some())
    }

    fn max_record(&self) -> usize {
        self.shared.journal.options().max_record_bytes()
    }

    /// Bytes of the journal record.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// The value of a full key as this transaction sees it.
    pub(super) fn get_full(&self, key: &[u8]) -> Result<Option<Value<'static>>> {
        if let Some(v) = self.overlay.get(key) {
            return Ok(v.clone().map(Value::owned));
        }
        // The writer sees every commit applied, durable or not.
        Ok(self
            .base()
            .get(&self.shared.cache, key, Lsn::MAX)?
            .map(Value::found))
    }

    /// Record a change to a full key, refusing it if the record would
    /// outgrow one journal record.
    pub(super) fn set_full(&mut self, key: Vec<u8>, value: Option<Arc<[u8]>>) -> Result<()> {
        let old = self.overlay.get(&key).map_or(0, |v| op_bytes(&key, v));
        let size = self.size - old + op_bytes(&key, &value);
        if size > self.max_record() {
            return Err(DbError::TransactionTooLarge {
                len: size,
                max: self.max_record(),
            });
        }
        self.size = size;
        self.overlay.insert(key, value);
        Ok(())
    }

    /// Remove a full key; returns whether it was present.
    pub(super) fn remove_full(&mut self, key: Vec<u8>) -> Result<bool> {
        let in_tree = self.committed(&key)?;
        match self.overlay.get(&key) {
            Some(None) => Ok(false),
            Some(Some(_)) if !in_tree => {
                let old = self.overlay.remove(&key).expect("present");
                self.size -= op_bytes(&key, &old);
                Ok(true)
            }
            Some(Some(_)) => self.set_full(key, None).map(|_| true),
            None if in_tree => self.set_full(key, None).map(|_| true),
            None => Ok(false),
        }
    }

    pub(super) fn table_id(&self, name: &str) -> Result<Option<u32>> {
        check_name(name)?;
        match self.get_full(&full_key(CATALOG, name.as_bytes()))? {
            Some(v) => Ok(Some(decode_id(&self.shared.path, &v)?)),
            None => Ok(None),
        }
    }

    /// The id of table `name`, created if it does not exist.
    pub(super) fn open_id(&mut self, name: &str) -> Result<u32> {
        if let Some(id) = self.table_id(name)? {
            return Ok(id);
        }
        let next_key = full_key(CATALOG, &[]);
        let id = match self.get_full(&next_key)? {
            Some(v) => decode_id(&self.shared.path, &v)?,
            None => 1,
        };
        let next = id.checked_add(1).ok_or(DbError::BadTableName {
            name: name.into(),
            reason: "every table id was used",
        })?;
        // The counter first: if the name's entry is then refused (the
        // transaction's size), an id is skipped, never given twice.
        self.set_full(next_key, Some(Arc::from(&next.to_be_bytes()[..])))?;
        self.set_full(
            full_key(CATALOG, name.as_bytes()),
            Some(Arc::from(&id.to_be_bytes()[..])),
        )?;
        Ok(id)
    }

    /// Whether the changes touch the catalog (a table created or dropped).
    pub(crate) fn changes_catalog(&self) -> bool {
        !self.dropped.is_empty()
            || self
                .overlay
                .range::<[u8], _>((Bound::Unbounded, Bound::Excluded(&1u32.to_be_bytes()[..])))
                .next()
                .is_some()
    }

    fn delete_table(&mut self, name: &str) -> Result<bool> {
        let Some(id) = self.table_id(name)? else {
            return Ok(false);
        };
        let catalog_key = full_key(CATALOG, name.as_bytes());
        let in_tree = self.committed(&catalog_key)?;
        // Its key and value types, if a typed open recorded them.
        let types_key = full_key(TYPES, name.as_bytes());
        let types_in_tree = self.committed(&types_key)?;
        // Refuse before changing anything: the catalog entry's deletion,
        // the types' and the drop together must fit.
        let mut need = self.size;
        if in_tree {
            need += DROP_BYTES + DELETE_FIXED_BYTES + catalog_key.len();
        }
        if types_in_tree {
            need += DELETE_FIXED_BYTES + types_key.len();
        }
        if need > self.max_record() {
            return Err(DbError::TransactionTooLarge {
                len: need,
                max: self.max_record(),
            });
        }
        self.remove_full(types_key)?;
        self.remove_full(catalog_key)?;
        let (s, e) = prefix_bounds(id, &[]);
        let gone: Vec<Vec<u8>> = self
            .overlay
            .range::<[u8], _>((as_ref(&s), as_ref(&e)))
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            let v = self.overlay.remove(&k).expect("present");
            self.size -= op_bytes(&k, &v);
        }
        if in_tree {
            self.dropped.push(id);
            self.size += DROP_BYTES;
        }
        Ok(true)
    }

    fn list_tables(&self) -> Result<Vec<String>> {
        let (s, e) = table_bounds(CATALOG, &(Bound::Excluded(&[][..]), Bound::Unbounded));
        collect_names(&self.shared.path, self.iter_bounds(s, e))
    }

    fn iter_bounds(&self, s: Bound<Vec<u8>>, e: Bound<Vec<u8>>) -> Iter<'_> {
        Iter::new(
            self.base(),
            &self.shared.cache,
            s,
            e,
            Lsn::MAX,
            Some(&self.overlay),
            // The writer's memtable holds every run: taking the slot
            // drained them.
            &[],
        )
    }

    /// Remove each of `keys` (full keys); how many were present. All or
    /// nothing: on an error, the removals made before it are undone.
    pub(super) fn remove_all(&mut self, keys: Vec<Vec<u8>>) -> Result<u64> {
        let size = self.size;
        // What the overlay held for a key before (`None`: nothing).
        type Before = Option<Option<Arc<[u8]>>>;
        let mut undo: Vec<(Vec<u8>, Before)> = Vec::new();
        for key in keys {
            let before = self.overlay.get(&key).cloned();
            match self.remove_full(key.clone()) {
                Ok(true) => undo.push((key, before)),
                Ok(false) => {}
                Err(e) => {
                    for (key, before) in undo.into_iter().rev() {
                        match before {
                            Some(v) => self.overlay.insert(key, v),
                            None => self.overlay.remove(&key),
                        };
                    }
                    self.size = size;
                    return Err(e);
                }
            }
        }
        Ok(undo.len() as u64)
    }

    /// The store's directory.
    pub(super) fn path(&self) -> &std::path::Path {
        &self.shared.path
    }

    /// The writer's base, shared.
    fn base_arc(&self) -> Arc<Base> {
        Arc::clone(&self.state.as_ref().expect("an open transaction").base)
    }

    /// The changes, in the order the record lists them.
    /// The number of changes in [`Active::ops`].
    pub(crate) fn changes(&self) -> usize {
        self.dropped.len() + self.overlay.len()
    }

    pub(crate) fn ops(&self) -> Vec<Op<'_>> {
        let mut ops = Vec::with_capacity(self.dropped.len() + self.overlay.len());
        ops.extend(self.dropped.iter().map(|&id| Op::DropTable(id)));
        ops.extend(self.overlay.iter().map(|(k, v)| match v {
            Some(v) => Op::PutShared(k, v),
            None => Op::Delete(k),
        }));
        ops
    }

    /// The journal record of `ops` (this transaction's), encoded into
    /// `buf` (a buffer kept between commits: see `WriterState`) except for
    /// large values, which the record refers to where the transaction
    /// holds them (see [`Record`]).
    pub(crate) fn record<'s>(&'s self, ops: &[Op<'s>], mut buf: Vec<u8>) -> Result<Record<'s>> {
        buf.clear();
        buf.reserve(self.size.min(KEEP_RECORD_BUF_BYTES));
        buf.push(RECORD_TXN);
        let mut large = Vec::new();
        for op in ops {
            match *op {
                Op::PutShared(k, v) if v.len() >= GATHER_VALUE_BYTES => {
                    // The value goes in at this offset, at submit.
                    record::push_put_head(&mut buf, k, v.len());
                    large.push((buf.len(), v));
                }
                _ => record::push(&mut buf, *op),
            }
        }
        let rec = Record {
            buf: Cow::Owned(buf),
            large,
        };
        debug_assert_eq!(rec.len(), self.size);
        if rec.len() > self.max_record() {
            // Checked at every change; kept as the last word before submit.
            return Err(DbError::TransactionTooLarge {
                len: rec.len(),
                max: self.max_record(),
            });
        }
        Ok(rec)
    }

    fn commit(mut self, durability: Durability, started: Instant) -> Result<()> {
        let mut state = self.state.take().expect("an open transaction");
        let shared = Arc::clone(&self.shared);
        if self.overlay.is_empty() && self.dropped.is_empty() {
            // Nothing to write; but `Immediate` still means that every
            // earlier commit (an `Eventual` one too) is durable and
            // visible when this returns.
            let last = state.last_lsn;
            shared.put_writer(state);
            if durability == Durability::Immediate {
                shared.wait_published(last)?;
            }
            return Ok(());
        }
        let ops = self.ops();
        let rec = match self.record(&ops, std::mem::take(&mut state.record_buf)) {
            Ok(rec) => rec,
            Err(e) => {
                shared.put_writer(state);
                return Err(e);
            }
        };
        shared.commit(state, rec, &ops, durability, started)
    }
}

impl WriteTxn {
    pub(crate) fn begin(shared: Arc<Shared>) -> Result<WriteTxn> {
        shared.check_poison()?;
        Ok(WriteTxn {
            blind: RefCell::new(shared.unapplied.spare_blind()),
            shared,
            durability: Durability::default(),
            active: OnceCell::new(),
        })
    }

    /// What `commit` guarantees (default: [`Durability::Immediate`]).
    pub fn set_durability(&mut self, durability: Durability) {
        self.durability = durability;
    }

    fn max_record(&self) -> usize {
        self.shared.journal.options().max_record_bytes()
    }

    fn max_value(&self) -> u64 {
        max_value_bytes(self.max_record())
    }

    /// The transaction with the writer slot: taken now (waiting while
    /// another transaction holds it) if not yet, the blind changes
    /// replayed.
    pub(super) fn holding(&self) -> Result<&Holding> {
        if self.active.get().is_none() {
            let state = self.shared.take_writer()?;
            let blind = self.blind.borrow();
            let a = Active::replay(
                Arc::clone(&self.shared),
                state,
                true,
                &blind.tables,
                blind.replay_puts(),
            )?;
            drop(blind);
            // Replayed: the blind changes are in the overlay now.
            *self.blind.borrow_mut() = Blind::new();
            let _ = self.active.set(Holding {
                base: a.base_arc(),
                active: RefCell::new(a),
            });
        }
        let h = self.active.get().expect("set above");
        h.active.borrow().follow_thread();
        Ok(h)
    }

    /// A handle on table `id` of an active transaction.
    pub(super) fn push_table(&self, h: &Holding, id: u32) -> TableMut<'_> {
        let mut a = h.active.borrow_mut();
        a.ids.push(id);
        TableMut {
            txn: self,
            slot: a.ids.len() - 1,
        }
    }

    /// The table `name`, created if it does not exist. Several tables (or
    /// the same one twice) may be open at once. (The table is created when
    /// the transaction takes the writer slot, at its first read or at
    /// `commit`: an error creating it, such as every table id having been
    /// used, comes from there.)
    pub fn open_table(&self, name: &str) -> Result<TableMut<'_>> {
        check_name(name)?;
        if self.active.get().is_none() {
            let mut blind = self.blind.borrow_mut();
            if let Some(slot) = blind.tables.iter().position(|t| t == name) {
                return Ok(TableMut { txn: self, slot });
            }
            let bound = blind.bound + create_table_bytes(name);
            if bound <= self.max_record() {
                blind.push_table(name);
                blind.bound = bound;
                let slot = blind.tables.len() - 1;
                return Ok(TableMut { txn: self, slot });
            }
        }
        let h = self.holding()?;
        let id = h.active.borrow_mut().open_id(name)?;
        Ok(self.push_table(h, id))
    }

    /// The table `name` if it exists (without creating it).
    pub fn existing_table(&self, name: &str) -> Result<Option<TableMut<'_>>> {
        let h = self.holding()?;
        let id = h.active.borrow().table_id(name)?;
        Ok(id.map(|id| self.push_table(h, id)))
    }

    /// Drop the table `name` and all its entries; returns whether it
    /// existed. (No handle on a table of the transaction may be alive.)
    pub fn delete_table(&mut self, name: &str) -> Result<bool> {
        self.holding()?.active.borrow_mut().delete_table(name)
    }

    /// The names of the tables, sorted (as this transaction sees them).
    pub fn list_tables(&self) -> Result<Vec<String>> {
        self.holding()?.active.borrow().list_tables()
    }

    /// Bytes of the journal record this transaction would append.
    pub fn record_bytes(&self) -> Result<usize> {
        Ok(self.holding()?.active.borrow().size)
    }

    fn insert(&self, slot: usize, key: &[u8], value: &[u8]) -> Result<()> {
        if self.active.get().is_none() {
            let mut blind = self.blind.borrow_mut();
            let bound = blind.bound + PUT_FIXED_BYTES + PREFIX + key.len() + value.len();
            if bound <= self.max_record() {
                blind.push(slot, key, value);
                blind.bound = bound;
                return Ok(());
            }
            // Perhaps too large: the exact count decides.
        }
        let mut a = self.holding()?.active.borrow_mut();
        let key = full_key(a.ids[slot], key);
        a.set_full(key, Some(Arc::from(value)))
    }

    /// Make the changes durable (per the durability level) and visible.
    /// With [`Durability::Immediate`], every earlier commit is durable and
    /// visible to new readers too when this returns, even if this
    /// transaction changed nothing.
    /// On an error before the record is handed to the journal, nothing
    /// happened; after (`CommitFailed`), the store stops accepting writes
    /// and reopening tells whether the commit is there.
    pub fn commit(mut self) -> Result<()> {
        let started = Instant::now();
        if self.active.get().is_none() && !self.blind.get_mut().is_empty() {
            let mut blind = std::mem::take(self.blind.get_mut());
            if let Some(committed) = self.shared.commit_direct(&mut blind, self.durability) {
                return committed;
            }
            return self.shared.commit_blind(blind, self.durability);
        }
        self.holding()?;
        let holding = self.active.take().expect("active");
        holding.active.into_inner().commit(self.durability, started)
    }

    /// Discard the changes (as dropping does).
    pub fn abort(self) {}
}

/// A table inside a write transaction. Several may be open at once: each
/// borrows the transaction, not exclusively.
pub struct TableMut<'t> {
    txn: &'t WriteTxn,
    /// The table's index among those the transaction opened.
    slot: usize,
}

impl std::fmt::Debug for TableMut<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("TableMut");
        match self.txn.active.get().map(|h| h.active.try_borrow()) {
            Some(Ok(a)) => d.field("id", &a.ids[self.slot]),
            _ => d.field("slot", &self.slot),
        };
        d.finish()
    }
}

impl<'t> TableMut<'t> {
    fn check_key(&self, key: &[u8]) -> Result<()> {
        let max = max_key_bytes(&self.txn.shared);
        if key.len() > max {
            return Err(DbError::KeyTooLong {
                len: key.len(),
                max,
            });
        }
        Ok(())
    }

    /// The transaction with the writer slot taken, and the table's id.
    fn id(&self) -> Result<(&'t Holding, u32)> {
        let h = self.txn.holding()?;
        let id = h.active.borrow().ids[self.slot];
        Ok((h, id))
    }

    /// Insert `key` with `value`, replacing any value it had.
    pub fn insert(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let (key, value) = (key.as_ref(), value.as_ref());
        self.check_key(key)?;
        let max = self.txn.max_value();
        if value.len() as u64 > max {
            return Err(DbError::ValueTooLong {
                len: value.len() as u64,
                max,
            });
        }
        self.txn.insert(self.slot, key, value)
    }

    /// The value of `key`, with this transaction's changes.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Value<'static>>> {
        self.check_key(key.as_ref())?;
        let (h, id) = self.id()?;
        let value = h.active.borrow().get_full(&full_key(id, key.as_ref()));
        value
    }

    /// Whether `key` is present, with this transaction's changes.
    pub fn contains_key(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        Ok(self.get(key)?.is_some())
    }

    /// Remove `key`; returns whether it was present.
    pub fn remove(&mut self, key: impl AsRef<[u8]>) -> Result<bool> {
        self.check_key(key.as_ref())?;
        let (h, id) = self.id()?;
        let removed = h
            .active
            .borrow_mut()
            .remove_full(full_key(id, key.as_ref()));
        removed
    }

    /// Scan from `s` to `e` (full keys of a table: `bounds` gives them).
    fn scan(&self, bounds: impl FnOnce(u32) -> (Bound<Vec<u8>>, Bound<Vec<u8>>)) -> Iter<'t> {
        match self.id() {
            Ok((h, id)) => {
                let (s, e) = bounds(id);
                h.iter_bounds(&self.txn.shared.cache, s, e)
            }
            Err(e) => Iter::failed(e),
        }
    }

    /// The entries with keys in `range` (see [`KeyRange`]), in key order,
    /// with this transaction's changes; `.rev()` for descending order. The
    /// scan borrows the transaction, not this handle: the table may be
    /// changed while it runs (it sees a change to a key it has not reached
    /// yet).
    pub fn range(&self, range: impl KeyRange) -> Iter<'t> {
        self.scan(|id| table_bounds(id, &range))
    }

    /// Every entry, in key order (see [`TableMut::range`]).
    pub fn iter(&self) -> Iter<'t> {
        self.range(..)
    }

    /// The entries whose keys start with `prefix`, in key order.
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Iter<'t> {
        self.scan(|id| prefix_bounds(id, prefix.as_ref()))
    }

    /// The entry with the smallest key, if any.
    pub fn first(&self) -> Result<Option<KeyValue>> {
        self.iter().next().transpose()
    }

    /// The entry with the largest key, if any.
    pub fn last(&self) -> Result<Option<KeyValue>> {
        self.iter().next_back().transpose()
    }

    /// How many entries the table holds, with this transaction's changes.
    /// O(n): it counts them (a scan of the whole table).
    pub fn len(&self) -> Result<u64> {
        count(self.iter())
    }

    /// Whether the table holds no entry (reads at most one).
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.first()?.is_none())
    }

    /// Remove every entry with a key in `range`; returns how many there
    /// were. All or nothing: on an error (the transaction's record would
    /// outgrow one journal record: `TransactionTooLarge`), none is
    /// removed. Each removal is a delete in the commit's record (7 bytes
    /// and the key), and the scan reads the values too: a range of many
    /// keys or large values costs what removing them one by one would.
    pub fn delete_range(&mut self, range: impl KeyRange) -> Result<u64> {
        self.remove_where(self.range(range), |_, _| Ok(true))
    }

    /// Keep only the entries for which `keep(key, value)` is true; returns
    /// how many were removed. All or nothing, as [`TableMut::delete_range`].
    pub fn retain(&mut self, keep: impl FnMut(&[u8], &[u8]) -> bool) -> Result<u64> {
        self.retain_in(.., keep)
    }

    /// [`TableMut::retain`] over the keys in `range` only.
    pub fn retain_in(
        &mut self,
        range: impl KeyRange,
        mut keep: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<u64> {
        self.remove_where(self.range(range), |k, v| Ok(!keep(k, v)))
    }

    /// Remove the entries of `scan` that `doomed` picks, all or nothing;
    /// how many. `doomed` sees every entry before any is removed.
    pub(super) fn remove_where(
        &mut self,
        scan: Iter<'t>,
        mut doomed: impl FnMut(&Key, &Value) -> Result<bool>,
    ) -> Result<u64> {
        let mut keys = Vec::new();
        for kv in scan {
            let (k, v) = kv?;
            if doomed(&k, &v)? {
                keys.push(k.full().to_vec());
            }
        }
        let (h, _) = self.id()?;
        let removed = h.active.borrow_mut().remove_all(keys);
        removed
    }
}
