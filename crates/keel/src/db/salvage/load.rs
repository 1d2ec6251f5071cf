//! Writing the new store through the public API: the merged entries, in
//! key order, in bounded transactions. The catalog's entries come first
//! (table 0 sorts first): once the first key of another table arrives,
//! every table the catalog names is created, so empty tables survive
//! too. A table whose keys arrive without a usable name gets a made-up
//! one.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::super::error::Result;
use super::super::read::{check_name, CATALOG, PREFIX, TYPES};
use super::super::record::PUT_FIXED_BYTES;
use super::super::{Database, WriteTxn};
use super::report::{table_id, RenamedTable};

/// Bytes a table's first use in a transaction may add to its record (the
/// catalog's entries, should the table need creating), beside its name.
const TABLE_RECORD_BYTES: usize = 2 * (PUT_FIXED_BYTES + PREFIX + 4);

/// What a [`Loader`] wrote.
pub(super) struct Loaded {
    /// Entries written (the catalog's not counted).
    pub entries: u64,
    /// Tables created.
    pub tables: u64,
    pub renamed: Vec<RenamedTable>,
    pub ignored_keys: u64,
    /// The old store's table names by id, as its catalog gave them.
    pub table_names: BTreeMap<u32, String>,
}

/// The new store being filled.
pub(super) struct Loader<'d> {
    db: &'d Database,
    /// The catalog's entries (name, value), held until the first key of
    /// another table.
    catalog: Vec<(Vec<u8>, Vec<u8>)>,
    catalog_done: bool,
    /// Old table id to the name it has in the new store.
    names: HashMap<u32, String>,
    used_names: HashSet<String>,
    txn: Option<WriteTxn>,
    /// Tables (old ids) the open transaction has used.
    txn_tables: HashSet<u32>,
    txn_entries: usize,
    txn_bytes: usize,
    max_entries: usize,
    max_bytes: usize,
    bytes_since_checkpoint: usize,
    /// Entries written so far.
    pub entries: u64,
    tables: u64,
    renamed: Vec<RenamedTable>,
    ignored_keys: u64,
    table_names: BTreeMap<u32, String>,
}

impl<'d> Loader<'d> {
    /// A loader committing at most `max_entries` entries and about
    /// `max_bytes` of record bytes per transaction (never more than the
    /// new store's journal takes in one record).
    pub(super) fn new(db: &'d Database, max_entries: usize, max_bytes: usize) -> Loader<'d> {
        let limit = db.limits().max_transaction_bytes;
        Loader {
            db,
            catalog: Vec::new(),
            catalog_done: false,
            names: HashMap::new(),
            used_names: HashSet::new(),
            txn: None,
            txn_tables: HashSet::new(),
            txn_entries: 0,
            txn_bytes: 0,
            max_entries: max_entries.max(1),
            max_bytes: max_bytes.min(limit).max(1),
            bytes_since_checkpoint: 0,
            entries: 0,
            tables: 0,
            renamed: Vec::new(),
            ignored_keys: 0,
            table_names: BTreeMap::new(),
        }
    }

    /// Write the entry under full key `full` (table id, then key).
    pub(super) fn put(&mut self, full: &[u8], value: &[u8]) -> Result<()> {
        let Some(id) = table_id(full) else {
            self.ignored_keys += 1;
            return Ok(());
        };
        if id == CATALOG {
            // In key order the catalog comes before every table.
            debug_assert!(!self.catalog_done, "a catalog key after a table's");
            self.catalog.push((full[PREFIX..].to_vec(), value.to_vec()));
            return Ok(());
        }
        if id == TYPES {
            // Typed tables' types, by the old ids: not carried over (the
            // new store's tables are untyped until a typed open in a
            // write transaction records them again).
            return Ok(());
        }
        if !self.catalog_done {
            self.create_tables()?;
        }
        let name = self.name_of(id)?;
        self.insert(id, &name, &full[PREFIX..], value)
    }

    /// Commit what is left; what was written.
    pub(super) fn finish(mut self) -> Result<Loaded> {
        if !self.catalog_done {
            self.create_tables()?;
        }
        self.commit()?;
        Ok(Loaded {
            entries: self.entries,
            tables: self.tables,
            renamed: self.renamed,
            ignored_keys: self.ignored_keys,
            table_names: self.table_names,
        })
    }

    /// Create every table the catalog names. A name that is not a valid
    /// table name, or an id named twice, is left for `name_of`.
    fn create_tables(&mut self) -> Result<()> {
        self.catalog_done = true;
        for (name, value) in std::mem::take(&mut self.catalog) {
            if name.is_empty() {
                continue; // the next id to give: the new store keeps its own
            }
            let Ok(id) = <[u8; PREFIX]>::try_from(&value[..]).map(u32::from_be_bytes) else {
                self.ignored_keys += 1;
                continue;
            };
            let Ok(name) = String::from_utf8(name) else {
                continue;
            };
            if id == CATALOG || check_name(&name).is_err() || self.names.contains_key(&id) {
                continue;
            }
            self.table_names.insert(id, name.clone());
            self.new_table(id, name)?;
        }
        Ok(())
    }

    /// The new store's name for old table `id`: its catalog name, or, for
    /// a table the catalog does not name, a made-up one (created now).
    fn name_of(&mut self, id: u32) -> Result<String> {
        if let Some(name) = self.names.get(&id) {
            return Ok(name.clone());
        }
        let base = format!("salvaged-table-{id}");
        let name = (1..)
            .map(|n| match n {
                1 => base.clone(),
                n => format!("{base}-{n}"),
            })
            .find(|n| !self.used_names.contains(n))
            .expect("some name is free");
        self.renamed.push(RenamedTable {
            id,
            name: name.clone(),
        });
        self.new_table(id, name.clone())?;
        Ok(name)
    }

    fn new_table(&mut self, id: u32, name: String) -> Result<()> {
        self.make_room(TABLE_RECORD_BYTES + name.len())?;
        let txn = self.txn()?;
        txn.open_table(&name)?;
        self.txn_tables.insert(id);
        self.txn_bytes += TABLE_RECORD_BYTES + name.len();
        self.used_names.insert(name.clone());
        self.names.insert(id, name);
        self.tables += 1;
        Ok(())
    }

    fn insert(&mut self, id: u32, name: &str, key: &[u8], value: &[u8]) -> Result<()> {
        let put = PUT_FIXED_BYTES + PREFIX + key.len() + value.len();
        let table = TABLE_RECORD_BYTES + name.len();
        let first_use = !self.txn_tables.contains(&id);
        self.make_room(put + if first_use { table } else { 0 })?;
        // A commit to make room starts a transaction the table is new to.
        let cost = put + if self.txn_tables.insert(id) { table } else { 0 };
        self.txn()?.open_table(name)?.insert(key, value)?;
        self.txn_bytes += cost;
        self.txn_entries += 1;
        self.entries += 1;
        Ok(())
    }

    /// Commit the open transaction first if `bytes` more would take it
    /// past its bounds (a lone entry larger than the bound goes alone).
    fn make_room(&mut self, bytes: usize) -> Result<()> {
        let full = self.txn_entries >= self.max_entries || self.txn_bytes + bytes > self.max_bytes;
        if self.txn.is_some() && full {
            self.commit()?;
        }
        Ok(())
    }

    fn txn(&mut self) -> Result<&mut WriteTxn> {
        if self.txn.is_none() {
            self.txn = Some(self.db.begin_write()?);
        }
        Ok(self.txn.as_mut().expect("set above"))
    }

    /// Commit the open transaction; checkpoint once about a
    /// transaction's bound of bytes is committed since the last, so that
    /// the new store's memory stays bounded (its background checkpoints
    /// are off).
    fn commit(&mut self) -> Result<()> {
        if let Some(txn) = self.txn.take() {
            txn.commit()?;
        }
        self.bytes_since_checkpoint += self.txn_bytes;
        self.txn_tables.clear();
        self.txn_entries = 0;
        self.txn_bytes = 0;
        if self.bytes_since_checkpoint >= self.max_bytes {
            self.db.checkpoint()?;
            self.bytes_since_checkpoint = 0;
        }
        Ok(())
    }
}
