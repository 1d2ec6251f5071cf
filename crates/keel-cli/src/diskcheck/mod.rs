//! `keel diskcheck`: does this disk keep the writes it acknowledged?
//!
//! A client (`write`) on the machine under test writes self-describing
//! blocks and makes each durable, telling a server (`listen`) on another
//! machine before each write and after each sync. After a power cut and a
//! reboot, `verify` reads the blocks back and counts acknowledged writes
//! that were lost, torn or misdirected. The protocol, the block format and a
//! step-by-step power-cut procedure are in `docs/diskcheck.md`.

mod ack_place;
pub mod block;
pub mod client;
pub mod log;
pub mod recorder;
pub mod server;
pub mod state;
pub mod verify;
pub mod wire;

#[cfg(test)]
mod cycle_tests;
#[cfg(test)]
mod sim_tests;

use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clap::{Args, Subcommand};
use keel::io::{RealVfs, WriteMethod};

use crate::util::Size;

/// How a run names its file in its record ([`state::RunMeta::file`]), and
/// how `verify` names the file it is given, so that the two compare equal
/// however the path was spelled: absolute, with the directory resolved
/// (`..`, symbolic links) when it exists — it does when `write` starts, and
/// normally still after the power cut, even if the file is gone. Only the
/// name is computed: nothing is opened. Lossy for a non-UTF-8 path and cut
/// to the wire's string limit: good for finding a run, not for opening
/// the file.
pub fn recorded_file_name(path: &Path) -> String {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let resolved = match (absolute.parent(), absolute.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(dir)
            .map(|dir| dir.join(name))
            .unwrap_or(absolute),
        _ => absolute,
    };
    wire::truncate(&resolved.display().to_string()).to_string()
}

/// Microseconds since the Unix epoch on this machine's clock.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

#[derive(Subcommand, Debug)]
pub enum DiskcheckCommand {
    /// The server: durably record what clients announce and acknowledge.
    /// Run it on a machine whose power stays on.
    Listen(ListenArgs),
    /// The client: write and sync random blocks on the disk under test,
    /// reporting each write; cut the power while it runs.
    Write(WriteArgs),
    /// After the reboot: read the blocks back and count acknowledged writes
    /// that were lost.
    Verify(VerifyArgs),
}

#[derive(Args, Debug)]
pub struct ListenArgs {
    /// TCP port to listen on.
    #[arg(long, default_value_t = 5400)]
    port: u16,
    /// Address to bind; use 0.0.0.0 to accept clients from other machines.
    #[arg(long, default_value = "127.0.0.1")]
    bind: String,
    /// Directory for the server's durable records (created if missing).
    #[arg(long, default_value = "keel-diskcheck-state")]
    state: PathBuf,
}

/// Where the writes are recorded: exactly one of the two.
#[derive(Args, Debug)]
#[group(required = true, multiple = false)]
pub struct RecorderArgs {
    /// The `keel diskcheck listen` server, HOST:PORT.
    #[arg(long)]
    server: Option<String>,
    /// Single-machine mode: record in this file, which must be on another
    /// device than --file and not in memory (tmpfs): a power cut would take
    /// the record with the writes, and `write` and `verify` warn.
    #[arg(long)]
    ack_file: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct WriteArgs {
    #[command(flatten)]
    recorder: RecorderArgs,
    /// The file on the disk under test (created, or extended, to --size).
    #[arg(long)]
    file: PathBuf,
    /// Size of the file, e.g. 64M, 4G.
    #[arg(long)]
    size: Size,
    /// Block size; every write is one block.
    #[arg(long, default_value = "16K")]
    block: Size,
    /// Concurrent writers, each in its own region of the file.
    #[arg(long, default_value_t = 1)]
    threads: u32,
    /// Durable write method: fsync, fdatasync, odsync, odirect_dsync,
    /// pwritev2_dsync, uring_odirect_dsync or uring_fdatasync.
    #[arg(long, default_value = "odirect_dsync")]
    method: WriteMethod,
    /// Stop after this long (e.g. 30, 30s, 5m); default: until Ctrl-C or
    /// the power cut.
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Stop after this many writes in all.
    #[arg(long)]
    writes: Option<u64>,
    /// Seed of the block choice (default: random).
    #[arg(long)]
    seed: Option<u64>,
    /// How long to keep trying to reconnect to a server that went away.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    reconnect: Duration,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
pub struct VerifyArgs {
    #[command(flatten)]
    recorder: RecorderArgs,
    /// The file `write` wrote.
    #[arg(long)]
    file: PathBuf,
    /// Verify this run (hex id) instead of the newest one of the file (found
    /// in its blocks, or recorded for its path on this host).
    #[arg(long, value_parser = parse_run_id)]
    run: Option<u64>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Most error blocks listed one by one.
    #[arg(long, default_value_t = 100)]
    max_listed: usize,
}

pub fn run(cmd: DiskcheckCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        DiskcheckCommand::Listen(a) => listen(a),
        DiskcheckCommand::Write(a) => write(a),
        DiskcheckCommand::Verify(a) => verify_cmd(a),
    }
}

fn listen(a: ListenArgs) -> anyhow::Result<ExitCode> {
    let (server, report) = server::Server::open(RealVfs::shared(), &a.state, true)?;
    let listener = TcpListener::bind((a.bind.as_str(), a.port))
        .with_context(|| format!("cannot listen on {}:{}", a.bind, a.port))?;
    let handle = server.serve(listener)?;
    eprintln!(
        "listening on {}, records in {} ({} run(s) loaded{})",
        handle.addr(),
        a.state.display(),
        report.runs,
        if report.torn_tails > 0 {
            format!(", {} torn tail(s) cut", report.torn_tails)
        } else {
            String::new()
        }
    );
    let stop = Arc::new(AtomicBool::new(false));
    let s = Arc::clone(&stop);
    ctrlc::set_handler(move || s.store(true, Ordering::SeqCst))?;
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(200));
    }
    handle.shutdown();
    Ok(ExitCode::SUCCESS)
}

fn resolve(addr: &str) -> anyhow::Result<SocketAddr> {
    addr.to_socket_addrs()
        .with_context(|| format!("`{addr}` is not a HOST:PORT address"))?
        .next()
        .with_context(|| format!("`{addr}` resolves to no address"))
}

fn write(a: WriteArgs) -> anyhow::Result<ExitCode> {
    let vfs = RealVfs::shared();
    let target = match (&a.recorder.server, &a.recorder.ack_file) {
        (Some(s), _) => client::Target::Server {
            addr: resolve(s)?,
            retry_for: a.reconnect,
        },
        (None, Some(p)) => client::Target::AckFile(p.clone()),
        (None, None) => unreachable!("clap requires one recorder"),
    };
    let warnings = match &a.recorder.ack_file {
        Some(p) => ack_place::warnings(&a.file, p),
        None => Vec::new(),
    };
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    let block_bytes = u32::try_from(a.block.bytes()).context("--block is too large")?;
    let cfg = client::WriteConfig {
        file: a.file,
        size_bytes: a.size.bytes(),
        block_bytes,
        threads: a.threads,
        method: a.method,
        duration: a.duration,
        max_writes: a.writes,
        seed: a.seed.unwrap_or_else(rand::random),
        run_id: rand::random::<u64>().max(1),
        host: host_name(),
        batch: client::DEFAULT_BATCH,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let s = Arc::clone(&stop);
    ctrlc::set_handler(move || s.store(true, Ordering::SeqCst))?;
    let bar = indicatif::ProgressBar::new_spinner();
    let mut last = (0u64, Duration::ZERO);
    let mut tick = |c: &client::Counters, t: Duration| {
        let n = c.writes.load(Ordering::Relaxed);
        let dt = (t - last.1).as_secs_f64();
        if dt >= 0.5 {
            let now_rate = (n - last.0) as f64 / dt;
            let avg = n as f64 / t.as_secs_f64();
            bar.set_message(format!(
                "{n} durable writes, {now_rate:.0}/s now, {avg:.0}/s average, {:.0} s",
                t.as_secs_f64()
            ));
            bar.tick();
            last = (n, t);
        }
    };
    let summary = client::run(vfs, &target, &cfg, &stop, &mut tick);
    bar.finish_and_clear();
    let mut summary = summary?;
    summary.warnings = warnings;
    if a.json {
        outln!("{}", serde_json::to_string(&summary)?)?;
    } else {
        outln!(
            "run {}: {} durable writes of {} in {:.1} s with {} thread(s), method {}: {:.0} writes/s, {:.1} MiB/s",
            summary.run_id,
            summary.writes,
            a.block,
            summary.seconds,
            summary.threads,
            summary.method,
            summary.writes_per_s,
            summary.mib_per_s
        )?;
        outln!(
            "(a durable write: one block, durable before the recorder is told it was \
             acknowledged; after the power cut, `keel diskcheck verify` with the same --file and \
             recorder counts the acknowledged writes lost; more: docs/diskcheck.md)"
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

fn verify_cmd(a: VerifyArgs) -> anyhow::Result<ExitCode> {
    let vfs = RealVfs::shared();
    let mut source: Box<dyn verify::RunSource> = match (&a.recorder.server, &a.recorder.ack_file) {
        (Some(s), _) => Box::new(verify::ServerSource(resolve(s)?)),
        (None, Some(p)) => Box::new(verify::AckFileSource::new(Arc::clone(&vfs), p.clone())),
        (None, None) => unreachable!("clap requires one recorder"),
    };
    let target = verify::VerifyTarget {
        file: &a.file,
        host: &host_name(),
        run_id: a.run,
    };
    let mut report = verify::verify(vfs.as_ref(), source.as_mut(), &target)?;
    if let Some(p) = &a.recorder.ack_file {
        report.warnings.extend(ack_place::warnings(&a.file, p));
    }
    let listed_all = report.error_blocks.len() <= a.max_listed;
    report.error_blocks.truncate(a.max_listed);
    if a.json {
        outln!("{}", serde_json::to_string(&report)?)?;
    } else {
        print_report(&report, listed_all)?;
    }
    for w in &report.warnings {
        eprintln!("warning: {w}");
    }
    Ok(if report.errors > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn print_report(r: &verify::Report, listed_all: bool) -> Result<(), crate::out::StdoutError> {
    outln!(
        "run {} from {} ({} blocks of {} bytes, {} thread(s), {}), recorded by {}{}",
        r.run_id,
        r.host,
        r.blocks,
        r.block_bytes,
        r.threads,
        r.method,
        r.recorded_by,
        if r.run_ended_cleanly {
            "; the run ended cleanly"
        } else {
            ""
        }
    )?;
    outln!("blocks with an acknowledged write: {}", r.acked)?;
    for (name, count, meaning) in [
        (
            "fine",
            r.fine,
            "the block holds its last acknowledged write",
        ),
        (
            "in flight",
            r.in_flight,
            "a write was under way: old or new content are both correct",
        ),
        (
            "lost",
            r.lost,
            "an error: the block holds an older write than the last acknowledged",
        ),
        (
            "torn",
            r.torn,
            "an error: the block fails its checksum, and no write to it was in flight",
        ),
        (
            "misdirected",
            r.misdirected,
            "an error: the block holds this run's write for another position",
        ),
        (
            "unannounced",
            r.unannounced,
            "an error: newer than anything recorded, the record is incomplete",
        ),
    ] {
        outln!("  {name:<12} {count:>10}  ({meaning})")?;
    }
    outln!("(more: docs/diskcheck.md#what-verify-counts)")?;
    if r.errors == 0 {
        outln!("no error: every acknowledged write was found")?;
        return Ok(());
    }
    if r.acked > 0 && r.lost == r.acked {
        outln!(
            "the disk kept none of its acknowledged writes: all {} blocks acknowledged in this run are lost",
            r.acked
        )?;
    }
    outln!("ERRORS: {}", r.errors)?;
    outln!("errors by seconds before the end of the run:")?;
    for b in &r.histogram {
        outln!("  {:>6} s  {}", b.seconds_before_end, b.errors)?;
    }
    for e in &r.error_blocks {
        let found = e
            .found_gen
            .map_or("damaged".to_string(), |g| format!("generation {g}"));
        outln!(
            "  block {}: {}, acknowledged generation {}, found {found}",
            e.block,
            e.kind.name(),
            e.acked_gen
        )?;
    }
    if !listed_all {
        outln!("  … (more; raise --max-listed)")?;
    }
    Ok(())
}

fn host_name() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// `30`, `30s`, `500ms`, `5m`, `1h`.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (e.g. 30s, 5m)"))?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("`{s}`: unknown unit `{unit}` (use ms, s, m or h)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| format!("`{s}` is out of range"))
}

fn parse_run_id(s: &str) -> Result<u64, String> {
    u64::from_str_radix(s.trim_start_matches("0x"), 16)
        .map_err(|_| format!("`{s}` is not a hex run id"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("x").is_err());
        assert!(parse_duration("5d").is_err());
        assert_eq!(parse_run_id("00ff"), Ok(255));
        assert!(parse_run_id("zz").is_err());
    }

    #[test]
    fn recorded_file_names_agree_across_spellings() {
        let dir = std::env::temp_dir().join(format!("keel-dcname-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let plain = recorded_file_name(&dir.join("f.bin"));
        assert!(Path::new(&plain).is_absolute(), "{plain}");
        let roundabout = dir.join("sub").join("..").join(".").join("f.bin");
        assert_eq!(recorded_file_name(&roundabout), plain);
        // A directory that does not exist is named as given.
        assert_eq!(
            recorded_file_name(Path::new("/no/such/dir/f")),
            "/no/such/dir/f"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_addresses_are_clear_errors() {
        let err = resolve("no-port").unwrap_err();
        assert!(format!("{err:#}").contains("HOST:PORT"), "{err:#}");
    }
}
