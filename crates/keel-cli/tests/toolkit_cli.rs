//! `keel bench sizes`, `bench mixed`, `bench mmap` and `keel probe` end to
//! end, with tiny workloads: every variant is reported, bad input is a clear
//! error (never a panic), and no file is left behind.

mod common;

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use common::{json, keel, leftovers, scratch};

fn run(dir: &Path, args: &[&str]) -> Output {
    let out = keel()
        .args(args)
        .arg("--dir")
        .arg(dir)
        .output()
        .expect("run keel");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "keel panicked:\n{stderr}");
    out
}

fn f(r: &serde_json::Value, k: &str) -> f64 {
    r[k].as_f64()
        .unwrap_or_else(|| panic!("{k} missing in {r}"))
}

fn assert_machine(report: &serde_json::Value) {
    let m = &report["machine"];
    for key in [
        "filesystem",
        "mount_options",
        "write_cache",
        "fua",
        "kernel",
        "cpus",
    ] {
        assert!(m.get(key).is_some(), "machine.{key} missing: {m}");
    }
}

#[test]
fn sizes_quick_json_reports_every_series_mode_and_size() {
    let dir = scratch("sizes");
    let svg = dir.join("sizes.svg");
    let out = run(
        &dir,
        &[
            "bench",
            "sizes",
            "--quick",
            "--json",
            "--total",
            "256K",
            "--plot",
            svg.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let report = json(&out);
    assert_eq!(report["bench"], "sizes");
    assert_machine(&report);
    let results = report["results"].as_array().unwrap();
    let has = |series: &str, writers: u64, mode: &str, size: u64| {
        results.iter().any(|r| {
            r["series"] == series
                && r["writers"].as_u64() == Some(writers)
                && r["mode"] == mode
                && r["size"].as_u64() == Some(size)
        })
    };
    for size in [4, 16, 32, 64, 128, 256, 1024, 2048, 4096, 8192, 16384] {
        for mode in ["buffered", "durable"] {
            assert!(
                has("sequential", 1, mode, size << 10),
                "sequential {mode} {size} KiB"
            );
        }
    }
    for mode in ["buffered", "durable"] {
        assert!(has("parallel", 4, mode, 4096), "parallel {mode}");
        assert!(
            has("separate_files", 4, mode, 4096),
            "separate files {mode}"
        );
        assert!(has("threads", 128, mode, 8192), "128 threads {mode}");
    }
    for r in results {
        assert!(r.get("error").is_none(), "{r}");
        assert!(
            f(r, "mb_per_s") > 0.0 && f(r, "total_ms") >= f(r, "write_ms"),
            "{r}"
        );
        assert_eq!(r["sync_ms"].is_number(), r["mode"] == "buffered", "{r}");
        assert!(f(r, "p50_us") <= f(r, "max_us"), "{r}");
        assert!(r["total_bytes"].as_u64().unwrap() >= r["size"].as_u64().unwrap());
    }
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    assert!(leftovers(&dir).is_empty(), "{:?}", leftovers(&dir));
}

#[test]
fn sizes_text_and_a_misaligned_durable_size() {
    let dir = scratch("sizes-text");
    let out = run(
        &dir,
        &["bench", "sizes", "--sizes", "1000,4K", "--total", "64K"],
    );
    assert!(out.status.success(), "buffered runs worked: {out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("machine: ") && text.contains("| sequential buffered |"),
        "{text}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("durable 1000 B: error:") && stderr.contains("multiple of"),
        "{stderr}"
    );
    assert!(
        text.contains("\nTerms:\n- sequential, parallel ×N"),
        "{text}"
    );
    assert!(leftovers(&dir).is_empty());
}

/// Every text report ends with its legend: one line per term, then where
/// the docs say more; `--json` has none.
#[test]
fn text_reports_end_with_a_legend() {
    let dir = scratch("legend");
    for (args, terms) in [
        (
            &[
                "bench",
                "mixed",
                "--quick",
                "--set-size",
                "1M",
                "--duration",
                "0.1",
            ][..],
            &["- no_sync, fsync_every_write: ", "- reads/s, writes/s: "][..],
        ),
        (
            &[
                "bench",
                "mmap",
                "--quick",
                "--transactions",
                "5",
                "--region",
                "1M",
            ],
            &["- total ms, tx/s, ops/s: ", "- × sequential: "],
        ),
    ] {
        let out = run(&dir, args);
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let legend = text.split("\nTerms:\n").nth(1).expect("a legend");
        for term in terms {
            assert!(legend.contains(term), "{args:?} {term}: {legend}");
        }
        assert!(
            legend.contains("More: docs/toolkit.md#keel-bench-"),
            "{legend}"
        );
        let out = run(&dir, &[args, &["--json"]].concat());
        assert!(!String::from_utf8(out.stdout).unwrap().contains("Terms:"));
    }
    assert!(leftovers(&dir).is_empty());
}

#[test]
fn mixed_quick_json_reports_both_variants_from_random_data() {
    let dir = scratch("mixed").join("new/sub");
    let out = run(
        &dir,
        &[
            "bench",
            "mixed",
            "--quick",
            "--json",
            "--set-size",
            "1M",
            "--duration",
            "0.2",
            "--threads",
            "2",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let report = json(&out);
    assert_eq!(report["bench"], "mixed");
    assert_machine(&report);
    assert_eq!(report["config"]["block"], 16384);
    let results = report["results"].as_array().unwrap();
    let names: Vec<&str> = results
        .iter()
        .map(|r| r["variant"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["no_sync", "fsync_every_write"]);
    for r in results {
        assert!(f(r, "reads") > 0.0 && f(r, "writes") > 0.0, "{r}");
        assert!(
            f(r, "read_mib_per_s") > 0.0 && f(r, "write_mib_per_s") > 0.0,
            "{r}"
        );
        assert_eq!(
            r["zero_blocks_read"], 0,
            "reads must see the random fill: {r}"
        );
        for lat in ["read_latency", "write_latency"] {
            assert!(f(&r[lat], "p50_us") <= f(&r[lat], "p99_us"), "{r}");
        }
    }
    assert_eq!(results[1]["sync_after_write"], "fsync");
    assert!(leftovers(&dir).is_empty(), "{:?}", leftovers(&dir));
}

#[test]
fn mmap_quick_json_reports_every_variant() {
    let dir = scratch("mmap");
    for prealloc in ["none", "zerofill"] {
        let out = run(
            &dir,
            &[
                "bench",
                "mmap",
                "--quick",
                "--json",
                "--transactions",
                "20",
                "--region",
                "1M",
                "--prealloc",
                prealloc,
            ],
        );
        assert!(out.status.success(), "{out:?}");
        let report = json(&out);
        assert_eq!(report["bench"], "mmap");
        assert_eq!(report["config"]["prealloc"], prealloc);
        assert_eq!(report["config"]["tx_bytes"], 11_600);
        assert_machine(&report);
        let results = report["results"].as_array().unwrap();
        let names: Vec<&str> = results
            .iter()
            .map(|r| r["variant"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "sequential",
                "small_writes",
                "random_4k",
                "mmap_random",
                "sequential_read_map"
            ]
        );
        for r in results {
            assert!(r.get("error").is_none(), "{r}");
            let ratio = f(r, "ops_per_s") / f(r, "tx_per_s");
            assert!((ratio - 100.0).abs() < 1e-6, "{r}");
        }
        let summary = report["summary"].as_array().unwrap();
        assert_eq!(summary.len(), 5);
        assert_eq!(summary[0]["variant"], "sequential");
        assert_eq!(summary[0]["median_vs_sequential"], 1.0);
    }
    assert!(leftovers(&dir).is_empty(), "{:?}", leftovers(&dir));
}

#[test]
fn bad_input_is_a_clear_error_not_a_panic() {
    let dir = scratch("bad");
    for (args, expected) in [
        (
            &["bench", "mmap", "--prealloc", "sparse"][..],
            "invalid value 'sparse'",
        ),
        (&["bench", "mmap", "--transactions", "0"], "--transactions"),
        (&["bench", "mmap", "--region", "1K"], "--region"),
        (&["bench", "sizes", "--sizes", "0"], "--sizes"),
        (&["bench", "sizes", "--total", "0"], "--total"),
        (
            &["bench", "sizes", "--prealloc", "both"],
            "invalid value 'both'",
        ),
        (
            &["bench", "sizes", "--separate-files"],
            "--separate-files needs",
        ),
        (&["bench", "mixed", "--set-size", "0"], "--set-size"),
        (&["bench", "mixed", "--block", "0"], "--block"),
        (&["bench", "mixed", "--threads", "0"], "--threads"),
        (
            &["bench", "sizes", "--total", "100T"],
            "not enough free space",
        ),
        (&["probe", "--count", "0"], "--count"),
        (&["probe", "--total", "0"], "--total"),
        (&["probe", "--budget", "0"], "--budget"),
        (&["probe", "--budget", "5x"], "unknown unit"),
    ] {
        let out = run(&dir, args);
        assert!(!out.status.success(), "{args:?} must fail");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
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
    for args in [
        &["bench", "sizes", "--quick"][..],
        &["bench", "mixed", "--quick"],
        &["bench", "mmap", "--quick"],
        &["probe"],
    ] {
        let out = run(&target, args);
        assert!(!out.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("cannot create files in"),
            "{args:?}: {stderr}"
        );
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A probe small enough for CI: every step, tiny figures.
const TINY_PROBE: &[&str] = &[
    "probe",
    "--count",
    "16",
    "--total",
    "256K",
    "--mixed-duration",
    "0.1",
    "--transactions",
    "10",
];

#[test]
fn probe_json_has_every_step_and_a_justified_verdict() {
    let dir = scratch("probe");
    let out = keel()
        .args(TINY_PROBE)
        .args(["--json", "--out", "report"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let report = json(&out);
    assert_eq!(report["bench"], "probe");
    assert_machine(&report);
    let v = &report["verdict"];
    assert!(v["method"].is_string() && v["prealloc"].is_string(), "{v}");
    assert!(v["reasons"].as_array().unwrap().len() >= 4, "{v}");
    assert!(v["warnings"].is_array(), "{v}");
    assert_eq!(report["rules"]["flush_floor_us"], 50.0);
    assert_eq!(report["durable_floor"].as_array().unwrap().len(), 28);
    assert_eq!(report["sizes"].as_array().unwrap().len(), 14);
    assert_eq!(report["scaling"].as_array().unwrap().len(), 7);
    assert_eq!(report["mixed"]["results"].as_array().unwrap().len(), 2);
    assert_eq!(report["mmap"]["results"].as_array().unwrap().len(), 5);
    // The default scratch folder is gone; the saved report is what is left.
    let saved = std::fs::read_to_string(dir.join("report.json")).unwrap();
    let saved: serde_json::Value = serde_json::from_str(&saved).unwrap();
    assert_eq!(saved["verdict"], report["verdict"]);
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        md.contains("## Verdict") && md.contains("## 3. Parallel scaling"),
        "{md}"
    );
    assert!(md.contains("## Terms\n\n* **durable**: "), "{md}");
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["report.json", "report.md"]);
}

#[test]
fn ctrl_c_during_probe_removes_its_files_and_folder() {
    let dir = scratch("probe-ctrlc");
    let child = keel()
        .arg("probe")
        .current_dir(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let bench_file_exists = || {
        std::fs::read_dir(&dir).unwrap().any(|e| {
            let p = e.unwrap().path();
            p.is_dir() && !leftovers(&p).is_empty()
        })
    };
    while !bench_file_exists() {
        assert!(Instant::now() < deadline, "no bench file appeared");
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: kill(2) with a pid we spawned and still own (not yet waited).
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(rc, 0);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{out:?}");
    assert!(
        std::fs::read_dir(&dir).unwrap().next().is_none(),
        "{:?}",
        leftovers(&dir)
    );
}

/// `--budget`: a calibration prices every step and the counts are cut so
/// the probe ends in time; the report says what was cut and how many
/// operations each figure then rests on. A full probe takes far longer
/// than 6 s on any machine (its mixed load alone runs 2 × 2 s).
#[test]
fn probe_keeps_its_budget_and_says_what_it_cut() {
    const BUDGET_S: f64 = 6.0;
    // Process start, the machine description, removing the files, and a
    // machine that slows down after the calibration.
    const SLACK_S: f64 = 3.0;
    let dir = scratch("probe-budget");
    let base = dir.join("report");
    let started = Instant::now();
    let out = run(
        &dir.join("files"),
        &[
            "probe",
            "--budget",
            "6s",
            "--json",
            "--out",
            base.to_str().unwrap(),
        ],
    );
    let wall_s = started.elapsed().as_secs_f64();
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report = json(&out);
    let b = &report["budget"];
    assert_eq!(b["budget_s"], BUDGET_S, "{b}");
    assert_eq!(b["cut"], true, "{b}");
    assert!(stderr.contains("counts are cut to"), "{stderr}");
    let quantities = b["quantities"].as_array().unwrap();
    let floor = quantities
        .iter()
        .find(|u| u["step"] == "durable_floor")
        .unwrap();
    assert!(f(floor, "used_max") < f(floor, "nominal"), "{floor}");
    assert!(f(floor, "share") < 1.0, "{floor}");
    // Every floor run made the count the report claims, and the confidence
    // figures count the same writes.
    let figures = report["confidence"]["figures"].as_array().unwrap();
    for r in report["durable_floor"].as_array().unwrap() {
        let count = f(r, "count");
        assert!(
            count >= f(floor, "used_min") && count <= f(floor, "used_max"),
            "{r}"
        );
        let run = format!(
            "{}/{} {} KiB",
            r["method"].as_str().unwrap(),
            r["prealloc"].as_str().unwrap(),
            r["size"].as_u64().unwrap() >> 10
        );
        let fig = figures.iter().find(|x| x["run"] == run.as_str());
        let fig = fig.unwrap_or_else(|| panic!("no figure for {run}"));
        assert_eq!(f(fig, "samples"), count, "{fig}");
    }
    let md = std::fs::read_to_string(base.with_extension("md")).unwrap();
    assert!(
        md.contains("**Counts were cut to fit the 6 s budget**")
            && md.contains("## Budget and confidence"),
        "{md}"
    );
    // In time — unless the calibration said even the least counts cannot
    // fit here (syncs of several ms under load), which the probe must then
    // say, and still stay near that least.
    if b["predicted_over_budget"] == false {
        assert!(
            wall_s <= BUDGET_S + SLACK_S,
            "took {wall_s:.1} s with a {BUDGET_S} s budget: {b}"
        );
    } else {
        assert!(stderr.contains("even at the least counts"), "{stderr}");
        let least_s = f(b, "predicted_least_s");
        assert!(wall_s <= 2.0 * least_s + SLACK_S, "{wall_s} {b}");
    }
    assert_eq!(b["over_budget"], f(b, "elapsed_s") > BUDGET_S, "{b}");
    assert!(leftovers(&dir.join("files")).is_empty());
}
