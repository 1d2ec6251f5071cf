//! Real processes, real `SIGKILL`, real files.
//!
//! The test binary re-runs itself as a child (`KEEL_CHILD_DIR` set): the
//! child opens the journal on the real file system, appends from several
//! threads and prints `ack LSN THREAD COUNTER LEN` on stdout once each
//! append has returned. The parent kills it at a random moment, reopens the
//! journal and checks that every acknowledged record is there, byte for
//! byte, that the journal is a gap-free run of records the children
//! generated, and that appends continue. Then the next child starts on the
//! same directory (chained).
//!
//! The `strace` audit runs one single-threaded child under `strace` and
//! checks that every acknowledgement (`write(1, "ack …")`) is preceded, on
//! the same thread and since the previous acknowledgement, by a durable
//! write to a segment file: a `pwrite64` on a descriptor opened with
//! `O_DSYNC` (`O_DIRECT|O_DSYNC`), or a `pwrite64` followed by `fdatasync` on
//! that descriptor. Without the sync the test fails.
//!
//! `KEEL_SIGKILL_ROUNDS=N` runs N kills (default: the CI amount).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use keel::io::{RealVfs, WriteMethod};
use keel::journal::{BatchStart, Journal, JournalError, JournalOptions, Lsn};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod kill_support;
use kill_support::kill_and_collect;

const CI_ROUNDS: usize = 220;

fn options(method: WriteMethod) -> JournalOptions {
    let in_flight = std::env::var("KEEL_CHILD_IN_FLIGHT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let start = std::env::var("KEEL_CHILD_START");
    JournalOptions {
        // Small segments so that the children roll over and recycle,
        // growing from 16 KiB after every start.
        segment_size_bytes: 256 << 10,
        first_segment_size_bytes: 16 << 10,
        max_write_bytes: 64 << 10,
        method: Some(method),
        // The child's setting (writes in flight 1, 2, 4 in turn; fresh
        // blocks with more than 1; with 1, each batch start in turn); any
        // setting recovers any journal.
        writes_in_flight: in_flight,
        batch_start: match (in_flight, start.as_deref()) {
            (1, Ok("rewrite")) => BatchStart::RewriteTail,
            (1, Ok("auto")) => BatchStart::Auto,
            _ => BatchStart::FreshBlock,
        },
        ..JournalOptions::default()
    }
}

/// The record a child writes for (thread, counter): self-describing, so the
/// parent can regenerate it and recognise anything else as garbage.
fn record(thread: u32, counter: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len.max(16)];
    v[..4].copy_from_slice(&thread.to_le_bytes());
    v[4..12].copy_from_slice(&counter.to_le_bytes());
    v[12..16].copy_from_slice(&(len as u32).to_le_bytes());
    let mut rng = SmallRng::seed_from_u64(((thread as u64) << 40) ^ counter);
    rng.fill(&mut v[16..]);
    v
}

fn parse_record(p: &[u8]) -> Option<(u32, u64, usize)> {
    if p.len() < 16 {
        return None;
    }
    let thread = u32::from_le_bytes(p[..4].try_into().ok()?);
    let counter = u64::from_le_bytes(p[4..12].try_into().ok()?);
    let len = u32::from_le_bytes(p[12..16].try_into().ok()?) as usize;
    (record(thread, counter, len) == p).then_some((thread, counter, len))
}

/// Open the journal, retrying while its lock is briefly held elsewhere: a
/// process that another test thread forks inherits every descriptor until
/// it execs, the lock file's included, and on a loaded machine that window
/// can outlast the previous holder.
fn open_retrying(dir: &Path, method: WriteMethod) -> Journal {
    let mut tries = 0;
    loop {
        match Journal::open(RealVfs::shared(), dir, options(method)) {
            Err(JournalError::Locked(_)) if tries < 400 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            r => return r.unwrap(),
        }
    }
}

fn method_from_env() -> WriteMethod {
    match std::env::var("KEEL_CHILD_METHOD").as_deref() {
        Ok("fdatasync") => WriteMethod::Fdatasync,
        _ => WriteMethod::OdirectDsync,
    }
}

/// The child: append forever (or `KEEL_CHILD_COUNT` records per thread),
/// printing each acknowledgement.
fn child_main(dir: &Path) {
    let threads: u32 = std::env::var("KEEL_CHILD_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    let count: u64 = std::env::var("KEEL_CHILD_COUNT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(u64::MAX);
    // Counters continue across children so that every record is unique.
    let base: u64 = std::env::var("KEEL_CHILD_BASE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let j = Arc::new(open_retrying(dir, method_from_env()));
    let mut out = std::io::stdout().lock();
    writeln!(out, "open {}", j.next_lsn()).unwrap();
    out.flush().unwrap();
    drop(out);
    let max = j.options().max_record_bytes();
    let run = move |t: u32| {
        let mut rng = SmallRng::seed_from_u64(base ^ ((t as u64) << 20));
        for i in 0..count {
            let counter = base + i;
            let len = match rng.random_range(0..10) {
                0..=7 => rng.random_range(16..300),
                8 => rng.random_range(300..8000),
                _ => rng.random_range(8000..=max.min(60_000)),
            };
            let p = record(t, counter, len);
            let lsn = j.append(&p).unwrap();
            // One write(2) per line: the line is the acknowledgement.
            let line = format!("ack {lsn} {t} {counter} {len}\n");
            let mut out = std::io::stdout().lock();
            out.write_all(line.as_bytes()).unwrap();
            out.flush().unwrap();
        }
    };
    if threads == 1 {
        run(0);
    } else {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let run = run.clone();
                std::thread::spawn(move || run(t))
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    }
}

fn child_command(dir: &Path, threads: u32, base: u64, method: &str, in_flight: usize) -> Command {
    let exe = std::env::current_exe().unwrap();
    let mut c = Command::new(exe);
    c.args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env("KEEL_CHILD_DIR", dir)
        .env("KEEL_CHILD_THREADS", threads.to_string())
        .env("KEEL_CHILD_BASE", base.to_string())
        .env("KEEL_CHILD_METHOD", method)
        .env("KEEL_CHILD_IN_FLIGHT", in_flight.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Not a test on its own: the entry point of the child process.
#[test]
fn child_entry() {
    if let Some(dir) = std::env::var_os("KEEL_CHILD_DIR") {
        child_main(Path::new(&dir));
    }
}

fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Acknowledgements parsed from a child's stdout (a cut last line is not
/// an acknowledgement).
fn parse_acks(out: &str) -> Vec<(Lsn, u32, u64, usize)> {
    out.split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.first() == Some(&"ack")).then(|| {
                (
                    f[1].parse().unwrap(),
                    f[2].parse().unwrap(),
                    f[3].parse().unwrap(),
                    f[4].parse().unwrap(),
                )
            })
        })
        .collect()
}

fn check_recovered(
    dir: &Path,
    method: WriteMethod,
    acked: &BTreeMap<Lsn, (u32, u64, usize)>,
) -> Lsn {
    let j = open_retrying(dir, method);
    let mut got = BTreeMap::new();
    let mut prev: Option<Lsn> = None;
    for r in j.read_from(0).unwrap() {
        let (lsn, p) = r.unwrap();
        if let Some(prev) = prev {
            assert_eq!(lsn, prev + 1, "gap in recovered LSNs");
        }
        prev = Some(lsn);
        let id = parse_record(&p)
            .unwrap_or_else(|| panic!("lsn {lsn}: recovered bytes no child ever appended"));
        got.insert(lsn, id);
    }
    for (lsn, id) in acked {
        match got.get(lsn) {
            Some(g) if g == id => {}
            Some(g) => panic!("acknowledged lsn {lsn} holds {g:?}, expected {id:?}"),
            None => panic!(
                "acknowledged lsn {lsn} lost (recovered {:?}..={:?})",
                got.keys().next(),
                got.keys().last()
            ),
        }
    }
    j.next_lsn()
}

fn kill_campaign(method_name: &str, method: WriteMethod, rounds: usize, seed: u64) {
    let dir = scratch(&format!("sigkill-{method_name}"));
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut acked: BTreeMap<Lsn, (u32, u64, usize)> = BTreeMap::new();
    let mut total_acks = 0usize;
    let mut next = 1;
    for round in 0..rounds {
        let threads = rng.random_range(1..=4);
        let base = (round as u64) << 32;
        let in_flight = [1, 2, 4][round % 3];
        let mut child = child_command(&dir, threads, base, method_name, in_flight);
        child.env(
            "KEEL_CHILD_START",
            ["rewrite", "auto", "fresh"][round / 3 % 3],
        );
        let child = child.spawn().expect("spawn child");
        // Kill anywhere from inside open/recovery to well into appending.
        let after = Duration::from_micros(rng.random_range(1_000..60_000));
        let out = kill_and_collect(child, after);
        let acks = parse_acks(&out);
        total_acks += acks.len();
        for (lsn, t, c, len) in acks {
            // A later child may reuse an LSN only if this one was never
            // acknowledged; an acknowledged one must never be replaced.
            assert!(lsn >= next, "round {round}: lsn {lsn} acknowledged twice");
            acked.insert(lsn, (t, c, len));
        }
        next = check_recovered(&dir, method, &acked);
        // Nothing past the recovered end was ever acknowledged.
        assert!(acked.keys().all(|&l| l < next));
    }
    println!(
        "{method_name}: {rounds} SIGKILLs, {total_acks} acknowledged appends, all recovered; \
         journal ends at lsn {}",
        next - 1
    );
    assert!(
        total_acks > rounds,
        "the children acknowledged too little to test anything ({total_acks})"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn rounds() -> usize {
    std::env::var("KEEL_SIGKILL_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(CI_ROUNDS)
}

#[test]
fn sigkill_odirect_dsync_loses_no_acknowledged_record() {
    kill_campaign("odirect_dsync", WriteMethod::OdirectDsync, rounds(), 1);
}

#[test]
fn sigkill_fdatasync_loses_no_acknowledged_record() {
    kill_campaign("fdatasync", WriteMethod::Fdatasync, rounds() / 2, 2);
}

// ---------------------------------------------------------------------------
// strace audit

fn require_strace() {
    let ok = Command::new("strace")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "`strace` is not installed; run ./scripts/test, which installs what the tests need"
    );
}

/// One strace line: thread id, call name, arguments text, return value.
struct Call {
    tid: u32,
    name: String,
    args: String,
    ret: i64,
}

/// Join the halves of calls that strace split because another thread's call
/// came in between (`… <unfinished ...>`, then `<... name resumed>…`).
fn join_split_calls(text: &str) -> Vec<String> {
    let mut open: BTreeMap<String, String> = BTreeMap::new();
    let mut lines = Vec::new();
    for l in text.lines() {
        let tid = l.split_whitespace().next().unwrap_or("").to_string();
        if let Some(head) = l.strip_suffix(" <unfinished ...>") {
            open.insert(tid, head.to_string());
        } else if let Some(at) = l.find(" resumed>") {
            if let Some(head) = open.remove(&tid) {
                lines.push(format!("{head}{}", &l[at + " resumed>".len()..]));
            }
        } else {
            lines.push(l.to_string());
        }
    }
    lines
}

fn parse_strace(text: &str) -> Vec<Call> {
    join_split_calls(text)
        .iter()
        .filter_map(|l| {
            let (tid, rest) = l.split_once(' ')?;
            let tid: u32 = tid.trim().parse().ok()?;
            let rest = rest.trim_start();
            let open = rest.find('(')?;
            let name = rest[..open].to_string();
            let eq = rest.rfind(" = ")?;
            let args = rest[open + 1..eq]
                .trim_end()
                .trim_end_matches(')')
                .to_string();
            let ret = rest[eq + 3..].split_whitespace().next()?.parse().ok()?;
            Some(Call {
                tid,
                name,
                args,
                ret,
            })
        })
        .collect()
}

fn audit(method_name: &str) {
    require_strace();
    let dir = scratch(&format!("audit-{method_name}"));
    let trace = dir.with_extension("strace");
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("strace")
        .args(["-f", "-qq", "-s", "64", "-o"])
        .arg(&trace)
        .args([
            "-e",
            "trace=openat,write,pwrite64,pwritev,pwritev2,fdatasync,fsync,close",
        ])
        .arg(exe)
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env("KEEL_CHILD_DIR", &dir)
        .env("KEEL_CHILD_THREADS", "1")
        .env("KEEL_CHILD_COUNT", "60")
        .env("KEEL_CHILD_METHOD", method_name)
        .stdin(Stdio::null())
        .output()
        .expect("run strace");
    assert!(out.status.success(), "child under strace failed: {out:?}");
    let text = std::fs::read_to_string(&trace).unwrap();
    let calls = parse_strace(&text);
    let acks = parse_acks(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(acks.len(), 60, "the child acknowledged every append");

    // Descriptors of segment files and whether they were opened O_DSYNC.
    let mut seg_fds: BTreeMap<i64, bool> = BTreeMap::new();
    // Per thread: durable segment writes since its last acknowledgement.
    let mut durable_since_ack: BTreeMap<u32, usize> = BTreeMap::new();
    // Per (thread, fd): a pwrite not yet followed by fdatasync.
    let mut pending: BTreeMap<(u32, i64), bool> = BTreeMap::new();
    let mut audited = 0;
    for c in &calls {
        match c.name.as_str() {
            "openat" if c.args.contains(".seg\"") && c.ret >= 0 => {
                let dsync = c.args.contains("O_DSYNC") || c.args.contains("O_SYNC");
                seg_fds.insert(c.ret, dsync);
            }
            "close" => {
                if let Ok(fd) = c.args.trim().parse::<i64>() {
                    seg_fds.remove(&fd);
                }
            }
            "pwrite64" | "pwritev" | "pwritev2" => {
                let fd: i64 = c.args.split(',').next().unwrap().trim().parse().unwrap();
                if let Some(&dsync) = seg_fds.get(&fd) {
                    assert!(c.ret > 0, "failed segment write: {}", c.args);
                    if dsync || (c.name == "pwritev2" && c.args.contains("RWF_DSYNC")) {
                        *durable_since_ack.entry(c.tid).or_default() += 1;
                    } else {
                        pending.insert((c.tid, fd), true);
                    }
                }
            }
            "fdatasync" | "fsync" => {
                let fd: i64 = c.args.trim().parse().unwrap();
                if pending.remove(&(c.tid, fd)).is_some() && c.ret == 0 {
                    *durable_since_ack.entry(c.tid).or_default() += 1;
                }
            }
            "write" if c.args.starts_with("1, \"ack ") => {
                let n = durable_since_ack.insert(c.tid, 0).unwrap_or(0);
                assert!(
                    n > 0,
                    "{method_name}: acknowledgement `{}` with no durable segment write before it \
                     on thread {}",
                    c.args,
                    c.tid
                );
                audited += 1;
            }
            _ => {}
        }
    }
    assert_eq!(audited, 60, "every acknowledgement audited");
    println!("{method_name}: {audited} acknowledgements, each after a durable segment write");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&trace);
}

#[test]
fn strace_every_ack_follows_a_durable_write_odirect_dsync() {
    audit("odirect_dsync");
}

#[test]
fn strace_every_ack_follows_a_durable_write_fdatasync() {
    audit("fdatasync");
}

#[test]
fn strace_parser_reads_threads_and_returns() {
    let calls = parse_strace(
        "123 openat(AT_FDCWD, \"/d/00000000000000000001.seg\", O_RDWR|O_DSYNC|O_DIRECT|O_CLOEXEC) = 5\n\
         123 pwrite64(5, \"\\0\\0\"..., 4096, 8192) = 4096\n\
         124 fdatasync(5)                    = 0\n\
         123 write(1, \"ack 1 0 0 20\\n\", 13) = 13\n",
    );
    assert_eq!(calls.len(), 4);
    assert_eq!(calls[0].ret, 5);
    assert!(calls[0].args.contains("O_DSYNC"));
    assert_eq!(calls[1].name, "pwrite64");
    assert_eq!(calls[2].tid, 124);
    assert!(calls[3].args.starts_with("1, \"ack "));
    // A call split by another thread's is joined again, in the order it
    // completed.
    let calls = parse_strace(
        "123 pwrite64(5, \"\\0\"..., 53248, 4096 <unfinished ...>\n\
         124 openat(AT_FDCWD, \"/d/3.seg\", O_RDWR) = 6\n\
         123 <... pwrite64 resumed>)           = 53248\n",
    );
    assert_eq!(calls.len(), 2);
    assert_eq!((calls[1].tid, calls[1].name.as_str()), (123, "pwrite64"));
    assert_eq!(calls[1].ret, 53248);
    assert!(calls[1].args.starts_with("5, "));
}

#[test]
fn journal_files_are_private_and_a_second_open_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("perms");
    let j = Journal::open(RealVfs::shared(), &dir, options(WriteMethod::OdirectDsync)).unwrap();
    j.append(b"private").unwrap();
    let second = Journal::open(RealVfs::shared(), &dir, options(WriteMethod::OdirectDsync));
    match second {
        Err(e @ JournalError::Locked(_)) => assert!(e.to_string().contains("in use")),
        other => panic!("second open: {other:?}"),
    }
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let entry = entry.unwrap();
        let mode = entry.metadata().unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "{:?} is mode {mode:o}", entry.path());
        files += 1;
    }
    assert!(files >= 3, "LOCK, the active segment and a spare");
    drop(j);
    let _ = std::fs::remove_dir_all(&dir);
}
