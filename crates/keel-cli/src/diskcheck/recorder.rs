//! Where a writer reports its writes: the server on another machine
//! ([`Link`]), or a synced log on another device ([`FileRecorder`]).
//!
//! Messages are numbered with tickets (1, 2, …) per recorder. Sending never
//! waits; [`Recorder::wait`] blocks until a ticket and every earlier one are
//! durably recorded. That is what lets the writer pipeline: it announces the
//! next batch of blocks while it writes the current one.

use std::collections::VecDeque;
use std::io::{BufReader, BufWriter, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};

use super::log::RunLog;
use super::now_us;
use super::state::{Entry, RunState, RunSummary};
use super::wire::{read_frame, write_frame, Reply, Request};

/// How long to wait for a TCP connection to the server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause between reconnection attempts.
const RECONNECT_PAUSE: Duration = Duration::from_millis(200);
/// A server that confirms nothing for this long is treated as gone.
const STALL_TIMEOUT: Duration = Duration::from_secs(120);

/// One writer's channel to the record of its run.
pub trait Recorder: Send {
    /// Send "about to write" entries; returns their ticket.
    fn announce(&mut self, entries: &[Entry]) -> anyhow::Result<u64>;
    /// Send "acknowledged durable" entries; returns their ticket.
    fn ack(&mut self, entries: &[Entry]) -> anyhow::Result<u64>;
    /// Block until `ticket` and all earlier ones are durably recorded.
    fn wait(&mut self, ticket: u64) -> anyhow::Result<()>;
    /// The newest ticket known to be recorded (does not block).
    fn confirmed(&mut self) -> anyhow::Result<u64>;
    /// Record a clean end of the run and wait for it.
    fn end(&mut self, acked_writes: u64) -> anyhow::Result<()>;
}

/// A connection to `keel diskcheck listen` that survives a server restart:
/// when the connection breaks it reconnects (for up to `retry_for`) and
/// sends again every request not yet confirmed. Requests are idempotent at
/// the server, so a request recorded just before the break does no harm.
pub struct Link {
    addr: SocketAddr,
    hello: Request,
    retry_for: Duration,
    stream: Option<BufWriter<TcpStream>>,
    shared: Arc<Shared>,
    /// Requests sent and not yet confirmed, oldest first.
    pending: VecDeque<(u64, Vec<u8>)>,
    next_ticket: u64,
}

#[derive(Default)]
struct Shared {
    state: Mutex<LinkState>,
    changed: Condvar,
}

#[derive(Default)]
struct LinkState {
    confirmed: u64,
    /// Bumped on every reconnection; a reader thread of an older connection
    /// changes nothing.
    epoch: u64,
    broken: Option<String>,
    refused: Option<String>,
    last_progress: Option<Instant>,
}

impl Link {
    /// Connect and send `hello` (`Begin` or `Attach`), once: an unreachable
    /// server at the start is an error, not something to wait for.
    pub fn connect(addr: SocketAddr, hello: Request, retry_for: Duration) -> anyhow::Result<Link> {
        let mut link = Link {
            addr,
            hello,
            retry_for,
            stream: None,
            shared: Arc::default(),
            pending: VecDeque::new(),
            next_ticket: 1,
        };
        link.open_connection().map_err(|e| {
            if e.is::<Refused>() {
                e
            } else {
                e.context(format!("cannot reach the diskcheck server at {addr}"))
            }
        })?;
        Ok(link)
    }

    fn open_connection(&mut self) -> anyhow::Result<()> {
        let stream = TcpStream::connect_timeout(&self.addr, CONNECT_TIMEOUT)?;
        stream.set_nodelay(true)?;
        let mut reader = BufReader::new(stream.try_clone()?);
        let mut writer = BufWriter::new(stream);
        write_frame(&mut writer, &self.hello.encode())?;
        writer.flush()?;
        let body = read_frame(&mut reader)?.context("the server closed the connection")?;
        match Reply::decode(&body)? {
            Reply::Ok => {}
            Reply::Err(msg) => return Err(Refused(msg).into()),
            other => bail!("unexpected reply {other:?}"),
        }
        let epoch = {
            let mut st = self.shared.state.lock().expect("link");
            st.epoch += 1;
            st.broken = None;
            st.last_progress = Some(Instant::now());
            st.epoch
        };
        let shared = Arc::clone(&self.shared);
        std::thread::Builder::new()
            .name("diskcheck-replies".into())
            .spawn(move || read_replies(reader, &shared, epoch))?;
        self.stream = Some(writer);
        Ok(())
    }

    fn send(&mut self, req: &Request) -> anyhow::Result<u64> {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let body = req.encode();
        let sent = match &mut self.stream {
            Some(w) => write_frame(w, &body).and_then(|()| Ok(w.flush()?)),
            None => Ok(()),
        };
        self.pending.push_back((ticket, body));
        if let Err(e) = sent {
            self.mark_broken(e.to_string());
        }
        Ok(ticket)
    }

    fn mark_broken(&self, why: String) {
        let mut st = self.shared.state.lock().expect("link");
        st.broken.get_or_insert(why);
    }

    /// Drop the broken connection, connect again and resend what is not
    /// confirmed.
    fn reconnect(&mut self, why: &str) -> anyhow::Result<()> {
        if let Some(w) = self.stream.take() {
            let _ = w.get_ref().shutdown(Shutdown::Both);
        }
        let deadline = Instant::now() + self.retry_for;
        loop {
            // Retire the old connection's reader before counting what it
            // confirmed, so that no reply is counted twice.
            let confirmed = {
                let mut st = self.shared.state.lock().expect("link");
                st.epoch += 1;
                st.confirmed
            };
            self.pending.retain(|(t, _)| *t > confirmed);
            let attempt = self.open_connection().and_then(|()| self.resend());
            match attempt {
                Ok(()) => return Ok(()),
                Err(e) if e.is::<Refused>() => return Err(e),
                Err(e) if Instant::now() >= deadline => {
                    return Err(e.context(format!(
                    "lost the diskcheck server at {} ({why}) and could not reconnect within {} s",
                    self.addr,
                    self.retry_for.as_secs()
                )))
                }
                Err(_) => std::thread::sleep(RECONNECT_PAUSE),
            }
        }
    }

    fn resend(&mut self) -> anyhow::Result<()> {
        let w = self.stream.as_mut().expect("connected");
        for (_, body) in &self.pending {
            write_frame(w, body)?;
        }
        w.flush()?;
        Ok(())
    }

    /// One look at the shared state: `Ok(Some(n))` confirmed, `Ok(None)`
    /// still waiting, or reconnect/refusal handling.
    fn poll(&mut self, ticket: u64, block: bool) -> anyhow::Result<Option<u64>> {
        let st = self.shared.state.lock().expect("link");
        if let Some(msg) = &st.refused {
            bail!("the diskcheck server refused a request: {msg}");
        }
        if st.confirmed >= ticket || !block {
            return Ok(Some(st.confirmed));
        }
        let stalled = st
            .last_progress
            .is_some_and(|t| t.elapsed() > STALL_TIMEOUT);
        if let Some(why) = st
            .broken
            .clone()
            .or(stalled.then(|| "no reply".to_string()))
        {
            drop(st);
            self.reconnect(&why)?;
            return Ok(None);
        }
        let _ = self
            .shared
            .changed
            .wait_timeout(st, Duration::from_secs(1))
            .expect("link");
        Ok(None)
    }
}

impl Recorder for Link {
    fn announce(&mut self, entries: &[Entry]) -> anyhow::Result<u64> {
        self.send(&Request::Intents(entries.to_vec()))
    }

    fn ack(&mut self, entries: &[Entry]) -> anyhow::Result<u64> {
        self.send(&Request::Acks(entries.to_vec()))
    }

    fn wait(&mut self, ticket: u64) -> anyhow::Result<()> {
        assert!(
            ticket < self.next_ticket,
            "waiting for a ticket never issued"
        );
        while self.poll(ticket, true)?.is_none() {}
        let confirmed = self.shared.state.lock().expect("link").confirmed;
        self.pending.retain(|(t, _)| *t > confirmed);
        Ok(())
    }

    fn confirmed(&mut self) -> anyhow::Result<u64> {
        let broken = self.shared.state.lock().expect("link").broken.clone();
        if let Some(why) = broken {
            self.reconnect(&why)?;
        }
        Ok(self.poll(0, false)?.unwrap_or(0))
    }

    fn end(&mut self, acked_writes: u64) -> anyhow::Result<()> {
        let t = self.send(&Request::End { acked_writes })?;
        self.wait(t)
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        if let Some(w) = &self.stream {
            let _ = w.get_ref().shutdown(Shutdown::Both);
        }
    }
}

/// The server's refusal: reconnecting will not help.
#[derive(Debug)]
struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the diskcheck server refused: {}", self.0)
    }
}

impl std::error::Error for Refused {}

fn read_replies(mut reader: BufReader<TcpStream>, shared: &Shared, epoch: u64) {
    loop {
        let reply = read_frame(&mut reader)
            .map_err(|e| e.to_string())
            .and_then(|b| b.ok_or_else(|| "the server closed the connection".to_string()))
            .and_then(|b| Reply::decode(&b).map_err(|e| e.to_string()));
        let mut st = shared.state.lock().expect("link");
        if st.epoch != epoch {
            return;
        }
        match reply {
            Ok(Reply::Ok) => {
                st.confirmed += 1;
                st.last_progress = Some(Instant::now());
            }
            Ok(Reply::Err(msg)) => st.refused = Some(msg),
            Ok(other) => st.broken = Some(format!("unexpected reply {other:?}")),
            Err(why) => st.broken = Some(why),
        }
        let done = st.refused.is_some() || st.broken.is_some();
        drop(st);
        shared.changed.notify_all();
        if done {
            return;
        }
    }
}

/// The single-machine mode: records go to a log file (on another device
/// than the one under test), synced before a batch of intents counts as
/// recorded. Acknowledgements are appended at once and synced with the next
/// batch of intents, or by [`Recorder::wait`].
pub struct FileRecorder {
    log: Arc<RunLog>,
    next_ticket: u64,
    confirmed: u64,
    /// Log offset after this recorder's last append.
    appended_to: u64,
}

impl FileRecorder {
    pub fn new(log: Arc<RunLog>) -> Self {
        FileRecorder {
            log,
            next_ticket: 1,
            confirmed: 0,
            appended_to: 0,
        }
    }

    fn issue(&mut self, pos: u64) -> u64 {
        self.appended_to = self.appended_to.max(pos);
        let t = self.next_ticket;
        self.next_ticket += 1;
        t
    }
}

impl Recorder for FileRecorder {
    fn announce(&mut self, entries: &[Entry]) -> anyhow::Result<u64> {
        let pos = self.log.append_intents(entries, now_us())?;
        let t = self.issue(pos);
        self.wait(t)?;
        Ok(t)
    }

    fn ack(&mut self, entries: &[Entry]) -> anyhow::Result<u64> {
        let pos = self.log.append_acks(entries, now_us())?;
        Ok(self.issue(pos))
    }

    fn wait(&mut self, ticket: u64) -> anyhow::Result<()> {
        if ticket > self.confirmed {
            self.log.sync_to(self.appended_to)?;
            self.confirmed = self.next_ticket - 1;
        }
        Ok(())
    }

    fn confirmed(&mut self) -> anyhow::Result<u64> {
        Ok(self.confirmed)
    }

    fn end(&mut self, acked_writes: u64) -> anyhow::Result<()> {
        let pos = self.log.append_end(acked_writes, now_us())?;
        let t = self.issue(pos);
        self.wait(t)
    }
}

/// Ask a server for everything it recorded about a run (`None`: unknown).
pub fn query(addr: SocketAddr, run_id: u64) -> anyhow::Result<Option<RunState>> {
    let mut reader = ask(addr, &Request::Query { run_id })?;
    let summary = match next_reply(&mut reader)? {
        Reply::Unknown => return Ok(None),
        Reply::Run(s) => s,
        Reply::Err(msg) => bail!("the diskcheck server refused the query: {msg}"),
        other => bail!("unexpected reply {other:?}"),
    };
    let mut state = RunState {
        summary,
        blocks: Default::default(),
    };
    loop {
        match next_reply(&mut reader)? {
            Reply::Blocks(v) => state.blocks.extend(v),
            Reply::Done => return Ok(Some(state)),
            other => return Err(anyhow!("unexpected reply {other:?} in a query answer")),
        }
    }
}

/// Ask a server for the summary of every run it recorded.
pub fn list(addr: SocketAddr) -> anyhow::Result<Vec<RunSummary>> {
    let mut reader = ask(addr, &Request::List)?;
    let mut runs = Vec::new();
    loop {
        match next_reply(&mut reader)? {
            Reply::Run(s) => runs.push(s),
            Reply::Done => return Ok(runs),
            // A server older than `List` answers "unknown message kind".
            Reply::Err(msg) => bail!(
                "the diskcheck server refused to list its runs: {msg} \
                 (run the same keel version on both machines)"
            ),
            other => bail!("unexpected reply {other:?} in a list answer"),
        }
    }
}

/// Connect to a server and send one request; returns the reading half.
fn ask(addr: SocketAddr, req: &Request) -> anyhow::Result<BufReader<TcpStream>> {
    let stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
        .with_context(|| format!("cannot reach the diskcheck server at {addr}"))?;
    stream.set_nodelay(true)?;
    let reader = BufReader::new(stream.try_clone()?);
    let mut writer = BufWriter::new(stream);
    write_frame(&mut writer, &req.encode())?;
    writer.flush()?;
    Ok(reader)
}

fn next_reply(reader: &mut BufReader<TcpStream>) -> anyhow::Result<Reply> {
    let body = read_frame(reader)?.context("the server closed the connection")?;
    Ok(Reply::decode(&body)?)
}
