//! io_uring submission for one file: a write, or a write linked with
//! `fdatasync` so both go to the kernel in one `io_uring_enter`.

use std::fs::File;
use std::os::fd::AsRawFd;

use io_uring::{opcode, squeue, types, IoUring};

use super::{IoError, Result};

const RING_ENTRIES: u32 = 8;
const USER_WRITE: u64 = 1;
const USER_SYNC: u64 = 2;

pub(crate) struct Ring {
    ring: IoUring,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ring")
    }
}

impl Ring {
    pub(crate) fn new() -> Result<Self> {
        let ring =
            IoUring::new(RING_ENTRIES).map_err(|source| IoError::UringUnavailable { source })?;
        Ok(Ring { ring })
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
        let fd = types::Fd(file.as_raw_fd());
        let mut done = 0usize;
        loop {
            let rest = &buf[done..];
            let len = u32::try_from(rest.len()).unwrap_or(u32::MAX);
            let mut write = opcode::Write::new(fd, rest.as_ptr(), len)
                .offset(offset + done as u64)
                .build()
                .user_data(USER_WRITE);
            if datasync {
                write = write.flags(squeue::Flags::IO_LINK);
            }
            let sync = opcode::Fsync::new(fd)
                .flags(types::FsyncFlags::DATASYNC)
                .build()
                .user_data(USER_SYNC);
            let want = if datasync { 2 } else { 1 };
            {
                let mut sq = self.ring.submission();
                // SAFETY: the buffer `rest` and the descriptor outlive the
                // operation: we wait below for every completion before
                // returning, and the ring is owned exclusively (&mut self).
                unsafe {
                    sq.push(&write).expect("ring has room for a write");
                    if datasync {
                        sq.push(&sync).expect("ring has room for a sync");
                    }
                }
            }
            self.ring
                .submit_and_wait(want)
                .map_err(|e| io_err("io_uring_enter", e))?;
            let mut written = None;
            let mut sync_result = None;
            let mut seen = 0;
            while seen < want {
                let cqes: Vec<_> = self.ring.completion().collect();
                if cqes.is_empty() {
                    self.ring
                        .submit_and_wait(want - seen)
                        .map_err(|e| io_err("io_uring_enter", e))?;
                    continue;
                }
                for cqe in cqes {
                    seen += 1;
                    match cqe.user_data() {
                        USER_WRITE => written = Some(cqe.result()),
                        _ => sync_result = Some(cqe.result()),
                    }
                }
            }
            let n = written.expect("write completion");
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
            if datasync {
                // A short write cancels the linked sync (-ECANCELED); the
                // next round writes the rest and links a new sync.
                let s = sync_result.expect("sync completion");
                if done == buf.len() {
                    if s < 0 {
                        return Err(io_err(
                            "io_uring fdatasync",
                            std::io::Error::from_raw_os_error(-s),
                        ));
                    }
                    return Ok(());
                }
            } else if done == buf.len() {
                return Ok(());
            }
        }
    }
}

fn io_err(op: &'static str, source: std::io::Error) -> IoError {
    IoError::os(op, "<io_uring>", source)
}
