//! The store's memory under a steady load of scattered changes: rounds of
//! transactions of 100 random 100-byte puts (`Durability::Eventual`), the
//! process's resident memory and the store's counters printed every 5,000
//! rounds (and the peak resident memory so far). With `--small`: a 64 MiB page cache, 16/64 MiB of memtables
//! before a checkpoint / backpressure, folds written every 16 MiB of
//! changed pages, and 128 MiB that old readers may keep alive (defaults:
//! 256 MiB, 256 MiB / 1 GiB, 64 MiB, 1 GiB); with
//! `--hold-reader`, one read transaction is held open and read at every
//! report: when it has expired (`SnapshotTooOld`, the memory it kept
//! alive past `reader_pinned_bytes`) it is dropped and a new one begun.
//!
//! ```text
//! cargo run --release --example store_memory -- [ROUNDS] [--small] [--hold-reader]
//! ```
//!
//! Uses mimalloc, as the `keel` binary does. Linux only (`/proc/self/statm`).

use keel::db::{Database, DbError, Durability};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn rss_mib() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| (pages * 4096) >> 20)
}

/// The most the process was resident (`VmHWM`), MiB.
fn peak_mib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib >> 10)
}

fn main() -> Result<(), DbError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rounds: u32 = args.iter().find_map(|a| a.parse().ok()).unwrap_or(30_000);
    let small = args.iter().any(|a| a == "--small");
    let hold = args.iter().any(|a| a == "--hold-reader");
    let dir = std::env::temp_dir().join(format!("keel-store-memory-{}", std::process::id()));
    let mut builder = Database::builder();
    if small {
        builder = builder
            .cache_bytes(64 << 20)
            .checkpoint_dirty_bytes(16 << 20)
            .backpressure_dirty_bytes(64 << 20)
            .fold_bytes(16 << 20)
            .reader_pinned_bytes(128 << 20);
    }
    let db = builder.create(&dir)?;
    let w = db.begin_write()?;
    w.open_table("t")?;
    w.commit()?;
    let mut reader = hold.then(|| db.begin_read());
    let mut rng = 1u64;
    println!("{rounds} rounds of 100 random puts; small budgets: {small}; a reader held: {hold}");
    for round in 1..=rounds {
        let mut w = db.begin_write()?;
        w.set_durability(Durability::Eventual);
        let mut t = w.open_table("t")?;
        for _ in 0..100 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            t.insert(rng.to_be_bytes(), [7u8; 100])?;
        }
        w.commit()?;
        if round % 5000 == 0 || round == rounds {
            let mut held = "";
            if let Some(r) = &reader {
                held = match r.open_table("t").and_then(|t| t.get(1u64.to_be_bytes())) {
                    Ok(_) => ", the held reader reads",
                    Err(DbError::SnapshotTooOld { .. }) => ", the held reader expired: begun again",
                    Err(e) => return Err(e),
                };
                if held.ends_with("again") {
                    reader = Some(db.begin_read());
                }
            }
            let s = db.stats();
            println!(
                "round {round:>6}: rss {:>5} MiB (peak {:>5}), memtables {:>4} MiB, cache {:>4} MiB, {:>3} checkpoints, {:>7} pages in the file, pinned by readers {:>4} MiB{held}",
                rss_mib(),
                peak_mib(),
                s.dirty_bytes >> 20,
                s.cache.cached_bytes >> 20,
                s.checkpoints,
                s.page_count,
                s.reader_pinned_bytes >> 20,
            );
        }
    }
    drop(reader);
    db.close()?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
