//! Counters that many threads bump without sharing a cache line: one
//! padded cell per thread (threads beyond [`STRIPES`] share cells), summed
//! when read.
//!
//! A single `AtomicU64` that every reader increments is one cache line
//! that every core writes: on a read path that is otherwise free of
//! shared writes it is the whole cost of scaling (each increment waits for
//! the line to come back from the core that wrote it last).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;

/// Cells per counter set: threads get cells in turn, so the first
/// `STRIPES` threads of a process each write a cell of their own.
pub(crate) const STRIPES: usize = 64;

/// The cell index of this thread, given once per thread.
pub(crate) fn stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static MINE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    MINE.with(|m| *m)
}

/// `N` counters, striped by thread.
pub(crate) struct Striped<const N: usize> {
    cells: Box<[CachePadded<[AtomicU64; N]>]>,
}

impl<const N: usize> std::fmt::Debug for Striped<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Striped").field(&self.sum()).finish()
    }
}

impl<const N: usize> Default for Striped<N> {
    fn default() -> Self {
        Striped {
            cells: (0..STRIPES)
                .map(|_| CachePadded::new(std::array::from_fn(|_| AtomicU64::new(0))))
                .collect(),
        }
    }
}

impl<const N: usize> Striped<N> {
    /// Add `n` to counter `i` (a read-modify-write of this thread's own
    /// cell: no other thread writes it unless more than [`STRIPES`]
    /// threads count).
    #[inline]
    pub(crate) fn add(&self, i: usize, n: u64) {
        self.cells[stripe()][i].fetch_add(n, Ordering::Relaxed);
    }

    /// Every counter's total.
    pub(crate) fn sum(&self) -> [u64; N] {
        let mut out = [0; N];
        for cell in self.cells.iter() {
            for (o, c) in out.iter_mut().zip(cell.iter()) {
                *o += c.load(Ordering::Relaxed);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_every_threads_counts() {
        let s = Striped::<2>::default();
        std::thread::scope(|scope| {
            for _ in 0..(STRIPES + 8) {
                scope.spawn(|| {
                    for _ in 0..1000 {
                        s.add(0, 1);
                    }
                    s.add(1, 5);
                });
            }
        });
        assert_eq!(
            s.sum(),
            [(STRIPES as u64 + 8) * 1000, (STRIPES as u64 + 8) * 5]
        );
    }
}
