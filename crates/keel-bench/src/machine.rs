//! Where the figures were measured: the machine, the storage under the
//! bench directory, and what a durable 4 KiB write costs there (a quick
//! `pwrite` + `fdatasync` loop of our own).

use std::io::Write as _;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

use anyhow::Result;
use keel::io::DeviceInfo;
use serde_json::json;

pub struct Machine {
    pub device: DeviceInfo,
    pub cpus: usize,
    pub cpu_model: Option<String>,
    pub memory_bytes: u64,
    pub loadavg: Option<String>,
}

impl Machine {
    pub fn for_path(dir: &Path) -> Machine {
        // SAFETY: sysinfo only writes into the zeroed struct we pass it.
        let memory_bytes = unsafe {
            let mut i: libc::sysinfo = std::mem::zeroed();
            if libc::sysinfo(&mut i) == 0 {
                (i.totalram as u64).saturating_mul(u64::from(i.mem_unit))
            } else {
                0
            }
        };
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        });
        Machine {
            device: DeviceInfo::for_path(dir),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model,
            memory_bytes,
            loadavg: loadavg(),
        }
    }

    pub fn is_tmpfs(&self) -> bool {
        matches!(self.device.fs_type.as_deref(), Some("tmpfs" | "ramfs"))
    }

    pub fn to_json(&self) -> serde_json::Value {
        let d = &self.device;
        json!({
            "cpus": self.cpus,
            "cpu_model": self.cpu_model,
            "memory_bytes": self.memory_bytes,
            "kernel": d.kernel,
            "filesystem": d.fs_type,
            "mount_point": d.mount_point,
            "mount_options": d.mount_options,
            "device": d.device,
            "rotational": d.rotational,
            "write_cache": d.write_cache,
            "fua": d.fua,
            "loadavg_at_start": self.loadavg,
        })
    }

    pub fn describe(&self) -> String {
        let d = &self.device;
        let q = |v: &Option<String>| v.clone().unwrap_or_else(|| "?".into());
        format!(
            "{} CPUs ({}), {:.1} GiB RAM, kernel {}; --dir on {} ({}) at {} on {}, write cache {}, \
             FUA {}",
            self.cpus,
            q(&self.cpu_model),
            self.memory_bytes as f64 / (1u64 << 30) as f64,
            q(&d.kernel),
            q(&d.fs_type),
            q(&d.mount_options),
            d.mount_point
                .as_ref()
                .map_or("?".into(), |p| p.display().to_string()),
            q(&d.device),
            q(&d.write_cache),
            d.fua.map_or("?", |f| if f { "yes" } else { "no" }),
        )
    }
}

/// `/proc/loadavg`'s three averages.
pub fn loadavg() -> Option<String> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    Some(s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

/// The durable-write latency of the disk under `dir`: `writes` 4 KiB
/// `pwrite`s into a zero-filled, synced 1 MiB file, each followed by
/// `fdatasync`. Returns (median, p99, writes/s) in µs and per second.
pub fn fdatasync_latency(dir: &Path, writes: usize) -> Result<serde_json::Value> {
    let path = dir.join("keel-bench-fdatasync.tmp");
    let result = (|| -> Result<serde_json::Value> {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)?;
        const FILE: usize = 1 << 20;
        f.write_all(&vec![0u8; FILE])?;
        f.sync_all()?;
        let block = vec![0x5au8; 4096];
        let mut lat: Vec<f64> = Vec::with_capacity(writes);
        let start = Instant::now();
        for i in 0..writes {
            let t0 = Instant::now();
            f.write_all_at(&block, ((i * 4096) % FILE) as u64)?;
            f.sync_data()?;
            lat.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        let total = start.elapsed().as_secs_f64();
        lat.sort_by(f64::total_cmp);
        let at = |q: f64| lat[((lat.len() - 1) as f64 * q).round() as usize];
        Ok(json!({
            "what": format!("{writes} × (4 KiB pwrite + fdatasync) into a zero-filled, synced 1 MiB file"),
            "p50_us": crate::run::round(at(0.5), 1),
            "p99_us": crate::run::round(at(0.99), 1),
            "per_s": crate::run::round(writes as f64 / total, 0),
        }))
    })();
    let _ = std::fs::remove_file(&path);
    result
}
