//! Page sizes and the limits that follow from them.
//!
//! The limits are chosen so that a split always succeeds in two pieces: a
//! leaf holds at least two entries of the largest size (key at its limit,
//! value at the inline limit), a branch at least three cells of the largest
//! size. Larger values go to overflow pages.

use super::page::{
    BRANCH_CELL_FIXED_BYTES, LEAF_INLINE_CELL_FIXED_BYTES, LEAF_OVERFLOW_CELL_FIXED_BYTES,
    OVERFLOW_HEADER_BYTES, PAGE_HEADER_BYTES,
};
use super::{BtreeError, PageNo};

/// The smallest supported page size.
pub const MIN_PAGE_BYTES: usize = 4096;
/// The largest supported page size: a page's cell count and offsets fit in
/// 16 bits.
pub const MAX_PAGE_BYTES: usize = 65536;
/// The default page size: the usual file system block and SSD page.
pub const DEFAULT_PAGE_BYTES: usize = 4096;
/// The largest value: its length must fit in memory as one buffer, and a
/// bound keeps an untrusted length from a page from allocating without
/// limit.
pub const MAX_VALUE_BYTES: u64 = u32::MAX as u64;
/// Pages 0 and 1 are the store's meta pages; tree pages start here.
pub const FIRST_TREE_PAGE: PageNo = 2;

/// A validated page size: a power of two from [`MIN_PAGE_BYTES`] to
/// [`MAX_PAGE_BYTES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PageSize(u32);

impl Default for PageSize {
    fn default() -> Self {
        PageSize::DEFAULT
    }
}

impl PageSize {
    /// [`DEFAULT_PAGE_BYTES`].
    pub const DEFAULT: PageSize = PageSize(DEFAULT_PAGE_BYTES as u32);

    /// Validate a page size.
    pub fn new(bytes: usize) -> Result<PageSize, BtreeError> {
        if bytes.is_power_of_two() && (MIN_PAGE_BYTES..=MAX_PAGE_BYTES).contains(&bytes) {
            Ok(PageSize(bytes as u32))
        } else {
            Err(BtreeError::BadPageSize(bytes))
        }
    }

    /// The page size in bytes.
    pub const fn bytes(self) -> usize {
        self.0 as usize
    }

    /// The longest key (and hence separator) a tree with this page size
    /// accepts.
    pub const fn max_key_bytes(self) -> usize {
        self.bytes() / 4 - 16
    }

    /// The longest value stored inside its leaf; longer ones go to overflow
    /// pages.
    pub const fn max_inline_value_bytes(self) -> usize {
        self.bytes() / 4
    }

    /// Value bytes one overflow page holds.
    pub const fn overflow_data_bytes(self) -> usize {
        self.bytes() - OVERFLOW_HEADER_BYTES
    }

    /// How many overflow pages a value of `len` bytes takes (every page
    /// full but the last).
    pub const fn overflow_pages(self, len: u64) -> u64 {
        len.div_ceil(self.overflow_data_bytes() as u64)
    }

    /// Below this many encoded bytes a non-root node is merged with or
    /// refilled from a sibling.
    pub(crate) const fn underfull_bytes(self) -> usize {
        self.bytes() / 4
    }
}

/// Whether two entries of the largest inline size fit in a leaf and three
/// cells of the largest size in a branch, for page size `p`.
const fn limits_hold(p: usize) -> bool {
    let s = PageSize(p as u32);
    let key = s.max_key_bytes();
    let inline = LEAF_INLINE_CELL_FIXED_BYTES + key + s.max_inline_value_bytes();
    let overflow = LEAF_OVERFLOW_CELL_FIXED_BYTES + key;
    let leaf_cell = if inline > overflow { inline } else { overflow };
    let branch_cell = BRANCH_CELL_FIXED_BYTES + key;
    PAGE_HEADER_BYTES + 2 * leaf_cell <= p && PAGE_HEADER_BYTES + 3 * branch_cell <= p
}
const _: () = assert!(limits_hold(MIN_PAGE_BYTES));
const _: () = assert!(limits_hold(8192));
const _: () = assert!(limits_hold(16384));
const _: () = assert!(limits_hold(32768));
const _: () = assert!(limits_hold(MAX_PAGE_BYTES));
const _: () = assert!(PageSize::DEFAULT.max_key_bytes() == 1008);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_sizes() {
        for ok in [4096, 8192, 16384, 32768, 65536] {
            assert_eq!(PageSize::new(ok).unwrap().bytes(), ok);
        }
        for bad in [0, 512, 2048, 4095, 5000, 131072] {
            assert!(PageSize::new(bad).is_err(), "{bad}");
        }
        let p = PageSize::DEFAULT;
        assert_eq!(p.overflow_pages(0), 0);
        assert_eq!(p.overflow_pages(1), 1);
        assert_eq!(p.overflow_pages(p.overflow_data_bytes() as u64), 1);
        assert_eq!(p.overflow_pages(p.overflow_data_bytes() as u64 + 1), 2);
    }
}
