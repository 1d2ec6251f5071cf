//! Keeping every node within one page and the tree a valid B+tree: a node
//! that grew past a page is split by encoded bytes; a node that shrank
//! below a quarter page (or a branch left with one child) is merged with a
//! sibling, and the two are split again, evenly, if they do not fit one
//! page. All leaves stay at one depth: only siblings merge, whole subtrees
//! are dropped, and the root grows or collapses by one level at a time.

use std::ops::Bound;
use std::sync::Arc;

use super::children::Child;
use super::node::{Body, Branch, Node};
use super::page::{BRANCH_CELL_FIXED_BYTES, PAGE_HEADER_BYTES};
use super::read::load_to_change_at_level;
use super::write::Writer;
use super::{BtreeError, PageSize};

/// Child `i` of a branch, which the writer has just changed: in memory and
/// owned by the writer.
fn owned(branch: &mut Branch, i: usize) -> &mut Node {
    let (_, mem) = branch.child_mut(i).parts_mut();
    let arc = mem.as_mut().expect("a changed child is in memory");
    Arc::get_mut(arc).expect("a changed child belongs to its writer")
}

fn into_owned(child: Child) -> Node {
    let (_, mem) = child.into_parts();
    let arc = mem.expect("a changed child is in memory");
    Arc::try_unwrap(arc).expect("a changed child belongs to its writer")
}

impl Writer<'_> {
    fn underfull(&self, node: &Node) -> bool {
        node.encoded_bytes() < self.page_size.underfull_bytes()
            || node.as_branch().is_some_and(|b| b.len() < 2)
    }

    /// Bring child `i` of `branch` back within bounds after the writer
    /// changed it.
    pub(crate) fn fix_child(&mut self, branch: &mut Branch, i: usize) -> Result<(), BtreeError> {
        let (too_big, empty, underfull) = {
            let child = owned(branch, i);
            (
                child.encoded_bytes() > self.page_size.bytes(),
                child.is_empty(),
                self.underfull(child),
            )
        };
        if too_big {
            self.split_child(branch, i);
        } else if empty {
            // Its page, if it had one, was reported freed when the writer
            // took it over.
            branch.remove_child(i);
        } else if underfull && branch.len() > 1 {
            self.merge_child(branch, i)?;
        }
        Ok(())
    }

    /// Split child `i` into pieces that each fit a page, inserted after it.
    fn split_child(&mut self, branch: &mut Branch, i: usize) {
        let pieces = split_node(owned(branch, i), self.page_size);
        *self.created += pieces.len() as u64;
        for (k, (separator, piece)) in pieces.into_iter().enumerate() {
            branch.insert_after(i + k, &separator, Child::in_memory(Arc::new(piece)));
        }
    }

    /// Bring leaves `lo..=hi` of `branch` (at least two, all changed by
    /// this writer) back within bounds together: their entries are put
    /// in one leaf, and if that does not fit a page it is cut into as few
    /// pieces of about [`PACKED_FILL_EIGHTHS`] eighths of a page as hold
    /// them, evenly. Splitting each leaf on its own, in halves, left the
    /// leaves of a tree filled by random keys 58 % full on average (10M
    /// keys: 527,938 leaves of 4 KiB for 2.37 KiB of entries each, `keel
    /// db stats`), and a checkpoint that changes most leaves (a fill)
    /// rewrites every one of them: fuller leaves are fewer pages to write,
    /// to cache and to read. Only leaves the writer changed are packed, so
    /// no page is written that would not have been.
    pub(crate) fn fix_leaves(
        &mut self,
        branch: &mut Branch,
        lo: usize,
        hi: usize,
    ) -> Result<(), BtreeError> {
        let rest: Vec<Node> = (lo + 1..=hi)
            .map(|_| into_owned(branch.remove_child(lo + 1)))
            .collect();
        let first = owned(branch, lo);
        // Where each leaf's entries start in the whole, and whether the
        // page cache held it (its entries' pieces are then kept cached).
        let mut sources = vec![(0, first.was_cached())];
        let Body::Leaf(l) = first.body_mut() else {
            unreachable!("the children of a level-1 branch are leaves")
        };
        for node in rest {
            sources.push((l.len(), node.was_cached()));
            let Body::Leaf(r) = node.into_body() else {
                unreachable!("the children of a level-1 branch are leaves")
            };
            l.append(&r);
        }
        let page = self.page_size.bytes();
        let cells: Vec<usize> = (0..l.len()).map(|i| l.cell_bytes(i)).collect();
        let kept = |from: usize, to: usize| {
            sources.iter().enumerate().any(|(j, &(start, cached))| {
                let end = sources.get(j + 1).map_or(cells.len(), |s| s.0);
                cached && start < to && end > from
            })
        };
        // Within a page, or cells too large to pack: fixed as one leaf.
        let cuts = (l.encoded_bytes() > page)
            .then(|| packed_cuts(&cells, page))
            .flatten();
        let Some(cuts) = cuts else {
            first.set_kept(kept(0, cells.len()));
            return self.fix_child(branch, lo);
        };
        let mut pieces = Vec::with_capacity(cuts.len());
        let mut end = cells.len();
        for &cut in cuts.iter().rev() {
            let right = l.split_off(cut);
            let separator = shortest_separator(l.key(l.len() - 1), right.key(0));
            let node = Node::new(Body::Leaf(right)).kept_if(kept(cut, end));
            pieces.push((separator, node));
            end = cut;
        }
        first.set_kept(kept(0, end));
        *self.created += pieces.len() as u64;
        for (k, (separator, piece)) in pieces.into_iter().rev().enumerate() {
            branch.insert_after(lo + k, &separator, Child::in_memory(Arc::new(piece)));
        }
        Ok(())
    }

    /// Merge child `i` with a sibling (the right one if there is one), then
    /// split the result evenly if it does not fit a page.
    fn merge_child(&mut self, branch: &mut Branch, i: usize) -> Result<(), BtreeError> {
        let left = if i + 1 < branch.len() { i } else { i - 1 };
        self.child_mut(branch, left)?;
        self.child_mut(branch, left + 1)?;
        let separator = branch.separator(left).to_vec();
        let right = into_owned(branch.remove_child(left + 1)).into_body();
        let node = owned(branch, left);
        match (node.body_mut(), right) {
            (Body::Leaf(l), Body::Leaf(r)) => l.append(&r),
            (Body::Branch(l), Body::Branch(r)) => l.append(&separator, r),
            _ => unreachable!("siblings are at one level (checked when loaded)"),
        }
        if node.encoded_bytes() > self.page_size.bytes() {
            self.split_child(branch, left);
        }
        Ok(())
    }

    /// After a range removal, merge away the branches left with one child.
    /// They lie on the paths to the range's two ends (the only nodes the
    /// removal changed). A branch left with one child cannot be merged at
    /// its own level when its parent has one child too; it can once its
    /// parent has been merged with a sibling (top-down), and a merge below
    /// can leave a parent with one child (bottom-up): so repeat until no
    /// merge happens. Each merge removes a node, so this ends.
    pub(crate) fn repair_paths(
        &mut self,
        node: &mut Node,
        ends: &[Bound<&[u8]>; 2],
    ) -> Result<(), BtreeError> {
        let Body::Branch(b) = node.body_mut() else {
            return Ok(());
        };
        loop {
            if b.is_empty() {
                // Everything went: `fix_root` drops the root.
                return Ok(());
            }
            while b.len() > 1 {
                let Some(i) = path_children(b, ends).into_iter().find(|&i| lonely(b, i)) else {
                    break;
                };
                self.merge_child(b, i)?;
            }
            for i in path_children(b, ends) {
                let (_, mem) = b.child_mut(i).parts_mut();
                // Only nodes this writer owns were changed; the rest are
                // valid.
                let owned = mem
                    .as_mut()
                    .and_then(Arc::get_mut)
                    .filter(|n| n.location().is_none());
                if let Some(child) = owned {
                    self.repair_paths(child, ends)?;
                }
            }
            let mergeable = b.len() > 1 && path_children(b, ends).iter().any(|&i| lonely(b, i));
            if !mergeable {
                return Ok(());
            }
        }
    }

    /// After an operation: split a root that outgrew its page under a new
    /// root, drop an empty root, and replace a branch root that has one
    /// child by that child.
    pub(crate) fn fix_root(&mut self, root: &mut Option<Arc<Node>>) -> Result<(), BtreeError> {
        loop {
            let Some(node) = root.as_ref() else {
                return Ok(());
            };
            if node.encoded_bytes() > self.page_size.bytes() {
                let old = root.take().expect("checked");
                let level = old.level().checked_add(1).expect("fewer than 255 levels");
                let mut top = Branch::new(level, Child::in_memory(old));
                self.split_child(&mut top, 0);
                *root = Some(Arc::new(Node::new(Body::Branch(top))));
            } else if node.is_empty() {
                *root = None;
            } else if let Some(b) = node.as_branch().filter(|b| b.len() == 1) {
                // The old root was changed by this writer, so its page (if
                // any) is already reported.
                let child = match b.child(0).resolve() {
                    Ok(n) => n,
                    Err(loc) => load_to_change_at_level(self.src, loc, b.level() - 1)?,
                };
                *root = Some(child);
            } else {
                return Ok(());
            }
        }
    }
}

/// The children of `b` on the paths to the two ends of a range.
fn path_children(b: &Branch, ends: &[Bound<&[u8]>; 2]) -> Vec<usize> {
    let mut at: Vec<usize> = ends
        .iter()
        .map(|end| match end {
            Bound::Unbounded => 0,
            Bound::Included(k) | Bound::Excluded(k) => b.child_index(k),
        })
        .collect();
    if matches!(ends[1], Bound::Unbounded) {
        at[1] = b.len() - 1;
    }
    at.dedup();
    at
}

/// Whether child `i` is a branch with a single child.
fn lonely(b: &Branch, i: usize) -> bool {
    b.child(i)
        .resolve()
        .is_ok_and(|n| n.as_branch().is_some_and(|c| c.len() < 2))
}

/// Split a node that outgrew its page: it keeps the first piece; the other
/// pieces are returned with the separator that goes before each.
fn split_node(node: &mut Node, page_size: PageSize) -> Vec<(Vec<u8>, Node)> {
    let mut pieces = Vec::new();
    let keep = node.was_cached();
    match node.body_mut() {
        Body::Leaf(l) => {
            let cells: Vec<usize> = (0..l.len()).map(|i| l.cell_bytes(i)).collect();
            let cuts = cut_points(&cells, &vec![0; cells.len()], 1, page_size.bytes());
            for &cut in cuts.iter().rev() {
                let right = l.split_off(cut);
                let separator = shortest_separator(l.key(l.len() - 1), right.key(0));
                pieces.push((separator, Node::new(Body::Leaf(right)).kept_if(keep)));
            }
        }
        Body::Branch(b) => {
            // The first cell of a piece stores no key: its separator moves
            // up.
            let keys: Vec<usize> = (0..b.len())
                .map(|i| if i == 0 { 0 } else { b.separator(i - 1).len() })
                .collect();
            let cells: Vec<usize> = keys.iter().map(|k| BRANCH_CELL_FIXED_BYTES + k).collect();
            let cuts = cut_points(&cells, &keys, 2, page_size.bytes());
            for &cut in cuts.iter().rev() {
                let (separator, right) = b.split_off(cut);
                pieces.push((separator, Node::new(Body::Branch(right))));
            }
        }
    }
    pieces.reverse();
    pieces
}

/// How full [`Writer::fix_leaves`] packs leaves, in eighths of a page:
/// room for a few more entries before a leaf splits again.
pub(crate) const PACKED_FILL_EIGHTHS: usize = 7;

/// Where to cut cells (their encoded bytes, in order) into the fewest
/// pieces of at most [`PACKED_FILL_EIGHTHS`] eighths of `page` that hold
/// them, of about equal bytes; `None` when cells that large leave some
/// piece past a page, or empty.
fn packed_cuts(cells: &[usize], page: usize) -> Option<Vec<usize>> {
    let total: usize = cells.iter().sum();
    let target = (page * PACKED_FILL_EIGHTHS / 8).saturating_sub(PAGE_HEADER_BYTES);
    let n = total.div_ceil(target.max(1)).max(1);
    let mut cuts = Vec::with_capacity(n - 1);
    let mut before = 0;
    for (i, &c) in cells.iter().enumerate() {
        // Cut before the cell whose middle passes the next share.
        if cuts.len() + 1 < n && before + c / 2 > total * (cuts.len() + 1) / n {
            cuts.push(i);
        }
        before += c;
    }
    let mut start = 0;
    for &end in cuts.iter().chain([cells.len()].iter()) {
        let bytes = PAGE_HEADER_BYTES + cells[start..end].iter().sum::<usize>();
        if end <= start || bytes > page {
            return None;
        }
        start = end;
    }
    Some(cuts)
}

/// Where to cut a node's cells into pieces of at least `min_cells` that
/// each fit `cap` bytes: at the single most even point when one cut is
/// enough (always, for a node that grew by one entry, by the limits), else
/// greedily. `discount[a]` is what cell `a` saves when it starts a piece.
fn cut_points(cells: &[usize], discount: &[usize], min_cells: usize, cap: usize) -> Vec<usize> {
    let n = cells.len();
    let mut prefix = Vec::with_capacity(n + 1);
    prefix.push(0usize);
    for c in cells {
        prefix.push(prefix.last().expect("nonempty") + c);
    }
    let bytes = |a: usize, b: usize| PAGE_HEADER_BYTES + prefix[b] - prefix[a] - discount[a];
    let even = (min_cells..=n.saturating_sub(min_cells))
        .filter(|&m| bytes(0, m) <= cap && bytes(m, n) <= cap)
        .min_by_key(|&m| bytes(0, m).max(bytes(m, n)));
    if let Some(m) = even {
        return vec![m];
    }
    let mut cuts = Vec::new();
    let mut a = 0;
    loop {
        let mut b = (a + min_cells).min(n);
        while b < n && bytes(a, b + 1) <= cap {
            b += 1;
        }
        if b >= n {
            break;
        }
        b = b.min(n - min_cells);
        cuts.push(b);
        a = b;
    }
    let mut start = 0;
    for &end in cuts.iter().chain([n].iter()) {
        assert!(
            end - start >= min_cells && bytes(start, end) <= cap,
            "no way to split {n} cells into pages of {cap} bytes"
        );
        start = end;
    }
    cuts
}

/// The shortest key `s` with `left < s <= right`: a prefix of `right`.
/// Short separators let a branch hold more children.
fn shortest_separator(left: &[u8], right: &[u8]) -> Vec<u8> {
    debug_assert!(left < right);
    let common = left.iter().zip(right).take_while(|(a, b)| a == b).count();
    right[..common + 1].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separators_are_short_and_between() {
        for (l, r, want) in [
            (&b"abc"[..], &b"abd"[..], &b"abd"[..]),
            (b"ab", b"abzzz", b"abz"),
            (b"a", b"b", b"b"),
            (b"", b"\x00", b"\x00"),
            (b"apple", b"banana", b"b"),
        ] {
            let s = shortest_separator(l, r);
            assert_eq!(s, want);
            assert!(l < &s[..] && &s[..] <= r);
        }
    }

    #[test]
    fn cuts_are_even_and_fit() {
        let cap = 100;
        // 10 cells of 10 bytes: 16 + 100 does not fit, 16 + 50 does.
        assert_eq!(cut_points(&[10; 10], &[0; 10], 1, cap), vec![5]);
        // One big cell at the end pulls the cut to the right.
        let mut cells = vec![5; 10];
        cells.push(60);
        let cuts = cut_points(&cells, &[0; 11], 1, cap);
        assert_eq!(cuts, vec![10]);
        // Too much for two pieces: greedy, every piece fits.
        let cuts = cut_points(&[30; 9], &[0; 9], 1, cap);
        assert_eq!(cuts, vec![2, 4, 6, 8]);
        // Branch pieces keep two cells each: the last piece takes one
        // from the one before.
        let cuts = cut_points(&[25; 7], &[0, 11, 11, 11, 11, 11, 11], 2, cap);
        assert_eq!(cuts, vec![3, 5]);
    }
}
