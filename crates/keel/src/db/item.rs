//! What reads return: a key and a value, each holding its bytes where the
//! store found them (a tree leaf, shared; a memtable's value, copied; a
//! transaction's own change, shared), and comparing and printing as those
//! bytes.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;

use super::error::{DbError, Result};
use crate::btree::Entry;

/// Bytes of a full key before the user's key: the table's id (4 bytes,
/// big-endian).
pub(super) const PREFIX: usize = 4;

/// The catalog's table id (see `read.rs`).
pub(super) const CATALOG: u32 = 0;

/// The full key of `key` in table `id`.
pub(super) fn full_key(id: u32, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(PREFIX + key.len());
    k.extend_from_slice(&id.to_be_bytes());
    k.extend_from_slice(key);
    k
}

/// The table id a catalog entry's value holds.
pub(super) fn decode_id(path: &Path, v: &[u8]) -> Result<u32> {
    let b: [u8; 4] = v.try_into().map_err(|_| DbError::Corrupt {
        path: path.to_path_buf(),
        reason: "a catalog entry whose table id is not 4 bytes".into(),
    })?;
    Ok(u32::from_be_bytes(b))
}

/// A value found through a base: the tree's entry, or a memtable's value.
#[derive(Debug)]
pub(crate) enum Found {
    Tree(Entry),
    Mem(Arc<[u8]>),
}

/// Bytes `Debug` prints of a key or a value before it elides the rest.
const DEBUG_BYTES: usize = 64;

/// Print `bytes` as an escaped byte string, `b"…"`: at most
/// [`DEBUG_BYTES`] of them, then how many there are.
fn debug_bytes(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    let shown = &bytes[..bytes.len().min(DEBUG_BYTES)];
    write!(f, "b\"{}\"", shown.escape_ascii())?;
    if shown.len() < bytes.len() {
        write!(f, " … ({} bytes)", bytes.len())?;
    }
    Ok(())
}

/// A value read from the store. Dereferences to its bytes; compares with
/// byte strings and `str`s (`value == b"admin"`, `value == "admin"`);
/// `{:?}` prints its bytes (the first 64, escaped, then its length).
#[derive(Clone)]
pub struct Value(ValueInner);

#[derive(Clone)]
enum ValueInner {
    Tree(Entry),
    Owned(Arc<[u8]>),
}

impl Value {
    pub(super) fn owned(v: Arc<[u8]>) -> Value {
        Value(ValueInner::Owned(v))
    }

    pub(super) fn tree(e: Entry) -> Value {
        Value(ValueInner::Tree(e))
    }

    pub(super) fn found(f: Found) -> Value {
        match f {
            Found::Tree(e) => Value::tree(e),
            Found::Mem(v) => Value::owned(v),
        }
    }

    /// The value's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            ValueInner::Tree(e) => e.value(),
            ValueInner::Owned(v) => v,
        }
    }

    /// The value's bytes, copied.
    pub fn to_vec(&self) -> Vec<u8> {
        self.as_bytes().to_vec()
    }
}

/// A key found by a scan (without its table's prefix). Dereferences to
/// its bytes; compares, orders and hashes as them, and compares with byte
/// strings and `str`s as [`Value`] does.
#[derive(Clone)]
pub struct Key(KeyInner);

#[derive(Clone)]
enum KeyInner {
    Tree(Entry),
    /// The full key: the table's prefix, then the key.
    Owned(Vec<u8>),
}

impl Key {
    /// A tree entry's key.
    pub(super) fn tree(e: Entry) -> Key {
        Key(KeyInner::Tree(e))
    }

    /// A full key (with its table's prefix).
    pub(super) fn owned_full(k: Vec<u8>) -> Key {
        Key(KeyInner::Owned(k))
    }

    /// The full key, the table's prefix included.
    pub(super) fn full(&self) -> &[u8] {
        match &self.0 {
            KeyInner::Tree(e) => e.key(),
            KeyInner::Owned(k) => k,
        }
    }

    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.full()[PREFIX..]
    }

    /// The key's bytes, copied.
    pub fn to_vec(&self) -> Vec<u8> {
        self.as_bytes().to_vec()
    }
}

/// What a scan yields: an entry's key and value, `let (key, value) =
/// item?;` as with redb's ranges.
pub type KeyValue = (Key, Value);

/// `Deref`, `AsRef`, `Borrow`, comparisons with byte strings and `str`s,
/// `Eq`, `Ord`, `Hash` (all as the bytes) and a bounded `Debug`.
macro_rules! bytes_like {
    ($t:ty) => {
        impl Deref for $t {
            type Target = [u8];
            fn deref(&self) -> &[u8] {
                self.as_bytes()
            }
        }

        impl AsRef<[u8]> for $t {
            fn as_ref(&self) -> &[u8] {
                self.as_bytes()
            }
        }

        impl std::borrow::Borrow<[u8]> for $t {
            fn borrow(&self) -> &[u8] {
                self.as_bytes()
            }
        }

        impl fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                debug_bytes(f, self.as_bytes())
            }
        }

        impl PartialEq for $t {
            fn eq(&self, other: &$t) -> bool {
                self.as_bytes() == other.as_bytes()
            }
        }

        impl Eq for $t {}

        impl PartialOrd for $t {
            fn partial_cmp(&self, other: &$t) -> Option<Ordering> {
                Some(self.cmp(other))
            }
        }

        impl Ord for $t {
            fn cmp(&self, other: &$t) -> Ordering {
                self.as_bytes().cmp(other.as_bytes())
            }
        }

        impl Hash for $t {
            fn hash<H: Hasher>(&self, state: &mut H) {
                self.as_bytes().hash(state)
            }
        }

        impl PartialEq<[u8]> for $t {
            fn eq(&self, other: &[u8]) -> bool {
                self.as_bytes() == other
            }
        }

        impl PartialEq<&[u8]> for $t {
            fn eq(&self, other: &&[u8]) -> bool {
                self.as_bytes() == *other
            }
        }

        impl<const N: usize> PartialEq<[u8; N]> for $t {
            fn eq(&self, other: &[u8; N]) -> bool {
                self.as_bytes() == other
            }
        }

        impl<const N: usize> PartialEq<&[u8; N]> for $t {
            fn eq(&self, other: &&[u8; N]) -> bool {
                self.as_bytes() == *other
            }
        }

        impl PartialEq<Vec<u8>> for $t {
            fn eq(&self, other: &Vec<u8>) -> bool {
                self.as_bytes() == other.as_slice()
            }
        }

        impl PartialEq<str> for $t {
            fn eq(&self, other: &str) -> bool {
                self.as_bytes() == other.as_bytes()
            }
        }

        impl PartialEq<&str> for $t {
            fn eq(&self, other: &&str) -> bool {
                self.as_bytes() == other.as_bytes()
            }
        }

        impl PartialEq<$t> for [u8] {
            fn eq(&self, other: &$t) -> bool {
                self == other.as_bytes()
            }
        }

        impl PartialEq<$t> for &[u8] {
            fn eq(&self, other: &$t) -> bool {
                *self == other.as_bytes()
            }
        }

        impl PartialEq<$t> for str {
            fn eq(&self, other: &$t) -> bool {
                self.as_bytes() == other.as_bytes()
            }
        }

        impl PartialEq<$t> for &str {
            fn eq(&self, other: &$t) -> bool {
                self.as_bytes() == other.as_bytes()
            }
        }
    };
}

bytes_like!(Value);
bytes_like!(Key);

#[cfg(test)]
mod tests {
    use super::*;

    fn value(bytes: &[u8]) -> Value {
        Value::owned(Arc::from(bytes))
    }

    #[test]
    fn values_compare_with_byte_strings_and_strs() {
        let v = value(b"admin");
        assert!(v == b"admin");
        assert!(v == *b"admin");
        let slice: &[u8] = b"admin";
        assert!(v == slice);
        assert!(v == b"admin"[..]);
        assert!(v == "admin");
        assert!(v == *"admin");
        assert!(v == b"admin".to_vec());
        assert!("admin" == v);
        assert!(v != b"admins");
        assert!(v != "Admin");
        let k = Key::owned_full([&[0, 0, 0, 7][..], b"bob"].concat());
        assert!(k == b"bob" && k == "bob" && k != b"\0\0\0\x07bob");
        assert!(
            Key::owned_full(b"\0\0\0\x01a".to_vec()) < Key::owned_full(b"\0\0\0\x01b".to_vec())
        );
    }

    #[test]
    fn debug_prints_the_bytes_bounded() {
        assert_eq!(format!("{:?}", value(b"ab\"\n\xff")), r#"b"ab\"\n\xff""#);
        let long = value(&[b'x'; 100]);
        assert_eq!(
            format!("{long:?}"),
            format!("b\"{}\" … (100 bytes)", "x".repeat(64))
        );
        let k = Key::owned_full(b"\0\0\0\x01key".to_vec());
        assert_eq!(format!("{k:?}"), r#"b"key""#);
        assert_eq!(format!("{:?}", (k, value(b"v"))), r#"(b"key", b"v")"#);
    }
}
