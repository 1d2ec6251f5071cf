//! The durable-write methods Keel measures and can use, by name.

use std::fmt;
use std::str::FromStr;

use super::{IoEngine, OpenMode, OpenOptions, Result, SyncKind, VfsFile};

/// One way of writing a record and (maybe) making it durable. The names are
/// the ones used on the command line (`--methods fdatasync,odirect_dsync`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WriteMethod {
    /// `pwrite` into the page cache, no sync. NOT durable: the baseline that
    /// shows what the sync costs.
    Buffered,
    /// `pwrite` + `fsync`. Durable: fsync flushes data, metadata and the
    /// device cache.
    Fsync,
    /// `pwrite` + `fdatasync`. Durable: like fsync but skips metadata not
    /// needed to read the data back (timestamps).
    Fdatasync,
    /// `pwrite` on an `O_DSYNC` descriptor. Durable when the write returns.
    Odsync,
    /// `pwrite` on an `O_DIRECT` descriptor. NOT durable on a device with a
    /// volatile (write-back) cache: the data may still be in the drive's
    /// cache; durable only where the cache is write-through or
    /// battery-backed.
    Odirect,
    /// `pwrite` on an `O_DIRECT | O_DSYNC` descriptor. Durable when the write
    /// returns (the kernel uses FUA or a flush). The journal's default.
    OdirectDsync,
    /// `pwritev2(..., RWF_DSYNC)` on a buffered descriptor: O_DSYNC for one
    /// write only. Durable when the write returns.
    Pwritev2Dsync,
    /// io_uring write on an `O_DIRECT | O_DSYNC` descriptor. Durable when the
    /// completion arrives.
    UringOdirectDsync,
    /// io_uring write linked with an io_uring `fdatasync` (one submission).
    /// Durable when the fdatasync completion arrives.
    UringFdatasync,
}

impl WriteMethod {
    /// Every method that runs on Linux, in the order they are reported.
    pub const ALL: [WriteMethod; 9] = [
        WriteMethod::Buffered,
        WriteMethod::Fsync,
        WriteMethod::Fdatasync,
        WriteMethod::Odsync,
        WriteMethod::Odirect,
        WriteMethod::OdirectDsync,
        WriteMethod::Pwritev2Dsync,
        WriteMethod::UringOdirectDsync,
        WriteMethod::UringFdatasync,
    ];

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            WriteMethod::Buffered => "buffered",
            WriteMethod::Fsync => "fsync",
            WriteMethod::Fdatasync => "fdatasync",
            WriteMethod::Odsync => "odsync",
            WriteMethod::Odirect => "odirect",
            WriteMethod::OdirectDsync => "odirect_dsync",
            WriteMethod::Pwritev2Dsync => "pwritev2_dsync",
            WriteMethod::UringOdirectDsync => "uring_odirect_dsync",
            WriteMethod::UringFdatasync => "uring_fdatasync",
        }
    }

    /// The open mode of the descriptor this method writes through.
    pub fn open_mode(self) -> OpenMode {
        match self {
            WriteMethod::Buffered
            | WriteMethod::Fsync
            | WriteMethod::Fdatasync
            | WriteMethod::Pwritev2Dsync
            | WriteMethod::UringFdatasync => OpenMode::Buffered,
            WriteMethod::Odsync => OpenMode::Dsync,
            WriteMethod::Odirect => OpenMode::Direct,
            WriteMethod::OdirectDsync | WriteMethod::UringOdirectDsync => OpenMode::DirectDsync,
        }
    }

    /// The submission engine.
    pub fn engine(self) -> IoEngine {
        match self {
            WriteMethod::UringOdirectDsync | WriteMethod::UringFdatasync => IoEngine::Uring,
            _ => IoEngine::Psync,
        }
    }

    /// Open options for this method (create the file if missing).
    pub fn open_options(self) -> OpenOptions {
        OpenOptions::new(self.open_mode())
            .engine(self.engine())
            .create(true)
    }

    /// Whether buffers must be block-aligned (direct I/O).
    pub fn is_direct(self) -> bool {
        self.open_mode().is_direct()
    }

    /// Whether a write made with this method is durable once
    /// [`WriteMethod::write_durably`] returns, on a device whose write cache
    /// is `volatile_cache` (write-back without battery backup).
    pub fn is_durable(self, volatile_cache: bool) -> bool {
        match self {
            WriteMethod::Buffered => false,
            WriteMethod::Odirect => !volatile_cache,
            _ => true,
        }
    }

    /// The system calls one write makes, as `strace` names them; used by the
    /// syscall audit and shown in reports.
    pub fn syscalls(self) -> &'static str {
        match self {
            WriteMethod::Buffered => "pwrite64",
            WriteMethod::Fsync => "pwrite64 + fsync",
            WriteMethod::Fdatasync => "pwrite64 + fdatasync",
            WriteMethod::Odsync => "pwrite64 (O_DSYNC fd)",
            WriteMethod::Odirect => "pwrite64 (O_DIRECT fd)",
            WriteMethod::OdirectDsync => "pwrite64 (O_DIRECT|O_DSYNC fd)",
            WriteMethod::Pwritev2Dsync => "pwritev2 (RWF_DSYNC)",
            WriteMethod::UringOdirectDsync => "io_uring_enter: WRITE (O_DIRECT|O_DSYNC fd)",
            WriteMethod::UringFdatasync => "io_uring_enter: WRITE -> FSYNC(DATASYNC), linked",
        }
    }

    /// Write `buf` at `offset` through `file` (opened with
    /// [`WriteMethod::open_options`]) and make it as durable as the method
    /// makes it.
    pub fn write_durably(self, file: &dyn VfsFile, buf: &[u8], offset: u64) -> Result<()> {
        debug_assert_eq!(file.mode(), self.open_mode());
        match self {
            WriteMethod::Fsync => {
                file.write_at(buf, offset)?;
                file.sync(SyncKind::All)
            }
            WriteMethod::Fdatasync => {
                file.write_at(buf, offset)?;
                file.sync(SyncKind::Data)
            }
            WriteMethod::Pwritev2Dsync | WriteMethod::UringFdatasync => {
                file.write_dsync_at(buf, offset)
            }
            WriteMethod::Buffered
            | WriteMethod::Odsync
            | WriteMethod::Odirect
            | WriteMethod::OdirectDsync
            | WriteMethod::UringOdirectDsync => file.write_at(buf, offset),
        }
    }

    /// Whether one write's failure can be reported to another thread's
    /// sync instead of its own: the methods whose writes go through the
    /// page cache (or sync separately). Linux keeps one writeback error
    /// per open file and hands it to the first sync that looks, whichever
    /// thread's data it was (`fsync(2)`, errseq); a sync after that returns
    /// 0 even though pages it should have written were dropped.
    /// `O_DIRECT|O_DSYNC` writes report their own errors.
    pub fn shares_writeback_errors(self) -> bool {
        !self.is_direct() || self.sync_after_writes().is_some()
    }

    /// The sync [`WriteMethod::write_durably`] makes after its
    /// [`VfsFile::write_at`], for the methods that make one (`fsync`,
    /// `fdatasync`); `None` when the write itself is durable.
    pub fn separate_sync(self) -> Option<SyncKind> {
        match self {
            WriteMethod::Fsync => Some(SyncKind::All),
            WriteMethod::Fdatasync => Some(SyncKind::Data),
            _ => None,
        }
    }

    /// The sync to make after several [`VfsFile::write_at`] calls so that all
    /// of them are durable (`None` when every write already is).
    pub fn sync_after_writes(self) -> Option<SyncKind> {
        match self {
            WriteMethod::Fsync => Some(SyncKind::All),
            WriteMethod::Fdatasync
            | WriteMethod::Pwritev2Dsync
            | WriteMethod::UringFdatasync
            | WriteMethod::Odirect => Some(SyncKind::Data),
            _ => None,
        }
    }
}

impl fmt::Display for WriteMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown method name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown write method `{0}`; known: buffered, fsync, fdatasync, odsync, odirect, odirect_dsync, pwritev2_dsync, uring_odirect_dsync, uring_fdatasync")]
pub struct ParseMethodError(pub String);

impl FromStr for WriteMethod {
    type Err = ParseMethodError;
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        WriteMethod::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| ParseMethodError(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for m in WriteMethod::ALL {
            assert_eq!(m.name().parse::<WriteMethod>().unwrap(), m);
        }
        assert!("O_DIRECT".parse::<WriteMethod>().is_err());
    }

    #[test]
    fn durability_claims() {
        assert!(!WriteMethod::Buffered.is_durable(false));
        assert!(!WriteMethod::Odirect.is_durable(true));
        assert!(WriteMethod::Odirect.is_durable(false));
        for m in WriteMethod::ALL {
            if m.open_mode().writes_are_durable() {
                assert!(m.is_durable(true), "{m}");
            }
        }
    }
}
