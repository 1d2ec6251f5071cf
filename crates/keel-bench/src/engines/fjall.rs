//! fjall (an LSM-tree in Rust), one keyspace.
//!
//! Durability: by default fjall's write batches only reach the operating
//! system's buffers (its builder's documentation: batches "automatically
//! flush data to the operating system", not to the disk); a batch made with `.durability(Some(PersistMode::SyncAll))` syncs the
//! journal (fsync) before `commit` returns — the mode fjall documents as
//! the strongest guarantee. (`--fjall-sync data` uses `SyncData`, an
//! fdatasync, as the protocol's reference figures did.) The journal sync
//! happens under fjall's journal writer lock: concurrent committers queue,
//! each commit synced on its own. Other settings are fjall's defaults
//! (cache, worker threads, LZ4 block compression).
//!
//! A transaction is a `WriteBatch` of its puts, committed. A get is
//! `Keyspace::get`: a point read of the newest state (an implicit
//! snapshot per get).

use std::path::Path;

use anyhow::{Context, Result};
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use serde_json::json;

use super::{touch, Engine, Put, Worker};

/// The sync each commit asks for (`--fjall-sync`): set once at start.
static SYNC_DATA: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub fn set_sync_data(data: bool) {
    SYNC_DATA.store(data, std::sync::atomic::Ordering::Relaxed);
}

fn mode() -> PersistMode {
    if SYNC_DATA.load(std::sync::atomic::Ordering::Relaxed) {
        PersistMode::SyncData
    } else {
        PersistMode::SyncAll
    }
}

pub fn settings() -> serde_json::Value {
    json!({
        "durability": format!("each WriteBatch committed with durability(Some(PersistMode::{:?}))", mode()),
        "options": "Database::builder(path).open() defaults; keyspace with KeyspaceCreateOptions::default",
        "transaction": "db.batch(), insert × B, commit",
        "get": "Keyspace::get (an implicit snapshot per get)",
    })
}

pub struct FjallEngine {
    db: Database,
    ks: Keyspace,
}

impl FjallEngine {
    pub fn open(path: &Path, _create: bool) -> Result<FjallEngine> {
        let db = Database::builder(path)
            .open()
            .with_context(|| format!("opening fjall in {}", path.display()))?;
        let ks = db.keyspace("bench", KeyspaceCreateOptions::default)?;
        Ok(FjallEngine { db, ks })
    }
}

impl Engine for FjallEngine {
    fn worker(&self) -> Result<Box<dyn Worker + '_>> {
        Ok(Box::new(FjallWorker { e: self }))
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.db.persist(mode())?;
        drop(self);
        Ok(())
    }
}

struct FjallWorker<'a> {
    e: &'a FjallEngine,
}

impl Worker for FjallWorker<'_> {
    fn commit(&mut self, puts: &[Put<'_>]) -> Result<()> {
        let mut b = self.e.db.batch().durability(Some(mode()));
        for (k, v) in puts {
            b.insert(&self.e.ks, &k[..], *v);
        }
        b.commit()?;
        Ok(())
    }

    fn get(&mut self, key: &[u8; 16]) -> Result<Option<(usize, u8)>> {
        Ok(self.e.ks.get(key)?.map(|v| touch(&v)))
    }
}
