//! Commits that are durable and visible but not yet in the memtable.
//!
//! Why: a lone transaction of many puts (w3: 100 random puts) used to be
//! inserted into the memtable by the helper thread while the committer
//! wrote its record, and the commit waited for both. On these 2-vCPU VMs
//! the helper often woke late (an idle vCPU halts, and waking it takes
//! the hypervisor tens of µs), so the committer waited for the insert
//! after its write was durable (1,200 of 10,000 w3 commits in one `keel
//! bench store` run), and every commit paid the helper's wake-up and
//! sleep (docs/store-performance.md, "Commits published before their
//! insert"). Now such a commit, once durable, is published
//! as a [`Run`] — its puts, which readers search in key order above the
//! memtable — and returns; the helper inserts the run into the memtable
//! afterwards, off every commit's path, and then drops it from the view.
//!
//! Order: runs are inserted in LSN order, one at a time under
//! [`Unapplied::order`], by whichever thread drains them: the helper, or a
//! writer that needs the memtable complete (before it applies, replays or
//! freezes; see `Shared::drain_applies`). A run stays in the published
//! view until it is in the memtable, so every version at or below a
//! reader's snapshot is in a run the reader holds or in the memtable.

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use super::kept::Kept;
use super::layers::Layer;
use super::txn::Blind;
use super::view::Published;
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
    blind: Blind,
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
    fn apply(&self, layer: &Layer) {
        self.blind.apply_direct(layer, self.lsn);
    }
}

/// The runs published and not yet inserted, oldest first, each with the
/// memtable it goes into (the active one when it was committed: a freeze
/// drains them first, so that is still the active one when it is
/// inserted).
#[derive(Debug, Default)]
pub(crate) struct Unapplied {
    queue: Mutex<VecDeque<(Arc<Layer>, Arc<Run>)>>,
    /// Held while a run is taken and inserted: runs go in in LSN order.
    order: Mutex<()>,
    /// Runs queued and not yet inserted (read without a lock).
    count: AtomicUsize,
    /// The helper has been asked to drain and has not finished.
    pub posted: AtomicBool,
    /// Runs inserted, and the nanoseconds their inserts took.
    pub applied: AtomicU64,
    pub apply_ns: AtomicU64,
    /// Runs a committer inserted itself (too many were queued).
    pub by_committer: AtomicU64,
    /// Emptied blind transactions of inserted runs, their buffers kept
    /// for the next write transactions ([`Unapplied::spare_blind`]).
    spares: Kept<Blind>,
}

/// Runs published and not yet in the memtable past which a committer
/// inserts the oldest itself before its own, unless the helper is at it
/// (`Shared::write_then_publish_run`); twice as many, whoever is at it.
///
/// Why a share and not all of them: at 16, a committer finding them
/// waiting inserted all 16 and more while the helper was late (~1 ms on
/// its commit's path, 800 of 10,000 w3 commits inserted so in some runs),
/// or waited for the helper's whole batch.
pub(super) const MAX_UNAPPLIED_RUNS: usize = 32;

/// Emptied blind transactions kept for reuse, at most, of any size (up
/// to `Blind::clear_to_keep`'s bound).
const KEEP_SPARES: usize = 8;

/// More emptied blind transactions kept, if small (at most
/// [`SMALL_SPARE_BYTES`] of buffers each): as many as can be in flight
/// (runs queued for the memtable go up to twice `MAX_UNAPPLIED_RUNS`
/// before a committer inserts them all).
///
/// Why: with 8 kept, a committer found none whenever the helper fell
/// behind and its runs piled up, and grew a new transaction's buffers put
/// by put, some into memory the process had not touched: 565 of 10,000 w3
/// transactions in one run, 3 µs per transaction on the commit's path on
/// average (perf, 2026-11-26).
const KEEP_SMALL_SPARES: usize = 2 * MAX_UNAPPLIED_RUNS + 8;

/// See [`KEEP_SMALL_SPARES`]: 64 such spares hold at most 4 MiB.
const SMALL_SPARE_BYTES: usize = 64 << 10;

impl Unapplied {
    /// An empty blind transaction for a new write transaction: one whose
    /// run was inserted, buffers and all, when there is one.
    ///
    /// Why: a run's buffers are freed on the helper's thread, and the
    /// committer's next transaction grew new ones put by put (a chain of
    /// reallocations, some into memory the process had not touched, which
    /// costs 0.5–2 ms per MiB to fault in here): 3 % of the committer's
    /// samples on w3 (perf).
    pub(crate) fn spare_blind(&self) -> Blind {
        // Not `unwrap_or_default`: a new one's bound is not the default's.
        match self.spares.take_oldest() {
            Some(b) => b,
            None => Blind::new(),
        }
    }

    /// Keep `run`'s blind transaction for [`Unapplied::spare_blind`], if
    /// nobody else holds the run (a reader may) and its buffers are not
    /// too large to keep.
    fn recycle(&self, run: Arc<Run>) {
        let Some(run) = Arc::into_inner(run) else {
            return;
        };
        self.keep_spare(run.blind);
    }

    /// Keep `blind` (committed, its changes in the memtable) for
    /// [`Unapplied::spare_blind`], if its buffers are not too large to
    /// keep.
    pub(crate) fn keep_spare(&self, mut blind: Blind) {
        if !blind.clear_to_keep() {
            return;
        }
        let small = blind.held_bytes() <= SMALL_SPARE_BYTES;
        let max = if small {
            KEEP_SMALL_SPARES
        } else {
            KEEP_SPARES
        };
        self.spares.keep(blind, max);
    }

    /// Runs not yet inserted.
    pub(crate) fn len(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    pub(crate) fn push(&self, layer: Arc<Layer>, run: Arc<Run>) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.push_back((layer, run));
        self.count.fetch_add(1, Ordering::Release);
    }

    /// Insert every queued run into its memtable, in order, dropping each
    /// from `published`'s view once it is in. Returns how many this call
    /// inserted.
    pub(crate) fn drain(&self, published: &Published) -> u64 {
        if self.len() == 0 {
            return 0;
        }
        let order = self.order.lock().unwrap_or_else(|e| e.into_inner());
        self.insert_while(published, order, |_| true)
    }

    /// Insert the oldest runs until at most `keep` are queued, unless
    /// another thread is inserting them (it goes on until none are left):
    /// a committer past the soft bound takes a share, but never waits for
    /// the helper's batch. Returns how many this call inserted.
    pub(crate) fn drain_to(&self, published: &Published, keep: usize) -> u64 {
        if self.len() <= keep {
            return 0;
        }
        let order = match self.order.try_lock() {
            Ok(o) => o,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return 0,
        };
        self.insert_while(published, order, |queued| queued > keep)
    }

    /// Insert the oldest run while `go(runs queued)` says so.
    fn insert_while(
        &self,
        published: &Published,
        _order: MutexGuard<'_, ()>,
        go: impl Fn(usize) -> bool,
    ) -> u64 {
        let mut inserted = 0;
        loop {
            let next = {
                let q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
                if !go(q.len()) {
                    return inserted;
                }
                q.front().cloned()
            };
            let Some((layer, run)) = next else {
                return inserted;
            };
            inserted += 1;
            let started = Instant::now();
            run.apply(&layer);
            let ns = started.elapsed().as_nanos().try_into().unwrap_or(u64::MAX);
            self.apply_ns.fetch_add(ns, Ordering::Relaxed);
            self.applied.fetch_add(1, Ordering::Relaxed);
            published.unpublish_run(run.lsn);
            let queued = self
                .queue
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop_front();
            self.count.fetch_sub(1, Ordering::Release);
            drop(queued);
            self.recycle(run);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::ops::Bound;

    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    use super::Run;
    use crate::db::txn::Blind;

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
