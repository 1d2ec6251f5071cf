//! The store's B+tree: byte keys to byte values, ordered by key.
//!
//! In memory the tree is persistent: a [`Tree`] is an immutable snapshot
//! (cloning it clones one `Arc`), and a writer changes a [`TreeMut`] by
//! copy-on-write, copying only the nodes on the paths it changes and only
//! once per snapshot. On disk the tree is fixed-size pages of one data
//! file, written only by checkpoints ([`assign_pages`], then
//! [`detach_clean`]); nodes that are on disk can leave memory and are read
//! back through a [`PageSource`] such as [`PageCache`].
//!
//! The page format is specified in `docs/format.md` ("The data file:
//! pages"). The modules are: `page` (bytes), `node`, `leaf`, `arena` and
//! `children` (in-memory nodes),
//! `cache` (reading pages), `read` (lookups and scans), `write` and
//! `rebalance` (copy-on-write changes), `tree` (the public types),
//! `checkpoint` (serialization), `check` (a full invariant check) and
//! `bound` (what keeps walks over a damaged file finite).
#![deny(unsafe_code)]

mod arena;
mod batch;
mod bound;
mod cache;
mod check;
mod checkpoint;
mod children;
mod error;
mod leaf;
mod limits;
mod node;
mod page;
mod pagetable;
mod read;
mod rebalance;
mod spare;
mod tree;
mod write;

pub use batch::{Change, Fork, FORK_MIN_CHANGES, GROUP_MIN_CHANGES};
pub use cache::{
    read_overflow_chain, CacheStats, InPlace, LeafLookup, Lent, NoPageSource, NodeRef,
    OverflowData, PageCache, PageSource,
};
pub use check::{check_tree, TreeStats};
pub use checkpoint::{
    assign_pages, children_in_memory, detach_clean, reserve_pages, Checkpoint, Placed, Plan,
};
pub use children::Child;
pub use error::{BtreeError, PageError};
pub use leaf::{Leaf, OverflowValue, ValueRef};
pub use limits::{
    PageSize, DEFAULT_PAGE_BYTES, FIRST_TREE_PAGE, MAX_PAGE_BYTES, MAX_VALUE_BYTES, MIN_PAGE_BYTES,
};
pub use node::{Body, Branch, Node};
pub use page::{
    decode_node, decode_overflow, decode_page, encode_node, encode_node_into, encode_overflow,
    encode_overflow_into, page_crc, search_leaf, FoundCell, LeafSearch, OverflowPage, Page,
    BRANCH_CELL_FIXED_BYTES, LEAF_INLINE_CELL_FIXED_BYTES, LEAF_OVERFLOW_CELL_FIXED_BYTES,
    OVERFLOW_HEADER_BYTES, PAGE_HEADER_BYTES, PAGE_TYPE_BRANCH, PAGE_TYPE_FREELIST, PAGE_TYPE_LEAF,
    PAGE_TYPE_META, PAGE_TYPE_OVERFLOW,
};
pub use read::{Borrowed, Entry, Got, Range};
pub use tree::{Tree, TreeMut};

/// A page number: the page's byte offset in the data file divided by the
/// page size.
pub type PageNo = u64;

/// Where a page is and what it must hold: its number and the CRC32C its
/// header must carry. Whoever refers to a page (a parent, a leaf holding
/// an overflow value, the meta page) records both, so that an intact page
/// of another version at that place is not mistaken for this one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Location {
    /// The page's number.
    pub page: PageNo,
    /// The CRC32C the page's header must carry.
    pub crc: u32,
}

#[cfg(test)]
mod bound_tests;
#[cfg(test)]
pub(crate) mod forge;
#[cfg(test)]
mod mapped_tests;
#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod test_disk;
#[cfg(test)]
mod tests;

/// The decoders, for the fuzz target in `fuzz/` and the random-input
/// tests: not a stable API.
#[doc(hidden)]
pub mod fuzzing {
    use super::{decode_page, encode_node, encode_overflow, page_crc, Page, PageSize};

    /// Decode arbitrary bytes as page 2 (padded or cut to 4096 bytes; when
    /// `fix_checksum`, with a valid checksum put in first, so that the
    /// layout checks are reached). An accepted node must encode back to
    /// the same bytes; an accepted overflow page must lie inside them.
    pub fn check_decode_page(data: &[u8], fix_checksum: bool) {
        let ps = PageSize::DEFAULT;
        let mut bytes = vec![0u8; ps.bytes()];
        let n = data.len().min(bytes.len());
        bytes[..n].copy_from_slice(&data[..n]);
        if fix_checksum {
            // The page number is part of the frame check, not the fuzz.
            bytes[8..16].copy_from_slice(&2u64.to_le_bytes());
            let crc = page_crc(&bytes);
            bytes[..4].copy_from_slice(&crc.to_le_bytes());
        }
        match decode_page(&bytes, ps, 2) {
            Ok(Page::Node(node)) => {
                assert!(node.encoded_bytes() <= ps.bytes());
                assert_eq!(encode_node(&node, 2, ps), bytes, "decode/encode round trip");
            }
            Ok(Page::Overflow(o)) => {
                assert!(!o.data.is_empty() && o.data.len() <= ps.overflow_data_bytes());
                let again = encode_overflow(2, o.next, o.data, ps);
                assert_eq!(again, bytes, "decode/encode round trip");
            }
            Err(_) => {}
        }
    }
}
