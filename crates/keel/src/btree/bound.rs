//! Bounds on the walks that follow page numbers read from the data file.
//!
//! A page's checksum proves that it is the page its referrer recorded, not
//! that the references form a tree: a damaged file (or a bug that reused a
//! page still in use) can hold a child that points back to an ancestor or
//! to itself, two parents sharing a subtree, or an overflow chain that
//! comes back on itself, every page with a valid checksum. Each walk
//! checks a rule as it goes, so that such a file ends in
//! [`BtreeError::Corrupt`] naming the page, never in a loop, a walk that
//! doubles at every level, or an allocation without bound:
//!
//! * a descent (a lookup, a scan's seek, a writer's path): every child is
//!   one level below its parent (`read::load_at_level`), so a descent reads
//!   at most the root's level + 1 pages, and a child pointing to itself or
//!   to an ancestor is at the wrong level;
//! * a range scan: keys increase strictly from one leaf to the next
//!   (`read::Range`), so a scan reads no leaf twice;
//! * the full check (`check_tree`): every key lies inside its parent's
//!   bounds and every separator inside its own, so no node, which holds a
//!   key or a separator, passes the check on two paths;
//! * the subtrees and edges of a range removal, and an overflow chain: no
//!   page twice ([`Visited`]), so at most the file's pages. A chain's
//!   length also follows from its value's, which the store's value limit
//!   bounds before any page is read (`PageCache::with_max_value_bytes`).

use std::collections::HashSet;

use super::{BtreeError, PageNo};

/// Why a walk failed when it reached a tree page a second time.
pub(crate) const TREE_PAGE_TWICE: &str =
    "a tree page reached twice (a child pointing back, or a subtree shared)";

/// The pages one walk has reached.
#[derive(Debug, Default)]
pub(crate) struct Visited {
    pages: HashSet<PageNo>,
}

impl Visited {
    /// Note `page` as reached; a page reached before is `Corrupt`, for
    /// the reason `why`.
    pub(crate) fn enter(&mut self, page: PageNo, why: &'static str) -> Result<(), BtreeError> {
        if self.pages.insert(page) {
            Ok(())
        } else {
            Err(BtreeError::Corrupt { page, reason: why })
        }
    }
}
