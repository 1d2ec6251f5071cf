//! Every command's standard output and error, written so that a reader who
//! stops reading (`keel db scan S | head`) ends the command quietly.
//!
//! Rust ignores SIGPIPE, so a write to a closed pipe fails with `EPIPE`
//! instead of killing the process, and `println!` turns that failure into
//! a panic ("failed printing to stdout: Broken pipe", exit 101). The
//! commands print through [`outln!`], [`out!`] and [`Stdout`] instead:
//! a closed stdout comes back as [`StdoutError::Closed`], which the
//! command returns with `?` like any error (so its clean-up runs: temporary
//! files removed, the store dropped), and `main` ends the process with exit
//! 0 and nothing on stderr ([`closed_stdout`]). ripgrep does the same.
//! Restoring SIGPIPE's default action instead would also kill the process
//! on a write to a closed socket (`keel diskcheck`'s connection to its
//! server), with no message and no clean-up.
//!
//! The macros are in scope in every module (`#[macro_use]` in `main.rs`).
//! Messages on stderr go through [`errln!`], which drops what it cannot
//! write: there is nowhere left to report that failure, and it must not
//! panic either (`keel … 2>&1 | head`).

use std::fmt;
use std::io::{self, Write};

/// Writing to standard output failed.
#[derive(Debug, thiserror::Error)]
pub enum StdoutError {
    /// The reader closed its end (`EPIPE`): it has all it wants. Not a
    /// failure of the command: `main` exits 0, saying nothing.
    #[error("standard output was closed by its reader")]
    Closed,
    /// Any other failure (a full disk under a redirect, …).
    #[error("writing to standard output: {0}")]
    Failed(io::Error),
}

impl From<io::Error> for StdoutError {
    fn from(e: io::Error) -> StdoutError {
        if e.kind() == io::ErrorKind::BrokenPipe {
            StdoutError::Closed
        } else {
            StdoutError::Failed(e)
        }
    }
}

/// Whether `e` (or an error it wraps) is a closed standard output: the
/// command stopped because its reader went away.
pub fn closed_stdout(e: &anyhow::Error) -> bool {
    e.chain()
        .any(|c| matches!(c.downcast_ref::<StdoutError>(), Some(StdoutError::Closed)))
}

/// Write `args` to standard output and flush, so that a failure is seen
/// here rather than lost when the process exits.
pub fn print(args: fmt::Arguments<'_>) -> Result<(), StdoutError> {
    let mut out = io::stdout().lock();
    out.write_fmt(args)?;
    out.flush()?;
    Ok(())
}

/// Write `args` to standard error; a failure is ignored (see the module's
/// comment).
pub fn print_err(args: fmt::Arguments<'_>) {
    let _ = io::stderr().lock().write_fmt(args);
}

/// Standard output, buffered, for commands that print many lines (one
/// `write` a buffer rather than a line). Use `write!`/`writeln!` on it
/// and end with [`Stdout::finish`]: dropping it flushes what is left but
/// cannot report a failure.
pub struct Stdout(io::BufWriter<io::StdoutLock<'static>>);

impl Stdout {
    pub fn buffered() -> Stdout {
        Stdout(io::BufWriter::with_capacity(64 << 10, io::stdout().lock()))
    }

    /// For `write!` and `writeln!`.
    pub fn write_fmt(&mut self, args: fmt::Arguments<'_>) -> Result<(), StdoutError> {
        Ok(self.0.write_fmt(args)?)
    }

    pub fn write_all(&mut self, bytes: &[u8]) -> Result<(), StdoutError> {
        Ok(self.0.write_all(bytes)?)
    }

    /// Flush everything written.
    pub fn finish(mut self) -> Result<(), StdoutError> {
        Ok(self.0.flush()?)
    }
}

/// `print!` that returns `Result<(), StdoutError>` instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::out::print(format_args!($($arg)*))
    };
}

/// `println!` that returns `Result<(), StdoutError>` instead of panicking.
macro_rules! outln {
    () => {
        $crate::out::print(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::print(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprintln!` that never panics: what cannot be written is dropped.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::out::print_err(format_args!("{}\n", format_args!($($arg)*)))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_broken_pipe_is_a_closed_stdout() {
        let closed = StdoutError::from(io::Error::from(io::ErrorKind::BrokenPipe));
        assert!(matches!(closed, StdoutError::Closed));
        let e = anyhow::Error::from(closed).context("printing the report");
        assert!(closed_stdout(&e));
        let full = StdoutError::from(io::Error::from(io::ErrorKind::StorageFull));
        assert!(matches!(full, StdoutError::Failed(_)));
        assert!(!closed_stdout(&anyhow::Error::from(full)));
        // EPIPE from anything but stdout (a socket) is a failure.
        let socket = io::Error::from(io::ErrorKind::BrokenPipe);
        assert!(!closed_stdout(&anyhow::Error::from(socket)));
    }
}
