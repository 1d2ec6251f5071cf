//! Walking a damaged data file's tree: every entry reachable from a meta
//! page's root through pages that pass the normal read path's checks (the
//! page's own checksum and the one its parent recorded, its page number,
//! its type and layout, its level), in key order. A page that fails is
//! skipped and the key range its parent gave it is reported; so is a leaf
//! whose keys stray outside that range, a branch whose separators do, and
//! a value whose overflow chain fails. The walk is bounded: each page is
//! read at most once (a page referred to twice is damage, so a loop ends
//! there), levels strictly decrease from the root, and only pages inside
//! the file's page count are read.

use std::collections::HashSet;
use std::sync::Arc;

use super::report::UnreachableRange;
use crate::btree::{
    decode_node, read_overflow_chain, Body, BtreeError, Leaf, Location, Node, PageNo, PageSize,
    ValueRef, FIRST_TREE_PAGE,
};
use crate::io::VfsFile;

/// Where the walk hands each entry (full key, value); an error stops the
/// walk.
pub(super) type Emit<'e, E> = dyn FnMut(&[u8], &[u8], u64) -> Result<(), E> + 'e;

/// A walk of one tree.
pub(super) struct Walk<'a> {
    data: &'a dyn VfsFile,
    ps: PageSize,
    page_count: u64,
    visited: HashSet<PageNo>,
    buf: Vec<u8>,
    /// Tree and overflow pages read.
    pub pages_read: u64,
    /// The ranges behind pages that failed, in key order.
    pub unreachable: Vec<UnreachableRange>,
}

impl<'a> Walk<'a> {
    pub(super) fn new(data: &'a dyn VfsFile, ps: PageSize, page_count: u64) -> Walk<'a> {
        Walk {
            data,
            ps,
            page_count,
            visited: HashSet::new(),
            buf: vec![0u8; ps.bytes()],
            pages_read: 0,
            unreachable: Vec::new(),
        }
    }

    /// Walk the tree whose root is `root` (none: an empty tree), handing
    /// every entry it reaches to `emit` in key order, with the pages read
    /// so far.
    pub(super) fn run<E>(
        &mut self,
        root: Option<Location>,
        emit: &mut Emit<'_, E>,
    ) -> Result<(), E> {
        match root {
            Some(loc) => self.node(loc, None, None, None, emit),
            None => Ok(()),
        }
    }

    /// The node at `loc`, whose parent puts it at `level` (any for the
    /// root) and its keys in `[lo, hi)`.
    fn node<E>(
        &mut self,
        loc: Location,
        level: Option<u8>,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        emit: &mut Emit<'_, E>,
    ) -> Result<(), E> {
        let node = match self.load(loc, level) {
            Ok(node) => node,
            Err(why) => {
                self.lost(lo, hi, loc.page, why);
                return Ok(());
            }
        };
        match node.body() {
            Body::Leaf(l) => self.leaf(loc.page, l, lo, hi, emit),
            Body::Branch(b) => {
                let seps = (0..b.len() - 1).map(|i| b.separator(i));
                if seps.clone().any(|s| !within(s, lo, hi)) {
                    let why = "separators outside the range its parent gives it".to_string();
                    self.lost(lo, hi, loc.page, why);
                    return Ok(());
                }
                for i in 0..b.len() {
                    let child_lo = if i == 0 { lo } else { Some(b.separator(i - 1)) };
                    let child_hi = if i + 1 == b.len() {
                        hi
                    } else {
                        Some(b.separator(i))
                    };
                    let child = b.child_location(i).expect("a page's children are on disk");
                    self.node(child, Some(b.level() - 1), child_lo, child_hi, emit)?;
                }
                Ok(())
            }
        }
    }

    /// Read and decode the page at `loc`, as the tree's reads do, and
    /// check its level; why not, in words.
    fn load(&mut self, loc: Location, level: Option<u8>) -> Result<Node, String> {
        self.claim(loc.page)?;
        let offset = loc.page * self.ps.bytes() as u64;
        let n = self
            .data
            .read_at(&mut self.buf, offset)
            .map_err(|e| e.to_string())?;
        if n < self.buf.len() {
            return Err(format!(
                "page {}: the data file ends {} bytes into it",
                loc.page, n
            ));
        }
        self.pages_read += 1;
        let node = decode_node(&self.buf, self.ps, loc).map_err(|e| e.to_string())?;
        if level.is_some_and(|l| node.level() != l) {
            return Err(format!(
                "page {}: a node at level {} where its parent implies {}",
                loc.page,
                node.level(),
                level.unwrap_or_default()
            ));
        }
        Ok(node)
    }

    /// Take `page` for this walk: in the file's tree pages, and not taken
    /// before (a page referred to twice would make a loop, or an entry
    /// counted twice).
    fn claim(&mut self, page: PageNo) -> Result<(), String> {
        if !(FIRST_TREE_PAGE..self.page_count).contains(&page) {
            return Err(format!(
                "page {page} is outside the data file's tree pages (2..{})",
                self.page_count
            ));
        }
        if !self.visited.insert(page) {
            return Err(format!("page {page} is referred to twice (a loop?)"));
        }
        Ok(())
    }

    fn leaf<E>(
        &mut self,
        page: PageNo,
        l: &Leaf,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        emit: &mut Emit<'_, E>,
    ) -> Result<(), E> {
        if (0..l.len()).any(|i| !within(l.key(i), lo, hi)) {
            let why = format!("page {page}: keys outside the range its parent gives it");
            self.lost(lo, hi, page, why);
            return Ok(());
        }
        for i in 0..l.len() {
            let key = l.key(i);
            match l.value(i) {
                ValueRef::Inline(v) => emit(key, v, self.pages_read)?,
                ValueRef::Overflow(o) => {
                    let first = o.location().expect("a value read from a page is on disk");
                    match self.overflow(first, o.len()) {
                        Ok(v) => emit(key, &v, self.pages_read)?,
                        Err(why) => {
                            let mut next = key.to_vec();
                            next.push(0);
                            self.lost(Some(key), Some(&next), first.page, why);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// A value's bytes from its overflow chain, each page claimed and
    /// checked as the tree's reads do.
    fn overflow(&mut self, first: Location, len: u64) -> Result<Arc<[u8]>, String> {
        let (ps, data) = (self.ps, self.data);
        let mut read = 0u64;
        let chain = read_overflow_chain(ps, first, len, |page, buf| {
            self.claim(page).map_err(|_| BtreeError::Corrupt {
                page,
                reason: "an overflow page outside the tree's pages, or used twice",
            })?;
            read += 1;
            data.read_exact_at(buf, page * ps.bytes() as u64)?;
            Ok(())
        });
        self.pages_read += read;
        chain
            .map(|c| c.bytes)
            .map_err(|e| format!("the value's overflow chain: {e}"))
    }

    fn lost(&mut self, lo: Option<&[u8]>, hi: Option<&[u8]>, page: PageNo, reason: String) {
        self.unreachable.push(UnreachableRange {
            from: lo.map(<[u8]>::to_vec),
            to: hi.map(<[u8]>::to_vec),
            page,
            reason,
        });
    }
}

/// Whether `key` lies in `[lo, hi)` (unbounded where `None`).
fn within(key: &[u8], lo: Option<&[u8]>, hi: Option<&[u8]>) -> bool {
    lo.is_none_or(|lo| key >= lo) && hi.is_none_or(|hi| key < hi)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::btree::{encode_node, page_crc, Branch, Child};
    use crate::io::{OpenMode, OpenOptions, SimVfs, Vfs};

    fn leaf(keys: &[&[u8]]) -> Node {
        let mut l = Leaf::with_capacity(keys.len(), 4096);
        for k in keys {
            l.push(k, ValueRef::Inline(b"v"));
        }
        Node::new(Body::Leaf(l))
    }

    /// A branch whose two children are one page: the page is read once,
    /// its entries come once, and the second child's range is reported.
    /// (A loop needs a child at a level not below its parent's, which
    /// the level check refuses first.)
    #[test]
    fn a_page_referred_to_twice_is_read_once_and_its_second_range_reported() {
        let ps = PageSize::DEFAULT;
        let vfs = SimVfs::new(1);
        vfs.create_dir_durable(Path::new("/s")).unwrap();
        let options = OpenOptions::new(OpenMode::Buffered).create(true);
        let file = vfs.open(Path::new("/s/data"), options).unwrap();
        let leaf_page = encode_node(&leaf(&[b"a", b"b"]), 2, ps);
        let shared = Location {
            page: 2,
            crc: page_crc(&leaf_page),
        };
        let mut branch = Branch::new(1, Child::on_disk(shared));
        branch.push(b"m", Child::on_disk(shared));
        let root_page = encode_node(&Node::new(Body::Branch(branch)), 3, ps);
        let root = Location {
            page: 3,
            crc: page_crc(&root_page),
        };
        let bytes = [vec![0; 2 * ps.bytes()], leaf_page, root_page].concat();
        file.write_at(&bytes, 0).unwrap();
        let mut walk = Walk::new(file.as_ref(), ps, 4);
        let mut keys = Vec::new();
        walk.run(Some(root), &mut |k: &[u8],
                                   _: &[u8],
                                   _: u64|
         -> Result<(), ()> {
            keys.push(k.to_vec());
            Ok(())
        })
        .unwrap();
        assert_eq!(keys, [b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(walk.pages_read, 2);
        assert_eq!(walk.unreachable.len(), 1);
        let lost = &walk.unreachable[0];
        assert_eq!(
            (lost.from.as_deref(), lost.to.as_deref()),
            (Some(&b"m"[..]), None)
        );
        assert!(lost.reason.contains("twice"), "{}", lost.reason);
        // A root outside the file's pages is one range: everything.
        let mut walk = Walk::new(file.as_ref(), ps, 3);
        let mut nothing = |_: &[u8], _: &[u8], _: u64| -> Result<(), ()> { Ok(()) };
        walk.run(Some(root), &mut nothing).unwrap();
        assert_eq!((walk.pages_read, walk.unreachable.len()), (0, 1));
    }
}
