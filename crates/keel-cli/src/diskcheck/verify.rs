//! `keel diskcheck verify`: read every block back and compare it with what
//! the recorder says was acknowledged.
//!
//! For a block whose last acknowledged generation is `A`, the disk may hold
//! generation `A`, or `A + 1` if that write was announced (in flight when
//! the power went): old and new content are both correct for a write whose
//! sync had not returned. Anything else is an error of one of four kinds.
//!
//! The run is found from the run ids in the blocks, and from the record:
//! a disk that lost every write of a run leaves no block naming it, so the
//! newest run the recorder holds for this file (host and path) is checked
//! too, and wins when it began after every block in the file was written.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context};
use keel::io::{OpenMode, OpenOptions, Vfs, VfsFile};
use serde::Serialize;

use super::block::{decode, header_in_sector, Decoded, SectorTag, SECTOR_BYTES};
use super::log::RunLog;
use super::recorded_file_name;
use super::recorder::{list, query};
use super::state::{BlockRecord, RunMeta, RunState, RunSummary};
use super::wire::truncate;

/// Bytes read per system call while scanning.
const SCAN_CHUNK_BYTES: usize = 4 << 20;

/// Where the record of a run is kept.
pub trait RunSource {
    /// The run's record, or `None` if this source never recorded it.
    fn fetch(&mut self, run_id: u64) -> anyhow::Result<Option<RunState>>;
    /// The summary of every run this source recorded.
    fn runs(&mut self) -> anyhow::Result<Vec<RunSummary>>;
    /// For messages: "the server at …", "the ack file …".
    fn describe(&self) -> String;
}

/// A `keel diskcheck listen` server.
pub struct ServerSource(pub SocketAddr);

impl RunSource for ServerSource {
    fn fetch(&mut self, run_id: u64) -> anyhow::Result<Option<RunState>> {
        query(self.0, run_id)
    }
    fn runs(&mut self) -> anyhow::Result<Vec<RunSummary>> {
        list(self.0)
    }
    fn describe(&self) -> String {
        format!("the server at {}", self.0)
    }
}

/// A single-machine ack file: the log of one run.
pub struct AckFileSource {
    vfs: Arc<dyn Vfs>,
    path: PathBuf,
    /// The log, read once: it grows by some 40 bytes per write.
    loaded: Option<RunState>,
}

impl AckFileSource {
    pub fn new(vfs: Arc<dyn Vfs>, path: PathBuf) -> Self {
        AckFileSource {
            vfs,
            path,
            loaded: None,
        }
    }

    fn state(&mut self) -> anyhow::Result<&RunState> {
        if self.loaded.is_none() {
            self.loaded = Some(RunLog::load(self.vfs.as_ref(), &self.path)?.state);
        }
        Ok(self.loaded.as_ref().expect("loaded above"))
    }
}

impl RunSource for AckFileSource {
    fn fetch(&mut self, run_id: u64) -> anyhow::Result<Option<RunState>> {
        if self.state()?.meta().run_id != run_id {
            return Ok(None);
        }
        Ok(self.loaded.take())
    }
    fn runs(&mut self) -> anyhow::Result<Vec<RunSummary>> {
        Ok(vec![self.state()?.summary.clone()])
    }
    fn describe(&self) -> String {
        format!("the ack file {}", self.path.display())
    }
}

/// What one block turned out to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Holds its last acknowledged generation.
    Fine,
    /// A write was in flight at the end; the block holds the generation
    /// before or after it (or, torn, a mix of exactly those two).
    InFlight,
    /// Holds a generation older than the last acknowledged one (or no write
    /// of this run at all): an acknowledged write is gone.
    Lost,
    /// Fails its checksum and is not explained by a write in flight.
    Torn,
    /// Holds a block of this run written for another position.
    Misdirected,
    /// Holds a generation of this run that was never announced: the
    /// recorder's record is incomplete (wrong state directory?).
    Unannounced,
}

impl Verdict {
    /// The name used in reports (as in the JSON field names).
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Fine => "fine",
            Verdict::InFlight => "in_flight",
            Verdict::Lost => "lost",
            Verdict::Torn => "torn",
            Verdict::Misdirected => "misdirected",
            Verdict::Unannounced => "unannounced",
        }
    }

    pub fn is_error(self) -> bool {
        !matches!(self, Verdict::Fine | Verdict::InFlight)
    }
}

/// Decide what the content of block `pos` means, given its record. `None`
/// for a block this run never touched and that holds nothing of it.
pub fn classify(
    pos: u64,
    run_id: u64,
    rec: Option<&BlockRecord>,
    content: &Decoded,
) -> Option<Verdict> {
    let acked = rec.map_or(0, |r| r.acked_gen);
    let in_flight = rec.and_then(BlockRecord::in_flight);
    let ours = |t: &&SectorTag| t.run_id == run_id;
    let generation = match content {
        Decoded::Valid(h) if h.run_id == run_id => {
            if h.index != pos {
                return Some(Verdict::Misdirected);
            }
            h.generation
        }
        // Zeros, or a block of an earlier run in a reused file.
        Decoded::Zero | Decoded::Valid(_) => 0,
        Decoded::Damaged(sectors) => {
            let mut mine = sectors.iter().flatten().filter(ours).peekable();
            if mine.clone().any(|t| t.index != pos) {
                return Some(Verdict::Misdirected);
            }
            if rec.is_none() {
                return mine.peek().map(|_| Verdict::Unannounced);
            }
            let explained = |t: &Option<SectorTag>| match t {
                Some(t) if t.run_id == run_id => {
                    t.generation == acked || Some(t.generation) == in_flight
                }
                // Content from before the run is right where nothing was
                // acknowledged yet.
                _ => acked == 0,
            };
            let torn_in_flight = in_flight.is_some() && sectors.iter().all(explained);
            return Some(if torn_in_flight {
                Verdict::InFlight
            } else {
                Verdict::Torn
            });
        }
    };
    let Some(_) = rec else {
        return (generation != 0).then_some(Verdict::Unannounced);
    };
    Some(
        if Some(generation) == in_flight || (generation == acked && in_flight.is_some()) {
            Verdict::InFlight
        } else if generation == acked {
            Verdict::Fine
        } else if generation < acked {
            Verdict::Lost
        } else {
            Verdict::Unannounced
        },
    )
}

/// One block that is in error.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ErrorBlock {
    pub block: u64,
    pub kind: Verdict,
    pub acked_gen: u64,
    /// The generation found, when the block is intact.
    pub found_gen: Option<u64>,
    /// Seconds between the block's last acknowledgement (or announcement)
    /// and the end of the run.
    pub seconds_before_end: Option<f64>,
}

/// Errors grouped by whole seconds before the end of the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HistogramBucket {
    pub seconds_before_end: u64,
    pub errors: u64,
}

/// The result of a verification.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Report {
    pub run_id: String,
    pub file: String,
    pub recorded_by: String,
    pub host: String,
    pub method: String,
    pub block_bytes: u32,
    pub blocks: u64,
    pub threads: u32,
    pub run_ended_cleanly: bool,
    /// Blocks with at least one acknowledged write.
    pub acked: u64,
    pub fine: u64,
    pub in_flight: u64,
    pub lost: u64,
    pub torn: u64,
    pub misdirected: u64,
    pub unannounced: u64,
    pub errors: u64,
    pub histogram: Vec<HistogramBucket>,
    pub error_blocks: Vec<ErrorBlock>,
    pub warnings: Vec<String>,
}

impl Report {
    fn count(&mut self, v: Verdict) {
        let c = match v {
            Verdict::Fine => &mut self.fine,
            Verdict::InFlight => &mut self.in_flight,
            Verdict::Lost => &mut self.lost,
            Verdict::Torn => &mut self.torn,
            Verdict::Misdirected => &mut self.misdirected,
            Verdict::Unannounced => &mut self.unannounced,
        };
        *c += 1;
        if v.is_error() {
            self.errors += 1;
        }
    }
}

/// What to verify.
#[derive(Clone, Copy, Debug)]
pub struct VerifyTarget<'a> {
    /// The file `write` wrote.
    pub file: &'a Path,
    /// This machine's host name: a run recorded for the same path on
    /// another machine wrote another file.
    pub host: &'a str,
    /// The run to check (`--run`) instead of the newest.
    pub run_id: Option<u64>,
}

/// The run to verify, and what the report should say about the choice.
struct Found {
    state: RunState,
    warnings: Vec<String>,
}

/// Verify the target file against its newest run (or `target.run_id`).
pub fn verify(
    vfs: &dyn Vfs,
    source: &mut dyn RunSource,
    target: &VerifyTarget<'_>,
) -> anyhow::Result<Report> {
    let file = target.file;
    let (f, missing) = match vfs.open(file, OpenOptions::new(OpenMode::Buffered).read_only(true)) {
        Ok(f) => (Some(f), None),
        // `write` made the file's directory entry durable before its first
        // write, so a file that is gone lost every acknowledged write, if a
        // run of it is recorded; if none is, the open error is the answer.
        Err(e) if e.is_not_found() => (None, Some(e)),
        Err(e) => return Err(e).with_context(|| format!("cannot open {}", file.display())),
    };
    let in_file = match &f {
        Some(f) => runs_in_file(f.as_ref())?,
        None => HashMap::new(),
    };
    let found = match (find_run(source, target, &in_file), missing) {
        (Ok(found), _) => found,
        (Err(_), Some(e)) => {
            return Err(e).with_context(|| format!("cannot open {}", file.display()))
        }
        (Err(e), None) => return Err(e),
    };
    let mut report = check_blocks(f.as_deref(), &found.state)?;
    report.warnings.splice(0..0, found.warnings);
    report.file = file.display().to_string();
    report.recorded_by = source.describe();
    Ok(report)
}

/// Runs whose block headers appear in the file: run id → newest header time.
fn runs_in_file(f: &dyn VfsFile) -> anyhow::Result<HashMap<u64, u64>> {
    let mut runs = HashMap::new();
    let len = f.len()?;
    let mut buf = vec![0u8; SCAN_CHUNK_BYTES];
    let mut offset = 0;
    while offset < len {
        let n = ((len - offset) as usize).min(buf.len());
        let n = n - n % SECTOR_BYTES;
        if n == 0 {
            break;
        }
        f.read_exact_at(&mut buf[..n], offset)?;
        for sector in buf[..n].chunks_exact(SECTOR_BYTES) {
            if let Some(h) = header_in_sector(sector) {
                let t = runs.entry(h.run_id).or_insert(0);
                *t = h.time_us.max(*t);
            }
        }
        offset += n as u64;
    }
    Ok(runs)
}

/// The run to verify: `--run` if given; else the newest run recorded for
/// this file if it left no block in it (see [`newest_blockless_run`]); else
/// the newest run in the file that the source knows.
fn find_run(
    source: &mut dyn RunSource,
    target: &VerifyTarget<'_>,
    in_file: &HashMap<u64, u64>,
) -> anyhow::Result<Found> {
    if let Some(id) = target.run_id {
        return find_wanted(source, target, in_file, id);
    }
    let runs = match source.runs() {
        Ok(runs) => runs,
        Err(e) if in_file.is_empty() => bail!(
            "{} holds no diskcheck block, and the runs {} recorded could not be listed: {e:#}",
            target.file.display(),
            source.describe()
        ),
        // The blocks in the file still name their run: verify it, and say
        // what could not be checked.
        Err(e) => {
            let state = newest_known_in_file(source, target, in_file)?;
            let warning = format!(
                "{e:#}; a newer run of this file that left no block in it would go unnoticed"
            );
            return Ok(Found {
                state,
                warnings: vec![warning],
            });
        }
    };
    if let Some(found) = newest_blockless_run(source, target, in_file, &runs)? {
        return Ok(found);
    }
    if in_file.is_empty() {
        bail!(no_run_of_file(source, target, &runs));
    }
    let state = newest_known_in_file(source, target, in_file)?;
    Ok(Found {
        state,
        warnings: Vec::new(),
    })
}

/// The "wrong file" message, with the newest runs the source does hold, in
/// case the path was spelled another way than `write` recorded it.
fn no_run_of_file(
    source: &dyn RunSource,
    target: &VerifyTarget<'_>,
    runs: &[RunSummary],
) -> String {
    const SHOWN: usize = 3;
    let mut msg = format!(
        "{} holds no diskcheck block, and {} recorded no run of it on {}: wrong file, \
         or `keel diskcheck write` never wrote to it",
        target.file.display(),
        source.describe(),
        target.host
    );
    let mut newest: Vec<&RunSummary> = runs.iter().collect();
    newest.sort_unstable_by_key(|s| std::cmp::Reverse(s.meta.started_us));
    if !newest.is_empty() {
        let shown: Vec<String> = newest
            .iter()
            .take(SHOWN)
            .map(|s| {
                format!(
                    "{:016x} ({} on {})",
                    s.meta.run_id, s.meta.file, s.meta.host
                )
            })
            .collect();
        msg += &format!(
            "; its newest run(s): {}{}; if one of them wrote this file, name it with --run",
            shown.join(", "),
            if newest.len() > SHOWN { ", …" } else { "" }
        );
    }
    msg
}

/// Whether `meta` records a run that wrote `target.file` from this host:
/// the same host name and the same path, absolute as `write` records it, or
/// as typed (older versions of `write` recorded it so).
fn wrote(meta: &RunMeta, target: &VerifyTarget<'_>) -> bool {
    meta.host == truncate(target.host)
        && (meta.file == recorded_file_name(target.file)
            || meta.file == truncate(&target.file.display().to_string()))
}

/// The runs in the file, the one with the newest block first.
fn newest_first(in_file: &HashMap<u64, u64>) -> Vec<u64> {
    let mut ids: Vec<(u64, u64)> = in_file.iter().map(|(id, t)| (*t, *id)).collect();
    ids.sort_unstable_by(|a, b| b.cmp(a));
    ids.into_iter().map(|(_, id)| id).collect()
}

/// The runs in the file, for messages.
fn listed(in_file: &HashMap<u64, u64>) -> String {
    newest_first(in_file)
        .iter()
        .map(|id| format!("{id:016x}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The newest run the source recorded for this file (host and path) if it
/// began after the newest block in the file was written: the disk lost
/// every write of it (or it acknowledged none). Without this, a file that
/// kept blocks of an earlier run would be verified against that run, and
/// pass.
fn newest_blockless_run(
    source: &mut dyn RunSource,
    target: &VerifyTarget<'_>,
    in_file: &HashMap<u64, u64>,
    runs: &[RunSummary],
) -> anyhow::Result<Option<Found>> {
    let newest_block_us = in_file.values().copied().max();
    let newest = runs
        .iter()
        .filter(|s| wrote(&s.meta, target) && !in_file.contains_key(&s.meta.run_id))
        .filter(|s| newest_block_us.is_none_or(|t| s.meta.started_us > t))
        .max_by_key(|s| (s.meta.started_us, s.meta.run_id));
    let Some(run) = newest else {
        return Ok(None);
    };
    let id = run.meta.run_id;
    let state = source.fetch(id)?.with_context(|| {
        format!(
            "{} listed run {id:016x} but has no record of it",
            source.describe()
        )
    })?;
    let mut warning = format!(
        "the file holds no block of run {id:016x}; it is checked as the newest run {} \
         recorded for {} on {}",
        source.describe(),
        run.meta.file,
        run.meta.host
    );
    if !in_file.is_empty() {
        warning += &format!(
            "; it holds blocks of earlier run(s) {}: check those with --run",
            listed(in_file)
        );
    }
    Ok(Some(Found {
        state,
        warnings: vec![warning],
    }))
}

/// The newest run in the file that the source knows.
fn newest_known_in_file(
    source: &mut dyn RunSource,
    target: &VerifyTarget<'_>,
    in_file: &HashMap<u64, u64>,
) -> anyhow::Result<RunState> {
    let file = target.file.display();
    if in_file.is_empty() {
        bail!("{file} holds no diskcheck block");
    }
    for id in newest_first(in_file) {
        if let Some(state) = source.fetch(id)? {
            return Ok(state);
        }
    }
    bail!(
        "{file} holds run(s) {}, none of which {} recorded: wrong file, server or state directory",
        listed(in_file),
        source.describe()
    )
}

/// `--run`: the run named, whether or not the file holds a block of it.
fn find_wanted(
    source: &mut dyn RunSource,
    target: &VerifyTarget<'_>,
    in_file: &HashMap<u64, u64>,
    id: u64,
) -> anyhow::Result<Found> {
    let file = target.file.display();
    let state = source.fetch(id)?;
    if in_file.contains_key(&id) {
        let state = state.ok_or_else(|| {
            anyhow!(
                "{file} holds run {id:016x}, which {} did not record: wrong server or state directory",
                source.describe()
            )
        })?;
        return Ok(Found {
            state,
            warnings: Vec::new(),
        });
    }
    let Some(state) = state else {
        let held = if in_file.is_empty() {
            String::new()
        } else {
            format!(" (it holds run(s) {})", listed(in_file))
        };
        bail!(
            "{file} holds no block of run {id:016x}{held}, and {} has no record of it: \
             wrong file or run id",
            source.describe()
        );
    };
    let mut warnings = vec![format!("the file holds no block of run {id:016x}")];
    if !wrote(state.meta(), target) {
        warnings.push(format!(
            "run {id:016x} wrote {} on {}, not {} on {}: if that is another file, \
             its blocks are not lost, they are elsewhere",
            state.meta().file,
            state.meta().host,
            recorded_file_name(target.file),
            target.host
        ));
    }
    Ok(Found { state, warnings })
}

/// Compare every block of the run with its record; `f` is `None` for a
/// file that no longer exists.
fn check_blocks(f: Option<&dyn VfsFile>, state: &RunState) -> anyhow::Result<Report> {
    let meta = state.meta();
    let bb = meta.block_bytes as usize;
    let mut report = Report {
        run_id: format!("{:016x}", meta.run_id),
        host: meta.host.clone(),
        method: meta.method.clone(),
        block_bytes: meta.block_bytes,
        blocks: meta.block_count,
        threads: meta.threads,
        run_ended_cleanly: state.summary.ended,
        ..Report::default()
    };
    let len = match f {
        Some(f) => f.len()?,
        None => {
            report
                .warnings
                .push("the file does not exist: every block counts as unwritten".to_string());
            0
        }
    };
    if f.is_some() && len < meta.size_bytes() {
        report.warnings.push(format!(
            "the file is {len} bytes, shorter than the run's {}: blocks past its end count as unwritten",
            meta.size_bytes()
        ));
    }
    let per_read = (SCAN_CHUNK_BYTES / bb).max(1);
    let mut buf = vec![0u8; per_read * bb];
    let mut hist = BTreeMap::new();
    let mut pos = 0u64;
    while pos < meta.block_count {
        let n = ((meta.block_count - pos) as usize).min(per_read);
        read_blocks(f, &mut buf[..n * bb], pos * bb as u64, len)?;
        for (i, block) in buf[..n * bb].chunks_exact(bb).enumerate() {
            let p = pos + i as u64;
            let rec = state.blocks.get(&p);
            if rec.is_some_and(|r| r.acked_gen > 0) {
                report.acked += 1;
            }
            let content = decode(block);
            let Some(verdict) = classify(p, meta.run_id, rec, &content) else {
                continue;
            };
            report.count(verdict);
            if verdict.is_error() {
                let e = error_block(p, verdict, rec, &content, state.summary.last_time_us);
                if let Some(s) = e.seconds_before_end {
                    *hist.entry(s as u64).or_insert(0) += 1;
                }
                report.error_blocks.push(e);
            }
        }
        pos += n as u64;
    }
    report.histogram = hist
        .into_iter()
        .map(|(seconds_before_end, errors)| HistogramBucket {
            seconds_before_end,
            errors,
        })
        .collect();
    Ok(report)
}

/// Read `buf.len()` bytes at `offset`; what lies past the end of the file
/// (of length `len`, 0 when it does not exist) reads as zeros.
fn read_blocks(
    f: Option<&dyn VfsFile>,
    buf: &mut [u8],
    offset: u64,
    len: u64,
) -> anyhow::Result<()> {
    let avail = len.saturating_sub(offset).min(buf.len() as u64) as usize;
    if let Some(f) = f.filter(|_| avail > 0) {
        f.read_exact_at(&mut buf[..avail], offset)?;
    }
    buf[avail..].fill(0);
    Ok(())
}

fn error_block(
    pos: u64,
    kind: Verdict,
    rec: Option<&BlockRecord>,
    content: &Decoded,
    end_us: u64,
) -> ErrorBlock {
    let time = rec.map(|r| {
        if r.acked_gen > 0 {
            r.acked_time_us
        } else {
            r.intent_time_us
        }
    });
    ErrorBlock {
        block: pos,
        kind,
        acked_gen: rec.map_or(0, |r| r.acked_gen),
        found_gen: match content {
            Decoded::Valid(h) => Some(h.generation),
            Decoded::Zero => Some(0),
            Decoded::Damaged(_) => None,
        },
        seconds_before_end: time.map(|t| end_us.saturating_sub(t) as f64 / 1e6),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diskcheck::block::BlockHeader;

    const RUN: u64 = 77;

    fn rec(acked: u64, intent: u64) -> BlockRecord {
        BlockRecord {
            intent_gen: intent,
            intent_time_us: 2,
            acked_gen: acked,
            acked_time_us: 1,
        }
    }

    fn valid(run_id: u64, index: u64, generation: u64) -> Decoded {
        Decoded::Valid(BlockHeader {
            run_id,
            index,
            generation,
            writer_id: 0,
            block_bytes: 1024,
            time_us: 0,
        })
    }

    fn tag(index: u64, generation: u64, sector_no: u32) -> Option<SectorTag> {
        Some(SectorTag {
            run_id: RUN,
            index,
            generation,
            sector_no,
        })
    }

    #[test]
    fn intact_blocks() {
        use Verdict::*;
        let c = |r: Option<BlockRecord>, d: Decoded| classify(5, RUN, r.as_ref(), &d);
        assert_eq!(c(Some(rec(3, 3)), valid(RUN, 5, 3)), Some(Fine));
        assert_eq!(c(Some(rec(3, 4)), valid(RUN, 5, 3)), Some(InFlight));
        assert_eq!(c(Some(rec(3, 4)), valid(RUN, 5, 4)), Some(InFlight));
        assert_eq!(c(Some(rec(3, 4)), valid(RUN, 5, 2)), Some(Lost));
        assert_eq!(c(Some(rec(3, 3)), valid(RUN, 5, 2)), Some(Lost));
        assert_eq!(c(Some(rec(3, 3)), Decoded::Zero), Some(Lost));
        assert_eq!(c(Some(rec(3, 3)), valid(RUN + 1, 5, 3)), Some(Lost));
        assert_eq!(c(Some(rec(0, 1)), Decoded::Zero), Some(InFlight));
        assert_eq!(c(Some(rec(0, 1)), valid(RUN + 1, 5, 9)), Some(InFlight));
        assert_eq!(c(Some(rec(3, 3)), valid(RUN, 5, 4)), Some(Unannounced));
        assert_eq!(c(Some(rec(3, 4)), valid(RUN, 5, 5)), Some(Unannounced));
        assert_eq!(c(Some(rec(3, 3)), valid(RUN, 6, 3)), Some(Misdirected));
        assert_eq!(c(None, valid(RUN, 6, 1)), Some(Misdirected));
        assert_eq!(c(None, valid(RUN, 5, 1)), Some(Unannounced));
        assert_eq!(c(None, Decoded::Zero), None);
        assert_eq!(c(None, valid(RUN + 1, 5, 1)), None);
    }

    #[test]
    fn names_match_the_json() {
        use Verdict::*;
        for v in [Fine, InFlight, Lost, Torn, Misdirected, Unannounced] {
            assert_eq!(
                serde_json::to_string(&v).unwrap(),
                format!("\"{}\"", v.name())
            );
        }
    }

    #[test]
    fn damaged_blocks() {
        use Verdict::*;
        let c = |r: Option<BlockRecord>, s: Vec<Option<SectorTag>>| {
            classify(5, RUN, r.as_ref(), &Decoded::Damaged(s))
        };
        // A write in flight torn between old and new: allowed.
        assert_eq!(
            c(Some(rec(3, 4)), vec![tag(5, 4, 0), tag(5, 3, 1)]),
            Some(InFlight)
        );
        // First write in flight torn over zeros: allowed.
        assert_eq!(c(Some(rec(0, 1)), vec![tag(5, 1, 0), None]), Some(InFlight));
        // No write in flight: any damage is an error.
        assert_eq!(c(Some(rec(3, 3)), vec![tag(5, 3, 0), None]), Some(Torn));
        // In flight, but part of the block predates the acknowledged write.
        assert_eq!(
            c(Some(rec(3, 4)), vec![tag(5, 4, 0), tag(5, 2, 1)]),
            Some(Torn)
        );
        assert_eq!(c(Some(rec(3, 4)), vec![tag(5, 4, 0), None]), Some(Torn));
        assert_eq!(
            c(Some(rec(3, 4)), vec![tag(5, 4, 0), tag(6, 1, 1)]),
            Some(Misdirected)
        );
        assert_eq!(c(None, vec![None, None]), None);
        assert_eq!(c(None, vec![tag(5, 1, 0), None]), Some(Unannounced));
    }
}
