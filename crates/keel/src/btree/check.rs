//! A full check of a tree, reading every node and overflow chain: the
//! B+tree rules (sorted keys inside their parent's bounds, every leaf at
//! one depth, no empty node, no branch with one child), the size of every
//! node against its page, and that a node on disk only refers to nodes on
//! disk. For tests, and for a store's verify command.

use std::sync::Arc;

use super::cache::PageSource;
use super::leaf::{Leaf, ValueRef};
use super::node::{Body, Branch, Node};
use super::page::{BRANCH_CELL_FIXED_BYTES, PAGE_HEADER_BYTES};
use super::read::{child_node, overflow_bytes};
use super::{BtreeError, PageNo, PageSize, Tree};

/// What [`check_tree`] counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeStats {
    /// Levels: 0 for an empty tree, 1 for a lone leaf.
    pub depth: usize,
    /// Branch (inner) nodes.
    pub branches: u64,
    /// Leaf nodes.
    pub leaves: u64,
    /// Keys in the leaves.
    pub entries: u64,
    /// Values held on overflow pages.
    pub overflow_values: u64,
    /// Nodes held in memory without a page.
    pub dirty_nodes: u64,
    /// Every page the tree uses (nodes and overflow chains), sorted.
    pub pages: Vec<PageNo>,
}

struct Checker<'a> {
    src: &'a dyn PageSource,
    page_size: PageSize,
    stats: TreeStats,
}

/// Check every rule of the tree; returns what it holds.
pub fn check_tree(tree: &Tree, src: &dyn PageSource) -> Result<TreeStats, BtreeError> {
    let mut c = Checker {
        src,
        page_size: tree.page_size(),
        stats: TreeStats::default(),
    };
    if let Some(root) = tree.root() {
        c.stats.depth = usize::from(root.level()) + 1;
        c.node(root, None, None)?;
    }
    c.stats.pages.sort_unstable();
    if let Some(w) = c.stats.pages.windows(2).find(|w| w[0] == w[1]) {
        return Err(BtreeError::Invariant(format!("page {} used twice", w[0])));
    }
    Ok(c.stats)
}

fn broken(node: &Node, what: &str) -> BtreeError {
    let place = match node.location() {
        Some(l) => format!("page {}", l.page),
        None => "a node in memory".to_string(),
    };
    BtreeError::Invariant(format!("{place}: {what}"))
}

impl Checker<'_> {
    /// Check `node`, whose keys must lie in `[lo, hi)`.
    fn node(
        &mut self,
        node: &Arc<Node>,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
    ) -> Result<(), BtreeError> {
        if node.encoded_bytes() > self.page_size.bytes() {
            return Err(broken(node, "larger than a page"));
        }
        match node.location() {
            Some(l) => self.stats.pages.push(l.page),
            None => self.stats.dirty_nodes += 1,
        }
        if node.is_empty() {
            return Err(broken(node, "empty"));
        }
        match node.body() {
            Body::Leaf(l) => self.leaf(node, l, lo, hi),
            Body::Branch(b) => self.branch(node, b, lo, hi),
        }
    }

    fn leaf(
        &mut self,
        node: &Node,
        l: &Leaf,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
    ) -> Result<(), BtreeError> {
        self.stats.leaves += 1;
        self.stats.entries += l.len() as u64;
        let mut bytes = PAGE_HEADER_BYTES;
        for i in 0..l.len() {
            let key = l.key(i);
            bytes += l.cell_bytes(i);
            if i > 0 && l.key(i - 1) >= key {
                return Err(broken(node, "keys out of order"));
            }
            if lo.is_some_and(|lo| key < lo) || hi.is_some_and(|hi| key >= hi) {
                return Err(broken(node, "a key outside its parent's bounds"));
            }
            if key.len() > self.page_size.max_key_bytes() {
                return Err(broken(node, "a key over the limit"));
            }
            match l.value(i) {
                ValueRef::Inline(v) if v.len() > self.page_size.max_inline_value_bytes() => {
                    return Err(broken(node, "an inline value over the limit"));
                }
                ValueRef::Inline(_) => {}
                ValueRef::Overflow(o) => {
                    self.stats.overflow_values += 1;
                    if o.len() <= self.page_size.max_inline_value_bytes() as u64 {
                        return Err(broken(node, "a short value in overflow pages"));
                    }
                    if node.location().is_some() && o.location().is_none() {
                        return Err(broken(node, "a clean leaf with a value not on disk"));
                    }
                    let value = overflow_bytes(o, self.src)?;
                    if value.len() as u64 != o.len() {
                        return Err(broken(node, "an overflow value of the wrong length"));
                    }
                    if o.location().is_some() {
                        let pages = o.pages().expect("known once the value was read");
                        self.stats.pages.extend_from_slice(pages);
                    }
                }
            }
        }
        if bytes != l.encoded_bytes() {
            return Err(broken(node, "tracked size differs from its cells"));
        }
        Ok(())
    }

    fn branch(
        &mut self,
        node: &Node,
        b: &Branch,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
    ) -> Result<(), BtreeError> {
        self.stats.branches += 1;
        if b.len() < 2 {
            return Err(broken(node, "a branch with one child"));
        }
        let mut bytes = PAGE_HEADER_BYTES + b.len() * BRANCH_CELL_FIXED_BYTES;
        for i in 0..b.len() {
            let child_lo = if i == 0 { lo } else { Some(b.separator(i - 1)) };
            let child_hi = if i + 1 == b.len() {
                hi
            } else {
                Some(b.separator(i))
            };
            if i > 0 {
                bytes += b.separator(i - 1).len();
                if child_lo >= child_hi && child_hi.is_some() {
                    return Err(broken(node, "separators out of order"));
                }
            }
            if node.location().is_some() && b.child_location(i).is_none() {
                return Err(broken(node, "a clean branch with a child not on disk"));
            }
            let child = child_node(b, i, self.src)?;
            if child.level() + 1 != b.level() {
                return Err(broken(node, "a child at the wrong level"));
            }
            self.node(&child, child_lo, child_hi)?;
        }
        if bytes != b.encoded_bytes() {
            return Err(broken(node, "tracked size differs from its cells"));
        }
        Ok(())
    }
}
