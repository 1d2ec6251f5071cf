//! RocksDB (crate `rocksdb`), one column family.
//!
//! Durability: `WriteOptions::set_sync(true)` on every write, so that the
//! write-ahead log is synced before `write` returns — RocksDB's documented
//! way to make a write durable (its default, sync = false, survives a
//! process crash but not a machine crash). Concurrent synced writers are
//! grouped by RocksDB's own write group (one WAL sync for the group).
//!
//! Otherwise the options of RocksDB's "Setup Options and Basic Tuning"
//! guide: background jobs scaled to the CPUs (`increase_parallelism`),
//! `bytes_per_sync` 1 MiB, 16 KiB blocks, index and filter blocks in the
//! block cache with L0's pinned, and a 10-bit Bloom filter (the guide's
//! advice for workloads with point lookups). Block cache, memtable and
//! compaction settings are RocksDB's defaults.
//!
//! A transaction is a `WriteBatch` of its puts written with `write_opt`.
//! A get is `get_pinned`: RocksDB reads one key at an implicit snapshot of
//! the newest state, its read-your-own-key transaction.

use std::path::Path;

use anyhow::{Context, Result};
use rocksdb::{BlockBasedOptions, Options, WriteBatch, WriteOptions, DB};
use serde_json::json;

use super::{touch, Engine, Put, Worker};

pub fn settings() -> serde_json::Value {
    json!({
        "durability": "WriteOptions::set_sync(true): the WAL is synced before write returns",
        "options": "increase_parallelism(CPUs), bytes_per_sync 1 MiB, block_size 16 KiB, \
                    cache_index_and_filter_blocks + pin_l0, Bloom filter 10 bits/key; \
                    the rest RocksDB's defaults",
        "transaction": "a WriteBatch of the puts, write_opt(sync)",
        "get": "get_pinned (an implicit snapshot per get)",
    })
}

fn options(create: bool) -> Options {
    let mut o = Options::default();
    o.create_if_missing(create);
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    o.increase_parallelism(cpus as i32);
    o.set_bytes_per_sync(1 << 20);
    let mut t = BlockBasedOptions::default();
    t.set_block_size(16 << 10);
    t.set_cache_index_and_filter_blocks(true);
    t.set_pin_l0_filter_and_index_blocks_in_cache(true);
    t.set_bloom_filter(10.0, false);
    o.set_block_based_table_factory(&t);
    o
}

pub struct RocksEngine {
    db: DB,
    sync: WriteOptions,
}

impl RocksEngine {
    pub fn open(path: &Path, create: bool) -> Result<RocksEngine> {
        let db = DB::open(&options(create), path)
            .with_context(|| format!("opening RocksDB in {}", path.display()))?;
        let mut sync = WriteOptions::default();
        sync.set_sync(true);
        Ok(RocksEngine { db, sync })
    }
}

impl Engine for RocksEngine {
    fn worker(&self) -> Result<Box<dyn Worker + '_>> {
        Ok(Box::new(RocksWorker { e: self }))
    }

    fn close(self: Box<Self>) -> Result<()> {
        // Every write was synced; dropping the DB waits for background
        // work and closes it.
        drop(self);
        Ok(())
    }
}

struct RocksWorker<'a> {
    e: &'a RocksEngine,
}

impl Worker for RocksWorker<'_> {
    fn commit(&mut self, puts: &[Put<'_>]) -> Result<()> {
        let mut batch = WriteBatch::default();
        for (k, v) in puts {
            batch.put(k, v);
        }
        self.e.db.write_opt(batch, &self.e.sync)?;
        Ok(())
    }

    fn get(&mut self, key: &[u8; 16]) -> Result<Option<(usize, u8)>> {
        Ok(self.e.db.get_pinned(key)?.map(|v| touch(&v)))
    }
}
