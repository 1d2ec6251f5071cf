//! Keys and values on the command line.

use super::bytes::{decode_hex, encode_hex, escape, unescape, Encoding};
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
fn any_bytes_print_escaped_and_read_back() {
    assert_eq!(escape(b"plain caf\xc3\xa9"), "plain café");
    assert_eq!(escape(b"a\\b"), "a\\\\b");
    assert_eq!(escape(b"t\tn\nr\r\x00\x7f"), "t\\x09n\\x0ar\\x0d\\x00\\x7f");
    assert_eq!(escape(&[0xff, b'k', 0xc3]), "\\xffk\\xc3");
    // U+0085 (a control character) is escaped byte by byte; U+00A0 is not.
    assert_eq!(escape("\u{85}\u{a0}".as_bytes()), "\\xc2\\x85\u{a0}");
    // A literal `\xff` and the byte 0xff print differently.
    assert_ne!(escape(b"\\xff"), escape(&[0xff]));
    let all: Vec<u8> = (0..=255).collect();
    let mut samples = vec![all.clone(), all.iter().rev().copied().collect()];
    samples.push("é\\x41\\\\ \u{2028}\u{9f}\u{10ffff}".as_bytes().to_vec());
    samples.push(b"\\".to_vec());
    for bytes in samples {
        let text = escape(&bytes);
        assert!(!text.contains(['\t', '\n', '\r']), "{text}");
        assert_eq!(unescape(&text).as_deref(), Some(&bytes[..]), "{text}");
    }
    assert_eq!(unescape("a\\"), None);
    assert_eq!(unescape("\\q"), None);
}

#[test]
fn json_shows_utf8_as_a_string_and_other_bytes_as_hex() {
    let show = |enc: Encoding, b: &[u8]| serde_json::to_string(&enc.json(b)).unwrap();
    assert_eq!(show(Encoding::Text, b"k\t\"1\""), r#""k\t\"1\"""#);
    assert_eq!(show(Encoding::Text, &[0xff, 0]), r#"{"hex":"ff00"}"#);
    assert_eq!(show(Encoding::Text, b""), r#""""#);
    assert_eq!(show(Encoding::Hex, b"k"), r#""6b""#);
    assert_eq!(show(Encoding::Hex, &[0xff]), r#""ff""#);
    assert_eq!(Encoding::Hex.text(&[0xff, 0]), "ff00");
    assert_eq!(Encoding::Text.text(&[0xff, 0]), "\\xff\\x00");
    assert_eq!(Encoding::Text.name(b"k"), "\"k\"");
    assert_eq!(Encoding::Text.name(&[0xff]), "0xff");
}

#[test]
fn json_bytes_read_back() {
    use super::bytes::Shown;
    for bytes in [&b"text"[..], b"", &[0xff, 0], b"k\t\"1\"\\", "é".as_bytes()] {
        let json = serde_json::to_value(Encoding::Text.json(bytes)).unwrap();
        assert_eq!(Shown::bytes_of(&json).unwrap(), bytes, "{json}");
    }
    // Hex of UTF-8 bytes is taken too (a hand-written line).
    let v = serde_json::json!({"hex": "6b"});
    assert_eq!(Shown::bytes_of(&v).unwrap(), b"k");
    for bad in [
        serde_json::json!(7),
        serde_json::json!(null),
        serde_json::json!({"hex": "zz"}),
        serde_json::json!({"hex": "6b", "more": 1}),
        serde_json::json!({"text": "k"}),
        serde_json::json!(["k"]),
    ] {
        assert!(Shown::bytes_of(&bad).is_err(), "{bad}");
    }
}
