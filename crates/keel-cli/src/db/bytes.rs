//! Keys and values on the command line and in the output: UTF-8 text, or
//! hex with `--hex`.

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

    /// `bytes` as printed; `what` names them when they are not UTF-8
    /// (`the value of key "k"`).
    pub fn show(self, what: impl FnOnce() -> String, bytes: &[u8]) -> Result<String, Failure> {
        match self {
            Encoding::Hex => Ok(encode_hex(bytes)),
            Encoding::Text => match std::str::from_utf8(bytes) {
                Ok(s) => Ok(s.to_owned()),
                Err(_) => Err(Failure::bad_input(format!(
                    "{} is not UTF-8 text ({} bytes); print it with --hex",
                    what(),
                    bytes.len()
                ))),
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
