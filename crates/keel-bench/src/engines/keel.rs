//! Keel's store, `keel::db::Database` with its default options: a commit
//! returns once its journal record is durable (`Durability::Immediate`,
//! the default); checkpoints write the data file in the background. The
//! store is made with `Database::create` and nothing else: no journal
//! segments prepared beyond what opening does.
//!
//! A transaction is what `keel bench store` runs: `begin_write`,
//! `open_table("bench")`, the puts, `commit`. Concurrent committers'
//! transactions are committed together by the store (group commit), as a
//! program gets by default. A get is `begin_read`, `open_table`, `get`,
//! in a read transaction of its own.

use std::path::Path;

use anyhow::{anyhow, Context, Result};
use keel::db::Database;
use serde_json::json;

use super::{touch, Engine, Put, Worker};

const TABLE: &str = "bench";

pub fn settings() -> serde_json::Value {
    let o = keel::db::Options::default();
    json!({
        "options": "defaults (Database::create / Database::open)",
        "durability": "Durability::Immediate (default): commit returns once the journal record is durable",
        "cache_bytes": o.cache_bytes,
        "checkpoint_dirty_bytes": o.checkpoint_dirty_bytes,
        "table": TABLE,
        "transaction": "begin_write, open_table, insert × B, commit",
        "get": "begin_read, open_table, get (a read transaction per get)",
    })
}

pub struct KeelEngine {
    db: Database,
}

impl KeelEngine {
    pub fn open(path: &Path, create: bool) -> Result<KeelEngine> {
        let db = if create {
            Database::create(path)
        } else {
            Database::open(path)
        }
        .with_context(|| format!("opening a keel store in {}", path.display()))?;
        if create {
            let txn = db.begin_write()?;
            txn.open_table(TABLE)?;
            txn.commit()?;
        }
        Ok(KeelEngine { db })
    }
}

impl Engine for KeelEngine {
    fn worker(&self) -> Result<Box<dyn Worker + '_>> {
        Ok(Box::new(KeelWorker { db: &self.db }))
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.db
            .close()
            .map_err(|e| anyhow!("closing the keel store: {e}"))
    }
}

struct KeelWorker<'a> {
    db: &'a Database,
}

impl Worker for KeelWorker<'_> {
    fn commit(&mut self, puts: &[Put<'_>]) -> Result<()> {
        let txn = self.db.begin_write()?;
        {
            let mut table = txn.open_table(TABLE)?;
            for (k, v) in puts {
                table.insert(k, v)?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    fn get(&mut self, key: &[u8; 16]) -> Result<Option<(usize, u8)>> {
        let read = self.db.begin_read();
        let table = read.open_table(TABLE)?;
        Ok(table.get(key)?.map(|v| touch(&v)))
    }
}
