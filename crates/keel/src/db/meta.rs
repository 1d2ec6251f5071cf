//! The store's two meta pages (pages 0 and 1 of the data file): which tree
//! is durable, up to which journal LSN, and where the free-page list is.
//!
//! A checkpoint writes the next meta into the slot the current one is not
//! in (`generation % 2`) and syncs: a torn or lost meta write leaves the
//! other slot, one checkpoint older, intact. Opening picks the valid meta
//! with the highest generation. `docs/format.md` ("Meta pages (pages 0
//! and 1)") is the specification; offsets here derive from each other.

use super::error::Result;
use crate::btree::{PageSize, MAX_PAGE_BYTES, MIN_PAGE_BYTES, PAGE_TYPE_META};
use crate::io::VfsFile;
use crate::le::{get_u32, get_u64, put_u32, put_u64};
use thiserror::Error;

/// Meta page magic.
pub const META_MAGIC: [u8; 8] = *b"KEELDB01";
/// Data file format version.
pub const DATA_FORMAT_VERSION: u32 = 2;

// Layout (little-endian), at the start of pages 0 and 1.
const M_CRC: usize = 0;
const M_TYPE: usize = M_CRC + 4;
const M_RESERVED0: usize = M_TYPE + 1;
const M_MAGIC: usize = M_RESERVED0 + 3;
const M_VERSION: usize = M_MAGIC + 8;
const M_PAGE_SIZE: usize = M_VERSION + 4;
const M_GENERATION: usize = M_PAGE_SIZE + 4;
const M_CHECKPOINT_LSN: usize = M_GENERATION + 8;
const M_ROOT_PAGE: usize = M_CHECKPOINT_LSN + 8;
const M_ROOT_CRC: usize = M_ROOT_PAGE + 8;
const M_RESERVED1: usize = M_ROOT_CRC + 4;
const M_PAGE_COUNT: usize = M_RESERVED1 + 4;
const M_FREELIST_PAGE: usize = M_PAGE_COUNT + 8;
const M_FREELIST_CRC: usize = M_FREELIST_PAGE + 8;
const M_RESERVED2: usize = M_FREELIST_CRC + 4;
const M_FREE_PAGES: usize = M_RESERVED2 + 4;
const M_JOURNAL_ID: usize = M_FREE_PAGES + 8;
const M_RESERVED3: usize = M_JOURNAL_ID + 8;
/// Bytes of a meta page that carry meaning; the checksum covers them (the
/// rest of the page is zeros and is not read).
pub const META_BYTES: usize = M_RESERVED3 + 32;
const _: () = assert!(META_BYTES == 128);

/// A page reference with the checksum of the page it points to (0 page:
/// none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PageRef {
    /// The page's number (0: no page).
    pub page: u64,
    /// The CRC32C the page's header must carry.
    pub crc: u32,
}

/// One meta page's contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// The data file's page size in bytes.
    pub page_size: u32,
    /// Counts checkpoints; the valid meta with the highest wins.
    pub generation: u64,
    /// Every journal record with an LSN up to this is in the tree.
    pub checkpoint_lsn: u64,
    /// The tree's root page (page 0 when the tree is empty).
    pub root: PageRef,
    /// Pages in the data file (the high-water mark).
    pub page_count: u64,
    /// First page of the free-page list (page 0 when there is none).
    pub freelist: PageRef,
    /// Pages listed as free.
    pub free_pages: u64,
    /// The store id of the journal this data file belongs to.
    pub journal_id: u64,
}

/// Why a meta page was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum MetaError {
    /// The page is all zeros: never written (or written over with zeros).
    #[error("blank (zeros)")]
    Blank,
    /// The page does not start with the meta page's magic and type.
    #[error("not a meta page (bad magic or page type)")]
    BadMagic,
    /// The checksum does not match the page's bytes: torn or corrupt.
    #[error("checksum mismatch")]
    BadChecksum,
    /// A data format version this build does not read.
    #[error("unsupported data format version {0}")]
    UnsupportedVersion(u32),
    /// A page size or page count that cannot be.
    #[error("impossible sizes (page size {page_size}, {page_count} pages)")]
    BadGeometry {
        /// The page size recorded, in bytes.
        page_size: u32,
        /// The page count recorded.
        page_count: u64,
    },
}

impl Meta {
    /// Which of the two meta pages this meta is written to.
    pub fn slot(&self) -> u64 {
        self.generation % 2
    }

    /// Encode into the first [`META_BYTES`] of `out` (the caller zeroes the
    /// rest of the page).
    pub fn encode(&self, out: &mut [u8]) {
        let b = &mut out[..META_BYTES];
        b.fill(0);
        b[M_TYPE] = PAGE_TYPE_META;
        b[M_MAGIC..M_VERSION].copy_from_slice(&META_MAGIC);
        put_u32(b, M_VERSION, DATA_FORMAT_VERSION);
        put_u32(b, M_PAGE_SIZE, self.page_size);
        put_u64(b, M_GENERATION, self.generation);
        put_u64(b, M_CHECKPOINT_LSN, self.checkpoint_lsn);
        put_u64(b, M_ROOT_PAGE, self.root.page);
        put_u32(b, M_ROOT_CRC, self.root.crc);
        put_u64(b, M_PAGE_COUNT, self.page_count);
        put_u64(b, M_FREELIST_PAGE, self.freelist.page);
        put_u32(b, M_FREELIST_CRC, self.freelist.crc);
        put_u64(b, M_FREE_PAGES, self.free_pages);
        put_u64(b, M_JOURNAL_ID, self.journal_id);
        let crc = crc32c::crc32c(&b[M_TYPE..]);
        put_u32(b, M_CRC, crc);
        debug_assert_eq!(Meta::decode(out), Ok(*self), "a meta decodes as encoded");
    }

    /// Decode and validate a meta page. Every byte is untrusted.
    pub fn decode(bytes: &[u8]) -> Result<Meta, MetaError> {
        let Some(b) = bytes.get(..META_BYTES) else {
            return Err(MetaError::Blank);
        };
        if b.iter().all(|&x| x == 0) {
            return Err(MetaError::Blank);
        }
        if b[M_TYPE] != PAGE_TYPE_META || b[M_MAGIC..M_VERSION] != META_MAGIC {
            return Err(MetaError::BadMagic);
        }
        if crc32c::crc32c(&b[M_TYPE..]) != get_u32(b, M_CRC) {
            return Err(MetaError::BadChecksum);
        }
        let version = get_u32(b, M_VERSION);
        if version != DATA_FORMAT_VERSION {
            return Err(MetaError::UnsupportedVersion(version));
        }
        let m = Meta {
            page_size: get_u32(b, M_PAGE_SIZE),
            generation: get_u64(b, M_GENERATION),
            checkpoint_lsn: get_u64(b, M_CHECKPOINT_LSN),
            root: PageRef {
                page: get_u64(b, M_ROOT_PAGE),
                crc: get_u32(b, M_ROOT_CRC),
            },
            page_count: get_u64(b, M_PAGE_COUNT),
            freelist: PageRef {
                page: get_u64(b, M_FREELIST_PAGE),
                crc: get_u32(b, M_FREELIST_CRC),
            },
            free_pages: get_u64(b, M_FREE_PAGES),
            journal_id: get_u64(b, M_JOURNAL_ID),
        };
        let in_file = |p: u64| p == 0 || (2..m.page_count).contains(&p);
        let reserved_zero = [M_RESERVED0..M_MAGIC, M_RESERVED1..M_PAGE_COUNT]
            .into_iter()
            .chain([M_RESERVED2..M_FREE_PAGES, M_RESERVED3..META_BYTES])
            .all(|r| b[r].iter().all(|&x| x == 0));
        // The page sizes a store may have are the tree's.
        let geometry_ok = PageSize::new(m.page_size as usize).is_ok()
            && m.page_count >= 2
            && in_file(m.root.page)
            && in_file(m.freelist.page)
            && m.free_pages <= m.page_count
            && reserved_zero;
        if !geometry_ok {
            return Err(MetaError::BadGeometry {
                page_size: m.page_size,
                page_count: m.page_count,
            });
        }
        Ok(m)
    }
}

/// The meta to open with: the valid one of the two slots with the highest
/// generation, and why the other was not taken (if it was not valid).
pub fn choose(slot0: &[u8], slot1: &[u8]) -> Result<(Meta, Option<MetaError>), [MetaError; 2]> {
    match (Meta::decode(slot0), Meta::decode(slot1)) {
        (Ok(a), Ok(b)) => Ok((if a.generation >= b.generation { a } else { b }, None)),
        (Ok(a), Err(e)) | (Err(e), Ok(a)) => Ok((a, Some(e))),
        (Err(a), Err(b)) => Err([a, b]),
    }
}

/// The [`META_BYTES`] at `at` in a data file `len` bytes long: zeros
/// where the file ends before them (a slot never written reads as an
/// invalid meta, not as an error).
pub(crate) fn read_meta_at(data: &dyn VfsFile, len: u64, at: u64) -> Result<Vec<u8>> {
    let mut b = vec![0u8; META_BYTES];
    if at + b.len() as u64 <= len {
        data.read_exact_at(&mut b, at)?;
    }
    Ok(b)
}

/// The two meta slots' bytes. Slot 1 is page 1, whose offset is the page
/// size, which the meta itself states: take it from slot 0, or, when slot
/// 0 is not valid, try every page size for a slot 1 that states its own
/// offset.
pub(crate) fn read_metas(data: &dyn VfsFile) -> Result<(Vec<u8>, Vec<u8>)> {
    let len = data.len()?;
    let read = |at: u64| read_meta_at(data, len, at);
    let slot0 = read(0)?;
    let sizes: Vec<u64> = match Meta::decode(&slot0) {
        Ok(m) => vec![m.page_size as u64],
        Err(_) => {
            let mut v = Vec::new();
            let mut s = MIN_PAGE_BYTES as u64;
            while s <= MAX_PAGE_BYTES as u64 {
                v.push(s);
                s *= 2;
            }
            v
        }
    };
    let mut slot1 = None;
    for &size in &sizes {
        let b = read(size)?;
        if Meta::decode(&b).is_ok_and(|m| m.page_size as u64 == size) {
            slot1 = Some(b);
            break;
        }
    }
    let slot1 = match slot1 {
        Some(b) => b,
        None => read(sizes[0])?,
    };
    Ok((slot0, slot1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(generation: u64) -> Meta {
        Meta {
            page_size: 4096,
            generation,
            checkpoint_lsn: 1000 + generation,
            root: PageRef {
                page: 7,
                crc: 0xdead_beef,
            },
            page_count: 100,
            freelist: PageRef {
                page: 9,
                crc: 0x1234,
            },
            free_pages: 12,
            journal_id: 0xabcd,
        }
    }

    #[test]
    fn round_trip_and_every_flip_is_caught() {
        let m = meta(5);
        let mut page = vec![0u8; 4096];
        m.encode(&mut page);
        assert_eq!(Meta::decode(&page), Ok(m));
        for i in 0..META_BYTES {
            for bit in 0..8 {
                let mut d = page.clone();
                d[i] ^= 1 << bit;
                assert!(Meta::decode(&d).is_err(), "flip at {i}.{bit} accepted");
            }
        }
        assert_eq!(Meta::decode(&[0u8; 4096]), Err(MetaError::Blank));
        assert_eq!(Meta::decode(&page[..10]), Err(MetaError::Blank));
    }

    #[test]
    fn impossible_sizes_are_refused_even_with_a_valid_checksum() {
        for bad in [
            Meta {
                page_size: 0,
                ..meta(1)
            },
            Meta {
                page_size: 3000,
                ..meta(1)
            },
            Meta {
                page_size: 1 << 20,
                ..meta(1)
            },
            Meta {
                page_count: 1,
                ..meta(1)
            },
            Meta {
                root: PageRef { page: 100, crc: 1 },
                ..meta(1)
            },
            Meta {
                root: PageRef { page: 1, crc: 1 },
                ..meta(1)
            },
            Meta {
                freelist: PageRef { page: 500, crc: 1 },
                ..meta(1)
            },
            Meta {
                free_pages: 101,
                ..meta(1)
            },
        ] {
            let mut page = vec![0u8; 4096];
            // Encode by hand: `encode` asserts what it writes decodes.
            let b = &mut page[..META_BYTES];
            b[M_TYPE] = PAGE_TYPE_META;
            b[M_MAGIC..M_VERSION].copy_from_slice(&META_MAGIC);
            put_u32(b, M_VERSION, DATA_FORMAT_VERSION);
            put_u32(b, M_PAGE_SIZE, bad.page_size);
            put_u64(b, M_PAGE_COUNT, bad.page_count);
            put_u64(b, M_ROOT_PAGE, bad.root.page);
            put_u64(b, M_FREELIST_PAGE, bad.freelist.page);
            put_u64(b, M_FREE_PAGES, bad.free_pages);
            let crc = crc32c::crc32c(&b[M_TYPE..]);
            put_u32(b, M_CRC, crc);
            assert!(
                matches!(Meta::decode(&page), Err(MetaError::BadGeometry { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_newest_valid_slot_wins() {
        let (mut a, mut b) = (vec![0u8; 4096], vec![0u8; 4096]);
        meta(4).encode(&mut a);
        meta(5).encode(&mut b);
        assert_eq!(choose(&a, &b).unwrap().0.generation, 5);
        assert_eq!(choose(&b, &a).unwrap().0.generation, 5);
        // A torn write of the newer one leaves the older.
        b[40] ^= 0xff;
        let (m, why) = choose(&a, &b).unwrap();
        assert_eq!(m.generation, 4);
        assert_eq!(why, Some(MetaError::BadChecksum));
        assert!(choose(&[0u8; 4096], &[0u8; 4096]).is_err());
    }
}
