//! SQLite (crate `rusqlite`, feature `bundled`: SQLite built from source).
//!
//! Durability: `PRAGMA journal_mode=WAL` and `PRAGMA synchronous=FULL`.
//! In WAL mode SQLite's documentation says FULL syncs the WAL at every
//! commit, so a commit is durable when it returns (NORMAL, the usual WAL
//! pairing, may lose the last commits on power loss). One table,
//! `kv (key BLOB PRIMARY KEY, value BLOB) WITHOUT ROWID` (a clustered
//! B-tree on the key, as SQLite advises for tables with a non-integer
//! primary key and small rows), prepared statements (`prepare_cached`).
//! Other settings are SQLite's defaults (automatic WAL checkpoints every
//! 1,000 pages, a 2 MiB page cache: reads past it come from the OS page
//! cache).
//!
//! Writes: SQLite runs one writer at a time ("there can only be one writer
//! at a time", its WAL documentation). All threads share one write
//! connection behind a mutex, held from `BEGIN IMMEDIATE` to `COMMIT`, so
//! that waiting writers queue on the mutex instead of contending for the
//! database's lock and sleeping in the busy handler (a connection per
//! thread). Each commit syncs the WAL on its own (no group commit).
//!
//! Reads: each thread has its own read-only connection (WAL readers run
//! beside the writer); a get is one `SELECT value FROM kv WHERE key = ?`
//! in autocommit mode, that is, in a read transaction of its own.

use std::path::Path;
use std::sync::Mutex;

use anyhow::{Context, Result};
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior};
use serde_json::json;

use super::{Engine, Put, Worker};

const INSERT: &str = "INSERT OR REPLACE INTO kv (key, value) VALUES (?1, ?2)";
const SELECT: &str = "SELECT value FROM kv WHERE key = ?1";

pub fn settings() -> serde_json::Value {
    json!({
        "durability": "PRAGMA journal_mode=WAL, PRAGMA synchronous=FULL (the WAL synced at each commit)",
        "schema": "CREATE TABLE kv (key BLOB PRIMARY KEY, value BLOB) WITHOUT ROWID",
        "sqlite_version": rusqlite::version(),
        "writes": "one write connection shared behind a mutex; BEGIN IMMEDIATE, prepared INSERT × B, COMMIT",
        "get": "a read-only connection per thread; prepared SELECT in autocommit (a read transaction per get)",
    })
}

pub struct SqliteEngine {
    file: std::path::PathBuf,
    writer: Mutex<Connection>,
}

fn pragmas(c: &Connection) -> Result<()> {
    c.busy_timeout(std::time::Duration::from_secs(30))?;
    let mode: String = c.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
    anyhow::ensure!(
        mode.eq_ignore_ascii_case("wal"),
        "SQLite refused WAL mode ({mode})"
    );
    c.execute_batch("PRAGMA synchronous=FULL")?;
    Ok(())
}

impl SqliteEngine {
    pub fn open(path: &Path, create: bool) -> Result<SqliteEngine> {
        if create {
            std::fs::create_dir_all(path)?;
        }
        let file = path.join("bench.sqlite");
        let flags = if create {
            OpenFlags::default()
        } else {
            OpenFlags::default() - OpenFlags::SQLITE_OPEN_CREATE
        };
        let c = Connection::open_with_flags(&file, flags)
            .with_context(|| format!("opening SQLite database {}", file.display()))?;
        pragmas(&c)?;
        if create {
            c.execute_batch(
                "CREATE TABLE IF NOT EXISTS kv (key BLOB PRIMARY KEY, value BLOB) WITHOUT ROWID",
            )?;
        }
        Ok(SqliteEngine {
            file,
            writer: Mutex::new(c),
        })
    }
}

impl Engine for SqliteEngine {
    fn worker(&self) -> Result<Box<dyn Worker + '_>> {
        let reader = Connection::open_with_flags(
            &self.file,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        reader.busy_timeout(std::time::Duration::from_secs(30))?;
        reader.prepare_cached(SELECT)?;
        Ok(Box::new(SqliteWorker { e: self, reader }))
    }

    fn close(self: Box<Self>) -> Result<()> {
        let c = self.writer.into_inner().unwrap_or_else(|p| p.into_inner());
        c.close().map_err(|(_, e)| e)?;
        Ok(())
    }
}

struct SqliteWorker<'a> {
    e: &'a SqliteEngine,
    reader: Connection,
}

impl Worker for SqliteWorker<'_> {
    fn commit(&mut self, puts: &[Put<'_>]) -> Result<()> {
        let mut c = self.e.writer.lock().unwrap_or_else(|p| p.into_inner());
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        {
            let mut stmt = tx.prepare_cached(INSERT)?;
            for (k, v) in puts {
                stmt.execute((&k[..], *v))?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    fn get(&mut self, key: &[u8; 16]) -> Result<Option<(usize, u8)>> {
        let mut stmt = self.reader.prepare_cached(SELECT)?;
        let got = stmt
            .query_row([&key[..]], |row| {
                let v = row.get_ref(0)?.as_blob().map_err(|e| {
                    rusqlite::Error::FromSqlConversionFailure(
                        0,
                        rusqlite::types::Type::Blob,
                        e.into(),
                    )
                })?;
                Ok((v.len(), v.last().copied().unwrap_or(0)))
            })
            .optional()?;
        Ok(got)
    }
}
