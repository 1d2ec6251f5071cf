//! The typed tables' encodings: they read back, and keys sort as their
//! values do.

use proptest::prelude::*;

use super::*;

fn enc<K: KeyCodec>(k: &K::SelfType<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    K::encode(k, &mut out);
    out
}

#[test]
fn signed_integers_sort_negatives_first() {
    let keys = [i64::MIN, -300, -1, 0, 1, 255, i64::MAX];
    let encoded: Vec<Vec<u8>> = keys.iter().map(enc::<i64>).collect();
    assert!(encoded.windows(2).all(|w| w[0] < w[1]), "{encoded:?}");
    for (k, e) in keys.iter().zip(&encoded) {
        assert_eq!(i64::decode(e).unwrap(), *k);
    }
    assert_eq!(enc::<i8>(&-1), vec![0x7f]);
    assert_eq!(enc::<u16>(&0x0102), vec![1, 2]);
}

#[test]
fn decoding_refuses_wrong_lengths_and_bad_bytes() {
    assert!(u64::decode(&[0; 7]).is_err());
    assert!(u64::decode(&[0; 9]).is_err());
    assert!(<&str>::decode(b"\xff").is_err());
    assert!(<[u8; 2]>::decode(&[1]).is_err());
    assert!(<()>::decode(&[1]).is_err());
    // A part without its end, and a 0 byte neither escaped nor ending it.
    assert!(<(&str, u8)>::decode(b"ab").is_err());
    assert!(<(&str, u8)>::decode(b"a\x00\x01\x00\x00\x05").is_err());
    assert_eq!(
        <(&str, u8)>::decode(b"a\x00\xffb\x00\x00\x05").unwrap(),
        ("a\0b".to_string(), 5)
    );
}

#[test]
fn type_names_name_the_encoding() {
    assert_eq!(<&str>::type_name(), String::type_name());
    assert_eq!(<&[u8]>::type_name(), <Vec<u8>>::type_name());
    assert_eq!(<(u64, &str)>::type_name(), "(u64, str)");
    assert_eq!(<[u8; 16]>::type_name(), "[u8; 16]");
    assert_eq!(TableDefinition::<i32, ()>::types(), "<i32, ()>");
}

#[test]
fn type_records_read_back() {
    let r = TypeRecord {
        id: 7,
        key: "(u64, str)".into(),
        value: "bytes".into(),
    };
    assert_eq!(TypeRecord::decode(&r.encode()), Some(r));
    assert_eq!(TypeRecord::decode(&[0, 0, 0, 1, 0, 9, b'a']), None);
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    // Zeros and 0xff often: the escape's edge cases.
    proptest::collection::vec(prop_oneof![Just(0u8), Just(0xffu8), any::<u8>()], 0..6)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn integer_keys_sort_as_numbers(a in any::<i32>(), b in any::<i32>(), c in any::<u64>(), d in any::<u64>()) {
        prop_assert_eq!(enc::<i32>(&a).cmp(&enc::<i32>(&b)), a.cmp(&b));
        prop_assert_eq!(enc::<u64>(&c).cmp(&enc::<u64>(&d)), c.cmp(&d));
        prop_assert_eq!(i32::decode(&enc::<i32>(&a)).unwrap(), a);
    }

    #[test]
    fn tuple_keys_sort_by_their_parts(
        a in (bytes(), any::<i16>(), bytes()),
        b in (bytes(), any::<i16>(), bytes()),
    ) {
        let ka = enc::<(&[u8], i16, &[u8])>(&(&a.0[..], a.1, &a.2[..]));
        let kb = enc::<(&[u8], i16, &[u8])>(&(&b.0[..], b.1, &b.2[..]));
        prop_assert_eq!(ka.cmp(&kb), a.cmp(&b), "{:?} {:?}", ka, kb);
        prop_assert_eq!(<(&[u8], i16, &[u8])>::decode(&ka).unwrap(), a);
    }

    #[test]
    fn string_tuples_sort_by_their_parts(
        a in ("[a\\x00b]{0,4}", "[a\\x00b]{0,4}"),
        b in ("[a\\x00b]{0,4}", "[a\\x00b]{0,4}"),
    ) {
        let ka = enc::<(String, String)>(&a);
        let kb = enc::<(String, String)>(&b);
        prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
        prop_assert_eq!(<(String, String)>::decode(&ka).unwrap(), a);
    }
}
