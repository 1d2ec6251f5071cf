//! The store: transactions over the B+tree data file, checkpoints and
//! recovery, on the write-ahead journal.
//!
//! Built so far: [`meta`], the two alternating meta pages a checkpoint
//! switches between. The transactions, the checkpointer and recovery come
//! next (see `docs/format.md`, "The data file: meta pages").

#![deny(unsafe_code)]

pub mod meta;
