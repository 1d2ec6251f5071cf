//! `keel db dump STORE`: every table and entry as JSON lines, from one read
//! transaction (a consistent snapshot). The format is docs/cli-db.md's,
//! "dump and load"; `load.rs` reads it back.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use keel::db::ReadTxn;
use serde::Serialize;

use super::args::DumpArgs;
use super::bytes::{Encoding, Shown};
use super::failure::{Failure, Kind};
use super::print_json;
use super::progress::Progress;
use crate::out::Stdout;

/// A table's first line: `load` creates it even when no entry follows.
#[derive(Serialize)]
pub struct CreateLine<'a> {
    pub table: &'a str,
    pub create: bool,
}

/// An entry's line.
#[derive(Serialize)]
pub struct EntryLine<'a> {
    pub table: &'a str,
    pub key: Shown,
    pub value: Shown,
}

/// The last line: what came before it, so `load` can tell a whole dump
/// from one cut short.
#[derive(Serialize)]
pub struct EndLine {
    pub end: bool,
    pub tables: u64,
    pub entries: u64,
    pub lsn: u64,
}

/// What `--json` prints (with `--out FILE`).
#[derive(Serialize)]
struct Dumped {
    store: String,
    out: String,
    lsn: u64,
    tables: u64,
    entries: u64,
    bytes: u64,
}

/// Update the progress every this many entries.
const PROGRESS_STEP: u64 = 1024;

pub fn run(a: DumpArgs) -> Result<ExitCode, Failure> {
    let to_stdout = a.file == Path::new("-");
    if to_stdout && a.out.json {
        return Err(Failure::bad_input(
            "--json prints the summary on stdout, where the dump goes: give --out FILE",
        ));
    }
    // A dump streams as it reads: a live snapshot, which a read may find
    // grown old half way, is not taken.
    let db = super::backup::open_source(
        &a.store,
        "dump",
        "Stop the process that has it open, or back it up (`keel db backup` copies a snapshot \
         of a store in use) and dump the copy.",
        false,
    )?;
    let read = db.begin_read();
    let tables = chosen_tables(&read, &a.table, &a.store)?;
    let mut sink = if to_stdout {
        Sink::Stdout(Stdout::buffered())
    } else {
        Sink::file(&a.file)?
    };
    let progress = Progress::new("dumping");
    let counts = match write_dump(&read, &tables, &mut sink, &progress, &a.store) {
        Ok(c) => sink.finish().map(|()| c),
        Err(f) => {
            sink.abandon();
            Err(f)
        }
    }?;
    progress.clear();
    let summary = Dumped {
        store: a.store.display().to_string(),
        out: a.file.display().to_string(),
        lsn: read.lsn(),
        tables: tables.len() as u64,
        entries: counts.entries,
        bytes: counts.bytes,
    };
    if a.out.json {
        print_json(&summary)?;
    } else {
        let line = format!(
            "dumped {} entries in {} tables of store {} (lsn {}) to {}",
            summary.entries,
            summary.tables,
            summary.store,
            summary.lsn,
            if to_stdout { "stdout" } else { &summary.out }
        );
        // The summary goes where the dump does not.
        if to_stdout {
            errln!("{line}");
        } else {
            outln!("{line}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The tables to dump, sorted: those named (each must exist), or all.
fn chosen_tables(read: &ReadTxn, named: &[String], store: &Path) -> Result<Vec<String>, Failure> {
    let all = read.list_tables().map_err(|e| Failure::from_db(e, store))?;
    if named.is_empty() {
        return Ok(all);
    }
    let mut chosen: Vec<String> = named.to_vec();
    chosen.sort();
    chosen.dedup();
    if let Some(missing) = chosen.iter().find(|t| !all.contains(t)) {
        let have = if all.is_empty() {
            "the store has no tables".to_string()
        } else {
            format!("its tables: {}", all.join(", "))
        };
        return Err(Failure::new(
            Kind::Absent,
            format!("no table named {missing:?} ({have}); nothing was dumped"),
        ));
    }
    Ok(chosen)
}

struct Counts {
    entries: u64,
    /// Bytes of the dump written.
    bytes: u64,
}

/// Lines, serialized into one reused buffer and written to the sink.
struct Lines<'s> {
    sink: &'s mut Sink,
    buf: Vec<u8>,
    bytes: u64,
}

impl Lines<'_> {
    fn put(&mut self, line: &impl Serialize) -> Result<(), Failure> {
        self.buf.clear();
        serde_json::to_writer(&mut self.buf, line).map_err(|e| Failure::internal(e.to_string()))?;
        self.buf.push(b'\n');
        self.bytes += self.buf.len() as u64;
        self.sink.write(&self.buf)
    }
}

fn write_dump(
    read: &ReadTxn,
    tables: &[String],
    sink: &mut Sink,
    progress: &Progress,
    store: &Path,
) -> Result<Counts, Failure> {
    let fail = |e| Failure::from_db(e, store);
    let mut lines = Lines {
        sink,
        buf: Vec::with_capacity(4096),
        bytes: 0,
    };
    let mut entries = 0u64;
    for name in tables {
        let t = read.open_table(name).map_err(fail)?;
        lines.put(&CreateLine {
            table: name,
            create: true,
        })?;
        for kv in t.iter() {
            let kv = kv.map_err(fail)?;
            lines.put(&EntryLine {
                table: name,
                key: Encoding::Text.json(kv.0.as_bytes()),
                value: Encoding::Text.json(kv.1.as_bytes()),
            })?;
            entries += 1;
            if entries % PROGRESS_STEP == 0 {
                progress.set(entries);
            }
        }
    }
    lines.put(&EndLine {
        end: true,
        tables: tables.len() as u64,
        entries,
        lsn: read.lsn(),
    })?;
    Ok(Counts {
        entries,
        bytes: lines.bytes,
    })
}

/// Where the dump goes: stdout, or a temporary file beside FILE that
/// replaces it once whole (so FILE is never left half written).
enum Sink {
    Stdout(Stdout),
    File {
        out: BufWriter<File>,
        temp: PathBuf,
        path: PathBuf,
    },
}

impl Sink {
    fn file(path: &Path) -> Result<Sink, Failure> {
        let name = path
            .file_name()
            .ok_or_else(|| Failure::bad_input(format!("--out {}: not a file", path.display())))?;
        let temp = path.with_file_name(format!(
            ".{}.dump-{}",
            name.to_string_lossy(),
            std::process::id()
        ));
        let file = File::create(&temp).map_err(|e| {
            Failure::internal(format!(
                "--out {}: creating {}: {e}",
                path.display(),
                temp.display()
            ))
        })?;
        Ok(Sink::File {
            out: BufWriter::with_capacity(1 << 20, file),
            temp,
            path: path.to_path_buf(),
        })
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), Failure> {
        match self {
            Sink::Stdout(out) => Ok(out.write_all(bytes)?),
            Sink::File { out, path, .. } => out
                .write_all(bytes)
                .map_err(|e| Failure::internal(format!("writing {}: {e}", path.display()))),
        }
    }

    /// Flush; a file is synced and renamed over FILE.
    fn finish(self) -> Result<(), Failure> {
        match self {
            Sink::Stdout(out) => Ok(out.finish()?),
            Sink::File { out, temp, path } => {
                let failed = |e: std::io::Error| {
                    let _ = std::fs::remove_file(&temp);
                    Failure::internal(format!("writing {}: {e}", path.display()))
                };
                let file = out.into_inner().map_err(|e| failed(e.into_error()))?;
                file.sync_all().map_err(failed)?;
                std::fs::rename(&temp, &path).map_err(failed)
            }
        }
    }

    /// Drop what was written to a temporary file.
    fn abandon(self) {
        if let Sink::File { out, temp, .. } = self {
            drop(out);
            let _ = std::fs::remove_file(temp);
        }
    }
}
