//! Errors of the B+tree layer: [`PageError`] for a page that fails
//! validation, [`BtreeError`] for everything a tree operation can report.

use super::PageNo;
use crate::io::IoError;

/// Why the bytes read for a page were not accepted. Every byte of a page is
/// untrusted input: a torn write, a lost write that left an older page in
/// place, a misdirected write or plain corruption all end here, never in a
/// panic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PageError {
    /// The buffer is not one page long (a short read at the end of the file).
    #[error(
        "page {page}: {len} bytes, but a page is {page_bytes} bytes: the data file is cut short"
    )]
    WrongSize {
        /// The page read.
        page: PageNo,
        /// The bytes the read returned.
        len: usize,
        /// The store's page size in bytes.
        page_bytes: usize,
    },
    /// The page's own checksum does not match its bytes: torn or corrupt.
    #[error(
        "page {page}: checksum mismatch (stored {stored:#010x}, computed {computed:#010x}): \
         the page is torn or corrupt"
    )]
    BadChecksum {
        /// The page read.
        page: PageNo,
        /// The checksum in the page's header.
        stored: u32,
        /// The checksum of the bytes read.
        computed: u32,
    },
    /// The page is intact but is not the version its parent points to: a
    /// write that never reached the disk left an older valid page in place,
    /// or another page landed there.
    #[error(
        "page {page}: checksum {found:#010x} is not the {expected:#010x} its parent recorded: \
         an older or foreign version of the page (a lost or misdirected write)"
    )]
    UnexpectedChecksum {
        /// The page read.
        page: PageNo,
        /// The checksum its parent (or the meta page) recorded for it.
        expected: u32,
        /// The checksum the page carries.
        found: u32,
    },
    /// The page names another page number: written to the wrong place.
    #[error("page {expected} says it is page {found}: it was written to the wrong place")]
    WrongPageNo {
        /// The page read.
        expected: PageNo,
        /// The page number in its header.
        found: PageNo,
    },
    /// Not the kind of page the reader followed a reference to.
    #[error("page {page}: page type {found}, expected {expected}")]
    WrongType {
        /// The page read.
        page: PageNo,
        /// The kind of page the reference asked for.
        expected: &'static str,
        /// The type byte in the page's header.
        found: u8,
    },
    /// The checksum matches but the contents break the format: written by a
    /// bug or by a newer format.
    #[error("page {page}: bad layout: {reason}")]
    BadLayout {
        /// The page read.
        page: PageNo,
        /// Which rule of the format it breaks.
        reason: &'static str,
    },
}

/// What a tree operation can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BtreeError {
    /// A page failed validation.
    #[error(transparent)]
    Page(#[from] PageError),
    /// Reading the data file failed.
    #[error("reading the data file: {0}")]
    Io(#[from] IoError),
    /// Pages are valid one by one but do not form a valid tree (a child at
    /// the wrong level, an overflow chain of the wrong length).
    #[error("page {page}: {reason}: the data file is corrupt")]
    Corrupt {
        /// The page where the tree goes wrong.
        page: PageNo,
        /// Which rule of the tree it breaks.
        reason: &'static str,
    },
    /// The key exceeds the limit of the page size.
    #[error("a key of {len} bytes is longer than the {max}-byte limit of this page size")]
    KeyTooLong {
        /// The key's length in bytes.
        len: usize,
        /// The longest key this page size takes, in bytes.
        max: usize,
    },
    /// The value exceeds [`super::MAX_VALUE_BYTES`].
    #[error("a value of {len} bytes is longer than the {max}-byte limit")]
    ValueTooLong {
        /// The value's length in bytes.
        len: u64,
        /// [`super::MAX_VALUE_BYTES`].
        max: u64,
    },
    /// A page size that is not a power of two in the supported range.
    #[error("page size {0} is not a power of two from 4096 to 65536")]
    BadPageSize(usize),
    /// A checkpoint's page allocator returned a page it must not.
    #[error("the page allocator returned page {page}: {reason}")]
    BadAllocation {
        /// The page returned.
        page: PageNo,
        /// Why it must not be used (a meta page, or returned twice).
        reason: &'static str,
    },
    /// A tree checked by [`super::check_tree`] breaks a rule of the B+tree
    /// (a bug, in memory or in what was written).
    #[error("the tree breaks an invariant: {0}")]
    Invariant(String),
    /// The tree needs a page but was given no way to read pages (a tree
    /// used with [`super::NoPageSource`] after a checkpoint).
    #[error("page {page} is not in memory and there is no data file to read it from")]
    NotLoaded {
        /// The page needed.
        page: PageNo,
    },
}
