//! `keel bench commit` speaks the commit-benchmark protocol: all flags in
//! the protocol's order, one JSON line on stdout with the named fields, a
//! nonzero exit and an `error` field on failure, on the store (the default
//! engine), the journal and the raw floor; and `keel bench journal
//! --vs-raw --quick` prints its table. Small counts: these check the
//! interface, not the speed.

mod common;

use std::path::Path;
use std::process::Output;

use common::{keel, scratch};

/// Run with the protocol's flags, in its order: `(threads, size, count,
/// duration, batch)`.
fn protocol(dir: &Path, workload: &str, n: (u32, u64, u64, f64, u32), extra: &[&str]) -> Output {
    let (threads, size, count, duration, batch) = n;
    let out = keel()
        .args(["bench", "commit", "--workload", workload])
        .args(["--threads", &threads.to_string()])
        .args(["--size", &size.to_string()])
        .args(["--count", &count.to_string()])
        .args(["--duration", &duration.to_string()])
        .arg("--dir")
        .arg(dir)
        .args(["--batch", &batch.to_string()])
        .args(extra)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    out
}

/// The last JSON line on stdout, as the protocol reads it.
fn last_json(out: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rfind(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON line in {stdout:?}"));
    serde_json::from_str(line).unwrap()
}

fn check_fields(v: &serde_json::Value) {
    for f in [
        "commits_per_s",
        "p50_us",
        "p99_us",
        "p999_us",
        "max_us",
        "total_ms",
        "ms_per_commit",
        "commits",
        "ops",
        "ops_per_s",
    ] {
        assert!(v[f].is_number(), "{f} missing in {v}");
    }
    assert!(v["commits_per_s"].as_f64().unwrap() > 0.0);
    let info = &v["info"];
    for f in [
        "context_switches_per_commit",
        "cpu_us_per_commit",
        "steal_ms",
        "before_timing",
        "method",
    ] {
        assert!(!info[f].is_null(), "info.{f} missing in {v}");
    }
    assert!(info["disk_interrupt_cpus"].is_array(), "{v}");
    // Each commit counted once, on the CPU it returned on.
    if let Some(by_cpu) = info["commits_by_cpu"].as_object() {
        let counted: u64 = by_cpu.values().map(|n| n.as_u64().unwrap()).sum();
        assert_eq!(Some(counted), v["commits"].as_u64(), "{v}");
    } else {
        assert_eq!(info["workload"], "r1", "commits_by_cpu missing in {v}");
    }
}

#[test]
fn w1_w2_w3_on_the_journal() {
    let dir = scratch("bench-commit");
    let journal = ["--engine", "journal"];
    let out = protocol(&dir, "w1", (1, 16384, 64, 0.0, 1), &journal);
    assert!(out.status.success(), "{out:?}");
    let v = last_json(&out);
    check_fields(&v);
    assert_eq!(v["commits"], 64);
    assert_eq!(v["info"]["engine"], "journal");
    assert_eq!(
        v["info"]["writes"], 64,
        "one commit at a time: one write each"
    );

    let out = protocol(&dir, "w2", (4, 128, 0, 0.2, 1), &journal);
    assert!(out.status.success(), "{out:?}");
    let v = last_json(&out);
    check_fields(&v);
    assert!(v["commits"].as_u64().unwrap() > 0);
    assert_eq!(v["info"]["threads"], 4);

    let out = protocol(&dir, "w3", (1, 100, 20, 0.0, 10), &journal);
    assert!(out.status.success(), "{out:?}");
    let v = last_json(&out);
    check_fields(&v);
    assert_eq!(
        (v["commits"].as_u64(), v["ops"].as_u64()),
        (Some(20), Some(200))
    );
    assert_eq!(v["info"]["record_bytes"], 4 + 10 * (6 + 16 + 100));

    // The files are gone; the directory stays (it was given).
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The store's fields besides the protocol's.
fn check_store_fields(v: &serde_json::Value) {
    check_fields(v);
    let info = &v["info"];
    assert_eq!(info["engine"], "store", "{v}");
    for f in [
        "checkpoints",
        "checkpoint_pages",
        "checkpoint_ms",
        "writes",
        "records_per_write",
        "cache_hits",
        "cache_misses",
    ] {
        assert!(info[f].is_number(), "info.{f} missing in {v}");
    }
    assert_eq!(info["options"]["durability"], "immediate", "{v}");
}

/// Per commit: waiting for the writer, building, commit's part with the
/// writer, the rest of the commit call; serial = the writer part.
fn check_serial_fields(v: &serde_json::Value) {
    let info = &v["info"];
    let f = |name: &str| {
        info[name]
            .as_f64()
            .unwrap_or_else(|| panic!("info.{name} missing in {v}"))
    };
    assert!(f("begin_wait_us_per_commit") >= 0.0);
    // Small blind commits may each insert their own puts without the
    // slot (direct commits); any other takes the slot.
    let direct = info["direct_commits"].as_u64().expect("direct_commits");
    let commits = info["store_commits"].as_u64().expect("store_commits");
    assert!(direct <= commits, "{v}");
    if direct < commits {
        assert!(f("commit_writer_us_per_commit") > 0.0, "{v}");
    }
    assert!(f("commit_call_us_per_commit") >= f("commit_writer_us_per_commit"));
    assert!(f("build_us_per_commit") >= 0.0);
    // The build holds no slot (a blind transaction): serial = the slot's.
    let serial = f("commit_writer_us_per_commit");
    assert!((f("serial_us_per_commit") - serial).abs() < 0.05, "{v}");
    assert!(f("commits_per_group") >= 1.0, "{v}");
    assert!(
        info["commit_groups"].as_u64().is_some_and(|g| g >= 1),
        "{v}"
    );
    assert_eq!(info["store_commits"], v["commits"], "{v}");
    assert!(info["after_timing"].is_string(), "{v}");
}

#[test]
fn store_is_the_default_and_runs_every_workload() {
    let dir = scratch("bench-commit-store");
    let out = protocol(&dir, "w1", (1, 16384, 20, 0.0, 1), &[]);
    assert!(out.status.success(), "{out:?}");
    let v = last_json(&out);
    check_store_fields(&v);
    check_serial_fields(&v);
    assert_eq!(v["commits"], 20);
    // A type byte, then per put 7 bytes of op and lengths, the table's
    // 4-byte id and the 16-byte key, the value.
    assert_eq!(v["info"]["record_bytes"], 1 + 7 + 4 + 16 + 16384);
    assert_eq!(v["info"]["writes"], 20, "one commit at a time: {v}");

    let out = protocol(&dir, "w2", (4, 128, 0, 0.3, 1), &["--engine", "store"]);
    assert!(out.status.success(), "{out:?}");
    let v = last_json(&out);
    check_store_fields(&v);
    check_serial_fields(&v);
    assert!(v["commits"].as_u64().unwrap() > 0);
    assert_eq!(v["info"]["threads"], 4);

    let out = protocol(&dir, "w3", (1, 100, 20, 0.0, 10), &[]);
    assert!(out.status.success(), "{out:?}");
    let v = last_json(&out);
    check_store_fields(&v);
    check_serial_fields(&v);
    assert_eq!(
        (v["commits"].as_u64(), v["ops"].as_u64()),
        (Some(20), Some(200))
    );
    assert_eq!(v["info"]["record_bytes"], 1 + 10 * (7 + 4 + 16 + 100));
    assert_eq!(v["info"]["options"]["background_cpus"], "any", "{v}");
    assert!(v["info"]["background_cpus"].is_null(), "{v}");

    // r1: a few thousand keys, two readers for a second; every get found
    // its key (a missing one fails the run).
    let out = protocol(&dir, "r1", (2, 100, 3000, 1.0, 500), &[]);
    assert!(out.status.success(), "{out:?}");
    let v = last_json(&out);
    check_store_fields(&v);
    let info = &v["info"];
    assert_eq!(info["workload"], "r1");
    assert_eq!(
        (info["keys"].as_u64(), info["threads"].as_u64()),
        (Some(3000), Some(2))
    );
    assert_eq!(info["gets_per_read_txn"], 1);
    assert!(info["tree_depth"].as_u64().unwrap() >= 2, "{v}");
    assert!(info["value_byte_sum"].is_number(), "{v}");
    assert_eq!(info["checkpoints"], 0, "nothing written while reading: {v}");
    assert!(info["before_timing"]
        .as_str()
        .unwrap()
        .contains("loaded 3000"));
    let gets = v["commits"].as_u64().unwrap();
    assert!(gets > 100, "{v}");
    // An r1 "commit" is one get: ops are the gets, not gets × the load's
    // batch.
    assert_eq!(v["ops"].as_u64(), Some(gets), "{v}");
    let rate = v["commits_per_s"].as_f64().unwrap();
    let total_s = v["total_ms"].as_f64().unwrap() / 1e3;
    // Both figures are printed rounded (0.1 gets/s, 0.01 ms): the
    // product drifts by up to ~1e-5 of the count.
    assert!(
        (rate * total_s - gets as f64).abs() < 2.0 + gets as f64 * 1e-4,
        "gets per second: {v}"
    );
    assert!((0.9..3.0).contains(&total_s), "{v}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("gets/s"));

    // The store's directory is gone; the given directory stays.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The store's budgets by flag (reported as set), readers beside the
/// committers, and what the run cost: peak memory, bytes written and
/// their ratio to the user's bytes, the files' sizes, the close.
#[test]
fn store_budgets_readers_and_costs() {
    let dir = scratch("bench-commit-budgets");
    let out = protocol(
        &dir,
        "w3",
        (1, 100, 200, 0.0, 50),
        &[
            "--cache-size",
            "8M",
            "--checkpoint-dirty",
            "1M",
            "--backpressure-dirty",
            "4M",
            "--readers",
            "1",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let v = last_json(&out);
    check_store_fields(&v);
    let info = &v["info"];
    let o = &info["options"];
    assert_eq!(
        (
            o["cache_bytes"].as_u64(),
            o["checkpoint_dirty_bytes"].as_u64(),
            o["backpressure_dirty_bytes"].as_u64()
        ),
        (Some(8 << 20), Some(1 << 20), Some(4 << 20)),
        "{v}"
    );
    let n = |f: &str| {
        info[f]
            .as_f64()
            .unwrap_or_else(|| panic!("info.{f} missing in {v}"))
    };
    // 10,000 puts of 116 bytes: ~1.1 MiB of records, past the 1 MiB that
    // starts a checkpoint.
    assert!(n("checkpoints_to_close") >= 1.0, "{v}");
    assert_eq!(n("user_bytes"), (200 * 50 * (16 + 100)) as f64, "{v}");
    assert!(n("journal_bytes_written") >= n("user_bytes"), "{v}");
    assert!(n("data_bytes_written") > 0.0, "{v}");
    let wa = (n("journal_bytes_written") + n("data_bytes_written")) / n("user_bytes");
    assert!((n("write_amplification") - wa).abs() < 0.01, "{v}");
    assert!(
        n("data_file_bytes") > 0.0 && n("journal_dir_bytes") > 0.0,
        "{v}"
    );
    assert!(n("peak_rss_bytes") > (1 << 20) as f64, "{v}");
    assert!(n("peak_anon_bytes") > (1 << 20) as f64, "{v}");
    assert!(n("peak_anon_bytes") <= n("peak_rss_bytes"), "{v}");
    assert!(n("close_ms") >= 0.0, "{v}");
    assert!(
        n("commits_per_s_to_close") <= v["commits_per_s"].as_f64().unwrap() + 0.1,
        "{v}"
    );
    assert_eq!(info["readers"], 1, "{v}");
    assert!(n("reader_gets_per_s") > 0.0, "{v}");

    // The flags belong to the store engine, and r1's threads read.
    let out = protocol(
        &dir,
        "w3",
        (1, 100, 20, 0.0, 10),
        &["--engine", "journal", "--cache-size", "8M"],
    );
    assert!(!out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("store engine only"));
    let out = protocol(&dir, "r1", (1, 100, 100, 0.2, 100), &["--readers", "1"]);
    assert!(!out.status.success(), "{out:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--background-cpus`: the store's helper and checkpointer kept to one
/// CPU, by request; a bad list is refused before anything runs.
#[test]
fn store_background_cpus_by_request() {
    let dir = scratch("bench-commit-background");
    let out = protocol(
        &dir,
        "w3",
        (1, 100, 20, 0.0, 10),
        &["--background-cpus", "0"],
    );
    assert!(out.status.success(), "{out:?}");
    let v = last_json(&out);
    assert_eq!(v["info"]["options"]["background_cpus"], "only 0", "{v}");
    assert_eq!(v["info"]["background_cpus"], serde_json::json!([0]), "{v}");
    let out = protocol(
        &dir,
        "w3",
        (1, 100, 20, 0.0, 10),
        &["--background-cpus", "3-1"],
    );
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("list of CPUs"),
        "{out:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn raw_floor_speaks_the_same_protocol() {
    let dir = scratch("bench-commit-raw");
    let out = protocol(&dir, "w1", (1, 16384, 32, 0.0, 1), &["--engine", "raw"]);
    assert!(out.status.success(), "{out:?}");
    let v = last_json(&out);
    check_fields(&v);
    assert_eq!(v["info"]["engine"], "raw");
    // The 16-byte key and the 16 KiB value, padded to 5 blocks.
    assert_eq!(v["info"]["bytes_per_commit"], 20480);
    let out = protocol(&dir, "w3", (1, 100, 10, 0.0, 100), &["--engine", "raw"]);
    assert!(out.status.success(), "{out:?}");
    let v = last_json(&out);
    assert_eq!(v["ops"], 1000);
    // The protocol's w3 floor: the keys and values alone, 100 × (16 + 100).
    assert_eq!(v["info"]["bytes_per_commit"], 11600);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn failures_exit_nonzero_with_an_error_field() {
    let dir = scratch("bench-commit-err");
    // r1 needs a store.
    for (engine, what) in [("journal", "the journal"), ("raw", "the raw floor")] {
        let out = protocol(&dir, "r1", (1, 100, 1000, 3.0, 1000), &["--engine", engine]);
        assert!(!out.status.success());
        assert_eq!(
            last_json(&out)["error"],
            format!("r1 needs a store; {what} has no reads")
        );
        assert!(String::from_utf8_lossy(&out.stderr).contains("r1 needs a store"));
    }
    // r1 needs keys to load and a duration to read for.
    for n in [(1, 100, 0, 1.0, 100), (1, 100, 1000, 0.0, 100)] {
        let out = protocol(&dir, "r1", n, &[]);
        assert_eq!(out.status.code(), Some(1), "{n:?}: {out:?}");
        assert!(last_json(&out)["error"].is_string(), "{out:?}");
    }
    // Neither a count nor a duration.
    let out = protocol(&dir, "w2", (1, 128, 0, 0.0, 1), &[]);
    assert!(!out.status.success());
    assert!(last_json(&out)["error"].is_string());
    // Both a count and a duration; no thread; a batch outside w3.
    for (workload, n) in [
        ("w1", (1, 16384, 10, 1.0, 1)),
        ("w2", (0, 128, 0, 1.0, 1)),
        ("w1", (1, 16384, 10, 0.0, 5)),
    ] {
        let out = protocol(&dir, workload, n, &[]);
        assert_eq!(out.status.code(), Some(1), "{workload} {n:?}: {out:?}");
        assert!(last_json(&out)["error"].is_string(), "{out:?}");
    }
    // A directory that cannot be made (below a file).
    let file = dir.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let out = protocol(&file.join("sub"), "w1", (1, 16384, 10, 0.0, 1), &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(last_json(&out)["error"].is_string(), "{out:?}");
    std::fs::remove_file(&file).unwrap();
    // Not a workload, not a size, not a number: clap's usage error.
    for bad in [
        ["--workload", "w9", "--size", "128"],
        ["--workload", "w1", "--size", "12Q"],
        ["--workload", "w1", "--threads", "many"],
    ] {
        let out = keel().args(["bench", "commit"]).args(bad).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{bad:?}: {out:?}");
    }
    // Nothing was left behind by the failed runs.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sizes_take_suffixes_and_the_dir_is_created() {
    let dir = scratch("bench-commit-dir");
    let nested = dir.join("not/yet");
    let out = keel()
        .args(["bench", "commit", "--workload", "w1", "--threads", "1"])
        .args(["--size", "4K", "--count", "8", "--duration", "0", "--dir"])
        .arg(&nested)
        .args(["--batch", "1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v = last_json(&out);
    assert_eq!(v["info"]["size"], 4096, "{v}");
    assert_eq!(v["commits"], 8);
    assert!(nested.is_dir());
    assert_eq!(std::fs::read_dir(&nested).unwrap().count(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn vs_raw_quick_prints_ratios() {
    let dir = scratch("bench-journal");
    let out = keel()
        .args(["bench", "journal", "--vs-raw", "--quick", "--json", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v = last_json(&out);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "w1, w2 T=1 and T=16: {v}");
    for r in rows {
        assert!(r["ratio"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["raw_median"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["raw_threads"], 1, "the protocol's one-thread floor: {r}");
    }
    // Each run is a `keel bench commit` process with the protocol's flags,
    // first and in the protocol's order; its result is that process's line.
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(
        runs.len(),
        5,
        "raw and journal w1, raw w2, journal w2 T=1 and 16: {v}"
    );
    for r in runs {
        let cmd = r["command"].as_str().unwrap();
        let flags: Vec<&str> = cmd.split(' ').filter(|w| w.starts_with("--")).collect();
        assert!(cmd.starts_with("keel bench commit --workload "), "{cmd}");
        assert_eq!(
            flags[..7],
            [
                "--workload",
                "--threads",
                "--size",
                "--count",
                "--duration",
                "--dir",
                "--batch"
            ],
            "{cmd}"
        );
        assert!(
            cmd.contains(&format!("--engine {}", r["engine"].as_str().unwrap())),
            "{cmd}"
        );
        assert_eq!(r["result"]["info"]["engine"], r["engine"], "{r}");
        assert!(r["result"]["commits_per_s"].as_f64().unwrap() > 0.0, "{r}");
    }
    // A failing run reports the command it ran.
    let out = keel()
        .args([
            "bench",
            "journal",
            "--quick",
            "--segment-size",
            "4K",
            "--dir",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("keel bench commit --workload"), "{err}");
    // The floor at every T, in the table.
    let out = keel()
        .args([
            "bench",
            "journal",
            "--vs-raw",
            "--quick",
            "--raw-threads",
            "each",
        ])
        .arg("--dir")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("| journal/raw |"), "{table}");
    assert!(table.contains("the floor at the same T and R"), "{table}");
    for term in [
        "- raw (the raw floor): ",
        "- batch start: ",
        "- records/write: ",
    ] {
        assert!(table.contains(term), "{term}: {table}");
    }
    assert_eq!(table.lines().filter(|l| l.starts_with("| w2 ")).count(), 2);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    // Bad input: a thread count of 0.
    let out = keel()
        .args(["bench", "journal", "--vs-raw", "--threads", "0", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Under `strace`: the durable writes each engine's commits claim. Returns
/// the sizes of `pwrite64` calls on descriptors opened with `O_DSYNC`
/// whose file name ends with `suffix`, and those on other descriptors.
fn traced_writes(engine: &str, suffix: &str) -> (Vec<u64>, Vec<u64>) {
    common::require_tool("strace");
    let dir = scratch(&format!("bench-commit-strace-{engine}"));
    let trace = dir.join("trace.txt");
    let out = std::process::Command::new("strace")
        .args([
            "-f",
            "-qq",
            "-y",
            "-s",
            "0",
            "-e",
            "trace=openat,pwrite64",
            "-o",
        ])
        .arg(&trace)
        .arg(env!("CARGO_BIN_EXE_keel"))
        .args(["bench", "commit", "--workload", "w1", "--threads", "1"])
        .args([
            "--size",
            "16384",
            "--count",
            "50",
            "--duration",
            "0",
            "--dir",
        ])
        .arg(dir.join("run"))
        .args(["--batch", "1", "--engine", engine])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(last_json(&out)["commits"], 50);
    let text = std::fs::read_to_string(&trace).unwrap();
    // fd → open flags, as opens come and go.
    let mut flags = std::collections::HashMap::new();
    let (mut durable, mut other) = (Vec::new(), Vec::new());
    for line in text.lines() {
        let Some((_, call)) = line.trim_start().split_once(' ') else {
            continue;
        };
        let call = call.trim_start();
        if let Some(rest) = call.strip_prefix("openat(") {
            let Some((args, ret)) = rest.rsplit_once(") = ") else {
                continue;
            };
            let fd = ret.split('<').next().unwrap_or("").to_string();
            let f = args.split(", ").nth(2).unwrap_or("").to_string();
            flags.insert(fd, f);
        } else if let Some(rest) = call.strip_prefix("pwrite64(") {
            let args: Vec<&str> = rest.split(", ").collect();
            let (fd, path) = args[0].split_once('<').unwrap_or((args[0], ""));
            if !path.trim_end_matches('>').ends_with(suffix) {
                continue;
            }
            let size: u64 = args[2].parse().unwrap();
            if flags.get(fd).is_some_and(|f| f.contains("O_DSYNC")) {
                durable.push(size);
            } else {
                other.push(size);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    (durable, other)
}

#[test]
fn strace_every_commit_is_a_durable_write() {
    // The raw floor: after the zero-fill (large writes), one
    // O_DIRECT|O_DSYNC write per commit of the 16-byte key and the 16 KiB
    // value, padded to 5 blocks.
    let (durable, _) = traced_writes("raw", "raw-floor.dat");
    let (fill, commits) = durable.split_at(durable.len().saturating_sub(50));
    assert_eq!(commits, vec![20480; 50]);
    assert!(
        fill.iter().all(|&n| n >= 65536),
        "zero-fill chunks: {fill:?}"
    );
    // The journal: one O_DIRECT|O_DSYNC write of 5 blocks per commit (16,410
    // bytes of record and 32 of header), besides segment headers (one
    // block each); zero-fill writes go through a descriptor without
    // O_DSYNC, followed by fdatasync.
    let (durable, other) = traced_writes("journal", ".seg");
    let commits: Vec<u64> = durable.iter().copied().filter(|&n| n != 4096).collect();
    assert_eq!(commits, vec![20480; 50], "{durable:?}");
    assert!(other.iter().all(|&n| n == 1 << 20), "{other:?}");
}

/// Whether `got`, a ratio printed to 0.001, is `num / den`, both printed
/// rounded to whole numbers. The figures before rounding lay within 0.5
/// of them, so their ratio within `(num − 0.5) / (den + 0.5)` to
/// `(num + 0.5) / (den − 0.5)`: a relative error of up to `0.5 / num +
/// 0.5 / den`, which an absolute bound cannot hold at every magnitude
/// (12504 / 350: ±0.05). `got` lies within 0.0005 more. No other slack:
/// the bench prints the figures and the ratio from the same medians, and
/// a looser bound would let a ratio of another reference pass.
fn ratio_of_rounded(got: f64, num: f64, den: f64) -> bool {
    assert!(den > 0.5, "a median of {den}");
    let lo = (num - 0.5).max(0.0) / (den + 0.5);
    let hi = (num + 0.5) / (den - 0.5);
    let slack = 0.0005 + hi * 1e-9;
    (lo - slack..=hi + slack).contains(&got)
}

/// The check of a printed ratio against its printed figures allows their
/// rounding, at any magnitude (a slow machine's small rates too), and
/// still catches a ratio inverted, off by 1%, or of another reference.
#[test]
fn ratios_of_rounded_figures_are_checked_relatively() {
    // A reference run at ~350/s: 12504.4 / 350.4 printed as 12504 and 350.
    assert!(ratio_of_rounded(35.686, 12504.0, 350.0));
    assert!(ratio_of_rounded(0.903, 8393.0, 9297.0));
    assert!(!ratio_of_rounded(0.028, 12504.0, 350.0), "inverted");
    assert!(!ratio_of_rounded(1.107, 8393.0, 9297.0), "inverted");
    assert!(!ratio_of_rounded(35.686 * 1.01, 12504.0, 350.0), "1% off");
    // w3's store over the journal's 9,529 where the raw floor's was asked.
    assert!(
        !ratio_of_rounded(0.881, 8393.0, 9297.0),
        "another reference"
    );
}

/// `keel bench store --noise` (one round): the second runs are the
/// journal's beside w3 and w1, and those rows give the journal against
/// itself — the second run's median over the first's, the two runs kept
/// apart; w2 has none.
fn check_noise(runs: &[serde_json::Value], rows: &[serde_json::Value]) {
    let again: Vec<(&str, &str)> = runs
        .iter()
        .filter(|r| r["again"] == true)
        .map(|r| {
            (
                r["workload"].as_str().unwrap(),
                r["engine"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(again, [("w3", "journal"), ("w1", "journal")]);
    for row in &rows[..2] {
        let noise = &row["noise"];
        // One round: one first and one second journal run, kept apart.
        assert_eq!(noise["per_s"].as_array().unwrap().len(), 1, "{row}");
        let first = row["references"]["journal"]["per_s"].as_array().unwrap();
        assert_eq!(first.len(), 1, "{row}");
        let again = noise["median"].as_f64().unwrap();
        let journal = row["references"]["journal"]["median"].as_f64().unwrap();
        let got = noise["ratio"].as_f64().unwrap();
        assert!(ratio_of_rounded(got, again, journal), "{row}");
    }
    assert!(rows[2]["noise"].is_null(), "{}", rows[2]);
}

/// `keel bench store --quick`: every run a protocol process, the rows with
/// their references, ratios and targets, nothing left in `--dir`.
#[test]
fn bench_store_quick_reports_targets() {
    let dir = scratch("bench-store");
    let out = keel()
        .args([
            "bench", "store", "--quick", "--r1", "--noise", "--json", "--dir",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v = last_json(&out);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(
        runs.len(),
        11,
        "w3 ×3 and the journal again, w1 ×2 and the journal again, w2 ×2, r1 ×2: {v}"
    );
    for r in runs {
        let cmd = r["command"].as_str().unwrap();
        assert!(cmd.starts_with("keel bench commit --workload "), "{cmd}");
        check_fields(&r["result"]);
        assert_eq!(r["result"]["info"]["engine"], r["engine"], "{r}");
    }
    let rows = v["rows"].as_array().unwrap();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["workload"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["w3", "w1", "w2", "r1", "r1"]);
    let w3 = &rows[0];
    assert!(w3["store_median"].as_f64().unwrap() > 0.0, "{w3}");
    assert!(w3["steal_ms"].as_f64().is_some(), "{w3}");
    // Lone `Immediate` transactions of 100 puts: published as runs,
    // inserted by the helper afterwards (all of them by the time the run
    // ends: its `close` inserts those still waiting, but after the counts
    // are taken, so up to 16 may be missing); none overlapped.
    let inserted = w3["runs"]["commits"].as_u64().unwrap();
    assert!((400..=500).contains(&inserted), "{w3}");
    assert!(
        w3["runs"]["apply_us_per_commit"].as_f64().unwrap() > 0.0,
        "{w3}"
    );
    assert_eq!(w3["overlap"]["commits"].as_u64().unwrap(), 0, "{w3}");
    for reference in ["raw", "journal"] {
        let r = &w3["references"][reference];
        let store = w3["store_median"].as_f64().unwrap();
        let median = r["median"].as_f64().unwrap();
        let got = r["store_ratio"].as_f64().unwrap();
        assert!(
            ratio_of_rounded(got, store, median),
            "{reference}: {got} vs {store} / {median}"
        );
    }
    check_noise(runs, rows);
    let targets = w3["targets"].as_array().unwrap();
    assert_eq!(targets.len(), 2, "{w3}");
    assert!(targets.iter().all(|t| t["met"].is_boolean()), "{w3}");
    assert_eq!(rows[1]["targets"].as_array().unwrap().len(), 1);
    // The w2 target is for 64 threads; the quick run uses 16.
    assert_eq!(rows[2]["threads"], 16);
    assert!(rows[2]["targets"].as_array().unwrap().is_empty());
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    // The table, and bad input.
    let out = keel()
        .args(["bench", "store", "--quick", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("| w3 "), "{table}");
    assert!(table.contains("steal ms"), "{table}");
    assert!(table.contains("store / raw ≥ 0.8"), "{table}");
    assert!(!table.contains("The journal against itself"), "{table}");
    assert!(
        table.contains("published as runs that readers search, and were inserted"),
        "{table}"
    );
    let legend = table.split("\nTerms:\n").nth(1).expect("a legend");
    for term in [
        "- store: ",
        "- raw (the raw floor): ",
        "- w1, w2, w3, r1: ",
        "- serial µs: the writer slot",
        "- runs, helper: ",
        "More: docs/bench-commit.md",
    ] {
        assert!(legend.contains(term), "{term}: {legend}");
    }
    let out = keel()
        .args(["bench", "store", "--w2-threads", "0", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--help` lists the engines with the default, the store, first, and
/// says what each one is.
#[test]
fn help_lists_the_engines_default_first() {
    let out = keel().args(["bench", "commit", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    let at = |s: &str| {
        help.find(s)
            .unwrap_or_else(|| panic!("{s} missing: {help}"))
    };
    let (store, journal, raw) = (at("- store:"), at("- journal:"), at("- raw:"));
    assert!(store < journal && journal < raw, "{help}");
    assert!(help[store..journal].contains("The default"), "{help}");
    assert!(help[journal..raw].contains("journal alone"), "{help}");
    assert!(help[raw..].contains("bare durable writes"), "{help}");
    assert!(help.contains("[default: store]"), "{help}");
}
