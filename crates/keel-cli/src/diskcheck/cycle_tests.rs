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
use super::verify::{self, Report, ServerSource, Verdict, VerifyTarget};

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
        host: HOST.into(),
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

/// The host name [`config`] records.
pub(super) const HOST: &str = "test";

pub(super) fn verify_target(file: &Path, run_id: Option<u64>) -> VerifyTarget<'_> {
    VerifyTarget {
        file,
        host: HOST,
        run_id,
    }
}

pub(super) fn check(vfs: &dyn Vfs, handle: &ServerHandle, file: &Path) -> Report {
    verify::verify(
        vfs,
        &mut ServerSource(handle.addr()),
        &verify_target(file, None),
    )
    .expect("verify")
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

fn verify_with(handle: &ServerHandle, file: &Path, host: &str, run: Option<u64>) -> Report {
    let target = VerifyTarget {
        file,
        host,
        run_id: run,
    };
    verify::verify(&RealVfs, &mut ServerSource(handle.addr()), &target).expect("verify")
}

fn verify_error(handle: &ServerHandle, file: &Path, host: &str, run: Option<u64>) -> String {
    let target = VerifyTarget {
        file,
        host,
        run_id: run,
    };
    let err = verify::verify(&RealVfs, &mut ServerSource(handle.addr()), &target).unwrap_err();
    format!("{err:#}")
}

/// Every acknowledged block of `r` is lost and nothing else is wrong.
fn assert_all_lost(r: &Report, run_id: u64) {
    assert_eq!(r.run_id, format!("{run_id:016x}"));
    assert!(r.acked > 0, "{r:?}");
    assert_eq!(
        (r.lost, r.fine, r.torn, r.errors),
        (r.acked, 0, 0, r.acked),
        "{r:?}"
    );
}

/// A disk that kept none of a run's writes leaves no block naming the run:
/// `verify` finds it from the server's record of the file (this host, this
/// path) and reports every acknowledged block lost, whether the file kept
/// an earlier run's blocks, reads as zeros, is empty, or is gone. A file no
/// run of this host wrote is still "wrong file".
#[test]
fn run_that_left_no_block_is_found_from_the_record() {
    let dir = tmp("blockless");
    let vfs = RealVfs::shared();
    let (_server, handle) = start_server(Arc::clone(&vfs), &dir.join("state"));
    let file = dir.join("disk.bin");
    let first = config(&file, 64, 2, WriteMethod::Fdatasync, 200, 11);
    write(Arc::clone(&vfs), &handle, &first).unwrap();
    let first_image = std::fs::read(&file).unwrap();
    let second = config(&file, 64, 2, WriteMethod::Fdatasync, 200, 12);
    write(Arc::clone(&vfs), &handle, &second).unwrap();
    assert_eq!(check(vfs.as_ref(), &handle, &file).errors, 0);

    // The second run lost everything; the first run's blocks are back.
    std::fs::write(&file, &first_image).unwrap();
    let r = check(vfs.as_ref(), &handle, &file);
    assert_all_lost(&r, second.run_id);
    assert!(
        r.warnings[0].contains(&format!("{:016x}", first.run_id)),
        "{:?}",
        r.warnings
    );
    let r = verify_with(&handle, &file, HOST, Some(first.run_id));
    assert_eq!((r.errors, r.fine), (0, r.acked), "{r:?}");

    // Zeros, then an empty file, then no file.
    std::fs::write(&file, vec![0u8; first_image.len()]).unwrap();
    assert_all_lost(&check(vfs.as_ref(), &handle, &file), second.run_id);
    std::fs::write(&file, b"").unwrap();
    let r = check(vfs.as_ref(), &handle, &file);
    assert_all_lost(&r, second.run_id);
    assert!(r.warnings.iter().any(|w| w.contains("shorter")), "{r:?}");
    std::fs::remove_file(&file).unwrap();
    let r = check(vfs.as_ref(), &handle, &file);
    assert_all_lost(&r, second.run_id);
    assert!(
        r.warnings.iter().any(|w| w.contains("does not exist")),
        "{r:?}"
    );
    let r = verify_with(&handle, &file, HOST, Some(first.run_id));
    assert_all_lost(&r, first.run_id);

    // Files no run of this host wrote.
    let err = verify_error(&handle, &dir.join("missing.bin"), HOST, None);
    assert!(err.contains("cannot open"), "{err}");
    let other = dir.join("other.bin");
    std::fs::write(&other, vec![0u8; first_image.len()]).unwrap();
    let err = verify_error(&handle, &other, HOST, None);
    assert!(
        err.contains("no diskcheck block") && err.contains("wrong file"),
        "{err}"
    );
    assert!(
        err.contains(&format!("{:016x}", second.run_id)),
        "the runs the server holds are named: {err}"
    );
    std::fs::write(&file, vec![0u8; first_image.len()]).unwrap();
    let err = verify_error(&handle, &file, "another-host", None);
    assert!(err.contains("no diskcheck block"), "{err}");
    let err = verify_error(&handle, &file, HOST, Some(5));
    assert!(err.contains("no block of run"), "{err}");
    handle.shutdown();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A server that cannot list its runs (one of an older keel answers `List`
/// with an error).
struct CannotList(ServerSource);

impl verify::RunSource for CannotList {
    fn fetch(&mut self, run_id: u64) -> anyhow::Result<Option<crate::diskcheck::state::RunState>> {
        self.0.fetch(run_id)
    }
    fn runs(&mut self) -> anyhow::Result<Vec<crate::diskcheck::state::RunSummary>> {
        anyhow::bail!("refused to list its runs")
    }
    fn describe(&self) -> String {
        self.0.describe()
    }
}

/// Without the list of runs, a file whose blocks name their run is still
/// verified (with a warning about what could not be checked); a file with
/// no block cannot be, and the message says why.
#[test]
fn source_that_cannot_list_runs() {
    let dir = tmp("nolist");
    let vfs = RealVfs::shared();
    let (_server, handle) = start_server(Arc::clone(&vfs), &dir.join("state"));
    let file = dir.join("disk.bin");
    let cfg = config(&file, 64, 1, WriteMethod::Fdatasync, 100, 21);
    write(Arc::clone(&vfs), &handle, &cfg).unwrap();
    let mut source = CannotList(ServerSource(handle.addr()));
    let r = verify::verify(vfs.as_ref(), &mut source, &verify_target(&file, None)).unwrap();
    assert_eq!((r.errors, r.fine), (0, r.acked), "{r:?}");
    assert!(r.warnings[0].contains("would go unnoticed"), "{r:?}");
    std::fs::write(&file, vec![0u8; 64 * 4096]).unwrap();
    let err = verify::verify(vfs.as_ref(), &mut source, &verify_target(&file, None)).unwrap_err();
    assert!(
        format!("{err:#}").contains("could not be listed"),
        "{err:#}"
    );
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
    let err = verify::verify(
        vfs.as_ref(),
        &mut ServerSource(handle.addr()),
        &verify_target(&file, None),
    )
    .unwrap_err();
    assert!(format!("{err:#}").contains("no diskcheck block"), "{err:#}");
    // A run the server never saw (another server's state directory).
    let (_other, other_handle) = start_server(Arc::clone(&vfs), &dir.join("other"));
    std::fs::remove_file(&file).unwrap();
    write(Arc::clone(&vfs), &other_handle, &cfg).unwrap();
    let err = verify::verify(
        vfs.as_ref(),
        &mut ServerSource(handle.addr()),
        &verify_target(&file, None),
    )
    .unwrap_err();
    assert!(format!("{err:#}").contains("none of which"), "{err:#}");
    let err = verify::verify(
        vfs.as_ref(),
        &mut ServerSource(other_handle.addr()),
        &verify_target(&file, Some(5)),
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
    let mut source = verify::AckFileSource::new(Arc::clone(&vfs), acks.clone());
    let r = verify::verify(vfs.as_ref(), &mut source, &verify_target(&file, None)).unwrap();
    assert_eq!((r.errors, r.in_flight), (0, 0), "{r:?}");
    assert!(r.fine > 0);
    // The disk lost every write: the ack file's run is this file's.
    let len = std::fs::metadata(&file).unwrap().len() as usize;
    std::fs::write(&file, vec![0u8; len]).unwrap();
    let mut source = verify::AckFileSource::new(Arc::clone(&vfs), acks.clone());
    let r = verify::verify(vfs.as_ref(), &mut source, &verify_target(&file, None)).unwrap();
    assert_all_lost(&r, cfg.run_id);
    // Another file, zeros too, was never written by the ack file's run.
    let other = dir.join("other.bin");
    std::fs::write(&other, vec![0u8; len]).unwrap();
    let mut source = verify::AckFileSource::new(Arc::clone(&vfs), acks.clone());
    let err = verify::verify(vfs.as_ref(), &mut source, &verify_target(&other, None)).unwrap_err();
    assert!(format!("{err:#}").contains("no diskcheck block"), "{err:#}");
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
