//! What `dump` and `check` report: the scan of a journal directory turned
//! into named rows, and the verdict — clean, torn tail, or corrupt.

use std::path::Path;

use keel::io::{OpenMode, OpenOptions, Vfs};
use keel::journal::{
    self, JournalError, RecordError, RecordInfo, Scan, SegmentScan, StopReason, FLAG_EPOCH_START,
    RECORD_HEADER_BYTES,
};
use serde::Serialize;

use super::RecordFilter;

/// The verdict on a journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The chain ends where nothing was written (or at a segment's end).
    Clean,
    /// The chain ends at a damaged record with nothing valid of its epoch
    /// beyond the reach of one torn write: what a crash leaves.
    TornTail,
    /// Damage a crash cannot explain: recovery would lose records, or a
    /// file cannot be read.
    Corrupt,
}

impl Status {
    pub fn exit_code(self) -> u8 {
        match self {
            Status::Clean | Status::TornTail => 0,
            Status::Corrupt => 1,
        }
    }
}

/// Everything `dump` and `check` print.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub dir: String,
    pub status: Status,
    /// One sentence: the verdict and why.
    pub summary: String,
    /// The store id shared by the segments, hex.
    pub store_id: Option<String>,
    pub segments: Vec<SegmentRow>,
    /// Segments in the chain recovery would keep.
    pub chain_segments: usize,
    /// Records recovery would keep.
    pub records: u64,
    pub first_lsn: Option<u64>,
    pub last_lsn: Option<u64>,
    /// Where recovery would stop, and why.
    pub stop: Option<StopRow>,
    /// Each reason for the `corrupt` status.
    pub problems: Vec<Problem>,
    /// What recovery will tidy that is not damage (same fields as a
    /// problem).
    pub notices: Vec<Problem>,
    /// The records listed by `dump --records`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listed_records: Option<Vec<RecordRow>>,
    /// Why the journal could not be read, when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SegmentRow {
    pub file: String,
    pub seq: u64,
    pub file_bytes: u64,
    pub header_ok: bool,
    /// `ok`, or why the header was not accepted.
    pub header: String,
    pub store_id: Option<String>,
    pub block_bytes: Option<u32>,
    pub segment_bytes: Option<u64>,
    pub in_chain: bool,
    pub records: usize,
    pub first_lsn: Option<u64>,
    pub last_lsn: Option<u64>,
    /// Byte offset just past the last record kept (chain segments).
    pub end_offset: Option<u64>,
    /// Why the records of this segment end there (chain segments).
    pub stop: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StopRow {
    pub segment: u64,
    pub file: String,
    pub offset: u64,
    /// `clean_end`, `segment_end`, `damaged` or `stale`.
    pub reason: &'static str,
    pub detail: String,
    /// The checksum of what sits at the stop: `bad`, `ok` (a valid record
    /// that does not continue the chain, or has unknown flags),
    /// `unverifiable` (its length runs past the segment) or none (zeros).
    pub checksum: Option<&'static str>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    /// `damage_before_valid_records`, `damaged_header_below_chain`,
    /// `wrong_length`, `unknown_flags`, `foreign_segment` or `unreadable`.
    pub kind: &'static str,
    pub segment: Option<u64>,
    pub offset: Option<u64>,
    pub message: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct RecordRow {
    pub lsn: u64,
    pub segment: u64,
    pub offset: u64,
    /// Payload bytes.
    pub size: u32,
    /// Always `ok`: only records whose checksum verifies are in the chain.
    pub checksum: &'static str,
    pub epoch_start: bool,
    pub salt: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_hex: Option<String>,
}

/// Inspect `dir`. An error means there is nothing to inspect (exit 2);
/// a journal that cannot be read completely is a `corrupt` report.
pub fn build(vfs: &dyn Vfs, dir: &Path, filter: Option<RecordFilter>) -> anyhow::Result<Report> {
    let scan = match journal::inspect(vfs, dir) {
        Ok(scan) => scan,
        Err(e @ JournalError::NotAJournal(_)) => {
            // A store's directory given for its journal: say where it is.
            let inner = dir.join(keel::db::JOURNAL_DIR);
            if inner.is_dir() {
                anyhow::bail!(
                    "{e}; {} holds a store, whose journal is {}",
                    dir.display(),
                    inner.display()
                );
            }
            return Err(e.into());
        }
        Err(e @ JournalError::ForeignSegment { .. }) => {
            return Ok(unreadable(dir, "foreign_segment", e))
        }
        Err(e @ JournalError::Io(_)) => return Ok(unreadable(dir, "unreadable", e)),
        Err(e) => return Err(e.into()),
    };
    let mut report = from_scan(dir, &scan);
    if let Some(f) = filter {
        match list_records(vfs, &scan, f) {
            Ok(rows) => report.listed_records = Some(rows),
            Err(e) => {
                let e = unreadable(dir, "unreadable", e);
                report.status = e.status;
                report.summary = e.summary;
                report.problems.extend(e.problems);
                report.error = e.error;
            }
        }
    }
    Ok(report)
}

fn unreadable(dir: &Path, kind: &'static str, e: JournalError) -> Report {
    Report {
        dir: dir.display().to_string(),
        status: Status::Corrupt,
        summary: format!("corrupt: {e}"),
        store_id: None,
        segments: Vec::new(),
        chain_segments: 0,
        records: 0,
        first_lsn: None,
        last_lsn: None,
        stop: None,
        problems: vec![Problem {
            kind,
            segment: None,
            offset: None,
            message: e.to_string(),
        }],
        notices: Vec::new(),
        listed_records: None,
        error: Some(e.to_string()),
    }
}

fn hex_id(id: u64) -> String {
    format!("{id:#018x}")
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into(),
    )
}

fn segment_row(s: &SegmentScan) -> SegmentRow {
    let h = s.header.ok();
    SegmentRow {
        file: file_name(&s.path),
        seq: s.seq,
        file_bytes: s.file_len,
        header_ok: h.is_some(),
        header: match s.header {
            Ok(_) => "ok".into(),
            Err(e) => e.to_string(),
        },
        store_id: h.map(|h| hex_id(h.store_id)),
        block_bytes: h.map(|h| h.block_size),
        segment_bytes: h.map(|h| h.segment_size),
        in_chain: s.in_chain,
        records: s.records.len(),
        first_lsn: s.records.first().map(|r| r.lsn),
        last_lsn: s.records.last().map(|r| r.lsn),
        end_offset: s.in_chain.then_some(s.end_pos),
        stop: s.stop.as_ref().map(|r| r.to_string()),
    }
}

fn stop_row(scan: &Scan, seq: u64, offset: u64, reason: &StopReason) -> StopRow {
    let (kind, checksum) = match reason {
        StopReason::CleanEnd => ("clean_end", None),
        StopReason::SegmentEnd => ("segment_end", None),
        StopReason::Damaged(RecordError::BadChecksum) => ("damaged", Some("bad")),
        StopReason::Damaged(RecordError::BadLength) => ("damaged", Some("unverifiable")),
        StopReason::Damaged(RecordError::BadPadding) => ("damaged", None),
        StopReason::Damaged(_) => ("damaged", Some("ok")),
        StopReason::Stale { .. } => ("stale", Some("ok")),
    };
    let file = scan
        .segments
        .iter()
        .find(|s| s.seq == seq)
        .map_or_else(String::new, |s| file_name(&s.path));
    StopRow {
        segment: seq,
        file,
        offset,
        reason: kind,
        detail: reason.to_string(),
        checksum,
    }
}

/// The reasons, if any, to call the journal corrupt.
fn problems(scan: &Scan) -> Vec<Problem> {
    let mut out = Vec::new();
    if let (Some(e), Some((seq, pos, reason))) = (scan.valid_after_damage, &scan.stop) {
        out.push(Problem {
            kind: "damage_before_valid_records",
            segment: Some(*seq),
            offset: Some(*pos),
            message: format!(
                "recovery stops at segment {seq} byte {pos} ({reason}), but record {} at \
                 segment {} byte {} says every record up to lsn {} was durable: acknowledged \
                 records would be lost",
                e.lsn, e.seq, e.pos, e.durable_lsn
            ),
        });
    }
    if let Some(seq) = scan.damaged_before_chain {
        let why = scan
            .segments
            .iter()
            .find(|s| s.seq == seq)
            .and_then(|s| s.header.err())
            .map_or_else(String::new, |e| format!(" ({e})"));
        out.push(Problem {
            kind: "damaged_header_below_chain",
            segment: Some(seq),
            offset: Some(0),
            message: format!(
                "segment {seq} lies below the start of the chain and its header is not \
                 valid{why}: the records it held are lost"
            ),
        });
    }
    out.extend(file_problems(scan));
    if let Some((seq, pos, StopReason::Damaged(RecordError::BadFlags))) = &scan.stop {
        out.push(Problem {
            kind: "unknown_flags",
            segment: Some(*seq),
            offset: Some(*pos),
            message: format!(
                "the record at segment {seq} byte {pos} has a valid checksum but unknown flags \
                 or reserved bytes: written by a newer format, or corrupt"
            ),
        });
    }
    out
}

/// Problems with the segment files themselves: set aside by an earlier
/// open, or not the length their header says.
fn file_problems(scan: &Scan) -> Vec<Problem> {
    let mut out = Vec::new();
    for path in &scan.set_aside {
        out.push(Problem {
            kind: "segment_set_aside",
            segment: None,
            offset: None,
            message: format!(
                "{} was set aside by an earlier open: its header was damaged below the start \
                 of the chain, so the records it held are lost (kept as evidence; remove it \
                 once inspected)",
                path.display()
            ),
        });
    }
    for s in &scan.segments {
        if let Ok(h) = s.header {
            if h.segment_size != s.file_len {
                out.push(Problem {
                    kind: "wrong_length",
                    segment: Some(s.seq),
                    offset: None,
                    message: format!(
                        "segment {} is {} bytes long but its header says {}: the file was \
                         truncated or extended",
                        s.seq, s.file_len, h.segment_size
                    ),
                });
            }
        }
    }
    out
}

/// What recovery will tidy that is not damage.
fn notices(scan: &Scan) -> Vec<Problem> {
    let mut out = Vec::new();
    if let Some(cut) = scan.pending_cut {
        out.push(Problem {
            kind: "unfinished_truncation",
            segment: Some(cut.seq),
            offset: None,
            message: format!(
                "a truncation after lsn {} was interrupted: records it may have left past the \
                 chain prove nothing; opening the journal for writing zeroes them",
                cut.cut_from - 1
            ),
        });
    }
    if let Some(seq) = scan.leftover_after_chain {
        out.push(Problem {
            kind: "unacknowledged_records_after_chain",
            segment: Some(seq),
            offset: None,
            message: format!(
                "segment {seq} holds valid records of the last epoch past the end of the \
                 chain, within reach of the torn write the chain stops at: that write was cut \
                 short, so they were never acknowledged; opening the journal for writing zeroes \
                 them before its first append"
            ),
        });
    }
    out
}

fn from_scan(dir: &Path, scan: &Scan) -> Report {
    let chain: Vec<&SegmentScan> = scan.segments.iter().filter(|s| s.in_chain).collect();
    let records: u64 = chain.iter().map(|s| s.records.len() as u64).sum();
    let stop = scan
        .stop
        .as_ref()
        .map(|(seq, pos, reason)| stop_row(scan, *seq, *pos, reason));
    let problems = problems(scan);
    let notices = notices(scan);
    let status = if !problems.is_empty() {
        Status::Corrupt
    } else if matches!(&scan.stop, Some((_, _, StopReason::Damaged(_)))) {
        Status::TornTail
    } else {
        Status::Clean
    };
    let kept = match (scan.first_lsn, scan.last_lsn) {
        (Some(a), Some(b)) => format!("{records} records (lsn {a}..={b})"),
        _ => "no records".into(),
    };
    let at = stop.as_ref().map_or_else(String::new, |s| {
        format!(" at segment {} byte {} ({})", s.segment, s.offset, s.detail)
    });
    let summary = match status {
        Status::Clean => format!("clean: {kept} in {} segment(s); ends{at}", chain.len()),
        Status::TornTail => {
            let after = if scan.leftover_after_chain.is_some() {
                "what valid records of the last epoch follow it were never acknowledged \
                 (opening the journal zeroes them)"
            } else {
                "no record after it says it was durable"
            };
            format!(
                "torn tail: recovery keeps {kept} and discards the damaged tail{at}; {after}, as \
                 after a write cut short by a crash"
            )
        }
        Status::Corrupt => format!("corrupt: {}", problems[0].message),
    };
    Report {
        dir: dir.display().to_string(),
        status,
        summary,
        store_id: scan.store_id.map(hex_id),
        segments: scan.segments.iter().map(segment_row).collect(),
        chain_segments: chain.len(),
        records,
        first_lsn: scan.first_lsn,
        last_lsn: scan.last_lsn,
        stop,
        problems,
        notices,
        listed_records: None,
        error: None,
    }
}

fn record_row(seq: u64, r: &RecordInfo, payload: Option<&[u8]>) -> RecordRow {
    RecordRow {
        lsn: r.lsn,
        segment: seq,
        offset: r.pos,
        size: r.len,
        checksum: "ok",
        epoch_start: r.flags & FLAG_EPOCH_START != 0,
        salt: format!("{:#010x}", r.salt),
        payload_hex: payload.map(|p| p.iter().map(|b| format!("{b:02x}")).collect()),
    }
}

/// The chain's records selected by `f`, reading payload prefixes if asked.
fn list_records(
    vfs: &dyn Vfs,
    scan: &Scan,
    f: RecordFilter,
) -> Result<Vec<RecordRow>, JournalError> {
    let mut rows = Vec::new();
    for seg in scan.segments.iter().filter(|s| s.in_chain) {
        let wanted = seg.records.iter().filter(|r| r.lsn >= f.from);
        let file = if f.payload_bytes > 0 && seg.records.iter().any(|r| r.lsn >= f.from) {
            Some(vfs.open(
                &seg.path,
                OpenOptions::new(OpenMode::Buffered).read_only(true),
            )?)
        } else {
            None
        };
        for r in wanted {
            if rows.len() >= f.limit {
                return Ok(rows);
            }
            let payload = match &file {
                Some(file) => {
                    let mut buf = vec![0u8; (r.len as usize).min(f.payload_bytes)];
                    file.read_exact_at(&mut buf, r.pos + RECORD_HEADER_BYTES as u64)?;
                    Some(buf)
                }
                None => None,
            };
            rows.push(record_row(seg.seq, r, payload.as_deref()));
        }
    }
    Ok(rows)
}
