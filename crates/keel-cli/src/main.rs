//! `keel`: measure a disk's durable-write cost, check that it keeps its
//! promises, and use a Keel store by hand.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

// First, so that its `outln!`, `out!` and `errln!` (which never panic on a
// closed stdout or stderr) are in scope in every module after it.
#[macro_use]
mod out;

mod bench;
mod db;
mod diskcheck;
mod journal;
mod probe;
mod util;

#[derive(Parser, Debug)]
#[command(
    name = "keel",
    version,
    about = "Durable storage toolkit: how fast can this disk make a commit durable, does it keep \
             acknowledged writes, and a journal/store that commits at that floor"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run first: short versions of every bench here, then which write
    /// method, preallocation and write size Keel's journal should use, and
    /// whether flushes may be ignored
    Probe(probe::ProbeArgs),
    /// Benchmarks of durable-write methods and of Keel itself.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Check that a disk keeps the writes it acknowledged (diskchecker.pl).
    #[command(subcommand)]
    Diskcheck(diskcheck::DiskcheckCommand),
    /// Look inside a journal directory (read-only): list it, or check it
    /// for corruption.
    #[command(subcommand)]
    Journal(journal::JournalCommand),
    /// Use a store by hand: create it, put, get, delete and scan keys,
    /// list its tables, print its figures, check it for damage, salvage a
    /// damaged one, dump and load it as JSON lines, back it up, compact it.
    #[command(subcommand)]
    Db(db::DbCommand),
}

/// The store allocates and frees a page-sized node copy for every node a
/// transaction changes. With mimalloc instead of glibc's malloc, w3 (10,000
/// transactions of 100 random puts) ran 1.6x faster here: 2,066-2,117
/// against 1,311 transactions/s, interleaved in one session (glibc's
/// malloc spent its time trimming and re-faulting memory and in its
/// binned allocator). A program embedding `keel` chooses its own
/// allocator; docs/store.md gives the figures.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (its position in `mi_option_e`, the
/// same in mimalloc 2 and 3; the Rust bindings name no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Never hand freed memory back to the kernel. By default mimalloc purges
/// pages that stay free for 10 ms, and the store's commits free and
/// allocate node copies and record buffers all the time: the pages came
/// back as fresh transparent huge pages, each zeroed by the kernel (2 MiB
/// a time). Without purging, w1 (4,096 commits of one 16 KiB value) ran
/// at 5,070 against 4,204 commits/s, CPU 71 against 106 µs per commit
/// (medians of 3, interleaved, 2026-11-23). The cost: a process keeps the
/// peak of what it allocated until it exits, which suits a command line.
fn tune_allocator() {
    // SAFETY: sets one of mimalloc's options; any value is valid for
    // `purge_delay` (-1: never purge), and it is set before any thread
    // but this one exists.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
}

fn main() -> ExitCode {
    tune_allocator();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Probe(args) => probe::run(args),
        Command::Bench(cmd) => bench::run(cmd),
        Command::Diskcheck(cmd) => diskcheck::run(cmd),
        Command::Journal(cmd) => journal::run(cmd),
        Command::Db(cmd) => db::run(cmd),
    };
    match result {
        Ok(code) => code,
        // The reader of stdout went away (`keel … | head`): it has all it
        // wants, so the command stopped where it was, quietly.
        Err(e) if out::closed_stdout(&e) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
