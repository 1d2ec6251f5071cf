//! `keel diskcheck write`: the client on the machine under test.
//!
//! Each writer thread owns a contiguous region of the file and writes
//! randomly chosen blocks of it, each made durable with the chosen method.
//! Per write the protocol is: the block's next generation is announced and
//! durably recorded ("about to write"), the block is written and synced, and
//! the write is acknowledged ("durable"). Announcements go out a batch
//! ahead and acknowledgements in small batches, so the writer waits for the
//! network only when it runs ahead of the recorder.
//!
//! A block is never rewritten while a write to it is in flight: a block is
//! busy from its announcement until the recorder confirmed its
//! acknowledgement. That keeps the invariant `verify` relies on: the disk
//! holds the recorded acknowledged generation, or the one after it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use keel::io::{AlignedBuf, IoError, SyncKind, Vfs, VfsFile, WriteMethod};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::block::{encode, valid_block_bytes, BlockHeader, SECTOR_BYTES};
use super::log::RunLog;
use super::now_us;
use super::recorder::{FileRecorder, Link, Recorder};
use super::state::{Entry, RunMeta};
use super::wire::{truncate, Request, MAX_ENTRIES};

/// Blocks announced per batch (at most; small regions get fewer).
pub const DEFAULT_BATCH: usize = 32;
/// Acknowledgements are sent once this many have gathered…
const ACK_BATCH: usize = 8;
/// …or once the oldest has waited this long.
const ACK_DELAY: Duration = Duration::from_millis(5);
/// Each writer's region holds at least this many times its pipeline depth,
/// so that a free block is always found quickly.
const REGION_PER_BATCH: u64 = 4;

/// Where the records go.
#[derive(Clone, Debug)]
pub enum Target {
    Server {
        addr: SocketAddr,
        retry_for: Duration,
    },
    AckFile(PathBuf),
}

/// Parameters of one `write` run.
#[derive(Clone, Debug)]
pub struct WriteConfig {
    pub file: PathBuf,
    pub size_bytes: u64,
    pub block_bytes: u32,
    pub threads: u32,
    pub method: WriteMethod,
    pub duration: Option<Duration>,
    /// Stop after this many writes in all (tests; `--writes`).
    pub max_writes: Option<u64>,
    pub seed: u64,
    pub run_id: u64,
    pub host: String,
    pub batch: usize,
}

/// Counters the progress display reads while the run goes on.
#[derive(Debug, Default)]
pub struct Counters {
    /// Writes completed and durable (acknowledged to the recorder or about to be).
    pub writes: AtomicU64,
}

/// The outcome of a completed run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WriteSummary {
    pub run_id: String,
    pub file: String,
    pub method: String,
    pub threads: u32,
    pub block_bytes: u32,
    pub size_bytes: u64,
    pub writes: u64,
    pub seconds: f64,
    pub writes_per_s: f64,
    pub mib_per_s: f64,
    /// Why the run may prove nothing (an ack file in memory or beside the
    /// file under test), as printed on stderr when it started.
    pub warnings: Vec<String>,
}

impl WriteConfig {
    pub fn block_count(&self) -> u64 {
        self.size_bytes / u64::from(self.block_bytes)
    }

    fn meta(&self) -> RunMeta {
        RunMeta {
            run_id: self.run_id,
            block_bytes: self.block_bytes,
            block_count: self.block_count(),
            threads: self.threads,
            started_us: now_us(),
            method: self.method.name().to_string(),
            file: super::recorded_file_name(&self.file),
            host: truncate(&self.host).to_string(),
        }
    }

    /// Blocks announced per batch for this configuration.
    fn effective_batch(&self) -> usize {
        let region = self.block_count() / u64::from(self.threads);
        let fit = (region / (2 * REGION_PER_BATCH)).max(1) as usize;
        self.batch.clamp(1, MAX_ENTRIES).min(fit)
    }
}

/// Check the parameters and the free space before anything is written.
pub fn check(vfs: &dyn Vfs, cfg: &WriteConfig) -> anyhow::Result<()> {
    let block = u64::from(cfg.block_bytes);
    if !valid_block_bytes(cfg.block_bytes) {
        bail!(
            "--block {} is not a multiple of {SECTOR_BYTES} bytes between 512 B and 64 MiB",
            cfg.block_bytes
        );
    }
    if cfg.size_bytes < block || cfg.size_bytes % block != 0 {
        bail!(
            "--size {} must be a whole number (at least 1) of {block}-byte blocks",
            cfg.size_bytes
        );
    }
    if cfg.threads == 0 {
        bail!("--threads must be at least 1");
    }
    let per_thread = cfg.block_count() / u64::from(cfg.threads);
    if per_thread < 2 * REGION_PER_BATCH {
        bail!(
            "{} blocks are too few for {} thread(s): each thread needs a region of at least {} blocks",
            cfg.block_count(), cfg.threads, 2 * REGION_PER_BATCH
        );
    }
    if !cfg.method.is_durable(true) {
        bail!("--method {} does not make writes durable on a disk with a volatile cache; choose a durable one", cfg.method);
    }
    if cfg.method.is_direct() {
        let align = vfs.block_size(&cfg.file)?;
        if cfg.block_bytes as usize % align != 0 {
            bail!("--method {} needs blocks that are multiples of the device's {align}-byte logical block", cfg.method);
        }
    }
    let dir = parent(&cfg.file);
    if !vfs.exists(dir)? {
        bail!("directory {} does not exist", dir.display());
    }
    let existing = existing_len(vfs, &cfg.file)?;
    let needed = cfg.size_bytes.saturating_sub(existing);
    // Unknown (a file system that reports no size): the writes will say.
    let Some(free) = vfs.free_space(dir)? else {
        return Ok(());
    };
    if needed > free {
        bail!(
            "not enough free space for {}: {needed} more bytes needed, {free} available; free some space or choose a smaller --size",
            cfg.file.display()
        );
    }
    Ok(())
}

fn existing_len(vfs: &dyn Vfs, path: &Path) -> anyhow::Result<u64> {
    if !vfs.exists(path)? {
        return Ok(0);
    }
    let f = vfs.open(
        path,
        keel::io::OpenOptions::new(keel::io::OpenMode::Buffered).read_only(true),
    )?;
    Ok(f.len()?)
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Opens recorders for the run's threads.
enum Sink {
    Server {
        addr: SocketAddr,
        retry_for: Duration,
        run_id: u64,
    },
    File(Arc<RunLog>),
}

impl Sink {
    /// Begin the run at the recorder; the returned recorder ends it.
    fn begin(
        vfs: &dyn Vfs,
        target: &Target,
        meta: RunMeta,
    ) -> anyhow::Result<(Sink, Box<dyn Recorder>)> {
        match target {
            Target::Server { addr, retry_for } => {
                let run_id = meta.run_id;
                let link = Link::connect(*addr, Request::Begin(meta), *retry_for)?;
                let sink = Sink::Server {
                    addr: *addr,
                    retry_for: *retry_for,
                    run_id,
                };
                Ok((sink, Box::new(link)))
            }
            Target::AckFile(path) => {
                if vfs.exists(path)? {
                    bail!("ack file {} exists (it may hold a run not yet verified); remove it or choose another", path.display());
                }
                let log = Arc::new(RunLog::create(vfs, path, meta, now_us())?);
                Ok((
                    Sink::File(Arc::clone(&log)),
                    Box::new(FileRecorder::new(log)),
                ))
            }
        }
    }

    fn writer(&self, writer_id: u32) -> anyhow::Result<Box<dyn Recorder>> {
        Ok(match self {
            Sink::Server {
                addr,
                retry_for,
                run_id,
            } => {
                let hello = Request::Attach {
                    run_id: *run_id,
                    writer_id,
                };
                Box::new(Link::connect(*addr, hello, *retry_for)?)
            }
            Sink::File(log) => Box::new(FileRecorder::new(Arc::clone(log))),
        })
    }
}

/// Run the client: begin the run at the recorder, prepare the file, write
/// until `stop`, the duration or the write count, end the run. `tick` is
/// called about a hundred times a second with the counters and elapsed time.
pub fn run(
    vfs: Arc<dyn Vfs>,
    target: &Target,
    cfg: &WriteConfig,
    stop: &AtomicBool,
    tick: &mut dyn FnMut(&Counters, Duration),
) -> anyhow::Result<WriteSummary> {
    check(vfs.as_ref(), cfg)?;
    // The recorder first: if it is unreachable, nothing is written.
    let (sink, mut control) = Sink::begin(vfs.as_ref(), target, cfg.meta())?;
    let file = prepare_file(vfs.as_ref(), cfg)?;
    let align = vfs.block_size(&cfg.file)?.max(SECTOR_BYTES);
    let counters = Counters::default();
    let start = Instant::now();
    let results: Vec<anyhow::Result<u64>> = std::thread::scope(|s| {
        let mut handles = Vec::new();
        for id in 0..cfg.threads {
            let writer = Writer::new(cfg, id, &sink, Arc::clone(&file), align, &counters);
            handles.push(s.spawn(move || {
                let result = writer.and_then(|w| w.run(stop));
                if result.is_err() {
                    // One writer's failure ends the run: the others finish
                    // their announced writes and report them.
                    stop.store(true, Ordering::SeqCst);
                }
                result.with_context(|| format!("writer {id}"))
            }));
        }
        while !handles.iter().all(|h| h.is_finished()) {
            std::thread::sleep(Duration::from_millis(10));
            tick(&counters, start.elapsed());
            if cfg.duration.is_some_and(|d| start.elapsed() >= d) {
                stop.store(true, Ordering::SeqCst);
            }
        }
        handles
            .into_iter()
            .map(|h| h.join().expect("writer thread panicked"))
            .collect()
    });
    let elapsed = start.elapsed();
    tick(&counters, elapsed);
    let mut writes = 0;
    for r in results {
        writes += r?;
    }
    control.end(writes)?;
    let seconds = elapsed.as_secs_f64();
    Ok(WriteSummary {
        run_id: format!("{:016x}", cfg.run_id),
        file: cfg.file.display().to_string(),
        method: cfg.method.name().to_string(),
        threads: cfg.threads,
        block_bytes: cfg.block_bytes,
        size_bytes: cfg.size_bytes,
        writes,
        seconds,
        writes_per_s: writes as f64 / seconds,
        mib_per_s: (writes * u64::from(cfg.block_bytes)) as f64 / seconds / (1 << 20) as f64,
        warnings: Vec::new(),
    })
}

/// Create or extend the file to its size with real zero writes (so later
/// overwrites change no file metadata, as in Keel's journal), and make its
/// size and directory entry durable before any block is announced.
fn prepare_file(vfs: &dyn Vfs, cfg: &WriteConfig) -> anyhow::Result<Arc<dyn VfsFile>> {
    let file = vfs
        .open(&cfg.file, cfg.method.open_options())
        .with_context(|| format!("cannot open {}", cfg.file.display()))?;
    let len = file.len()?;
    if len < cfg.size_bytes {
        file.zero_fill(len, cfg.size_bytes - len).with_context(|| {
            format!(
                "cannot fill {} to {} bytes",
                cfg.file.display(),
                cfg.size_bytes
            )
        })?;
    }
    file.sync(SyncKind::All)?;
    vfs.sync_dir(parent(&cfg.file))?;
    Ok(file)
}

/// One writer thread's state.
struct Writer<'a> {
    id: u32,
    run_id: u64,
    block_bytes: u32,
    method: WriteMethod,
    file: Arc<dyn VfsFile>,
    rec: Box<dyn Recorder>,
    first_block: u64,
    region_blocks: u64,
    rng: SmallRng,
    batch: usize,
    /// Writes this thread may still announce (`u64::MAX`: no limit).
    quota: u64,
    generations: HashMap<u64, u64>,
    busy: HashSet<u64>,
    /// Announced and confirmed: may be written now.
    ready: VecDeque<Entry>,
    /// Announced, confirmation not yet awaited.
    announced: Option<(u64, Vec<Entry>)>,
    unsent_acks: Vec<Entry>,
    oldest_unsent: Option<Instant>,
    /// (ticket, block) of sent acknowledgements, oldest first.
    sent_acks: VecDeque<(u64, u64)>,
    buf: AlignedBuf,
    counters: &'a Counters,
    writes: u64,
}

impl<'a> Writer<'a> {
    fn new(
        cfg: &WriteConfig,
        id: u32,
        sink: &Sink,
        file: Arc<dyn VfsFile>,
        align: usize,
        counters: &'a Counters,
    ) -> anyhow::Result<Self> {
        let (n, t) = (cfg.block_count(), u64::from(cfg.threads));
        let first_block = n * u64::from(id) / t;
        let end_block = n * (u64::from(id) + 1) / t;
        let quota = cfg
            .max_writes
            .map_or(u64::MAX, |m| m / t + u64::from(u64::from(id) < m % t));
        Ok(Writer {
            id,
            run_id: cfg.run_id,
            block_bytes: cfg.block_bytes,
            method: cfg.method,
            file,
            rec: sink.writer(id)?,
            first_block,
            region_blocks: end_block - first_block,
            rng: SmallRng::seed_from_u64(
                cfg.seed ^ (u64::from(id) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            ),
            batch: cfg.effective_batch(),
            quota,
            generations: HashMap::new(),
            busy: HashSet::new(),
            ready: VecDeque::new(),
            announced: None,
            unsent_acks: Vec::new(),
            oldest_unsent: None,
            sent_acks: VecDeque::new(),
            buf: AlignedBuf::new(cfg.block_bytes as usize, align),
            counters,
            writes: 0,
        })
    }

    /// Write until told to stop or out of quota, then finish every announced
    /// write and have every acknowledgement recorded. Returns the writes done.
    fn run(mut self, stop: &AtomicBool) -> anyhow::Result<u64> {
        loop {
            let stopping = stop.load(Ordering::Relaxed) || self.quota == 0;
            if !stopping && self.announced.is_none() && self.ready.len() <= self.batch / 2 {
                self.announce_batch()?;
            }
            if self.ready.is_empty() {
                match self.announced.take() {
                    Some((ticket, entries)) => {
                        self.rec.wait(ticket)?;
                        self.ready.extend(entries);
                    }
                    None if stopping => break,
                    None => unreachable!("announce_batch always announces when not stopping"),
                }
            }
            let entry = self.ready.pop_front().expect("a confirmed intent");
            self.write(entry)?;
            self.maybe_send_acks()?;
        }
        self.send_acks()?;
        if let Some(&(last, _)) = self.sent_acks.back() {
            self.rec.wait(last)?;
        }
        Ok(self.writes)
    }

    fn announce_batch(&mut self) -> anyhow::Result<()> {
        // Acknowledgements ride along: the recorder syncs them with the batch.
        self.send_acks()?;
        self.release_acked()?;
        let want = (self.batch as u64).min(self.quota) as usize;
        let mut entries = self.pick_entries(want);
        if entries.is_empty() {
            // Every block is waiting for its acknowledgement to be confirmed
            // (a small region and a slow recorder): wait for them.
            if let Some(&(last, _)) = self.sent_acks.back() {
                self.rec.wait(last)?;
                self.release_acked()?;
            }
            entries = self.pick_entries(want);
            assert!(
                !entries.is_empty(),
                "no free block in a region of {}",
                self.region_blocks
            );
        }
        self.quota -= entries.len() as u64;
        let ticket = self.rec.announce(&entries)?;
        self.announced = Some((ticket, entries));
        Ok(())
    }

    /// Up to `n` blocks with no write in flight, each with its next
    /// generation, marked busy.
    fn pick_entries(&mut self, n: usize) -> Vec<Entry> {
        let mut entries = Vec::with_capacity(n);
        while entries.len() < n {
            let Some(block) = self.pick_free_block() else {
                break;
            };
            let generation = self.generations.entry(block).or_insert(0);
            *generation += 1;
            self.busy.insert(block);
            entries.push(Entry {
                block,
                generation: *generation,
            });
        }
        entries
    }

    /// A random block of the region with no write in flight.
    fn pick_free_block(&mut self) -> Option<u64> {
        for _ in 0..64 {
            let b = self.first_block + self.rng.random_range(0..self.region_blocks);
            if !self.busy.contains(&b) {
                return Some(b);
            }
        }
        let start = self.rng.random_range(0..self.region_blocks);
        (0..self.region_blocks)
            .map(|i| self.first_block + (start + i) % self.region_blocks)
            .find(|b| !self.busy.contains(b))
    }

    fn write(&mut self, e: Entry) -> anyhow::Result<()> {
        let header = BlockHeader {
            run_id: self.run_id,
            index: e.block,
            generation: e.generation,
            writer_id: self.id,
            block_bytes: self.block_bytes,
            time_us: now_us(),
        };
        encode(&header, &mut self.buf);
        let offset = e.block * u64::from(self.block_bytes);
        if let Err(err) = self
            .method
            .write_durably(self.file.as_ref(), &self.buf, offset)
        {
            return Err(explain(err, e, offset));
        }
        self.writes += 1;
        self.counters.writes.fetch_add(1, Ordering::Relaxed);
        self.oldest_unsent.get_or_insert_with(Instant::now);
        self.unsent_acks.push(e);
        Ok(())
    }

    fn maybe_send_acks(&mut self) -> anyhow::Result<()> {
        let due = self.unsent_acks.len() >= ACK_BATCH
            || self.oldest_unsent.is_some_and(|t| t.elapsed() >= ACK_DELAY);
        if due {
            self.send_acks()?;
            self.release_acked()?;
        }
        Ok(())
    }

    fn send_acks(&mut self) -> anyhow::Result<()> {
        if self.unsent_acks.is_empty() {
            return Ok(());
        }
        let ticket = self.rec.ack(&self.unsent_acks)?;
        for e in self.unsent_acks.drain(..) {
            self.sent_acks.push_back((ticket, e.block));
        }
        self.oldest_unsent = None;
        Ok(())
    }

    /// Free the blocks whose acknowledgement the recorder has confirmed.
    fn release_acked(&mut self) -> anyhow::Result<()> {
        let confirmed = self.rec.confirmed()?;
        while let Some(&(ticket, block)) = self.sent_acks.front() {
            if ticket > confirmed {
                break;
            }
            self.busy.remove(&block);
            self.sent_acks.pop_front();
        }
        Ok(())
    }
}

fn explain(err: IoError, e: Entry, offset: u64) -> anyhow::Error {
    let what = format!(
        "writing block {} (generation {}) at offset {offset}",
        e.block, e.generation
    );
    match err.raw_os_error() {
        Some(libc::ENOSPC) => anyhow::Error::new(err).context(format!(
            "{what}: the disk is full; the file was filled before the run, so this file system \
             allocates on overwrite (copy-on-write?)"
        )),
        // A failed write or sync is not retried: the data may be gone from
        // the page cache, and the block is left "in flight" for verify.
        _ => anyhow::Error::new(err).context(what),
    }
}
