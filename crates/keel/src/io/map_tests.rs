//! The growing map over the real file system and over its simulated twin.

use std::path::Path;
use std::sync::Arc;

use crossbeam_epoch as epoch;

use super::*;
use crate::io::test_files::{real_file, sim_file};
use crate::io::{OpenMode, OpenOptions, SimVfs, Vfs};

const PAGE: usize = 4096;

fn page(fill: u8) -> Vec<u8> {
    vec![fill; PAGE]
}

/// A reader holds bytes borrowed from the first map while the file grows
/// past it and another reader's read maps it anew: the borrowed bytes
/// stay readable (the old map lives until the first reader unpins), the
/// new pages read through the new map, and writes show through both.
fn remaps_while_a_reader_holds_the_old_map(f: Arc<dyn VfsFile>) {
    f.write_at(&page(1), 0).unwrap();
    let map = GrowingMap::new(Arc::clone(&f)).unwrap().expect("maps");
    let old_reader = epoch::pin();
    let held = map.read(0, PAGE, &old_reader).unwrap().unwrap();
    assert_eq!(&held[..], &page(1)[..]);
    // Past the file's end: no bytes (a real map would raise SIGBUS).
    assert!(map.read(PAGE as u64, PAGE, &old_reader).unwrap().is_none());
    assert_eq!(map.remaps(), 0);

    // Grow far past the map.
    let far = 3 * MAP_AHEAD_MIN_BYTES;
    f.write_at(&page(2), far).unwrap();
    f.write_at(&page(3), PAGE as u64).unwrap();
    {
        let reader = epoch::pin();
        assert_eq!(
            &map.read(far, PAGE, &reader).unwrap().unwrap()[..],
            &page(2)[..]
        );
        assert_eq!(
            &map.read(PAGE as u64, PAGE, &reader).unwrap().unwrap()[..],
            &page(3)[..]
        );
        assert!(map.read(far + PAGE as u64, 1, &reader).unwrap().is_none());
    }
    assert_eq!(map.remaps(), 1);
    // Other threads come and go meanwhile; the collector must not free
    // the map the first reader still borrows from.
    for _ in 0..1000 {
        epoch::pin().flush();
    }
    assert_eq!(&held[..], &page(1)[..]);
    drop(held);
    drop(old_reader);
    // Within the known length: no new map.
    let reader = epoch::pin();
    assert!(map.read(0, PAGE, &reader).unwrap().is_some());
    assert_eq!(map.remaps(), 1);
}

#[test]
fn real_map_remaps_while_a_reader_holds_the_old_one() {
    let (f, dir) = real_file("map-remap");
    remaps_while_a_reader_holds_the_old_map(f);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn sim_map_remaps_while_a_reader_holds_the_old_one() {
    remaps_while_a_reader_holds_the_old_map(sim_file(3));
}

/// A map shows later writes, as the page cache does.
#[test]
fn maps_show_later_writes() {
    let (real, dir) = real_file("map-writes");
    for f in [real, sim_file(3)] {
        f.write_at(&page(1), 0).unwrap();
        let map = GrowingMap::new(Arc::clone(&f)).unwrap().unwrap();
        f.write_at(&page(4)[..100], 50).unwrap();
        let g = epoch::pin();
        let b = map.read(0, PAGE, &g).unwrap().unwrap();
        assert_eq!((b[49], b[50], b[149], b[150]), (1, 4, 4, 1));
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_sim_map_fails_after_a_crash_like_its_file() {
    let vfs = SimVfs::new(5);
    vfs.create_dir_durable(Path::new("/db")).unwrap();
    let f = vfs
        .open(
            Path::new("/db/data"),
            OpenOptions::new(OpenMode::Buffered).create(true),
        )
        .unwrap();
    f.write_at(&page(1), 0).unwrap();
    let map = GrowingMap::new(Arc::clone(&f)).unwrap().unwrap();
    vfs.crash(crate::io::CrashMode::Process);
    let g = epoch::pin();
    assert!(matches!(map.read(0, PAGE, &g), Err(IoError::Crashed)));
}
