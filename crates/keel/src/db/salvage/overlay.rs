//! The journal's records after the checkpoint, applied in LSN order on
//! top of the data file: each key's last value or its removal, and the
//! tables dropped. And the changes of records salvage could not apply,
//! in words.

use std::collections::{BTreeMap, BTreeSet};

use super::super::read::{CATALOG, PREFIX};
use super::super::record::Op;
use super::report::{name_or_id, table_id, LostChange, LostChangeKind};
use crate::journal::Lsn;

/// What the journal's records changed, to be merged over the tree.
#[derive(Debug, Default)]
pub(super) struct Overlay {
    /// Each full key a record set (`Some`) or removed (`None`), as the last
    /// record left it.
    pub keys: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Tables whose keys a record dropped: the tree's keys of these tables
    /// are gone (ids are never reused, so no later key of theirs exists
    /// but those in `keys`).
    pub dropped: BTreeSet<u32>,
}

impl Overlay {
    /// Apply one record's changes, in their order.
    pub(super) fn apply(&mut self, ops: &[Op<'_>]) {
        for op in ops {
            match *op {
                Op::Put(k, v) => {
                    self.keys.insert(k.to_vec(), Some(v.to_vec()));
                }
                Op::PutShared(k, v) => {
                    self.keys.insert(k.to_vec(), Some(v.to_vec()));
                }
                Op::Delete(k) => {
                    self.keys.insert(k.to_vec(), None);
                }
                Op::DropTable(id) => {
                    let mut from = self.keys.split_off(&id.to_be_bytes()[..]);
                    if let Some(next) = id.checked_add(1) {
                        let mut after = from.split_off(&next.to_be_bytes()[..]);
                        self.keys.append(&mut after);
                    }
                    drop(from);
                    self.dropped.insert(id);
                }
            }
        }
    }

    /// Whether the tree's entry under `key` is gone: its table dropped.
    /// (`keys` decides first for a key it holds.)
    pub(super) fn hides(&self, key: &[u8]) -> bool {
        table_id(key).is_some_and(|id| self.dropped.contains(&id))
    }
}

/// The changes of a lost record (LSN `lsn`), in words: a catalog entry
/// is a table created or dropped (the next id's entry is left out, and so
/// is a drop of the table's keys, which comes with its name's removal);
/// other puts and deletes name their table. Table names the record
/// creates are added to `names`.
pub(super) fn describe(
    ops: &[Op<'_>],
    lsn: Lsn,
    names: &mut BTreeMap<u32, String>,
) -> Vec<LostChange> {
    let mut out = Vec::new();
    for op in ops {
        let (key, kind) = match *op {
            Op::Put(k, _) => (k, LostChangeKind::Put),
            Op::PutShared(k, v) => {
                out.extend(describe(&[Op::Put(k, &v[..])], lsn, names));
                continue;
            }
            Op::Delete(k) => (k, LostChangeKind::Delete),
            Op::DropTable(_) => continue,
        };
        let Some(id) = table_id(key) else { continue };
        let user = &key[PREFIX..];
        let change = if id == CATALOG {
            if user.is_empty() {
                continue;
            }
            let name = String::from_utf8_lossy(user).into_owned();
            if let (LostChangeKind::Put, Op::Put(_, v)) = (kind, *op) {
                if let Ok(b) = <[u8; PREFIX]>::try_from(v) {
                    names.entry(u32::from_be_bytes(b)).or_insert(name.clone());
                }
            }
            let kind = match kind {
                LostChangeKind::Put => LostChangeKind::CreateTable,
                _ => LostChangeKind::DropTable,
            };
            LostChange {
                lsn,
                kind,
                table: name,
                key: Vec::new(),
            }
        } else {
            LostChange {
                lsn,
                kind,
                table: name_or_id(names, id),
                key: user.to_vec(),
            }
        };
        out.push(change);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full(id: u32, key: &[u8]) -> Vec<u8> {
        [&id.to_be_bytes()[..], key].concat()
    }

    #[test]
    fn a_drop_removes_the_tables_keys_and_hides_the_trees() {
        let (a, b, c) = (full(1, b"x"), full(2, b"y"), full(3, b"z"));
        let mut o = Overlay::default();
        o.apply(&[Op::Put(&a, b"1"), Op::Put(&b, b"2"), Op::Put(&c, b"3")]);
        o.apply(&[Op::DropTable(2), Op::Delete(&a)]);
        assert_eq!(o.keys.get(&a), Some(&None));
        assert_eq!(o.keys.get(&b), None);
        assert_eq!(o.keys.get(&c), Some(&Some(b"3".to_vec())));
        assert!(o.hides(&full(2, b"other")));
        assert!(!o.hides(&full(3, b"other")));
        o.apply(&[
            Op::Put(&full(u32::MAX, b"k"), b"v"),
            Op::DropTable(u32::MAX),
        ]);
        assert!(o.keys.keys().all(|k| table_id(k) != Some(u32::MAX)));
    }

    #[test]
    fn lost_changes_name_their_tables() {
        let mut names = BTreeMap::new();
        let create = full(0, b"users");
        let next = full(0, b"");
        let put = full(7, b"alice");
        let ops = [
            Op::Put(&next, &[0, 0, 0, 8]),
            Op::Put(&create, &[0, 0, 0, 7]),
            Op::Put(&put, b"admin"),
            Op::Delete(&full(9, b"bob")),
            Op::DropTable(9),
        ];
        let got = describe(&ops, 12, &mut names);
        let kinds: Vec<_> = got.iter().map(|c| (c.kind, c.table.as_str())).collect();
        assert_eq!(
            kinds,
            [
                (LostChangeKind::CreateTable, "users"),
                (LostChangeKind::Put, "users"),
                (LostChangeKind::Delete, "table #9"),
            ]
        );
        assert_eq!(got[1].key, b"alice");
    }
}
