//! Round trips of every page type, and every byte of each corrupted.

use super::*;

const PS: PageSize = PageSize::DEFAULT;

fn loc(page: PageNo, crc: u32) -> Location {
    Location { page, crc }
}

fn sample_leaf() -> Node {
    let mut leaf = Leaf::default();
    leaf.push(b"", ValueRef::Inline(b"empty key"));
    leaf.push(b"apple", ValueRef::Inline(b""));
    let big = Arc::new(OverflowValue::on_disk(loc(9, 0xabcd_ef01), 5000));
    leaf.push(b"banana", ValueRef::Overflow(&big));
    leaf.push(&[0xff; 300], ValueRef::Inline(&[7u8; 1024]));
    Node::new(Body::Leaf(leaf))
}

fn sample_branch() -> Node {
    let mut b = Branch::new(2, Child::on_disk(loc(10, 1)));
    b.push(b"k", Child::on_disk(loc(11, 2)));
    b.push(b"m\x00", Child::on_disk(loc(12, 0xffff_ffff)));
    b.push(&[b'z'; 1008], Child::on_disk(loc(u64::MAX, 0)));
    Node::new(Body::Branch(b))
}

fn crc_of(page: &[u8]) -> u32 {
    get_u32(page, H_CRC)
}

fn reseal(page: &mut [u8]) {
    seal(page);
}

/// The leaf's entries as owned data, for comparing two nodes.
fn leaf_entries(n: &Node) -> Vec<(Vec<u8>, String)> {
    let l = n.as_leaf().expect("leaf");
    (0..l.len())
        .map(|i| {
            let v = match l.value(i) {
                ValueRef::Inline(v) => format!("inline {v:?}"),
                ValueRef::Overflow(o) => format!("overflow {:?} {}", o.location(), o.len()),
            };
            (l.key(i).to_vec(), v)
        })
        .collect()
}

#[test]
fn leaf_round_trip() {
    let node = sample_leaf();
    let page = encode_node(&node, 5, PS);
    let back = decode_node(&page, PS, loc(5, crc_of(&page))).unwrap();
    assert_eq!(back.location(), Some(loc(5, crc_of(&page))));
    assert_eq!(leaf_entries(&back), leaf_entries(&node));
    assert_eq!(back.encoded_bytes(), node.encoded_bytes());
    assert_eq!(encode_node(&back, 5, PS), page);
}

#[test]
fn branch_round_trip() {
    let node = sample_branch();
    let page = encode_node(&node, 6, PS);
    let back = decode_node(&page, PS, loc(6, crc_of(&page))).unwrap();
    let (a, b) = (node.as_branch().unwrap(), back.as_branch().unwrap());
    assert_eq!(b.level(), 2);
    assert_eq!(b.len(), a.len());
    for i in 0..a.len() {
        assert_eq!(b.child_location(i), a.child_location(i));
    }
    for i in 0..a.len() - 1 {
        assert_eq!(b.separator(i), a.separator(i));
    }
    assert_eq!(encode_node(&back, 6, PS), page);
}

#[test]
fn overflow_round_trip() {
    let data: Vec<u8> = (0..PS.overflow_data_bytes()).map(|i| i as u8).collect();
    let page = encode_overflow(7, Some(loc(8, 42)), &data, PS);
    let o = decode_overflow(&page, PS, loc(7, crc_of(&page))).unwrap();
    assert_eq!(o.next, Some(loc(8, 42)));
    assert_eq!(o.data, &data[..]);
    let last = encode_overflow(8, None, b"tail", PS);
    let o = decode_overflow(&last, PS, loc(8, crc_of(&last))).unwrap();
    assert_eq!((o.next, o.data), (None, &b"tail"[..]));
}

/// Flipping any bit of any byte of a page is caught, whether the reader
/// knows the checksum to expect or only the page's own.
#[test]
fn every_corrupted_byte_is_detected() {
    let pages = [
        encode_node(&sample_leaf(), 5, PS),
        encode_node(&sample_branch(), 5, PS),
        encode_overflow(5, Some(loc(8, 42)), &[3u8; 100], PS),
    ];
    for page in pages {
        let expect = loc(5, crc_of(&page));
        for i in 0..page.len() {
            for bit in [0, 3, 7] {
                let mut bad = page.clone();
                bad[i] ^= 1 << bit;
                let by_parent = match bad[H_TYPE] {
                    PAGE_TYPE_OVERFLOW => decode_overflow(&bad, PS, expect).map(|_| ()),
                    _ => decode_node(&bad, PS, expect).map(|_| ()),
                };
                assert!(by_parent.is_err(), "flip {i}.{bit} accepted");
                assert!(
                    decode_page(&bad, PS, 5).is_err(),
                    "flip {i}.{bit} accepted on its own checksum"
                );
            }
        }
    }
}

#[test]
fn zeros_and_short_pages_are_refused() {
    let zeros = vec![0u8; PS.bytes()];
    assert!(matches!(
        decode_page(&zeros, PS, 2),
        Err(PageError::BadChecksum { .. })
    ));
    let page = encode_node(&sample_leaf(), 5, PS);
    assert!(matches!(
        decode_node(&page[..4000], PS, loc(5, crc_of(&page))),
        Err(PageError::WrongSize { len: 4000, .. })
    ));
}

#[test]
fn older_version_and_wrong_place_are_refused() {
    let v1 = encode_node(&sample_leaf(), 5, PS);
    let v2 = encode_node(&sample_branch(), 5, PS);
    let err = decode_node(&v1, PS, loc(5, crc_of(&v2))).unwrap_err();
    assert_eq!(
        err,
        PageError::UnexpectedChecksum {
            page: 5,
            expected: crc_of(&v2),
            found: crc_of(&v1)
        }
    );
    let err = decode_node(&v1, PS, loc(6, crc_of(&v1))).unwrap_err();
    assert_eq!(
        err,
        PageError::WrongPageNo {
            expected: 6,
            found: 5
        }
    );
}

#[test]
fn wrong_types_are_refused() {
    let node = encode_node(&sample_leaf(), 5, PS);
    let ovf = encode_overflow(5, None, b"x", PS);
    assert!(matches!(
        decode_overflow(&node, PS, loc(5, crc_of(&node))),
        Err(PageError::WrongType {
            found: PAGE_TYPE_LEAF,
            ..
        })
    ));
    assert!(matches!(
        decode_node(&ovf, PS, loc(5, crc_of(&ovf))),
        Err(PageError::WrongType {
            found: PAGE_TYPE_OVERFLOW,
            ..
        })
    ));
    for kind in [0, PAGE_TYPE_META, PAGE_TYPE_FREELIST, 200] {
        let mut p = node.clone();
        p[H_TYPE] = kind;
        reseal(&mut p);
        assert!(
            matches!(decode_page(&p, PS, 5), Err(PageError::WrongType { found, .. }) if found == kind)
        );
    }
}

/// A change to a valid page, named for the rule it breaks.
type Change = Box<dyn Fn(&mut Vec<u8>)>;

/// A page whose checksum matches but which breaks a rule of the format.
fn assert_layout(page: &[u8], why: &str) {
    match decode_page(page, PS, 5) {
        Err(PageError::BadLayout { .. }) => {}
        other => panic!("{why}: {other:?}"),
    }
}

#[test]
fn leaf_layout_rules() {
    let good = encode_node(&sample_leaf(), 5, PS);
    let first_cell = PAGE_HEADER_BYTES;
    let cases: Vec<(&str, Change)> = vec![
        ("zero count", Box::new(|p| put_u16(p, H_COUNT, 0))),
        ("count past the cells", Box::new(|p| put_u16(p, H_COUNT, 5))),
        (
            "count short of the cells",
            Box::new(|p| put_u16(p, H_COUNT, 3)),
        ),
        ("level", Box::new(|p| p[H_LEVEL] = 1)),
        ("kind", Box::new(move |p| p[first_cell + LC_KIND] = 9)),
        (
            "key length past the page",
            Box::new(move |p| put_u16(p, first_cell, 1000)),
        ),
        (
            "key length over the limit",
            Box::new(move |p| put_u16(p, first_cell, 1009)),
        ),
        (
            "inline value over the limit",
            Box::new(move |p| put_u16(p, first_cell + LC_INLINE_VALUE_LEN, 1025)),
        ),
        ("tail", Box::new(|p| *p.last_mut().unwrap() = 1)),
    ];
    for (why, change) in cases {
        let mut p = good.clone();
        change(&mut p);
        reseal(&mut p);
        assert_layout(&p, why);
    }
}

#[test]
fn leaf_order_and_overflow_reference_rules() {
    let mut leaf = Leaf::default();
    leaf.push(b"a", ValueRef::Inline(b"1"));
    leaf.push(b"b", ValueRef::Inline(b"2"));
    let mut p = encode_node(&Node::new(Body::Leaf(leaf)), 5, PS);
    let second_key =
        PAGE_HEADER_BYTES + LEAF_INLINE_CELL_FIXED_BYTES + 2 + LEAF_INLINE_CELL_FIXED_BYTES;
    assert_eq!(p[second_key], b'b');
    p[second_key] = b'a';
    reseal(&mut p);
    assert_layout(&p, "duplicate keys");

    let small = Arc::new(OverflowValue::on_disk(loc(9, 1), 1024));
    let meta = Arc::new(OverflowValue::on_disk(loc(1, 1), 5000));
    let huge = Arc::new(OverflowValue::on_disk(loc(9, 1), MAX_VALUE_BYTES + 1));
    for (why, v) in [("inline-sized", small), ("meta page", meta), ("huge", huge)] {
        let mut leaf = Leaf::default();
        leaf.push(b"a", ValueRef::Overflow(&v));
        // Encoding does not judge; the decoder must.
        let p = encode_node(&Node::new(Body::Leaf(leaf)), 5, PS);
        assert_layout(&p, why);
    }
}

#[test]
fn branch_layout_rules() {
    let good = encode_node(&sample_branch(), 5, PS);
    let cell1 = PAGE_HEADER_BYTES + BRANCH_CELL_FIXED_BYTES;
    let cell2 = cell1 + BRANCH_CELL_FIXED_BYTES + 1;
    let cases: Vec<(&str, Change)> = vec![
        ("level 0", Box::new(|p| p[H_LEVEL] = 0)),
        ("one child", Box::new(|p| put_u16(p, H_COUNT, 1))),
        (
            "key in first cell",
            Box::new(|p| put_u16(p, PAGE_HEADER_BYTES + BC_KEY_LEN, 1)),
        ),
        (
            "child is a meta page",
            Box::new(move |p| put_u64(p, cell1 + BC_CHILD_PAGE, 1)),
        ),
        (
            "separators out of order",
            Box::new(move |p| p[cell2 + BRANCH_CELL_FIXED_BYTES] = b'a'),
        ),
        ("tail", Box::new(|p| p[4000] = 1)),
    ];
    for (why, change) in cases {
        let mut p = good.clone();
        change(&mut p);
        reseal(&mut p);
        assert_layout(&p, why);
    }
}

#[test]
fn overflow_layout_rules() {
    let good = encode_overflow(5, Some(loc(8, 42)), &[3u8; 100], PS);
    let cases: Vec<(&str, Change)> = vec![
        ("count", Box::new(|p| put_u16(p, H_COUNT, 1))),
        ("level", Box::new(|p| p[H_LEVEL] = 1)),
        ("crc without next", Box::new(|p| put_u64(p, O_NEXT_PAGE, 0))),
        ("next is meta", Box::new(|p| put_u64(p, O_NEXT_PAGE, 1))),
        ("empty", Box::new(|p| put_u32(p, O_DATA_LEN, 0))),
        ("too long", Box::new(|p| put_u32(p, O_DATA_LEN, 4065))),
        ("tail", Box::new(|p| put_u32(p, O_DATA_LEN, 99))),
    ];
    for (why, change) in cases {
        let mut p = good.clone();
        change(&mut p);
        reseal(&mut p);
        assert_layout(&p, why);
    }
}

#[test]
fn the_largest_entries_fit_two_to_a_leaf_and_three_to_a_branch() {
    for bytes in [4096, 65536] {
        let ps = PageSize::new(bytes).unwrap();
        let key = vec![1u8; ps.max_key_bytes()];
        let value = vec![2u8; ps.max_inline_value_bytes()];
        let mut leaf = Leaf::default();
        leaf.push(&key[..key.len() - 1], ValueRef::Inline(&value));
        leaf.push(&key, ValueRef::Inline(&value));
        let node = Node::new(Body::Leaf(leaf));
        let page = encode_node(&node, 3, ps);
        decode_node(&page, ps, loc(3, crc_of(&page))).unwrap();

        let mut b = Branch::new(1, Child::on_disk(loc(4, 0)));
        b.push(&key[..key.len() - 1], Child::on_disk(loc(5, 0)));
        b.push(&key, Child::on_disk(loc(6, 0)));
        let node = Node::new(Body::Branch(b));
        let page = encode_node(&node, 3, ps);
        decode_node(&page, ps, loc(3, crc_of(&page))).unwrap();
    }
}

mod random_damage {
    use super::*;
    use crate::btree::fuzzing::check_decode_page;
    use proptest::prelude::*;

    fn valid_pages() -> Vec<Vec<u8>> {
        vec![
            encode_node(&sample_leaf(), 2, PS),
            encode_node(&sample_branch(), 2, PS),
            encode_overflow(2, Some(loc(8, 42)), &[3u8; 100], PS),
            encode_overflow(2, None, &[1u8; 4064], PS),
        ]
    }

    proptest! {
        /// Valid pages with bytes changed and the checksum made to match
        /// again, as the fuzz target does: the layout checks must refuse
        /// without panicking, and whatever they accept must encode back to
        /// the same bytes.
        #[test]
        fn damaged_pages_with_valid_checksums(
            which in 0usize..4,
            edits in proptest::collection::vec((0usize..256, any::<u8>()), 1..6),
        ) {
            let mut page = valid_pages().swap_remove(which);
            for (at, byte) in edits {
                // Mostly the header and the first cells, where the rules are.
                let at = if at < 200 { at } else { 16 + at * 13 % 4000 };
                page[at] = byte;
            }
            check_decode_page(&page, true);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut state = 0x1234_5678_9abc_def0u64;
        for _ in 0..2000 {
            let len = (state % 5000) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state >> 24) as u8
                })
                .collect();
            check_decode_page(&bytes, state & 1 == 0);
        }
    }
}

#[test]
fn all_zero_finds_a_nonzero_byte_anywhere() {
    let mut buf = vec![0u8; 300];
    for len in 0..buf.len() {
        assert!(all_zero(&buf[..len]), "{len} zero bytes");
        for at in 0..len {
            buf[at] = 0x80;
            assert!(!all_zero(&buf[..len]), "byte {at} of {len}");
            buf[at] = 0;
        }
    }
}
