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
use crate::btree::{Borrowed, Entry};

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

/// Run `f` on the full key of `key` in table `id`, made on the stack
/// when it is short (a point read's key: no allocation per get).
pub(super) fn with_full_key<R>(id: u32, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> R {
    let mut buf = [0u8; 64];
    let len = PREFIX + key.len();
    if len > buf.len() {
        return f(&full_key(id, key));
    }
    buf[..PREFIX].copy_from_slice(&id.to_be_bytes());
    buf[PREFIX..len].copy_from_slice(key);
    f(&buf[..len])
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

/// A value found through a base, borrowed where it lies when it can be:
/// in a memtable (which the base holds) or a cached leaf (kept by a
/// reader-era pin); else the tree's entry.
#[derive(Debug)]
pub(crate) enum FoundRef<'a> {
    Tree(Entry),
    Mem(&'a [u8]),
    Pinned(Borrowed<'a>),
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
///
/// A point read (`get`) of a read transaction returns a `Value<'t>` that
/// borrows the transaction: where the value lies in memory (a cached
/// leaf, a memtable) it is borrowed in place, with no allocation, no copy
/// and no reference count taken (docs/store.md, "Reads"). Scans and write
/// transactions return `Value<'static>`s, which hold their bytes
/// themselves. [`Value::to_vec`] copies the bytes out.
#[derive(Clone)]
pub struct Value<'t>(pub(super) ValueInner<'t>);

#[derive(Clone)]
pub(super) enum ValueInner<'t> {
    Tree(Entry),
    Owned(Arc<[u8]>),
    /// In a memtable or a pending run that the transaction's snapshot
    /// holds.
    Mem(&'t [u8]),
    /// In a cached leaf, kept by a reader-era pin (`crate::era`).
    Pinned(Borrowed<'t>),
}

impl Value<'static> {
    pub(super) fn owned(v: Arc<[u8]>) -> Value<'static> {
        Value(ValueInner::Owned(v))
    }

    pub(super) fn tree(e: Entry) -> Value<'static> {
        Value(ValueInner::Tree(e))
    }

    pub(super) fn found(f: Found) -> Value<'static> {
        match f {
            Found::Tree(e) => Value::tree(e),
            Found::Mem(v) => Value::owned(v),
        }
    }
}

impl<'t> Value<'t> {
    pub(super) fn found_ref(f: FoundRef<'t>) -> Value<'t> {
        Value(match f {
            FoundRef::Tree(e) => ValueInner::Tree(e),
            FoundRef::Mem(v) => ValueInner::Mem(v),
            FoundRef::Pinned(b) => ValueInner::Pinned(b),
        })
    }

    /// The value's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            ValueInner::Tree(e) => e.value(),
            ValueInner::Owned(v) => v,
            ValueInner::Mem(v) => v,
            ValueInner::Pinned(b) => b.bytes(),
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
pub type KeyValue = (Key, Value<'static>);

/// `Deref`, `AsRef`, `Borrow`, comparisons with byte strings and `str`s,
/// `Eq`, `Ord`, `Hash` (all as the bytes) and a bounded `Debug`.
macro_rules! bytes_like {
    ([$($g:lifetime),*] $t:ty) => {
        impl<$($g),*> Deref for $t {
            type Target = [u8];
            fn deref(&self) -> &[u8] {
                self.as_bytes()
            }
        }

        impl<$($g),*> AsRef<[u8]> for $t {
            fn as_ref(&self) -> &[u8] {
                self.as_bytes()
            }
        }

        impl<$($g),*> std::borrow::Borrow<[u8]> for $t {
            fn borrow(&self) -> &[u8] {
                self.as_bytes()
            }
        }

        impl<$($g),*> fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                debug_bytes(f, self.as_bytes())
            }
        }

        impl<$($g),*> PartialEq for $t {
            fn eq(&self, other: &$t) -> bool {
                self.as_bytes() == other.as_bytes()
            }
        }

        impl<$($g),*> Eq for $t {}

        impl<$($g),*> PartialOrd for $t {
            fn partial_cmp(&self, other: &$t) -> Option<Ordering> {
                Some(self.cmp(other))
            }
        }

        impl<$($g),*> Ord for $t {
            fn cmp(&self, other: &$t) -> Ordering {
                self.as_bytes().cmp(other.as_bytes())
            }
        }

        impl<$($g),*> Hash for $t {
            fn hash<H: Hasher>(&self, state: &mut H) {
                self.as_bytes().hash(state)
            }
        }

        impl<$($g),*> PartialEq<[u8]> for $t {
            fn eq(&self, other: &[u8]) -> bool {
                self.as_bytes() == other
            }
        }

        impl<$($g),*> PartialEq<&[u8]> for $t {
            fn eq(&self, other: &&[u8]) -> bool {
                self.as_bytes() == *other
            }
        }

        impl<$($g,)* const N: usize> PartialEq<[u8; N]> for $t {
            fn eq(&self, other: &[u8; N]) -> bool {
                self.as_bytes() == other
            }
        }

        impl<$($g,)* const N: usize> PartialEq<&[u8; N]> for $t {
            fn eq(&self, other: &&[u8; N]) -> bool {
                self.as_bytes() == *other
            }
        }

        impl<$($g),*> PartialEq<Vec<u8>> for $t {
            fn eq(&self, other: &Vec<u8>) -> bool {
                self.as_bytes() == other.as_slice()
            }
        }

        impl<$($g),*> PartialEq<str> for $t {
            fn eq(&self, other: &str) -> bool {
                self.as_bytes() == other.as_bytes()
            }
        }

        impl<$($g),*> PartialEq<&str> for $t {
            fn eq(&self, other: &&str) -> bool {
                self.as_bytes() == other.as_bytes()
            }
        }

        impl<$($g),*> PartialEq<$t> for [u8] {
            fn eq(&self, other: &$t) -> bool {
                self == other.as_bytes()
            }
        }

        impl<$($g),*> PartialEq<$t> for &[u8] {
            fn eq(&self, other: &$t) -> bool {
                *self == other.as_bytes()
            }
        }

        impl<$($g),*> PartialEq<$t> for str {
            fn eq(&self, other: &$t) -> bool {
                self.as_bytes() == other.as_bytes()
            }
        }

        impl<$($g),*> PartialEq<$t> for &str {
            fn eq(&self, other: &$t) -> bool {
                self.as_bytes() == other.as_bytes()
            }
        }
    };
}

bytes_like!(['t] Value<'t>);
bytes_like!([] Key);

#[cfg(test)]
mod tests {
    use super::*;

    fn value(bytes: &[u8]) -> Value<'static> {
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
    fn a_full_key_is_the_same_on_the_stack_and_in_a_vec() {
        for len in [0, 1, 59, 60, 61, 300] {
            let key: Vec<u8> = (0..len).map(|i| i as u8).collect();
            with_full_key(0x0102_0304, &key, |k| {
                assert_eq!(k, full_key(0x0102_0304, &key))
            });
        }
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
