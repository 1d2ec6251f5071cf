//! One run of the benchmark protocol (`docs/BENCH-PROTOCOL.md`) on one
//! engine, in a process of its own: `keel-bench run --engine E` followed by
//! the protocol's flags. Prints one JSON line on stdout.
//!
//! w1, w2, w3: the store is created in the run's directory (untimed), then
//! T threads pass a start barrier and commit — one transaction per commit
//! call, each durable when the call returns — until `--count` commits are
//! done or `--duration` is over. Keys of w1/w2 are 16 bytes (thread id and
//! sequence number, big-endian), w3's random; values are slices of an
//! incompressible random buffer filled before timing. The latency of a
//! commit is the wall time of the whole transaction (begin to commit).
//!
//! r1: `--count` random 16-byte keys with `--size`-byte values are loaded
//! in transactions of `--batch` puts (untimed), the store is **closed and
//! opened again** as a program starting up would (no warm-up reads: the
//! protocol times the reads from the start barrier on; the OS page cache
//! keeps what the load left in it, as it would for a program restarted on
//! the same machine), then T threads get random loaded keys, each get in a
//! read transaction of its own, for `--duration` seconds. Every get must
//! find its key and a value of `--size` bytes, whose last byte is summed.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use rand::{Rng, RngCore, SeedableRng};
use serde_json::json;

use crate::engines::{Engine, FjallSync, Kind, Put};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// N serial commits of one 16 KiB record.
    W1,
    /// T threads, one R-byte record per commit, for a duration.
    W2,
    /// N transactions of B puts (random 16-byte key + SIZE-byte value).
    W3,
    /// Point gets of N loaded keys, each in its own read transaction.
    R1,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::W1 => "w1",
            Workload::W2 => "w2",
            Workload::W3 => "w3",
            Workload::R1 => "r1",
        }
    }
}

/// `keel-bench run`: the protocol's flags, all of them, plus the engine.
#[derive(Args, Debug, Clone)]
#[command(after_help = "The protocol's invocation (docs/BENCH-PROTOCOL.md):\n  \
    keel-bench run --engine E --workload w1|w2|w3|r1 --threads T --size BYTES --count N \
    --duration SECS --dir DIR --batch B\n\
    Prints one JSON line on stdout: commits_per_s (r1: gets/s), p50_us, p99_us, p999_us, \
    max_us, total_ms, ms_per_commit, commits, ops, ops_per_s, info. A nonzero exit status and \
    an `error` field mark a failed run.")]
pub struct RunArgs {
    /// The engine to run.
    #[arg(long, value_enum)]
    pub engine: Kind,
    /// Workload: w1, w2, w3 or r1.
    #[arg(long, value_enum)]
    pub workload: Workload,
    /// Threads committing (r1: reading).
    #[arg(long)]
    pub threads: usize,
    /// Value bytes per put.
    #[arg(long)]
    pub size: usize,
    /// Commits in all (0: run for --duration); r1: keys loaded.
    #[arg(long)]
    pub count: u64,
    /// Seconds to run (0: do --count commits); r1: seconds of reads.
    #[arg(long)]
    pub duration: f64,
    /// Directory for the store's files (created if missing; should be
    /// empty). The store is made in DIR/<engine>, removed afterwards.
    #[arg(long)]
    pub dir: PathBuf,
    /// Puts per transaction (w3, and r1's load).
    #[arg(long)]
    pub batch: usize,
    /// fjall only: the journal sync each commit asks for (SyncAll or
    /// SyncData).
    #[arg(long, value_enum, default_value_t = FjallSync::All)]
    pub fjall_sync: FjallSync,
}

impl RunArgs {
    fn validate(&self) -> Result<()> {
        if self.threads == 0 || self.threads > 4096 {
            bail!("--threads must be between 1 and 4096");
        }
        if self.batch == 0 {
            bail!("--batch must be at least 1");
        }
        if self.size == 0 || self.size > 16 << 20 {
            bail!("--size must be between 1 and 16M bytes");
        }
        if !self.duration.is_finite() || self.duration < 0.0 {
            bail!("--duration must be a number of seconds ≥ 0");
        }
        if self.workload == Workload::R1 {
            if self.count == 0 || self.duration == 0.0 {
                bail!("r1 needs both --count (keys to load) and --duration (seconds of reads)");
            }
        } else if (self.count == 0) == (self.duration == 0.0) {
            bail!("give exactly one of --count N or --duration SECS (the other 0)");
        }
        Ok(())
    }
}

/// Run, print the JSON line, and say how it went on stderr.
pub fn main(a: RunArgs) -> std::process::ExitCode {
    a.fjall_sync.apply();
    match a.validate().and_then(|()| run(&a)) {
        Ok(out) => {
            eprintln!(
                "{} {} T={} size={}: {:.0} {}/s, p50 {:.0} µs, p99 {:.0} µs",
                a.engine.name(),
                a.workload.name(),
                a.threads,
                a.size,
                out["commits_per_s"].as_f64().unwrap_or(0.0),
                if a.workload == Workload::R1 {
                    "gets"
                } else {
                    "commits"
                },
                out["p50_us"].as_f64().unwrap_or(0.0),
                out["p99_us"].as_f64().unwrap_or(0.0),
            );
            println!("{out}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            println!("{}", json!({ "error": format!("{e:#}") }));
            std::process::ExitCode::FAILURE
        }
    }
}

/// Removes the store's directory when the run ends, however it ends.
struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(a: &RunArgs) -> Result<serde_json::Value> {
    std::fs::create_dir_all(&a.dir)
        .with_context(|| format!("creating --dir {}", a.dir.display()))?;
    let path = a.dir.join(a.engine.name());
    if path.exists() {
        bail!(
            "{} exists (left by an interrupted run?): remove it, or choose another --dir",
            path.display()
        );
    }
    let _cleanup = Cleanup(path.clone());
    let pool = ValuePool::new(a.size);
    if a.workload == Workload::R1 {
        return run_reads(a, &path, &pool);
    }
    let t0 = Instant::now();
    let engine = a.engine.open(&path, true)?;
    let setup_ms = ms(t0.elapsed());
    settle(&a.dir);
    let out = timed_commits(a, engine.as_ref(), &pool)?;
    let t1 = Instant::now();
    engine.close()?;
    let close_ms = ms(t1.elapsed());
    let mut info = json!({
        "engine": a.engine.name(),
        "settings": a.engine.settings(),
        "workload": a.workload.name(),
        "threads": a.threads,
        "size": a.size,
        "batch": a.batch,
        "before_timing": format!(
            "created a fresh store in {:.0} ms (nothing preallocated beyond what creating it \
             does), then syncfs on the file system",
            setup_ms
        ),
        "after_timing": format!("closed the store in {close_ms:.0} ms"),
        "close_ms": round(close_ms, 1),
        "commits_per_s_to_close": round(
            out.ops as f64 / (out.elapsed.as_secs_f64() + close_ms / 1e3).max(f64::MIN_POSITIVE),
            1
        ),
    });
    out.fill_info(&mut info);
    Ok(out.to_json(a, info))
}

/// r1: load (untimed), close, open again, timed gets.
fn run_reads(a: &RunArgs, path: &Path, pool: &ValuePool) -> Result<serde_json::Value> {
    let t0 = Instant::now();
    let engine = a.engine.open(path, true)?;
    let mut rng = rand::rngs::SmallRng::from_os_rng();
    let keys: Vec<[u8; 16]> = (0..a.count).map(|_| rng.random()).collect();
    {
        let mut w = engine.worker()?;
        let mut puts: Vec<Put<'_>> = Vec::with_capacity(a.batch);
        for (i, chunk) in keys.chunks(a.batch).enumerate() {
            puts.clear();
            for (j, k) in chunk.iter().enumerate() {
                puts.push((*k, pool.value((i * a.batch + j) as u64)));
            }
            w.commit(&puts)?;
        }
    }
    let load_ms = ms(t0.elapsed());
    let t1 = Instant::now();
    engine.close()?;
    let close_ms = ms(t1.elapsed());
    let t2 = Instant::now();
    let engine = a.engine.open(path, false)?;
    let open_ms = ms(t2.elapsed());
    let disk_bytes = dir_bytes(path);
    settle(&a.dir);
    let (out, sum) = timed_reads(a, engine.as_ref(), &keys)?;
    engine.close()?;
    let mut info = json!({
        "engine": a.engine.name(),
        "settings": a.engine.settings(),
        "workload": "r1",
        "threads": a.threads,
        "size": a.size,
        "batch": a.batch,
        "keys": a.count,
        "before_timing": format!(
            "created a fresh store, loaded {} random 16-byte keys with {}-byte values in {} \
             durable transactions of {} puts in {:.0} ms, closed it ({:.0} ms) and opened it \
             again ({:.0} ms) as a program starting would; no warm-up reads (the OS page cache \
             keeps what the load left in it); syncfs",
            a.count,
            a.size,
            a.count.div_ceil(a.batch as u64),
            a.batch,
            load_ms,
            close_ms,
            open_ms
        ),
        "load_ms": round(load_ms, 1),
        "reopen_ms": round(open_ms, 1),
        "store_bytes_on_disk": disk_bytes,
        "gets_per_read_txn": 1,
        "value_byte_sum": sum,
    });
    out.fill_info(&mut info);
    Ok(out.to_json(a, info))
}

/// Bytes of the files under `p` (a file or a directory tree).
fn dir_bytes(p: &Path) -> u64 {
    let Ok(m) = std::fs::metadata(p) else {
        return 0;
    };
    if !m.is_dir() {
        return m.len();
    }
    std::fs::read_dir(p)
        .map(|rd| rd.flatten().map(|e| dir_bytes(&e.path())).sum())
        .unwrap_or(0)
}

/// Flush the whole file system holding `dir` so that what setup wrote is
/// not flushed inside the timed region.
fn settle(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        use std::os::fd::AsRawFd;
        // SAFETY: syncfs takes an open descriptor, which `d` keeps open
        // for the call; it only flushes.
        unsafe { libc::syncfs(d.as_raw_fd()) };
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub fn round(x: f64, decimals: i32) -> f64 {
    let p = 10f64.powi(decimals);
    (x * p).round() / p
}

/// An incompressible random buffer, filled before timing; values are
/// slices of it at different offsets.
pub struct ValuePool {
    buf: Vec<u8>,
    size: usize,
}

const POOL_SLACK: usize = 1 << 20;

impl ValuePool {
    pub fn new(size: usize) -> ValuePool {
        let mut buf = vec![0u8; size + POOL_SLACK];
        rand::rngs::SmallRng::from_os_rng().fill_bytes(&mut buf);
        ValuePool { buf, size }
    }

    /// Value `i`: `size` bytes at an offset that depends on `i`.
    pub fn value(&self, i: u64) -> &[u8] {
        let slots = (POOL_SLACK / 64) as u64;
        let start = (i.wrapping_mul(0x9e37_79b9) % slots) as usize * 64;
        &self.buf[start..start + self.size]
    }
}

/// What a timed region measured.
struct Outcome {
    ops: u64,
    elapsed: Duration,
    latency: Histogram<u64>,
    cpu_us: f64,
}

impl Outcome {
    fn fill_info(&self, info: &mut serde_json::Value) {
        info["cpu_us"] = json!(round(self.cpu_us, 0));
        info["cpu_us_per_op"] = json!(round(self.cpu_us / self.ops.max(1) as f64, 2));
    }

    /// The protocol's JSON object.
    fn to_json(&self, a: &RunArgs, info: serde_json::Value) -> serde_json::Value {
        let secs = self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
        let us = |q: f64| round(self.latency.value_at_quantile(q) as f64 / 1e3, 1);
        let puts = if a.workload == Workload::R1 {
            self.ops
        } else {
            self.ops * a.batch as u64
        };
        json!({
            "commits_per_s": round(self.ops as f64 / secs, 1),
            "p50_us": us(0.5),
            "p99_us": us(0.99),
            "p999_us": us(0.999),
            "max_us": round(self.latency.max() as f64 / 1e3, 1),
            "total_ms": round(secs * 1e3, 2),
            "ms_per_commit": round(secs * 1e3 / self.ops.max(1) as f64, 4),
            "commits": self.ops,
            "ops": puts,
            "ops_per_s": round(puts as f64 / secs, 1),
            "info": info,
        })
    }
}

fn histogram() -> Histogram<u64> {
    // Nanoseconds up to 100 s (longer latencies count as 100 s), 3
    // significant figures, allocated before timing.
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid histogram bounds")
}

fn record(h: &mut Histogram<u64>, d: Duration) {
    h.saturating_record(d.as_nanos().min(u64::MAX as u128) as u64);
}

/// The process's CPU time so far, in µs.
fn cpu_us() -> f64 {
    // SAFETY: getrusage only writes into the zeroed struct we pass it.
    let u = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    us(u.ru_utime) + us(u.ru_stime)
}

/// What the threads of a timed region share.
struct Gate {
    barrier: Barrier,
    stop: AtomicBool,
    claimed: AtomicU64,
    failed: AtomicBool,
}

/// The timed region of w1/w2/w3: barrier, T committers, join.
fn timed_commits(a: &RunArgs, engine: &dyn Engine, pool: &ValuePool) -> Result<Outcome> {
    let gate = Gate {
        barrier: Barrier::new(a.threads + 1),
        stop: AtomicBool::new(false),
        claimed: AtomicU64::new(0),
        failed: AtomicBool::new(false),
    };
    timed(a, &gate, |t| commit_loop(a, engine, pool, t, &gate))
}

/// Run `body` on T threads after the start barrier; stop them after
/// `--duration` when there is one; gather their counts and latencies.
fn timed<F>(a: &RunArgs, gate: &Gate, body: F) -> Result<Outcome>
where
    F: Fn(usize) -> Result<(u64, Histogram<u64>)> + Sync,
{
    let mut started = Instant::now();
    let mut cpu0 = 0.0;
    let body = &body;
    let results: Vec<Result<(u64, Histogram<u64>)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..a.threads)
            .map(|t| {
                s.spawn(move || {
                    let r = body(t);
                    if r.is_err() {
                        gate.failed.store(true, Ordering::Relaxed);
                    }
                    r
                })
            })
            .collect();
        gate.barrier.wait();
        cpu0 = cpu_us();
        started = Instant::now();
        if a.duration > 0.0 {
            let end = started + Duration::from_secs_f64(a.duration);
            while Instant::now() < end && !gate.failed.load(Ordering::Relaxed) {
                std::thread::sleep((end - Instant::now()).min(Duration::from_millis(20)));
            }
            gate.stop.store(true, Ordering::Relaxed);
        }
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("a thread panicked")))
            })
            .collect()
    });
    let elapsed = started.elapsed();
    let cpu = cpu_us() - cpu0;
    let mut latency = histogram();
    let mut ops = 0;
    for r in results {
        let (n, h) = r?;
        ops += n;
        latency
            .add(&h)
            .map_err(|e| anyhow!("merging latencies: {e:?}"))?;
    }
    Ok(Outcome {
        ops,
        elapsed,
        latency,
        cpu_us: cpu,
    })
}

/// Committing thread `t`: its handle made before the start; then one
/// transaction per commit until the count is claimed, the time is up or a
/// thread failed.
fn commit_loop(
    a: &RunArgs,
    engine: &dyn Engine,
    pool: &ValuePool,
    t: usize,
    gate: &Gate,
) -> Result<(u64, Histogram<u64>)> {
    let made = engine.worker();
    // Every thread passes the barrier, failed or not, so that none waits
    // for ever.
    gate.barrier.wait();
    let mut w = made?;
    let mut rng = rand::rngs::SmallRng::from_os_rng();
    let mut lat = histogram();
    let mut puts: Vec<Put<'_>> = Vec::with_capacity(a.batch);
    let mut seq = 0u64;
    loop {
        if a.count > 0 {
            if gate.claimed.fetch_add(1, Ordering::Relaxed) >= a.count {
                break;
            }
        } else if gate.stop.load(Ordering::Relaxed) {
            break;
        }
        if gate.failed.load(Ordering::Relaxed) {
            break;
        }
        puts.clear();
        for p in 0..a.batch as u64 {
            let key: [u8; 16] = if a.workload == Workload::W3 {
                rng.random()
            } else {
                let mut k = [0u8; 16];
                k[..8].copy_from_slice(&(t as u64).to_be_bytes());
                k[8..].copy_from_slice(&seq.to_be_bytes());
                k
            };
            puts.push((key, pool.value(seq * a.batch as u64 + p + t as u64)));
        }
        let t0 = Instant::now();
        w.commit(&puts)
            .with_context(|| format!("commit {seq} of thread {t}"))?;
        record(&mut lat, t0.elapsed());
        seq += 1;
    }
    Ok((seq, lat))
}

/// The timed region of r1: T readers of random loaded keys. Returns the
/// outcome and the sum of the values' last bytes.
fn timed_reads(a: &RunArgs, engine: &dyn Engine, keys: &[[u8; 16]]) -> Result<(Outcome, u64)> {
    let gate = Gate {
        barrier: Barrier::new(a.threads + 1),
        stop: AtomicBool::new(false),
        claimed: AtomicU64::new(0),
        failed: AtomicBool::new(false),
    };
    let sum = AtomicU64::new(0);
    let out = timed(a, &gate, |_| {
        let made = engine.worker();
        gate.barrier.wait();
        let mut w = made?;
        let mut rng = rand::rngs::SmallRng::from_os_rng();
        let mut lat = histogram();
        let (mut gets, mut s) = (0u64, 0u64);
        while !gate.stop.load(Ordering::Relaxed) && !gate.failed.load(Ordering::Relaxed) {
            let key = &keys[rng.random_range(0..keys.len())];
            let t0 = Instant::now();
            let got = w.get(key)?;
            record(&mut lat, t0.elapsed());
            match got {
                Some((len, last)) if len == a.size => s = s.wrapping_add(u64::from(last)),
                Some((len, _)) => bail!("key {key:02x?} holds {len} bytes, not {}", a.size),
                None => bail!("a loaded key is missing: {key:02x?}"),
            }
            gets += 1;
        }
        sum.fetch_add(s, Ordering::Relaxed);
        Ok((gets, lat))
    })?;
    Ok((out, sum.load(Ordering::Relaxed)))
}
