//! The engines, behind one interface: open a store in a directory, make a
//! handle per thread, commit transactions of puts, get keys, close.
//!
//! Every engine is configured so that a commit is durable when the commit
//! call returns, and otherwise as its own documentation recommends; each
//! module says how and why. Reads are the same for all: **each get in a
//! read transaction (or snapshot) of its own**, as the protocol's r1 asks —
//! the read path a program takes for one lookup.

use std::path::Path;

use anyhow::Result;
use clap::ValueEnum;

mod fjall;
mod keel;
mod lmdb;
mod redb;
mod rocksdb;
mod sqlite;

/// One put: a 16-byte key and its value.
pub type Put<'a> = ([u8; 16], &'a [u8]);

/// An open store.
pub trait Engine: Sync {
    /// A handle for one thread, made on that thread before the timed
    /// region starts (SQLite needs a connection per reading thread).
    fn worker(&self) -> Result<Box<dyn Worker + '_>>;

    /// Close the store as a program would when it is done with it.
    fn close(self: Box<Self>) -> Result<()>;
}

/// One thread's handle on an open store.
pub trait Worker {
    /// One transaction of `puts`, durable when this returns.
    fn commit(&mut self, puts: &[Put<'_>]) -> Result<()>;

    /// Get `key` in a read transaction of its own: the value's length and
    /// its last byte (every get touches its value), or `None` if absent.
    fn get(&mut self, key: &[u8; 16]) -> Result<Option<(usize, u8)>>;
}

/// The engines this binary can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ValueEnum)]
pub enum Kind {
    /// Keel's store (`keel::db::Database`), default options.
    Keel,
    /// RocksDB (crate `rocksdb`), WriteOptions sync = true.
    Rocksdb,
    /// LMDB (crate `heed`), default (durable) sync flags.
    Lmdb,
    /// SQLite (crate `rusqlite`, bundled), WAL and synchronous = FULL.
    Sqlite,
    /// redb, Durability::Immediate (its default).
    Redb,
    /// fjall, each write batch persisted with PersistMode::SyncAll.
    Fjall,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::Keel,
        Kind::Rocksdb,
        Kind::Lmdb,
        Kind::Sqlite,
        Kind::Redb,
        Kind::Fjall,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Keel => "keel",
            Kind::Rocksdb => "rocksdb",
            Kind::Lmdb => "lmdb",
            Kind::Sqlite => "sqlite",
            Kind::Redb => "redb",
            Kind::Fjall => "fjall",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Open (with `create`: create) the store at `path` (a path inside
    /// the run's directory, which the engine may make a directory or a
    /// file of).
    pub fn open(self, path: &Path, create: bool) -> Result<Box<dyn Engine>> {
        Ok(match self {
            Kind::Keel => Box::new(keel::KeelEngine::open(path, create)?),
            Kind::Rocksdb => Box::new(rocksdb::RocksEngine::open(path, create)?),
            Kind::Lmdb => Box::new(lmdb::LmdbEngine::open(path, create)?),
            Kind::Sqlite => Box::new(sqlite::SqliteEngine::open(path, create)?),
            Kind::Redb => Box::new(redb::RedbEngine::open(path, create)?),
            Kind::Fjall => Box::new(fjall::FjallEngine::open(path, create)?),
        })
    }

    /// How the engine is configured, for a run's `info`.
    pub fn settings(self) -> serde_json::Value {
        match self {
            Kind::Keel => keel::settings(),
            Kind::Rocksdb => rocksdb::settings(),
            Kind::Lmdb => lmdb::settings(),
            Kind::Sqlite => sqlite::settings(),
            Kind::Redb => redb::settings(),
            Kind::Fjall => fjall::settings(),
        }
    }
}

/// fjall's sync at each commit (`--fjall-sync`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FjallSync {
    /// `PersistMode::SyncAll` (fsync).
    All,
    /// `PersistMode::SyncData` (fdatasync).
    Data,
}

impl FjallSync {
    pub fn name(self) -> &'static str {
        match self {
            FjallSync::All => "all",
            FjallSync::Data => "data",
        }
    }

    /// Make every fjall commit of this process use this sync.
    pub fn apply(self) {
        fjall::set_sync_data(self == FjallSync::Data);
    }
}

/// The value's length and last byte.
fn touch(v: &[u8]) -> (usize, u8) {
    (v.len(), v.last().copied().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every engine: a transaction's puts are found by gets (value length
    /// and last byte), a missing key is not, and both hold after a close
    /// and an open (what r1 does between its load and its reads).
    #[test]
    fn every_engine_reads_what_it_committed_across_a_reopen() {
        for kind in Kind::ALL {
            let dir = std::env::temp_dir().join(format!(
                "keel-bench-test-{}-{}",
                std::process::id(),
                kind.name()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            let path = dir.join(kind.name());
            let (a, b) = ([1u8; 16], [2u8; 16]);
            let v1 = [7u8; 100];
            let mut v2 = vec![0u8; 300];
            v2[299] = 9;
            let e = kind.open(&path, true).unwrap();
            {
                let mut w = e.worker().unwrap();
                w.commit(&[(a, &v1[..]), (b, &v2[..])]).unwrap();
                assert_eq!(w.get(&a).unwrap(), Some((100, 7)), "{kind:?}");
                assert_eq!(w.get(&b).unwrap(), Some((300, 9)), "{kind:?}");
            }
            e.close().unwrap();
            let e = kind.open(&path, false).unwrap();
            {
                let mut w = e.worker().unwrap();
                assert_eq!(w.get(&a).unwrap(), Some((100, 7)), "{kind:?} reopened");
                assert_eq!(w.get(&b).unwrap(), Some((300, 9)), "{kind:?} reopened");
                assert_eq!(w.get(&[3u8; 16]).unwrap(), None, "{kind:?}");
            }
            e.close().unwrap();
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}
