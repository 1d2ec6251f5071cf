//! Passes the versions of the engines' crates, as `Cargo.lock` resolved
//! them, to the binary (`KEEL_BENCH_VERSIONS`: `name=version;…`), so that
//! every report says what it measured.

use std::fmt::Write as _;

const CRATES: &[&str] = &[
    "keel",
    "rocksdb",
    "librocksdb-sys",
    "heed",
    "lmdb-master-sys",
    "rusqlite",
    "libsqlite3-sys",
    "redb",
    "fjall",
    "lsm-tree",
];

fn main() {
    println!("cargo:rerun-if-changed=Cargo.lock");
    let lock = std::fs::read_to_string("Cargo.lock").unwrap_or_default();
    let mut out = String::new();
    let mut name: Option<&str> = None;
    for line in lock.lines() {
        if let Some(n) = line.strip_prefix("name = \"") {
            name = n.strip_suffix('"');
        } else if let Some(v) = line.strip_prefix("version = \"") {
            if let (Some(n), Some(v)) = (name.take(), v.strip_suffix('"')) {
                if CRATES.contains(&n) {
                    let _ = write!(out, "{n}={v};");
                }
            }
        }
    }
    println!("cargo:rustc-env=KEEL_BENCH_VERSIONS={out}");
}
