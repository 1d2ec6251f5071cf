//! The damage matrix through the `keel` binary: the stores and the damage
//! of `crates/keel/tests/matrix/mod.rs` (included below, so both tests run
//! one table), and for each cell what `keel db check` says (exit 0 for a
//! store that opens with every commit it must keep, a torn tail noted;
//! exit 1 naming the segment and byte, or the page, of damage; exit 1
//! saying the store opens and keeps every commit for damage the checkpoint
//! covers), what `keel db salvage` reports lost (its exit code, its lost
//! LSNs), and that the salvaged store passes `keel db check` with every
//! commit it should hold. The damaged store's files must not change.

mod common;
#[path = "../../keel/tests/matrix/mod.rs"]
mod matrix;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::process::Output;
use std::time::Instant;

use common::{json, keel, scratch};
use matrix::{Built, Cell, Loss, Mode, Open, Row, Target, MATRIX};
use serde_json::Value;

fn db(args: &[&str]) -> Output {
    let out = keel().arg("db").args(args).output().expect("run keel");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "keel panicked:\n{stderr}");
    out
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("an exit code")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `keel db check` on the damaged store, in JSON and in text, against the
/// cell's promise.
fn check_damaged(b: &Built, cell: &Cell, open: Open, t: &Target, store: &Path) {
    let out = db(&["check", s(store), "--json"]);
    let v = json(&out);
    let text_out = db(&["check", s(store)]);
    let text = String::from_utf8_lossy(&text_out.stdout);
    assert_eq!(code(&text_out), code(&out), "{text}");
    let entries = |v: &Value| v["checked"]["entries"].as_u64();
    let all = b.model_upto(b.last).len() as u64;
    match open {
        Open::TornTail => {
            assert_eq!(code(&out), 0, "{v}");
            let d = t.lsn.unwrap();
            assert_eq!(entries(&v), Some(b.model_upto(d - 1).len() as u64), "{v}");
            let notes = v["notes"].as_array().unwrap();
            assert!(
                notes
                    .iter()
                    .all(|n| n.as_str().unwrap().contains("torn tail")),
                "{v}"
            );
            if cell.row == Row::Flip {
                assert_eq!(notes.len(), 1, "a damaged record at the end is noted: {v}");
            }
        }
        Open::Whole => {
            assert_eq!(code(&out), 0, "{v}");
            assert_eq!(entries(&v), Some(all), "{v}");
            assert_eq!(v["notes"], serde_json::json!([]), "{v}");
        }
        Open::Skipped => {
            assert_eq!(code(&out), 1, "{v}");
            assert_eq!(v["file"], "journal", "{v}");
            assert_eq!(entries(&v), Some(all), "{v}");
            let (seq, pos) = t.named.unwrap();
            let place = format!("segment {seq} byte {pos}");
            for says in ["the store opens and keeps every commit", &place] {
                assert!(v["reason"].as_str().unwrap().contains(says), "{says}: {v}");
                assert!(text.contains(says), "{says}: {text}");
            }
        }
        Open::Corrupt => {
            assert_eq!(code(&out), 1, "{v}");
            assert_eq!(v["file"], "journal", "{v}");
            let (seq, pos) = t.named.unwrap();
            let place = format!("segment {seq}, byte {pos}");
            assert!(
                v["reason"].as_str().unwrap().contains(&place),
                "{place}: {v}"
            );
            assert!(text.contains(&place), "{place}: {text}");
        }
        Open::BadPage => {
            assert_eq!(code(&out), 1, "{v}");
            assert_eq!(v["file"], "data.keel", "{v}");
            assert_eq!(v["page"].as_u64(), t.page, "{v}");
            assert!(
                text.contains(&format!("page {}", t.page.unwrap())),
                "{text}"
            );
        }
    }
}

/// `keel db salvage` on the damaged store, and `keel db check` on what it
/// wrote.
fn check_salvage(b: &Built, cell: &Cell, t: &Target, store: &Path, to: &Path) -> String {
    let out = db(&["salvage", s(store), "--to", s(to), "--json"]);
    let v = json(&out);
    let lost = |first: u64, last: u64| serde_json::json!({"first": first, "last": last});
    // The commits the new store must hold.
    let kept = match cell.loss {
        Loss::Nothing => {
            assert_eq!((code(&out), &v["status"]), (0, &"complete".into()), "{v}");
            b.model_upto(b.last).len()
        }
        Loss::Residual | Loss::FromDamaged | Loss::CutFromDamaged => {
            let d = t.first_lost.unwrap();
            assert_eq!(v["last_lsn"], d - 1, "{v}");
            let cut_in_last =
                t.seq == Some(b.segments[b.l].seq) && cell.loss == Loss::CutFromDamaged;
            let want = if d == b.last && cell.loss == Loss::Residual || cut_in_last {
                Value::Null
            } else {
                lost(d, b.last)
            };
            assert_eq!(v["lost_lsns"], want, "{v}");
            let nothing = cell.loss == Loss::Residual && d == b.last;
            assert_eq!(code(&out), if nothing { 0 } else { 1 }, "{v}");
            b.model_upto(d - 1).len()
        }
        Loss::LeafRange => {
            assert_eq!(code(&out), 1, "{v}");
            assert_eq!(v["unreachable"][0]["page"].as_u64(), t.page, "{v}");
            assert_eq!(v["lost_lsns"], Value::Null, "{v}");
            b.model_upto(b.last).len() - t.leaf_keys.len()
        }
    };
    assert_eq!(v["entries"].as_u64(), Some(kept as u64), "{v}");
    let out = db(&["check", s(to), "--json"]);
    let checked = json(&out);
    assert_eq!(code(&out), 0, "{checked}");
    assert_eq!(
        checked["checked"]["entries"].as_u64(),
        Some(kept as u64),
        "{checked}"
    );
    match &v["lost_lsns"] {
        Value::Null => format!("salvage: {}, {kept} commits", v["status"]),
        l => format!(
            "salvage lost lsn {}..={}, kept {kept} commits",
            l["first"], l["last"]
        ),
    }
}

fn run_cell(root: &Path, b: &Built, cell: &Cell, open: Open) -> String {
    let name = format!("{:?}-{:?}-{:?}", b.mode, cell.row, cell.col);
    let (store, to) = (root.join(&name), root.join(format!("{name}-salvaged")));
    matrix::copy_store(&b.dir, &store);
    let t = matrix::damage(&store, b, cell.row, cell.col);
    let before = matrix::files(&store);
    check_damaged(b, cell, open, &t, &store);
    assert!(
        matrix::files(&store) == before,
        "keel db check changed the store"
    );
    let salvaged = check_salvage(b, cell, &t, &store, &to);
    assert!(
        matrix::files(&store) == before,
        "keel db salvage changed the store"
    );
    let _ = std::fs::remove_dir_all(&store);
    let _ = std::fs::remove_dir_all(&to);
    format!(
        "{:?} × {:?}: check as {open:?}; {salvaged}; {}",
        cell.row, cell.col, t.what
    )
}

fn matrix_of(mode: Mode) {
    let start = Instant::now();
    let root = scratch(&format!("damage-matrix-{mode:?}"));
    let b = matrix::build(&root, mode);
    println!(
        "{mode:?}: {} commits; {} writes, {} overlapped another",
        b.commits.len(),
        b.stats.writes,
        b.stats.overlapped_writes
    );
    if mode == Mode::Threads {
        assert!(b.stats.overlapped_writes > 0, "no write overlapped another");
    }
    let mut failed = Vec::new();
    for cell in MATRIX.iter().filter(|c| c.open.is_some()) {
        let open = cell.open.unwrap();
        match catch_unwind(AssertUnwindSafe(|| run_cell(&root, &b, cell, open))) {
            Ok(line) => println!("{line}"),
            Err(_) => failed.push(format!("{:?} × {:?}", cell.row, cell.col)),
        }
    }
    println!("{mode:?}: done in {:.2} s", start.elapsed().as_secs_f64());
    let _ = std::fs::remove_dir_all(&root);
    assert!(
        failed.is_empty(),
        "{mode:?}: cells that broke their promise: {failed:?}"
    );
}

#[test]
fn one_writer() {
    matrix_of(Mode::OneWriter);
}

#[test]
fn eight_threads_with_overlapping_writes() {
    matrix_of(Mode::Threads);
}
