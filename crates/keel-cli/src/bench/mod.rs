//! `keel bench …`: each subcommand reproduces one durable-write experiment.
//! [`report`] holds what they share: latency recording, the machine
//! description, tables, progress bars, file cleanup and plots.

pub mod commit;
pub mod journal;
pub mod methods;
pub mod mixed;
pub mod mmap;
pub mod report;
pub mod sizes;
pub mod store;

use std::process::ExitCode;

use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// The journal-method experiment: N commits of SIZE into a preallocated
    /// file, made durable with each write method (buffered, fsync,
    /// fdatasync, O_DSYNC, O_DIRECT, O_DIRECT|O_DSYNC, RWF_DSYNC, io_uring)
    Methods(methods::MethodsArgs),
    /// Throughput by write size (4 KiB … 16 MiB), buffered vs durable
    /// (O_DIRECT|O_DSYNC); with parallel writers, separate files, many
    /// threads
    Sizes(sizes::SizesArgs),
    /// Random 16 KiB reads and writes (60/40) over a file set of random
    /// data, O_DIRECT, N threads, with and without an fsync after every write
    Mixed(mixed::MixedArgs),
    /// The fill-random experiment's raw variants: 10,000 transactions of
    /// 100 puts written sequentially, as small writes, at random offsets,
    /// through a shared map (msync), and beside a read-only map
    Mmap(mmap::MmapArgs),
    /// The commit-benchmark protocol (docs/BENCH-PROTOCOL.md) on Keel's
    /// store (the default), its journal alone, or the raw floor: one JSON
    /// line on stdout
    Commit(commit::CommitArgs),
    /// The journal against the raw floor, interleaved: w1 and w2 at several
    /// thread counts and record sizes, medians of 3 rounds, ratios
    Journal(journal::JournalArgs),
    /// The store against the raw floor and the journal, interleaved: w3, w1
    /// and w2 (and r1 with --r1), medians of 3 rounds, ratios, and whether
    /// each of the store's targets is met
    Store(store::StoreArgs),
}

pub fn run(cmd: BenchCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        BenchCommand::Methods(args) => methods::run(args),
        BenchCommand::Sizes(args) => sizes::run(args),
        BenchCommand::Mixed(args) => mixed::run(args),
        BenchCommand::Mmap(args) => mmap::run(args),
        BenchCommand::Commit(args) => commit::run(args),
        BenchCommand::Journal(args) => journal::run(args),
        BenchCommand::Store(args) => store::run(args),
    }
}
