//! The store's decoders, for the fuzz targets in `fuzz/` and the
//! random-input tests: not a stable API. Each check decodes untrusted
//! bytes (which must never panic) and asserts what the decoder promises
//! about what it accepts.

use super::freelist;
use super::meta::Meta;
use super::record::{self, Op, RECORD_TXN};
use crate::btree::{page_crc, Location, PageSize, FIRST_TREE_PAGE};

/// Decode a transaction record (keys up to 2 KiB): an accepted record
/// encodes back to the same bytes.
pub fn check_decode_txn_record(bytes: &[u8]) {
    if let Ok(ops) = record::decode(bytes, 2048) {
        let mut again = vec![RECORD_TXN];
        for op in &ops {
            if let Op::Put(k, _) | Op::Delete(k) = op {
                assert!(k.len() <= 2048, "a key past the limit accepted");
            }
            record::push(&mut again, *op);
        }
        assert_eq!(again, bytes, "decode/encode round trip");
    }
}

/// Decode arbitrary bytes as free-list page 2 of a file of `page_count`
/// pages (padded or cut to 4096 bytes; when `fix_checksum`, with the page
/// number and a valid checksum put in first, so that the layout checks
/// are reached). An accepted page lists no more pages than fit, each a
/// tree page inside the file.
pub fn check_decode_freelist_page(data: &[u8], fix_checksum: bool, page_count: u64) {
    let ps = PageSize::DEFAULT;
    let mut b = vec![0u8; ps.bytes()];
    let n = data.len().min(b.len());
    b[..n].copy_from_slice(&data[..n]);
    if fix_checksum {
        b[8..16].copy_from_slice(&2u64.to_le_bytes());
        let crc = page_crc(&b);
        b[..4].copy_from_slice(&crc.to_le_bytes());
    }
    let loc = Location {
        page: 2,
        crc: u32::from_le_bytes(b[..4].try_into().expect("4 bytes")),
    };
    if let Ok(page) = freelist::decode(&b, ps, loc, page_count) {
        assert!(page.free.len() <= freelist::entries_per_page(ps));
        assert!(page
            .free
            .iter()
            .all(|p| (FIRST_TREE_PAGE..page_count).contains(p)));
    }
}

/// Decode a meta page: an accepted one encodes to bytes that decode to
/// the same meta.
pub fn check_decode_meta(bytes: &[u8]) {
    if let Ok(m) = Meta::decode(bytes) {
        let mut again = vec![0u8; bytes.len().max(super::meta::META_BYTES)];
        m.encode(&mut again);
        assert_eq!(Meta::decode(&again), Ok(m), "decode/encode round trip");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::meta::{PageRef, META_BYTES};

    fn noise(state: &mut u64, len: usize) -> Vec<u8> {
        (0..len)
            .map(|_| {
                *state ^= *state << 13;
                *state ^= *state >> 7;
                *state ^= *state << 17;
                (*state >> 24) as u8
            })
            .collect()
    }

    /// Arbitrary bytes, and valid encodings with bytes changed, never
    /// panic a decoder, and what they accept keeps its promises.
    #[test]
    fn decoders_take_arbitrary_and_damaged_bytes() {
        let mut state = 0x0123_4567_89ab_cdefu64;
        let mut rec = vec![RECORD_TXN];
        for op in [
            Op::Put(b"\0\0\0\x01key", b"value"),
            Op::Delete(b"\0\0\0\x01gone"),
            Op::DropTable(9),
            Op::Put(b"\0\0\0\x02", b""),
        ] {
            record::push(&mut rec, op);
        }
        check_decode_txn_record(&rec);
        let (list, _) = freelist::encode_chain(PageSize::DEFAULT, &[2], &[3, 5, 8]);
        let list = list[0].1.clone();
        check_decode_freelist_page(&list, false, 10);
        let mut meta = vec![0u8; META_BYTES];
        Meta {
            page_size: 4096,
            generation: 3,
            checkpoint_lsn: 77,
            root: PageRef { page: 5, crc: 1 },
            page_count: 10,
            freelist: PageRef { page: 2, crc: 9 },
            free_pages: 3,
            journal_id: 42,
        }
        .encode(&mut meta);
        assert!(Meta::decode(&meta).is_ok());
        for round in 0..3000 {
            let len = (state % 600) as usize;
            let junk = noise(&mut state, len);
            check_decode_txn_record(&junk);
            check_decode_meta(&junk);
            check_decode_freelist_page(&junk, round % 2 == 0, state % 64);
            // Damaged valid encodings reach the deeper checks.
            let mut r = rec.clone();
            let mut l = list.clone();
            let mut m = meta.clone();
            for _ in 0..(state % 4 + 1) {
                let at = noise(&mut state, 2);
                let at = u16::from_le_bytes([at[0], at[1]]) as usize;
                let byte = noise(&mut state, 1)[0];
                r[at % rec.len()] = byte;
                l[at % 64] = byte;
                m[at % META_BYTES] = byte;
            }
            check_decode_txn_record(&r);
            check_decode_freelist_page(&l, true, 10);
            check_decode_meta(&m);
        }
    }
}
