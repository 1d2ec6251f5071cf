//! The syscall audit of `bench sizes`, `bench mixed` and `bench mmap`:
//! under `strace -y` (which names each descriptor's file), every durable
//! variant makes the sync calls it claims, on the file it claims, as often
//! as its report says — and the non-durable ones make none.

mod common;

use std::process::Command;

use common::{json, require_tool, scratch};

/// One traced call on a bench file (or an `msync`, which names no file).
#[derive(Debug, Clone, PartialEq)]
struct Event {
    name: String,
    /// The bench file's name (`keel-bench-…`), empty for `msync`.
    file: String,
    /// `openat` flags, or the byte count of a read or write.
    detail: String,
}

fn parse(trace: &str) -> Vec<Event> {
    let mut events = Vec::new();
    for line in trace.lines() {
        let Some((_pid, call)) = line.trim_start().split_once(' ') else {
            continue;
        };
        let call = call.trim_start();
        let Some((name, rest)) = call.split_once('(') else {
            continue;
        };
        let Some((args, _ret)) = rest.rsplit_once(" = ") else {
            continue;
        };
        let args: Vec<&str> = args.trim_end().trim_end_matches(')').split(", ").collect();
        let file_of = |s: &str| {
            let path = s
                .split_once('<')
                .map_or("", |(_, p)| p.trim_end_matches('>'));
            let name = path.rsplit('/').next().unwrap_or("");
            name.starts_with("keel-bench-").then(|| name.to_string())
        };
        let event = match name {
            "openat" => file_of(rest.rsplit_once(" = ").unwrap().1).map(|file| Event {
                name: name.into(),
                file,
                detail: args[2].to_string(),
            }),
            "pwrite64" | "pread64" => file_of(args[0]).map(|file| Event {
                name: name.into(),
                file,
                detail: args[2].to_string(),
            }),
            "fsync" | "fdatasync" => file_of(args[0]).map(|file| Event {
                name: name.into(),
                file,
                detail: String::new(),
            }),
            "msync" => Some(Event {
                name: name.into(),
                file: String::new(),
                detail: args[2].to_string(),
            }),
            _ => None,
        };
        events.extend(event);
    }
    events
}

/// Run `keel args… --json --dir` under strace; the report and the events.
fn trace(name: &str, args: &[&str]) -> (serde_json::Value, Vec<Event>) {
    require_tool("strace");
    let dir = scratch(name);
    let out_file = dir.join("trace.txt");
    let out = Command::new("strace")
        .args(["-f", "-qq", "-y", "-s", "0", "-e"])
        .arg("trace=openat,pwrite64,pread64,fsync,fdatasync,msync")
        .arg("-o")
        .arg(&out_file)
        .arg(env!("CARGO_BIN_EXE_keel"))
        .args(args)
        .arg("--json")
        .arg("--dir")
        .arg(&dir)
        .output()
        .expect("run strace");
    assert!(out.status.success(), "keel under strace failed: {out:?}");
    let text = std::fs::read_to_string(&out_file).unwrap();
    (json(&out), parse(&text))
}

/// The events on `file` after its last open (the timed descriptor).
fn timed<'a>(events: &'a [Event], file_part: &str) -> (&'a Event, Vec<&'a Event>) {
    let last_open = events
        .iter()
        .rposition(|e| e.name == "openat" && e.file.contains(file_part))
        .unwrap_or_else(|| panic!("no open of {file_part}"));
    let open = &events[last_open];
    // Up to the next bench file's open: an `msync` names no file.
    let after = events[last_open + 1..]
        .iter()
        .take_while(|e| e.name != "openat" || e.file == open.file)
        .filter(|e| e.file == open.file || e.file.is_empty())
        .collect();
    (open, after)
}

#[test]
fn sizes_durable_writes_use_odirect_dsync_and_buffered_syncs_once() {
    let (report, events) = trace(
        "st-sizes",
        &[
            "bench",
            "sizes",
            "--sizes",
            "16K",
            "--total",
            "128K",
            "--parallel",
            "1",
        ],
    );
    assert_eq!(report["results"].as_array().unwrap().len(), 2);
    let (open, calls) = timed(&events, "sizes-durable-16384-1w");
    assert!(
        open.detail.contains("O_DIRECT") && open.detail.contains("O_DSYNC"),
        "{open:?}"
    );
    let writes: Vec<&str> = calls.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        writes, ["pwrite64"; 8],
        "durable: 8 writes, every one durable by itself"
    );
    let (open, calls) = timed(&events, "sizes-buffered-16384-1w");
    assert!(
        !open.detail.contains("O_DIRECT") && !open.detail.contains("O_DSYNC"),
        "{open:?}"
    );
    let names: Vec<&str> = calls.iter().map(|e| e.name.as_str()).collect();
    let mut expected = vec!["pwrite64"; 8];
    expected.push("fdatasync");
    assert_eq!(names, expected, "buffered: 8 writes, then one fdatasync");
}

#[test]
fn mixed_fsyncs_after_every_write_only_in_the_fsync_variant() {
    let (report, events) = trace(
        "st-mixed",
        &[
            "bench",
            "mixed",
            "--set-size",
            "256K",
            "--files",
            "1",
            "--threads",
            "1",
            "--duration",
            "0.2",
        ],
    );
    let results = report["results"].as_array().unwrap();
    let count = |i: usize, k: &str| results[i][k].as_u64().unwrap() as usize;
    let (open, calls) = timed(&events, "mixed-0");
    assert!(
        open.detail.contains("O_DIRECT") && !open.detail.contains("O_DSYNC"),
        "{open:?}"
    );
    assert_eq!(zero_blocks(results), 0);
    let names: Vec<&str> = calls.iter().map(|e| e.name.as_str()).collect();
    let writes = names.iter().filter(|n| **n == "pwrite64").count();
    let reads = names.iter().filter(|n| **n == "pread64").count();
    let fsyncs = names.iter().filter(|n| **n == "fsync").count();
    assert_eq!(writes, count(0, "writes") + count(1, "writes"));
    assert_eq!(reads, count(0, "reads") + count(1, "reads"));
    assert_eq!(
        fsyncs,
        count(1, "writes"),
        "one fsync per write of the fsync variant"
    );
    // Every fsync directly follows a write, and the no_sync variant (which
    // runs first) makes none: no fsync before its last write.
    for (i, n) in names.iter().enumerate() {
        if *n == "fsync" {
            assert_eq!(names[i - 1], "pwrite64", "{names:?}");
        }
    }
    let first_fsync = names.iter().position(|n| *n == "fsync").unwrap();
    let no_sync_writes = names[..first_fsync]
        .iter()
        .filter(|n| **n == "pwrite64")
        .count();
    assert_eq!(no_sync_writes, count(0, "writes") + 1);
}

fn zero_blocks(results: &[serde_json::Value]) -> u64 {
    results
        .iter()
        .map(|r| r["zero_blocks_read"].as_u64().unwrap())
        .sum()
}

#[test]
fn mmap_variants_make_one_sync_per_transaction() {
    let (report, events) = trace(
        "st-mmap",
        &[
            "bench",
            "mmap",
            "--transactions",
            "4",
            "--puts",
            "10",
            "--region",
            "1M",
            "--prealloc",
            "zerofill",
        ],
    );
    assert_eq!(report["results"].as_array().unwrap().len(), 5);
    let tx = "1160";
    for (variant, per_tx) in [
        ("sequential", vec!["pwrite64", "fdatasync"]),
        (
            "small_writes",
            [vec!["pwrite64"; 10], vec!["fdatasync"]].concat(),
        ),
        ("random_4k", vec!["pwrite64", "fdatasync"]),
        ("mmap_random", vec!["msync", "fdatasync"]),
        ("sequential_read_map", vec!["pwrite64", "fdatasync"]),
    ] {
        let (_, calls) = timed(&events, &format!("mmap-{variant}.dat"));
        // The timed loop, then the untimed read-back of the last transaction.
        let names: Vec<&str> = calls.iter().map(|e| e.name.as_str()).collect();
        let mut expected: Vec<&str> = per_tx.repeat(4);
        expected.push("pread64");
        assert_eq!(names, expected, "{variant}");
        let sizes: Vec<&str> = calls
            .iter()
            .filter(|e| e.name != "fdatasync")
            .map(|e| e.detail.as_str())
            .collect();
        let want = match variant {
            "small_writes" => "116",
            "mmap_random" => "MS_SYNC",
            _ => tx,
        };
        assert!(
            sizes[..sizes.len() - 1].iter().all(|s| *s == want),
            "{variant}: {sizes:?}"
        );
    }
}

#[test]
fn parses_strace_y_lines() {
    let trace = r#"7  openat(AT_FDCWD</d>, "d/keel-bench-7-mmap-sequential.dat", O_RDWR|O_CLOEXEC) = 3</d/keel-bench-7-mmap-sequential.dat>
7  pwrite64(3</d/keel-bench-7-mmap-sequential.dat>, ""..., 11600, 0) = 11600
7  msync(0x7f7caad31000, 11600, MS_SYNC) = 0
7  fdatasync(3</d/keel-bench-7-mmap-sequential.dat>) = 0
7  fsync(4</d>) = 0"#;
    let events = parse(trace);
    let names: Vec<&str> = events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["openat", "pwrite64", "msync", "fdatasync"]);
    assert_eq!(events[0].detail, "O_RDWR|O_CLOEXEC");
    assert_eq!(events[1].detail, "11600");
    assert_eq!(events[2].detail, "MS_SYNC");
}
