//! Each rule of the fault model has a test here that fails if the rule is
//! broken.

use super::*;
use crate::io::AlignedBuf;

fn setup(seed: u64) -> (Arc<SimVfs>, PathBuf) {
    let vfs = SimVfs::new(seed);
    let dir = PathBuf::from("/db");
    vfs.create_dir_durable(&dir).unwrap();
    (vfs, dir)
}

fn open(vfs: &SimVfs, path: &Path, mode: OpenMode) -> Arc<dyn VfsFile> {
    vfs.open(path, OpenOptions::new(mode).create(true)).unwrap()
}

/// A file whose name is durable, so only data rules are exercised.
fn durable_file(vfs: &SimVfs, dir: &Path, mode: OpenMode) -> (PathBuf, Arc<dyn VfsFile>) {
    let path = dir.join("f");
    let f = open(vfs, &path, mode);
    vfs.sync_dir(dir).unwrap();
    (path, f)
}

#[test]
fn process_crash_keeps_unsynced_writes() {
    let (vfs, dir) = setup(1);
    let (path, f) = durable_file(&vfs, &dir, OpenMode::Buffered);
    f.write_at(&[7u8; 1000], 0).unwrap();
    vfs.crash(CrashMode::Process);
    assert_eq!(vfs.contents(&path).unwrap(), vec![7u8; 1000]);
}

#[test]
fn power_loss_keeps_synced_data_always() {
    for seed in 0..200 {
        let (vfs, dir) = setup(seed);
        let (path, f) = durable_file(&vfs, &dir, OpenMode::Buffered);
        f.write_at(&[1u8; 2048], 0).unwrap();
        f.sync(SyncKind::Data).unwrap();
        f.write_at(&[2u8; 2048], 4096).unwrap();
        vfs.crash(CrashMode::PowerLoss);
        let c = vfs.contents(&path).unwrap();
        assert_eq!(&c[..2048], &[1u8; 2048][..], "seed {seed}");
    }
}

#[test]
fn power_loss_keeps_drops_or_tears_unsynced_writes_by_sector() {
    let (mut kept, mut dropped, mut torn) = (0, 0, 0);
    for seed in 0..300 {
        let (vfs, dir) = setup(seed);
        let (path, f) = durable_file(&vfs, &dir, OpenMode::Buffered);
        f.write_at(&[1u8; 4096], 0).unwrap();
        f.sync(SyncKind::Data).unwrap();
        f.write_at(&[2u8; 4096], 0).unwrap();
        vfs.crash(CrashMode::PowerLoss);
        let c = vfs.contents(&path).unwrap();
        assert_eq!(c.len(), 4096);
        for sector in c.chunks(SECTOR_BYTES) {
            assert!(
                sector.iter().all(|&b| b == 1) || sector.iter().all(|&b| b == 2),
                "a sector mixes old and new bytes (seed {seed})"
            );
        }
        let new = c.chunks(SECTOR_BYTES).filter(|s| s[0] == 2).count();
        match new {
            0 => dropped += 1,
            8 => kept += 1,
            _ => torn += 1,
        }
    }
    assert!(
        kept > 30 && dropped > 30 && torn > 30,
        "kept {kept} dropped {dropped} torn {torn}"
    );
}

#[test]
fn durable_modes_are_durable_when_write_returns() {
    for seed in 0..100 {
        let (vfs, dir) = setup(seed);
        let (path, f) = durable_file(&vfs, &dir, OpenMode::DirectDsync);
        let mut buf = AlignedBuf::new(4096, 4096);
        buf.fill(9);
        f.write_at(&buf, 0).unwrap();
        let g = vfs
            .open(&path, OpenOptions::new(OpenMode::Buffered))
            .unwrap();
        g.write_dsync_at(&[5u8; 512], 4096).unwrap();
        let h = vfs.open(&path, OpenOptions::new(OpenMode::Dsync)).unwrap();
        h.write_at(&[6u8; 512], 8192).unwrap();
        vfs.crash(CrashMode::PowerLoss);
        let c = vfs.contents(&path).unwrap();
        assert_eq!(&c[..4096], &buf[..], "seed {seed}");
        assert_eq!(&c[4096..4608], &[5u8; 512][..], "seed {seed}");
        assert_eq!(&c[8192..8704], &[6u8; 512][..], "seed {seed}");
    }
}

#[test]
fn durable_write_is_not_overtaken_by_older_pending_write() {
    for seed in 0..100 {
        let (vfs, dir) = setup(seed);
        let (path, f) = durable_file(&vfs, &dir, OpenMode::Buffered);
        f.write_at(&[1u8; 512], 0).unwrap();
        f.write_dsync_at(&[2u8; 512], 0).unwrap();
        vfs.crash(CrashMode::PowerLoss);
        assert_eq!(vfs.contents(&path).unwrap(), vec![2u8; 512], "seed {seed}");
    }
}

#[test]
fn names_need_a_directory_sync() {
    let mut lost = 0;
    for seed in 0..200 {
        let (vfs, dir) = setup(seed);
        let a = dir.join("a");
        let f = open(&vfs, &a, OpenMode::Buffered);
        f.write_at(b"x", 0).unwrap();
        f.sync(SyncKind::All).unwrap();
        let b = dir.join("b");
        let g = open(&vfs, &b, OpenMode::Buffered);
        g.sync(SyncKind::All).unwrap();
        vfs.sync_dir(&dir).unwrap();
        vfs.crash(CrashMode::PowerLoss);
        assert!(vfs.exists(&b).unwrap(), "synced create lost (seed {seed})");
        assert!(vfs.exists(&a).unwrap(), "earlier create lost (seed {seed})");
        // Now a create, a rename and a removal without a directory sync.
        let c = dir.join("c");
        open(&vfs, &c, OpenMode::Buffered);
        vfs.rename(&a, &dir.join("a2")).unwrap();
        vfs.remove_file(&b).unwrap();
        vfs.crash(CrashMode::PowerLoss);
        let state = (
            vfs.exists(&c).unwrap(),
            vfs.exists(&a).unwrap(),
            vfs.exists(&dir.join("a2")).unwrap(),
            vfs.exists(&b).unwrap(),
        );
        // A prefix of (create c, rename a, remove b) survived.
        let allowed = [
            (false, true, false, true),
            (true, true, false, true),
            (true, false, true, true),
            (true, false, true, false),
        ];
        assert!(
            allowed.contains(&state),
            "not a prefix: {state:?} (seed {seed})"
        );
        if state != allowed[3] {
            lost += 1;
        }
    }
    assert!(
        lost > 50,
        "unsynced namespace ops were never undone ({lost})"
    );
}

#[test]
fn directory_sync_makes_names_durable() {
    for seed in 0..100 {
        let (vfs, dir) = setup(seed);
        let a = dir.join("a");
        open(&vfs, &a, OpenMode::Buffered);
        vfs.sync_dir(&dir).unwrap();
        vfs.rename(&a, &dir.join("b")).unwrap();
        vfs.sync_dir(&dir).unwrap();
        vfs.crash(CrashMode::PowerLoss);
        assert!(
            !vfs.exists(&a).unwrap() && vfs.exists(&dir.join("b")).unwrap(),
            "seed {seed}"
        );
    }
}

#[test]
fn injected_errors_fail_the_chosen_op_without_effect() {
    let (vfs, dir) = setup(3);
    let (path, f) = durable_file(&vfs, &dir, OpenMode::Buffered);
    vfs.fail_after(OpKind::Write, 1, libc::EIO);
    f.write_at(b"aa", 0).unwrap();
    let e = f.write_at(b"bb", 2).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    f.write_at(b"cc", 4).unwrap();
    assert_eq!(vfs.contents(&path).unwrap(), b"aa\0\0cc");
    vfs.fail_after(OpKind::Sync, 0, libc::ENOSPC);
    let e = f.sync(SyncKind::Data).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
    // The failed sync made nothing durable: a power cut may still drop it.
    let mut dropped = false;
    for seed in 0..50 {
        let (vfs, dir) = setup(seed);
        let (path, f) = durable_file(&vfs, &dir, OpenMode::Buffered);
        f.write_at(&[1u8; 512], 0).unwrap();
        vfs.fail_after(OpKind::Sync, 0, libc::EIO);
        assert!(f.sync(SyncKind::Data).is_err());
        vfs.crash(CrashMode::PowerLoss);
        dropped |= vfs.contents(&path).unwrap().is_empty();
    }
    assert!(dropped);
}

#[test]
fn lying_disk_loses_synced_writes_at_power_loss_only() {
    let (vfs, dir) = setup(4);
    let (path, f) = durable_file(&vfs, &dir, OpenMode::Buffered);
    f.write_at(&[1u8; 512], 0).unwrap();
    f.sync(SyncKind::Data).unwrap();
    vfs.set_lying(1.0);
    f.write_at(&[2u8; 512], 0).unwrap();
    f.sync(SyncKind::Data).unwrap();
    assert!(vfs.stats().lies >= 1);
    vfs.crash(CrashMode::Process);
    assert_eq!(
        vfs.contents(&path).unwrap(),
        vec![2u8; 512],
        "a process crash loses nothing"
    );
    vfs.crash(CrashMode::PowerLoss);
    assert_eq!(
        vfs.contents(&path).unwrap(),
        vec![1u8; 512],
        "the lie is exposed"
    );
}

#[test]
fn process_crash_leaves_unsynced_writes_pending_for_a_later_power_loss() {
    let (mut lost, mut kept) = (0, 0);
    for seed in 0..100 {
        let (vfs, dir) = setup(seed);
        let (path, f) = durable_file(&vfs, &dir, OpenMode::Buffered);
        f.write_at(&[1u8; 512], 0).unwrap();
        f.sync(SyncKind::Data).unwrap();
        f.write_at(&[2u8; 512], 0).unwrap();
        vfs.crash(CrashMode::Process);
        assert_eq!(vfs.contents(&path).unwrap(), vec![2u8; 512], "seed {seed}");
        vfs.crash(CrashMode::PowerLoss);
        match vfs.contents(&path).unwrap()[0] {
            1 => lost += 1,
            _ => kept += 1,
        }
    }
    assert!(lost > 10 && kept > 10, "lost {lost}, kept {kept}");
    // A sync after the process crash (through a new handle) makes it
    // durable, as an fsync of the inode does.
    let (vfs, dir) = setup(1);
    let (path, f) = durable_file(&vfs, &dir, OpenMode::Buffered);
    f.write_at(&[3u8; 512], 0).unwrap();
    vfs.crash(CrashMode::Process);
    let f = vfs
        .open(&path, OpenOptions::new(OpenMode::Buffered))
        .unwrap();
    f.sync(SyncKind::Data).unwrap();
    vfs.crash(CrashMode::PowerLoss);
    assert_eq!(vfs.contents(&path).unwrap(), vec![3u8; 512]);
}

#[test]
fn a_failed_sync_can_drop_dirty_pages_that_stay_readable() {
    let (vfs, dir) = setup(2);
    vfs.set_failed_sync_drops(1.0);
    let (path, f) = durable_file(&vfs, &dir, OpenMode::Buffered);
    f.write_at(&[1u8; 512], 0).unwrap();
    f.sync(SyncKind::Data).unwrap();
    f.write_at(&[2u8; 512], 0).unwrap();
    vfs.fail_after(OpKind::Sync, 0, libc::EIO);
    assert!(f.sync(SyncKind::Data).is_err());
    // The next sync succeeds and writes nothing.
    f.sync(SyncKind::Data).unwrap();
    vfs.crash(CrashMode::Process);
    assert_eq!(vfs.contents(&path).unwrap(), vec![2u8; 512], "still cached");
    vfs.crash(CrashMode::PowerLoss);
    assert_eq!(
        vfs.contents(&path).unwrap(),
        vec![1u8; 512],
        "never written"
    );
    assert_eq!(vfs.stats().failed_sync_drops, 1);
}

#[test]
fn a_new_directory_needs_its_parent_synced() {
    let (mut lost, mut kept) = (0, 0);
    for seed in 0..100 {
        let vfs = SimVfs::new(seed);
        let dir = PathBuf::from("/a/b");
        vfs.create_dir_all(&dir).unwrap();
        let f = open(&vfs, &dir.join("f"), OpenMode::DirectDsync);
        // Syncing the new directory makes the file's name durable, not the
        // directory's own.
        vfs.sync_dir(&dir).unwrap();
        f.write_at(&AlignedBuf::new(512, 512), 0).unwrap();
        vfs.crash(CrashMode::PowerLoss);
        match vfs.exists(&dir.join("f")).unwrap() {
            true => kept += 1,
            false => lost += 1,
        }
    }
    assert!(lost > 10 && kept > 10, "lost {lost}, kept {kept}");
    for seed in 0..50 {
        let vfs = SimVfs::new(seed);
        let dir = PathBuf::from("/a/b");
        crate::io::create_dir_all_durable(vfs.as_ref(), &dir).unwrap();
        let f = open(&vfs, &dir.join("f"), OpenMode::DirectDsync);
        vfs.sync_dir(&dir).unwrap();
        f.write_at(&AlignedBuf::new(512, 512), 0).unwrap();
        vfs.crash(CrashMode::PowerLoss);
        assert!(vfs.exists(&dir.join("f")).unwrap(), "seed {seed}");
    }
}

#[test]
fn free_space_of_a_file_system_without_a_size_is_unknown() {
    let (vfs, dir) = setup(3);
    assert!(vfs.free_space(&dir).unwrap().is_some());
    vfs.set_space(0, 0);
    assert_eq!(vfs.free_space(&dir).unwrap(), None);
    vfs.set_space(1 << 30, 5);
    assert_eq!(vfs.free_space(&dir).unwrap(), Some(5));
}

#[test]
fn misdirected_write_lands_elsewhere() {
    let (vfs, dir) = setup(5);
    let (path, f) = durable_file(&vfs, &dir, OpenMode::Buffered);
    f.write_at(&[0u8; 8192], 0).unwrap();
    vfs.set_misdirect(1.0);
    f.write_at(&[7u8; 1024], 2048).unwrap();
    let c = vfs.contents(&path).unwrap();
    assert_eq!(&c[2048..3072], &[0u8; 1024][..], "intended place untouched");
    assert_eq!(
        c.iter().filter(|&&b| b == 7).count(),
        1024,
        "landed somewhere else whole"
    );
    assert_eq!(vfs.stats().misdirects, 1);
}

#[test]
fn crash_point_takes_the_layer_down_and_kills_old_handles() {
    let (vfs, dir) = setup(6);
    let (path, f) = durable_file(&vfs, &dir, OpenMode::Buffered);
    vfs.crash_after_ops(2);
    f.write_at(b"a", 0).unwrap();
    f.sync(SyncKind::Data).unwrap();
    assert!(matches!(f.write_at(b"b", 1), Err(IoError::Crashed)));
    assert!(vfs.is_down());
    assert!(matches!(f.sync(SyncKind::Data), Err(IoError::Crashed)));
    assert!(matches!(
        vfs.open(&path, OpenOptions::new(OpenMode::Buffered)),
        Err(IoError::Crashed)
    ));
    vfs.crash(CrashMode::PowerLoss);
    assert!(
        matches!(f.write_at(b"c", 0), Err(IoError::Crashed)),
        "stale handle must fail"
    );
    let g = vfs
        .open(&path, OpenOptions::new(OpenMode::Buffered))
        .unwrap();
    assert_eq!(vfs.contents(&path).unwrap()[0], b'a');
    g.write_at(b"d", 0).unwrap();
}

#[test]
fn locks_are_exclusive_and_released_by_a_crash() {
    let (vfs, dir) = setup(7);
    let lock_path = dir.join("LOCK");
    let g = vfs.lock(&lock_path).unwrap();
    assert!(matches!(vfs.lock(&lock_path), Err(IoError::Locked { .. })));
    vfs.crash(CrashMode::Process);
    let g2 = vfs.lock(&lock_path).unwrap();
    drop(g); // the stale guard must not release the new holder's lock
    assert!(matches!(vfs.lock(&lock_path), Err(IoError::Locked { .. })));
    drop(g2);
    vfs.lock(&lock_path).unwrap();
}

#[test]
fn direct_handles_check_alignment() {
    let (vfs, dir) = setup(8);
    let (_, f) = durable_file(&vfs, &dir, OpenMode::DirectDsync);
    assert!(matches!(
        f.write_at(&[0u8; 100], 0),
        Err(IoError::Misaligned { .. })
    ));
    let buf = AlignedBuf::new(512, 512);
    assert!(matches!(
        f.write_at(&buf, 100),
        Err(IoError::Misaligned { .. })
    ));
    f.write_at(&buf, 512).unwrap();
}

#[test]
fn same_seed_same_outcome() {
    let run = |seed| {
        let (vfs, dir) = setup(seed);
        let (path, f) = durable_file(&vfs, &dir, OpenMode::Buffered);
        for i in 0..20u64 {
            f.write_at(&[i as u8; 700], i * 700).unwrap();
        }
        vfs.crash(CrashMode::PowerLoss);
        vfs.contents(&path).unwrap()
    };
    assert_eq!(run(42), run(42));
}

#[test]
fn missing_parent_and_missing_file_are_errors() {
    let vfs = SimVfs::new(9);
    let e = vfs.open(
        Path::new("/nope/f"),
        OpenOptions::new(OpenMode::Buffered).create(true),
    );
    assert!(e.unwrap_err().is_not_found());
    let e = vfs.open(Path::new("/f"), OpenOptions::new(OpenMode::Buffered));
    assert!(e.unwrap_err().is_not_found());
}
