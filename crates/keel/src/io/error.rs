//! Errors of the I/O layer.

use std::path::PathBuf;

/// The result type of the I/O layer.
pub type Result<T> = std::result::Result<T, IoError>;

/// What went wrong in a file operation, and what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IoError {
    /// The operating system refused an operation.
    // The OS error is part of the message and deliberately not a `source`:
    // chained printers (`{:#}`) would show it twice.
    #[error("{op} {path}: {error}")]
    Os {
        /// The operation that failed (`open`, `write`, `fdatasync`…).
        op: &'static str,
        /// The file or directory it was applied to.
        path: PathBuf,
        /// The error the operating system returned (or the one
        /// [`crate::io::SimVfs`] injected).
        error: std::io::Error,
    },
    /// `O_DIRECT` was refused (tmpfs and some network file systems answer
    /// `EINVAL`).
    #[error(
        "direct I/O (O_DIRECT) is not supported for {path}: the file system refused it \
         (tmpfs does); use a buffered durable method instead, e.g. `fdatasync` or `odsync`"
    )]
    DirectUnsupported {
        /// The file that could not be opened with `O_DIRECT`.
        path: PathBuf,
    },
    /// A direct-I/O request that is not aligned to the logical block size.
    #[error(
        "direct I/O needs every {what} to be a multiple of the {block}-byte logical block size; \
         got {value}"
    )]
    Misaligned {
        /// The logical block size in bytes that the request must be aligned
        /// to.
        block: usize,
        /// Which part of the request is misaligned: `length`, `offset` or
        /// `buffer address`.
        what: &'static str,
        /// The misaligned value (bytes, or the buffer's address).
        value: u64,
    },
    /// Not enough free space for a file we are about to write.
    #[error(
        "not enough free space under {path}: {needed} bytes needed, {available} available; \
         free some space or choose a smaller size"
    )]
    NoSpace {
        /// The directory that holds (or is to hold) the file.
        path: PathBuf,
        /// Bytes needed: what the write or the new file would add.
        needed: u64,
        /// Bytes available to this process on that file system.
        available: u64,
    },
    /// Another process (or handle) holds the lock.
    #[error("{path} is locked: it is in use by another process")]
    Locked {
        /// The lock file.
        path: PathBuf,
    },
    /// A read past the end of a file.
    #[error("unexpected end of file reading {path} at offset {offset}")]
    UnexpectedEof {
        /// The file being read.
        path: PathBuf,
        /// The byte offset where the file ended before the read was
        /// complete.
        offset: u64,
    },
    /// The kernel refused io_uring (disabled by sysctl, seccomp, or too old).
    #[error("io_uring is not available: {source}; use a method without `uring`")]
    UringUnavailable {
        /// The error the kernel returned when the ring was set up.
        #[source]
        source: std::io::Error,
    },
    /// The simulated machine has crashed: every operation fails until the
    /// test calls [`crate::io::SimVfs::crash`] to model the restart.
    #[error("simulated crash: the file layer is down until restart")]
    Crashed,
    /// A path that does not exist (simulated file system).
    #[error("{path}: no such file or directory")]
    NotFound {
        /// The missing path.
        path: PathBuf,
    },
}

impl IoError {
    /// Wrap an OS error with the operation and path that produced it.
    pub fn os(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        IoError::Os {
            op,
            path: path.into(),
            error: source,
        }
    }

    /// The `errno` behind this error, if it came from (or imitates) the OS.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            IoError::Os { error, .. } => error.raw_os_error(),
            IoError::NoSpace { .. } => Some(libc::ENOSPC),
            IoError::NotFound { .. } => Some(libc::ENOENT),
            IoError::DirectUnsupported { .. } | IoError::Misaligned { .. } => Some(libc::EINVAL),
            IoError::Locked { .. } => Some(libc::EWOULDBLOCK),
            _ => None,
        }
    }

    /// Whether this error means "the file or directory does not exist".
    pub fn is_not_found(&self) -> bool {
        self.raw_os_error() == Some(libc::ENOENT)
    }
}
