//! Bench files: the directory check every bench makes before it writes,
//! how a file is preallocated, and the random payloads written into it.

use std::path::Path;

use anyhow::{bail, Context};
use clap::ValueEnum;
use keel::io::{AlignedBuf, IoError, OpenMode, OpenOptions, SyncKind, Vfs};
use rand::RngCore;
use serde::Serialize;

use crate::util::{ensure_dir, format_size_approx};

/// How a bench file is prepared before the timed loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Prealloc {
    /// Nothing reserved: an empty file that grows with every write, or a
    /// sparse file of the right length where a bench needs one (`mmap`);
    /// each durable write also allocates blocks (metadata).
    None,
    /// `fallocate`: blocks reserved as unwritten extents; the first write to
    /// each converts it, a metadata change the sync must also persist.
    Fallocate,
    /// Zeros written over the whole file and synced: later overwrites change
    /// no metadata, the cheapest case for a durable write.
    Zerofill,
}

impl Prealloc {
    pub fn name(self) -> &'static str {
        match self {
            Prealloc::None => "none",
            Prealloc::Fallocate => "fallocate",
            Prealloc::Zerofill => "zerofill",
        }
    }
}

/// Create `dir` if missing and check that it takes files and has
/// `needed_bytes` free, before any bench file is written. `hint` names the
/// flags that lower the need (`--total`, `--file-size`).
pub fn check_dir(vfs: &dyn Vfs, dir: &Path, needed_bytes: u64, hint: &str) -> anyhow::Result<()> {
    ensure_dir(dir)?;
    let probe = dir.join(format!(".keel-bench-probe-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .with_context(|| {
            format!(
                "cannot create files in {}; choose a writable --dir",
                dir.display()
            )
        })?;
    std::fs::remove_file(&probe).with_context(|| format!("cannot remove {}", probe.display()))?;
    // Unknown (a file system that reports no size): the writes will say.
    let Some(available) = vfs.free_space(dir)? else {
        return Ok(());
    };
    if needed_bytes > available {
        bail!(
            "not enough free space in {}: the bench needs {}, {} available; choose a smaller \
             {hint} or another --dir",
            dir.display(),
            format_size_approx(needed_bytes),
            format_size_approx(available)
        );
    }
    Ok(())
}

/// Create the file at `path` and prepare `len_bytes` of it as `prealloc`
/// says (`None` leaves it empty, or sparse at `len_bytes` with
/// `sparse_len`), through a buffered descriptor closed before the timed
/// run. The file and its directory are synced, so timed writes pay for
/// themselves only.
pub fn prepare_file(
    vfs: &dyn Vfs,
    path: &Path,
    prealloc: Prealloc,
    len_bytes: u64,
    sparse_len: bool,
) -> anyhow::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let needed = if prealloc == Prealloc::None {
        0
    } else {
        len_bytes
    };
    let available = vfs.free_space(dir)?.unwrap_or(u64::MAX);
    if needed > available {
        return Err(IoError::NoSpace {
            path: dir.to_path_buf(),
            needed,
            available,
        }
        .into());
    }
    let file = vfs.open(path, OpenOptions::new(OpenMode::Buffered).create_new(true))?;
    match prealloc {
        Prealloc::None if sparse_len => file.set_len(len_bytes)?,
        Prealloc::None => {}
        Prealloc::Fallocate => file.allocate(0, len_bytes)?,
        Prealloc::Zerofill => file.zero_fill(0, len_bytes)?,
    }
    file.sync(SyncKind::All)?;
    vfs.sync_dir(dir)?;
    Ok(())
}

/// Payloads are taken from a random pool larger than one payload, each at a
/// different 4 KiB-aligned start, so that consecutive writes carry
/// different bytes (a device that deduplicates or compresses gets no help)
/// without allocating every byte written.
pub struct RandomPool {
    buf: AlignedBuf,
    slots: u64,
}

/// Payload starts are this far apart (and so aligned for direct I/O).
pub const POOL_STEP_BYTES: usize = 4096;

impl RandomPool {
    /// Random, incompressible bytes for payloads of up to `max_payload`
    /// bytes, with `slack_bytes` of room for different starts; filled now,
    /// before any timed region, and aligned for direct I/O.
    pub fn new(max_payload: usize, slack_bytes: usize) -> RandomPool {
        let slack = slack_bytes.max(POOL_STEP_BYTES);
        let mut buf = AlignedBuf::new(max_payload + slack, POOL_STEP_BYTES);
        rand::rng().fill_bytes(&mut buf);
        RandomPool {
            buf,
            slots: (slack / POOL_STEP_BYTES) as u64,
        }
    }

    /// The payload of write `i`, `len` bytes.
    pub fn payload(&self, i: u64, len: usize) -> &[u8] {
        let start = (i % self.slots) as usize * POOL_STEP_BYTES;
        &self.buf[start..start + len]
    }
}

/// The error for a direct-I/O write size the device cannot take, before
/// anything is created (the file layer would refuse it the same way).
pub fn check_direct_size(
    vfs: &dyn Vfs,
    dir: &Path,
    size: u64,
    flag: &'static str,
) -> anyhow::Result<()> {
    let block = vfs.block_size(dir)?;
    if size % block as u64 != 0 {
        return Err(IoError::Misaligned {
            block,
            what: flag,
            value: size,
        }
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel::io::RealVfs;

    #[test]
    fn payloads_differ_and_stay_aligned() {
        let pool = RandomPool::new(8192, 1 << 20);
        assert_ne!(pool.payload(0, 8192), pool.payload(1, 8192));
        assert_eq!(pool.payload(5, 8192).as_ptr() as usize % POOL_STEP_BYTES, 0);
        assert_eq!(pool.payload(256, 8192), pool.payload(0, 8192));
    }

    #[test]
    fn prepares_each_mode() {
        let dir = std::env::temp_dir().join(format!("keel-files-{}", std::process::id()));
        check_dir(&RealVfs, &dir, 0, "--total").unwrap();
        for (mode, sparse, len) in [
            (Prealloc::None, false, 0),
            (Prealloc::None, true, 1 << 20),
            (Prealloc::Fallocate, false, 1 << 20),
            (Prealloc::Zerofill, false, 1 << 20),
        ] {
            let path = dir.join(format!("{}-{sparse}", mode.name()));
            prepare_file(&RealVfs, &path, mode, 1 << 20, sparse).unwrap();
            assert_eq!(std::fs::metadata(&path).unwrap().len(), len, "{mode:?}");
        }
        assert!(check_dir(&RealVfs, &dir, u64::MAX, "--total").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
