//! A futex word threads sleep on until it changes, and how many sleep
//! there (so that a ring with nobody to wake costs no system call).
//!
//! Why not `std::thread::park`: a park is one thread's; waking a group of
//! sleepers costs a system call each. Threads that wait for the same
//! event (a journal batch, a group of combined commits) sleep on one
//! bell, and one system call wakes them all. On these 2-vCPU VMs a
//! system call and a wake-up are a large part of a small commit's cost
//! (docs/store-performance.md, "Blind transactions commit together").
//!
//! Waiters read the word, look at what they wait for, and sleep only if
//! the word still holds what they read: whoever changes what they wait
//! for rings *after* changing it, so a wake-up is never lost. A sleeper
//! may also wake for nothing (another group's ring on a shared bell, a
//! signal): it looks again.

use std::sync::atomic::{AtomicU32, Ordering};

use rustix::thread::futex;

/// One cache line each: sleepers on neighbouring bells do not share lines.
#[derive(Debug, Default)]
#[repr(align(64))]
pub(crate) struct Bell {
    word: AtomicU32,
    sleepers: AtomicU32,
}

impl Bell {
    /// The word's value, to pass to [`Bell::sleep`]: read it before
    /// looking at what the wait is for.
    pub(crate) fn seen(&self) -> u32 {
        self.word.load(Ordering::SeqCst)
    }

    /// Sleep until the word changes from `seen` (or a spurious wake-up).
    pub(crate) fn sleep(&self, seen: u32) {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        // EAGAIN (the word changed) and EINTR both mean "look again".
        let _ = futex::wait(&self.word, futex::Flags::PRIVATE, seen, None);
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Change the word and wake every sleeper.
    pub(crate) fn wake_all(&self) {
        self.word.fetch_add(1, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _ = futex::wake(&self.word, futex::Flags::PRIVATE, i32::MAX as u32);
        }
    }

    /// Change the word and wake one sleeper; whether one was woken.
    pub(crate) fn wake_one(&self) -> bool {
        self.word.fetch_add(1, Ordering::SeqCst);
        self.sleepers.load(Ordering::SeqCst) > 0
            && futex::wake(&self.word, futex::Flags::PRIVATE, 1).unwrap_or(0) > 0
    }
}
