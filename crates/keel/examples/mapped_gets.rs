//! Point lookups on a store many times larger than its page cache, read
//! through the memory map (`read_mapped(true)`, the default) and with
//! `pread` (`read_mapped(false)`), interleaved in one run.
//!
//! ```text
//! cargo run --release --example mapped_gets -- fill DIR [KEYS]
//! cargo run --release --example mapped_gets -- compare DIR [ROUNDS] [GETS] [CACHE_MIB]
//! cargo run --release --example mapped_gets -- gets DIR mapped|pread GETS [CACHE_MIB]
//! ```
//!
//! `fill` writes KEYS (default 2,000,000) keys of 8 bytes (a scrambled
//! counter) with 100-byte values. `compare` reopens the store ROUNDS
//! times (default 4) each way, alternating which goes first, and times
//! GETS random lookups (default 500,000) of keys present after as many to
//! warm up, with a page cache of CACHE_MIB (default 32). `gets` runs one
//! way only, for `perf stat -e instructions` (run it with two GETS
//! counts: the difference over the difference of GETS is the cost of one
//! lookup, without the open). Times are the thread's time on a CPU
//! (`/proc/thread-self/schedstat`), and the wall clock's. The data file stays in the OS page cache
//! (both ways read from it): this measures the CPU cost of a lookup, not
//! the disk.

use std::path::Path;
use std::time::Instant;

use keel::db::{Database, DbError, Durability};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn key(i: u64) -> [u8; 8] {
    // splitmix64: keys in no order, each once.
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)).to_be_bytes()
}

fn fill(dir: &Path, keys: u64) -> Result<(), DbError> {
    let db = Database::builder().cache_bytes(64 << 20).create(dir)?;
    let started = Instant::now();
    let batch = 20_000;
    for start in (0..keys).step_by(batch) {
        let mut w = db.begin_write()?;
        w.set_durability(Durability::Eventual);
        let mut t = w.open_table("t")?;
        for i in start..(start + batch as u64).min(keys) {
            t.insert(key(i), [(i % 251) as u8; 100])?;
        }
        w.commit()?;
    }
    db.close()?;
    let data = std::fs::metadata(dir.join(keel::db::DATA_FILE))
        .map(|m| m.len())
        .unwrap_or(0);
    eprintln!(
        "filled {keys} keys in {:.1} s; data file {} MiB",
        started.elapsed().as_secs_f64(),
        data >> 20
    );
    Ok(())
}

/// Open, warm up, time `gets` lookups; ns of CPU time per lookup.
fn gets(dir: &Path, mapped: bool, gets: u64, cache_mib: usize, keys: u64) -> Result<f64, DbError> {
    let db = Database::builder()
        .cache_bytes(cache_mib << 20)
        .read_mapped(mapped)
        .background_checkpoints(false)
        .open(dir)?;
    let r = db.begin_read();
    let t = r.open_table("t")?;
    let mut x = 0x2545_f491_4f6c_dd1du64 ^ u64::from(mapped);
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % keys
    };
    let mut sum = 0u64;
    for _ in 0..gets.min(500_000) {
        sum += t
            .get(key(next()))?
            .map_or(0, |v| u64::from(v.as_bytes()[0]));
    }
    let before = db.stats().cache;
    let started = Instant::now();
    let cpu_started = cpu_ns();
    for _ in 0..gets {
        let i = next();
        let v = t.get(key(i))?.expect("a key that was filled");
        sum += u64::from(v.as_bytes()[0]);
    }
    let cpu = (cpu_ns() - cpu_started) as f64 / gets as f64;
    let wall = started.elapsed().as_nanos() as f64 / gets as f64;
    let after = db.stats().cache;
    eprintln!(
        "{:>6}: {cpu:6.0} ns/get on CPU ({wall:.0} wall); hits {}, misses {}, in place {}, evictions {} (checksum {sum})",
        if mapped { "mapped" } else { "pread" },
        after.hits - before.hits,
        after.misses - before.misses,
        after.searched_in_place - before.searched_in_place,
        after.evictions - before.evictions,
    );
    drop(r);
    db.close()?;
    Ok(cpu)
}

/// Nanoseconds this thread has run on a CPU (`/proc/thread-self/schedstat`):
/// on a shared machine, less noisy than the wall clock.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn count_keys(dir: &Path) -> Result<u64, DbError> {
    let db = Database::open(dir)?;
    let r = db.begin_read();
    let n = r.open_table("t")?.len()?;
    drop(r);
    db.close()?;
    Ok(n)
}

fn crc_ns() -> f64 {
    let page = vec![0x5au8; 4096];
    let n = 200_000;
    let started = Instant::now();
    let mut c = 0u32;
    for _ in 0..n {
        c ^= crc32c::crc32c(std::hint::black_box(&page));
    }
    std::hint::black_box(c);
    started.elapsed().as_nanos() as f64 / n as f64
}

fn main() -> Result<(), DbError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: mapped_gets fill DIR [KEYS] | compare DIR [ROUNDS] [GETS] [CACHE_MIB] \
                 | gets DIR mapped|pread GETS [CACHE_MIB]";
    let (Some(cmd), Some(dir)) = (args.first(), args.get(1)) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let dir = Path::new(dir);
    let num = |i: usize, default: u64| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default);
    match cmd.as_str() {
        "fill" => fill(dir, num(2, 2_000_000))?,
        "compare" => {
            let (rounds, n, cache) = (num(2, 4), num(3, 500_000), num(4, 32) as usize);
            let keys = count_keys(dir)?;
            eprintln!("CRC32C of 4 KiB: {:.0} ns", crc_ns());
            let (mut m, mut p) = (Vec::new(), Vec::new());
            for round in 0..rounds {
                for mapped in [round % 2 == 0, round % 2 == 1] {
                    let ns = gets(dir, mapped, n, cache, keys)?;
                    if mapped { &mut m } else { &mut p }.push(ns);
                }
            }
            let median = |v: &mut Vec<f64>| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let (m, p) = (median(&mut m), median(&mut p));
            println!(
                "{keys} keys, {cache} MiB cache: mapped {m:.0} ns/get, pread {p:.0} ns/get \
                 on CPU (medians of {rounds}); pread/mapped {:.2}",
                p / m
            );
        }
        "gets" => {
            let mapped = match args.get(2).map(String::as_str) {
                Some("mapped") => true,
                Some("pread") => false,
                _ => {
                    eprintln!("{usage}");
                    std::process::exit(2);
                }
            };
            let keys = count_keys(dir)?;
            gets(dir, mapped, num(3, 1_000_000), num(4, 32) as usize, keys)?;
        }
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    }
    Ok(())
}
