//! `create`, `put`, `get`, `del`, `scan` and `tables`.

use std::io::{Read, Write};
use std::ops::Bound;
use std::path::Path;
use std::process::ExitCode;

use keel::db::{Database, DbError, KeyValue, Limits, ReadTxn, Table, DATA_FILE};
use keel::journal::JournalOptions;
use serde::Serialize;

use super::args::{CreateArgs, GetArgs, KeyArgs, PutArgs, ScanArgs, StoreArgs};
use super::bytes::Encoding;
use super::failure::{Failure, Kind};
use super::{open, print_json};
use crate::util::format_size;

#[derive(Serialize)]
struct Created {
    store: String,
    /// False when the path already held a store (left as it was).
    created: bool,
    page_size_bytes: usize,
    journal_segment_bytes: u64,
}

pub fn create(a: CreateArgs) -> Result<ExitCode, Failure> {
    let store = &a.store;
    let existed = store.join(DATA_FILE).exists();
    let page_size = usize::try_from(a.page_size.bytes())
        .map_err(|_| Failure::bad_input(format!("--page-size {}: too large", a.page_size)))?;
    let journal = JournalOptions {
        segment_size_bytes: a.segment_size.bytes(),
        ..JournalOptions::default()
    };
    let db = Database::builder()
        .page_size(page_size)
        .journal(journal)
        .background_checkpoints(false)
        .create(store)
        .map_err(|e| Failure::from_db(e, store))?;
    let out = Created {
        store: store.display().to_string(),
        created: !existed,
        page_size_bytes: db.stats().page_size,
        journal_segment_bytes: db.journal().options().segment_size_bytes,
    };
    db.close().map_err(|e| Failure::from_db(e, store))?;
    if a.out.json {
        print_json(&out)?;
    } else {
        let verb = if out.created {
            "created store"
        } else {
            "a store already exists at"
        };
        println!(
            "{verb} {} (pages of {}, journal segments of {})",
            out.store,
            format_size(out.page_size_bytes as u64),
            format_size(out.journal_segment_bytes)
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Serialize)]
struct Written {
    table: String,
    key: String,
    /// `put`: whether the key had a value before; `del`: whether it
    /// existed (and was deleted).
    existed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    value_bytes: Option<usize>,
}

/// Run `change` in one write transaction on the store (given the store's
/// limits), commit it durably and close the store (which checkpoints it).
fn write<T>(
    store: &Path,
    change: impl FnOnce(&Limits, &mut keel::db::WriteTxn) -> Result<T, Failure>,
) -> Result<T, Failure> {
    let db = open(store)?;
    let fail = |e| Failure::from_db(e, store);
    let mut txn = db.begin_write().map_err(fail)?;
    let out = change(&db.limits(), &mut txn)?;
    txn.commit().map_err(fail)?;
    db.close().map_err(fail)?;
    Ok(out)
}

pub fn put(a: PutArgs) -> Result<ExitCode, Failure> {
    let enc = Encoding::new(a.keyed.hex);
    let key = enc.parse("KEY", &a.key)?;
    // The value, or the file to read it from once the limits are known.
    let given: Result<Vec<u8>, &Path> = match (&a.value_file, &a.value) {
        (Some(path), _) => Err(path),
        (None, Some(v)) => Ok(enc.parse("VALUE", v)?),
        (None, None) => return Err(Failure::bad_input("give a VALUE or --value-file")),
    };
    let table = a.keyed.table.as_str();
    let store = &a.store;
    let (existed, value_bytes) = write(store, |limits, txn| {
        let value = match given {
            Ok(v) => v,
            Err(path) => read_value_file(path, limits)?,
        };
        let fail = |e| Failure::from_db(e, store);
        let mut t = txn.open_table(table).map_err(fail)?;
        let existed = t.get(&key).map_err(fail)?.is_some();
        t.insert(&key, &value).map_err(fail)?;
        Ok((existed, value.len()))
    })?;
    if a.keyed.out.json {
        print_json(&Written {
            table: table.into(),
            key: enc.show(String::new, &key)?,
            existed,
            value_bytes: Some(value_bytes),
        })?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The bytes of `path`, or of standard input for `-`: refused, without
/// reading it all into memory, when it is larger than a value or a
/// transaction may be.
fn read_value_file(path: &Path, limits: &Limits) -> Result<Vec<u8>, Failure> {
    let max = limits.max_value_bytes;
    let named = || format!("--value-file {}", path.display());
    let unreadable = |e: std::io::Error| Failure::bad_input(format!("{}: {e}", named()));
    let source: Box<dyn Read> = if path == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::fs::File::open(path).map_err(unreadable)?)
    };
    let mut buf = Vec::new();
    source
        .take(max + 1)
        .read_to_end(&mut buf)
        .map_err(unreadable)?;
    if buf.len() as u64 > max {
        return Err(Failure::bad_input(format!(
            "{}: larger than {max} bytes, the most one value can be in this store \
             (`keel db stats` prints its limits)",
            named()
        )));
    }
    Ok(buf)
}

pub fn del(a: KeyArgs) -> Result<ExitCode, Failure> {
    let enc = Encoding::new(a.keyed.hex);
    let key = enc.parse("KEY", &a.key)?;
    let table = a.keyed.table.as_str();
    let store = &a.store;
    let existed = write(store, |_, txn| {
        let fail = |e| Failure::from_db(e, store);
        match txn.existing_table(table).map_err(fail)? {
            Some(mut t) => t.remove(&key).map_err(fail),
            None => Ok(false),
        }
    })?;
    if a.keyed.out.json {
        print_json(&Written {
            table: table.into(),
            key: enc.show(String::new, &key)?,
            existed,
            value_bytes: None,
        })?;
    }
    if existed {
        Ok(ExitCode::SUCCESS)
    } else {
        absent(table, enc, &key)
    }
}

/// Exit 1: the key is not in the table (or the table does not exist).
fn absent(table: &str, enc: Encoding, key: &[u8]) -> Result<ExitCode, Failure> {
    eprintln!("not found: key {} in table {table:?}", enc.name(key));
    Ok(ExitCode::from(1))
}

#[derive(Serialize)]
struct Got {
    table: String,
    key: String,
    found: bool,
    value: Option<String>,
}

/// A read transaction's table, or the exit-1 failure naming the tables
/// there are.
fn read_table<'r>(read: &'r ReadTxn, name: &str, store: &Path) -> Result<Table<'r>, Failure> {
    match read.open_table(name) {
        Ok(t) => Ok(t),
        Err(DbError::NoSuchTable(_)) => {
            let tables = read.list_tables().map_err(|e| Failure::from_db(e, store))?;
            let have = if tables.is_empty() {
                "the store has no tables yet".to_string()
            } else {
                format!("its tables: {}", tables.join(", "))
            };
            Err(Failure::new(
                Kind::Absent,
                format!("no table named {name:?} ({have})"),
            ))
        }
        Err(e) => Err(Failure::from_db(e, store)),
    }
}

pub fn get(g: GetArgs) -> Result<ExitCode, Failure> {
    let a = g.key;
    let enc = Encoding::new(a.keyed.hex);
    let key = enc.parse("KEY", &a.key)?;
    let table = a.keyed.table.as_str();
    let db = open(&a.store)?;
    // The store refuses to write such a key; say so rather than "absent".
    let max = db.limits().max_key_bytes;
    if key.len() > max {
        return Err(Failure::from_db(
            DbError::KeyTooLong {
                len: key.len(),
                max,
            },
            &a.store,
        ));
    }
    let read = db.begin_read();
    let key_shown = enc.show(String::new, &key)?;
    let value = match read_table(&read, table, &a.store) {
        Ok(t) => t.get(&key).map_err(|e| Failure::from_db(e, &a.store))?,
        Err(f) if f.kind == Kind::Absent => {
            if a.keyed.out.json {
                print_json(&Got::absent(table, key_shown))?;
            }
            eprintln!("not found: {}", f.message);
            return Ok(ExitCode::from(f.code));
        }
        Err(f) => return Err(f),
    };
    let Some(value) = value else {
        if a.keyed.out.json {
            print_json(&Got::absent(table, key_shown))?;
        }
        return absent(table, enc, &key);
    };
    if g.raw {
        let mut out = std::io::stdout().lock();
        out.write_all(&value)
            .and_then(|()| out.flush())
            .map_err(|e| Failure::new(Kind::Failed, format!("writing the value: {e}")))?;
        return Ok(ExitCode::SUCCESS);
    }
    let shown = enc.show(|| format!("the value of key {}", enc.name(&key)), &value)?;
    if a.keyed.out.json {
        print_json(&Got {
            table: table.into(),
            key: key_shown,
            found: true,
            value: Some(shown),
        })?;
    } else {
        println!("{shown}");
    }
    Ok(ExitCode::SUCCESS)
}

impl Got {
    fn absent(table: &str, key: String) -> Got {
        Got {
            table: table.into(),
            key,
            found: false,
            value: None,
        }
    }
}

#[derive(Serialize)]
struct Entry {
    key: String,
    value: String,
}

#[derive(Serialize)]
struct Scanned {
    table: String,
    entries: Vec<Entry>,
    count: usize,
    /// Whether --limit cut the listing short (more entries follow).
    more: bool,
}

/// The entry printed: its key and value as the encoding shows them.
fn show_entry(enc: Encoding, kv: &KeyValue) -> Result<Entry, Failure> {
    let key = enc.show(
        || format!("the key {}", enc.name(kv.0.as_bytes())),
        kv.0.as_bytes(),
    )?;
    let value = enc.show(
        || format!("the value of key {}", enc.name(kv.0.as_bytes())),
        kv.1.as_bytes(),
    )?;
    Ok(Entry { key, value })
}

/// A text line of `scan` is `KEY<TAB>VALUE`: a key or value holding a
/// tab or a line break would make it ambiguous (where does the key end,
/// where does the entry end?), so it is refused, as bytes that are not
/// UTF-8 are, rather than printed. Hex digits never hold either.
fn check_line(enc: Encoding, kv: &KeyValue, e: &Entry) -> Result<(), Failure> {
    let breaks = |s: &str| s.contains(['\t', '\n', '\r']);
    let what = if breaks(&e.key) {
        format!("the key {}", enc.name(kv.0.as_bytes()))
    } else if breaks(&e.value) {
        format!("the value of key {}", enc.name(kv.0.as_bytes()))
    } else {
        return Ok(());
    };
    Err(Failure::bad_input(format!(
        "{what} holds a tab or a line break, which a `KEY<TAB>VALUE` line cannot show; \
         print the scan with --json or --hex"
    )))
}

pub fn scan(a: ScanArgs) -> Result<ExitCode, Failure> {
    let enc = Encoding::new(a.keyed.hex);
    let parse = |what, k: &Option<String>| k.as_ref().map(|k| enc.parse(what, k)).transpose();
    let from = parse("--from", &a.from)?;
    let to = parse("--to", &a.to)?;
    let prefix = parse("--prefix", &a.prefix)?;
    let table = a.keyed.table.as_str();
    let json = a.keyed.out.json;
    let db = open(&a.store)?;
    let read = db.begin_read();
    let t = read_table(&read, table, &a.store)?;
    let iter = match &prefix {
        Some(p) => t.prefix(p),
        None => {
            let start: Bound<&[u8]> = from.as_deref().map_or(Bound::Unbounded, Bound::Included);
            let end: Bound<&[u8]> = to.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
            t.range((start, end))
        }
    };
    let limit = a.limit.unwrap_or(usize::MAX);
    let (mut count, mut more, mut entries) = (0, false, Vec::new());
    let mut stdout = std::io::stdout().lock();
    for kv in iter {
        let kv = kv.map_err(|e| Failure::from_db(e, &a.store))?;
        if count == limit {
            more = true;
            break;
        }
        count += 1;
        let e = show_entry(enc, &kv)?;
        if json {
            entries.push(e);
        } else {
            check_line(enc, &kv, &e)?;
            // Printed as found: a long scan shows its first entries at once.
            match writeln!(stdout, "{}\t{}", e.key, e.value) {
                Ok(()) => {}
                // The reader has all it wants (`keel db scan S | head`).
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                    return Ok(ExitCode::SUCCESS)
                }
                Err(e) => return Err(stdout_failed(e)),
            }
        }
    }
    if more && !json {
        eprintln!("note: stopped at --limit {limit}; more entries follow");
    }
    if json {
        print_json(&Scanned {
            table: table.into(),
            entries,
            count,
            more,
        })?;
    }
    Ok(ExitCode::SUCCESS)
}

fn stdout_failed(e: std::io::Error) -> Failure {
    Failure::internal(format!("writing to stdout: {e}"))
}

#[derive(Serialize)]
struct Tables {
    tables: Vec<String>,
}

pub fn tables(a: StoreArgs) -> Result<ExitCode, Failure> {
    let db = open(&a.store)?;
    let tables = db
        .begin_read()
        .list_tables()
        .map_err(|e| Failure::from_db(e, &a.store))?;
    if a.out.json {
        print_json(&Tables { tables })?;
    } else {
        // One name a line: a name holding a line break would read as two.
        if let Some(t) = tables.iter().find(|t| t.contains(['\n', '\r'])) {
            return Err(Failure::bad_input(format!(
                "the table name {t:?} holds a line break, which a one-name-a-line listing \
                 cannot show; list the tables with --json"
            )));
        }
        for t in tables {
            println!("{t}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
