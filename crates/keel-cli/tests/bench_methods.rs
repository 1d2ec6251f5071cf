//! `keel bench methods` end to end: the JSON report, and bad input that must
//! give a clear error (never a panic) while the other methods still run.

mod common;

use std::time::{Duration, Instant};

use common::{bench_methods, json, keel, leftovers, require_tool, scratch};
use keel::io::WriteMethod;

/// A workload small enough to keep every test well under a second.
const TINY: &[&str] = &["--count", "16", "--file-size", "1M"];

#[test]
fn quick_json_lists_every_method_with_figures() {
    let dir = scratch("quick");
    let out = bench_methods(&dir, &[&["--quick", "--json"], TINY].concat());
    assert!(out.status.success(), "{out:?}");
    let report = json(&out);
    let results = report["results"].as_array().unwrap();
    let names: Vec<&str> = results
        .iter()
        .map(|r| r["method"].as_str().unwrap())
        .collect();
    let all: Vec<&str> = WriteMethod::ALL.iter().map(|m| m.name()).collect();
    assert_eq!(names, all);
    for r in results {
        assert!(r["durable"].is_boolean(), "{r}");
        assert_eq!(r["prealloc"], "fallocate");
        assert_eq!(
            (r["size"].as_u64(), r["count"].as_u64()),
            (Some(16384), Some(16))
        );
        if let Some(e) = r["error"].as_str() {
            // The one failure a sandbox may impose; anything else is a bug.
            assert!(e.contains("io_uring"), "{r}");
            continue;
        }
        let f = |k: &str| {
            r[k].as_f64()
                .unwrap_or_else(|| panic!("{k} missing in {r}"))
        };
        assert!(f("total_ms") > 0.0 && f("commits_per_s") > 0.0 && f("mb_per_s") > 0.0);
        assert!((f("ms_per_write") * 16.0 - f("total_ms")).abs() < 1e-6);
        assert!(f("p50_us") <= f("p99_us") && f("p99_us") <= f("p999_us"));
        assert!(f("p999_us") <= f("max_us"), "{r}");
    }
    let durable = |m: &str| results.iter().find(|r| r["method"] == m).unwrap()["durable"].clone();
    assert_eq!(durable("buffered"), false);
    assert_eq!(durable("fdatasync"), true);
    let machine = &report["machine"];
    for key in [
        "filesystem",
        "mount_options",
        "device",
        "rotational",
        "write_cache",
        "fua",
    ] {
        assert!(
            machine.get(key).is_some(),
            "machine.{key} missing: {machine}"
        );
    }
    for key in [
        "logical_block_size",
        "physical_block_size",
        "kernel",
        "cpus",
    ] {
        assert!(
            machine.get(key).is_some(),
            "machine.{key} missing: {machine}"
        );
    }
    assert!(leftovers(&dir).is_empty(), "{:?}", leftovers(&dir));
}

#[test]
fn text_report_is_a_markdown_table() {
    let dir = scratch("text");
    let out = bench_methods(&dir, &[&["--methods", "buffered,fdatasync"], TINY].concat());
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("machine: "), "{text}");
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with('|')).collect();
    assert_eq!(rows.len(), 4, "{text}");
    assert!(rows[0].contains("total ms") && rows[0].contains("ms/write"));
    assert!(rows[2].starts_with("| buffered ") && rows[2].trim_end().ends_with("| no      |"));
    assert!(rows[3].starts_with("| fdatasync ") && rows[3].contains("| yes"));
    // A legend: one line per term, then where the docs say more.
    let legend = text.split("\nTerms:\n").nth(1).expect("a legend");
    for term in [
        "- method: ",
        "- prealloc: ",
        "- total ms, ms/write: ",
        "- durable: ",
    ] {
        assert!(legend.contains(term), "{term}: {legend}");
    }
    assert!(
        legend.contains("More: docs/toolkit.md#keel-bench-methods"),
        "{legend}"
    );
}

#[test]
fn misaligned_direct_io_is_an_error_entry_and_others_still_run() {
    let dir = scratch("misaligned");
    let args = [
        "--methods",
        "odirect_dsync,fdatasync",
        "--size",
        "1000",
        "--json",
    ];
    let out = bench_methods(&dir, &[&args[..], TINY].concat());
    assert!(out.status.success(), "one method ran, so success: {out:?}");
    let results = json(&out)["results"].as_array().unwrap().clone();
    let error = results[0]["error"]
        .as_str()
        .expect("odirect_dsync must fail");
    assert!(
        error.contains("multiple of") && error.contains("1000"),
        "{error}"
    );
    assert!(results[1].get("error").is_none(), "{}", results[1]);
    assert!(results[1]["commits_per_s"].as_f64().unwrap() > 0.0);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("odirect_dsync/fallocate: error:"),
        "{stderr}"
    );
}

#[test]
fn every_method_failing_is_a_failure_exit() {
    let dir = scratch("allfail");
    let args = [
        "--methods",
        "odirect,odirect_dsync",
        "--size",
        "1000",
        "--json",
    ];
    let out = bench_methods(&dir, &[&args[..], TINY].concat());
    assert!(!out.status.success());
    assert_eq!(json(&out)["results"].as_array().unwrap().len(), 2);
}

#[test]
fn missing_dir_is_created_and_left_clean() {
    let dir = scratch("missing").join("a/b/c");
    let out = bench_methods(
        &dir,
        &[&["--methods", "fdatasync", "--prealloc", "both"], TINY].concat(),
    );
    assert!(out.status.success(), "{out:?}");
    assert!(dir.is_dir());
    assert!(leftovers(&dir).is_empty(), "{:?}", leftovers(&dir));
}

#[test]
fn unwritable_dir_is_a_clear_error() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("readonly");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    // root ignores directory permissions; sysfs refuses new files even to root.
    let target = if std::fs::write(dir.join("probe"), b"").is_ok() {
        std::path::PathBuf::from("/sys")
    } else {
        dir.clone()
    };
    let out = bench_methods(&target, TINY);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot create files in"), "{stderr}");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn too_small_a_disk_is_a_clear_error() {
    let dir = scratch("nospace");
    let out = bench_methods(&dir, &["--file-size", "100T", "--count", "4"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not enough free space"), "{stderr}");
    assert!(leftovers(&dir).is_empty());
}

#[test]
fn bad_arguments_are_errors_not_panics() {
    let dir = scratch("badargs");
    for args in [
        &["--size", "0"][..],
        &["--count", "0"],
        &["--size", "12X"],
        &["--methods", "O_DIRECT"],
        &["--count", "100", "--file-size", "64K"],
        &["--writes-per-commit", "3"],
        &["--writes-per-commit", "0"],
        &["--split", "--writes-per-commit", "2"],
        &["--vs-fio", "--methods", "buffered"],
    ] {
        let out = bench_methods(&dir, args);
        assert!(!out.status.success(), "{args:?} must fail");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("error"), "{args:?}: {stderr}");
    }
}

#[test]
fn split_runs_odsync_at_five_write_sizes_and_plots() {
    let dir = scratch("split");
    let svg = dir.join("latency.svg");
    let out = bench_methods(
        &dir,
        &[
            "--split",
            "--json",
            "--count",
            "4",
            "--file-size",
            "64K",
            "--plot",
            svg.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let results = json(&out)["results"].as_array().unwrap().clone();
    let splits: Vec<(u64, u64)> = results
        .iter()
        .map(|r| {
            assert_eq!(r["method"], "odsync");
            (
                r["writes_per_commit"].as_u64().unwrap(),
                r["write_size"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        splits,
        [(1, 16384), (2, 8192), (4, 4096), (8, 2048), (16, 1024)]
    );
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert!(plot.starts_with("<svg") && plot.contains("odsync/fallocate (16 × 1 KiB)"));
}

#[test]
fn tmpfs_gives_per_method_results_without_panic() {
    let shm = std::path::Path::new("/dev/shm");
    let is_tmpfs = keel::io::DeviceInfo::for_path(shm).fs_type.as_deref() == Some("tmpfs");
    if !is_tmpfs {
        eprintln!("no tmpfs at /dev/shm on this machine; nothing to check");
        return;
    }
    let dir = shm.join(format!("keel-cli-test-{}", std::process::id()));
    let out = bench_methods(
        &dir,
        &[&["--json", "--methods", "fdatasync,odirect_dsync"], TINY].concat(),
    );
    let report = json(&out);
    assert_eq!(report["machine"]["filesystem"], "tmpfs");
    assert!(out.status.success(), "fdatasync works on tmpfs: {out:?}");
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for r in results {
        assert_eq!(
            r["durable"], false,
            "nothing on tmpfs survives a power cut: {r}"
        );
    }
    assert!(leftovers(&dir).is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn ctrl_c_removes_the_bench_file() {
    let dir = scratch("ctrlc");
    let child = keel()
        .args([
            "bench",
            "methods",
            "--methods",
            "fdatasync",
            "--prealloc",
            "fallocate",
        ])
        .args([
            "--count",
            "1000000",
            "--size",
            "4K",
            "--file-size",
            "4G",
            "--dir",
        ])
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while leftovers(&dir)
        .iter()
        .all(|n| !n.starts_with("keel-bench-"))
    {
        assert!(Instant::now() < deadline, "the bench file never appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill(2) with a pid we spawned and still own (not yet waited).
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(rc, 0);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("interrupted"));
    assert!(leftovers(&dir).is_empty(), "{:?}", leftovers(&dir));
}

#[test]
fn vs_fio_reports_a_ratio() {
    require_tool("fio");
    let dir = scratch("fio");
    let args = [
        "--vs-fio",
        "--methods",
        "fdatasync",
        "--rounds",
        "2",
        "--json",
    ];
    let out = bench_methods(
        &dir,
        &[&args[..], &["--count", "32", "--file-size", "1M"]].concat(),
    );
    assert!(out.status.success(), "{out:?}");
    let report = json(&out);
    assert_eq!(
        report["results"].as_array().unwrap().len(),
        2,
        "one Keel run per round"
    );
    let vs = &report["vs_fio"][0];
    assert_eq!(vs["method"], "fdatasync");
    assert!(vs["fio_flags"].as_str().unwrap().contains("--fdatasync=1"));
    assert_eq!(vs["fio_commits_per_s"].as_array().unwrap().len(), 2);
    let ratio = vs["ratio"]
        .as_f64()
        .unwrap_or_else(|| panic!("no ratio: {vs}"));
    assert!(ratio > 0.0, "{vs}");
    assert!(leftovers(&dir).is_empty(), "{:?}", leftovers(&dir));
}
