//! `keel db …`: use a store by hand — create it, put, get, delete and scan
//! keys, list its tables, print its statistics, check it for damage and
//! salvage what a damaged one holds into a new store.
//!
//! Every command but `create` opens an existing store, which recovers it
//! (replays the journal past the last checkpoint) and takes its lock. A
//! store another process has open is read by the reading commands as a
//! live snapshot (`live`), and refused by the others. `put` and `del`
//! commit durably and close the store, which checkpoints it; the reading
//! commands only drop it, leaving the files as recovery left them.
//!
//! The modules: `args` (the command line), `bytes` (keys and values as
//! text or hex), `failure` (errors to messages and exit codes), `live`
//! (reading a store in use, snapshot by snapshot), `data`
//! (create, put, get, del, scan, tables), `stats`, `check`, `salvage`,
//! `dump` and `load` (JSON lines), `backup`, `compact` and `swap` (its
//! crash-safe switch of directories), and `progress` (stderr spinners).

mod args;
mod backup;
mod bytes;
mod check;
mod compact;
mod data;
mod dump;
mod failure;
mod live;
mod load;
mod progress;
mod salvage;
mod stats;
mod swap;

#[cfg(test)]
mod tests;

use std::path::Path;
use std::process::ExitCode;

use keel::db::Database;
use serde::Serialize;

pub use args::DbCommand;
use failure::{Failure, Kind};

use crate::out::StdoutError;

pub fn run(cmd: DbCommand) -> anyhow::Result<ExitCode> {
    let json = cmd.json();
    let result = match cmd {
        DbCommand::Create(a) => data::create(a),
        DbCommand::Put(a) => data::put(a),
        DbCommand::Get(a) => data::get(a),
        DbCommand::Del(a) => data::del(a),
        DbCommand::Scan(a) => data::scan(a),
        DbCommand::Tables(a) => data::tables(a),
        DbCommand::Stats(a) => stats::run(a),
        DbCommand::Check(a) => check::run(a),
        DbCommand::Salvage(a) => salvage::run(a),
        DbCommand::Dump(a) => dump::run(a),
        DbCommand::Load(a) => load::run(a),
        DbCommand::Backup(a) => backup::run(a),
        DbCommand::Compact(a) => compact::run(a),
    };
    match result {
        Ok(code) => Ok(code),
        // `main` ends every command this way.
        Err(f) if f.kind == Kind::StdoutClosed => Err(StdoutError::Closed.into()),
        Err(f) => {
            // Where stdout fails for another reason, the message below
            // still says why, and the exit code is the failure's.
            if json {
                if let Err(StdoutError::Closed) = outln!("{}", serde_json::to_string(&f.json())?) {
                    return Err(StdoutError::Closed.into());
                }
            }
            let label = match f.kind {
                Kind::Absent => "not found",
                _ => "error",
            };
            errln!("{label}: {}", f.message);
            Ok(ExitCode::from(f.code))
        }
    }
}

/// Open the existing store at `store` for one command. No background
/// checkpointer: `put` and `del` checkpoint when they close the store, and
/// the reading commands never need to.
fn open(store: &Path) -> Result<Database, Failure> {
    failure::check_store_dir(store)?;
    Database::builder()
        .background_checkpoints(false)
        .open(store)
        .map_err(|e| Failure::from_db(e, store))
}

/// Print `value` as one JSON object on stdout.
fn print_json(value: &impl Serialize) -> Result<(), Failure> {
    let text = serde_json::to_string(value).map_err(|e| Failure::internal(e.to_string()))?;
    Ok(outln!("{text}")?)
}
