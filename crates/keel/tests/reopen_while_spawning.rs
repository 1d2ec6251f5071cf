//! A store closed and opened again at once, while another thread starts
//! child processes: a child between its fork and its exec holds a copy of
//! the lock file's descriptor (close-on-exec ones too), so the lock can
//! outlive the close by a moment. The reopen must not call the store "in
//! use by another process".

use std::sync::atomic::{AtomicBool, Ordering};

use keel::db::Database;

#[test]
fn reopening_while_another_thread_spawns_processes_is_not_locked_out() {
    let dir = std::env::temp_dir().join(format!("keel-reopen-spawn-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    Database::create(&dir).unwrap().close().unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let _ = std::process::Command::new("true").status();
            }
        });
        for i in 0..300 {
            match Database::open(&dir) {
                Ok(db) => db.close().unwrap(),
                Err(e) => {
                    stop.store(true, Ordering::Relaxed);
                    panic!("open {i}: {e}");
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    let _ = std::fs::remove_dir_all(&dir);
}
