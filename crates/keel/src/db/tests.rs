//! Tests of the store on the simulated file system.

use std::path::Path;
use std::sync::Arc;

use super::*;
use crate::io::{CrashMode, SimVfs};

fn small_journal() -> JournalOptions {
    JournalOptions {
        segment_size_bytes: 256 << 10,
        ..JournalOptions::default()
    }
}

fn builder(vfs: &Arc<SimVfs>) -> Builder {
    Database::builder()
        .vfs(Arc::clone(vfs) as Arc<dyn Vfs>)
        .journal(small_journal())
        .background_checkpoints(false)
}

fn get(db: &Database, table: &str, key: &[u8]) -> Option<Vec<u8>> {
    let r = db.begin_read();
    let t = r.open_table(table).ok()?;
    t.get(key).unwrap().map(|v| v.to_vec())
}

#[test]
fn commit_reopen_checkpoint_and_reopen() {
    let vfs = SimVfs::new(1);
    let dir = Path::new("/s");
    let db = builder(&vfs).create(dir).unwrap();
    let mut w = db.begin_write().unwrap();
    {
        let mut t = w.open_table("a").unwrap();
        t.insert(b"k1", b"v1").unwrap();
        t.insert(b"k2", vec![7u8; 10_000]).unwrap();
        assert_eq!(t.get(b"k1").unwrap().as_deref(), Some(&b"v1"[..]));
    }
    w.commit().unwrap();
    assert_eq!(get(&db, "a", b"k1").as_deref(), Some(&b"v1"[..]));
    drop(db);
    let db = builder(&vfs).open(dir).unwrap();
    assert_eq!(get(&db, "a", b"k2"), Some(vec![7u8; 10_000]));
    assert_eq!(db.checkpoint().unwrap(), Some(1));
    db.check().unwrap();
    db.close().unwrap();
    vfs.crash(CrashMode::PowerLoss);
    let db = builder(&vfs).open(dir).unwrap();
    assert_eq!(get(&db, "a", b"k1").as_deref(), Some(&b"v1"[..]));
    assert_eq!(get(&db, "a", b"k2"), Some(vec![7u8; 10_000]));
    db.check().unwrap();
}
