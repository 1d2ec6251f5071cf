//! io_uring submission for one file: a write, or a write linked with
//! `fdatasync` so both go to the kernel in one `io_uring_enter`.
//!
//! The buffer of a write belongs to the kernel from the moment it takes the
//! submission until its completion arrives, so [`Ring::write`] never returns
//! in between: not on `EINTR` (it waits again), not on any other failure of
//! `io_uring_enter` (it still waits for what is in flight, then reports the
//! failure).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::time::Duration;

use io_uring::{opcode, squeue, types, EnterFlags, IoUring};

use super::{IoError, Result};

const RING_ENTRIES: u32 = 8;
const USER_WRITE: u64 = 1;
const USER_SYNC: u64 = 2;
/// The most operations one round puts in flight: a write and its sync.
const MAX_OPS_PER_ROUND: usize = 2;
/// How long to sleep between looks at the completion queue when
/// `io_uring_enter` itself keeps failing while operations are in flight.
const FAILED_WAIT_POLL: Duration = Duration::from_millis(1);

/// Waits cut short by a signal, so the signal-storm test can show it
/// exercised the retry.
#[cfg(test)]
static INTERRUPTED_WAITS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

pub(crate) struct Ring {
    ring: IoUring,
    /// Set (to the errno) when `io_uring_enter` failed before the kernel took
    /// every entry of a round: those entries stay in the submission queue,
    /// there is no way to take them back, and the next `io_uring_enter` would
    /// submit them with a buffer that has since been freed. Every later call
    /// fails with this errno instead.
    broken: Option<i32>,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ring")
    }
}

/// The results of one round, by operation.
#[derive(Default)]
struct RoundResults {
    write: Option<i32>,
    sync: Option<i32>,
}

impl Ring {
    pub(crate) fn new() -> Result<Self> {
        let ring =
            IoUring::new(RING_ENTRIES).map_err(|source| IoError::UringUnavailable { source })?;
        Ok(Ring { ring, broken: None })
    }

    /// Write all of `buf` at `offset`; with `datasync`, link an fdatasync
    /// after the (last) write and wait for it too.
    pub(crate) fn write(
        &mut self,
        file: &File,
        buf: &[u8],
        offset: u64,
        datasync: bool,
    ) -> Result<()> {
        if let Some(errno) = self.broken {
            return Err(io_err(
                "io_uring_enter (ring unusable since an earlier failure)",
                std::io::Error::from_raw_os_error(errno),
            ));
        }
        let fd = types::Fd(file.as_raw_fd());
        let mut done = 0usize;
        loop {
            let rest = &buf[done..];
            let results = self.round(fd, rest, offset + done as u64, datasync)?;
            let n = results
                .write
                .expect("the kernel completes every write it took");
            if n < 0 {
                return Err(io_err(
                    "io_uring write",
                    std::io::Error::from_raw_os_error(-n),
                ));
            }
            if n == 0 && !rest.is_empty() {
                return Err(io_err(
                    "io_uring write",
                    std::io::ErrorKind::WriteZero.into(),
                ));
            }
            done += n as usize;
            if done < buf.len() {
                // A short write cancels the linked sync (-ECANCELED); the
                // next round writes the rest and links a new sync.
                continue;
            }
            debug_assert_eq!(results.sync.is_some(), datasync);
            if let Some(s) = results.sync.filter(|&s| s < 0) {
                return Err(io_err(
                    "io_uring fdatasync",
                    std::io::Error::from_raw_os_error(-s),
                ));
            }
            return Ok(());
        }
    }

    /// Submit one write of `rest` at `offset` (linked with an fdatasync when
    /// `datasync`) and return once every operation the kernel took has
    /// completed.
    fn round(
        &mut self,
        fd: types::Fd,
        rest: &[u8],
        offset: u64,
        datasync: bool,
    ) -> Result<RoundResults> {
        let len = u32::try_from(rest.len()).unwrap_or(u32::MAX);
        let mut write = opcode::Write::new(fd, rest.as_ptr(), len)
            .offset(offset)
            .build()
            .user_data(USER_WRITE);
        if datasync {
            write = write.flags(squeue::Flags::IO_LINK);
        }
        let sync = opcode::Fsync::new(fd)
            .flags(types::FsyncFlags::DATASYNC)
            .build()
            .user_data(USER_SYNC);
        let pushed = if datasync { 2 } else { 1 };
        {
            let mut sq = self.ring.submission();
            // Every earlier round either consumed all its entries or broke
            // the ring, so the queue is empty and has room for ours.
            assert!(sq.is_empty(), "io_uring submission queue not empty");
            // SAFETY: the buffer `rest` and the descriptor outlive the
            // operations: `complete` returns only once every entry the
            // kernel took has completed, entries it did not take are never
            // submitted (the ring is marked broken), and the ring is owned
            // exclusively (&mut self).
            unsafe {
                sq.push(&write).expect("ring has room for a write");
                if datasync {
                    sq.push(&sync).expect("ring has room for a sync");
                }
            }
        }
        let mut results = RoundResults::default();
        self.complete(pushed, &mut results)?;
        Ok(results)
    }

    /// Submit what the kernel has not taken yet and wait for the completions
    /// of all `pushed` entries. On a failure of `io_uring_enter` other than
    /// `EINTR`, still wait for every entry the kernel took, then return the
    /// failure.
    fn complete(&mut self, pushed: usize, results: &mut RoundResults) -> Result<()> {
        debug_assert!(pushed <= MAX_OPS_PER_ROUND);
        let mut completed = 0usize;
        let mut failure: Option<std::io::Error> = None;
        loop {
            for cqe in self.ring.completion() {
                completed += 1;
                match cqe.user_data() {
                    USER_WRITE => results.write = Some(cqe.result()),
                    _ => results.sync = Some(cqe.result()),
                }
            }
            assert!(
                completed <= pushed,
                "more io_uring completions than entries"
            );
            let waiting = pushed - completed;
            if waiting == 0 {
                break;
            }
            let outcome = match &failure {
                // `submit_and_wait` hands the kernel only the entries it has
                // not consumed yet (tail minus the kernel's head), so after
                // an EINTR it does not submit anything twice: when the kernel
                // took everything, this is a pure wait.
                None => self.ring.submit_and_wait(waiting),
                Some(_) => {
                    let in_flight = waiting - self.ring.submission().len();
                    if in_flight == 0 {
                        break;
                    }
                    self.wait_only(in_flight)
                }
            };
            match outcome {
                Ok(_) => {}
                // A signal that arrives while io_uring_enter waits for
                // completions ends the wait with EINTR (io_uring_enter(2),
                // ERRORS); what the kernel took stays in flight: wait again.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                    #[cfg(test)]
                    INTERRUPTED_WAITS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Err(e) if failure.is_none() => failure = Some(e),
                // Entering keeps failing, but the kernel still posts the
                // completions of what it took: look again shortly.
                Err(_) => std::thread::sleep(FAILED_WAIT_POLL),
            }
        }
        match failure {
            None => Ok(()),
            Some(e) => {
                if !self.ring.submission().is_empty() {
                    self.broken = Some(e.raw_os_error().unwrap_or(libc::EIO));
                }
                Err(io_err("io_uring_enter", e))
            }
        }
    }

    /// Wait for `min_complete` completions without submitting anything, even
    /// if entries the kernel did not take are still queued.
    fn wait_only(&mut self, min_complete: usize) -> std::io::Result<usize> {
        let min_complete = u32::try_from(min_complete).unwrap_or(u32::MAX);
        // SAFETY: `to_submit` is 0, so the kernel takes no entry (and no
        // buffer) from the submission queue; there is no argument pointer.
        unsafe {
            self.ring.submitter().enter::<libc::sigset_t>(
                0,
                min_complete,
                EnterFlags::GETEVENTS.bits(),
                None,
            )
        }
    }
}

fn io_err(op: &'static str, source: std::io::Error) -> IoError {
    IoError::os(op, "<io_uring>", source)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::thread::JoinHandle;

    use crate::io::{AlignedBuf, IoError, RealVfs, Vfs, WriteMethod};

    const BLOCK_BYTES: usize = 4096;
    const WRITES_PER_METHOD: usize = 300;

    extern "C" fn ignore_signal(_: libc::c_int) {}

    /// Sends SIGUSR1 to one thread in a tight loop until dropped; dropping
    /// stops and joins the sender, so the target thread (which owns this
    /// guard) is still alive for every `pthread_kill`, even on a panic.
    struct SignalStorm {
        stop: Arc<AtomicBool>,
        sender: Option<JoinHandle<u64>>,
    }

    impl SignalStorm {
        /// Install a no-op SIGUSR1 handler WITHOUT `SA_RESTART`, so every
        /// signal makes a blocking system call of the calling thread return
        /// `EINTR`, and start sending it to the calling thread.
        fn at_this_thread() -> Self {
            // SAFETY: a zeroed `sigaction` is a valid value (empty mask, no
            // flags); the handler is an `extern "C"` function that touches
            // nothing, so it is async-signal-safe.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction =
                    ignore_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
                action.sa_flags = 0;
                libc::sigemptyset(&mut action.sa_mask);
                assert_eq!(
                    libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut()),
                    0
                );
            }
            // SAFETY: pthread_self has no preconditions.
            let target = unsafe { libc::pthread_self() };
            let stop = Arc::new(AtomicBool::new(false));
            let sender = {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let mut sent = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        // SAFETY: `target` is alive: the thread that owns
                        // this storm joins us (Drop) before it can exit.
                        unsafe { libc::pthread_kill(target, libc::SIGUSR1) };
                        sent += 1;
                    }
                    sent
                })
            };
            SignalStorm {
                stop,
                sender: Some(sender),
            }
        }

        fn stop(mut self) -> u64 {
            self.stop_and_join()
        }

        fn stop_and_join(&mut self) -> u64 {
            self.stop.store(true, Ordering::Relaxed);
            self.sender
                .take()
                .map(|s| s.join().expect("signal sender"))
                .unwrap_or(0)
        }
    }

    impl Drop for SignalStorm {
        fn drop(&mut self) {
            self.stop_and_join();
        }
    }

    fn block_contents(method_index: usize, write_index: usize) -> AlignedBuf {
        let mut buf = AlignedBuf::new(BLOCK_BYTES, BLOCK_BYTES);
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (method_index * 131 + write_index * 7 + i) as u8;
        }
        buf[..8].copy_from_slice(&(write_index as u64).to_le_bytes());
        buf
    }

    /// A signal that arrives while `io_uring_enter` waits for completions
    /// ends the wait with `EINTR`. Every durable write must still succeed,
    /// exactly once, with its buffer alive until the kernel is done with it.
    /// Before the retry, the first interrupted wait failed the write (Linux
    /// 6.18: `Interrupted system call` on the first uring_fdatasync write,
    /// then a panic on the stale completion the next write found); with it,
    /// a run retries some 2,500 to 7,500 interrupted waits.
    #[test]
    fn uring_writes_survive_a_signal_storm() {
        let dir = std::env::temp_dir().join(format!("keel-uring-storm-{}", std::process::id()));
        RealVfs.create_dir_all(&dir).unwrap();
        let methods = [WriteMethod::UringFdatasync, WriteMethod::UringOdirectDsync];
        let mut files: Vec<(usize, PathBuf, Arc<dyn crate::io::VfsFile>)> = Vec::new();
        for (m, method) in methods.into_iter().enumerate() {
            let path = dir.join(method.name());
            match RealVfs.open(&path, method.open_options()) {
                Ok(f) => files.push((m, path, f)),
                Err(e @ IoError::UringUnavailable { .. })
                | Err(e @ IoError::DirectUnsupported { .. }) => {
                    println!("skipping {method} under a signal storm: {e}");
                }
                Err(e) => panic!("open {}: {e}", path.display()),
            }
        }
        let started = std::time::Instant::now();
        let storm = SignalStorm::at_this_thread();
        let mut failures = Vec::new();
        for (m, _, file) in &files {
            for w in 0..WRITES_PER_METHOD {
                let buf = block_contents(*m, w);
                if let Err(e) = methods[*m].write_durably(&**file, &buf, (w * BLOCK_BYTES) as u64) {
                    failures.push(format!("{} write {w}: {e}", methods[*m]));
                }
            }
        }
        let signals_sent = storm.stop();
        println!(
            "{} writes, {signals_sent} signals, {} interrupted waits retried, {} failed, in {:?}",
            files.len() * WRITES_PER_METHOD,
            super::INTERRUPTED_WAITS.load(Ordering::Relaxed),
            failures.len(),
            started.elapsed()
        );
        assert!(failures.is_empty(), "{failures:#?}");
        for (m, path, file) in &files {
            let mut back = AlignedBuf::new(BLOCK_BYTES, BLOCK_BYTES);
            for w in 0..WRITES_PER_METHOD {
                file.read_exact_at(&mut back, (w * BLOCK_BYTES) as u64)
                    .unwrap();
                assert!(
                    back[..] == block_contents(*m, w)[..],
                    "{}: block {w} does not hold what was written",
                    path.display()
                );
            }
            assert_eq!(
                file.len().unwrap(),
                (WRITES_PER_METHOD * BLOCK_BYTES) as u64
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
