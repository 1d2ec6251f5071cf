//! The journal's on-disk format: encoding and decoding of segment headers
//! and records. `docs/format.md` is the specification; this file follows it
//! and derives every offset from the one before.

use crate::le::{get_u32, get_u64, put_u32, put_u64};

/// Segment header magic.
pub const SEGMENT_MAGIC: [u8; 8] = *b"KEELSEG1";
/// On-disk format version. Version 2 added `base_lsn` and
/// `max_write_bytes` to the segment header; version 3 added each record's
/// `durable_lsn` and the segment header's `cut_from`. Older journals are
/// refused ([`HeaderError::UnsupportedVersion`]).
pub const FORMAT_VERSION: u32 = 3;

/// The smallest and largest block size a header may state.
pub const MIN_BLOCK_BYTES: u32 = 512;
pub const MAX_BLOCK_BYTES: u32 = 1 << 20;

// Segment header layout (little-endian), inside the first block.
const SH_MAGIC: usize = 0;
const SH_VERSION: usize = SH_MAGIC + 8;
const SH_BLOCK: usize = SH_VERSION + 4;
const SH_STORE_ID: usize = SH_BLOCK + 4;
const SH_SEQ: usize = SH_STORE_ID + 8;
const SH_SEGMENT_SIZE: usize = SH_SEQ + 8;
const SH_BASE_LSN: usize = SH_SEGMENT_SIZE + 8;
const SH_MAX_WRITE: usize = SH_BASE_LSN + 8;
const SH_CUT_FROM: usize = SH_MAX_WRITE + 4;
const SH_CRC: usize = SH_CUT_FROM + 8;
/// Bytes of the segment header.
pub const SEGMENT_HEADER_BYTES: usize = SH_CRC + 4;
const _: () = assert!(SEGMENT_HEADER_BYTES == 64);
// The header's extension, right after it: the journal's largest segment
// size, and a CRC32C of the header and that field. Readers that predate it
// ignore these bytes (zeros in their journals).
const SX_LARGEST: usize = SEGMENT_HEADER_BYTES;
const SX_CRC: usize = SX_LARGEST + 8;
/// Bytes of the first block that carry meaning (the header and its
/// extension); the rest of the block is zero.
pub const SEGMENT_HEADER_BLOCK_BYTES: usize = SX_CRC + 4;
const _: () = assert!(SEGMENT_HEADER_BLOCK_BYTES == 76);

// Record header layout (little-endian).
const RH_CRC: usize = 0;
const RH_LEN: usize = RH_CRC + 4;
const RH_LSN: usize = RH_LEN + 4;
pub(super) const RH_SEQ: usize = RH_LSN + 8;
pub(super) const RH_SALT: usize = RH_SEQ + 8;
const RH_FLAGS: usize = RH_SALT + 4;
const RH_RESERVED: usize = RH_FLAGS + 2;
pub(super) const RH_DURABLE: usize = RH_RESERVED + 2;
/// Size of a record header.
pub const RECORD_HEADER_BYTES: usize = RH_DURABLE + 8;
const _: () = assert!(RECORD_HEADER_BYTES == 40);

/// Record flag: the first record written after an open (or a truncation);
/// its salt starts a new epoch.
pub const FLAG_EPOCH_START: u16 = 1;
/// Record flag: the payload is LZ4-compressed (a block, after a 4-byte
/// little-endian length of the original payload).
pub const FLAG_LZ4: u16 = 2;
const KNOWN_FLAGS: u16 = FLAG_EPOCH_START | FLAG_LZ4;

/// Compress `payload` for a record if that makes it smaller: the stored
/// bytes (original length, then the LZ4 block), or `None`.
pub fn lz4_encode(payload: &[u8]) -> Option<Vec<u8>> {
    let bound = lz4_flex::block::get_maximum_output_size(payload.len());
    let mut out = vec![0u8; 4 + bound];
    out[..4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    let n = lz4_flex::block::compress_into(payload, &mut out[4..]).ok()?;
    out.truncate(4 + n);
    (out.len() < payload.len()).then_some(out)
}

/// The original payload of a record stored with `FLAG_LZ4`, if it decodes
/// to the length it states and that length is at most `max_len` (the
/// largest record the journal can hold): the stated length is untrusted
/// input, and is checked before anything that size is allocated.
pub fn lz4_decode(stored: &[u8], max_len: usize) -> Option<Vec<u8>> {
    let len = u32::from_le_bytes(stored.get(..4)?.try_into().ok()?) as usize;
    if len > max_len {
        return None;
    }
    let mut out = vec![0u8; len];
    let n = lz4_flex::block::decompress_into(&stored[4..], &mut out).ok()?;
    (n == len).then_some(out)
}

/// The identity of a segment, from its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Bytes per block: every write is a multiple of it and aligned to it.
    pub block_size: u32,
    /// Random, chosen when the journal is created; every segment of a
    /// journal carries the same one.
    pub store_id: u64,
    /// The segment's sequence number; must equal the one in the file name.
    pub seq: u64,
    /// The segment file's length in bytes.
    pub segment_size: u64,
    /// Where LSN numbering goes on: the journal's next LSN when the header
    /// was written (ahead of need for a spare; exactly `lsn + 1` when
    /// `truncate_after(lsn)` empties the segment). When a journal's chain
    /// holds no record at all, its next record gets the base LSN of the
    /// chain's first segment, so numbering never restarts at 1 once
    /// anything was appended.
    pub base_lsn: u64,
    /// The largest write the journal that wrote this segment makes (its
    /// `max_write_bytes`): how far past the end of the chain a crash can
    /// leave torn bytes.
    pub max_write_bytes: u32,
    /// Nonzero while a `truncate_after(cut_from - 1)` whose cut lies in
    /// this segment may not have finished: the first LSN it discards.
    /// Records in this segment and later ones with an LSN of at least this
    /// may be left from before the cut, so their `durable_lsn` proves
    /// nothing about the chain that goes on from the cut. Zero otherwise
    /// (an LSN is never 0, so a cut after LSN 0 is marked too).
    pub cut_from: u64,
}

/// Why a segment header was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderError {
    /// All zeros: a segment being prepared.
    Blank,
    /// The first 8 bytes are not the magic `KEELSEG1`.
    BadMagic,
    /// The header does not match its CRC32C: torn or corrupt.
    BadChecksum,
    /// A format version other than [`FORMAT_VERSION`] (the version found).
    UnsupportedVersion(u32),
    /// A block size, segment size or write size no journal writes (the
    /// checksum matched: written that way, or corrupt before it was
    /// computed).
    BadGeometry,
    /// A valid header whose sequence number is not the one in the file
    /// name: renamed for recycling, its header not yet rewritten.
    SeqMismatch(u64),
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderError::Blank => f.write_str("blank (zeros)"),
            HeaderError::BadMagic => f.write_str("bad magic"),
            HeaderError::BadChecksum => f.write_str("bad checksum"),
            HeaderError::UnsupportedVersion(v) => write!(f, "unsupported format version {v}"),
            HeaderError::BadGeometry => f.write_str("impossible block, segment or write size"),
            HeaderError::SeqMismatch(s) => write!(f, "header says segment {s}"),
        }
    }
}

impl SegmentHeader {
    /// Encode into the first `SEGMENT_HEADER_BYTES` of `out`.
    pub fn encode(&self, out: &mut [u8]) {
        let out = &mut out[..SEGMENT_HEADER_BYTES];
        out.fill(0);
        out[SH_MAGIC..SH_VERSION].copy_from_slice(&SEGMENT_MAGIC);
        put_u32(out, SH_VERSION, FORMAT_VERSION);
        put_u32(out, SH_BLOCK, self.block_size);
        put_u64(out, SH_STORE_ID, self.store_id);
        put_u64(out, SH_SEQ, self.seq);
        put_u64(out, SH_SEGMENT_SIZE, self.segment_size);
        put_u64(out, SH_BASE_LSN, self.base_lsn);
        put_u32(out, SH_MAX_WRITE, self.max_write_bytes);
        put_u64(out, SH_CUT_FROM, self.cut_from);
        let crc = crc32c::crc32c(&out[..SH_CRC]);
        put_u32(out, SH_CRC, crc);
    }

    /// Encode the header and its extension, which records `largest`: the
    /// journal's largest segment size (what bounds its records), into the
    /// first [`SEGMENT_HEADER_BLOCK_BYTES`] of `out`.
    pub fn encode_with_largest(&self, largest: u64, out: &mut [u8]) {
        self.encode(out);
        put_u64(out, SX_LARGEST, largest);
        let crc = crc32c::crc32c(&out[..SX_CRC]);
        put_u32(out, SX_CRC, crc);
    }

    /// The journal's largest segment size that the extension after this
    /// header (decoded from `bytes`) records: `None` when it is absent
    /// (zeros: a journal written before it existed), does not match its
    /// CRC, or states a size no segment can have (not whole blocks, under
    /// 4 blocks, or under this segment's own size).
    pub fn decode_largest(&self, bytes: &[u8]) -> Option<u64> {
        let b = bytes.get(..SEGMENT_HEADER_BLOCK_BYTES)?;
        if crc32c::crc32c(&b[..SX_CRC]) != get_u32(b, SX_CRC) {
            return None;
        }
        let largest = get_u64(b, SX_LARGEST);
        let block = u64::from(self.block_size);
        (largest % block == 0 && largest >= 4 * block && largest >= self.segment_size)
            .then_some(largest)
    }

    /// Decode and validate a header.
    pub fn decode(bytes: &[u8]) -> Result<SegmentHeader, HeaderError> {
        if bytes.len() < SEGMENT_HEADER_BYTES {
            return Err(HeaderError::Blank);
        }
        let b = &bytes[..SEGMENT_HEADER_BYTES];
        if b.iter().all(|&x| x == 0) {
            return Err(HeaderError::Blank);
        }
        if b[SH_MAGIC..SH_VERSION] != SEGMENT_MAGIC {
            return Err(HeaderError::BadMagic);
        }
        if crc32c::crc32c(&b[..SH_CRC]) != get_u32(b, SH_CRC) {
            return Err(HeaderError::BadChecksum);
        }
        let version = get_u32(b, SH_VERSION);
        if version != FORMAT_VERSION {
            return Err(HeaderError::UnsupportedVersion(version));
        }
        let h = SegmentHeader {
            block_size: get_u32(b, SH_BLOCK),
            store_id: get_u64(b, SH_STORE_ID),
            seq: get_u64(b, SH_SEQ),
            segment_size: get_u64(b, SH_SEGMENT_SIZE),
            base_lsn: get_u64(b, SH_BASE_LSN),
            max_write_bytes: get_u32(b, SH_MAX_WRITE),
            cut_from: get_u64(b, SH_CUT_FROM),
        };
        if !h.geometry_ok() {
            return Err(HeaderError::BadGeometry);
        }
        Ok(h)
    }

    /// The sizes every reader divides and indexes by: a power-of-two block
    /// size in range, a segment of at least 4 whole blocks, a write size of
    /// at least one block, and a base LSN that is a valid LSN.
    fn geometry_ok(&self) -> bool {
        let block = self.block_size;
        block.is_power_of_two()
            && (MIN_BLOCK_BYTES..=MAX_BLOCK_BYTES).contains(&block)
            && self.segment_size % u64::from(block) == 0
            && self.segment_size >= 4 * u64::from(block)
            && self.max_write_bytes >= block
            && self.base_lsn >= 1
    }
}

/// The fixed fields of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// The payload length in bytes, as stored (after compression).
    pub len: u32,
    /// The record's log sequence number.
    pub lsn: u64,
    /// The sequence number of the segment the record was written into.
    pub seq: u64,
    /// The epoch the record was written in: a random value chosen at every
    /// open and every `truncate_after`.
    pub salt: u32,
    /// The record's flag bits: [`FLAG_EPOCH_START`], [`FLAG_LZ4`].
    pub flags: u16,
    /// Every record with an LSN up to this one was durable when this record
    /// was made (0: none is claimed). Always below `lsn`. A valid record
    /// claiming `durable_lsn >= n` proves that damage at record `n` is
    /// corruption, not a torn write.
    pub durable_lsn: u64,
}

/// What sits at a position where a record header was expected, when it is
/// not a valid record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordError {
    /// Zeros: never written (the normal end of the journal).
    Zeros,
    /// The header or payload does not match its checksum: torn or corrupt.
    BadChecksum,
    /// The length runs past the end of the segment.
    BadLength,
    /// Unknown flag bits, nonzero reserved bytes, or a `durable_lsn` not
    /// below the record's own LSN.
    BadFlags,
    /// Zeros where a record should start, inside a block, then nonzero
    /// bytes before the block ends: padding torn or corrupted (see the
    /// recovery rules). Never returned by the decoder itself.
    BadPadding,
}

impl RecordHeader {
    /// Encode the header for `payload` into `out[..RECORD_HEADER_BYTES]`,
    /// with the checksum over header and payload.
    pub fn encode(&self, payload: &[u8], out: &mut [u8]) {
        debug_assert_eq!(self.len as usize, payload.len());
        self.encode_header(payload, out);
    }

    /// Encode the header into `out`, whose payload (`self.len` bytes after
    /// the header) is already in place: a record gathered from parts.
    pub fn encode_in_place(&self, out: &mut [u8]) {
        let (h, rest) = out.split_at_mut(RECORD_HEADER_BYTES);
        self.encode_header(&rest[..self.len as usize], h);
    }

    fn encode_header(&self, payload: &[u8], out: &mut [u8]) {
        let h = &mut out[..RECORD_HEADER_BYTES];
        put_u32(h, RH_LEN, self.len);
        put_u64(h, RH_LSN, self.lsn);
        put_u64(h, RH_SEQ, self.seq);
        put_u32(h, RH_SALT, self.salt);
        h[RH_FLAGS..RH_FLAGS + 2].copy_from_slice(&self.flags.to_le_bytes());
        h[RH_RESERVED..RH_RESERVED + 2].fill(0);
        put_u64(h, RH_DURABLE, self.durable_lsn);
        let crc = crc32c::crc32c_append(crc32c::crc32c(&h[RH_LEN..]), payload);
        put_u32(h, RH_CRC, crc);
    }

    /// Decode the record at the start of `bytes` (header and payload must be
    /// inside `bytes`), checking length, flags and checksum.
    pub fn decode(bytes: &[u8]) -> Result<(RecordHeader, &[u8]), RecordError> {
        if bytes.len() < RECORD_HEADER_BYTES {
            return Err(if bytes.iter().all(|&b| b == 0) {
                RecordError::Zeros
            } else {
                RecordError::BadLength
            });
        }
        let h = &bytes[..RECORD_HEADER_BYTES];
        if h.iter().all(|&b| b == 0) {
            return Err(RecordError::Zeros);
        }
        let len = get_u32(h, RH_LEN);
        let flags = u16::from_le_bytes([h[RH_FLAGS], h[RH_FLAGS + 1]]);
        let end = RECORD_HEADER_BYTES as u64 + u64::from(len);
        if end > bytes.len() as u64 {
            return Err(RecordError::BadLength);
        }
        let payload = &bytes[RECORD_HEADER_BYTES..end as usize];
        let crc = crc32c::crc32c_append(crc32c::crc32c(&h[RH_LEN..]), payload);
        if crc != get_u32(h, RH_CRC) {
            return Err(RecordError::BadChecksum);
        }
        let lsn = get_u64(h, RH_LSN);
        let durable_lsn = get_u64(h, RH_DURABLE);
        // A claim about the record itself or a later one is impossible: a
        // record is made before it is durable.
        if flags & !KNOWN_FLAGS != 0
            || h[RH_RESERVED..RH_RESERVED + 2] != [0, 0]
            || durable_lsn >= lsn.max(1)
        {
            return Err(RecordError::BadFlags);
        }
        let header = RecordHeader {
            len,
            lsn,
            seq: get_u64(h, RH_SEQ),
            salt: get_u32(h, RH_SALT),
            flags,
            durable_lsn,
        };
        Ok((header, payload))
    }
}

/// The file name of segment `seq`: 20 decimal digits, so names sort in
/// sequence order.
pub fn segment_file_name(seq: u64) -> String {
    format!("{seq:020}.seg")
}

/// The sequence number in a segment file name, if it is one.
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".seg")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_header_round_trip_and_damage() {
        let h = SegmentHeader {
            block_size: 4096,
            store_id: 77,
            seq: 5,
            segment_size: 1 << 26,
            base_lsn: 1234,
            max_write_bytes: 1 << 20,
            cut_from: 0,
        };
        let mut b = [0u8; 4096];
        h.encode(&mut b);
        assert_eq!(SegmentHeader::decode(&b), Ok(h));
        for i in 0..SEGMENT_HEADER_BYTES {
            let mut d = b;
            d[i] ^= 0x10;
            assert!(SegmentHeader::decode(&d).is_err(), "flip at {i} accepted");
        }
        assert_eq!(SegmentHeader::decode(&[0u8; 64]), Err(HeaderError::Blank));
    }

    /// The extension after the header records the journal's largest
    /// segment size; a header without it (an older journal's: zeros), or
    /// with a byte of it or of the header changed, records none.
    #[test]
    fn the_header_extension_records_the_largest_segment_size() {
        let h = SegmentHeader {
            block_size: 4096,
            store_id: 77,
            seq: 5,
            segment_size: 1 << 20,
            base_lsn: 1234,
            max_write_bytes: 1 << 20,
            cut_from: 0,
        };
        let mut b = [0u8; 4096];
        h.encode_with_largest(64 << 20, &mut b);
        assert_eq!(SegmentHeader::decode(&b), Ok(h));
        assert_eq!(h.decode_largest(&b), Some(64 << 20));
        assert!(b[SEGMENT_HEADER_BLOCK_BYTES..].iter().all(|&x| x == 0));
        for i in 0..SEGMENT_HEADER_BLOCK_BYTES {
            let mut d = b;
            d[i] ^= 0x10;
            assert_eq!(h.decode_largest(&d), None, "flip at {i} accepted");
        }
        let mut old = [0u8; 4096];
        h.encode(&mut old);
        assert_eq!(SegmentHeader::decode(&old), Ok(h));
        assert_eq!(h.decode_largest(&old), None);
        assert_eq!(h.decode_largest(&b[..SEGMENT_HEADER_BLOCK_BYTES - 1]), None);
        // Sizes no journal has: under the segment's own, not whole blocks.
        for bad in [1 << 19, (64 << 20) + 512, 0] {
            h.encode_with_largest(bad, &mut b);
            assert_eq!(h.decode_largest(&b), None, "{bad}");
        }
    }

    /// A header whose checksum matches but whose sizes are impossible (a
    /// block size of 0 once divided the scan by zero) is refused.
    #[test]
    fn impossible_geometry_is_refused_even_with_a_valid_checksum() {
        let good = SegmentHeader {
            block_size: 4096,
            store_id: 1,
            seq: 1,
            segment_size: 1 << 20,
            base_lsn: 1,
            max_write_bytes: 1 << 20,
            cut_from: 0,
        };
        let bad = [
            SegmentHeader {
                block_size: 0,
                ..good
            },
            SegmentHeader {
                block_size: 3000,
                ..good
            },
            SegmentHeader {
                block_size: 256,
                ..good
            },
            SegmentHeader {
                segment_size: 4096 * 3,
                ..good
            },
            SegmentHeader {
                segment_size: (1 << 20) + 512,
                ..good
            },
            SegmentHeader {
                max_write_bytes: 0,
                ..good
            },
            SegmentHeader {
                base_lsn: 0,
                ..good
            },
        ];
        for h in bad {
            let mut b = [0u8; 4096];
            h.encode(&mut b);
            assert_eq!(
                SegmentHeader::decode(&b),
                Err(HeaderError::BadGeometry),
                "{h:?}"
            );
        }
    }

    #[test]
    fn lz4_decode_refuses_a_stated_length_above_the_cap() {
        let payload = vec![7u8; 10_000];
        let stored = lz4_encode(&payload).expect("compressible");
        assert_eq!(lz4_decode(&stored, 10_000), Some(payload));
        assert_eq!(lz4_decode(&stored, 9_999), None);
        let mut huge = stored.clone();
        huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(lz4_decode(&huge, 1 << 20), None);
    }

    #[test]
    fn record_round_trip_and_damage() {
        let payload = b"hello journal";
        let h = RecordHeader {
            len: payload.len() as u32,
            lsn: 42,
            seq: 3,
            salt: 0xdead_beef,
            flags: FLAG_EPOCH_START,
            durable_lsn: 40,
        };
        let mut b = vec![0u8; RECORD_HEADER_BYTES + payload.len() + 10];
        h.encode(payload, &mut b);
        b[RECORD_HEADER_BYTES..RECORD_HEADER_BYTES + payload.len()].copy_from_slice(payload);
        let (got, p) = RecordHeader::decode(&b).unwrap();
        assert_eq!(got, h);
        assert_eq!(p, payload);
        for i in 0..RECORD_HEADER_BYTES + payload.len() {
            for bit in 0..8 {
                let mut d = b.clone();
                d[i] ^= 1 << bit;
                assert!(
                    RecordHeader::decode(&d).is_err(),
                    "flip at {i}.{bit} accepted"
                );
            }
        }
        assert_eq!(RecordHeader::decode(&[0u8; 48]), Err(RecordError::Zeros));
        // A record cannot claim itself (or a later one) durable.
        for claim in [42, 43, u64::MAX] {
            let mut d = b.clone();
            RecordHeader {
                durable_lsn: claim,
                ..h
            }
            .encode(payload, &mut d);
            assert_eq!(RecordHeader::decode(&d), Err(RecordError::BadFlags));
        }
        assert_eq!(
            RecordHeader::decode(&b[..RECORD_HEADER_BYTES + 3]),
            Err(RecordError::BadLength)
        );
    }

    #[test]
    fn file_names() {
        assert_eq!(segment_file_name(7), "00000000000000000007.seg");
        assert_eq!(
            parse_segment_file_name(&segment_file_name(u64::MAX)),
            Some(u64::MAX)
        );
        assert_eq!(parse_segment_file_name("7.seg"), None);
        assert_eq!(parse_segment_file_name("LOCK"), None);
    }
}
