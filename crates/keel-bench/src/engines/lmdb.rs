//! LMDB (crate `heed`, which builds LMDB from source).
//!
//! Durability: LMDB's default flags (no `NO_SYNC`, `NO_META_SYNC`,
//! `MAP_ASYNC`): a commit writes its dirty pages, syncs them, writes the
//! meta page and syncs again before `mdb_txn_commit` returns — durable, as
//! LMDB's documentation says of the defaults. The map is 16 GiB (LMDB
//! advises a map size larger than the data will ever grow; it is address
//! space, not disk). Readers use LMDB's default thread-local reader slots.
//! LMDB has one writer at a time: concurrent committers queue on its
//! writer mutex, each commit synced on its own (no group commit).
//!
//! A transaction is a write transaction with the puts, committed. A get
//! is `read_txn` + `get`: a read transaction per get (LMDB's read
//! transactions are cheap; `mdb_txn_reset`/`renew` would save a little,
//! but each get here takes the path of a program doing one lookup, as for
//! every engine).

use std::path::Path;

use anyhow::{anyhow, Context, Result};
use heed::types::Bytes;
use heed::{Database, Env, EnvOpenOptions};
use serde_json::json;

use super::{touch, Engine, Put, Worker};

const MAP_BYTES: usize = 16 << 30;

pub fn settings() -> serde_json::Value {
    json!({
        "durability": "default flags (synced commit: data pages, then meta page, each fdatasync)",
        "map_size_bytes": MAP_BYTES,
        "transaction": "write_txn, put × B, commit",
        "get": "read_txn, get (a read transaction per get)",
    })
}

pub struct LmdbEngine {
    env: Env,
    db: Database<Bytes, Bytes>,
}

impl LmdbEngine {
    pub fn open(path: &Path, create: bool) -> Result<LmdbEngine> {
        if create {
            std::fs::create_dir_all(path)?;
        }
        // SAFETY: the environment is opened once in this process and no
        // other process touches its files; nothing modifies them outside
        // LMDB while it is open.
        let env = unsafe { EnvOpenOptions::new().map_size(MAP_BYTES).open(path) }
            .with_context(|| format!("opening an LMDB environment in {}", path.display()))?;
        let db = if create {
            let mut w = env.write_txn()?;
            let db = env.create_database::<Bytes, Bytes>(&mut w, None)?;
            w.commit()?;
            db
        } else {
            let r = env.read_txn()?;
            let db = env
                .open_database::<Bytes, Bytes>(&r, None)?
                .ok_or_else(|| anyhow!("the LMDB environment has no main database"))?;
            r.commit()?;
            db
        };
        Ok(LmdbEngine { env, db })
    }
}

impl Engine for LmdbEngine {
    fn worker(&self) -> Result<Box<dyn Worker + '_>> {
        Ok(Box::new(LmdbWorker { e: self }))
    }

    fn close(self: Box<Self>) -> Result<()> {
        let LmdbEngine { env, .. } = *self;
        env.prepare_for_closing().wait();
        Ok(())
    }
}

struct LmdbWorker<'a> {
    e: &'a LmdbEngine,
}

impl Worker for LmdbWorker<'_> {
    fn commit(&mut self, puts: &[Put<'_>]) -> Result<()> {
        let mut w = self.e.env.write_txn()?;
        for (k, v) in puts {
            self.e.db.put(&mut w, k, v)?;
        }
        w.commit()?;
        Ok(())
    }

    fn get(&mut self, key: &[u8; 16]) -> Result<Option<(usize, u8)>> {
        let r = self.e.env.read_txn()?;
        Ok(self.e.db.get(&r, key)?.map(touch))
    }
}
