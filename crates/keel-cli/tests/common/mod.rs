//! Helpers shared by the `keel` binary's integration tests.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The built `keel` binary.
pub fn keel() -> Command {
    Command::new(env!("CARGO_BIN_EXE_keel"))
}

/// A fresh, empty scratch directory under the target directory (a real
/// disk file system: /tmp may be tmpfs, where O_DIRECT behaves differently).
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("keel-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Run `keel bench methods` with `args` and a tiny default workload.
pub fn bench_methods(dir: &Path, args: &[&str]) -> Output {
    let out = keel()
        .args(["bench", "methods", "--dir"])
        .arg(dir)
        .args(args)
        .output()
        .expect("run keel");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "keel panicked:\n{stderr}");
    out
}

/// Parse the JSON object `--json` prints on stdout.
pub fn json(out: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON object ({e}):\n{stdout}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The bench files left in `dir`.
pub fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("keel-") || n.starts_with(".keel-"))
                .collect()
        })
        .unwrap_or_default()
}

/// Fail (never skip) when a tool the tests need is missing.
pub fn require_tool(tool: &str) {
    let found = Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "`{tool}` is not installed; run ./scripts/test, which installs what the tests need"
    );
}

/// Every file under `dir` (recursively), with its bytes: to check that a
/// command changed none of them.
pub fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.insert(p.clone(), std::fs::read(&p).unwrap());
        }
    }
    out
}

/// A store's tables: name → key → value.
pub type Tables = BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>;

/// Every table of the store at `path` and its entries, read through the
/// library after `check` passed.
pub fn contents(path: &Path) -> Tables {
    let db = keel::db::Database::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    db.check().unwrap();
    let read = db.begin_read();
    let mut out = Tables::new();
    for name in read.list_tables().unwrap() {
        let t = read.open_table(&name).unwrap();
        let entries = t
            .iter()
            .map(|kv| {
                let (k, v) = kv.unwrap();
                (k.as_bytes().to_vec(), v.as_bytes().to_vec())
            })
            .collect();
        out.insert(name, entries);
    }
    drop(read);
    db.close().unwrap();
    out
}
