//! Reading a damaged journal for the store's salvage (`db/salvage/`):
//! every record that proves itself by its own checksum, wherever it lies,
//! and the longest run of consecutive LSNs from a given point.
//!
//! Recovery (`scan.rs`) keeps one chain and stops at its first bad
//! record, as it must: it cannot tell a torn tail from damage in the
//! middle, and what lies past a torn write was never acknowledged. Salvage
//! looks further. It starts where the chain has the record it needs, and
//! past the chain's end searches the segment files byte by byte (the
//! damaged one from the damaged spot, then the following ones, whatever
//! their headers say) for the record with the next LSN. A record found so
//! is taken when it decodes (its checksum holds), carries its segment
//! file's `seq` (a recycled file's old records carry another) and its salt
//! is the previous record's or it starts an epoch: recovery's rule 2
//! without the rule that records sit back to back. The run stops at the
//! first LSN found nowhere. `docs/salvage.md` says what this promises.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::format::{lz4_decode, HeaderError, RecordHeader, FLAG_EPOCH_START, FLAG_LZ4};
use super::scan::{self, StopReason};
use super::{JournalError, Lsn};
use crate::io::Vfs;

/// A record found by its own checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Found {
    /// Index of its file in [`JournalSalvage::segments`].
    pub segment: usize,
    /// Byte offset of its header in the file.
    pub pos: u64,
    pub lsn: Lsn,
    pub len: u32,
    pub salt: u32,
    pub flags: u16,
}

/// One segment file of the journal directory.
#[derive(Debug, Clone)]
pub(crate) struct SegmentFile {
    pub path: PathBuf,
    /// The sequence number in its name.
    pub seq: u64,
    /// The segment size its header states, when the header is valid.
    pub segment_size: Option<u64>,
}

/// Damage seen in the journal's files, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Note {
    /// The segment (0 when the note is not about one segment).
    pub seq: u64,
    /// The byte offset in that segment.
    pub pos: u64,
    pub what: String,
    /// Whether the damage itself proves bytes of records gone (a file cut
    /// short), beyond the records the run of LSNs misses.
    pub loses_data: bool,
    /// The file is shorter than its header says: what followed `pos` is
    /// gone.
    pub cut_short: bool,
}

/// What a salvage read found in a journal directory.
#[derive(Debug, Clone, Default)]
pub(crate) struct JournalSalvage {
    pub segments: Vec<SegmentFile>,
    /// The store id the valid segment headers carry.
    pub store_id: Option<u64>,
    /// The largest segment size the headers record (see
    /// [`super::Scan::largest_segment_size`]).
    pub largest_segment_size: Option<u64>,
    /// Every record found, in file order (segment, then offset).
    found: Vec<Found>,
    /// Indexes into `found` of recovery's chain, in LSN order.
    chain: Vec<usize>,
    pub notes: Vec<Note>,
}

/// The consecutive records [`JournalSalvage::follow`] took.
#[derive(Debug, Clone, Default)]
pub(crate) struct Run {
    /// The records, in LSN order.
    pub records: Vec<Found>,
    /// The first LSN not taken.
    pub next_lsn: Lsn,
}

impl JournalSalvage {
    /// Read every segment file in `dir` (twice: once for recovery's chain,
    /// with [`super::inspect`], once byte by byte for every record),
    /// calling `progress(files read, files)` as it goes. Opens files for
    /// reading only.
    pub(crate) fn read(
        vfs: &dyn Vfs,
        dir: &Path,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<JournalSalvage, JournalError> {
        let scan = super::inspect(vfs, dir)?;
        let mut out = JournalSalvage {
            store_id: scan.store_id,
            largest_segment_size: scan.largest_segment_size,
            notes: notes(&scan),
            ..JournalSalvage::default()
        };
        let files = scan.segments.len();
        for (i, seg) in scan.segments.iter().enumerate() {
            progress(i, files);
            let bytes = scan::read_segment(vfs, &seg.path)?;
            let start = out.found.len();
            find_records(&bytes, seg.seq, i, &mut out.found);
            // The chain's records decode, so the search found them; were
            // one hidden behind an overlapping find, take it anyway.
            for r in seg.records.iter().filter(|_| seg.in_chain) {
                if !out.found[start..].iter().any(|f| f.pos == r.pos) {
                    out.found.push(Found {
                        segment: i,
                        pos: r.pos,
                        lsn: r.lsn,
                        len: r.len,
                        salt: r.salt,
                        flags: r.flags,
                    });
                }
            }
            out.found[start..].sort_by_key(|f| f.pos);
            for r in seg.records.iter().filter(|_| seg.in_chain) {
                let at = out.found[start..].partition_point(|f| f.pos < r.pos);
                out.chain.push(start + at);
            }
            out.segments.push(SegmentFile {
                path: seg.path.clone(),
                seq: seg.seq,
                segment_size: seg.header.ok().map(|h| h.segment_size),
            });
        }
        progress(files, files);
        Ok(out)
    }

    /// The records with LSNs `after + 1`, `after + 2`, … for as long as
    /// each is found: from recovery's chain where it holds `after + 1`
    /// (else after its end, when it ends at or before `after`; else from
    /// the first file's start), then each the first record further on in
    /// file order with the next LSN and a salt that continues the epoch or
    /// starts one.
    pub(crate) fn follow(&self, after: Lsn) -> Run {
        let (mut from, mut salt) = self.start(after);
        let mut run = Run {
            records: Vec::new(),
            next_lsn: after + 1,
        };
        while let Some(i) = self.find(from, run.next_lsn, salt) {
            let r = self.found[i];
            run.records.push(r);
            salt = Some(r.salt);
            run.next_lsn += 1;
            from = i + 1;
        }
        run
    }

    /// Where in `found` to look for `after + 1`, and the salt it must
    /// carry unless it starts an epoch (`None`: any).
    fn start(&self, after: Lsn) -> (usize, Option<u32>) {
        let (Some(&first), Some(&last)) = (self.chain.first(), self.chain.last()) else {
            return (0, None);
        };
        let (first_lsn, last_lsn) = (self.found[first].lsn, self.found[last].lsn);
        let salt_of = |lsn: Lsn| {
            (first_lsn..=last_lsn)
                .contains(&lsn)
                .then(|| self.found[self.chain[(lsn - first_lsn) as usize]].salt)
        };
        let want = after + 1;
        if (first_lsn..=last_lsn).contains(&want) {
            (self.chain[(want - first_lsn) as usize], salt_of(after))
        } else if last_lsn < want {
            (last + 1, salt_of(after))
        } else {
            (0, None)
        }
    }

    /// The first record from `found[from..]` with `lsn` whose salt is
    /// `salt` (any when `None`) or that starts an epoch.
    fn find(&self, from: usize, lsn: Lsn, salt: Option<u32>) -> Option<usize> {
        let fits = |r: &Found| {
            r.lsn == lsn && (salt.is_none_or(|s| s == r.salt) || r.flags & FLAG_EPOCH_START != 0)
        };
        self.found
            .get(from..)?
            .iter()
            .position(fits)
            .map(|k| from + k)
    }

    /// The highest LSN any record found carries.
    pub(crate) fn highest_lsn(&self) -> Option<Lsn> {
        self.found.iter().map(|r| r.lsn).max()
    }

    /// For each LSN above `lsn` that some record found carries, the first
    /// such record in file order, in LSN order.
    pub(crate) fn found_above(&self, lsn: Lsn) -> Vec<Found> {
        let mut first: BTreeMap<Lsn, Found> = BTreeMap::new();
        for r in self.found.iter().filter(|r| r.lsn > lsn) {
            first.entry(r.lsn).or_insert(*r);
        }
        first.into_values().collect()
    }
}

/// Reads records' payloads back, one segment file held at a time.
#[derive(Debug, Default)]
pub(crate) struct PayloadReader {
    held: Option<(usize, Vec<u8>)>,
}

impl PayloadReader {
    /// The payload of `r` (decompressed), read again and checked again:
    /// an I/O error is the outer error; a record that no longer decodes
    /// as found, or whose compressed payload does not decode, the inner.
    pub(crate) fn payload(
        &mut self,
        vfs: &dyn Vfs,
        js: &JournalSalvage,
        r: &Found,
    ) -> Result<Result<Vec<u8>, String>, JournalError> {
        if self.held.as_ref().is_none_or(|(i, _)| *i != r.segment) {
            self.held = None;
            let bytes = scan::read_segment(vfs, &js.segments[r.segment].path)?;
            self.held = Some((r.segment, bytes));
        }
        let (_, bytes) = self.held.as_ref().expect("held above");
        let at = usize::try_from(r.pos).unwrap_or(usize::MAX);
        let Some(Ok((h, stored))) = bytes.get(at..).map(RecordHeader::decode) else {
            return Ok(Err("the record no longer decodes: the file changed".into()));
        };
        if (h.lsn, h.len) != (r.lsn, r.len) {
            return Ok(Err("another record is there now: the file changed".into()));
        }
        if h.flags & FLAG_LZ4 == 0 {
            return Ok(Ok(stored.to_vec()));
        }
        // A payload never exceeds the segment that holds it.
        Ok(lz4_decode(stored, bytes.len())
            .ok_or_else(|| "its compressed payload does not decode".into()))
    }
}

/// Every record in `bytes` (segment file `seq`, index `segment`) that
/// decodes and carries `seq` (`scan::valid_records`).
fn find_records(bytes: &[u8], seq: u64, segment: usize, out: &mut Vec<Found>) {
    out.extend(scan::valid_records(bytes, seq, 0).map(|e| Found {
        segment,
        pos: e.pos,
        lsn: e.lsn,
        len: e.len,
        salt: e.salt,
        flags: e.flags,
    }));
}

/// The damage recovery's scan saw, in words: headers that are not valid
/// (other than blank spares and files renamed for recycling), files of
/// another length than their header states, where the chain stops at a
/// damaged record, and files an earlier open set aside.
fn notes(scan: &super::Scan) -> Vec<Note> {
    let mut notes = Vec::new();
    for seg in &scan.segments {
        match seg.header {
            Err(HeaderError::Blank | HeaderError::SeqMismatch(_)) => {}
            Err(e) => notes.push(Note {
                seq: seg.seq,
                pos: 0,
                what: format!(
                    "the segment's header is not valid ({e}); its records were read by their own \
                     checksums"
                ),
                loses_data: false,
                cut_short: false,
            }),
            Ok(h) if h.segment_size != seg.file_len => notes.push(Note {
                seq: seg.seq,
                pos: seg.file_len.min(h.segment_size),
                what: format!(
                    "the file holds {} bytes but its header says {}: cut short (or extended) \
                     behind the journal's back; whatever followed byte {} is gone",
                    seg.file_len,
                    h.segment_size,
                    seg.file_len.min(h.segment_size)
                ),
                loses_data: seg.file_len < h.segment_size,
                cut_short: seg.file_len < h.segment_size,
            }),
            Ok(_) => {}
        }
    }
    if let Some((seq, pos, reason @ StopReason::Damaged(_))) = &scan.stop {
        notes.push(Note {
            seq: *seq,
            pos: *pos,
            what: format!("recovery's chain of records stops here: {reason}"),
            loses_data: false,
            cut_short: false,
        });
    }
    for path in &scan.set_aside {
        notes.push(Note {
            seq: 0,
            pos: 0,
            what: format!(
                "{} was set aside by an earlier open (its header was damaged below the chain); \
                 its records are not read",
                path.display()
            ),
            loses_data: true,
            cut_short: false,
        });
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::fuzzing::segment_from_recipe;
    use crate::journal::RECORD_HEADER_BYTES;

    /// Records found by the byte search in a segment built from a recipe
    /// (one record per LSN, salt 7): each at its place, and none inside
    /// another's payload.
    #[test]
    fn the_byte_search_finds_every_record_and_steps_over_payloads() {
        // Three records of 5, 40 and 0 payload bytes, no flips.
        let recipe = [3u8, 0, 5, 1, 2, 3, 4, 5, 0, 40]
            .into_iter()
            .chain(std::iter::repeat_n(9u8, 40))
            .chain([0, 0])
            .collect::<Vec<u8>>();
        let seg = segment_from_recipe(&recipe);
        let mut found = Vec::new();
        find_records(&seg, 1, 0, &mut found);
        let lsns: Vec<Lsn> = found.iter().map(|f| f.lsn).collect();
        assert_eq!(lsns, [1, 2, 3]);
        assert_eq!(found[0].pos, 512);
        assert_eq!(found[1].pos, 512 + RECORD_HEADER_BYTES as u64 + 5);
    }

    fn found(segment: usize, pos: u64, lsn: Lsn, salt: u32, flags: u16) -> Found {
        Found {
            segment,
            pos,
            lsn,
            len: 0,
            salt,
            flags,
        }
    }

    /// The run starts in the chain, skips a record of another epoch and
    /// a stale lower LSN, takes a record that starts an epoch, and stops
    /// at the first LSN found nowhere.
    #[test]
    fn follow_keeps_the_salt_rule_and_stops_at_the_first_gap() {
        let js = JournalSalvage {
            found: vec![
                found(0, 10, 1, 5, FLAG_EPOCH_START),
                found(0, 20, 2, 5, 0),
                found(0, 30, 3, 9, 0), // another epoch: not 3
                found(0, 40, 1, 5, 0), // stale
                found(1, 10, 3, 5, 0), // 3
                found(1, 20, 4, 6, FLAG_EPOCH_START),
                found(1, 30, 6, 6, 0), // after the gap at 5
            ],
            chain: vec![0, 1],
            ..JournalSalvage::default()
        };
        let run = js.follow(0);
        let lsns: Vec<Lsn> = run.records.iter().map(|r| r.lsn).collect();
        assert_eq!(lsns, [1, 2, 3, 4]);
        assert_eq!(run.records[2].segment, 1);
        assert_eq!(run.next_lsn, 5);
        assert_eq!(js.follow(2).records.len(), 2, "from inside the chain");
        assert_eq!(js.follow(6).next_lsn, 7, "nothing above");
        assert_eq!(js.highest_lsn(), Some(6));
        assert_eq!(
            js.found_above(4).iter().map(|r| r.lsn).collect::<Vec<_>>(),
            [6]
        );
    }
}
