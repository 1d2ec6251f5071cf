//! Whole write → verify cycles over loopback, with the server and the
//! client in this process.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use keel::io::{OpenMode, OpenOptions, RealVfs, Vfs, WriteMethod};

use super::block::{decode, encode, BlockHeader, Decoded};
use super::client::{self, Target, WriteConfig, WriteSummary};
use super::server::{Server, ServerHandle};
use super::verify::{self, Report, ServerSource, Verdict};

pub(super) fn start_server(vfs: Arc<dyn Vfs>, dir: &Path) -> (Arc<Server>, ServerHandle) {
    let (server, _) = Server::open(vfs, dir, false).expect("server state");
    let handle = server
        .serve(TcpListener::bind("127.0.0.1:0").unwrap())
        .unwrap();
    (server, handle)
}

pub(super) fn config(
    file: &Path,
    blocks: u64,
    threads: u32,
    method: WriteMethod,
    writes: u64,
    seed: u64,
) -> WriteConfig {
    WriteConfig {
        file: file.to_path_buf(),
        size_bytes: blocks * 4096,
        block_bytes: 4096,
        threads,
        method,
        duration: None,
        max_writes: Some(writes),
        seed,
        run_id: seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1,
        host: "test".into(),
        batch: 8,
    }
}

pub(super) fn write(
    vfs: Arc<dyn Vfs>,
    handle: &ServerHandle,
    cfg: &WriteConfig,
) -> anyhow::Result<WriteSummary> {
    let target = Target::Server {
        addr: handle.addr(),
        retry_for: Duration::from_secs(10),
    };
    client::run(vfs, &target, cfg, &AtomicBool::new(false), &mut |_, _| {})
}

pub(super) fn check(vfs: &dyn Vfs, handle: &ServerHandle, file: &Path) -> Report {
    verify::verify(vfs, &mut ServerSource(handle.addr()), file, None).expect("verify")
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("keel-dccycle-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn read_block(vfs: &dyn Vfs, file: &Path, pos: u64) -> Vec<u8> {
    let f = vfs
        .open(file, OpenOptions::new(OpenMode::Buffered).read_only(true))
        .unwrap();
    let mut buf = vec![0u8; 4096];
    f.read_exact_at(&mut buf, pos * 4096).unwrap();
    buf
}

fn overwrite_block(vfs: &dyn Vfs, file: &Path, pos: u64, buf: &[u8]) {
    let f = vfs
        .open(file, OpenOptions::new(OpenMode::Buffered))
        .unwrap();
    f.write_at(buf, pos * 4096).unwrap();
}

/// A clean run on a real file verifies with no error and nothing in
/// flight; an acknowledged block put back to an older generation is one
/// `lost`, a flipped byte in another one `torn`, a block copied over
/// another one `misdirected`.
#[test]
fn real_file_clean_run_then_each_kind_of_damage() {
    let dir = tmp("real");
    let vfs = RealVfs::shared();
    let (_server, handle) = start_server(Arc::clone(&vfs), &dir.join("state"));
    let file = dir.join("disk.bin");
    let cfg = config(&file, 64, 2, WriteMethod::Fdatasync, 400, 1);
    let summary = write(Arc::clone(&vfs), &handle, &cfg).unwrap();
    assert_eq!(summary.writes, 400);
    let r = check(vfs.as_ref(), &handle, &file);
    assert_eq!((r.errors, r.in_flight), (0, 0), "{r:?}");
    assert!(r.acked > 0 && r.fine == r.acked, "{r:?}");
    assert!(r.run_ended_cleanly);

    // Find three blocks written at least twice.
    let mut rewritten =
        (0..64).filter_map(|pos| match decode(&read_block(vfs.as_ref(), &file, pos)) {
            Decoded::Valid(h) if h.generation >= 2 => Some(h),
            _ => None,
        });
    let (a, b, c) = (
        rewritten.next().unwrap(),
        rewritten.next().unwrap(),
        rewritten.next().unwrap(),
    );
    let mut older = vec![0u8; 4096];
    encode(
        &BlockHeader {
            generation: a.generation - 1,
            ..a
        },
        &mut older,
    );
    overwrite_block(vfs.as_ref(), &file, a.index, &older);
    let r = check(vfs.as_ref(), &handle, &file);
    assert_eq!((r.lost, r.torn, r.errors), (1, 0, 1), "{r:?}");
    assert_eq!(r.error_blocks[0].block, a.index);
    assert_eq!(r.error_blocks[0].found_gen, Some(a.generation - 1));
    assert_eq!(r.histogram.iter().map(|h| h.errors).sum::<u64>(), 1);

    let mut flipped = read_block(vfs.as_ref(), &file, b.index);
    flipped[3000] ^= 1;
    overwrite_block(vfs.as_ref(), &file, b.index, &flipped);
    let r = check(vfs.as_ref(), &handle, &file);
    assert_eq!((r.lost, r.torn, r.errors), (1, 1, 2), "{r:?}");

    let source = (0..64)
        .find(|p| ![a.index, b.index, c.index].contains(p))
        .unwrap();
    let copy = read_block(vfs.as_ref(), &file, source);
    overwrite_block(vfs.as_ref(), &file, c.index, &copy);
    let r = check(vfs.as_ref(), &handle, &file);
    assert_eq!(r.misdirected, 1, "{r:?}");
    assert!(r
        .error_blocks
        .iter()
        .any(|e| e.block == c.index && e.kind == Verdict::Misdirected));
    handle.shutdown();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Bad input: an unreachable server writes nothing; a file that is not a
/// diskcheck file, or a run the server does not know, is a clear error.
#[test]
fn bad_input_is_refused_clearly() {
    let dir = tmp("bad");
    let vfs = RealVfs::shared();
    let file = dir.join("disk.bin");
    let cfg = config(&file, 64, 1, WriteMethod::Fdatasync, 10, 2);
    let unreachable = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let target = Target::Server {
        addr: unreachable,
        retry_for: Duration::from_secs(1),
    };
    let err = client::run(
        Arc::clone(&vfs),
        &target,
        &cfg,
        &AtomicBool::new(false),
        &mut |_, _| {},
    )
    .unwrap_err();
    assert!(format!("{err:#}").contains("cannot reach"), "{err:#}");
    assert!(
        !file.exists(),
        "nothing may be written when the server is unreachable"
    );

    for (blocks, block_bytes, threads) in [(64, 1000, 1), (0, 4096, 1), (64, 4096, 32)] {
        let mut bad = cfg.clone();
        bad.size_bytes = blocks * 4096;
        bad.block_bytes = block_bytes;
        bad.threads = threads;
        assert!(
            client::check(vfs.as_ref(), &bad).is_err(),
            "{blocks} {block_bytes} {threads}"
        );
    }
    let mut huge = cfg.clone();
    huge.size_bytes = 1 << 60;
    let err = client::check(vfs.as_ref(), &huge).unwrap_err();
    assert!(format!("{err:#}").contains("free space"), "{err:#}");
    let mut no_dir = cfg.clone();
    no_dir.file = dir.join("missing").join("disk.bin");
    let err = client::check(vfs.as_ref(), &no_dir).unwrap_err();
    assert!(format!("{err:#}").contains("does not exist"), "{err:#}");
    let mut buffered = cfg.clone();
    buffered.method = WriteMethod::Buffered;
    assert!(client::check(vfs.as_ref(), &buffered).is_err());

    let (_server, handle) = start_server(Arc::clone(&vfs), &dir.join("state"));
    std::fs::write(&file, vec![7u8; 65536]).unwrap();
    let err =
        verify::verify(vfs.as_ref(), &mut ServerSource(handle.addr()), &file, None).unwrap_err();
    assert!(format!("{err:#}").contains("no diskcheck block"), "{err:#}");
    // A run the server never saw (another server's state directory).
    let (_other, other_handle) = start_server(Arc::clone(&vfs), &dir.join("other"));
    std::fs::remove_file(&file).unwrap();
    write(Arc::clone(&vfs), &other_handle, &cfg).unwrap();
    let err =
        verify::verify(vfs.as_ref(), &mut ServerSource(handle.addr()), &file, None).unwrap_err();
    assert!(format!("{err:#}").contains("none of which"), "{err:#}");
    let err = verify::verify(
        vfs.as_ref(),
        &mut ServerSource(other_handle.addr()),
        &file,
        Some(5),
    )
    .unwrap_err();
    assert!(format!("{err:#}").contains("no block of run"), "{err:#}");
    // The file shorter than the run: the missing blocks were acknowledged.
    let f = vfs
        .open(&file, OpenOptions::new(OpenMode::Buffered))
        .unwrap();
    f.set_len(32 * 4096).unwrap();
    let r = check(vfs.as_ref(), &other_handle, &file);
    assert!(!r.warnings.is_empty() && r.lost > 0, "{r:?}");
    handle.shutdown();
    other_handle.shutdown();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The single-machine mode: records in a synced file instead of a server.
#[test]
fn ack_file_cycle() {
    let dir = tmp("ackfile");
    let vfs = RealVfs::shared();
    let file = dir.join("disk.bin");
    let acks = dir.join("acks.log");
    let cfg = config(&file, 128, 2, WriteMethod::Odsync, 300, 3);
    let target = Target::AckFile(acks.clone());
    let summary = client::run(
        Arc::clone(&vfs),
        &target,
        &cfg,
        &AtomicBool::new(false),
        &mut |_, _| {},
    )
    .unwrap();
    assert_eq!(summary.writes, 300);
    let mut source = verify::AckFileSource {
        vfs: Arc::clone(&vfs),
        path: acks.clone(),
    };
    let r = verify::verify(vfs.as_ref(), &mut source, &file, None).unwrap();
    assert_eq!((r.errors, r.in_flight), (0, 0), "{r:?}");
    assert!(r.fine > 0);
    // The ack file is never overwritten by a new run.
    let err = client::run(
        Arc::clone(&vfs),
        &target,
        &cfg,
        &AtomicBool::new(false),
        &mut |_, _| {},
    )
    .unwrap_err();
    assert!(format!("{err:#}").contains("exists"), "{err:#}");
    std::fs::remove_dir_all(&dir).unwrap();
}
