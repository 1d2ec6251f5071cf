//! The durable record of one run: an append-only file of checksummed
//! records, written through [`Vfs`] and synced (group commit) before the
//! server replies. The server keeps one per run in its state directory; the
//! single-machine mode (`--ack-file`) writes one directly. Layout in
//! `docs/diskcheck.md`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::{anyhow, bail, Context};
use keel::io::{OpenMode, OpenOptions, SyncKind, Vfs, VfsFile};

use super::state::{Entry, RunMeta, RunState};
use super::wire::{Dec, Enc, MAX_ENTRIES};

/// Bytes before each record body: body length u32, crc32c of the body u32.
const RECORD_PREFIX_BYTES: usize = 8;
/// The largest record (an `Intents` or `Acks` record of [`MAX_ENTRIES`]).
/// A bad record closer than this to the end of the file is a torn tail.
pub const MAX_RECORD_BYTES: usize = RECORD_PREFIX_BYTES + 1 + 8 + 4 + MAX_ENTRIES * 16;

mod kind {
    pub const BEGIN: u8 = 1;
    pub const INTENTS: u8 = 2;
    pub const ACKS: u8 = 3;
    pub const END: u8 = 4;
}

/// A run's log file, open for appending.
#[derive(Debug)]
pub struct RunLog {
    file: Arc<dyn VfsFile>,
    inner: Mutex<Inner>,
    /// Log offset known durable. Held while syncing, so concurrent callers
    /// queue behind one fdatasync and usually find their records covered.
    synced: Mutex<u64>,
}

#[derive(Debug)]
struct Inner {
    end: u64,
    state: RunState,
    /// The first write or sync error. Never retried: the page cache may have
    /// dropped the data, so every later call fails with it.
    poisoned: Option<String>,
}

/// A log read back from disk.
#[derive(Debug)]
pub struct Loaded {
    pub state: RunState,
    /// Where the last intact record ends.
    pub good_end: u64,
    /// Bytes of torn tail after `good_end` (0 for a clean log).
    pub torn_bytes: u64,
}

impl RunLog {
    /// Create a new log holding the `Begin` record, durable (file and
    /// directory entry) before this returns. Fails if `path` exists.
    pub fn create(vfs: &dyn Vfs, path: &Path, meta: RunMeta, time_us: u64) -> anyhow::Result<Self> {
        let options = OpenOptions::new(OpenMode::Buffered).create_new(true);
        let file = vfs
            .open(path, options)
            .with_context(|| format!("cannot create log {}", path.display()))?;
        let mut e = Enc::default();
        e.meta(&meta);
        let record = encode_record(kind::BEGIN, time_us, &e.0);
        file.write_at(&record, 0)?;
        file.sync(SyncKind::Data)?;
        vfs.sync_dir(parent(path))?;
        Ok(RunLog::from_parts(
            file,
            record.len() as u64,
            RunState::new(meta, time_us),
        ))
    }

    /// Reopen a log for appending, cutting a torn tail left by a crash (the
    /// records in it were never acknowledged, because we sync before
    /// replying).
    pub fn open(vfs: &dyn Vfs, path: &Path) -> anyhow::Result<(Self, u64)> {
        let loaded = RunLog::load(vfs, path)?;
        let file = vfs.open(path, OpenOptions::new(OpenMode::Buffered))?;
        if loaded.torn_bytes > 0 {
            file.set_len(loaded.good_end)?;
            file.sync(SyncKind::Data)?;
        }
        let log = RunLog::from_parts(file, loaded.good_end, loaded.state);
        Ok((log, loaded.torn_bytes))
    }

    /// Read a log without changing it.
    pub fn load(vfs: &dyn Vfs, path: &Path) -> anyhow::Result<Loaded> {
        let file = vfs
            .open(path, OpenOptions::new(OpenMode::Buffered).read_only(true))
            .with_context(|| format!("cannot open log {}", path.display()))?;
        let len = file.len()?;
        let mut bytes = vec![0u8; usize::try_from(len)?];
        file.read_exact_at(&mut bytes, 0)?;
        parse_log(&bytes).with_context(|| format!("log {}", path.display()))
    }

    fn from_parts(file: Arc<dyn VfsFile>, end: u64, state: RunState) -> Self {
        RunLog {
            file,
            inner: Mutex::new(Inner {
                end,
                state,
                poisoned: None,
            }),
            synced: Mutex::new(end),
        }
    }

    /// Run `f` on the recorded state (under the log's lock: keep it short).
    pub fn with_state<R>(&self, f: impl FnOnce(&RunState) -> R) -> R {
        f(&self.lock().state)
    }

    /// Append "about to write" entries; returns the log offset to
    /// [`RunLog::sync_to`] before telling anyone they are recorded.
    pub fn append_intents(&self, entries: &[Entry], time_us: u64) -> anyhow::Result<u64> {
        self.append_entries(kind::INTENTS, entries, time_us)
    }

    /// Append "acknowledged durable" entries.
    pub fn append_acks(&self, entries: &[Entry], time_us: u64) -> anyhow::Result<u64> {
        self.append_entries(kind::ACKS, entries, time_us)
    }

    /// Append the clean-end marker.
    pub fn append_end(&self, acked_writes: u64, time_us: u64) -> anyhow::Result<u64> {
        let mut inner = self.lock();
        let mut e = Enc::default();
        e.u64(acked_writes);
        self.write_record(&mut inner, kind::END, time_us, &e.0)?;
        inner.state.apply_end(time_us);
        Ok(inner.end)
    }

    fn append_entries(&self, kind: u8, entries: &[Entry], time_us: u64) -> anyhow::Result<u64> {
        let mut inner = self.lock();
        // Validate before writing so that a refused message leaves no record.
        let checked = match kind {
            kind::INTENTS => inner.state.check_intents(entries),
            _ => inner.state.check_acks(entries),
        };
        checked.map_err(|m| anyhow!(m))?;
        let mut e = Enc::default();
        e.entries(entries);
        self.write_record(&mut inner, kind, time_us, &e.0)?;
        match kind {
            kind::INTENTS => inner.state.apply_intents(entries, time_us),
            _ => inner.state.apply_acks(entries, time_us),
        }
        Ok(inner.end)
    }

    fn write_record(
        &self,
        inner: &mut Inner,
        kind: u8,
        time_us: u64,
        payload: &[u8],
    ) -> anyhow::Result<()> {
        if let Some(p) = &inner.poisoned {
            bail!("the log is unusable after an earlier error: {p}");
        }
        let record = encode_record(kind, time_us, payload);
        if let Err(e) = self.file.write_at(&record, inner.end) {
            inner.poisoned = Some(e.to_string());
            return Err(e).context("cannot append to the log");
        }
        inner.end += record.len() as u64;
        Ok(())
    }

    /// Make everything up to `pos` durable (one fdatasync for all callers
    /// waiting at the same time).
    pub fn sync_to(&self, pos: u64) -> anyhow::Result<()> {
        let mut synced = self.synced.lock().expect("log sync lock");
        if *synced >= pos {
            return Ok(());
        }
        let target = {
            let inner = self.lock();
            if let Some(p) = &inner.poisoned {
                bail!("the log is unusable after an earlier error: {p}");
            }
            inner.end
        };
        if let Err(e) = self.file.sync(SyncKind::Data) {
            self.lock().poisoned = Some(e.to_string());
            return Err(e).context("cannot sync the log");
        }
        *synced = target;
        Ok(())
    }

    /// Make every appended record durable.
    #[cfg(test)]
    pub fn sync_all(&self) -> anyhow::Result<()> {
        let end = self.lock().end;
        self.sync_to(end)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().expect("log lock")
    }
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// The file name of a run's log in a server's state directory.
pub fn run_log_name(run_id: u64) -> String {
    format!("run-{run_id:016x}.log")
}

/// The run id in a log file name, if it is one.
pub fn run_id_of_log(name: &str) -> Option<u64> {
    let hex = name.strip_prefix("run-")?.strip_suffix(".log")?;
    (hex.len() == 16).then(|| u64::from_str_radix(hex, 16).ok())?
}

/// Path of a run's log under `dir`.
pub fn run_log_path(dir: &Path, run_id: u64) -> PathBuf {
    dir.join(run_log_name(run_id))
}

fn encode_record(kind: u8, time_us: u64, payload: &[u8]) -> Vec<u8> {
    let body_len = 1 + 8 + payload.len();
    let mut rec = Vec::with_capacity(RECORD_PREFIX_BYTES + body_len);
    rec.extend_from_slice(&(body_len as u32).to_le_bytes());
    rec.extend_from_slice(&[0; 4]);
    rec.push(kind);
    rec.extend_from_slice(&time_us.to_le_bytes());
    rec.extend_from_slice(payload);
    let crc = crc32c::crc32c(&rec[RECORD_PREFIX_BYTES..]);
    rec[4..8].copy_from_slice(&crc.to_le_bytes());
    debug_assert!(rec.len() <= MAX_RECORD_BYTES);
    rec
}

/// One intact record at the start of `bytes`: (kind, time, payload, length).
fn next_record(bytes: &[u8]) -> Option<(u8, u64, &[u8], usize)> {
    let body_len = u32::from_le_bytes(bytes.get(0..4)?.try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?);
    if !(9..=MAX_RECORD_BYTES - RECORD_PREFIX_BYTES).contains(&body_len) {
        return None;
    }
    let body = bytes.get(RECORD_PREFIX_BYTES..RECORD_PREFIX_BYTES + body_len)?;
    if crc32c::crc32c(body) != crc {
        return None;
    }
    let time_us = u64::from_le_bytes(body[1..9].try_into().ok()?);
    Some((body[0], time_us, &body[9..], RECORD_PREFIX_BYTES + body_len))
}

fn parse_log(bytes: &[u8]) -> anyhow::Result<Loaded> {
    let Some((kind::BEGIN, time_us, payload, mut pos)) = next_record(bytes) else {
        bail!("not a diskcheck log: it does not start with an intact run record");
    };
    let mut d = Dec::new(payload);
    let meta = d.meta()?;
    d.finish()?;
    let mut state = RunState::new(meta, time_us);
    while pos < bytes.len() {
        let Some((kind, time_us, payload, len)) = next_record(&bytes[pos..]) else {
            break;
        };
        apply_record(&mut state, kind, time_us, payload)
            .with_context(|| format!("record at offset {pos}"))?;
        pos += len;
    }
    let torn_bytes = (bytes.len() - pos) as u64;
    // Records are synced before anyone is told, so only the last one can be
    // torn by a crash. Damage further back is corruption: refuse to guess.
    if torn_bytes > MAX_RECORD_BYTES as u64 {
        bail!(
            "corrupt record at offset {pos} with {torn_bytes} bytes after it; \
             this is damage, not a torn tail — keep the file for inspection"
        );
    }
    Ok(Loaded {
        state,
        good_end: pos as u64,
        torn_bytes,
    })
}

fn apply_record(
    state: &mut RunState,
    kind: u8,
    time_us: u64,
    payload: &[u8],
) -> anyhow::Result<()> {
    let mut d = Dec::new(payload);
    match kind {
        kind::INTENTS => {
            let entries = d.entries()?;
            state.check_intents(&entries).map_err(|m| anyhow!(m))?;
            state.apply_intents(&entries, time_us);
        }
        kind::ACKS => {
            let entries = d.entries()?;
            state.check_acks(&entries).map_err(|m| anyhow!(m))?;
            state.apply_acks(&entries, time_us);
        }
        kind::END => {
            d.u64()?;
            state.apply_end(time_us);
        }
        k => bail!("unknown record kind {k}"),
    }
    d.finish()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diskcheck::state::test_meta;
    use keel::io::RealVfs;

    fn e(block: u64, generation: u64) -> Entry {
        Entry { block, generation }
    }

    fn tmp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("keel-dclog-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn append_reload() {
        let dir = tmp("reload");
        let path = run_log_path(&dir, 7);
        let log = RunLog::create(&RealVfs, &path, test_meta(7, 100), 1).unwrap();
        let p = log.append_intents(&[e(1, 1), e(2, 1)], 2).unwrap();
        log.sync_to(p).unwrap();
        log.append_acks(&[e(1, 1)], 3).unwrap();
        log.append_end(1, 4).unwrap();
        log.sync_all().unwrap();
        assert!(log.append_acks(&[e(3, 1)], 5).is_err(), "unannounced ack");
        let expected = log.with_state(|s| s.clone());
        drop(log);
        let loaded = RunLog::load(&RealVfs, &path).unwrap();
        assert_eq!(loaded.state, expected);
        assert_eq!(loaded.torn_bytes, 0);
        assert!(loaded.state.summary.ended);
        assert!(RunLog::create(&RealVfs, &path, test_meta(7, 100), 1).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn torn_tail_is_cut_and_corruption_refused() {
        let dir = tmp("torn");
        let path = dir.join("a.log");
        let log = RunLog::create(&RealVfs, &path, test_meta(1, 100), 1).unwrap();
        log.append_intents(&[e(1, 1)], 2).unwrap();
        log.sync_all().unwrap();
        let good = std::fs::read(&path).unwrap();
        log.append_acks(&[e(1, 1)], 3).unwrap();
        drop(log);
        // Cut the last record in half, as a crash mid-append would.
        let full = std::fs::read(&path).unwrap();
        let cut = good.len() + (full.len() - good.len()) / 2;
        std::fs::write(&path, &full[..cut]).unwrap();
        let (log, torn) = RunLog::open(&RealVfs, &path).unwrap();
        assert_eq!(torn as usize, cut - good.len());
        assert_eq!(log.with_state(|s| s.blocks[&1].acked_gen), 0);
        log.append_acks(&[e(1, 1)], 4).unwrap();
        log.sync_all().unwrap();
        drop(log);
        assert_eq!(
            RunLog::load(&RealVfs, &path).unwrap().state.blocks[&1].acked_gen,
            1
        );
        // A bad record followed by far more than one record's worth of bytes
        // is damage, not a torn tail.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[good.len() - 1] ^= 1;
        bytes.resize(bytes.len() + MAX_RECORD_BYTES + 1, 0);
        std::fs::write(&path, &bytes).unwrap();
        let err = RunLog::load(&RealVfs, &path).unwrap_err();
        assert!(format!("{err:#}").contains("corrupt"), "{err:#}");
        std::fs::write(&path, b"hello").unwrap();
        assert!(RunLog::load(&RealVfs, &path).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn log_names() {
        assert_eq!(run_id_of_log(&run_log_name(0xdead)), Some(0xdead));
        assert_eq!(run_id_of_log("run-xyz.log"), None);
        assert_eq!(run_id_of_log("LOCK"), None);
    }
}
