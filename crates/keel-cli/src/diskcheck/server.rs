//! `keel diskcheck listen`: records what clients announce and acknowledge,
//! durably, and serves it back to `verify`.
//!
//! One thread per connection. A connection's requests are appended to the
//! run's log as they arrive; when no further request is already buffered,
//! the log is synced once (shared with other connections doing the same)
//! and only then are the replies sent. So a client that got `Ok` knows the
//! record survives a crash of the server.

use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use anyhow::{bail, Context};
use keel::io::{LockGuard, Vfs};

use super::block::valid_block_bytes;
use super::log::{run_id_of_log, run_log_path, RunLog};
use super::now_us;
use super::state::RunMeta;
use super::wire::{read_frame, write_frame, Reply, Request, MAX_ENTRIES};

/// A server's state: every run it has recorded, each with its log.
#[derive(Debug)]
pub struct Server {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    runs: Mutex<HashMap<u64, Arc<RunLog>>>,
    verbose: bool,
    _lock: Box<dyn LockGuard>,
}

/// What [`Server::open`] found in the state directory.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct OpenReport {
    pub runs: usize,
    /// Logs whose last record was torn by a crash, and cut.
    pub torn_tails: usize,
}

impl Server {
    /// Open (creating if missing) a state directory and load every run in
    /// it. Only one server may use a directory at a time.
    pub fn open(
        vfs: Arc<dyn Vfs>,
        dir: &Path,
        verbose: bool,
    ) -> anyhow::Result<(Arc<Server>, OpenReport)> {
        vfs.create_dir_all(dir)
            .with_context(|| format!("cannot create state directory {}", dir.display()))?;
        let lock = vfs.lock(&dir.join("LOCK")).with_context(|| {
            format!(
                "state directory {} is in use by another server",
                dir.display()
            )
        })?;
        let mut runs = HashMap::new();
        let mut report = OpenReport::default();
        for name in vfs.read_dir(dir)? {
            let Some(run_id) = run_id_of_log(&name) else {
                continue;
            };
            let (log, torn) = RunLog::open(vfs.as_ref(), &dir.join(&name))?;
            if torn > 0 {
                report.torn_tails += 1;
                if verbose {
                    eprintln!("{name}: cut a torn last record ({torn} bytes, never acknowledged)");
                }
            }
            runs.insert(run_id, Arc::new(log));
        }
        report.runs = runs.len();
        let server = Server {
            vfs,
            dir: dir.to_path_buf(),
            runs: Mutex::new(runs),
            verbose,
            _lock: lock,
        };
        Ok((Arc::new(server), report))
    }

    /// Accept connections on `listener` in a background thread.
    pub fn serve(self: &Arc<Self>, listener: TcpListener) -> anyhow::Result<ServerHandle> {
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Conns>> = Arc::default();
        let (server, stop2, conns2) = (Arc::clone(self), Arc::clone(&stop), Arc::clone(&conns));
        let accept = std::thread::Builder::new()
            .name("diskcheck-accept".into())
            .spawn(move || server.accept_loop(listener, &stop2, &conns2))?;
        Ok(ServerHandle {
            addr,
            stop,
            accept: Some(accept),
            conns,
        })
    }

    fn accept_loop(
        self: Arc<Self>,
        listener: TcpListener,
        stop: &AtomicBool,
        conns: &Mutex<Conns>,
    ) {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        for stream in listener.incoming() {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let Ok(stream) = stream else {
                // Out of descriptors or a connection reset before accept:
                // do not spin.
                std::thread::sleep(std::time::Duration::from_millis(10));
                continue;
            };
            let Ok(clone) = stream.try_clone() else {
                continue;
            };
            let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
            let server = Arc::clone(&self);
            let spawned = std::thread::Builder::new()
                .name("diskcheck-conn".into())
                .spawn(move || server.connection(stream));
            if let Ok(handle) = spawned {
                let mut c = conns.lock().expect("conns");
                c.retain(|_, (_, h)| !h.is_finished());
                c.insert(id, (clone, handle));
            }
        }
    }

    fn connection(&self, stream: TcpStream) {
        let peer = stream
            .peer_addr()
            .map_or("?".to_string(), |a| a.to_string());
        if let Err(e) = self.serve_connection(stream) {
            if self.verbose {
                eprintln!("{peer}: {e:#}");
            }
        }
    }

    fn serve_connection(&self, stream: TcpStream) -> anyhow::Result<()> {
        // Replies are small and awaited: Nagle's algorithm would hold them
        // back for a delayed ACK (40 ms on Linux).
        stream.set_nodelay(true)?;
        let mut reader = BufReader::new(stream.try_clone()?);
        let mut writer = BufWriter::new(stream);
        let mut run: Option<Arc<RunLog>> = None;
        let mut replies = 0usize;
        let mut sync_to: Option<(Arc<RunLog>, u64)> = None;
        loop {
            let Some(body) = read_frame(&mut reader)? else {
                return Ok(());
            };
            let request = Request::decode(&body);
            let outcome = match request {
                Ok(Request::Query { run_id }) => {
                    finish_batch(&mut writer, &mut sync_to, &mut replies)?;
                    self.answer_query(&mut writer, run_id)
                }
                Ok(Request::List) => {
                    finish_batch(&mut writer, &mut sync_to, &mut replies)?;
                    self.answer_list(&mut writer)
                }
                // A batch is synced against one run's log: close it before
                // the connection switches runs.
                Ok(req @ (Request::Begin(_) | Request::Attach { .. })) => {
                    finish_batch(&mut writer, &mut sync_to, &mut replies)?;
                    self.record(req, &mut run).map(|_| replies += 1)
                }
                Ok(req) => self.record(req, &mut run).map(|pos| {
                    if let (Some(log), Some(pos)) = (&run, pos) {
                        sync_to = Some((Arc::clone(log), pos));
                    }
                    replies += 1;
                }),
                Err(e) => Err(e.into()),
            };
            if let Err(e) = outcome {
                // Earlier requests in this batch were recorded: confirm them
                // before refusing this one.
                finish_batch(&mut writer, &mut sync_to, &mut replies)?;
                write_frame(&mut writer, &Reply::Err(format!("{e:#}")).encode())?;
                writer.flush()?;
                return Err(e);
            }
            if reader.buffer().is_empty() {
                finish_batch(&mut writer, &mut sync_to, &mut replies)?;
            }
        }
    }

    /// Apply one recording request; returns the log offset that must be
    /// durable before it is confirmed.
    fn record(&self, req: Request, run: &mut Option<Arc<RunLog>>) -> anyhow::Result<Option<u64>> {
        match req {
            Request::Begin(meta) => {
                *run = Some(self.begin(meta)?);
                Ok(None)
            }
            Request::Attach { run_id, .. } => {
                let log = self.runs.lock().expect("runs").get(&run_id).cloned();
                let Some(log) = log else {
                    bail!("run {run_id:016x} is unknown to this server (it never began here)");
                };
                *run = Some(log);
                Ok(None)
            }
            Request::Intents(entries) => {
                Ok(Some(attached(run)?.append_intents(&entries, now_us())?))
            }
            Request::Acks(entries) => Ok(Some(attached(run)?.append_acks(&entries, now_us())?)),
            Request::End { acked_writes } => {
                let log = attached(run)?;
                let pos = log.append_end(acked_writes, now_us())?;
                if self.verbose {
                    let id = log.with_state(|s| s.meta().run_id);
                    eprintln!("run {id:016x} ended cleanly: {acked_writes} acknowledged writes");
                }
                Ok(Some(pos))
            }
            Request::Query { .. } | Request::List => {
                unreachable!("queries are answered by the caller")
            }
        }
    }

    /// Start a run, or accept the same `Begin` again (a client reconnecting).
    fn begin(&self, meta: RunMeta) -> anyhow::Result<Arc<RunLog>> {
        check_meta(&meta)?;
        let mut runs = self.runs.lock().expect("runs");
        if let Some(log) = runs.get(&meta.run_id) {
            if log.with_state(|s| s.meta() != &meta) {
                bail!(
                    "run id {:016x} is already recorded with other parameters",
                    meta.run_id
                );
            }
            return Ok(Arc::clone(log));
        }
        let path = run_log_path(&self.dir, meta.run_id);
        if self.verbose {
            eprintln!(
                "run {:016x} began: {} on {}, {} blocks of {} bytes, {} thread(s), {}",
                meta.run_id,
                meta.file,
                meta.host,
                meta.block_count,
                meta.block_bytes,
                meta.threads,
                meta.method
            );
        }
        let log = Arc::new(RunLog::create(
            self.vfs.as_ref(),
            &path,
            meta.clone(),
            now_us(),
        )?);
        runs.insert(meta.run_id, Arc::clone(&log));
        Ok(log)
    }

    fn answer_query(&self, w: &mut impl Write, run_id: u64) -> anyhow::Result<()> {
        let log = self.runs.lock().expect("runs").get(&run_id).cloned();
        let Some(log) = log else {
            write_frame(w, &Reply::Unknown.encode())?;
            w.flush()?;
            return Ok(());
        };
        let (summary, mut blocks) = log.with_state(|s| {
            let blocks: Vec<_> = s.blocks.iter().map(|(b, r)| (*b, *r)).collect();
            (s.summary.clone(), blocks)
        });
        blocks.sort_unstable_by_key(|(b, _)| *b);
        write_frame(w, &Reply::Run(summary).encode())?;
        for chunk in blocks.chunks(MAX_ENTRIES) {
            write_frame(w, &Reply::Blocks(chunk.to_vec()).encode())?;
        }
        write_frame(w, &Reply::Done.encode())?;
        w.flush()?;
        Ok(())
    }

    /// One `Run` per recorded run (in run id order), then `Done`.
    fn answer_list(&self, w: &mut impl Write) -> anyhow::Result<()> {
        let logs: Vec<Arc<RunLog>> = self.runs.lock().expect("runs").values().cloned().collect();
        let mut summaries: Vec<_> = logs
            .iter()
            .map(|log| log.with_state(|s| s.summary.clone()))
            .collect();
        summaries.sort_unstable_by_key(|s| s.meta.run_id);
        for summary in summaries {
            write_frame(w, &Reply::Run(summary).encode())?;
        }
        write_frame(w, &Reply::Done.encode())?;
        w.flush()?;
        Ok(())
    }

    /// Runs recorded so far.
    #[cfg(test)]
    pub fn run_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.runs.lock().expect("runs").keys().copied().collect();
        ids.sort_unstable();
        ids
    }
}

fn attached(run: &Option<Arc<RunLog>>) -> anyhow::Result<&Arc<RunLog>> {
    run.as_ref()
        .context("protocol error: the connection must send Begin or Attach first")
}

fn check_meta(meta: &RunMeta) -> anyhow::Result<()> {
    if !valid_block_bytes(meta.block_bytes) {
        bail!("invalid block size {}", meta.block_bytes);
    }
    if meta.block_count == 0 || meta.threads == 0 {
        bail!("a run needs at least one block and one thread");
    }
    if meta.run_id == 0 {
        bail!("run id 0 is reserved");
    }
    Ok(())
}

/// Make the batch durable, then confirm every request in it.
fn finish_batch(
    w: &mut impl Write,
    sync_to: &mut Option<(Arc<RunLog>, u64)>,
    replies: &mut usize,
) -> anyhow::Result<()> {
    if let Some((log, pos)) = sync_to.take() {
        log.sync_to(pos)?;
    }
    let ok = Reply::Ok.encode();
    for _ in 0..std::mem::take(replies) {
        write_frame(w, &ok)?;
    }
    w.flush()?;
    Ok(())
}

type Conns = HashMap<u64, (TcpStream, JoinHandle<()>)>;

/// A running server; [`ServerHandle::shutdown`] stops it and waits for its
/// threads, releasing the state directory.
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
    conns: Arc<Mutex<Conns>>,
}

impl ServerHandle {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop accepting, close every connection, wait for every thread.
    pub fn shutdown(mut self) {
        self.stop_threads();
    }

    fn stop_threads(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept with a connection of our own.
        let _ = TcpStream::connect(self.addr);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
        let conns = std::mem::take(&mut *self.conns.lock().expect("conns"));
        for (stream, _) in conns.values() {
            let _ = stream.shutdown(Shutdown::Both);
        }
        for (_, (_, handle)) in conns {
            let _ = handle.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if self.accept.is_some() {
            self.stop_threads();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diskcheck::state::{test_meta, Entry};
    use keel::io::RealVfs;

    fn call(stream: &mut TcpStream, req: &Request) -> Reply {
        write_frame(stream, &req.encode()).unwrap();
        Reply::decode(&read_frame(stream).unwrap().unwrap()).unwrap()
    }

    #[test]
    fn records_survive_restart_and_bad_requests_are_refused() {
        let dir = std::env::temp_dir().join(format!("keel-dcsrv-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let vfs = RealVfs::shared();
        let (server, report) = Server::open(Arc::clone(&vfs), &dir, false).unwrap();
        assert_eq!(report.runs, 0);
        assert!(
            Server::open(Arc::clone(&vfs), &dir, false).is_err(),
            "second server on one dir"
        );
        let handle = server
            .serve(TcpListener::bind("127.0.0.1:0").unwrap())
            .unwrap();
        let mut c = TcpStream::connect(handle.addr()).unwrap();
        let e = Entry {
            block: 4,
            generation: 1,
        };
        assert_eq!(
            call(&mut c, &Request::Intents(vec![e])),
            Reply::Err("protocol error: the connection must send Begin or Attach first".into())
        );
        let mut c = TcpStream::connect(handle.addr()).unwrap();
        assert_eq!(call(&mut c, &Request::Begin(test_meta(9, 10))), Reply::Ok);
        assert_eq!(call(&mut c, &Request::Intents(vec![e])), Reply::Ok);
        assert_eq!(call(&mut c, &Request::Acks(vec![e])), Reply::Ok);
        let mut other = test_meta(9, 10);
        other.block_count = 11;
        assert!(matches!(
            call(&mut c, &Request::Begin(other)),
            Reply::Err(_)
        ));
        handle.shutdown();
        drop(server);

        let (server, report) = Server::open(vfs, &dir, false).unwrap();
        assert_eq!(report.runs, 1);
        assert_eq!(server.run_ids(), [9]);
        let handle = server
            .serve(TcpListener::bind("127.0.0.1:0").unwrap())
            .unwrap();
        let mut c = TcpStream::connect(handle.addr()).unwrap();
        let Reply::Run(summary) = call(&mut c, &Request::Query { run_id: 9 }) else {
            panic!()
        };
        assert_eq!(summary.acked_writes, 1);
        let blocks = Reply::decode(&read_frame(&mut c).unwrap().unwrap()).unwrap();
        let Reply::Blocks(b) = blocks else { panic!() };
        assert_eq!((b[0].0, b[0].1.acked_gen), (4, 1));
        assert_eq!(
            Reply::decode(&read_frame(&mut c).unwrap().unwrap()).unwrap(),
            Reply::Done
        );
        assert_eq!(call(&mut c, &Request::Query { run_id: 1 }), Reply::Unknown);
        let Reply::Run(listed) = call(&mut c, &Request::List) else {
            panic!()
        };
        assert_eq!(listed.meta, test_meta(9, 10));
        assert_eq!(
            Reply::decode(&read_frame(&mut c).unwrap().unwrap()).unwrap(),
            Reply::Done
        );
        handle.shutdown();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
