//! Typed tables: keys and values of Rust types over the byte tables, in
//! the spirit of redb's `TableDefinition<K, V>`.
//!
//! A [`TableDefinition`] names a table and its key and value types;
//! `open_typed` opens it in a read or write transaction. Keys are encoded
//! so that their bytes sort as the keys do ([`KeyCodec`]): integers
//! big-endian (signed ones with the sign bit flipped, so negatives come
//! first), strings and byte strings as their bytes, tuples part by part
//! with variable-length parts escaped and terminated. Values are encoded
//! the same way ([`ValueCodec`]).
//!
//! **The types are recorded.** A write transaction's typed open records
//! the table's key and value types (by the encodings' names: `&str` and
//! `String` are both `str`) in the store; opening the table later with
//! other types fails with [`DbError::TableTypeMismatch`], in a read or a
//! write transaction. The record lives in a table of its own (id
//! 2³² − 1, which no table is given), keyed by the table's name, with the
//! table's id: an older Keel neither lists nor reads it (no format
//! change; `docs/format.md`, "The catalog"), and a record whose id is not
//! the table's (left by an older Keel that dropped the table and made it
//! again) is not the table's.
//!
//! **Bytes and types.** A table made by `open_table` (bytes) has no
//! types recorded: a typed open of it is allowed and, in a write
//! transaction, records its types from then on; its entries must decode
//! ([`DbError::Decode`] otherwise). `open_table` opens any table,
//! typed or not, as bytes; what it writes there is not checked.

use std::borrow::Borrow;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use super::error::{DbError, Result};
use super::item::{Key, Value};
use super::read::{count, full_key, Iter, ReadTxn, Table, TYPES};
use super::txn::{Active, TableMut, WriteTxn};

/// Why bytes do not decode as a type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(String);

impl DecodeError {
    /// An error saying `reason`.
    pub fn new(reason: impl Into<String>) -> DecodeError {
        DecodeError(reason.into())
    }
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DecodeError {}

/// A type stored as a typed table's values: its encoding to bytes and
/// back.
pub trait ValueCodec {
    /// The type values are given as: `&'a str` for `&str`, the type
    /// itself for owned ones.
    type SelfType<'a>;
    /// What reads decode to: `String` for `&str`, `Vec<u8>` for `&[u8]`,
    /// the type itself for owned ones.
    type Owned;
    /// Append `value`'s encoding to `out`.
    fn encode(value: &Self::SelfType<'_>, out: &mut Vec<u8>);
    /// Decode a whole encoding.
    fn decode(bytes: &[u8]) -> std::result::Result<Self::Owned, DecodeError>;
    /// The encoding's name, as the store records a table's types: types
    /// that encode alike share it (`&str` and `String` are `str`).
    fn type_name() -> String;
}

/// A type stored as a typed table's keys: its encoding sorts as its
/// values do, alone and as a part of a tuple.
pub trait KeyCodec: ValueCodec {
    /// Append `value`'s encoding as a part of a tuple key: it must tell
    /// where it ends, and sort as `value` among encodings followed by any
    /// bytes.
    fn encode_part(value: &Self::SelfType<'_>, out: &mut Vec<u8>);
    /// Decode one part from the front of `bytes`, leaving the rest.
    fn decode_part(bytes: &mut &[u8]) -> std::result::Result<Self::Owned, DecodeError>;
}

/// Take `n` bytes from the front of `bytes`.
fn take<'b>(
    bytes: &mut &'b [u8],
    n: usize,
    what: &str,
) -> std::result::Result<&'b [u8], DecodeError> {
    if bytes.len() < n {
        return Err(DecodeError::new(format!(
            "{} bytes where {what} takes {n}",
            bytes.len()
        )));
    }
    let (head, rest) = bytes.split_at(n);
    *bytes = rest;
    Ok(head)
}

/// Decode a whole encoding made of one part.
fn whole<T>(
    bytes: &[u8],
    part: impl FnOnce(&mut &[u8]) -> std::result::Result<T, DecodeError>,
) -> std::result::Result<T, DecodeError> {
    let mut rest = bytes;
    let v = part(&mut rest)?;
    match rest.is_empty() {
        true => Ok(v),
        false => Err(DecodeError::new(format!(
            "{} bytes left over after the encoding",
            rest.len()
        ))),
    }
}

macro_rules! unsigned {
    ($($t:ty),*) => {$(
        impl ValueCodec for $t {
            type SelfType<'a> = $t;
            type Owned = $t;
            fn encode(value: &$t, out: &mut Vec<u8>) {
                out.extend_from_slice(&value.to_be_bytes());
            }
            fn decode(bytes: &[u8]) -> std::result::Result<$t, DecodeError> {
                whole(bytes, Self::decode_part)
            }
            fn type_name() -> String {
                stringify!($t).into()
            }
        }

        /// Big-endian: the bytes sort as the numbers.
        impl KeyCodec for $t {
            fn encode_part(value: &$t, out: &mut Vec<u8>) {
                Self::encode(value, out)
            }
            fn decode_part(bytes: &mut &[u8]) -> std::result::Result<$t, DecodeError> {
                let b = take(bytes, std::mem::size_of::<$t>(), stringify!($t))?;
                Ok(<$t>::from_be_bytes(b.try_into().expect("the type's width")))
            }
        }
    )*};
}

unsigned!(u8, u16, u32, u64, u128);

macro_rules! signed {
    ($($t:ty => $u:ty),*) => {$(
        impl ValueCodec for $t {
            type SelfType<'a> = $t;
            type Owned = $t;
            fn encode(value: &$t, out: &mut Vec<u8>) {
                // The sign bit flipped: negatives (0 there now) sort first.
                let flipped = (*value as $u) ^ (1 << (<$u>::BITS - 1));
                out.extend_from_slice(&flipped.to_be_bytes());
            }
            fn decode(bytes: &[u8]) -> std::result::Result<$t, DecodeError> {
                whole(bytes, Self::decode_part)
            }
            fn type_name() -> String {
                stringify!($t).into()
            }
        }

        /// Big-endian with the sign bit flipped: the bytes sort as the
        /// numbers, negatives first.
        impl KeyCodec for $t {
            fn encode_part(value: &$t, out: &mut Vec<u8>) {
                Self::encode(value, out)
            }
            fn decode_part(bytes: &mut &[u8]) -> std::result::Result<$t, DecodeError> {
                let b = take(bytes, std::mem::size_of::<$t>(), stringify!($t))?;
                let u = <$u>::from_be_bytes(b.try_into().expect("the type's width"));
                Ok((u ^ (1 << (<$u>::BITS - 1))) as $t)
            }
        }
    )*};
}

signed!(i8 => u8, i16 => u16, i32 => u32, i64 => u64, i128 => u128);

/// A variable-length part of a tuple key: each 0 byte as `00 ff`, then
/// `00 00`. Order-preserving: a string that is a prefix of another ends
/// (`00 00`) where the other goes on with a byte above `00`, or with a 0
/// byte (`00 ff`), both after `00 00`.
fn encode_escaped(bytes: &[u8], out: &mut Vec<u8>) {
    for &b in bytes {
        out.push(b);
        if b == 0 {
            out.push(0xff);
        }
    }
    out.extend_from_slice(&[0, 0]);
}

fn decode_escaped(bytes: &mut &[u8]) -> std::result::Result<Vec<u8>, DecodeError> {
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        match (bytes.get(i), bytes.get(i + 1)) {
            (Some(0), Some(0)) => {
                *bytes = &bytes[i + 2..];
                return Ok(out);
            }
            (Some(0), Some(0xff)) => {
                out.push(0);
                i += 2;
            }
            (Some(0), _) => {
                return Err(DecodeError::new(
                    "a 0 byte neither escaped (00 ff) nor ending the part (00 00)",
                ))
            }
            (Some(&b), _) => {
                out.push(b);
                i += 1;
            }
            (None, _) => return Err(DecodeError::new("a part without its end (00 00)")),
        }
    }
}

fn utf8(bytes: Vec<u8>) -> std::result::Result<String, DecodeError> {
    String::from_utf8(bytes).map_err(|e| DecodeError::new(format!("not UTF-8: {e}")))
}

/// A string: its bytes (they sort as the strings' code points do).
macro_rules! string {
    ($t:ty, $self_type:ty, $v:ident => $as_bytes:expr) => {
        impl ValueCodec for $t {
            type SelfType<'a> = $self_type;
            type Owned = String;
            fn encode($v: &Self::SelfType<'_>, out: &mut Vec<u8>) {
                out.extend_from_slice($as_bytes);
            }
            fn decode(bytes: &[u8]) -> std::result::Result<String, DecodeError> {
                utf8(bytes.to_vec())
            }
            fn type_name() -> String {
                "str".into()
            }
        }

        impl KeyCodec for $t {
            fn encode_part($v: &Self::SelfType<'_>, out: &mut Vec<u8>) {
                encode_escaped($as_bytes, out)
            }
            fn decode_part(bytes: &mut &[u8]) -> std::result::Result<String, DecodeError> {
                utf8(decode_escaped(bytes)?)
            }
        }
    };
}

string!(&str, &'a str, v => v.as_bytes());
string!(String, String, v => v.as_bytes());

/// A byte string: its bytes.
macro_rules! bytes {
    ($t:ty, $self_type:ty, $v:ident => $as_bytes:expr) => {
        impl ValueCodec for $t {
            type SelfType<'a> = $self_type;
            type Owned = Vec<u8>;
            fn encode($v: &Self::SelfType<'_>, out: &mut Vec<u8>) {
                out.extend_from_slice($as_bytes);
            }
            fn decode(bytes: &[u8]) -> std::result::Result<Vec<u8>, DecodeError> {
                Ok(bytes.to_vec())
            }
            fn type_name() -> String {
                "bytes".into()
            }
        }

        impl KeyCodec for $t {
            fn encode_part($v: &Self::SelfType<'_>, out: &mut Vec<u8>) {
                encode_escaped($as_bytes, out)
            }
            fn decode_part(bytes: &mut &[u8]) -> std::result::Result<Vec<u8>, DecodeError> {
                decode_escaped(bytes)
            }
        }
    };
}

bytes!(&[u8], &'a [u8], v => v);
bytes!(Vec<u8>, Vec<u8>, v => v.as_slice());

/// `N` bytes, as they are.
impl<const N: usize> ValueCodec for [u8; N] {
    type SelfType<'a> = [u8; N];
    type Owned = [u8; N];
    fn encode(value: &[u8; N], out: &mut Vec<u8>) {
        out.extend_from_slice(value);
    }
    fn decode(bytes: &[u8]) -> std::result::Result<[u8; N], DecodeError> {
        whole(bytes, Self::decode_part)
    }
    fn type_name() -> String {
        format!("[u8; {N}]")
    }
}

impl<const N: usize> KeyCodec for [u8; N] {
    fn encode_part(value: &[u8; N], out: &mut Vec<u8>) {
        out.extend_from_slice(value);
    }
    fn decode_part(bytes: &mut &[u8]) -> std::result::Result<[u8; N], DecodeError> {
        Ok(take(bytes, N, "the array")?.try_into().expect("N bytes"))
    }
}

/// Nothing: a table of keys alone (a set).
impl ValueCodec for () {
    type SelfType<'a> = ();
    type Owned = ();
    fn encode(_: &(), _: &mut Vec<u8>) {}
    fn decode(bytes: &[u8]) -> std::result::Result<(), DecodeError> {
        whole(bytes, Self::decode_part)
    }
    fn type_name() -> String {
        "()".into()
    }
}

impl KeyCodec for () {
    fn encode_part(_: &(), _: &mut Vec<u8>) {}
    fn decode_part(_: &mut &[u8]) -> std::result::Result<(), DecodeError> {
        Ok(())
    }
}

/// Tuples of key types, part by part: they sort by their first part, then
/// their second, and so on.
macro_rules! tuple {
    ($($p:ident $i:tt),+) => {
        impl<$($p: KeyCodec),+> ValueCodec for ($($p,)+) {
            type SelfType<'a> = ($($p::SelfType<'a>,)+);
            type Owned = ($($p::Owned,)+);
            fn encode(value: &Self::SelfType<'_>, out: &mut Vec<u8>) {
                $($p::encode_part(&value.$i, out);)+
            }
            fn decode(bytes: &[u8]) -> std::result::Result<Self::Owned, DecodeError> {
                whole(bytes, Self::decode_part)
            }
            fn type_name() -> String {
                let parts: Vec<String> = vec![$($p::type_name()),+];
                format!("({})", parts.join(", "))
            }
        }

        impl<$($p: KeyCodec),+> KeyCodec for ($($p,)+) {
            fn encode_part(value: &Self::SelfType<'_>, out: &mut Vec<u8>) {
                Self::encode(value, out)
            }
            fn decode_part(bytes: &mut &[u8]) -> std::result::Result<Self::Owned, DecodeError> {
                Ok(($($p::decode_part(bytes)?,)+))
            }
        }
    };
}

tuple!(A 0, B 1);
tuple!(A 0, B 1, C 2);
tuple!(A 0, B 1, C 2, D 3);

/// A typed table: its name, and the types of its keys and values.
///
/// ```
/// use keel::db::TableDefinition;
/// const USERS: TableDefinition<u64, &str> = TableDefinition::new("users");
/// ```
pub struct TableDefinition<'n, K: KeyCodec, V: ValueCodec> {
    name: &'n str,
    types: PhantomData<fn() -> (K, V)>,
}

impl<'n, K: KeyCodec, V: ValueCodec> TableDefinition<'n, K, V> {
    /// The table `name` with keys of `K` and values of `V`.
    pub const fn new(name: &'n str) -> Self {
        TableDefinition {
            name,
            types: PhantomData,
        }
    }

    /// The table's name.
    pub fn name(&self) -> &'n str {
        self.name
    }

    /// The types as errors show them: `<K, V>`.
    fn types() -> String {
        format!("<{}, {}>", K::type_name(), V::type_name())
    }
}

impl<K: KeyCodec, V: ValueCodec> Clone for TableDefinition<'_, K, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K: KeyCodec, V: ValueCodec> Copy for TableDefinition<'_, K, V> {}

impl<K: KeyCodec, V: ValueCodec> std::fmt::Debug for TableDefinition<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TableDefinition({:?}{})", self.name, Self::types())
    }
}

// ----- the types' record ----------------------------------------------------

/// A table's types as the store records them: its id (the record is the
/// table's only while the id is), its key type's name and its value
/// type's.
#[derive(Debug, PartialEq, Eq)]
struct TypeRecord {
    id: u32,
    key: String,
    value: String,
}

impl TypeRecord {
    /// The id (4 bytes, big-endian), the key type's name's length (2
    /// bytes, big-endian) and the name, then the value type's name to the
    /// end (names in UTF-8).
    fn encode(&self) -> Vec<u8> {
        let key_len = u16::try_from(self.key.len()).expect("a type name under 64 KiB");
        let mut out = Vec::with_capacity(6 + self.key.len() + self.value.len());
        out.extend_from_slice(&self.id.to_be_bytes());
        out.extend_from_slice(&key_len.to_be_bytes());
        out.extend_from_slice(self.key.as_bytes());
        out.extend_from_slice(self.value.as_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<TypeRecord> {
        let id = u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?);
        let key_len = usize::from(u16::from_be_bytes(bytes.get(4..6)?.try_into().ok()?));
        let key = std::str::from_utf8(bytes.get(6..6 + key_len)?).ok()?;
        let value = std::str::from_utf8(bytes.get(6 + key_len..)?).ok()?;
        Some(TypeRecord {
            id,
            key: key.into(),
            value: value.into(),
        })
    }

    fn of<K: KeyCodec, V: ValueCodec>(id: u32) -> TypeRecord {
        TypeRecord {
            id,
            key: K::type_name(),
            value: V::type_name(),
        }
    }
}

/// Whether table `name` (id `id`), whose types record is `stored`, may be
/// opened as `<K, V>`: `Ok(true)` when it records other types than `<K,
/// V>`'s is an error; `Ok(false)`: it records none (for it).
fn check_types<K: KeyCodec, V: ValueCodec>(
    shared_path: &std::path::Path,
    name: &str,
    id: u32,
    stored: Option<Value<'static>>,
) -> Result<bool> {
    let Some(bytes) = stored else {
        return Ok(false);
    };
    let Some(stored) = TypeRecord::decode(&bytes) else {
        return Err(DbError::Corrupt {
            path: shared_path.to_path_buf(),
            reason: format!("the types record of table {name:?} does not parse"),
        });
    };
    if stored.id != id {
        return Ok(false); // an older table's of that name
    }
    if stored != TypeRecord::of::<K, V>(id) {
        return Err(DbError::TableTypeMismatch {
            table: name.into(),
            stored: format!("<{}, {}>", stored.key, stored.value).into(),
            requested: TableDefinition::<K, V>::types().into(),
        });
    }
    Ok(true)
}

impl ReadTxn {
    /// The typed table `def`: an error when it does not exist, or records
    /// other types (see [`TableDefinition`]; a table made as bytes
    /// records none and opens as any types).
    pub fn open_typed<K: KeyCodec, V: ValueCodec>(
        &self,
        def: &TableDefinition<'_, K, V>,
    ) -> Result<TypedTable<'_, K, V>> {
        let table = self.open_table(def.name)?;
        let stored = self.get_full(&full_key(TYPES, def.name.as_bytes()))?;
        check_types::<K, V>(&self.shared().path, def.name, table.id, stored)?;
        Ok(TypedTable {
            table,
            name: def.name.into(),
            types: PhantomData,
        })
    }
}

impl WriteTxn {
    /// The typed table `def`, created if it does not exist, its types
    /// recorded if they were not: an error if it records other types (see
    /// [`TableDefinition`]). Takes the writer slot (it reads the
    /// catalog): a transaction with a typed table is never blind.
    pub fn open_typed<K: KeyCodec, V: ValueCodec>(
        &self,
        def: &TableDefinition<'_, K, V>,
    ) -> Result<TypedTableMut<'_, K, V>> {
        let h = self.holding()?;
        let id = {
            let mut a = h.active.borrow_mut();
            record_types::<K, V>(&mut a, def.name)?
        };
        Ok(TypedTableMut {
            table: self.push_table(h, id),
            name: def.name.into(),
            types: PhantomData,
        })
    }
}

/// The key and value types table `name` records, if it records any for
/// the table of that name that `read` sees (a backup carries them over).
pub(super) fn recorded_types(read: &ReadTxn, name: &str) -> Result<Option<(String, String)>> {
    let Some(id) = read.table_id(name)? else {
        return Ok(None);
    };
    let Some(bytes) = read.get_full(&full_key(TYPES, name.as_bytes()))? else {
        return Ok(None);
    };
    Ok(TypeRecord::decode(&bytes)
        .filter(|t| t.id == id)
        .map(|t| (t.key, t.value)))
}

/// Record key and value types `types` for the existing table `name`, as a
/// typed open would have (a backup's copy of [`recorded_types`]).
pub(super) fn set_recorded_types(
    txn: &WriteTxn,
    name: &str,
    types: (String, String),
) -> Result<()> {
    let h = txn.holding()?;
    let mut a = h.active.borrow_mut();
    let id = a
        .table_id(name)?
        .ok_or_else(|| DbError::NoSuchTable(name.into()))?;
    let record = TypeRecord {
        id,
        key: types.0,
        value: types.1,
    }
    .encode();
    a.set_full(full_key(TYPES, name.as_bytes()), Some(Arc::from(record)))
}

/// Open (or create) table `name` in `a` as `<K, V>`: check its types,
/// record them if it has none. Its id.
fn record_types<K: KeyCodec, V: ValueCodec>(a: &mut Active, name: &str) -> Result<u32> {
    let types_key = full_key(TYPES, name.as_bytes());
    // Checked before anything changes: a mismatch creates nothing.
    if let Some(id) = a.table_id(name)? {
        let stored = a.get_full(&types_key)?;
        if check_types::<K, V>(a.path(), name, id, stored)? {
            return Ok(id);
        }
    }
    let id = a.open_id(name)?;
    let record = TypeRecord::of::<K, V>(id).encode();
    a.set_full(types_key, Some(Arc::from(record)))?;
    Ok(id)
}

// ----- typed tables -------------------------------------------------------

/// The encoding of key `k`.
fn key_bytes<K: KeyCodec>(k: &K::SelfType<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    K::encode(k, &mut out);
    out
}

/// A typed range's ends, encoded.
fn range_bytes<'k, K: KeyCodec + 'k>(
    range: &impl RangeBounds<K::SelfType<'k>>,
) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    (
        range.start_bound().map(|k| key_bytes::<K>(k)),
        range.end_bound().map(|k| key_bytes::<K>(k)),
    )
}

fn decode_key<K: KeyCodec>(table: &str, k: &Key) -> Result<K::Owned> {
    K::decode(k).map_err(|e| decode_error::<K>(table, "a key", e))
}

fn decode_value<V: ValueCodec>(table: &str, v: &Value) -> Result<V::Owned> {
    V::decode(v).map_err(|e| decode_error::<V>(table, "a value", e))
}

fn decode_error<T: ValueCodec>(table: &str, what: &'static str, e: DecodeError) -> DbError {
    DbError::Decode {
        table: table.into(),
        what,
        reason: format!("as {}: {}", T::type_name(), e.0).into(),
    }
}

/// A scan of a typed table: `(key, value)` pairs decoded, in key order
/// (`.rev()` for descending order, or both ends at once, as [`Iter`]).
pub struct TypedIter<'t, K: KeyCodec, V: ValueCodec> {
    inner: Iter<'t>,
    name: Arc<str>,
    types: PhantomData<fn() -> (K, V)>,
}

impl<K: KeyCodec, V: ValueCodec> TypedIter<'_, K, V> {
    fn decode(&self, kv: Result<(Key, Value)>) -> Result<(K::Owned, V::Owned)> {
        let (k, v) = kv?;
        Ok((
            decode_key::<K>(&self.name, &k)?,
            decode_value::<V>(&self.name, &v)?,
        ))
    }
}

impl<K: KeyCodec, V: ValueCodec> Iterator for TypedIter<'_, K, V> {
    type Item = Result<(K::Owned, V::Owned)>;
    fn next(&mut self) -> Option<Self::Item> {
        let kv = self.inner.next()?;
        Some(self.decode(kv))
    }
}

impl<K: KeyCodec, V: ValueCodec> DoubleEndedIterator for TypedIter<'_, K, V> {
    fn next_back(&mut self) -> Option<Self::Item> {
        let kv = self.inner.next_back()?;
        Some(self.decode(kv))
    }
}

impl<K: KeyCodec, V: ValueCodec> std::fmt::Debug for TypedIter<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypedIter")
            .field("table", &self.name)
            .finish_non_exhaustive()
    }
}

/// The read side of typed tables, for a byte table `table` of `name`.
macro_rules! typed_reads {
    () => {
        /// The value of `key`, decoded, if present.
        pub fn get<'k>(&self, key: impl Borrow<K::SelfType<'k>>) -> Result<Option<V::Owned>>
        where
            K: 'k,
        {
            match self.table.get(key_bytes::<K>(key.borrow()))? {
                Some(v) => decode_value::<V>(&self.name, &v).map(Some),
                None => Ok(None),
            }
        }

        /// Whether `key` is present.
        pub fn contains_key<'k>(&self, key: impl Borrow<K::SelfType<'k>>) -> Result<bool>
        where
            K: 'k,
        {
            self.table.contains_key(key_bytes::<K>(key.borrow()))
        }

        /// The entries with keys in `range` (`a..b`, `a..=b`, `a..`, `..`,
        /// a pair of `Bound`s, of the key type), in key order; `.rev()`
        /// for descending order.
        pub fn range<'k>(&self, range: impl RangeBounds<K::SelfType<'k>>) -> TypedIter<'t, K, V>
        where
            K: 'k,
        {
            self.typed(self.table.range(range_bytes::<K>(&range)))
        }

        /// Every entry, in key order; `.rev()` for descending order.
        pub fn iter(&self) -> TypedIter<'t, K, V> {
            self.typed(self.table.iter())
        }

        /// The entry with the smallest key, if any.
        pub fn first(&self) -> Result<Option<(K::Owned, V::Owned)>> {
            self.iter().next().transpose()
        }

        /// The entry with the largest key, if any.
        pub fn last(&self) -> Result<Option<(K::Owned, V::Owned)>> {
            self.iter().next_back().transpose()
        }

        /// How many entries the table holds. O(n): it counts them (a scan
        /// of the whole table, nothing decoded).
        pub fn len(&self) -> Result<u64> {
            count(self.table.iter())
        }

        /// Whether the table holds no entry (reads at most one).
        pub fn is_empty(&self) -> Result<bool> {
            self.table.is_empty()
        }

        fn typed(&self, inner: Iter<'t>) -> TypedIter<'t, K, V> {
            TypedIter {
                inner,
                name: Arc::clone(&self.name),
                types: PhantomData,
            }
        }
    };
}

/// A typed table seen by a read transaction ([`ReadTxn::open_typed`]).
pub struct TypedTable<'t, K: KeyCodec, V: ValueCodec> {
    table: Table<'t>,
    name: Arc<str>,
    types: PhantomData<fn() -> (K, V)>,
}

impl<'t, K: KeyCodec, V: ValueCodec> TypedTable<'t, K, V> {
    typed_reads!();
}

impl<K: KeyCodec, V: ValueCodec> std::fmt::Debug for TypedTable<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TypedTable({:?}{})",
            self.name,
            TableDefinition::<K, V>::types()
        )
    }
}

/// A typed table inside a write transaction ([`WriteTxn::open_typed`]).
/// Several may be open at once, typed or not.
pub struct TypedTableMut<'t, K: KeyCodec, V: ValueCodec> {
    table: TableMut<'t>,
    name: Arc<str>,
    types: PhantomData<fn() -> (K, V)>,
}

impl<K: KeyCodec, V: ValueCodec> std::fmt::Debug for TypedTableMut<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TypedTableMut({:?}{})",
            self.name,
            TableDefinition::<K, V>::types()
        )
    }
}

impl<'t, K: KeyCodec, V: ValueCodec> TypedTableMut<'t, K, V> {
    typed_reads!();

    /// Insert `key` with `value`, replacing any value it had.
    pub fn insert<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<()>
    where
        K: 'k,
        V: 'v,
    {
        let mut v = Vec::new();
        V::encode(value.borrow(), &mut v);
        self.table.insert(key_bytes::<K>(key.borrow()), v)
    }

    /// Remove `key`; returns whether it was present.
    pub fn remove<'k>(&mut self, key: impl Borrow<K::SelfType<'k>>) -> Result<bool>
    where
        K: 'k,
    {
        self.table.remove(key_bytes::<K>(key.borrow()))
    }

    /// Remove every entry with a key in `range`; returns how many there
    /// were. All or nothing (see [`TableMut::delete_range`]).
    pub fn delete_range<'k>(&mut self, range: impl RangeBounds<K::SelfType<'k>>) -> Result<u64>
    where
        K: 'k,
    {
        self.table.delete_range(range_bytes::<K>(&range))
    }

    /// Keep only the entries for which `keep(&key, &value)` is true (both
    /// decoded); returns how many were removed. All or nothing: an entry
    /// that does not decode is an error, and removes none.
    pub fn retain(&mut self, mut keep: impl FnMut(&K::Owned, &V::Owned) -> bool) -> Result<u64> {
        let name = Arc::clone(&self.name);
        let scan = self.table.iter();
        self.table.remove_where(scan, |k, v| {
            let (k, v) = (decode_key::<K>(&name, k)?, decode_value::<V>(&name, v)?);
            Ok(!keep(&k, &v))
        })
    }
}

#[cfg(test)]
#[path = "typed_tests.rs"]
mod tests;
