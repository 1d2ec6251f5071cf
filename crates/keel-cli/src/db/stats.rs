//! `keel db stats`: the store's figures after opening (and so recovering)
//! it.

use std::path::Path;
use std::process::ExitCode;

use keel::db::{Database, DbError, DATA_FILE, JOURNAL_DIR};
use keel::io::cpu_list;
use serde::Serialize;

use super::args::ReadArgs;
use super::bytes::escape;
use super::failure::Failure;
use super::live::read_store;
use super::print_json;
use crate::util::{format_size, format_size_approx};

#[derive(Serialize)]
struct Report {
    store: String,
    /// A live snapshot of a store another process has open (read-only,
    /// beside its writer).
    live: bool,
    page_size_bytes: usize,
    data_file_bytes: u64,
    /// Every table, and how many keys it holds.
    tables: Vec<TableKeys>,
    pages: Pages,
    tree: Tree,
    checkpoint: Checkpoint,
    cache: Cache,
    journal: Journal,
    background: Background,
    limits: Limits,
}

#[derive(Serialize)]
struct Background {
    /// The CPUs the store's helper and checkpointer threads are kept to;
    /// null: any.
    cpus: Option<Vec<usize>>,
    /// The CPUs found taking the interrupts of the store's disk.
    disk_interrupt_cpus: Vec<usize>,
}

#[derive(Serialize)]
struct TableKeys {
    name: String,
    keys: u64,
}

#[derive(Serialize)]
struct Pages {
    /// Pages in the data file (its high-water mark), the two meta pages
    /// included.
    in_file: u64,
    /// Pages the newest tree uses (nodes and overflow chains).
    tree: u64,
    /// Free for reuse now.
    free: u64,
    /// Freed by commits no checkpoint covers yet.
    pending_free: u64,
}

#[derive(Serialize)]
struct Tree {
    depth: usize,
    branches: u64,
    leaves: u64,
    /// The tables' keys and the table catalog's entries (a name per table
    /// and the next table id).
    entries: u64,
    overflow_values: u64,
    /// Nodes changed in memory by the journal's replay, not yet in the
    /// data file.
    dirty_nodes: u64,
}

#[derive(Serialize)]
struct Checkpoint {
    /// The last LSN the data file holds.
    lsn: u64,
    /// Checkpoints ever taken.
    generation: u64,
    /// The newest commit's LSN (after replaying the journal).
    newest_lsn: u64,
    /// Commits in the journal that the next checkpoint will write.
    commits_after: u64,
}

#[derive(Serialize)]
struct Cache {
    hits: u64,
    misses: u64,
    evictions: u64,
    cached_bytes: u64,
}

#[derive(Serialize)]
struct Journal {
    /// Bytes of every file in `journal/` (segments are preallocated).
    dir_bytes: u64,
    segment_files: usize,
    segment_bytes: u64,
    write_method: String,
    /// Record bytes replayed at this open (commits after the checkpoint).
    uncheckpointed_bytes: u64,
}

#[derive(Serialize)]
struct Limits {
    max_key_bytes: usize,
    max_value_bytes: u64,
    max_transaction_bytes: usize,
}

pub fn run(a: ReadArgs) -> Result<ExitCode, Failure> {
    let r = read_store(&a.store, a.ro.read_only, |db| report(db, &a.store))?;
    if a.out.json {
        print_json(&r)?;
    } else {
        out!("{}", render(&r))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn report(db: &Database, store: &Path) -> Result<Report, Failure> {
    let fail = |e| Failure::from_db(e, store);
    let s = db.stats();
    let t = db.tree_stats().map_err(fail)?;
    let tables = table_keys(db).map_err(fail)?;
    let limits = db.limits();
    let (dir_bytes, segment_files) = dir_usage(&store.join(JOURNAL_DIR))?;
    let data_file_bytes = std::fs::metadata(store.join(DATA_FILE))
        .map_err(|e| Failure::internal(format!("{}: {e}", store.join(DATA_FILE).display())))?
        .len();
    Ok(Report {
        store: store.display().to_string(),
        live: db.is_live(),
        page_size_bytes: s.page_size,
        data_file_bytes,
        tables,
        pages: Pages {
            in_file: s.page_count,
            tree: t.pages.len() as u64,
            free: s.free_pages,
            pending_free: s.pending_free_pages,
        },
        tree: Tree {
            depth: t.depth,
            branches: t.branches,
            leaves: t.leaves,
            entries: t.entries,
            overflow_values: t.overflow_values,
            dirty_nodes: t.dirty_nodes,
        },
        checkpoint: Checkpoint {
            lsn: s.checkpoint_lsn,
            generation: s.checkpoint_generation,
            newest_lsn: s.published_lsn,
            commits_after: s.published_lsn.saturating_sub(s.checkpoint_lsn),
        },
        cache: Cache {
            hits: s.cache.hits,
            misses: s.cache.misses,
            evictions: s.cache.evictions,
            cached_bytes: s.cache.cached_bytes,
        },
        journal: Journal {
            dir_bytes,
            segment_files,
            segment_bytes: db.journal().options().segment_size_bytes,
            write_method: db.journal().method().to_string(),
            uncheckpointed_bytes: s.uncheckpointed_bytes,
        },
        background: Background {
            cpus: s.background_cpus.clone(),
            disk_interrupt_cpus: s.disk_interrupt_cpus.clone(),
        },
        limits: Limits {
            max_key_bytes: limits.max_key_bytes,
            max_value_bytes: limits.max_value_bytes,
            max_transaction_bytes: limits.max_transaction_bytes,
        },
    })
}

/// Every table's name and number of keys (a scan of the whole store).
fn table_keys(db: &Database) -> Result<Vec<TableKeys>, DbError> {
    let read = db.begin_read();
    let mut out = Vec::new();
    for name in read.list_tables()? {
        let mut keys = 0;
        for kv in read.open_table(&name)?.iter() {
            kv?;
            keys += 1;
        }
        out.push(TableKeys { name, keys });
    }
    Ok(out)
}

/// Bytes of the files in `dir`, and how many of them are segments.
fn dir_usage(dir: &Path) -> Result<(u64, usize), Failure> {
    let fail = |e: std::io::Error| Failure::internal(format!("{}: {e}", dir.display()));
    let (mut bytes, mut segments) = (0, 0);
    for entry in std::fs::read_dir(dir).map_err(fail)? {
        let entry = entry.map_err(fail)?;
        let meta = entry.metadata().map_err(fail)?;
        if meta.is_file() {
            bytes += meta.len();
            if entry.file_name().to_string_lossy().ends_with(".seg") {
                segments += 1;
            }
        }
    }
    Ok((bytes, segments))
}

fn render(r: &Report) -> String {
    let p = &r.pages;
    let t = &r.tree;
    let c = &r.checkpoint;
    let j = &r.journal;
    let lookups = r.cache.hits + r.cache.misses;
    let mut out = format!("store {}\n", r.store);
    out += &format!(
        "data file    {} ({} pages of {})\n",
        format_size_approx(r.data_file_bytes),
        p.in_file,
        format_size(r.page_size_bytes as u64)
    );
    out += &format!(
        "pages        {} in the tree, {} free, {} waiting to be free\n",
        p.tree, p.free, p.pending_free
    );
    let tables: Vec<String> = r
        .tables
        .iter()
        .map(|t| format!("{} ({} keys)", escape(t.name.as_bytes()), t.keys))
        .collect();
    let tables = if tables.is_empty() {
        "none".to_string()
    } else {
        tables.join(", ")
    };
    out += &format!("tables       {tables}\n");
    out += &format!(
        "tree         depth {}, {} branches, {} leaves, {} entries with the table catalog's \
         ({} with overflow values)\n",
        t.depth, t.branches, t.leaves, t.entries, t.overflow_values
    );
    out += &format!(
        "checkpoint   lsn {} (generation {}); newest commit lsn {}, {} commit(s) since\n",
        c.lsn, c.generation, c.newest_lsn, c.commits_after
    );
    out += &format!(
        "journal      {} in {} segment file(s) of {}, {}; {} not checkpointed\n",
        format_size_approx(j.dir_bytes),
        j.segment_files,
        format_size(j.segment_bytes),
        j.write_method,
        format_size_approx(j.uncheckpointed_bytes)
    );
    out += &format!(
        "cache        {} lookups this run: {} hits, {} misses, {} evictions; {} held\n",
        lookups,
        r.cache.hits,
        r.cache.misses,
        r.cache.evictions,
        format_size_approx(r.cache.cached_bytes)
    );
    out += &background_line(&r.background);
    out += &format!(
        "limits       keys up to {} bytes, values up to {}, transactions up to {}\n",
        r.limits.max_key_bytes,
        format_size_approx(r.limits.max_value_bytes),
        format_size_approx(r.limits.max_transaction_bytes as u64)
    );
    out
}

/// The `background` line: where the store's helper and checkpointer run,
/// and where the disk's interrupts go.
fn background_line(b: &Background) -> String {
    let interrupts = if b.disk_interrupt_cpus.is_empty() {
        "not found".to_string()
    } else {
        format!("on CPU {}", cpu_list(&b.disk_interrupt_cpus))
    };
    let threads = match &b.cpus {
        Some(cpus) => format!("CPU {}", cpu_list(cpus)),
        None => "any CPU".to_string(),
    };
    format!(
        "background   helper and checkpointer on {threads}; the disk's interrupts {interrupts}\n"
    )
}
