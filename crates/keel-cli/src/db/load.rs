//! `keel db load STORE`: read the JSON lines `dump` writes into a store,
//! created if missing, in bounded transactions (`keel::db::BulkWriter`).
//!
//! A line that cannot be loaded stops the load there: what was pending is
//! committed first, so the store holds every line before it and none
//! after, and the message names the line.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::ExitCode;

use keel::db::{BulkWriter, Database, DbError, DATA_FILE};
use keel::journal::JournalOptions;
use serde::Serialize;
use serde_json::{Map, Value};

use super::args::LoadArgs;
use super::bytes::Shown;
use super::failure::{finish_interrupted_compact, kind_of, Failure, Kind};
use super::print_json;
use super::progress::Progress;

/// Update the progress every this many lines.
const PROGRESS_STEP: u64 = 1024;

/// One line of the input.
#[derive(Debug, PartialEq)]
enum Item {
    /// `{"table": T, "create": true}`
    Create(String),
    /// `{"table": T, "key": K, "value": V}`
    Entry {
        table: String,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    /// `{"end": true, …}`, with the counts it gives.
    End {
        tables: Option<u64>,
        entries: Option<u64>,
    },
}

/// What `--json` prints.
#[derive(Serialize, Default)]
struct Loaded {
    store: String,
    /// Whether the store was created by this load.
    created: bool,
    /// Lines read (blank ones included).
    lines: u64,
    /// Tables the input created (`create` lines).
    tables: u64,
    entries: u64,
    transactions: u64,
    /// End lines met (one a dump; more for dumps put one after another).
    end_lines: u64,
    /// Whether the input ended with an end line (exit 0; else 1).
    complete: bool,
}

pub fn run(a: LoadArgs) -> Result<ExitCode, Failure> {
    let input = open_input(&a.input)?;
    // The line bound before the store is open: its journal segment size
    // bounds any value (escaped in JSON, up to 6 characters a byte).
    let max_line = line_bound(a.segment_size.bytes().max(existing_segment(&a.store)));
    let mut lines = LineReader::new(input, max_line);
    // The first line is read (and checked) before the store is created or
    // locked: an input that is not a dump changes nothing.
    let first = lines.next_item()?;
    finish_interrupted_compact(&a.store)?;
    let created = !a.store.join(DATA_FILE).exists();
    let db = open_or_create(&a, created)?;
    let mut state = Load {
        writer: db
            .bulk_writer()
            .max_entries(a.batch)
            .max_bytes(usize::try_from(a.batch_bytes.bytes()).unwrap_or(usize::MAX)),
        out: Loaded {
            store: a.store.display().to_string(),
            created,
            ..Loaded::default()
        },
        section: (0, 0),
        progress: Progress::new("loading"),
    };
    let result = state.all(first, &mut lines);
    let Load {
        writer,
        mut out,
        progress,
        ..
    } = state;
    progress.clear();
    out.lines = lines.line;
    let finished = writer.finish().and_then(|stats| db.close().map(|()| stats));
    let stats = match (result, finished) {
        (Ok(()), Ok(stats)) => stats,
        (Err(f), Ok(stats)) => {
            return Err(Failure::new(
                f.kind,
                format!(
                    "{}; every line before it is loaded ({} entries), none after",
                    f.message, stats.entries
                ),
            ))
        }
        (Ok(()), Err(e)) => return Err(Failure::from_db(e, &a.store)),
        (Err(f), Err(e)) => {
            return Err(Failure::new(
                f.kind,
                format!(
                    "{}; and committing the lines before it failed: {e} (they may or may not \
                     be in the store)",
                    f.message
                ),
            ))
        }
    };
    out.entries = stats.entries;
    out.transactions = stats.transactions;
    report(&a, &out)
}

/// Print the summary (and the warning of an input cut short).
fn report(a: &LoadArgs, out: &Loaded) -> Result<ExitCode, Failure> {
    if !out.complete {
        errln!(
            "warning: the input did not end with an end line ({{\"end\": true, …}}, the last line \
             of a dump): it may be cut short. Every line read is loaded"
        );
    }
    if a.out.json {
        print_json(out)?;
    } else {
        outln!(
            "loaded {} entries ({} tables created) from {} lines into {} store {} in {} \
             transactions",
            out.entries,
            out.tables,
            out.lines,
            if out.created { "new" } else { "existing" },
            out.store,
            out.transactions
        )?;
    }
    Ok(ExitCode::from(u8::from(!out.complete)))
}

struct Load<'d> {
    writer: BulkWriter<'d>,
    out: Loaded,
    /// Tables and entries since the last end line.
    section: (u64, u64),
    progress: Progress,
}

impl Load<'_> {
    /// Load `first` and every line after it.
    fn all<R: BufRead>(
        &mut self,
        first: Option<Item>,
        lines: &mut LineReader<R>,
    ) -> Result<(), Failure> {
        let mut next = first;
        while let Some(item) = next {
            self.one(item)
                .map_err(|f| Failure::new(f.kind, format!("line {}: {}", lines.line, f.message)))?;
            if lines.line % PROGRESS_STEP == 0 {
                self.progress.set(self.out.entries);
            }
            next = lines.next_item()?;
        }
        Ok(())
    }

    fn one(&mut self, item: Item) -> Result<(), Failure> {
        let store_error = |e: DbError| Failure::new(kind_of(&e), e.to_string());
        self.out.complete = matches!(item, Item::End { .. });
        match item {
            Item::Create(table) => {
                self.writer.create_table(&table).map_err(store_error)?;
                self.section.0 += 1;
                self.out.tables += 1;
            }
            Item::Entry { table, key, value } => {
                self.writer
                    .insert(&table, &key, &value)
                    .map_err(store_error)?;
                self.section.1 += 1;
                self.out.entries += 1;
            }
            Item::End { tables, entries } => {
                let (t, e) = std::mem::take(&mut self.section);
                if tables.is_some_and(|n| n != t) || entries.is_some_and(|n| n != e) {
                    return Err(Failure::new(
                        Kind::Damaged,
                        format!(
                            "the end line counts {} tables and {} entries, but {t} tables and \
                             {e} entries came before it (since the previous end line): lines \
                             are missing or were added",
                            tables.map_or("any".into(), |n| n.to_string()),
                            entries.map_or("any".into(), |n| n.to_string()),
                        ),
                    ));
                }
                self.out.end_lines += 1;
            }
        }
        Ok(())
    }
}

fn open_input(path: &Path) -> Result<Box<dyn BufRead>, Failure> {
    if path == Path::new("-") {
        return Ok(Box::new(BufReader::with_capacity(
            1 << 20,
            std::io::stdin().lock(),
        )));
    }
    let file = File::open(path)
        .map_err(|e| Failure::bad_input(format!("--in {}: {e}", path.display())))?;
    Ok(Box::new(BufReader::with_capacity(1 << 20, file)))
}

/// The store at `a.store`, created if the path is missing or an empty
/// directory; a directory holding anything but a store is refused.
fn open_or_create(a: &LoadArgs, create: bool) -> Result<Database, Failure> {
    let store = &a.store;
    if create {
        if let Ok(mut entries) = std::fs::read_dir(store) {
            if entries.next().is_some() {
                return Err(Failure::new(
                    Kind::NotAStore,
                    format!(
                        "{} holds no store and is not empty: load creates a store only in a new \
                         or empty directory",
                        store.display()
                    ),
                ));
            }
        } else if store.exists() {
            return Err(Failure::new(
                Kind::NotAStore,
                format!("{} is not a directory", store.display()),
            ));
        }
    }
    let page_size = usize::try_from(a.page_size.bytes())
        .map_err(|_| Failure::bad_input(format!("--page-size {}: too large", a.page_size)))?;
    let builder = Database::builder()
        .page_size(page_size)
        .journal(JournalOptions {
            segment_size_bytes: a.segment_size.bytes(),
            ..JournalOptions::default()
        })
        .background_checkpoints(false);
    let opened = if create {
        builder.create(store)
    } else {
        builder.open(store)
    };
    opened.map_err(|e| Failure::from_db(e, store))
}

/// The largest segment size of the journal of the store at `store` (0
/// when it has no segment).
fn existing_segment(store: &Path) -> u64 {
    super::data::largest_segment(store).unwrap_or(0)
}

/// The longest line taken: a record of a segment's bytes, each escaped
/// in up to 6 characters (`\u0000`), and room for the rest of the line.
fn line_bound(segment_bytes: u64) -> u64 {
    segment_bytes.saturating_mul(6).saturating_add(1 << 20)
}

/// Lines of the input, one at a time, each at most `max` bytes.
struct LineReader<R> {
    input: R,
    max: u64,
    buf: Vec<u8>,
    /// The number of the line last read (1 for the first).
    line: u64,
}

impl<R: BufRead> LineReader<R> {
    fn new(input: R, max: u64) -> LineReader<R> {
        LineReader {
            input,
            max,
            buf: Vec::new(),
            line: 0,
        }
    }

    /// The next line that is not blank, parsed; `None` at the end.
    fn next_item(&mut self) -> Result<Option<Item>, Failure> {
        loop {
            self.buf.clear();
            let n = (&mut self.input)
                .take(self.max + 1)
                .read_until(b'\n', &mut self.buf)
                .map_err(|e| {
                    Failure::bad_input(format!("reading the input after line {}: {e}", self.line))
                })?;
            if n == 0 {
                return Ok(None);
            }
            self.line += 1;
            let at = |why: String| Failure::bad_input(format!("line {}: {why}", self.line));
            if self.buf.len() as u64 > self.max {
                return Err(at(format!(
                    "longer than {} bytes, more than any entry of the store can take",
                    self.max
                )));
            }
            if self.buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return parse(&self.buf).map(Some).map_err(at);
        }
    }
}

/// One line of the format: docs/cli-db.md, "dump and load".
fn parse(line: &[u8]) -> Result<Item, String> {
    let value: Value = serde_json::from_slice(line).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(o) = value else {
        return Err(format!("not a JSON object: {}", short(&value)));
    };
    let fields = |names: &[&str]| o.keys().all(|k| names.contains(&k.as_str()));
    if o.contains_key("end") {
        if !fields(&["end", "tables", "entries", "lsn"]) || o["end"] != Value::Bool(true) {
            return Err(expected(&o));
        }
        let count = |name: &str| match o.get(name) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| format!("{name:?} is {}, not a count", short(v))),
        };
        count("lsn")?;
        return Ok(Item::End {
            tables: count("tables")?,
            entries: count("entries")?,
        });
    }
    let table = match o.get("table") {
        Some(Value::String(t)) => t.clone(),
        Some(v) => return Err(format!("\"table\" is {}, not a string", short(v))),
        None => return Err(expected(&o)),
    };
    if o.contains_key("create") {
        if !fields(&["table", "create"]) || o["create"] != Value::Bool(true) {
            return Err(expected(&o));
        }
        return Ok(Item::Create(table));
    }
    if !fields(&["table", "key", "value"]) || o.len() != 3 {
        return Err(expected(&o));
    }
    let bytes = |name: &str| Shown::bytes_of(&o[name]).map_err(|why| format!("{name:?}: {why}"));
    Ok(Item::Entry {
        table,
        key: bytes("key")?,
        value: bytes("value")?,
    })
}

/// What a line with these fields should have been.
fn expected(o: &Map<String, Value>) -> String {
    let fields: Vec<&str> = o.keys().map(String::as_str).collect();
    format!(
        "an object with the fields {fields:?}; expected {{\"table\", \"key\", \"value\"}}, \
         {{\"table\", \"create\": true}} or {{\"end\": true, …}}"
    )
}

/// A JSON value for a message, cut to a readable length.
fn short(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(60) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_or_say_why() {
        assert_eq!(
            parse(br#"{"table":"t","key":"k","value":{"hex":"ff00"}}"#),
            Ok(Item::Entry {
                table: "t".into(),
                key: b"k".to_vec(),
                value: vec![0xff, 0],
            })
        );
        assert_eq!(
            parse(br#"{"table":"t","create":true}"#),
            Ok(Item::Create("t".into()))
        );
        assert_eq!(
            parse(br#"{"end":true,"tables":1,"entries":2,"lsn":9}"#),
            Ok(Item::End {
                tables: Some(1),
                entries: Some(2)
            })
        );
        assert_eq!(
            parse(b"{\"end\":true}\r\n"),
            Ok(Item::End {
                tables: None,
                entries: None
            })
        );
        for (bad, why) in [
            (&b"{\"table\":\"t\",\"key\":\"k\"}"[..], "expected"),
            (b"{\"table\":\"t\",\"key\":\"k\",\"value\":1}", "\"value\""),
            (
                b"{\"table\":\"t\",\"key\":\"k\",\"value\":\"v\",\"x\":1}",
                "expected",
            ),
            (b"{\"table\":\"t\",\"create\":false}", "expected"),
            (b"{\"table\":7,\"create\":true}", "not a string"),
            (b"{\"end\":true,\"entries\":-1}", "not a count"),
            (b"[1]", "not a JSON object"),
            (b"{\"table\":\"t\",\"key\":", "not JSON"),
            (b"\xff", "not JSON"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn blank_lines_are_skipped_and_long_ones_refused() {
        let input = b"\n  \n{\"end\":true}\n".as_slice();
        let mut r = LineReader::new(input, 100);
        assert!(matches!(r.next_item(), Ok(Some(Item::End { .. }))));
        assert_eq!(r.line, 3);
        assert!(matches!(r.next_item(), Ok(None)));
        let long = vec![b' '; 200];
        let mut r = LineReader::new(long.as_slice(), 100);
        let e = r.next_item().unwrap_err();
        assert!(
            e.message.starts_with("line 1: longer than 100 bytes"),
            "{}",
            e.message
        );
    }
}
