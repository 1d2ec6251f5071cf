//! The public face of the tree: [`Tree`], an immutable snapshot that is
//! cheap to clone and share between threads, and [`TreeMut`], a writer's
//! working copy.

use std::ops::Bound;
use std::sync::Arc;

use super::batch::with_value;
use super::bound::Visited;
use super::cache::PageSource;
use super::leaf::{Leaf, ValueRef};
use super::limits::MAX_VALUE_BYTES;
use super::node::{Body, Node};
use super::read::{self, Entry, Got, Range};
use super::write::{KeyRange, Writer};
use super::{BtreeError, Location, PageNo, PageSize};

/// A snapshot of the tree: every read sees the same state, whatever
/// writers do later. Cloning it clones one `Arc`.
#[derive(Clone, Debug)]
pub struct Tree {
    root: Option<Arc<Node>>,
    page_size: PageSize,
}

impl Tree {
    /// An empty tree.
    pub fn new(page_size: PageSize) -> Tree {
        Tree {
            root: None,
            page_size,
        }
    }

    /// The tree whose root is at `root` on disk (`None`: empty).
    pub fn open(
        page_size: PageSize,
        src: &dyn PageSource,
        root: Option<Location>,
    ) -> Result<Tree, BtreeError> {
        let root = match root {
            Some(loc) => Some(src.load(loc)?),
            None => None,
        };
        Ok(Tree { root, page_size })
    }

    /// The page size the tree's nodes are bounded by.
    pub fn page_size(&self) -> PageSize {
        self.page_size
    }

    /// The root node, if the tree is not empty.
    pub fn root(&self) -> Option<&Arc<Node>> {
        self.root.as_ref()
    }

    /// Where the root is on disk, once a checkpoint wrote it.
    pub fn root_location(&self) -> Option<Location> {
        self.root.as_ref().and_then(|r| r.location())
    }

    /// Whether the tree holds no entry.
    pub fn is_empty(&self) -> bool {
        self.root.is_none()
    }

    /// The entry for `key`, if present.
    pub fn get(&self, src: &dyn PageSource, key: &[u8]) -> Result<Option<Entry>, BtreeError> {
        read::get(self.root.as_ref(), src, key)
    }

    /// The value of `key`: an inline value in a cached leaf borrowed in
    /// place (kept by a reader-era pin, with no reference count taken), else an entry of its own.
    pub fn get_pinned(
        &self,
        src: &dyn PageSource,
        key: &[u8],
    ) -> Result<Option<Got<'_>>, BtreeError> {
        read::get_pinned(self.root.as_ref(), src, key)
    }

    /// The entries with keys in `(start, end)`, in key order.
    pub fn range<'a>(
        &self,
        src: &'a dyn PageSource,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
    ) -> Range<'a> {
        Range::new(self.root.as_ref(), src, start, end)
    }

    /// A working copy for a writer, starting from this snapshot.
    pub fn edit(&self) -> TreeMut {
        TreeMut {
            root: self.root.clone(),
            page_size: self.page_size,
            freed: Vec::new(),
            created: 0,
        }
    }
}

/// A writer's working copy of the tree. Changes are copy-on-write: no
/// snapshot taken before (and no node in a page cache) ever sees them.
/// Every page whose content the working copy no longer holds — a node
/// copied or dropped, every page of an overflow value replaced or removed —
/// is reported in [`TreeMut::freed`], once, for the store to recycle when
/// no snapshot needs it any more.
///
/// After an error the working copy is a valid tree but the operation may
/// be half done: drop it (abort the transaction).
#[derive(Debug)]
pub struct TreeMut {
    root: Option<Arc<Node>>,
    page_size: PageSize,
    freed: Vec<PageNo>,
    created: u64,
}

impl TreeMut {
    /// A snapshot of the working copy as it is now. Later changes copy the
    /// nodes it shares, as for any snapshot.
    pub fn snapshot(&self) -> Tree {
        Tree {
            root: self.root.clone(),
            page_size: self.page_size,
        }
    }

    /// The working copy as a snapshot, and the pages it freed.
    pub fn finish(self) -> (Tree, Vec<PageNo>) {
        let tree = Tree {
            root: self.root,
            page_size: self.page_size,
        };
        (tree, self.freed)
    }

    /// Nodes the working copy created (splits) so far: with the pages
    /// freed (nodes copied from their pages), the nodes it added to
    /// memory.
    pub fn created(&self) -> u64 {
        self.created
    }

    /// Pages freed so far.
    pub fn freed(&self) -> &[PageNo] {
        &self.freed
    }

    /// Take the pages freed so far.
    pub fn take_freed(&mut self) -> Vec<PageNo> {
        std::mem::take(&mut self.freed)
    }

    /// Whether the working copy holds no entry.
    pub fn is_empty(&self) -> bool {
        self.root.is_none()
    }

    /// The entry for `key` in the working copy.
    pub fn get(&self, src: &dyn PageSource, key: &[u8]) -> Result<Option<Entry>, BtreeError> {
        read::get(self.root.as_ref(), src, key)
    }

    /// The entries of the working copy with keys in `(start, end)`. While
    /// the scan lives, changes copy the nodes it holds.
    pub fn range<'a>(
        &self,
        src: &'a dyn PageSource,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
    ) -> Range<'a> {
        Range::new(self.root.as_ref(), src, start, end)
    }

    fn writer<'a>(
        src: &'a dyn PageSource,
        page_size: PageSize,
        freed: &'a mut Vec<PageNo>,
        created: &'a mut u64,
    ) -> Writer<'a> {
        Writer {
            src,
            page_size,
            freed,
            created,
        }
    }

    /// Insert `key` with `value`, replacing any value it had.
    pub fn insert(
        &mut self,
        src: &dyn PageSource,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), BtreeError> {
        self.insert_value(src, key, value, None)
    }

    /// [`TreeMut::insert`] of a value the caller holds shared: one large
    /// enough for overflow pages is kept as it is, not copied.
    pub fn insert_shared(
        &mut self,
        src: &dyn PageSource,
        key: &[u8],
        value: &Arc<[u8]>,
    ) -> Result<(), BtreeError> {
        self.insert_value(src, key, value, Some(value))
    }

    /// Refuse a key or value past the limits.
    pub(crate) fn check_limits(&self, key: &[u8], value: &[u8]) -> Result<(), BtreeError> {
        let max_key = self.page_size.max_key_bytes();
        if key.len() > max_key {
            return Err(BtreeError::KeyTooLong {
                len: key.len(),
                max: max_key,
            });
        }
        if value.len() as u64 > MAX_VALUE_BYTES {
            return Err(BtreeError::ValueTooLong {
                len: value.len() as u64,
                max: MAX_VALUE_BYTES,
            });
        }
        Ok(())
    }

    /// The root, if the working copy holds an entry.
    pub(crate) fn root(&self) -> Option<&Arc<Node>> {
        self.root.as_ref()
    }

    /// The root, and a writer reading through `src` that counts the pages
    /// it frees and the nodes it creates in this working copy.
    pub(crate) fn root_and_writer<'a>(
        &'a mut self,
        src: &'a dyn PageSource,
    ) -> (&'a mut Option<Arc<Node>>, Writer<'a>) {
        let w = Self::writer(src, self.page_size, &mut self.freed, &mut self.created);
        (&mut self.root, w)
    }

    pub(crate) fn insert_value(
        &mut self,
        src: &dyn PageSource,
        key: &[u8],
        value: &[u8],
        shared: Option<&Arc<[u8]>>,
    ) -> Result<(), BtreeError> {
        self.check_limits(key, value)?;
        with_value(self.page_size, value, shared, |value| {
            self.insert_checked(src, key, value)
        })
    }

    fn insert_checked(
        &mut self,
        src: &dyn PageSource,
        key: &[u8],
        value: ValueRef<'_>,
    ) -> Result<(), BtreeError> {
        let mut w = Self::writer(src, self.page_size, &mut self.freed, &mut self.created);
        match &mut self.root {
            None => {
                let mut leaf = Leaf::default();
                leaf.push(key, value);
                self.root = Some(Arc::new(Node::new(Body::Leaf(leaf))));
            }
            Some(root) => {
                let node = w.make_mut(root);
                w.insert(node, key, value)?;
            }
        }
        w.fix_root(&mut self.root)
    }

    /// Remove `key`; returns whether it was present. An absent key changes
    /// nothing (no node is copied).
    pub fn remove(&mut self, src: &dyn PageSource, key: &[u8]) -> Result<bool, BtreeError> {
        if read::find(self.root.as_ref(), src, key)?.is_none() {
            return Ok(false);
        }
        let mut w = Self::writer(src, self.page_size, &mut self.freed, &mut self.created);
        let root = self.root.as_mut().expect("the key is present");
        let node = w.make_mut(root);
        w.remove(node, key)?;
        w.fix_root(&mut self.root)?;
        Ok(true)
    }

    /// Remove every key in `(start, end)` (dropping a table); returns how
    /// many were removed. Subtrees wholly inside the range are dropped
    /// whole, but are still read to report their pages.
    pub fn remove_range(
        &mut self,
        src: &dyn PageSource,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
    ) -> Result<u64, BtreeError> {
        let mut probe = Range::new(self.root.as_ref(), src, start, end);
        if probe.next_position()?.is_none() {
            return Ok(0);
        }
        drop(probe);
        let mut w = Self::writer(src, self.page_size, &mut self.freed, &mut self.created);
        let root = self.root.as_mut().expect("the range holds a key");
        let node = w.make_mut(root);
        let mut seen = Visited::default();
        let removed = w.remove_range(node, &KeyRange { start, end }, &mut seen)?;
        if let Some(root) = self.root.as_mut() {
            // The root is this writer's: the removal changed it.
            let node = Arc::get_mut(root).expect("a changed root belongs to its writer");
            w.repair_paths(node, &[start, end])?;
        }
        w.fix_root(&mut self.root)?;
        Ok(removed)
    }
}
