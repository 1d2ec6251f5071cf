//! Locking, threads and panics, for every file of the store: a mutex
//! taken whatever a panic left it, this thread's id, what a panic said.

use std::any::Any;
use std::sync::{Mutex, MutexGuard};
use std::thread::ThreadId;

/// Recover from a poisoned mutex: every critical section here leaves its
/// state consistent before anything can panic, and a panic elsewhere must
/// not take the store down with it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

thread_local! {
    static THIS_THREAD: ThreadId = std::thread::current().id();
}

/// This thread's id; after the first call, a read of a thread-local.
pub(crate) fn this_thread() -> ThreadId {
    THIS_THREAD
        .try_with(|t| *t)
        .unwrap_or_else(|_| std::thread::current().id())
}

/// What a panic said, or "a panic".
pub(crate) fn panic_message(p: &(dyn Any + Send)) -> &str {
    p.downcast_ref::<&str>()
        .copied()
        .or_else(|| p.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic")
}
