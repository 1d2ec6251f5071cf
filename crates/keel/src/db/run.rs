//! A committed blind transaction's puts as readers search them, in key
//! order, while they are not yet in the memtable (see `pending.rs`).

use std::ops::Bound;
use std::sync::{Arc, OnceLock};

use super::blind::Blind;
use super::layers::Layer;
use crate::journal::Lsn;

/// Runs published together, oldest first.
pub(crate) type Runs = Arc<Vec<Arc<Run>>>;

/// One committed blind transaction's puts: searched by readers in key
/// order (a key put twice keeps its later value), inserted into the
/// memtable in the order they were made.
///
/// The sorted index is built by the first reader that needs it, not by
/// the committer: most runs are inserted before anyone reads them (w3
/// has no readers), and sorting on the commit's path cost the committer
/// a few µs per transaction of 100 puts.
#[derive(Debug)]
pub(crate) struct Run {
    pub lsn: Lsn,
    pub(super) blind: Blind,
    sorted: OnceLock<Sorted>,
}

/// A run's keys in order: where each full key (table id, then key) is
/// in the blind transaction's bytes, which hold them already (its
/// journal record).
#[derive(Debug)]
struct Sorted {
    /// In key order, each key once (its last put).
    slots: Vec<Slot>,
}

/// A key of a run: its first [`HEAD_BYTES`] bytes as a number (compared
/// first: one integer comparison instead of a `memcmp` call for most
/// pairs), where it is in the blind transaction's bytes, its length, and
/// the put it comes from.
///
/// Why: sorting a w3 transaction's 100 keys with `memcmp` alone was a
/// quarter of the committing thread's samples (perf, 2026-11-26), on the
/// commit's path.
#[derive(Debug, Clone, Copy)]
struct Slot {
    head: u128,
    at: u32,
    len: u32,
    put: u32,
}

/// Key bytes in a [`Slot`]'s head.
const HEAD_BYTES: usize = 16;

/// The bytes of `slot`'s key in `keys`.
fn slot_key<'k>(keys: &'k [u8], slot: &Slot) -> &'k [u8] {
    &keys[slot.at as usize..(slot.at + slot.len) as usize]
}

/// `key`'s first [`HEAD_BYTES`] bytes, zero-padded, as a big-endian
/// number: heads that differ order their keys as the keys' bytes do (a
/// key shorter than the head sorts before a longer one it starts).
fn head(key: &[u8]) -> u128 {
    let mut b = [0u8; HEAD_BYTES];
    let n = key.len().min(HEAD_BYTES);
    b[..n].copy_from_slice(&key[..n]);
    u128::from_be_bytes(b)
}

impl Sorted {
    /// The index of `blind`'s puts (their tables' ids set in its bytes by
    /// `Blind::encode_direct`).
    fn of(blind: &Blind) -> Sorted {
        let n = blind.len();
        let keys = blind.bytes();
        let mut slots = Vec::with_capacity(n);
        for i in 0..n {
            let range = blind.full_key_range(i);
            // Keys are at most a page long and a record at most a segment:
            // both fit in 32 bits (checked, not assumed).
            let at = u32::try_from(range.start).expect("a record fits 4 GiB");
            let len = u32::try_from(range.len()).expect("as above");
            let put = u32::try_from(i).expect("as above");
            let head = head(&keys[range]);
            slots.push(Slot { head, at, len, put });
        }
        let key = |s: &Slot| slot_key(keys, s);
        // By key, then in the order the puts were made.
        slots.sort_unstable_by(|a, b| {
            a.head
                .cmp(&b.head)
                .then_with(|| key(a).cmp(key(b)))
                .then(a.put.cmp(&b.put))
        });
        // Keep the last put of each key.
        let mut kept: Vec<Slot> = Vec::with_capacity(slots.len());
        for e in slots {
            match kept.last_mut() {
                Some(last) if last.head == e.head && key(last) == key(&e) => *last = e,
                _ => kept.push(e),
            }
        }
        Sorted { slots: kept }
    }

    /// The `i`th key, in `keys` (the blind transaction's bytes).
    fn key<'k>(&self, keys: &'k [u8], i: usize) -> &'k [u8] {
        slot_key(keys, &self.slots[i])
    }

    /// How many of the keys (in `keys`, the blind transaction's bytes)
    /// are below `b` (or equal to it, with `inclusive`).
    fn count_below(&self, keys: &[u8], b: &[u8], inclusive: bool) -> usize {
        let h = head(b);
        self.slots.partition_point(|e| match e.head.cmp(&h) {
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Greater => false,
            std::cmp::Ordering::Equal => {
                let k = slot_key(keys, e);
                k < b || (inclusive && k == b)
            }
        })
    }
}

impl Run {
    /// The run of `blind`'s puts (its tables resolved by
    /// `Blind::encode_direct`), committed at `lsn`. Costs nothing: see
    /// [`Run`].
    pub(crate) fn new(blind: Blind, lsn: Lsn) -> Run {
        Run {
            lsn,
            blind,
            sorted: OnceLock::new(),
        }
    }

    fn sorted(&self) -> &Sorted {
        self.sorted.get_or_init(|| Sorted::of(&self.blind))
    }

    fn value(&self, i: usize) -> &[u8] {
        self.blind.put(self.sorted().slots[i].put as usize).2
    }

    /// The value this run puts for `key` (a full key), if it puts one.
    pub(crate) fn get(&self, key: &[u8]) -> Option<&[u8]> {
        let sorted = self.sorted();
        let keys = self.blind.bytes();
        let i = sorted.count_below(keys, key, false);
        (i < sorted.slots.len() && sorted.key(keys, i) == key).then(|| self.value(i))
    }

    /// The run's puts from `start` to `end`, in key order.
    pub(crate) fn range<'a>(
        &'a self,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
    ) -> impl DoubleEndedIterator<Item = (&'a [u8], Option<&'a [u8]>)> + 'a {
        let sorted = self.sorted();
        let keys = self.blind.bytes();
        let from = match start {
            Bound::Unbounded => 0,
            Bound::Included(s) => sorted.count_below(keys, s, false),
            Bound::Excluded(s) => sorted.count_below(keys, s, true),
        };
        let to = match end {
            Bound::Unbounded => sorted.slots.len(),
            Bound::Included(e) => sorted.count_below(keys, e, true),
            Bound::Excluded(e) => sorted.count_below(keys, e, false),
        };
        (from..to.max(from)).map(move |i| (sorted.key(keys, i), Some(self.value(i))))
    }

    /// Insert the run's puts into `layer`'s memtable under its LSN.
    pub(super) fn apply(&self, layer: &Layer) {
        self.blind.apply_direct(layer, self.lsn);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::ops::Bound;

    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    use super::Run;
    use crate::db::blind::Blind;

    /// Keys from a small alphabet with zero bytes, of 0 to 24 bytes, so
    /// that heads tie, keys are prefixes of others and some are put twice.
    fn random_key(rng: &mut SmallRng) -> Vec<u8> {
        let len = rng.random_range(0..24);
        (0..len)
            .map(|_| [0u8, 1, 0xff][rng.random_range(0..3)])
            .collect()
    }

    #[test]
    fn a_run_reads_like_a_map_of_its_last_puts() {
        let mut rng = SmallRng::seed_from_u64(7);
        for _ in 0..300 {
            let n = rng.random_range(1..60);
            let puts: Vec<(usize, Vec<u8>, Vec<u8>)> = (0..n)
                .map(|i| {
                    (
                        rng.random_range(0..2),
                        random_key(&mut rng),
                        vec![i as u8; 3],
                    )
                })
                .collect();
            let ids = vec![7u32, 0x0100_0000];
            let mut model = BTreeMap::new();
            for (slot, k, v) in &puts {
                let mut full = ids[*slot].to_be_bytes().to_vec();
                full.extend_from_slice(k);
                model.insert(full, v.clone());
            }
            let refs: Vec<(usize, &[u8], &[u8])> =
                puts.iter().map(|(s, k, v)| (*s, &k[..], &v[..])).collect();
            let run = Run::new(Blind::of_puts(&refs, &ids), 1);
            let all: Vec<(Vec<u8>, Vec<u8>)> = run
                .range(Bound::Unbounded, Bound::Unbounded)
                .map(|(k, v)| (k.to_vec(), v.expect("a put").to_vec()))
                .collect();
            let want: Vec<(Vec<u8>, Vec<u8>)> = model.clone().into_iter().collect();
            assert_eq!(all, want);
            for _ in 0..20 {
                let mut probe = ids[rng.random_range(0..2)].to_be_bytes().to_vec();
                probe.extend(random_key(&mut rng));
                assert_eq!(run.get(&probe), model.get(&probe).map(Vec::as_slice));
                let mut other = ids[rng.random_range(0..2)].to_be_bytes().to_vec();
                other.extend(random_key(&mut rng));
                let (lo, hi) = if probe <= other {
                    (probe, other)
                } else {
                    (other, probe)
                };
                let bounds = [
                    (Bound::Included(&lo[..]), Bound::Excluded(&hi[..])),
                    (Bound::Excluded(&lo[..]), Bound::Included(&hi[..])),
                    (Bound::Unbounded, Bound::Included(&hi[..])),
                    (Bound::Excluded(&lo[..]), Bound::Unbounded),
                ];
                for (s, e) in bounds {
                    let got: Vec<&[u8]> = run.range(s, e).map(|(k, _)| k).collect();
                    let want: Vec<&[u8]> = model
                        .range::<[u8], _>((s, e))
                        .map(|(k, _)| &k[..])
                        .collect();
                    assert_eq!(got, want, "{s:?}..{e:?}");
                }
                // Reversed, or empty at one key: nothing, and no panic.
                if lo != hi {
                    assert_eq!(
                        run.range(Bound::Included(&hi[..]), Bound::Excluded(&lo[..]))
                            .count(),
                        0
                    );
                    assert_eq!(
                        run.range(Bound::Excluded(&hi[..]), Bound::Included(&lo[..]))
                            .count(),
                        0
                    );
                }
                assert_eq!(
                    run.range(Bound::Excluded(&lo[..]), Bound::Excluded(&lo[..]))
                        .count(),
                    0
                );
                assert_eq!(
                    run.range(Bound::Included(&lo[..]), Bound::Excluded(&lo[..]))
                        .count(),
                    0
                );
            }
        }
    }
}
