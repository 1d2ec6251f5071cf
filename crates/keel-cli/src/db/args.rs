//! The command line of `keel db`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::bytes::Encoding;
use crate::util::Size;

/// Exit codes, the same for every command.
const EXIT_CODES: &str = "Exit codes:\n  \
    0  done\n  \
    1  the answer is no: `get` or `del` found no such key (or no such table), `scan` no such \
       table; `check` found the store damaged (the reason, naming the page or file, is \
       printed)\n  \
    2  the command could not run: a wrong command line or bad hex, no store at the path (or \
       a path that is not a store), a store another process has open (`put`, `del`; the \
       reading commands read it: below), a store that cannot be opened because it is damaged \
       (run `keel db check`), a key or value over the store's limits, or a failed read or \
       write\n  \
    3  `get`, `scan`, `tables`, `stats`, `check` of a store another process has open: no \
       consistent snapshot of it could be read in 12 attempts (its checkpoints kept changing \
       what was read); try again\n\n\
    A store another process has open is read by `get`, `scan`, `tables`, `stats` and `check` \
    as a live snapshot, read-only (a note on stderr says so): every commit acknowledged \
    before the command began, nothing not yet durable. `put`, `del`, `load` and `compact` \
    refuse it (exit 2); `backup` copies such a snapshot.\n\n\
    A reader that closes stdout early (`keel db scan S | head`) ends any command at once, \
    quietly, with exit 0.";

/// What `salvage` does, and its exit codes (its own: 1 is not "no").
const SALVAGE_HELP: &str = "What it recovers: the tree of the valid meta page that, with the \
    journal's consecutive records after its checkpoint, reaches the highest LSN (of two that \
    reach as far, the newer), every entry reachable through pages that pass their checksum \
    and layout checks, then the journal's records in LSN order up to the first gap (intact \
    records are searched for past damaged ones and in every segment file). The new store is \
    written, checkpointed and checked. The report names the meta page used, the last LSN \
    recovered, the tables and entries written, and every loss: the LSNs from the first gap \
    to the highest LSN seen in the journal (with the keys the intact ones touched), key \
    ranges behind unreadable pages, journal files cut short. Progress goes to stderr on a \
    long salvage.\n\n\
    Exit codes:\n  \
    0  salvaged: nothing the store's files prove committed was lost\n  \
    1  salvaged, with losses: the new store holds what could be proven whole, and the \
       report says what is missing\n  \
    2  nothing salvaged: a wrong command line, no store at STORE, a store another process \
       has open, NEW not empty (or inside STORE), no valid meta page, or a failed read or \
       write (NEW may then be partly written: remove it before trying again)\n\n\
    A reader that closes stdout early ends it with exit 0, as every command.";

/// The format of `dump` and `load`.
const DUMP_FORMAT: &str = "The format (JSON lines, docs/cli-db.md, \"dump and load\"): one \
    object a line. Each table starts with {\"table\": NAME, \"create\": true} (so empty tables \
    are kept), then one {\"table\": NAME, \"key\": K, \"value\": V} an entry in key order; K and \
    V are a JSON string when their bytes are UTF-8, else {\"hex\": \"…\"}. The last line is \
    {\"end\": true, \"tables\": T, \"entries\": N, \"lsn\": L}: `load` checks the counts, and \
    an input without it may be cut short.";

/// `dump`'s exit codes.
const DUMP_HELP: &str = "Exit codes:\n  \
    0  dumped\n  \
    1  a --table that does not exist (nothing is written)\n  \
    2  the command could not run: a wrong command line, no store at the path, a store another \
       process has open (a dump streams as it reads, so it takes no live snapshot: back the \
       store up with `keel db backup`, which does, and dump the copy), a damaged store, a \
       failed read or write (with --out FILE, FILE is then left as it was: the dump goes to a \
       temporary file renamed over it at the end)\n\n\
    A reader that closes stdout early (`keel db dump S | head`) ends it at once, quietly, with \
    exit 0.";

/// `load`'s exit codes.
const LOAD_HELP: &str = "The store's lock is held from the first line read to the last: the \
    input streams into the store in transactions of --batch entries (or --batch-bytes), each \
    durable when it commits; a line that cannot be loaded stops the load with every line before \
    it loaded and none after. Lines replace the values of keys the store holds already.\n\n\
    Exit codes:\n  \
    0  loaded, and the input ended with an end line whose counts match\n  \
    1  loaded, but the input did not end with an end line ({\"end\": true}): it may be cut \
       short\n  \
    2  the command could not run or stopped: a wrong command line, an input that cannot be \
       read, a malformed line or one the store refuses (the message names the line; every \
       line before it is loaded), an end line whose counts disagree with the lines before it, \
       a store another process has open, a damaged store, a failed write";

/// `backup`'s help and exit codes.
const BACKUP_HELP: &str = "The copy is logical: one read transaction's snapshot, every table \
    and entry of it written into a new store at DIR, which is then checkpointed, checked and \
    closed (its data file compact, with STORE's page and journal segment sizes). STORE is \
    opened read-only: nothing in it changes. A store another process has open is copied from \
    a live snapshot of it (every commit acknowledged before the command began, nothing not yet \
    durable; a note on stderr says so); when the writer's checkpoint reuses pages under the \
    copy, the partial copy is emptied out of DIR and a new snapshot copied, up to 12 times.\n\n\
    Exit codes:\n  \
    0  backed up\n  \
    2  the command could not run: a wrong command line, no store at STORE, DIR not empty (or \
       inside STORE), a damaged store, a failed read or write (DIR is then left without its \
       data file, so it never opens as a store: remove it)\n  \
    3  STORE is in use and no consistent snapshot of it could be copied in 12 attempts (try \
       again)";

/// `compact`'s help and exit codes.
const COMPACT_HELP: &str = "How: STORE is opened read-only (its lock is held throughout, so \
    nothing else changes it), copied logically into a sibling directory \
    .NAME.compact-PID on the same file system, every file and directory of the copy is \
    fsynced, then the two directories are swapped in one atomic rename (renameat2 with \
    RENAME_EXCHANGE; where the file system refuses it, two renames behind a marker file that \
    any later keel db command finishes), the parent directory is fsynced and the old store \
    removed. A crash at any step leaves STORE the old store or the new one, whole; the next \
    compact removes what an interrupted one left beside it (and says so). Needs free space \
    for the copy. It refuses a store another process has open: it must hold the store's lock \
    until the swap.\n\n\
    Exit codes:\n  \
    0  compacted (a leftover that could not be removed is a warning)\n  \
    2  the command could not run: a wrong command line, no store at STORE, a store another \
       process has open, a damaged store, a failed read or write (STORE is then the old \
       store, unchanged, unless the message says otherwise)";

/// How keys and values are written on the command line and printed.
const ENCODING: &str = "Keys and values are UTF-8 text unless --hex is given: then every key \
    and value, given or printed, is hex (two digits a byte, an optional 0x prefix on input); \
    with --key-hex only the keys given are hex (the way to name a key that is not UTF-8 and \
    still see its value as text). Any stored bytes print: as text, a \
    backslash prints as \\\\, and each byte of a control character (tab, line break, …) or \
    of invalid UTF-8 as \\xNN (two lowercase hex digits), so a line shows exactly which \
    bytes it holds; in --json a key or value is a string when it is UTF-8, else \
    {\"hex\": \"…\"}. docs/cli-db.md specifies both.";

#[derive(Subcommand, Debug)]
pub enum DbCommand {
    /// Create a store (a directory holding `data.keel`, `journal/` and
    /// `LOCK`), and any missing parent directories. On an existing store
    /// it does nothing and says so.
    #[command(after_help = EXIT_CODES)]
    Create(CreateArgs),
    /// Set KEY to VALUE (or to the bytes of --value-file) in a table
    /// (created if missing), replacing any value it had. Durable when the
    /// command returns: the commit is synced, then the store is
    /// checkpointed and closed.
    #[command(after_help = format!("{ENCODING}\n\n{EXIT_CODES}"))]
    Put(PutArgs),
    /// Print the value of KEY, escaped, and a newline (or its bytes as
    /// stored, alone, with --raw). Exit 1 when the key (or the table) does
    /// not exist.
    #[command(after_help = format!("{ENCODING}\n\n{EXIT_CODES}"))]
    Get(GetArgs),
    /// Delete KEY. Exit 1 when it did not exist (nothing is written then).
    /// Durable when the command returns, as `put`.
    #[command(after_help = format!("{ENCODING}\n\n{EXIT_CODES}"))]
    Del(KeyArgs),
    /// List a table's entries in key order, one `KEY<TAB>VALUE` line each
    /// (both escaped: neither holds a tab or a line break): all of them, a
    /// range (--from, --to) or those with a prefix (--prefix), at most
    /// --limit.
    #[command(after_help = format!("{ENCODING}\n\n{EXIT_CODES}"))]
    Scan(ScanArgs),
    /// List the store's tables, one name a line, sorted (escaped as keys
    /// are: a line break in a name prints as `\x0a`).
    #[command(after_help = EXIT_CODES)]
    Tables(ReadArgs),
    /// Print the store's figures: pages (in the file, free, waiting to be
    /// free), the tree (depth, nodes, entries), the page cache, the
    /// journal (files and bytes on disk), the last checkpoint, and the
    /// CPUs the store's background threads run on beside those taking the
    /// disk's interrupts.
    #[command(after_help = EXIT_CODES)]
    Stats(ReadArgs),
    /// Check the store without writing to it: open it read-only (recovery
    /// validates the meta pages, the journal and every page replay touches,
    /// and replays the journal in memory), then read every page the last
    /// checkpoint reaches and verify its checksum, the B+tree's order and
    /// balance, the overflow chains and the free list, and that every page
    /// is used exactly once. Exit 1, saying where, on damage (also damaged
    /// journal records the checkpoint covers); exit 0 with a note for the
    /// torn tail a crash leaves.
    #[command(after_help = EXIT_CODES)]
    Check(ReadArgs),
    /// Copy what a damaged store's files prove was committed into a new
    /// store at NEW (which must not exist, or be empty), and say exactly
    /// what could not be recovered. STORE is only read, never changed.
    #[command(after_help = SALVAGE_HELP)]
    Salvage(SalvageArgs),
    /// Write every table and entry (or those of --table) as JSON lines, from
    /// one read transaction: a consistent snapshot. STORE is opened
    /// read-only.
    #[command(after_help = format!("{DUMP_FORMAT}\n\n{DUMP_HELP}"))]
    Dump(DumpArgs),
    /// Read JSON lines written by `dump` into a store, created (with its
    /// directory) if missing, in bounded transactions.
    #[command(after_help = format!("{DUMP_FORMAT}\n\n{LOAD_HELP}"))]
    Load(LoadArgs),
    /// Copy the store into a new store at DIR (a new or empty directory):
    /// a consistent snapshot, every table byte for byte, checked.
    #[command(after_help = BACKUP_HELP)]
    Backup(BackupArgs),
    /// Rewrite the store into a fresh, compact data file and switch to it
    /// atomically, crash-safe at every step; print the sizes before and
    /// after.
    #[command(after_help = COMPACT_HELP)]
    Compact(StoreArgs),
}

impl DbCommand {
    /// Whether the command prints JSON.
    pub fn json(&self) -> bool {
        match self {
            DbCommand::Create(a) => a.out.json,
            DbCommand::Put(a) => a.keyed.out.json,
            DbCommand::Get(a) => a.key.keyed.out.json,
            DbCommand::Del(a) => a.keyed.out.json,
            DbCommand::Scan(a) => a.keyed.out.json,
            DbCommand::Tables(a) | DbCommand::Stats(a) | DbCommand::Check(a) => a.out.json,
            DbCommand::Compact(a) => a.out.json,
            DbCommand::Salvage(a) => a.out.json,
            DbCommand::Dump(a) => a.out.json,
            DbCommand::Load(a) => a.out.json,
            DbCommand::Backup(a) => a.out.json,
        }
    }
}

/// Output options every command has.
#[derive(Args, Debug, Clone, Copy, Default)]
pub struct Output {
    /// Print one JSON object on stdout instead of text (named fields; on
    /// an error, `{"error": …, "kind": …}`).
    #[arg(long)]
    pub json: bool,
}

/// The options of commands that take keys or values.
#[derive(Args, Debug, Clone)]
pub struct Keyed {
    /// The table (created by `put` if missing).
    #[arg(long, short = 't', value_name = "NAME", default_value = "default")]
    pub table: String,
    /// Keys and values are hex, on input and output.
    #[arg(long)]
    pub hex: bool,
    /// Keys given here (KEY, --from, --to, --prefix) are hex; values and
    /// what is printed are as without it (escaped text, or --json's
    /// strings and {"hex": …}): to name a key that is not UTF-8.
    #[arg(long, conflicts_with = "hex")]
    pub key_hex: bool,
    #[command(flatten)]
    pub out: Output,
}

impl Keyed {
    /// How keys given on the command line are read.
    pub fn key_encoding(&self) -> Encoding {
        Encoding::new(self.hex || self.key_hex)
    }
}

/// `--read-only`, on the commands that only read.
#[derive(Args, Debug, Clone, Copy, Default)]
pub struct ReadOnly {
    /// Open the store read-only: its data file and journal are not
    /// written, nor CLEAN (a store nobody has open is locked meanwhile,
    /// LOCK naming this process, as by any opener). Beside a process that
    /// has the store open, read a live snapshot of it, writing nothing at
    /// all: every commit acknowledged before
    /// the command began and nothing not yet durable, taken again when the
    /// writer's checkpoint changes what it read (exit 3 when no snapshot
    /// holds within the attempts). Without the flag a store in use is read
    /// so too, with a note on stderr; a store nobody has open is then
    /// opened as usual.
    #[arg(long)]
    pub read_only: bool,
}

/// A store, for a command that only reads it.
#[derive(Args, Debug)]
pub struct ReadArgs {
    /// The store directory.
    pub store: PathBuf,
    #[command(flatten)]
    pub ro: ReadOnly,
    #[command(flatten)]
    pub out: Output,
}

#[derive(Args, Debug)]
pub struct StoreArgs {
    /// The store directory.
    pub store: PathBuf,
    #[command(flatten)]
    pub out: Output,
}

#[derive(Args, Debug)]
pub struct CreateArgs {
    /// The store directory (created with its parents if missing).
    pub store: PathBuf,
    /// Page size of the data file: a power of two from 4K to 64K. An
    /// existing store keeps its own.
    #[arg(long, value_name = "SIZE", default_value = "4K")]
    pub page_size: Size,
    /// Size of each journal segment file; one transaction must fit in one
    /// segment. An existing store keeps its own.
    #[arg(long, value_name = "SIZE", default_value = "64M")]
    pub segment_size: Size,
    #[command(flatten)]
    pub out: Output,
}

#[derive(Args, Debug)]
pub struct PutArgs {
    /// The store directory (must hold a store: see `keel db create`).
    pub store: PathBuf,
    /// The key (at most about a quarter of a page: `keel db stats` prints
    /// the limit).
    pub key: String,
    /// The value (or --value-file).
    #[arg(required_unless_present = "value_file")]
    pub value: Option<String>,
    /// Take the value's bytes as they are from this file, or from standard
    /// input for `-` (binary values, values too long for a command line;
    /// --hex then applies to the key only).
    #[arg(long, value_name = "PATH", conflicts_with = "value")]
    pub value_file: Option<PathBuf>,
    #[command(flatten)]
    pub keyed: Keyed,
}

#[derive(Args, Debug)]
pub struct GetArgs {
    #[command(flatten)]
    pub key: KeyArgs,
    /// Print the value's bytes exactly as stored, with no newline (binary
    /// values, redirected to a file); --hex then applies to the key only.
    #[arg(long, conflicts_with = "json")]
    pub raw: bool,
    #[command(flatten)]
    pub ro: ReadOnly,
}

#[derive(Args, Debug)]
pub struct KeyArgs {
    /// The store directory.
    pub store: PathBuf,
    /// The key.
    pub key: String,
    #[command(flatten)]
    pub keyed: Keyed,
}

#[derive(Args, Debug)]
pub struct ScanArgs {
    /// The store directory.
    pub store: PathBuf,
    /// Start at this key (included).
    #[arg(long, value_name = "KEY", conflicts_with = "prefix")]
    pub from: Option<String>,
    /// Stop before this key (excluded).
    #[arg(long, value_name = "KEY", conflicts_with = "prefix")]
    pub to: Option<String>,
    /// Only keys that start with this.
    #[arg(long, value_name = "KEY")]
    pub prefix: Option<String>,
    /// List at most this many entries.
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    #[command(flatten)]
    pub keyed: Keyed,
    #[command(flatten)]
    pub ro: ReadOnly,
}

#[derive(Args, Debug)]
pub struct SalvageArgs {
    /// The damaged store directory (read, never changed).
    pub store: PathBuf,
    /// The new store's directory: created, or an existing empty one.
    #[arg(long, value_name = "NEW")]
    pub to: PathBuf,
    /// List at most this many changes of the journal records that were
    /// lost but are readable.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub max_lost_changes: usize,
    #[command(flatten)]
    pub out: Output,
}

#[derive(Args, Debug)]
pub struct DumpArgs {
    /// The store directory (opened read-only).
    pub store: PathBuf,
    /// Dump only this table (repeat for more); a table that does not exist
    /// is exit 1, before anything is written.
    #[arg(long, short = 't', value_name = "NAME")]
    pub table: Vec<String>,
    /// Write the dump to this file (replaced whole at the end, never left
    /// half written) instead of stdout; `-` is stdout.
    #[arg(long = "out", value_name = "FILE", default_value = "-")]
    pub file: PathBuf,
    #[command(flatten)]
    pub out: Output,
}

#[derive(Args, Debug)]
pub struct LoadArgs {
    /// The store directory: an existing store, or a new or empty directory
    /// (created with its parents if missing) where a store is created.
    pub store: PathBuf,
    /// Read the JSON lines from this file; `-` (the default) is standard
    /// input.
    #[arg(long = "in", value_name = "FILE", default_value = "-")]
    pub input: PathBuf,
    /// Commit after at most this many entries.
    #[arg(long, value_name = "N", default_value_t = keel::db::BULK_TXN_ENTRIES)]
    pub batch: usize,
    /// Commit before a transaction's journal record passes this many bytes
    /// (at most what the store's journal takes in one record).
    #[arg(long, value_name = "SIZE", default_value = "64M")]
    pub batch_bytes: Size,
    /// Page size of a new store (an existing store keeps its own).
    #[arg(long, value_name = "SIZE", default_value = "4K")]
    pub page_size: Size,
    /// Journal segment size of a new store (an existing store keeps its
    /// own).
    #[arg(long, value_name = "SIZE", default_value = "64M")]
    pub segment_size: Size,
    #[command(flatten)]
    pub out: Output,
}

#[derive(Args, Debug)]
pub struct BackupArgs {
    /// The store directory (opened read-only, never changed).
    pub store: PathBuf,
    /// The copy's directory: created with its parents, or an existing empty
    /// one.
    #[arg(long, value_name = "DIR")]
    pub to: PathBuf,
    #[command(flatten)]
    pub out: Output,
}
