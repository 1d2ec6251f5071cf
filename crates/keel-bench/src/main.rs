//! `keel-bench`: Keel's store against RocksDB, LMDB, SQLite, redb and
//! fjall on the benchmark protocol's workloads (`docs/BENCH-PROTOCOL.md`),
//! every commit durable when it returns. See README.md.
//!
//! `keel-bench [OPTIONS]` runs the comparison: every (workload, threads,
//! engine) cell in every round, interleaved, each run a `keel-bench run`
//! process of its own in a fresh directory; then the medians.
//! `keel-bench run --engine E <the protocol's flags>` is one run, and
//! speaks the protocol (one JSON line on stdout), so an outside harness
//! can drive each engine too.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod compare;
mod engines;
mod machine;
mod run;

/// The allocator of every engine's Rust side (C engines allocate with
/// their own malloc): mimalloc with its defaults, as the `keel` binary
/// uses (Keel's docs measured glibc's malloc slowing the store's commits).
/// One binary, so the same for every engine.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "keel-bench",
    version,
    about = "Keel's store against RocksDB, LMDB, SQLite, redb and fjall: the benchmark \
             protocol's workloads (w1, w2, w3, r1), every commit durable, interleaved rounds, \
             medians",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    compare: compare::CompareArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// One run of the protocol on one engine (what the comparison runs for
    /// each cell): prints one JSON line on stdout.
    Run(run::RunArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Run(a)) => run::main(a),
        None => match compare::run(cli.compare) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::FAILURE
            }
        },
    }
}
