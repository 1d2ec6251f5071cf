//! The client–server protocol of `keel diskcheck`, specified byte by byte in
//! `docs/diskcheck.md`: length-prefixed frames over TCP, one reply per
//! request, in order, sent only once the server has made the request
//! durable. The same field encodings serve the server's log records.

use std::io::{Read, Write};

use super::state::{BlockRecord, Entry, RunMeta, RunSummary};

/// Bumped on any incompatible change; sent in `Begin`, `Attach`, `Query`
/// and `List`.
pub const PROTOCOL_VERSION: u32 = 1;
/// Largest frame body either side accepts: bounds memory per connection.
pub const MAX_FRAME_BYTES: usize = 1 << 20;
/// Most entries in one `Intents`, `Acks` or `Blocks` message.
pub const MAX_ENTRIES: usize = 4096;
/// Longest string field (paths, method and host names).
pub const MAX_STRING_BYTES: usize = 4096;

/// A malformed frame or a broken connection.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    #[error("message truncated (peer sent {0} bytes fewer than its fields need)")]
    Truncated(usize),
    #[error("frame of {0} bytes is larger than the {MAX_FRAME_BYTES}-byte limit")]
    FrameTooLarge(usize),
    #[error("{0} entries in one message; the limit is {MAX_ENTRIES}")]
    TooManyEntries(usize),
    #[error("string field of {0} bytes; the limit is {MAX_STRING_BYTES}")]
    StringTooLong(usize),
    #[error("string field is not UTF-8")]
    BadUtf8,
    #[error("unknown message kind 0x{0:02x}")]
    UnknownKind(u8),
    #[error("{0} trailing bytes after the message")]
    Trailing(usize),
    #[error("peer speaks protocol version {0}, this keel speaks {PROTOCOL_VERSION}; run the same keel version on both machines")]
    Version(u32),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Appends little-endian fields to a buffer.
#[derive(Default)]
pub struct Enc(pub Vec<u8>);

impl Enc {
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// u16 length, then UTF-8 bytes. Longer strings are a caller bug.
    pub fn str(&mut self, s: &str) -> &mut Self {
        assert!(s.len() <= MAX_STRING_BYTES, "string field too long");
        self.0.extend_from_slice(&(s.len() as u16).to_le_bytes());
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    /// u32 count, then (block u64, generation u64) pairs.
    pub fn entries(&mut self, entries: &[Entry]) -> &mut Self {
        assert!(entries.len() <= MAX_ENTRIES, "too many entries");
        self.u32(entries.len() as u32);
        for e in entries {
            self.u64(e.block).u64(e.generation);
        }
        self
    }
    pub fn meta(&mut self, m: &RunMeta) -> &mut Self {
        self.u64(m.run_id)
            .u32(m.block_bytes)
            .u64(m.block_count)
            .u32(m.threads)
            .u64(m.started_us)
            .str(&m.method)
            .str(&m.file)
            .str(&m.host)
    }
}

/// Reads little-endian fields from a received buffer, never past its end.
pub struct Dec<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Dec<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Dec { buf, pos: 0 }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let rest = self.buf.len() - self.pos;
        if n > rest {
            return Err(WireError::Truncated(n - rest));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    pub fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    pub fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    pub fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    pub fn str(&mut self) -> Result<String, WireError> {
        let len = u16::from_le_bytes(self.take(2)?.try_into().expect("2")) as usize;
        if len > MAX_STRING_BYTES {
            return Err(WireError::StringTooLong(len));
        }
        String::from_utf8(self.take(len)?.to_vec()).map_err(|_| WireError::BadUtf8)
    }
    pub fn entries(&mut self) -> Result<Vec<Entry>, WireError> {
        let n = self.count()?;
        (0..n)
            .map(|_| {
                Ok(Entry {
                    block: self.u64()?,
                    generation: self.u64()?,
                })
            })
            .collect()
    }
    pub fn meta(&mut self) -> Result<RunMeta, WireError> {
        Ok(RunMeta {
            run_id: self.u64()?,
            block_bytes: self.u32()?,
            block_count: self.u64()?,
            threads: self.u32()?,
            started_us: self.u64()?,
            method: self.str()?,
            file: self.str()?,
            host: self.str()?,
        })
    }
    fn count(&mut self) -> Result<usize, WireError> {
        let n = self.u32()? as usize;
        if n > MAX_ENTRIES {
            return Err(WireError::TooManyEntries(n));
        }
        Ok(n)
    }
    fn version(&mut self) -> Result<(), WireError> {
        match self.u32()? {
            PROTOCOL_VERSION => Ok(()),
            v => Err(WireError::Version(v)),
        }
    }
    /// Fails unless every byte was consumed.
    pub fn finish(&self) -> Result<(), WireError> {
        match self.buf.len() - self.pos {
            0 => Ok(()),
            n => Err(WireError::Trailing(n)),
        }
    }
}

/// What a client asks. Every request gets exactly one reply, except `Query`
/// (a `Run`, then `Blocks` frames, then `Done`; or `Unknown`) and `List`
/// (a `Run` per run, then `Done`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Start recording a run (idempotent: the same meta again is accepted).
    Begin(RunMeta),
    /// A writer connection joins a run that has begun.
    Attach { run_id: u64, writer_id: u32 },
    /// "About to write": the client writes none of these before the reply.
    Intents(Vec<Entry>),
    /// "Acknowledged durable": these writes (and their syncs) completed.
    Acks(Vec<Entry>),
    /// The run ended cleanly; `acked_writes` is the client's total.
    End { acked_writes: u64 },
    /// Send back everything recorded for a run.
    Query { run_id: u64 },
    /// Send back the summary of every run recorded: how `verify` finds the
    /// run of a file that holds no block of it.
    List,
}

/// What the server answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// The request is durably recorded.
    Ok,
    /// The request was refused; the server closes the connection.
    Err(String),
    /// First answer to `Query`; one per run in answer to `List`.
    Run(RunSummary),
    /// Per-block records of the queried run.
    Blocks(Vec<(u64, BlockRecord)>),
    /// Last answer to `Query` and `List`.
    Done,
    /// `Query` for a run the server never recorded.
    Unknown,
}

mod kind {
    pub const BEGIN: u8 = 0x01;
    pub const ATTACH: u8 = 0x02;
    pub const INTENTS: u8 = 0x03;
    pub const ACKS: u8 = 0x04;
    pub const END: u8 = 0x05;
    pub const QUERY: u8 = 0x06;
    pub const LIST: u8 = 0x07;
    pub const OK: u8 = 0x81;
    pub const ERR: u8 = 0x82;
    pub const RUN: u8 = 0x83;
    pub const BLOCKS: u8 = 0x84;
    pub const DONE: u8 = 0x85;
    pub const UNKNOWN: u8 = 0x86;
}

impl Request {
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        match self {
            Request::Begin(m) => e.u8(kind::BEGIN).u32(PROTOCOL_VERSION).meta(m),
            Request::Attach { run_id, writer_id } => e
                .u8(kind::ATTACH)
                .u32(PROTOCOL_VERSION)
                .u64(*run_id)
                .u32(*writer_id),
            Request::Intents(v) => e.u8(kind::INTENTS).entries(v),
            Request::Acks(v) => e.u8(kind::ACKS).entries(v),
            Request::End { acked_writes } => e.u8(kind::END).u64(*acked_writes),
            Request::Query { run_id } => e.u8(kind::QUERY).u32(PROTOCOL_VERSION).u64(*run_id),
            Request::List => e.u8(kind::LIST).u32(PROTOCOL_VERSION),
        };
        e.0
    }

    pub fn decode(body: &[u8]) -> Result<Request, WireError> {
        let mut d = Dec::new(body);
        let req = match d.u8()? {
            kind::BEGIN => {
                d.version()?;
                Request::Begin(d.meta()?)
            }
            kind::ATTACH => {
                d.version()?;
                Request::Attach {
                    run_id: d.u64()?,
                    writer_id: d.u32()?,
                }
            }
            kind::INTENTS => Request::Intents(d.entries()?),
            kind::ACKS => Request::Acks(d.entries()?),
            kind::END => Request::End {
                acked_writes: d.u64()?,
            },
            kind::QUERY => {
                d.version()?;
                Request::Query { run_id: d.u64()? }
            }
            kind::LIST => {
                d.version()?;
                Request::List
            }
            k => return Err(WireError::UnknownKind(k)),
        };
        d.finish()?;
        Ok(req)
    }
}

impl Reply {
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        match self {
            Reply::Ok => e.u8(kind::OK),
            Reply::Err(msg) => e.u8(kind::ERR).str(truncate(msg)),
            Reply::Run(s) => e
                .u8(kind::RUN)
                .meta(&s.meta)
                .u64(s.first_time_us)
                .u64(s.last_time_us)
                .u64(s.acked_writes)
                .u8(s.ended as u8),
            Reply::Blocks(v) => {
                assert!(v.len() <= MAX_ENTRIES, "too many blocks in one frame");
                e.u8(kind::BLOCKS).u32(v.len() as u32);
                for (block, r) in v {
                    e.u64(*block)
                        .u64(r.intent_gen)
                        .u64(r.intent_time_us)
                        .u64(r.acked_gen)
                        .u64(r.acked_time_us);
                }
                &mut e
            }
            Reply::Done => e.u8(kind::DONE),
            Reply::Unknown => e.u8(kind::UNKNOWN),
        };
        e.0
    }

    pub fn decode(body: &[u8]) -> Result<Reply, WireError> {
        let mut d = Dec::new(body);
        let reply = match d.u8()? {
            kind::OK => Reply::Ok,
            kind::ERR => Reply::Err(d.str()?),
            kind::RUN => Reply::Run(RunSummary {
                meta: d.meta()?,
                first_time_us: d.u64()?,
                last_time_us: d.u64()?,
                acked_writes: d.u64()?,
                ended: d.u8()? != 0,
            }),
            kind::BLOCKS => {
                let n = d.count()?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    let block = d.u64()?;
                    let r = BlockRecord {
                        intent_gen: d.u64()?,
                        intent_time_us: d.u64()?,
                        acked_gen: d.u64()?,
                        acked_time_us: d.u64()?,
                    };
                    v.push((block, r));
                }
                Reply::Blocks(v)
            }
            kind::DONE => Reply::Done,
            kind::UNKNOWN => Reply::Unknown,
            k => return Err(WireError::UnknownKind(k)),
        };
        d.finish()?;
        Ok(reply)
    }
}

/// `msg` cut to at most [`MAX_STRING_BYTES`], at a character boundary.
pub fn truncate(msg: &str) -> &str {
    let mut end = msg.len().min(MAX_STRING_BYTES);
    while !msg.is_char_boundary(end) {
        end -= 1;
    }
    &msg[..end]
}

/// Write one frame: u32 little-endian body length, then the body.
pub fn write_frame(w: &mut impl Write, body: &[u8]) -> Result<(), WireError> {
    if body.len() > MAX_FRAME_BYTES {
        return Err(WireError::FrameTooLarge(body.len()));
    }
    w.write_all(&(body.len() as u32).to_le_bytes())?;
    w.write_all(body)?;
    Ok(())
}

/// Read one frame's body; `None` when the peer closed the connection between
/// frames.
pub fn read_frame(r: &mut impl Read) -> Result<Option<Vec<u8>>, WireError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(WireError::FrameTooLarge(len));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    Ok(Some(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> RunMeta {
        RunMeta {
            run_id: 42,
            block_bytes: 16384,
            block_count: 4096,
            threads: 8,
            started_us: 1_700_000_000_000_000,
            method: "odirect_dsync".into(),
            file: "/mnt/test/dc.bin".into(),
            host: "box".into(),
        }
    }

    #[test]
    fn requests_round_trip() {
        let e = |b, g| Entry {
            block: b,
            generation: g,
        };
        for r in [
            Request::Begin(meta()),
            Request::Attach {
                run_id: 42,
                writer_id: 3,
            },
            Request::Intents(vec![e(1, 1), e(9, 4)]),
            Request::Acks(vec![]),
            Request::End { acked_writes: 77 },
            Request::Query { run_id: 42 },
            Request::List,
        ] {
            assert_eq!(Request::decode(&r.encode()).unwrap(), r);
        }
    }

    #[test]
    fn replies_round_trip() {
        let rec = BlockRecord {
            intent_gen: 3,
            intent_time_us: 10,
            acked_gen: 2,
            acked_time_us: 9,
        };
        let summary = RunSummary {
            meta: meta(),
            first_time_us: 1,
            last_time_us: 2,
            acked_writes: 3,
            ended: true,
        };
        for r in [
            Reply::Ok,
            Reply::Err("no".into()),
            Reply::Run(summary),
            Reply::Blocks(vec![(5, rec)]),
            Reply::Done,
            Reply::Unknown,
        ] {
            assert_eq!(Reply::decode(&r.encode()).unwrap(), r);
        }
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        assert!(matches!(Request::decode(&[]), Err(WireError::Truncated(_))));
        assert!(matches!(
            Request::decode(&[0x7f]),
            Err(WireError::UnknownKind(0x7f))
        ));
        let mut begin = Request::Begin(meta()).encode();
        begin[1] = 9;
        assert!(matches!(
            Request::decode(&begin),
            Err(WireError::Version(9))
        ));
        let mut too_many = Enc::default();
        too_many.u8(kind::ACKS).u32(u32::MAX);
        assert!(matches!(
            Request::decode(&too_many.0),
            Err(WireError::TooManyEntries(_))
        ));
        let mut end = Request::End { acked_writes: 1 }.encode();
        end.push(0);
        assert!(matches!(Request::decode(&end), Err(WireError::Trailing(1))));
        // Every prefix of a valid message is rejected cleanly.
        let full = Request::Begin(meta()).encode();
        for n in 0..full.len() {
            assert!(Request::decode(&full[..n]).is_err());
        }
    }

    #[test]
    fn frames() {
        let mut buf = Vec::new();
        write_frame(&mut buf, b"abc").unwrap();
        write_frame(&mut buf, b"").unwrap();
        let mut r = &buf[..];
        assert_eq!(read_frame(&mut r).unwrap().unwrap(), b"abc");
        assert_eq!(read_frame(&mut r).unwrap().unwrap(), b"");
        assert!(read_frame(&mut r).unwrap().is_none());
        let huge = (MAX_FRAME_BYTES as u32 + 1).to_le_bytes();
        assert!(matches!(
            read_frame(&mut &huge[..]),
            Err(WireError::FrameTooLarge(_))
        ));
    }
}
