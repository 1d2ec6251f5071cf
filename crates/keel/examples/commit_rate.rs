//! Quick group-commit probe: T threads append R-byte records for D seconds
//! on a fresh journal; prints commits/s, context switches and CPU time per
//! commit (whole process, `getrusage`). The full, protocol-conformant
//! benchmark is `keel bench commit`; this one is for profiling the writer.
//!
//! `cargo run --release -p keel --example commit_rate -- DIR [T] [R] [SECS] [lz4] [text]`
//! (`lz4`: compress records of 256 bytes or more; `text`: compressible
//! payloads instead of random bytes; `spares=N`: segments prepared ahead,
//! at open and then in the background; `seg_mib=N`: segment size).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel::io::RealVfs;
use keel::journal::{Journal, JournalOptions};

fn rusage() -> (u64, f64, u64) {
    // SAFETY: getrusage writes into the zeroed struct we pass it.
    let u = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let cs = (u.ru_nvcsw + u.ru_nivcsw) as u64;
    let cpu = u.ru_utime.tv_sec as f64
        + u.ru_utime.tv_usec as f64 / 1e6
        + u.ru_stime.tv_sec as f64
        + u.ru_stime.tv_usec as f64 / 1e6;
    (cs, cpu, u.ru_nivcsw as u64)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = std::path::PathBuf::from(args.get(1).expect("DIR"));
    let threads: usize = args.get(2).map_or(1, |s| s.parse().unwrap());
    let size: usize = args.get(3).map_or(128, |s| s.parse().unwrap());
    let secs: f64 = args.get(4).map_or(3.0, |s| s.parse().unwrap());
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    if args.iter().any(|a| a == "raw" || a == "rawtail") {
        raw(&dir, size, secs, args.iter().any(|a| a == "rawtail"));
        return;
    }
    let lz4 = args.iter().any(|a| a == "lz4");
    let text = args.iter().any(|a| a == "text");
    let spares = args
        .iter()
        .find_map(|a| a.strip_prefix("spares="))
        .map_or(1, |s| s.parse().unwrap());
    // `seg_mib=N`: every segment N MiB (none grows from a smaller size).
    let segment_bytes = args
        .iter()
        .find_map(|a| a.strip_prefix("seg_mib="))
        .map_or(64, |s| s.parse::<u64>().unwrap())
        << 20;
    let opts = JournalOptions {
        lz4_min_bytes: lz4.then_some(256),
        spare_segments: spares,
        segment_size_bytes: segment_bytes,
        first_segment_size_bytes: segment_bytes,
        ..JournalOptions::default()
    };
    let j = Arc::new(Journal::open(RealVfs::shared(), &dir, opts).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let (cs0, cpu0, inv0) = rusage();
    let t0 = Instant::now();
    let hs: Vec<_> = (0..threads)
        .map(|_| {
            let (j, stop, count) = (j.clone(), stop.clone(), count.clone());
            std::thread::spawn(move || {
                let p: Vec<u8> = if text {
                    b"key=user:000123 value={name: 'a journal record', count: 42} "
                        .iter()
                        .copied()
                        .cycle()
                        .take(size)
                        .collect()
                } else {
                    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ size as u64;
                    (0..size)
                        .map(|_| {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            x as u8
                        })
                        .collect()
                };
                while !stop.load(Ordering::Relaxed) {
                    j.append(&p).unwrap();
                    count.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        h.join().unwrap();
    }
    let el = t0.elapsed().as_secs_f64();
    let (cs1, cpu1, inv1) = rusage();
    let n = count.load(Ordering::Relaxed);
    let st = j.stats();
    println!(
        "T={threads} R={size}{}{}: {:.0} commits/s, {:.2} cs/commit ({:.2} involuntary), {:.1} us cpu/commit, {:.0} writes/s, {:.1} records/write",
        if lz4 { " lz4" } else { "" },
        if text { " text" } else { " random" },
        n as f64 / el,
        (cs1 - cs0) as f64 / n as f64,
        (inv1 - inv0) as f64 / n as f64,
        (cpu1 - cpu0) * 1e6 / n as f64,
        st.writes as f64 / el,
        st.records as f64 / st.writes.max(1) as f64
    );
    drop(j);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The floor: one thread, `size` bytes rounded up to 4 KiB, `pwrite` on an
/// `O_DIRECT|O_DSYNC` descriptor into a zero-filled file.
/// `tail`: write like the journal does — records of `size + 32` bytes back
/// to back, each write covering the blocks from the one holding the
/// previous end (rewritten) to the record's end.
fn raw(dir: &std::path::Path, size: usize, secs: f64, tail: bool) {
    use keel::io::{AlignedBuf, OpenMode, OpenOptions, Vfs};
    let vfs = RealVfs;
    let path = dir.join("raw");
    let file_len = 256u64 << 20;
    let f = vfs
        .open(&path, OpenOptions::new(OpenMode::DirectDsync).create(true))
        .unwrap();
    f.zero_fill(0, file_len).unwrap();
    let n = size.div_ceil(4096) * 4096;
    let buf = AlignedBuf::new(n + 8192, 4096);
    let mut pos = 4096u64;
    let (cs0, cpu0, _) = rusage();
    let t0 = Instant::now();
    let mut count = 0u64;
    let mut off = 0;
    while t0.elapsed().as_secs_f64() < secs {
        if tail {
            let start = pos / 4096 * 4096;
            let end = (pos + size as u64 + 32).div_ceil(4096) * 4096;
            f.write_at(&buf[..(end - start) as usize], start).unwrap();
            pos += size as u64 + 32;
            if pos + n as u64 + 8192 > file_len {
                pos = 4096;
            }
        } else {
            f.write_at(&buf[..n], off).unwrap();
            off = (off + n as u64) % file_len;
        }
        count += 1;
    }
    let el = t0.elapsed().as_secs_f64();
    let (cs1, cpu1, _) = rusage();
    println!(
        "raw{} R={size}: {:.0} commits/s, {:.2} cs/commit, {:.1} us cpu/commit",
        if tail { " tail-block" } else { "" },
        count as f64 / el,
        (cs1 - cs0) as f64 / count as f64,
        (cpu1 - cpu0) * 1e6 / count as f64
    );
    let _ = std::fs::remove_dir_all(dir);
}
