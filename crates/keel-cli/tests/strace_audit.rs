//! The syscall audit: under `strace`, every write method makes exactly the
//! system calls it claims per commit — `pwrite64` + `fdatasync`, `pwrite64`
//! on a descriptor opened with `O_DIRECT|O_DSYNC`, one linked io_uring
//! submission… — and `buffered` makes no sync call. Deterministic, so it is
//! a CI test (the timing comparison with fio is a benchmark, not a test).
//!
//! The bench prepares each file (zero-fill, fallocate, syncs) through one
//! descriptor and reopens it for the timed loop, so the audit takes the
//! *last* open of each bench file as the timed one.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use common::{json, require_tool, scratch};
use keel::io::{OpenMode, WriteMethod};

const COUNT: u64 = 8;
const SIZE: u64 = 16384;
const TRACED: &str =
    "openat,pwrite64,pwritev,pwritev2,fsync,fdatasync,io_uring_enter,io_uring_setup";

/// One open of a bench file and the traced calls made on its descriptor.
#[derive(Debug)]
struct Open {
    file_name: String,
    flags: Vec<String>,
    calls: Vec<String>,
}

/// A traced call: `name(args) = ret`.
struct Call<'a> {
    name: &'a str,
    args: Vec<&'a str>,
    ret: i64,
}

impl<'a> Call<'a> {
    /// Parse `PID name(args) = ret …`; `None` for signals, exits and
    /// calls split across threads (the bench makes its I/O on one thread).
    fn parse(line: &'a str) -> Option<Call<'a>> {
        let line = line.split_once(' ')?.1.trim_start();
        let (name, rest) = line.split_once('(')?;
        // strace pads short calls to align the ` = ret` column.
        let (args, ret) = rest.rsplit_once(" = ")?;
        let args = args.trim_end().strip_suffix(')')?;
        let ret = ret.split_whitespace().next()?.parse().ok()?;
        Some(Call {
            name,
            args: args.split(", ").collect(),
            ret,
        })
    }

    fn fd(&self) -> Option<i64> {
        self.args.first()?.parse().ok()
    }
}

/// Group the traced calls by bench-file open, following descriptors (and
/// io_uring ring descriptors) to the open they belong to.
fn opens_of_bench_files(trace: &str) -> Vec<Open> {
    let mut opens: Vec<Open> = Vec::new();
    let mut by_fd: HashMap<i64, usize> = HashMap::new();
    for call in trace.lines().filter_map(Call::parse) {
        let open_for_fd = call.fd().and_then(|fd| by_fd.get(&fd).copied());
        match call.name {
            "openat" if call.ret >= 0 => {
                let path = call.args[1].trim_matches('"');
                let name = Path::new(path).file_name().unwrap().to_string_lossy();
                if name.starts_with("keel-bench-") {
                    opens.push(Open {
                        file_name: name.into_owned(),
                        flags: call.args[2].split('|').map(String::from).collect(),
                        calls: Vec::new(),
                    });
                    by_fd.insert(call.ret, opens.len() - 1);
                } else {
                    by_fd.remove(&call.ret);
                }
            }
            // The ring is set up right after its file is opened.
            "io_uring_setup" if call.ret >= 0 => match opens.len() {
                0 => drop(by_fd.remove(&call.ret)),
                n => drop(by_fd.insert(call.ret, n - 1)),
            },
            "io_uring_enter" => {
                if let Some(i) = open_for_fd {
                    opens[i]
                        .calls
                        .push(format!("io_uring_enter submit={}", call.args[1]));
                }
            }
            "pwrite64" => {
                if let Some(i) = open_for_fd {
                    let offset = call.args.last().unwrap();
                    opens[i]
                        .calls
                        .push(format!("pwrite64 {}@{offset}", call.ret));
                }
            }
            "pwritev2" | "pwritev" => {
                if let Some(i) = open_for_fd {
                    let flags = if call.args.len() > 4 {
                        call.args[4]
                    } else {
                        "0"
                    };
                    let offset = call.args[3];
                    opens[i]
                        .calls
                        .push(format!("{} {}@{offset} {flags}", call.name, call.ret));
                }
            }
            "fsync" | "fdatasync" => {
                if let Some(i) = open_for_fd {
                    opens[i].calls.push(call.name.to_string());
                }
            }
            _ => {}
        }
    }
    opens
}

/// The calls one commit of `size` bytes in `parts` writes must make, at
/// file offset `offset`.
fn expected_commit(method: WriteMethod, offset: u64, size: u64, parts: u64) -> Vec<String> {
    let part = size / parts;
    let mut calls: Vec<String> = (0..parts)
        .map(|k| {
            let at = offset + k * part;
            match method {
                WriteMethod::Pwritev2Dsync => format!("pwritev2 {part}@{at} RWF_DSYNC"),
                WriteMethod::UringOdirectDsync => "io_uring_enter submit=1".to_string(),
                // The write and its fdatasync go in one submission.
                WriteMethod::UringFdatasync => "io_uring_enter submit=2".to_string(),
                _ => format!("pwrite64 {part}@{at}"),
            }
        })
        .collect();
    match method {
        WriteMethod::Fsync => calls.push("fsync".into()),
        WriteMethod::Fdatasync => calls.push("fdatasync".into()),
        _ => {}
    }
    calls
}

/// Run the bench under strace and return its JSON report and the opens.
fn trace_bench(name: &str, args: &[&str]) -> (serde_json::Value, Vec<Open>) {
    require_tool("strace");
    let dir = scratch(name);
    let trace = dir.join("trace.txt");
    let out = Command::new("strace")
        .args([
            "-f",
            "-qq",
            "-s",
            "0",
            "-e",
            &format!("trace={TRACED}"),
            "-o",
        ])
        .arg(&trace)
        .arg(env!("CARGO_BIN_EXE_keel"))
        .args(["bench", "methods", "--json", "--count", &COUNT.to_string()])
        .args(["--size", &SIZE.to_string(), "--file-size", "1M", "--dir"])
        .arg(&dir)
        .args(args)
        .output()
        .expect("run strace");
    assert!(out.status.success(), "keel under strace failed: {out:?}");
    let text = std::fs::read_to_string(&trace).unwrap();
    (json(&out), opens_of_bench_files(&text))
}

/// Check every method's timed descriptor against its claimed calls.
fn audit(report: &serde_json::Value, opens: &[Open]) -> usize {
    let mut audited = 0;
    for result in report["results"].as_array().unwrap() {
        let method: WriteMethod = result["method"].as_str().unwrap().parse().unwrap();
        let parts = result["writes_per_commit"].as_u64().unwrap();
        if let Some(error) = result["error"].as_str() {
            // A sandbox may refuse io_uring; every other failure is a bug.
            assert!(
                error.contains("io_uring") && method.name().starts_with("uring"),
                "{method} failed: {error}"
            );
            eprintln!("not audited: {method}: {error}");
            continue;
        }
        let tag = format!(
            "-{method}-{}-{parts}x.dat",
            result["prealloc"].as_str().unwrap()
        );
        let timed = opens
            .iter()
            .rev()
            .find(|o| o.file_name.ends_with(&tag))
            .unwrap_or_else(|| panic!("no open of a file ending {tag}"));
        check_flags(method, &timed.flags);
        let expected: Vec<String> = (0..COUNT)
            .flat_map(|i| expected_commit(method, i * SIZE, SIZE, parts))
            .collect();
        assert_eq!(
            timed.calls, expected,
            "{method} ({parts} writes per commit)"
        );
        if method == WriteMethod::Buffered {
            let synced = timed.calls.iter().any(|c| c.contains("sync"));
            assert!(
                !synced,
                "buffered must make no sync call: {:?}",
                timed.calls
            );
        }
        audited += 1;
    }
    audited
}

fn check_flags(method: WriteMethod, flags: &[String]) {
    let has = |f: &str| flags.iter().any(|x| x == f);
    let mode = method.open_mode();
    assert_eq!(has("O_DIRECT"), mode.is_direct(), "{method}: {flags:?}");
    assert_eq!(
        has("O_DSYNC"),
        mode.writes_are_durable(),
        "{method}: {flags:?}"
    );
    assert!(!has("O_SYNC"), "{method}: {flags:?}");
    if method == WriteMethod::Odsync {
        assert_eq!(mode, OpenMode::Dsync);
    }
}

#[test]
fn every_method_makes_exactly_its_syscalls() {
    let all: Vec<&str> = WriteMethod::ALL.iter().map(|m| m.name()).collect();
    // zerofill: the preparation writes a lot through another descriptor,
    // which the audit must not confuse with the timed writes.
    let (report, opens) = trace_bench(
        "all",
        &["--prealloc", "zerofill", "--methods", &all.join(",")],
    );
    let audited = audit(&report, &opens);
    assert!(audited >= 7, "only {audited} methods audited");
    let prep = opens
        .iter()
        .find(|o| o.file_name.contains("-fdatasync-"))
        .unwrap();
    assert!(
        prep.calls
            .iter()
            .any(|c| c.starts_with("pwrite64 1048576@0")),
        "{prep:?}"
    );
}

#[test]
fn split_commits_sync_once_or_write_durably_each_part() {
    let methods = "buffered,fsync,fdatasync,odsync,odirect_dsync,pwritev2_dsync,uring_fdatasync";
    let (report, opens) = trace_bench(
        "split",
        &[
            "--prealloc",
            "none",
            "--writes-per-commit",
            "4",
            "--methods",
            methods,
        ],
    );
    assert!(audit(&report, &opens) >= 6);
}

#[test]
fn parses_strace_lines() {
    let trace = r#"101 openat(AT_FDCWD, "/d/keel-bench-1-fsync-none-1x.dat", O_RDWR|O_CREAT|O_CLOEXEC, 0600) = 3
101 pwrite64(3, ""..., 16384, 0) = 16384
101 fsync(3)                          = 0
101 openat(AT_FDCWD, "/etc/x", O_RDONLY) = 3
101 fsync(3) = 0
101 openat(AT_FDCWD, "/d/keel-bench-1-uring_fdatasync-none-1x.dat", O_RDWR|O_CREAT|O_CLOEXEC, 0600) = 3
101 io_uring_setup(8, {flags=0, sq_entries=8}) = 4
101 io_uring_enter(4, 2, 2, IORING_ENTER_GETEVENTS, NULL, 128) = 2
101 +++ exited with 0 +++"#;
    let opens = opens_of_bench_files(trace);
    assert_eq!(opens.len(), 2);
    assert_eq!(opens[0].calls, ["pwrite64 16384@0", "fsync"]);
    assert_eq!(opens[0].flags, ["O_RDWR", "O_CREAT", "O_CLOEXEC"]);
    assert_eq!(opens[1].calls, ["io_uring_enter submit=2"]);
}
