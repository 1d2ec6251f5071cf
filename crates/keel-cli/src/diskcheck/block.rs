//! The self-describing block `keel diskcheck write` puts on the disk under
//! test. The byte layout is specified once, in `docs/diskcheck.md`; the
//! constants below are that table.
//!
//! A block is a whole number of 512-byte sectors. Sector 0 starts with the
//! block header; every sector ends with a 32-byte tag naming the write it
//! belongs to and a checksum of the sector. The header's `block_crc` covers
//! the whole block. A block that passes `block_crc` is one complete write; a
//! block that fails it can still be read sector by sector, which tells a
//! write torn by a power cut (sectors of two generations of the same block)
//! from garbage.

/// Sector size the block is divided into. 512 bytes is the smallest unit any
/// disk writes atomically, so a torn write leaves whole tagged sectors.
pub const SECTOR_BYTES: usize = 512;
/// The first 8 bytes of every block.
pub const MAGIC: [u8; 8] = *b"KEELDCHK";
/// Version of this layout, stored in the header.
pub const FORMAT_VERSION: u32 = 1;
/// Smallest block: one sector.
pub const MIN_BLOCK_BYTES: u32 = SECTOR_BYTES as u32;
/// Largest block: 64 MiB keeps one block in memory per writer thread cheap.
pub const MAX_BLOCK_BYTES: u32 = 64 << 20;

// Header fields (sector 0), little-endian.
const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = OFF_MAGIC + 8;
const OFF_BLOCK_BYTES: usize = OFF_VERSION + 4;
const OFF_RUN: usize = OFF_BLOCK_BYTES + 4;
const OFF_INDEX: usize = OFF_RUN + 8;
const OFF_GEN: usize = OFF_INDEX + 8;
const OFF_WRITER: usize = OFF_GEN + 8;
const OFF_BLOCK_CRC: usize = OFF_WRITER + 4;
const OFF_TIME: usize = OFF_BLOCK_CRC + 4;
/// Bytes of header at the start of sector 0.
pub const HEADER_BYTES: usize = OFF_TIME + 8;

// Sector tag (last 32 bytes of every sector), little-endian.
/// Bytes of the tag at the end of every sector.
pub const TAG_BYTES: usize = 32;
const TAG_START: usize = SECTOR_BYTES - TAG_BYTES;
const TAG_RUN: usize = TAG_START;
const TAG_INDEX: usize = TAG_RUN + 8;
const TAG_GEN: usize = TAG_INDEX + 8;
const TAG_SECTOR_NO: usize = TAG_GEN + 8;
const TAG_CRC: usize = TAG_SECTOR_NO + 4;

const _: () = assert!(HEADER_BYTES == 56);
const _: () = assert!(TAG_CRC + 4 == SECTOR_BYTES);
const _: () = assert!(HEADER_BYTES <= TAG_START);

/// Who wrote a block, and which write of that block it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockHeader {
    pub run_id: u64,
    /// The block's position in the file, in blocks.
    pub index: u64,
    /// 1 for the first write of this block in the run, then +1 per write.
    pub generation: u64,
    pub writer_id: u32,
    pub block_bytes: u32,
    /// Client's wall clock when the block was filled, µs since the epoch.
    pub time_us: u64,
}

/// The identity one sector's tag claims, when its checksum is right.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SectorTag {
    pub run_id: u64,
    pub index: u64,
    pub generation: u64,
    pub sector_no: u32,
}

/// What a block read back from the disk turned out to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decoded {
    /// Every byte is zero: never written (the file is zero-filled first).
    Zero,
    /// A complete block: `block_crc` and every sector tag agree.
    Valid(BlockHeader),
    /// Not one complete write. Each sector's tag, where its checksum holds
    /// (`None`: garbage, zeros, or a different block size).
    Damaged(Vec<Option<SectorTag>>),
}

/// Fill `buf` (a whole block) with the block `h` describes: header, filler
/// derived from (run, index, generation) so that every write differs in
/// every sector, sector tags, and the block checksum.
pub fn encode(h: &BlockHeader, buf: &mut [u8]) {
    assert_eq!(buf.len(), h.block_bytes as usize, "buffer is not one block");
    assert!(valid_block_bytes(h.block_bytes), "bad block size");
    assert!(h.generation > 0, "generation 0 means never written");
    let mut rng = filler_seed(h);
    for chunk in buf.chunks_exact_mut(8) {
        chunk.copy_from_slice(&splitmix64(&mut rng).to_le_bytes());
    }
    buf[OFF_MAGIC..OFF_VERSION].copy_from_slice(&MAGIC);
    put_u32(buf, OFF_VERSION, FORMAT_VERSION);
    put_u32(buf, OFF_BLOCK_BYTES, h.block_bytes);
    put_u64(buf, OFF_RUN, h.run_id);
    put_u64(buf, OFF_INDEX, h.index);
    put_u64(buf, OFF_GEN, h.generation);
    put_u32(buf, OFF_WRITER, h.writer_id);
    put_u32(buf, OFF_BLOCK_CRC, 0);
    put_u64(buf, OFF_TIME, h.time_us);
    for (no, sector) in buf.chunks_exact_mut(SECTOR_BYTES).enumerate() {
        put_u64(sector, TAG_RUN, h.run_id);
        put_u64(sector, TAG_INDEX, h.index);
        put_u64(sector, TAG_GEN, h.generation);
        put_u32(sector, TAG_SECTOR_NO, no as u32);
        let crc = crc32c::crc32c(&sector[..TAG_CRC]);
        put_u32(sector, TAG_CRC, crc);
    }
    // The block checksum covers the sector tags, so it comes last; it is
    // computed with its own field taken as zero.
    let crc = block_crc(buf);
    put_u32(buf, OFF_BLOCK_CRC, crc);
    debug_assert_eq!(decode(buf), Decoded::Valid(*h));
}

/// Read a block back. Never panics on arbitrary input of any length that is
/// a whole number of sectors.
pub fn decode(buf: &[u8]) -> Decoded {
    assert_eq!(buf.len() % SECTOR_BYTES, 0, "not whole sectors");
    if buf.iter().all(|&b| b == 0) {
        return Decoded::Zero;
    }
    if let Some(h) = decode_valid(buf) {
        return Decoded::Valid(h);
    }
    Decoded::Damaged(
        buf.chunks_exact(SECTOR_BYTES)
            .enumerate()
            .map(|(no, s)| sector_tag(s, no))
            .collect(),
    )
}

/// The header at the start of `sector`, if it is the first sector of a block
/// whose tag checksum holds (the block as a whole may still be torn). Used to
/// find which runs a file holds without knowing the block size.
pub fn header_in_sector(sector: &[u8]) -> Option<BlockHeader> {
    assert_eq!(sector.len(), SECTOR_BYTES);
    if sector[OFF_MAGIC..OFF_VERSION] != MAGIC {
        return None;
    }
    let tag = sector_tag(sector, 0)?;
    let h = header_fields(sector);
    (tag.run_id == h.run_id && tag.index == h.index && tag.generation == h.generation).then_some(h)
}

/// Whether `n` is a usable block size.
pub fn valid_block_bytes(n: u32) -> bool {
    (MIN_BLOCK_BYTES..=MAX_BLOCK_BYTES).contains(&n) && n as usize % SECTOR_BYTES == 0
}

fn decode_valid(buf: &[u8]) -> Option<BlockHeader> {
    if buf[OFF_MAGIC..OFF_VERSION] != MAGIC || get_u32(buf, OFF_VERSION) != FORMAT_VERSION {
        return None;
    }
    let h = header_fields(buf);
    if h.block_bytes as usize != buf.len() || h.generation == 0 {
        return None;
    }
    if block_crc(buf) != get_u32(buf, OFF_BLOCK_CRC) {
        return None;
    }
    let all_tagged = buf.chunks_exact(SECTOR_BYTES).enumerate().all(|(no, s)| {
        let expected = SectorTag {
            run_id: h.run_id,
            index: h.index,
            generation: h.generation,
            sector_no: no as u32,
        };
        sector_tag(s, no) == Some(expected)
    });
    all_tagged.then_some(h)
}

fn header_fields(buf: &[u8]) -> BlockHeader {
    BlockHeader {
        run_id: get_u64(buf, OFF_RUN),
        index: get_u64(buf, OFF_INDEX),
        generation: get_u64(buf, OFF_GEN),
        writer_id: get_u32(buf, OFF_WRITER),
        block_bytes: get_u32(buf, OFF_BLOCK_BYTES),
        time_us: get_u64(buf, OFF_TIME),
    }
}

/// The tag of sector number `no`, if its checksum holds. Sector tags are
/// computed before the block checksum is known, so in sector 0 the
/// `block_crc` field counts as zero.
fn sector_tag(sector: &[u8], no: usize) -> Option<SectorTag> {
    let crc = if no == 0 {
        let c = crc32c::crc32c(&sector[..OFF_BLOCK_CRC]);
        let c = crc32c::crc32c_append(c, &[0; 4]);
        crc32c::crc32c_append(c, &sector[OFF_BLOCK_CRC + 4..TAG_CRC])
    } else {
        crc32c::crc32c(&sector[..TAG_CRC])
    };
    if crc != get_u32(sector, TAG_CRC) {
        return None;
    }
    let tag = SectorTag {
        run_id: get_u64(sector, TAG_RUN),
        index: get_u64(sector, TAG_INDEX),
        generation: get_u64(sector, TAG_GEN),
        sector_no: get_u32(sector, TAG_SECTOR_NO),
    };
    // A zero generation is never written; an all-zero sector has a zero
    // tag whose checksum can never match, but be explicit.
    (tag.generation != 0 && tag.sector_no as usize == no).then_some(tag)
}

/// crc32c of the whole block with the `block_crc` field taken as zero.
fn block_crc(buf: &[u8]) -> u32 {
    let c = crc32c::crc32c(&buf[..OFF_BLOCK_CRC]);
    let c = crc32c::crc32c_append(c, &[0; 4]);
    crc32c::crc32c_append(c, &buf[OFF_BLOCK_CRC + 4..])
}

fn filler_seed(h: &BlockHeader) -> u64 {
    h.run_id
        ^ h.index.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ h.generation.wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
}

/// SplitMix64: fast, and good enough that filler never repeats between
/// writes (it only has to differ, not be secret).
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn put_u32(buf: &mut [u8], off: usize, v: u32) {
    buf[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(buf: &mut [u8], off: usize, v: u64) {
    buf[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

fn get_u32(buf: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(buf[off..off + 4].try_into().expect("4 bytes"))
}

fn get_u64(buf: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(buf[off..off + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(index: u64, generation: u64, block_bytes: u32) -> BlockHeader {
        BlockHeader {
            run_id: 0xABCD_EF01_2345_6789,
            index,
            generation,
            writer_id: 3,
            block_bytes,
            time_us: 1_700_000_000_000_000,
        }
    }

    fn block(h: &BlockHeader) -> Vec<u8> {
        let mut buf = vec![0u8; h.block_bytes as usize];
        encode(h, &mut buf);
        buf
    }

    #[test]
    fn round_trip_all_sizes() {
        for size in [512u32, 4096, 16384, 65536] {
            let h = header(7, 2, size);
            let b = block(&h);
            assert_eq!(decode(&b), Decoded::Valid(h));
            assert_eq!(header_in_sector(&b[..SECTOR_BYTES]), Some(h));
        }
        assert_eq!(decode(&vec![0u8; 4096]), Decoded::Zero);
    }

    #[test]
    fn any_flipped_byte_is_detected() {
        let h = header(1, 1, 4096);
        let good = block(&h);
        for pos in (0..good.len()).step_by(37) {
            let mut b = good.clone();
            b[pos] ^= 0x40;
            let Decoded::Damaged(sectors) = decode(&b) else {
                panic!("flip at {pos} not detected");
            };
            // Exactly the sector holding the flipped byte lost its tag.
            for (no, tag) in sectors.iter().enumerate() {
                assert_eq!(tag.is_none(), no == pos / SECTOR_BYTES, "flip at {pos}");
            }
        }
    }

    #[test]
    fn torn_write_shows_both_generations() {
        let old = block(&header(5, 3, 4096));
        let new = block(&header(5, 4, 4096));
        let mut torn = new.clone();
        torn[2048..].copy_from_slice(&old[2048..]);
        let Decoded::Damaged(sectors) = decode(&torn) else {
            panic!("torn block passed its checksum");
        };
        let gens: Vec<u64> = sectors.iter().map(|t| t.unwrap().generation).collect();
        assert_eq!(gens, [4, 4, 4, 4, 3, 3, 3, 3]);
    }

    #[test]
    fn every_generation_differs_in_every_sector() {
        let a = block(&header(9, 1, 2048));
        let b = block(&header(9, 2, 2048));
        for (x, y) in a.chunks(SECTOR_BYTES).zip(b.chunks(SECTOR_BYTES)) {
            assert_ne!(x, y);
        }
    }

    #[test]
    fn wrong_length_or_garbage_is_damaged_not_a_panic() {
        let b = block(&header(0, 1, 4096));
        assert!(matches!(decode(&b[..2048]), Decoded::Damaged(_)));
        let garbage: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 1) as u8).collect();
        let Decoded::Damaged(s) = decode(&garbage) else {
            panic!()
        };
        assert!(s.iter().all(Option::is_none));
    }

    #[test]
    fn block_size_limits() {
        assert!(valid_block_bytes(512));
        assert!(valid_block_bytes(16384));
        assert!(!valid_block_bytes(511));
        assert!(!valid_block_bytes(1000));
        assert!(!valid_block_bytes(0));
        assert!(!valid_block_bytes(MAX_BLOCK_BYTES + 512));
    }
}
