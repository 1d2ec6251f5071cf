//! `create`, `put`, `get`, `del`, `scan` and `tables`.

use std::io::Read;
use std::ops::Bound;
use std::path::Path;
use std::process::ExitCode;

use keel::btree::MAX_VALUE_BYTES;
use keel::db::{Database, DbError, Limits, ReadTxn, Table, DATA_FILE, JOURNAL_DIR};
use keel::io::RealVfs;
use keel::journal::{self, JournalOptions};
use serde::Serialize;

use super::args::{CreateArgs, GetArgs, KeyArgs, PutArgs, ReadArgs, ScanArgs};
use super::bytes::{escape, Encoding, Shown};
use super::failure::{check_store_dir, finish_interrupted_compact, Failure, Kind};
use super::live::read_store;
use super::{open, print_json};
use crate::out::Stdout;
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
    finish_interrupted_compact(store)?;
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
        outln!(
            "{verb} {} (pages of {}, journal segments of {})",
            out.store,
            format_size(out.page_size_bytes as u64),
            format_size(out.journal_segment_bytes)
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Serialize)]
struct Written {
    table: String,
    key: Shown,
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
    let key = a.keyed.key_encoding().parse("KEY", &a.key)?;
    let store = &a.store;
    // A value file is read whole before the store is opened: the store's
    // lock is never held while standard input (or a pipe) keeps it waiting.
    check_store_dir(store)?;
    let (value, file) = match (&a.value_file, &a.value) {
        (Some(path), _) => (read_value_file(path, value_bound(store))?, Some(path)),
        (None, Some(v)) => (enc.parse("VALUE", v)?, None),
        (None, None) => return Err(Failure::bad_input("give a VALUE or --value-file")),
    };
    let table = a.keyed.table.as_str();
    let existed = write(store, |limits, txn| {
        if let Some(path) = file {
            if value.len() as u64 > limits.max_value_bytes {
                return Err(too_large(path, limits.max_value_bytes));
            }
        }
        let fail = |e| Failure::from_db(e, store);
        let mut t = txn.open_table(table).map_err(fail)?;
        let existed = t.get(&key).map_err(fail)?.is_some();
        t.insert(&key, &value).map_err(fail)?;
        Ok(existed)
    })?;
    if a.keyed.out.json {
        print_json(&Written {
            table: table.into(),
            key: enc.json(&key),
            existed,
            value_bytes: Some(value.len()),
        })?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The most bytes a value can have in the store at `store`, found without
/// opening it (so without its lock): a value lies in one journal record,
/// and a record in one segment, which can grow to the journal's largest
/// segment size. The store's exact limit, a little less, is checked once
/// it is open. With no segment to read, the format's limit (the open then
/// says what is wrong with the store).
fn value_bound(store: &Path) -> u64 {
    largest_segment(store)
        .unwrap_or(MAX_VALUE_BYTES)
        .min(MAX_VALUE_BYTES)
}

/// The largest segment size of the journal of the store at `store`, read
/// from its segment headers without opening it (segments start small and
/// grow up to it, so a file's size says less); `None` when there is no
/// readable segment.
pub(super) fn largest_segment(store: &Path) -> Option<u64> {
    journal::largest_segment_size(RealVfs::shared().as_ref(), &store.join(JOURNAL_DIR))
        .ok()
        .flatten()
}

/// The bytes of `path`, or of standard input for `-`: refused, without
/// reading it all into memory, when it is longer than `max` bytes (the
/// store's largest segment size, from [`value_bound`]).
fn read_value_file(path: &Path, max: u64) -> Result<Vec<u8>, Failure> {
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
            "{}: larger than {max} bytes (the largest journal segment of this store), so \
             larger than the most one value can be in this store (`keel db stats` prints its \
             limits)",
            named()
        )));
    }
    Ok(buf)
}

/// The value in the file at `path` is longer than `max` bytes.
fn too_large(path: &Path, max: u64) -> Failure {
    Failure::bad_input(format!(
        "--value-file {}: larger than {max} bytes, the most one value can be in this store \
         (`keel db stats` prints its limits)",
        path.display()
    ))
}

pub fn del(a: KeyArgs) -> Result<ExitCode, Failure> {
    let enc = Encoding::new(a.keyed.hex);
    let key = a.keyed.key_encoding().parse("KEY", &a.key)?;
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
            key: enc.json(&key),
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
    errln!("not found: key {} in table {table:?}", enc.name(key));
    Ok(ExitCode::from(1))
}

#[derive(Serialize)]
struct Got {
    table: String,
    key: Shown,
    found: bool,
    value: Option<Shown>,
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
    let key = a.keyed.key_encoding().parse("KEY", &a.key)?;
    let table = a.keyed.table.as_str();
    let store = &a.store;
    // `Err(failure)` of kind `Absent`: no such table.
    let found = read_store(store, g.ro.read_only, |db| {
        // The store refuses to write such a key; say so rather than "absent".
        let max = db.limits().max_key_bytes;
        if key.len() > max {
            let e = DbError::KeyTooLong {
                len: key.len(),
                max,
            };
            return Err(Failure::from_db(e, store));
        }
        let read = db.begin_read();
        match read_table(&read, table, store) {
            Ok(t) => t
                .get(&key)
                .map(|v| Ok(v.map(|v| v.to_vec())))
                .map_err(|e| Failure::from_db(e, store)),
            Err(f) if f.kind == Kind::Absent => Ok(Err(f)),
            Err(f) => Err(f),
        }
    })?;
    let key_shown = enc.json(&key);
    let value = match found {
        Ok(v) => v,
        Err(f) => {
            if a.keyed.out.json {
                print_json(&Got::absent(table, key_shown))?;
            }
            errln!("not found: {}", f.message);
            return Ok(ExitCode::from(f.code));
        }
    };
    let Some(value) = value else {
        if a.keyed.out.json {
            print_json(&Got::absent(table, key_shown))?;
        }
        return absent(table, enc, &key);
    };
    if g.raw {
        let mut out = Stdout::buffered();
        out.write_all(&value)?;
        out.finish()?;
        return Ok(ExitCode::SUCCESS);
    }
    if a.keyed.out.json {
        print_json(&Got {
            table: table.into(),
            key: key_shown,
            found: true,
            value: Some(enc.json(&value)),
        })?;
    } else {
        outln!("{}", enc.text(&value))?;
    }
    Ok(ExitCode::SUCCESS)
}

impl Got {
    fn absent(table: &str, key: Shown) -> Got {
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
    key: Shown,
    value: Shown,
}

#[derive(Serialize)]
struct Scanned {
    table: String,
    entries: Vec<Entry>,
    count: usize,
    /// Whether --limit cut the listing short (more entries follow).
    more: bool,
}

pub fn scan(a: ScanArgs) -> Result<ExitCode, Failure> {
    let enc = Encoding::new(a.keyed.hex);
    let key_enc = a.keyed.key_encoding();
    let parse = |what, k: &Option<String>| k.as_ref().map(|k| key_enc.parse(what, k)).transpose();
    let from = parse("--from", &a.from)?;
    let to = parse("--to", &a.to)?;
    let prefix = parse("--prefix", &a.prefix)?;
    let range = Range {
        table: a.keyed.table.as_str(),
        from: from.as_deref(),
        to: to.as_deref(),
        prefix: prefix.as_deref(),
        limit: a.limit.unwrap_or(usize::MAX),
    };
    let json = a.keyed.out.json;
    let store = &a.store;
    // Text lines go out as they are found (a buffer at a time), and a
    // reader that closes stdout (`keel db scan S | head`) ends the scan.
    // JSON is one object, printed once the scan is whole; so is a scan of
    // a live snapshot, which may have to be taken again.
    let mut out = Stdout::buffered();
    let (mut entries, mut count, mut more) = (Vec::new(), 0, false);
    read_store(store, a.ro.read_only, |db| {
        entries.clear();
        let live = db.is_live();
        let mut line = |k: &[u8], v: &[u8]| -> Result<(), Failure> {
            if json || live {
                entries.push((k.to_vec(), v.to_vec()));
                return Ok(());
            }
            // Escaped text holds no tab and no line break.
            Ok(writeln!(out, "{}\t{}", enc.text(k), enc.text(v))?)
        };
        (count, more) = range.scan(db, store, &mut line)?;
        Ok(())
    })?;
    if !json {
        for (k, v) in &entries {
            writeln!(out, "{}\t{}", enc.text(k), enc.text(v))?;
        }
    }
    out.finish()?;
    if more && !json {
        errln!(
            "note: stopped at --limit {}; more entries follow",
            range.limit
        );
    }
    if json {
        let entries = entries
            .iter()
            .map(|(k, v)| Entry {
                key: enc.json(k),
                value: enc.json(v),
            })
            .collect();
        print_json(&Scanned {
            table: range.table.into(),
            entries,
            count,
            more,
        })?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Where `scan` sends each entry it lists.
type Line<'l> = dyn FnMut(&[u8], &[u8]) -> Result<(), Failure> + 'l;

/// What `scan` lists.
struct Range<'a> {
    table: &'a str,
    from: Option<&'a [u8]>,
    to: Option<&'a [u8]>,
    prefix: Option<&'a [u8]>,
    limit: usize,
}

impl Range<'_> {
    /// Give each entry of the range to `line`, in key order, up to the
    /// limit; returns how many, and whether more follow.
    fn scan(
        &self,
        db: &Database,
        store: &Path,
        line: &mut Line<'_>,
    ) -> Result<(usize, bool), Failure> {
        let read = db.begin_read();
        let t = read_table(&read, self.table, store)?;
        let iter = match self.prefix {
            Some(p) => t.prefix(p),
            None => {
                let start: Bound<&[u8]> = self.from.map_or(Bound::Unbounded, Bound::Included);
                let end: Bound<&[u8]> = self.to.map_or(Bound::Unbounded, Bound::Excluded);
                t.range((start, end))
            }
        };
        let mut count = 0;
        for kv in iter {
            let kv = kv.map_err(|e| Failure::from_db(e, store))?;
            if count == self.limit {
                return Ok((count, true));
            }
            count += 1;
            line(kv.0.as_bytes(), kv.1.as_bytes())?;
        }
        Ok((count, false))
    }
}

#[derive(Serialize)]
struct Tables {
    tables: Vec<String>,
}

pub fn tables(a: ReadArgs) -> Result<ExitCode, Failure> {
    let tables = read_store(&a.store, a.ro.read_only, |db| {
        db.begin_read()
            .list_tables()
            .map_err(|e| Failure::from_db(e, &a.store))
    })?;
    if a.out.json {
        print_json(&Tables { tables })?;
    } else {
        // One name a line, escaped as keys are: a line break in a name
        // cannot make it read as two.
        let mut out = Stdout::buffered();
        for t in tables {
            writeln!(out, "{}", escape(t.as_bytes()))?;
        }
        out.finish()?;
    }
    Ok(ExitCode::SUCCESS)
}
