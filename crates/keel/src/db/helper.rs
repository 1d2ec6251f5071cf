//! The commit helper: one more thread for the writer's CPU work.
//!
//! On a store with one committer, a commit keeps one CPU busy applying its
//! changes to the tree while the journal's write waits for the disk, and
//! the other CPU idle. The helper takes part in large applies
//! ([`Fork`], see `btree/batch.rs`), and frees the nodes of replaced trees
//! ([`Helper::dispose`]) after its share of the next apply, so that
//! neither sits on a committer's path.
//!
//! It also runs chores nobody waits for (faulting in the memtable's next
//! chunks); a long chore pauses often ([`Pause::run_posted`]) to take a
//! commit's work first.
//!
//! A committer never waits for the helper to wake up: it posts the work
//! and starts on it at once; if the helper has not taken the work by the
//! time the committer has done all of it, the committer takes the post
//! back and goes on. It waits only for a helper that is in the middle of
//! a share.
//!
//! Written here rather than with a thread pool crate: the pools at hand
//! (rayon) block the calling thread while pool threads run the work when
//! called from outside the pool, so a commit would pay a wake-up on both
//! sides.
//!
//! Unsafe code: the one lifetime erasure that lets a thread which outlives
//! a commit run a closure borrowing the commit's changes (as scoped thread
//! pools do); the module's protocol keeps the borrow alive for every use.
#![allow(unsafe_code)]

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use super::placement::Placement;
use crate::btree::Fork;

/// Replaced trees kept for the helper before a commit wakes it only to
/// free them.
const MAX_GARBAGE: usize = 8;

/// Work posted for the helper: a borrowed closure whose lifetime was
/// erased (see `Helper::fork` for why it stays valid).
struct Job(*const (dyn Fn() + Sync + 'static));

// SAFETY: the closure is `Sync`, so calling it from another thread through
// a shared reference is sound; the pointer is only dereferenced while the
// poster waits for the call to end (see `Helper::fork`).
unsafe impl Send for Job {}

/// Work to run soon on the helper's thread (see [`Helper::chore`]).
type Chore = Box<dyn FnOnce(&Pause<'_>) + Send>;

#[derive(Default)]
struct State {
    /// Posted, not yet taken.
    job: Option<Job>,
    /// The helper is running a job.
    running: bool,
    /// A job panicked in the helper: the poster panics too.
    panicked: Option<Box<dyn Any + Send>>,
    /// Values to drop on the helper's thread.
    garbage: Vec<Box<dyn Send>>,
    /// Work to run soon, nobody waiting for it.
    chores: Vec<Chore>,
    stop: bool,
}

struct Inner {
    state: Mutex<State>,
    /// `state.job` is set (read without the lock by a chore's [`Pause`]).
    posted: AtomicBool,
    /// `state.chores` is not empty (read as `posted`).
    chores_posted: AtomicBool,
    /// The helper sleeps here.
    wake: Condvar,
    /// A poster waits here for the helper's share to end.
    done: Condvar,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One helper thread (see the module doc).
pub(crate) struct Helper {
    inner: Arc<Inner>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Helper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Helper").finish_non_exhaustive()
    }
}

impl Helper {
    /// Start the helper thread, `nice` levels below this one's priority
    /// (see [`lower_priority`]).
    pub(crate) fn start(nice: u8, placement: Placement) -> std::io::Result<Helper> {
        let inner = Arc::new(Inner {
            state: Mutex::default(),
            posted: AtomicBool::new(false),
            chores_posted: AtomicBool::new(false),
            wake: Condvar::new(),
            done: Condvar::new(),
        });
        let theirs = Arc::clone(&inner);
        let thread = std::thread::Builder::new()
            .name("keel-helper".into())
            .spawn(move || {
                placement.enter();
                lower_priority(nice);
                run(&theirs)
            })?;
        Ok(Helper {
            inner,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Drop `value` on the helper's thread, after its next share of work
    /// (or now, if it has been kept waiting long).
    pub(crate) fn dispose<T: Send + 'static>(&self, value: T) {
        let mut s = self.inner.lock();
        if s.stop {
            drop(s);
            drop(value);
            return;
        }
        s.garbage.push(Box::new(value));
        if s.garbage.len() >= MAX_GARBAGE && !s.running {
            drop(s);
            self.inner.wake.notify_one();
        }
    }

    /// Run `chore` on the helper's thread soon (after the share of work it
    /// is in, if any); nobody waits for it. Dropped unrun if the helper
    /// has stopped. A long chore calls [`Pause::run_posted`] often, so
    /// that a commit's work posted meanwhile does not wait for it.
    pub(crate) fn chore(&self, chore: impl FnOnce(&Pause<'_>) + Send + 'static) {
        let mut s = self.inner.lock();
        if s.stop {
            return;
        }
        s.chores.push(Box::new(chore));
        self.inner.chores_posted.store(true, Ordering::Relaxed);
        let idle = !s.running;
        drop(s);
        if idle {
            self.inner.wake.notify_one();
        }
    }

    /// Stop the helper thread (after it frees what it holds). Idempotent.
    pub(crate) fn stop(&self) {
        self.inner.lock().stop = true;
        self.inner.wake.notify_one();
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(t) = thread {
            // A panic in the helper was handed to its poster already.
            let _ = t.join();
        }
    }

    /// Post `work` for the helper, unless it is busy with another
    /// poster's work or stopped; returns whether it was posted. The caller
    /// must then `Retract` it before `work`'s borrow ends.
    fn post(&self, work: &(dyn Fn() + Sync)) -> bool {
        let mut s = self.inner.lock();
        if s.stop || s.running || s.job.is_some() {
            return false;
        }
        // SAFETY: only the lifetime is erased. The pointer is used by the
        // helper only between taking the job (under the lock) and
        // clearing `running`; the poster's `Retract`, which runs however
        // the poster's function is left (panics included), either takes
        // the job back before the helper took it, or waits for `running`
        // to be cleared. So `work` outlives every use.
        let erased: &'static (dyn Fn() + Sync + 'static) =
            unsafe { std::mem::transmute::<&(dyn Fn() + Sync), &'static (dyn Fn() + Sync)>(work) };
        s.job = Some(Job(erased));
        self.inner.posted.store(true, Ordering::Relaxed);
        // Left by an earlier poster that unwound on its own panic.
        s.panicked = None;
        drop(s);
        self.inner.wake.notify_one();
        true
    }

    /// Hand a panic of the helper's on to the poster.
    fn rethrow(&self) {
        if let Some(p) = self.inner.lock().panicked.take() {
            panic::resume_unwind(p);
        }
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Helper {
    /// Like [`Fork::fork`], but only if the helper is free to take part:
    /// returns `false`, without running `work`, when it is busy with
    /// another poster's work or stopped.
    pub(crate) fn try_fork(&self, work: &(dyn Fn() + Sync)) -> bool {
        if !self.post(work) {
            return false;
        }
        let retract = Retract { inner: &self.inner };
        work();
        drop(retract);
        self.rethrow();
        true
    }
}

impl Fork for Helper {
    fn fork(&self, work: &(dyn Fn() + Sync)) {
        if !self.try_fork(work) {
            work();
        }
    }
}

/// Takes a posted job back, or waits for the helper to finish it, when
/// dropped (so also when the poster unwinds).
struct Retract<'a> {
    inner: &'a Inner,
}

impl Drop for Retract<'_> {
    fn drop(&mut self) {
        let mut s = self.inner.lock();
        if s.job.take().is_some() {
            self.inner.posted.store(false, Ordering::Relaxed);
            return;
        }
        while s.running {
            s = self
                .inner
                .done
                .wait(s)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Run the posted job, if any, on the helper's thread.
fn run_job<'a>(inner: &'a Inner, mut s: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
    let Some(Job(work)) = s.job.take() else {
        return s;
    };
    inner.posted.store(false, Ordering::Relaxed);
    s.running = true;
    drop(s);
    // SAFETY: the poster keeps the closure alive until `running` is
    // cleared below (see `Helper::fork`).
    let work = unsafe { &*work };
    let outcome = panic::catch_unwind(AssertUnwindSafe(work));
    s = inner.lock();
    s.running = false;
    if let Err(p) = outcome {
        s.panicked = Some(p);
    }
    inner.done.notify_all();
    s
}

fn take_chores(inner: &Inner, s: &mut State) -> Vec<Chore> {
    inner.chores_posted.store(false, Ordering::Relaxed);
    std::mem::take(&mut s.chores)
}

/// Run `chores` in order; `outer`: they may run chores posted meanwhile
/// in their pauses (one level deep, so a chore never waits behind more
/// than one other).
fn run_chores(inner: &Inner, chores: Vec<Chore>, outer: bool) {
    let pause = Pause { inner, outer };
    for chore in chores {
        // A panicking chore must not end the helper.
        let _ = panic::catch_unwind(AssertUnwindSafe(|| chore(&pause)));
    }
}

/// What a chore is given: a way to let a commit's posted work, and
/// chores posted after it, go first.
pub(crate) struct Pause<'a> {
    inner: &'a Inner,
    outer: bool,
}

impl Pause<'_> {
    /// Run the work a poster is waiting on, if there is some, and chores
    /// posted since this one began (a load of two flags when there is
    /// none). Why the chores too: a long chore (faulting in 8 MiB of the
    /// memtable's next chunks, ~8 ms here) kept the inserts of published
    /// runs waiting behind it, until so many were queued that the
    /// committer inserted them itself, on the commit's path (4 % of its
    /// samples on w3, perf).
    pub(crate) fn run_posted(&self) {
        if self.inner.posted.load(Ordering::Relaxed) {
            drop(run_job(self.inner, self.inner.lock()));
        }
        if self.outer && self.inner.chores_posted.load(Ordering::Relaxed) {
            let chores = {
                let mut s = self.inner.lock();
                if s.stop {
                    return;
                }
                take_chores(self.inner, &mut s)
            };
            run_chores(self.inner, chores, false);
        }
    }
}

fn run(inner: &Inner) {
    let mut s = inner.lock();
    loop {
        s = run_job(inner, s);
        if !s.garbage.is_empty() || !s.chores.is_empty() {
            let garbage = std::mem::take(&mut s.garbage);
            let chores = take_chores(inner, &mut s);
            let stopping = s.stop;
            drop(s);
            drop(garbage);
            if !stopping {
                run_chores(inner, chores, true);
            }
            s = inner.lock();
            continue;
        }
        if s.stop {
            return;
        }
        s = inner.wake.wait(s).unwrap_or_else(PoisonError::into_inner);
    }
}

/// Lower the calling thread's priority by `levels` nice levels (at most
/// to 19, the lowest); 0 leaves it. Linux sets the nice value of one
/// thread when `setpriority` is given its thread id. Advice only: a
/// failure leaves the thread as it was.
///
/// Why: on the project's 2-vCPU VM a commit's write completes on the
/// vCPU that takes the disk's interrupts, and a committer that runs on
/// the other pays a wake-up across vCPUs per write: w1 with the process
/// pinned there (`taskset`) had a p50 of 120–168 µs against 97–138 on the
/// interrupts' vCPU. The store's w1 rounds were either ~100 µs or ~130 at
/// the p50 while the journal alone stayed at ~100; with the helper 5
/// levels down (it faults the memtable's memory in beside the committer),
/// 6 interleaved rounds gave 10,472 against 9,597 commits/s, better in
/// all 6, p99 148 against 333 µs.
pub(crate) fn lower_priority(levels: u8) {
    if levels == 0 {
        return;
    }
    let tid = rustix::thread::gettid();
    if let Ok(now) = rustix::process::getpriority_process(Some(tid)) {
        let _ = rustix::process::setpriority_process(Some(tid), (now + i32::from(levels)).min(19));
    }
}

#[cfg(test)]
mod tests {
    /// `lower_priority` lowers the calling thread only, by its levels,
    /// down to 19; 0 leaves it.
    #[test]
    fn lower_priority_lowers_the_calling_thread_only() {
        let nice = || {
            let tid = rustix::thread::gettid();
            rustix::process::getpriority_process(Some(tid)).unwrap()
        };
        let here = nice();
        let (zero, three, more) = std::thread::spawn(move || {
            let start = nice();
            super::lower_priority(0);
            let zero = nice() - start;
            super::lower_priority(3);
            let three = nice() - start;
            super::lower_priority(19);
            (zero, three, nice())
        })
        .join()
        .unwrap();
        assert_eq!(zero, 0);
        assert_eq!(three, 3.min(19 - here));
        assert_eq!(more, 19);
        assert_eq!(nice(), here, "the calling thread's spawner is untouched");
    }

    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Every item is done exactly once, whoever does it.
    #[test]
    fn shares_out_work_and_returns_when_all_is_done() {
        let helper = Helper::start(0, Placement::default()).unwrap();
        for round in 0..200 {
            let items: Vec<AtomicUsize> = (0..64).map(|_| AtomicUsize::new(0)).collect();
            let next = AtomicUsize::new(0);
            helper.fork(&|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { return };
                if round % 2 == 0 {
                    std::thread::yield_now();
                }
                item.fetch_add(1, Ordering::Relaxed);
            });
            assert!(items.iter().all(|i| i.load(Ordering::Relaxed) == 1));
        }
    }

    /// A panic in either thread reaches the poster, and the helper keeps
    /// working.
    #[test]
    fn a_panic_reaches_the_poster() {
        let helper = Helper::start(0, Placement::default()).unwrap();
        let caught = panic::catch_unwind(AssertUnwindSafe(|| {
            helper.fork(&|| panic!("boom"));
        }));
        assert!(caught.is_err());
        let ran = AtomicUsize::new(0);
        helper.fork(&|| {
            ran.fetch_add(1, Ordering::Relaxed);
        });
        assert!(ran.load(Ordering::Relaxed) >= 1);
    }

    /// Disposed values are dropped on the helper's thread, by `stop` at
    /// the latest.
    #[test]
    fn disposed_values_are_dropped_off_the_caller() {
        struct Probe(Arc<Mutex<Vec<String>>>);
        impl Drop for Probe {
            fn drop(&mut self) {
                let name = std::thread::current().name().unwrap_or("").to_string();
                self.0.lock().unwrap().push(name);
            }
        }
        let seen = Arc::new(Mutex::new(Vec::new()));
        let helper = Helper::start(0, Placement::default()).unwrap();
        for _ in 0..3 {
            helper.dispose(Probe(Arc::clone(&seen)));
        }
        helper.stop();
        assert_eq!(*seen.lock().unwrap(), vec!["keel-helper"; 3]);
    }

    /// A chore runs on the helper's thread without anyone waiting.
    #[test]
    fn chores_run_on_the_helper() {
        let helper = Helper::start(0, Placement::default()).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        helper.chore(move |_| {
            let name = std::thread::current().name().unwrap_or("").to_string();
            tx.send(name).unwrap();
        });
        let name = rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        assert_eq!(name, "keel-helper");
    }

    /// Work posted while a chore runs is taken by the helper at the
    /// chore's next pause, not after the chore.
    #[test]
    fn a_chore_lets_posted_work_go_first() {
        use std::sync::atomic::AtomicBool;
        use std::time::{Duration, Instant};
        let helper = Helper::start(0, Placement::default()).unwrap();
        let chore_done = Arc::new(AtomicBool::new(false));
        let in_chore = Arc::new(AtomicBool::new(false));
        let (c, i) = (Arc::clone(&chore_done), Arc::clone(&in_chore));
        // The chore ends only once the work below has been done.
        helper.chore(move |pause| {
            i.store(true, Ordering::Relaxed);
            // Longer than the poster waits below: the work must not be
            // run after the chore instead.
            let deadline = Instant::now() + Duration::from_secs(30);
            while !c.load(Ordering::Relaxed) && Instant::now() < deadline {
                pause.run_posted();
                std::thread::yield_now();
            }
        });
        while !in_chore.load(Ordering::Relaxed) {
            std::thread::yield_now();
        }
        let by_helper = AtomicBool::new(false);
        let posted = helper.try_fork(&|| {
            if std::thread::current().name() == Some("keel-helper") {
                by_helper.store(true, Ordering::Relaxed);
                return;
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while !by_helper.load(Ordering::Relaxed) && Instant::now() < deadline {
                std::thread::yield_now();
            }
        });
        chore_done.store(true, Ordering::Relaxed);
        assert!(posted);
        assert!(
            by_helper.load(Ordering::Relaxed),
            "the helper ran the work during its chore"
        );
    }

    /// A chore posted while another runs is run at the other's next
    /// pause, not after it; one posted during that one waits for it (one
    /// level deep).
    #[test]
    fn a_chore_lets_later_chores_go_first_one_level_deep() {
        use std::sync::atomic::AtomicBool;
        use std::sync::mpsc;
        use std::time::{Duration, Instant};
        let helper = Arc::new(Helper::start(0, Placement::default()).unwrap());
        let first_done = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel::<&'static str>();
        let (started_tx, started_rx) = mpsc::channel();
        let (done, log) = (Arc::clone(&first_done), tx.clone());
        helper.chore(move |pause| {
            started_tx.send(()).unwrap();
            // Pauses until the second chore has run (or a deadline far
            // beyond the waits below).
            let deadline = Instant::now() + Duration::from_secs(30);
            while !done.load(Ordering::Relaxed) && Instant::now() < deadline {
                pause.run_posted();
                std::thread::yield_now();
            }
            log.send("first ends").unwrap();
        });
        started_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        let (h, done, log) = (Arc::clone(&helper), Arc::clone(&first_done), tx.clone());
        helper.chore(move |pause| {
            log.send("second runs").unwrap();
            let third_log = log.clone();
            h.chore(move |_| third_log.send("third runs").unwrap());
            // The third is not run from this chore's pause.
            for _ in 0..100 {
                pause.run_posted();
            }
            log.send("second ends").unwrap();
            done.store(true, Ordering::Relaxed);
        });
        let got: Vec<&str> = (0..4)
            .map(|_| rx.recv_timeout(Duration::from_secs(20)).unwrap())
            .collect();
        assert_eq!(got[..2], ["second runs", "second ends"]);
        // The third may run at the first one's last pause or after it.
        assert!(got[2..].contains(&"first ends") && got[2..].contains(&"third runs"));
        helper.stop();
    }
}
