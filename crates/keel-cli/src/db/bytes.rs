//! Keys and values on the command line and in the output: UTF-8 text, or
//! hex with `--hex`. Any bytes can be printed: as text, the bytes that
//! are not printable UTF-8 are escaped ([`escape`]); in `--json`, bytes
//! that are not UTF-8 are an object `{"hex": …}` ([`Shown`]). The scheme
//! is specified byte for byte in docs/cli-db.md, "Keys and values".

use std::fmt::Write as _;

use serde::Serialize;

use super::failure::Failure;

/// How keys and values are written and printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// UTF-8 text, as is.
    Text,
    /// Two lowercase hex digits a byte (input: either case, optional `0x`).
    Hex,
}

impl Encoding {
    pub fn new(hex: bool) -> Encoding {
        if hex {
            Encoding::Hex
        } else {
            Encoding::Text
        }
    }

    /// The bytes of `input`, given on the command line as `what` (`KEY`,
    /// `--prefix`, …).
    pub fn parse(self, what: &str, input: &str) -> Result<Vec<u8>, Failure> {
        match self {
            Encoding::Text => Ok(input.as_bytes().to_vec()),
            Encoding::Hex => decode_hex(input)
                .map_err(|why| Failure::bad_input(format!("{what} {input:?} is not hex: {why}"))),
        }
    }

    /// `bytes` as a line of text shows them: hex, or escaped text.
    pub fn text(self, bytes: &[u8]) -> String {
        match self {
            Encoding::Hex => encode_hex(bytes),
            Encoding::Text => escape(bytes),
        }
    }

    /// `bytes` as `--json` shows them: a hex string, or the text when it is
    /// UTF-8, else `{"hex": …}`.
    pub fn json(self, bytes: &[u8]) -> Shown {
        match (self, std::str::from_utf8(bytes)) {
            (Encoding::Hex, _) => Shown::Text(encode_hex(bytes)),
            (Encoding::Text, Ok(s)) => Shown::Text(s.to_owned()),
            (Encoding::Text, Err(_)) => Shown::Hex {
                hex: encode_hex(bytes),
            },
        }
    }

    /// A key for a message: quoted text when it is UTF-8, else hex.
    pub fn name(self, key: &[u8]) -> String {
        match (self, std::str::from_utf8(key)) {
            (Encoding::Text, Ok(s)) => format!("{s:?}"),
            _ => format!("0x{}", encode_hex(key)),
        }
    }
}

/// A key or value in `--json`: a JSON string, or, for bytes that are not
/// UTF-8 (without `--hex`), `{"hex": "…"}` with two lowercase digits a
/// byte.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Shown {
    Text(String),
    Hex { hex: String },
}

impl Shown {
    /// The bytes a JSON value written as [`Encoding::json`] writes them
    /// (without `--hex`) stands for: a string is its UTF-8; an object with
    /// the one field `hex` is those hex digits' bytes (any bytes, UTF-8 or
    /// not). Anything else is refused, saying why.
    pub fn bytes_of(value: &serde_json::Value) -> Result<Vec<u8>, String> {
        match value {
            serde_json::Value::String(s) => Ok(s.as_bytes().to_vec()),
            serde_json::Value::Object(o) if o.len() == 1 => match o.get("hex") {
                Some(serde_json::Value::String(h)) => {
                    decode_hex(h).map_err(|why| format!("{{\"hex\": {h:?}}} is not hex: {why}"))
                }
                _ => Err(format!("{value} is not a string or {{\"hex\": \"…\"}}")),
            },
            _ => Err(format!("{value} is not a string or {{\"hex\": \"…\"}}")),
        }
    }
}

/// `bytes` as one line of text that says exactly which bytes they are:
/// UTF-8 characters as they are, except a backslash, written `\\`, and
/// control characters (U+0000 to U+001F, U+007F to U+009F: tabs, line
/// breaks, escape sequences), written as their UTF-8 bytes; every byte
/// that is not part of valid UTF-8 is written `\xNN` (two lowercase hex
/// digits). So the result holds no tab and no line break, and reads back
/// to the same bytes (`\\` is a backslash, `\xNN` a byte, anything
/// else its UTF-8).
pub fn escape(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len());
    let byte = |s: &mut String, b: u8| {
        let _ = write!(s, "\\x{b:02x}");
    };
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => s.push_str("\\\\"),
                c if c.is_control() => {
                    for &b in c.encode_utf8(&mut [0; 4]).as_bytes() {
                        byte(&mut s, b);
                    }
                }
                c => s.push(c),
            }
        }
        for &b in chunk.invalid() {
            byte(&mut s, b);
        }
    }
    s
}

/// The bytes [`escape`] wrote `text` for; `None` when `text` is not
/// something it writes (a backslash followed by neither `\\` nor `xNN`).
#[cfg(test)]
pub fn unescape(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find('\\') {
        out.extend_from_slice(&rest.as_bytes()[..i]);
        rest = &rest[i + 1..];
        if let Some(r) = rest.strip_prefix('\\') {
            out.push(b'\\');
            rest = r;
        } else {
            let digits = rest.strip_prefix('x')?.get(..2)?;
            out.push(u8::from_str_radix(digits, 16).ok()?);
            rest = &rest[3..];
        }
    }
    out.extend_from_slice(rest.as_bytes());
    Some(out)
}

pub fn encode_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    s
}

/// Hex digits (either case, an optional `0x` prefix) to bytes.
pub fn decode_hex(s: &str) -> Result<Vec<u8>, String> {
    let digits = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    if let Some((i, c)) = digits.char_indices().find(|(_, c)| !c.is_ascii_hexdigit()) {
        return Err(format!("{c:?} at byte {i} is not a hex digit"));
    }
    if digits.len() % 2 != 0 {
        return Err(format!(
            "{} digits, an odd number (two digits a byte)",
            digits.len()
        ));
    }
    let value = |c: u8| (c as char).to_digit(16).expect("checked above") as u8;
    Ok(digits
        .as_bytes()
        .chunks_exact(2)
        .map(|pair| value(pair[0]) << 4 | value(pair[1]))
        .collect())
}
