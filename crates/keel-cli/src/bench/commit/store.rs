//! `--engine store`: the protocol on Keel's store (`keel::db`), with the
//! store's default options.
//!
//! **w1, w2, w3.** A commit is one write transaction: `begin_write`,
//! `open_table("bench")`, the puts (the same keys and values as the other
//! engines: w1/w2 the thread id and sequence number, w3 random keys), then
//! `commit`, which returns once the transaction's journal record is durable
//! (`Durability::Immediate`, the default). The latency of a commit is the
//! whole transaction, from `begin_write` to `commit`'s return. The
//! transaction is blind (it reads nothing): `begin_write` does not wait for
//! the writer slot, `commit` queues the transaction, and the committer
//! holding the slot commits the queued ones together (`keel::db`,
//! `WriteTxn`); a committer waits for the slot, or for its group's leader,
//! and for the journal, but not for later commits.
//!
//! **What runs serially.** A group's leader holds the writer slot while it
//! replays, encodes, submits and applies its transactions; only the wait
//! for the journal comes after. `info` splits each commit into:
//! `begin_wait` (`begin_write`: backpressure only), building the
//! transaction (`build`: the puts into the transaction's blind list), and
//! the slot's time per commit (`commit_writer`, the store's
//! `Stats::commit_writer_ms`). `commit_writer` is the serial time per
//! commit, which bounds commits/s at any T. The rest of the commit call
//! (`commit_wait`) is waiting for the slot or the group's leader, for the
//! journal's write and the publication to readers.
//!
//! **r1.** Loads `--count` random keys in transactions of `--batch` puts
//! (untimed), checkpoints, then T threads each get random loaded keys, each
//! get in a read transaction of its own (`begin_read`, `open_table`, `get`,
//! drop), until `--duration` is over. Every get must find its key and a
//! value of `--size` bytes, whose last byte it adds to a sum.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use anyhow::{anyhow, bail, Context};
use keel::db::{Database, Options, Stats};
use keel::journal::JournalOptions;
use rand::Rng;
use serde_json::json;

use super::{
    journal_bytes_to_prepare, round, rusage, settle, steal_ms, timed, Committer, Outcome, Spec,
    ValuePool, Workload,
};
use crate::bench::report::{BenchTree, LatencyRecorder};
use crate::util::{format_size, format_size_approx};

/// The table every workload writes and reads.
const TABLE: &str = "bench";

/// The store directory inside `--dir`, removed afterwards.
const STORE_DIR: &str = "keel-bench-store";

/// Bytes of the store's journal record for a transaction of `batch` puts
/// of a 16-byte key and a `size`-byte value (`docs/format.md`, the store's
/// records): a type byte, then per put an op byte, a `u16` key length and a
/// `u32` value length, the table's 4-byte id before the key, the value.
/// Checked against the store at setup.
pub(super) fn record_bytes(batch: usize, size: usize) -> usize {
    1 + batch * (1 + 2 + 4 + 4 + 16 + size)
}

/// Per thread: nanoseconds spent in each part of its commits.
#[derive(Default)]
#[repr(align(128))]
struct Timers {
    begin_ns: AtomicU64,
    build_ns: AtomicU64,
    commit_ns: AtomicU64,
}

struct StoreCommitter {
    db: Database,
    timers: Vec<Timers>,
}

impl Committer for StoreCommitter {
    fn commit(&self, thread: usize, record: &[u8], value_bytes: usize) -> anyhow::Result<()> {
        let t0 = Instant::now();
        let txn = self.db.begin_write()?;
        let t1 = Instant::now();
        {
            let mut table = txn.open_table(TABLE)?;
            for put in record.chunks_exact(16 + value_bytes) {
                let (key, value) = put.split_at(16);
                table.insert(key, value)?;
            }
        }
        let t2 = Instant::now();
        txn.commit()?;
        let t3 = Instant::now();
        let t = &self.timers[thread];
        let ns = |a: Instant, b: Instant| (b - a).as_nanos() as u64;
        t.begin_ns.fetch_add(ns(t0, t1), Ordering::Relaxed);
        t.build_ns.fetch_add(ns(t1, t2), Ordering::Relaxed);
        t.commit_ns.fetch_add(ns(t2, t3), Ordering::Relaxed);
        Ok(())
    }
}

/// A fresh store in `dir` with default options (the journal's write method
/// aside, when `--method` names one), and its table created.
fn create(spec: &Spec, dir: &Path) -> anyhow::Result<(Database, BenchTree, Options)> {
    let sdir = dir.join(STORE_DIR);
    if sdir.exists() {
        bail!(
            "{} exists (left by an interrupted run?): remove it, or choose another --dir",
            sdir.display()
        );
    }
    let guard = BenchTree::new(sdir.clone());
    let journal = JournalOptions {
        method: spec.method,
        ..JournalOptions::default()
    };
    let mut builder = Database::builder()
        .journal(journal)
        .background_cpus(spec.background_cpus.clone());
    if let Some(b) = spec.store.cache_size {
        builder = builder.cache_bytes(b.bytes() as usize);
    }
    if let Some(b) = spec.store.checkpoint_dirty {
        builder = builder.checkpoint_dirty_bytes(b.bytes());
    }
    if let Some(b) = spec.store.backpressure_dirty {
        builder = builder.backpressure_dirty_bytes(b.bytes());
    }
    let options = builder.options().clone();
    let db = builder
        .create(&sdir)
        .with_context(|| format!("creating a store in {}", sdir.display()))?;
    let txn = db.begin_write()?;
    txn.open_table(TABLE)?;
    txn.commit()?;
    // The record size this module states, against the store's own count.
    let txn = db.begin_write()?;
    txn.open_table(TABLE)?
        .insert([0u8; 16], vec![0u8; spec.size])?;
    let actual = txn.record_bytes()?;
    txn.abort();
    if actual != record_bytes(1, spec.size) {
        bail!(
            "the store's record for one put is {actual} bytes, not the {} this benchmark expects",
            record_bytes(1, spec.size)
        );
    }
    Ok((db, guard, options))
}

/// The store's options (the defaults unless a flag set them), as `info`
/// reports them.
fn options_json(db: &Database, spec: &Spec, o: &Options) -> serde_json::Value {
    json!({
        "page_bytes": db.stats().page_size,
        "cache_bytes": o.cache_bytes,
        "checkpoint_journal_bytes": o.checkpoint_journal_bytes,
        "checkpoint_interval_s": o.checkpoint_interval.map(|d| d.as_secs_f64()),
        "backpressure_journal_bytes": o.backpressure_journal_bytes,
        "checkpoint_dirty_bytes": o.checkpoint_dirty_bytes,
        "backpressure_dirty_bytes": o.backpressure_dirty_bytes,
        "fold_bytes": o.fold_bytes,
        "reader_pinned_bytes": o.reader_pinned_bytes,
        "background_checkpoints": o.background_checkpoints,
        "background_nice": o.background_nice,
        "background_cpus": spec.background_cpus.name(),
        "paced_checkpoints": o.paced_checkpoints,
        "segment_bytes": db.journal().options().segment_size_bytes,
        "durability": "immediate",
    })
}

/// What changed in the store's counters during the timed region.
fn stats_json(before: &Stats, after: &Stats) -> serde_json::Value {
    let (j0, j1) = (&before.journal, &after.journal);
    let writes = j1.writes - j0.writes;
    json!({
        "background_cpus": after.background_cpus,
        "disk_interrupt_cpus": after.disk_interrupt_cpus,
        "checkpoints": after.checkpoints - before.checkpoints,
        "checkpoint_pages": after.checkpoint_pages - before.checkpoint_pages,
        "checkpoint_ms": round(after.checkpoint_ms - before.checkpoint_ms, 1),
        "fold_parts": after.fold_parts - before.fold_parts,
        "backpressure_waits": after.backpressure_waits - before.backpressure_waits,
        "backpressure_checkpoints": after.backpressure_checkpoints - before.backpressure_checkpoints,
        "store_commits": after.commits - before.commits,
        "direct_commits": after.direct_commits - before.direct_commits,
        "commit_groups": after.commit_groups - before.commit_groups,
        "commits_per_group": round(
            (after.grouped_commits - before.grouped_commits) as f64
                / (after.commit_groups - before.commit_groups).max(1) as f64,
            2
        ),
        "writes": writes,
        "records_per_write": round((j1.records - j0.records) as f64 / writes.max(1) as f64, 2),
        "bytes_written": j1.bytes_written - j0.bytes_written,
        "rollovers": j1.rollovers - j0.rollovers,
        "segments_recycled": j1.segments_recycled - j0.segments_recycled,
        "segments_prepared_during_run": j1.segments_created - j0.segments_created,
        "cache_hits": after.cache.hits - before.cache.hits,
        "cache_misses": after.cache.misses - before.cache.misses,
        "cache_evictions": after.cache.evictions - before.cache.evictions,
        "overlap": overlap_json(before, after),
        "runs": {
            "commits": after.run_commits - before.run_commits,
            "inserted_by_committers": after.run_commits_by_committers - before.run_commits_by_committers,
            "apply_us_per_commit": round(
                (after.run_apply_ms - before.run_apply_ms) * 1e3
                    / (after.run_commits - before.run_commits).max(1) as f64,
                1
            ),
        },
    })
}

/// The legs of the lone large commits whose journal write and memtable
/// apply ran side by side (`Stats::overlapped_commits`): µs per such
/// commit, and how many took over 1 ms.
fn overlap_json(before: &Stats, after: &Stats) -> serde_json::Value {
    let commits = after.overlapped_commits - before.overlapped_commits;
    let per_commit_us = |ms: f64| round(ms * 1e3 / commits.max(1) as f64, 1);
    json!({
        "commits": commits,
        "write_us_per_commit": per_commit_us(after.overlapped_write_ms - before.overlapped_write_ms),
        "apply_us_per_commit": per_commit_us(after.overlapped_apply_ms - before.overlapped_apply_ms),
        "writes_over_1ms": after.slow_overlapped_writes - before.slow_overlapped_writes,
        "applies_over_1ms": after.slow_overlapped_applies - before.slow_overlapped_applies,
        "applied_after_write": after.applied_after_write - before.applied_after_write,
    })
}

/// One run on the store.
pub(super) fn run(spec: &Spec, dir: &Path, pool: &ValuePool) -> anyhow::Result<Outcome> {
    if spec.workload == Workload::R1 {
        return run_reads(spec, dir, pool);
    }
    let t0 = Instant::now();
    let (db, _guard, options) = create(spec, dir)?;
    let expected_bytes = journal_bytes_to_prepare(spec);
    let prepared = db.journal().preallocate(expected_bytes)?;
    let setup_ms = t0.elapsed().as_secs_f64() * 1e3;
    let c = StoreCommitter {
        db,
        timers: (0..spec.threads).map(|_| Timers::default()).collect(),
    };
    let before = c.db.stats();
    settle(dir);
    let anon = AnonSampler::start();
    let stop_readers = AtomicBool::new(false);
    let (out, reader_gets) = std::thread::scope(|s| {
        let readers: Vec<_> = (0..spec.store.readers)
            .map(|_| s.spawn(|| read_until(&c.db, &stop_readers)))
            .collect();
        let out = timed(spec, pool, &c);
        stop_readers.store(true, Ordering::Relaxed);
        let gets: anyhow::Result<u64> = readers
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("a reader panicked")))
            })
            .sum();
        (out, gets)
    });
    let (mut out, reader_gets) = (out?, reader_gets?);
    let after = c.db.stats();
    let mut info = json!({
        "engine": "store",
        "method": c.db.journal().method().name(),
        "workload": spec.workload.name(),
        "threads": spec.threads,
        "size": spec.size,
        "batch": spec.batch,
        "record_bytes": spec.record_bytes(),
        "table": TABLE,
        "options": options_json(&c.db, spec, &options),
        "before_timing": format!(
            "created a fresh store ({} options) and its table (one commit), and \
             prepared {} journal segment(s) of {} for {} of records (zero-filled, header \
             written, synced), in {:.0} ms",
            if spec.store.args().is_empty() { "default" } else { "the given" },
            1 + c.db.journal().options().spare_segments + prepared,
            format_size(c.db.journal().options().segment_size_bytes),
            format_size_approx(expected_bytes),
            setup_ms
        ),
        "durable": "each commit returns once its journal record is durable (Durability::Immediate): \
                    the journal's O_DIRECT|O_DSYNC write (or write + fdatasync) of its batch; \
                    checkpoints write the data file in the background",
    });
    merge(&mut info, timings_json(&c, &before, &after, out.commits));
    merge(&mut info, stats_json(&before, &after));
    if spec.store.readers > 0 {
        info["readers"] = json!(spec.store.readers);
        info["reader_gets_per_s"] = json!(round(
            reader_gets as f64 / out.elapsed.as_secs_f64().max(f64::MIN_POSITIVE),
            0
        ));
    }
    // The close: its final checkpoint, taken explicitly so that its pages
    // count in the bytes written, then the close itself.
    let t1 = Instant::now();
    c.db.checkpoint()?;
    let last = c.db.stats();
    c.db.close()?;
    let close = t1.elapsed();
    let peak_anon = anon.stop();
    merge(
        &mut info,
        costs_json(
            spec,
            &out,
            &before,
            &last,
            close,
            peak_anon,
            &dir.join(STORE_DIR),
        ),
    );
    info["after_timing"] = json!(format!(
        "checkpointed and closed the store in {:.0} ms (close_ms; commits_per_s_to_close \
         counts it)",
        close.as_secs_f64() * 1e3
    ));
    out.info = info;
    Ok(out)
}

/// What the run cost, counted to the close: memory, bytes written and
/// their ratio to the user's bytes, the files' sizes, the checkpoints.
fn costs_json(
    spec: &Spec,
    out: &Outcome,
    before: &Stats,
    last: &Stats,
    close: std::time::Duration,
    peak_anon: u64,
    sdir: &Path,
) -> serde_json::Value {
    let user_bytes = out.commits * (spec.batch * (16 + spec.size)) as u64;
    let journal_written = last.journal.bytes_written - before.journal.bytes_written;
    let data_written = (last.checkpoint_pages - before.checkpoint_pages) * last.page_size as u64;
    json!({
        "close_ms": round(close.as_secs_f64() * 1e3, 1),
        "commits_per_s_to_close": round(
            out.commits as f64 / (out.elapsed + close).as_secs_f64().max(f64::MIN_POSITIVE),
            1
        ),
        "peak_rss_bytes": peak_rss_bytes(),
        "peak_anon_bytes": peak_anon,
        "user_bytes": user_bytes,
        "journal_bytes_written": journal_written,
        "data_bytes_written": data_written,
        "write_amplification": round(
            (journal_written + data_written) as f64 / user_bytes.max(1) as f64,
            2
        ),
        "data_file_bytes": disk_bytes(&sdir.join(keel::db::DATA_FILE)),
        "journal_dir_bytes": disk_bytes(&sdir.join(keel::db::JOURNAL_DIR)),
        "checkpoints_to_close": last.checkpoints - before.checkpoints,
        "checkpoint_ms_to_close": round(last.checkpoint_ms - before.checkpoint_ms, 1),
    })
}

/// Point gets of random keys, each in a read transaction of its own,
/// until `stop`: the gets done.
fn read_until(db: &Database, stop: &AtomicBool) -> anyhow::Result<u64> {
    let mut rng = rand::rng();
    let mut gets = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let read = db.begin_read();
        let table = read.open_table(TABLE)?;
        let key: [u8; 16] = rng.random();
        std::hint::black_box(table.get(key)?);
        gets += 1;
    }
    Ok(gets)
}

/// A memory field of `/proc/self/status` (`VmHWM`, `RssAnon`), bytes; 0
/// where it does not say.
fn status_bytes(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with(field))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib << 10)
}

/// The process's peak resident memory (`VmHWM`), bytes.
fn peak_rss_bytes() -> u64 {
    status_bytes("VmHWM:")
}

/// The process's anonymous resident memory (`RssAnon`), bytes.
fn anon_bytes() -> u64 {
    status_bytes("RssAnon:")
}

/// The most anonymous memory the process held, sampled every 20 ms:
/// `VmHWM` also counts the data file's pages read through the store's
/// map, which are the kernel's page cache (reclaimable), not the store's
/// memory.
struct AnonSampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl AnonSampler {
    fn start() -> AnonSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut peak = anon_bytes();
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(20));
                peak = peak.max(anon_bytes());
            }
            peak
        });
        AnonSampler { stop, thread }
    }

    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or(0).max(anon_bytes())
    }
}

/// Bytes allocated on disk to a file, or to the files of a directory.
fn disk_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.blocks() * 512;
    }
    std::fs::read_dir(path).map_or(0, |entries| {
        entries
            .flatten()
            .map(|e| e.metadata().map_or(0, |m| m.blocks() * 512))
            .sum()
    })
}

/// Where the timed run's commits spent their time, per commit: the
/// committers' own timers (begin, build, the whole commit call) and the
/// store's writer-slot time between the `before` and `after` stats.
fn timings_json(
    c: &StoreCommitter,
    before: &Stats,
    after: &Stats,
    commits: u64,
) -> serde_json::Value {
    let per_commit_us = |ns: u64| round(ns as f64 / 1e3 / commits.max(1) as f64, 2);
    let sum = |f: fn(&Timers) -> &AtomicU64| -> u64 {
        c.timers.iter().map(|t| f(t).load(Ordering::Relaxed)).sum()
    };
    let (begin_ns, build_ns, commit_ns) = (
        sum(|t| &t.begin_ns),
        sum(|t| &t.build_ns),
        sum(|t| &t.commit_ns),
    );
    let writer_ns = ((after.commit_writer_ms - before.commit_writer_ms) * 1e6) as u64;
    json!({
        "begin_wait_us_per_commit": per_commit_us(begin_ns),
        "build_us_per_commit": per_commit_us(build_ns),
        "commit_writer_us_per_commit": per_commit_us(writer_ns),
        "serial_us_per_commit": per_commit_us(writer_ns),
        "commit_call_us_per_commit": per_commit_us(commit_ns),
        "commit_wait_us_per_commit": per_commit_us(commit_ns.saturating_sub(writer_ns)),
        "serial": "serial_us = commit_writer: the writer slot's time per commit (a group's \
                   leader replays each blind transaction, encodes, submits, applies to the tree \
                   while the journal writes); build = the puts into the transaction's blind \
                   list, no slot held; commit_wait = the rest of the commit call (waiting for the \
                   slot or the group's leader, for the journal, publishing); begin_wait = \
                   begin_write (backpressure only); a direct commit (direct_commits) inserts its \
                   own puts without the slot, so it adds nothing to serial_us",
    })
}

fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
    if let (Some(a), serde_json::Value::Object(b)) = (into.as_object_mut(), from) {
        a.extend(b);
    }
}

/// r1: load, checkpoint, then timed point reads.
fn run_reads(spec: &Spec, dir: &Path, pool: &ValuePool) -> anyhow::Result<Outcome> {
    let t0 = Instant::now();
    let (db, _guard, options) = create(spec, dir)?;
    let mut rng = rand::rng();
    let keys: Vec<[u8; 16]> = (0..spec.count).map(|_| rng.random()).collect();
    for (i, chunk) in keys.chunks(spec.batch).enumerate() {
        let txn = db.begin_write()?;
        let mut table = txn.open_table(TABLE)?;
        for (j, k) in chunk.iter().enumerate() {
            table.insert(k, pool.value((i * spec.batch + j) as u64, spec.size))?;
        }
        txn.commit()?;
    }
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    let load_checkpoints = db.stats().checkpoints;
    let t1 = Instant::now();
    db.checkpoint()?;
    let checkpoint_ms = t1.elapsed().as_secs_f64() * 1e3;
    let tree = db.tree_stats()?;
    let before = db.stats();
    settle(dir);
    let (mut out, byte_sum) = timed_reads(spec, &db, &keys)?;
    let after = db.stats();
    let mut info = json!({
        "engine": "store",
        "method": db.journal().method().name(),
        "workload": "r1",
        "threads": spec.threads,
        "size": spec.size,
        "batch": spec.batch,
        "keys": spec.count,
        "table": TABLE,
        "options": options_json(&db, spec, &options),
        "before_timing": format!(
            "created a fresh store with default options, loaded {} random 16-byte keys with \
             {}-byte values in {} transactions of {} puts in {:.0} ms ({:.0} puts/s, {} \
             checkpoint(s) meanwhile), then checkpointed in {:.0} ms; not reopened: the page \
             cache keeps what the load left in it",
            spec.count,
            spec.size,
            spec.count.div_ceil(spec.batch as u64),
            spec.batch,
            load_ms,
            spec.count as f64 / (load_ms / 1e3),
            load_checkpoints,
            checkpoint_ms
        ),
        "load_ms": round(load_ms, 1),
        "load_checkpoint_ms": round(checkpoint_ms, 1),
        "tree_depth": tree.depth,
        "tree_leaves": tree.leaves,
        "tree_branches": tree.branches,
        "data_file_pages": after.page_count,
        "gets_per_read_txn": 1,
        "value_byte_sum": byte_sum,
        "durable": "reads only: each get in a read transaction of its own (begin_read, \
                    open_table, get), the value's last byte summed",
    });
    merge(&mut info, stats_json(&before, &after));
    drop(db);
    out.info = info;
    Ok(out)
}

/// The timed region of r1: barrier, T readers, join.
fn timed_reads(spec: &Spec, db: &Database, keys: &[[u8; 16]]) -> anyhow::Result<(Outcome, u64)> {
    let barrier = Barrier::new(spec.threads + 1);
    let stop = AtomicBool::new(false);
    let failed = AtomicBool::new(false);
    let mut started = Instant::now();
    let mut usage0 = (0, 0.0);
    let mut steal0 = None;
    type Reader = anyhow::Result<(u64, LatencyRecorder, u64)>;
    let results: Vec<Reader> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..spec.threads)
            .map(|_| {
                let (barrier, stop, failed) = (&barrier, &stop, &failed);
                s.spawn(move || -> Reader {
                    let r = read_loop(spec, db, keys, barrier, stop);
                    if r.is_err() {
                        failed.store(true, Ordering::Relaxed);
                    }
                    r
                })
            })
            .collect();
        barrier.wait();
        usage0 = rusage();
        steal0 = steal_ms();
        started = Instant::now();
        super::run_for(started, spec.duration, &failed, &stop);
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("a reader panicked")))
            })
            .collect()
    });
    let elapsed = started.elapsed();
    let usage1 = rusage();
    let steal = steal0.zip(steal_ms()).map(|(a, b)| b - a);
    let mut latency = LatencyRecorder::new();
    let (mut gets, mut byte_sum) = (0, 0u64);
    for r in results {
        let (n, lat, sum) = r?;
        gets += n;
        byte_sum = byte_sum.wrapping_add(sum);
        latency.merge(&lat);
    }
    let out = Outcome {
        commits: gets,
        elapsed,
        latency,
        context_switches: usage1.0 - usage0.0,
        cpu_us: usage1.1 - usage0.1,
        steal_ms: steal,
        committer_cpus: Vec::new(),
        info: json!({}),
    };
    Ok((out, byte_sum))
}

/// One reader: random loaded keys, one read transaction per get, until
/// told to stop. Returns its gets, their latencies and the sum of the
/// values' last bytes.
fn read_loop(
    spec: &Spec,
    db: &Database,
    keys: &[[u8; 16]],
    barrier: &Barrier,
    stop: &AtomicBool,
) -> anyhow::Result<(u64, LatencyRecorder, u64)> {
    let mut rng = rand::rng();
    let mut lat = LatencyRecorder::new();
    let (mut gets, mut sum) = (0u64, 0u64);
    barrier.wait();
    while !stop.load(Ordering::Relaxed) {
        let key = &keys[rng.random_range(0..keys.len())];
        let t0 = Instant::now();
        let read = db.begin_read();
        let table = read.open_table(TABLE)?;
        let value = table
            .get(key)?
            .ok_or_else(|| anyhow!("a loaded key is missing: {key:02x?}"))?;
        if value.len() != spec.size {
            bail!(
                "key {key:02x?} holds {} bytes, not {}",
                value.len(),
                spec.size
            );
        }
        sum = sum.wrapping_add(value.last().map_or(0, |&b| b as u64));
        drop(value);
        drop(read);
        lat.record(t0.elapsed());
        gets += 1;
    }
    Ok((gets, lat, sum))
}
