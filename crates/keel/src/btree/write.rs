//! Changing a tree by copy-on-write: the writer copies every node on the
//! path it changes unless it owns the node already, and reports each page
//! whose content it replaced or dropped.
//!
//! Ownership is `Arc::get_mut`: a node is changed in place only when the
//! writer's tree is its sole holder, which is the case exactly for nodes
//! this writer created or copied since the last snapshot was taken (a
//! snapshot shares the root, and copying a node shares its children, so
//! anything a snapshot or a page cache can reach is never changed).

use std::ops::Bound;
use std::sync::Arc;

use super::bound::{Visited, TREE_PAGE_TWICE};
use super::cache::PageSource;
use super::children::Child;
use super::leaf::{Leaf, OverflowValue, ValueRef};
use super::node::{Body, Branch, Node};
use super::read::{leaf_start, load_to_change_at_level};
use super::{BtreeError, PageNo, PageSize};

/// One write operation's context.
pub(crate) struct Writer<'a> {
    pub(crate) src: &'a dyn PageSource,
    pub(crate) page_size: PageSize,
    /// Pages no longer part of the writer's tree.
    pub(crate) freed: &'a mut Vec<PageNo>,
    /// Nodes created by splits.
    pub(crate) created: &'a mut u64,
}

/// A key range to remove.
pub(crate) struct KeyRange<'k> {
    pub(crate) start: Bound<&'k [u8]>,
    pub(crate) end: Bound<&'k [u8]>,
}

impl KeyRange<'_> {
    /// The first child that can hold keys in the range.
    fn first_child(&self, b: &Branch) -> usize {
        match self.start {
            Bound::Unbounded => 0,
            Bound::Included(k) | Bound::Excluded(k) => b.child_index(k),
        }
    }

    /// The last child that can hold keys in the range.
    fn last_child(&self, b: &Branch) -> usize {
        match self.end {
            Bound::Unbounded => b.len() - 1,
            Bound::Included(k) | Bound::Excluded(k) => b.child_index(k),
        }
    }

    /// The positions of a leaf inside the range.
    fn in_leaf(&self, l: &Leaf) -> std::ops::Range<usize> {
        let lo = leaf_start(l, self.start);
        let hi = match self.end {
            Bound::Unbounded => l.len(),
            Bound::Included(k) => l.search(k).map_or_else(|i| i, |i| i + 1),
            Bound::Excluded(k) => l.search(k).unwrap_or_else(|i| i),
        };
        lo..hi.max(lo)
    }
}

impl Writer<'_> {
    /// The node behind `arc`, ready to change: copied unless this writer
    /// owns it. A node that was on disk is reported freed, once: its copy
    /// (or the node itself, its location cleared) is dirty from now on.
    pub(crate) fn make_mut<'n>(&mut self, arc: &'n mut Arc<Node>) -> &'n mut Node {
        if Arc::get_mut(arc).is_none() {
            if let Some(page) = arc.page() {
                self.freed.push(page);
            }
            *arc = Arc::new(arc.copy_dirty(self.page_size.bytes()));
        }
        let node = Arc::get_mut(arc).expect("a fresh copy is unshared");
        if let Some(page) = node.take_page() {
            self.freed.push(page);
        }
        node
    }

    /// Child `i` of a branch this writer owns, ready to change: loaded if
    /// only on disk, then made this writer's own.
    pub(crate) fn child_mut<'n>(
        &mut self,
        branch: &'n mut Branch,
        i: usize,
    ) -> Result<&'n mut Node, BtreeError> {
        let level = branch.level() - 1;
        let (loc, mem) = branch.child_mut(i).parts_mut();
        if mem.is_none() {
            let at = loc.expect("a child is in memory or on disk");
            *mem = Some(load_to_change_at_level(self.src, at, level)?);
        }
        // The child is about to differ from its page.
        loc.take();
        Ok(self.make_mut(mem.as_mut().expect("loaded")))
    }

    /// [`Writer::child_mut`] for an edge of a range removal, noting the
    /// child's page in `seen`.
    fn edge_mut<'n>(
        &mut self,
        branch: &'n mut Branch,
        i: usize,
        seen: &mut Visited,
    ) -> Result<&'n mut Node, BtreeError> {
        if let Some(loc) = branch.child_location(i) {
            seen.enter(loc.page, TREE_PAGE_TWICE)?;
        }
        self.child_mut(branch, i)
    }

    /// Report the pages of a value that left the tree.
    /// A value a checkpoint is placing has its pages but no location yet.
    pub(crate) fn free_overflow(&mut self, value: &OverflowValue) -> Result<(), BtreeError> {
        if let Some(pages) = value.pages() {
            self.freed.extend_from_slice(pages);
            return Ok(());
        }
        let Some(first) = value.location() else {
            return Ok(());
        };
        let data = self.src.load_overflow(first, value.len())?;
        self.freed.extend_from_slice(&data.pages);
        Ok(())
    }

    /// Report every page of a subtree that left the tree; returns the
    /// number of entries it held. `seen` holds the pages the removal
    /// reached so far.
    pub(crate) fn free_subtree(
        &mut self,
        child: &Child,
        level: u8,
        seen: &mut Visited,
    ) -> Result<u64, BtreeError> {
        if let Some(loc) = child.location() {
            seen.enter(loc.page, TREE_PAGE_TWICE)?;
        }
        let node = match child.resolve() {
            Ok(n) => n,
            Err(loc) => load_to_change_at_level(self.src, loc, level)?,
        };
        if let Some(page) = node.page() {
            self.freed.push(page);
        }
        match node.body() {
            Body::Leaf(l) => {
                for value in l.overflow_values() {
                    self.free_overflow(value)?;
                }
                Ok(l.len() as u64)
            }
            Body::Branch(b) => {
                let mut entries = 0;
                for i in 0..b.len() {
                    entries += self.free_subtree(&b.child(i), level - 1, seen)?;
                }
                Ok(entries)
            }
        }
    }

    /// Insert or replace `key` under `node` (owned by this writer).
    pub(crate) fn insert(
        &mut self,
        node: &mut Node,
        key: &[u8],
        value: ValueRef<'_>,
    ) -> Result<(), BtreeError> {
        match node.body_mut() {
            Body::Leaf(l) => match l.search(key) {
                Ok(i) => {
                    if let Some(old) = l.set_value(i, value) {
                        self.free_overflow(&old)?;
                    }
                }
                Err(i) => l.insert(i, key, value),
            },
            Body::Branch(b) => {
                let i = b.child_index(key);
                let child = self.child_mut(b, i)?;
                self.insert(child, key, value)?;
                self.fix_child(b, i)?;
            }
        }
        Ok(())
    }

    /// Remove `key` (known to be present) under `node`.
    pub(crate) fn remove(&mut self, node: &mut Node, key: &[u8]) -> Result<(), BtreeError> {
        match node.body_mut() {
            Body::Leaf(l) => {
                if let Ok(i) = l.search(key) {
                    for value in l.remove_range(i..i + 1) {
                        self.free_overflow(&value)?;
                    }
                }
            }
            Body::Branch(b) => {
                let i = b.child_index(key);
                let child = self.child_mut(b, i)?;
                self.remove(child, key)?;
                self.fix_child(b, i)?;
            }
        }
        Ok(())
    }

    /// Remove every key in `range` under `node`; returns how many. The
    /// children wholly inside the range are dropped without being copied;
    /// only the two at its edges are changed. Both kinds are walks over
    /// pages from disk: `seen` holds the pages reached so far, and one
    /// reached twice (a subtree two parents share, on a damaged file) is
    /// `Corrupt` rather than a walk of every path to it.
    pub(crate) fn remove_range(
        &mut self,
        node: &mut Node,
        range: &KeyRange<'_>,
        seen: &mut Visited,
    ) -> Result<u64, BtreeError> {
        match node.body_mut() {
            Body::Leaf(l) => {
                let at = range.in_leaf(l);
                let count = at.len() as u64;
                for value in l.remove_range(at) {
                    self.free_overflow(&value)?;
                }
                Ok(count)
            }
            Body::Branch(b) => {
                let (first, last) = (range.first_child(b), range.last_child(b));
                if first > last {
                    return Ok(0);
                }
                let mut removed = 0;
                for _ in first + 1..last {
                    let child = b.remove_child(first + 1);
                    removed += self.free_subtree(&child, b.level() - 1, seen)?;
                }
                // Both edges are cleared before either is fixed: a merge
                // of the two (and an even split after it) must not move
                // keys of the range into a child that is already done, nor
                // take in an emptied sibling.
                let mut edges = 1;
                if last > first {
                    let child = self.edge_mut(b, first + 1, seen)?;
                    removed += self.remove_range(child, range, seen)?;
                    edges = 2;
                }
                let child = self.edge_mut(b, first, seen)?;
                removed += self.remove_range(child, range, seen)?;
                for i in (first..first + edges).rev() {
                    if b.child(i).resolve().is_ok_and(|n| n.is_empty()) {
                        b.remove_child(i);
                        edges -= 1;
                    }
                }
                for i in (first..first + edges).rev() {
                    self.fix_child(b, i)?;
                }
                Ok(removed)
            }
        }
    }
}
