//! Keys and values on the command line.

use super::bytes::{decode_hex, encode_hex, Encoding};
use super::failure::Kind;

#[test]
fn hex_round_trips() {
    let all: Vec<u8> = (0..=255).collect();
    assert_eq!(decode_hex(&encode_hex(&all)).unwrap(), all);
    assert_eq!(decode_hex("0xDEADbeef").unwrap(), [0xde, 0xad, 0xbe, 0xef]);
    assert_eq!(decode_hex("").unwrap(), Vec::<u8>::new());
}

#[test]
fn bad_hex_says_why_without_panicking() {
    assert!(decode_hex("abc").unwrap_err().contains("odd"));
    let e = decode_hex("a g").unwrap_err();
    assert!(e.contains("' ' at byte 1"), "{e}");
    // A multi-byte character where a digit belongs, at either position of
    // a byte.
    assert!(decode_hex("é0").unwrap_err().contains("'é' at byte 0"));
    assert!(decode_hex("0é").unwrap_err().contains("'é' at byte 1"));
    let f = Encoding::Hex.parse("KEY", "zz").unwrap_err();
    assert_eq!((f.kind, f.code), (Kind::BadInput, 2));
    assert!(
        f.message.starts_with("KEY \"zz\" is not hex"),
        "{}",
        f.message
    );
}

#[test]
fn text_that_is_not_utf8_asks_for_hex() {
    let f = Encoding::Text
        .show(|| "the value of key \"k\"".into(), &[0xff, 0x00])
        .unwrap_err();
    assert!(f.message.contains("not UTF-8"), "{}", f.message);
    assert!(f.message.contains("--hex"), "{}", f.message);
    assert_eq!(Encoding::Hex.show(String::new, &[0xff, 0]).unwrap(), "ff00");
    assert_eq!(Encoding::Text.name(b"k"), "\"k\"");
    assert_eq!(Encoding::Text.name(&[0xff]), "0xff");
}
