//! Text output of `journal dump` and `journal check`.

use super::report::{Report, Status};
use crate::util::format_size;

pub fn print(r: &Report) -> Result<(), crate::out::StdoutError> {
    out!("{}", render(r))
}

/// The whole text report.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let id = r.store_id.as_deref().unwrap_or("none");
    out += &format!("journal {} (store id {id})\n", r.dir);
    if !r.segments.is_empty() {
        out += &segments_table(r);
    }
    if let Some(rows) = &r.listed_records {
        out += &records_table(rows);
    }
    if let Some(s) = &r.stop {
        out += &format!(
            "recovery stops: segment {} ({}) byte {}: {}\n",
            s.segment, s.file, s.offset, s.detail
        );
    }
    for p in &r.problems {
        out += &format!("problem [{}]: {}\n", p.kind, p.message);
    }
    for n in &r.notices {
        out += &format!("note [{}]: {}\n", n.kind, n.message);
    }
    let word = match r.status {
        Status::Clean => "CLEAN",
        Status::TornTail => "TORN TAIL",
        Status::Corrupt => "CORRUPT",
    };
    out += &format!("{word}: {}\n", r.summary);
    out
}

fn segments_table(r: &Report) -> String {
    let mut out = format!(
        "{:<26} {:>6} {:<24} {:>9} {:>6} {:>8} {:<17} {:>9}  {}\n",
        "segment file", "seq", "header", "size", "chain", "records", "lsn", "end", "stop"
    );
    for s in &r.segments {
        let lsns = match (s.first_lsn, s.last_lsn) {
            (Some(a), Some(b)) => format!("{a}..={b}"),
            _ => "-".into(),
        };
        out += &format!(
            "{:<26} {:>6} {:<24} {:>9} {:>6} {:>8} {:<17} {:>9}  {}\n",
            s.file,
            s.seq,
            s.header,
            format_size(s.file_bytes),
            if s.in_chain { "yes" } else { "no" },
            s.records,
            lsns,
            s.end_offset.map_or_else(|| "-".into(), |e| e.to_string()),
            s.stop.as_deref().unwrap_or("-"),
        );
    }
    out
}

fn records_table(rows: &[super::report::RecordRow]) -> String {
    let mut out = format!(
        "{:>10} {:>6} {:>9} {:>9} {:<8} {:<10} {:<5}  {}\n",
        "lsn", "seg", "offset", "size", "checksum", "salt", "epoch", "payload"
    );
    for r in rows {
        out += &format!(
            "{:>10} {:>6} {:>9} {:>9} {:<8} {:<10} {:<5}  {}\n",
            r.lsn,
            r.segment,
            r.offset,
            r.size,
            r.checksum,
            r.salt,
            if r.epoch_start { "start" } else { "" },
            r.payload_hex.as_deref().unwrap_or(""),
        );
    }
    out += &format!("({} records listed)\n", rows.len());
    out
}
