//! The journal record of a transaction: its changes, in the order they are
//! applied. `docs/format.md` ("The store's journal records") is the
//! specification.
//!
//! Keys here are full tree keys: the 4-byte big-endian table id, then the
//! user's key. Table 0 is the catalog (see `txn.rs`).

use std::sync::Arc;

use super::item::PREFIX;
use crate::le::{get_u16, get_u32, put_u16, put_u32};

/// The first byte of a transaction record.
pub(crate) const RECORD_TXN: u8 = 1;
const OP_PUT: u8 = 1;
const OP_DELETE: u8 = 2;
const OP_DROP_TABLE: u8 = 3;

/// Bytes a put adds to a record besides its key and value.
pub(crate) const PUT_FIXED_BYTES: usize = 1 + 2 + 4;
/// Bytes a delete adds besides its key.
pub(crate) const DELETE_FIXED_BYTES: usize = 1 + 2;
/// Bytes a dropped table adds.
pub(crate) const DROP_BYTES: usize = 1 + 4;

/// One change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op<'a> {
    Put(&'a [u8], &'a [u8]),
    /// A put whose value a live transaction holds shared: encoded as a
    /// [`Op::Put`]; a value large enough for overflow pages becomes the
    /// tree's without a copy.
    PutShared(&'a [u8], &'a Arc<[u8]>),
    Delete(&'a [u8]),
    /// Remove every key of the table (its id prefix).
    DropTable(u32),
}

impl Op<'_> {
    pub(crate) fn encoded_bytes(&self) -> usize {
        match self {
            Op::Put(k, v) => PUT_FIXED_BYTES + k.len() + v.len(),
            Op::PutShared(k, v) => PUT_FIXED_BYTES + k.len() + v.len(),
            Op::Delete(k) => DELETE_FIXED_BYTES + k.len(),
            Op::DropTable(_) => DROP_BYTES,
        }
    }
}

/// Append `op` to a record being built (which starts with [`RECORD_TXN`]).
/// Every field is appended (not zero-filled, then copied): values may be
/// large.
pub(crate) fn push(out: &mut Vec<u8>, op: Op<'_>) {
    match op {
        Op::Put(k, v) => push_put(out, k, v),
        Op::PutShared(k, v) => push_put(out, k, v),
        Op::Delete(k) => {
            out.push(OP_DELETE);
            out.extend_from_slice(&(k.len() as u16).to_le_bytes());
            out.extend_from_slice(k);
        }
        Op::DropTable(id) => {
            out.push(OP_DROP_TABLE);
            out.extend_from_slice(&id.to_le_bytes());
        }
    }
}

fn push_put(out: &mut Vec<u8>, k: &[u8], v: &[u8]) {
    push_put_head(out, k, v.len());
    out.extend_from_slice(v);
}

/// Append a put's fixed fields and its key: the put's `value_len` bytes of
/// value must follow (appended by the caller, or gathered at submit).
pub(crate) fn push_put_head(out: &mut Vec<u8>, k: &[u8], value_len: usize) {
    push_put_fixed(out, k.len(), value_len);
    out.extend_from_slice(k);
}

/// Append a put's fixed fields: its tag, its full key's and its value's
/// lengths.
fn push_put_fixed(out: &mut Vec<u8>, key_len: usize, value_len: usize) {
    let mut fixed = [0u8; PUT_FIXED_BYTES];
    fixed[0] = OP_PUT;
    put_u16(&mut fixed, 1, key_len as u16);
    put_u32(&mut fixed, 3, value_len as u32);
    out.extend_from_slice(&fixed);
}

/// Append a put whose table is not resolved yet: its fixed fields, a
/// table id of zeros (set with [`set_put_table`] once known) and `key`,
/// then — by the caller, or gathered at submit — its `value_len` bytes of
/// value. The full key is at [`PUT_FIXED_BYTES`] from the put's start.
pub(crate) fn push_put_head_unresolved(out: &mut Vec<u8>, key: &[u8], value_len: usize) {
    push_put_fixed(out, PREFIX + key.len(), value_len);
    out.extend_from_slice(&[0; PREFIX]);
    out.extend_from_slice(key);
}

/// Set the table id of the put that starts at `at` in `record` (made by
/// [`push_put_head_unresolved`]).
pub(crate) fn set_put_table(record: &mut [u8], at: usize, id: u32) {
    record[at + PUT_FIXED_BYTES..at + PUT_FIXED_BYTES + PREFIX].copy_from_slice(&id.to_be_bytes());
}

/// Why a record did not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadRecord {
    pub at: usize,
    pub reason: &'static str,
}

/// Decode a record into its changes. Every length is checked against the
/// bytes present and against `max_key` (the tree's key limit).
pub(crate) fn decode(bytes: &[u8], max_key: usize) -> Result<Vec<Op<'_>>, BadRecord> {
    let bad = |at, reason| Err(BadRecord { at, reason });
    match bytes.first() {
        Some(&RECORD_TXN) => {}
        Some(_) => return bad(0, "unknown record kind"),
        None => return bad(0, "empty record"),
    }
    let mut ops = Vec::new();
    let mut at = 1;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let op = match rest[0] {
            OP_PUT if rest.len() >= PUT_FIXED_BYTES => {
                let k = get_u16(rest, 1) as usize;
                let v = get_u32(rest, 3) as usize;
                if k > max_key {
                    return bad(at, "a key longer than the key limit");
                }
                if rest.len() - PUT_FIXED_BYTES < k || rest.len() - PUT_FIXED_BYTES - k < v {
                    return bad(at, "a put running past the record's end");
                }
                let key = &rest[PUT_FIXED_BYTES..PUT_FIXED_BYTES + k];
                Op::Put(key, &rest[PUT_FIXED_BYTES + k..PUT_FIXED_BYTES + k + v])
            }
            OP_DELETE if rest.len() >= DELETE_FIXED_BYTES => {
                let k = get_u16(rest, 1) as usize;
                if k > max_key {
                    return bad(at, "a key longer than the key limit");
                }
                if rest.len() - DELETE_FIXED_BYTES < k {
                    return bad(at, "a delete running past the record's end");
                }
                Op::Delete(&rest[DELETE_FIXED_BYTES..DELETE_FIXED_BYTES + k])
            }
            OP_DROP_TABLE if rest.len() >= DROP_BYTES => Op::DropTable(get_u32(rest, 1)),
            OP_PUT | OP_DELETE | OP_DROP_TABLE => return bad(at, "a change cut short"),
            _ => return bad(at, "unknown change type"),
        };
        at += op.encoded_bytes();
        ops.push(op);
    }
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_round_trip() {
        let ops = [
            Op::DropTable(7),
            Op::Put(b"\0\0\0\x01key", b"value"),
            Op::Delete(b"\0\0\0\x01gone"),
            Op::Put(b"\0\0\0\x02", b""),
        ];
        let mut rec = vec![RECORD_TXN];
        for op in ops {
            push(&mut rec, op);
        }
        assert_eq!(
            rec.len(),
            1 + ops.iter().map(Op::encoded_bytes).sum::<usize>()
        );
        assert_eq!(decode(&rec, 1000).unwrap(), ops);
    }

    #[test]
    fn every_cut_and_every_bad_byte_is_caught_without_panic() {
        let mut rec = vec![RECORD_TXN];
        push(&mut rec, Op::Put(b"abcd", b"xyz"));
        push(&mut rec, Op::Delete(b"abcdef"));
        push(&mut rec, Op::DropTable(3));
        for cut in 0..rec.len() {
            // A cut at an op boundary is a shorter valid record.
            let ok = decode(&rec[..cut], 1000).is_ok();
            assert_eq!(ok, [1, 15, 24].contains(&cut), "cut {cut}");
        }
        for i in 0..rec.len() {
            for b in [0u8, 4, 0xff] {
                let mut r = rec.clone();
                r[i] = b;
                let _ = decode(&r, 1000);
            }
        }
        assert!(decode(&rec, 3).is_err(), "key limit");
    }
}
