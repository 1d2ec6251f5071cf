//! redb, with its defaults.
//!
//! Durability: `Durability::Immediate`, redb's default: a commit is
//! persistent when `commit` returns (by default a one-phase commit: the
//! pages and a checksummed commit slot written, then one sync; two-phase
//! commit, which syncs twice, is opt-in). redb has one write transaction at a
//! time: `begin_write` blocks while another is open, so concurrent
//! committers queue, each commit synced on its own (no group commit).
//! Cache size and page size are redb's defaults.
//!
//! A transaction is `begin_write`, `open_table`, the inserts, `commit`. A
//! get is `begin_read`, `open_table`, `get`: a read transaction per get.

use std::path::Path;

use anyhow::{Context, Result};
use redb::{Database, ReadableDatabase, TableDefinition};
use serde_json::json;

use super::{touch, Engine, Put, Worker};

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("bench");

pub fn settings() -> serde_json::Value {
    json!({
        "durability": "Durability::Immediate (the default): persistent when commit returns",
        "options": "Database::create / Database::open defaults",
        "transaction": "begin_write, open_table, insert × B, commit",
        "get": "begin_read, open_table, get (a read transaction per get)",
    })
}

pub struct RedbEngine {
    db: Database,
}

impl RedbEngine {
    pub fn open(path: &Path, create: bool) -> Result<RedbEngine> {
        let file = path.join("bench.redb");
        let db = if create {
            std::fs::create_dir_all(path)?;
            let db = Database::create(&file)
                .with_context(|| format!("creating redb database {}", file.display()))?;
            let w = db.begin_write()?;
            w.open_table(TABLE)?;
            w.commit()?;
            db
        } else {
            Database::open(&file)
                .with_context(|| format!("opening redb database {}", file.display()))?
        };
        Ok(RedbEngine { db })
    }
}

impl Engine for RedbEngine {
    fn worker(&self) -> Result<Box<dyn Worker + '_>> {
        Ok(Box::new(RedbWorker { db: &self.db }))
    }

    fn close(self: Box<Self>) -> Result<()> {
        drop(self);
        Ok(())
    }
}

struct RedbWorker<'a> {
    db: &'a Database,
}

impl Worker for RedbWorker<'_> {
    fn commit(&mut self, puts: &[Put<'_>]) -> Result<()> {
        let w = self.db.begin_write()?;
        {
            let mut t = w.open_table(TABLE)?;
            for (k, v) in puts {
                t.insert(&k[..], *v)?;
            }
        }
        w.commit()?;
        Ok(())
    }

    fn get(&mut self, key: &[u8; 16]) -> Result<Option<(usize, u8)>> {
        let r = self.db.begin_read()?;
        let t = r.open_table(TABLE)?;
        Ok(t.get(&key[..])?.map(|v| touch(v.value())))
    }
}
