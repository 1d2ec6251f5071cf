//! Free-list pages (type 5): the pages a meta page lists as free, in a
//! chain written last page first so that each page holds the next one's
//! checksum. `docs/format.md` ("Free-list page") is the specification.

use crate::btree::{page_crc, Location, PageNo, PageSize, FIRST_TREE_PAGE, PAGE_TYPE_FREELIST};
use crate::le::{get_u32, get_u64, put_u32, put_u64};

const F_CRC: usize = 0;
const F_TYPE: usize = F_CRC + 4;
const F_RESERVED: usize = F_TYPE + 1;
const F_PAGE_NO: usize = F_RESERVED + 3;
const F_NEXT_PAGE: usize = F_PAGE_NO + 8;
const F_NEXT_CRC: usize = F_NEXT_PAGE + 8;
const F_COUNT: usize = F_NEXT_CRC + 4;
/// Bytes before the list of page numbers.
pub(crate) const FREELIST_HEADER_BYTES: usize = F_COUNT + 4;
const _: () = assert!(FREELIST_HEADER_BYTES == 32);

/// Page numbers one free-list page holds.
pub(crate) fn entries_per_page(ps: PageSize) -> usize {
    (ps.bytes() - FREELIST_HEADER_BYTES) / 8
}

/// Pages needed to list `n` free pages.
pub(crate) fn pages_needed(ps: PageSize, n: usize) -> usize {
    n.div_ceil(entries_per_page(ps))
}

/// Encode the chain listing `free` into the pages `at` (as many as
/// [`pages_needed`], or more: extra pages list nothing). Returns the pages
/// to write and the first page's location (`None` when `at` is empty).
pub(crate) fn encode_chain(
    ps: PageSize,
    at: &[PageNo],
    free: &[PageNo],
) -> (Vec<(PageNo, Vec<u8>)>, Option<Location>) {
    let per = entries_per_page(ps);
    assert!(at.len() * per >= free.len(), "too few free-list pages");
    let mut out = Vec::with_capacity(at.len());
    let mut next: Option<Location> = None;
    for (i, &page) in at.iter().enumerate().rev() {
        let chunk = free
            .get(i * per..)
            .map_or(&[][..], |rest| &rest[..rest.len().min(per)]);
        let mut b = vec![0u8; ps.bytes()];
        b[F_TYPE] = PAGE_TYPE_FREELIST;
        put_u64(&mut b, F_PAGE_NO, page);
        if let Some(n) = next {
            put_u64(&mut b, F_NEXT_PAGE, n.page);
            put_u32(&mut b, F_NEXT_CRC, n.crc);
        }
        put_u32(&mut b, F_COUNT, chunk.len() as u32);
        for (j, &p) in chunk.iter().enumerate() {
            put_u64(&mut b, FREELIST_HEADER_BYTES + 8 * j, p);
        }
        let crc = page_crc(&b);
        put_u32(&mut b, F_CRC, crc);
        next = Some(Location { page, crc });
        out.push((page, b));
    }
    out.reverse();
    (out, next)
}

/// One decoded free-list page.
#[derive(Debug)]
pub(crate) struct FreelistPage {
    pub next: Option<Location>,
    pub free: Vec<PageNo>,
}

/// Decode the free-list page `loc` from its bytes; every field is checked
/// (checksum against the referrer's, page number, type, counts, and each
/// listed page inside `[FIRST_TREE_PAGE, page_count)`).
pub(crate) fn decode(
    b: &[u8],
    ps: PageSize,
    loc: Location,
    page_count: u64,
) -> Result<FreelistPage, &'static str> {
    if b.len() != ps.bytes() {
        return Err("a free-list page of the wrong size");
    }
    if get_u32(b, F_CRC) != page_crc(b) {
        return Err("a free-list page with a bad checksum");
    }
    if get_u32(b, F_CRC) != loc.crc {
        return Err("a free-list page other than the one referred to (checksum differs)");
    }
    if b[F_TYPE] != PAGE_TYPE_FREELIST || b[F_RESERVED..F_PAGE_NO] != [0; 3] {
        return Err("not a free-list page");
    }
    if get_u64(b, F_PAGE_NO) != loc.page {
        return Err("a free-list page holding another page number");
    }
    let count = get_u32(b, F_COUNT) as usize;
    if count > entries_per_page(ps) {
        return Err("a free-list page listing more pages than it holds");
    }
    let next_page = get_u64(b, F_NEXT_PAGE);
    let next = (next_page != 0).then(|| Location {
        page: next_page,
        crc: get_u32(b, F_NEXT_CRC),
    });
    if next_page == 0 && get_u32(b, F_NEXT_CRC) != 0 {
        return Err("a free-list page with a checksum but no next page");
    }
    let mut free = Vec::with_capacity(count);
    for j in 0..count {
        let p = get_u64(b, FREELIST_HEADER_BYTES + 8 * j);
        if !(FIRST_TREE_PAGE..page_count).contains(&p) {
            return Err("a free-list entry outside the file's tree pages");
        }
        free.push(p);
    }
    if b[FREELIST_HEADER_BYTES + 8 * count..]
        .iter()
        .any(|&x| x != 0)
    {
        return Err("bytes after a free list's entries");
    }
    Ok(FreelistPage { next, free })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_round_trips_and_rejects_damage() {
        let ps = PageSize::DEFAULT;
        let per = entries_per_page(ps);
        let free: Vec<PageNo> = (10..10 + per as u64 + 5).collect();
        let at = [3, 4];
        assert_eq!(pages_needed(ps, free.len()), 2);
        let (pages, first) = encode_chain(ps, &at, &free);
        let mut loc = first;
        let mut got = Vec::new();
        for (page, bytes) in &pages {
            let l = loc.unwrap();
            assert_eq!(l.page, *page);
            let d = decode(bytes, ps, l, 10_000).unwrap();
            got.extend(d.free);
            loc = d.next;
        }
        assert_eq!(loc, None);
        assert_eq!(got, free);
        let (p0, bytes) = &pages[0];
        let l = first.unwrap();
        for i in [0, 4, 9, 20, 28, 40] {
            let mut b = bytes.clone();
            b[i] ^= 1;
            assert!(decode(&b, ps, l, 10_000).is_err(), "byte {i}");
        }
        assert!(decode(bytes, ps, Location { page: *p0, crc: 1 }, 10_000).is_err());
        assert!(
            decode(bytes, ps, l, 11).is_err(),
            "entries past the page count"
        );
    }
}
