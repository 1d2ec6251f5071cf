//! Applying many changes at once, on more than one thread.
//!
//! A transaction of a hundred random puts into a tree of a million entries
//! spends its time copying nodes it finds cold in memory: a leaf and a
//! branch per put, each a few KiB read from DRAM. That work is
//! independent below the root: changes under different children of a
//! node copy disjoint nodes. [`TreeMut::apply`] makes its own the path
//! from the root down to the highest node that more than one child of
//! takes changes (the root, for changes spread over the tree; deeper for
//! a checkpoint's batch of sorted keys), takes out each child there that
//! a change goes to, lets every thread that [`Fork`] offers apply the
//! changes of the next child not yet taken, then puts the children back
//! and brings them within a page, one by one, in descending order (a
//! child split, removed or merged with its right sibling leaves the
//! positions of the children before it as they were), and the path above
//! them on the way back up.
//!
//! The result is a valid tree holding the same entries as the changes
//! applied one by one in order: changes to one key go to one child and
//! keep their order there. Its shape may differ (a child of the root is
//! split once, into as many pieces as it needs, rather than at each insert
//! that overfills it).

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::cache::PageSource;
use super::leaf::{Merge, OverflowValue, ValueRef};
use super::node::{Body, Branch, Node};
use super::read::{self, load_to_change_at_level};
use super::tree::TreeMut;
use super::write::Writer;
use super::{BtreeError, Location, PageNo, PageSize};

/// Changes below which [`TreeMut::apply`] stays on the calling thread:
/// handing work to another thread costs a wake-up (5–30 µs here), several
/// changes' worth.
pub const FORK_MIN_CHANGES: usize = 32;

/// Changes from which [`TreeMut::apply`], on one thread, shares a batch out
/// down the tree (`Writer::apply_grouped`) instead of applying each from
/// the root.
pub const GROUP_MIN_CHANGES: usize = 32;

/// One change for [`TreeMut::apply`].
#[derive(Debug, Clone, Copy)]
pub enum Change<'a> {
    /// Insert `key` with `value`, replacing any value it had. A value the
    /// caller holds `shared` is kept as it is when it goes to overflow
    /// pages (see [`TreeMut::insert_shared`]).
    Put {
        /// The key.
        key: &'a [u8],
        /// The value.
        value: &'a [u8],
        /// The same value, shared, if the caller holds it so.
        shared: Option<&'a Arc<[u8]>>,
    },
    /// Remove `key` if present.
    Remove(&'a [u8]),
}

impl Change<'_> {
    fn key(&self) -> &[u8] {
        match self {
            Change::Put { key, .. } | Change::Remove(key) => key,
        }
    }
}

/// Runs one piece of work on several threads at once.
pub trait Fork: Sync {
    /// Call `work` on the calling thread and, at the same time, on each
    /// other thread that is free to help; return once every call has
    /// returned. `work` shares its items out itself, and must be correct
    /// when it is called once only (no thread was free).
    fn fork(&self, work: &(dyn Fn() + Sync));
}

/// The changes under one child of the root, and what applying them did.
struct Group<'c> {
    /// The child's position in the root.
    child: usize,
    /// Indices into the changes, in their order.
    changes: &'c [u32],
    /// The child as the root held it.
    loc: Option<Location>,
    mem: Option<Arc<Node>>,
    /// The child after the changes, if they changed it (then owned).
    changed: Option<Arc<Node>>,
    freed: Vec<PageNo>,
    created: u64,
    result: Result<(), BtreeError>,
}

/// Everything a thread applying a group needs.
struct Batch<'a, 'c> {
    src: &'a dyn PageSource,
    page_size: PageSize,
    /// The level of the root's children.
    level: u8,
    changes: &'a [Change<'a>],
    groups: Vec<Mutex<Group<'c>>>,
    next: AtomicUsize,
}

impl Batch<'_, '_> {
    /// Apply groups until none is left.
    fn work(&self) {
        loop {
            let g = self.next.fetch_add(1, Ordering::Relaxed);
            let Some(group) = self.groups.get(g) else {
                return;
            };
            let mut group = group.lock().unwrap_or_else(PoisonError::into_inner);
            group.result = self.apply_group(&mut group);
        }
    }

    fn apply_group(&self, group: &mut Group<'_>) -> Result<(), BtreeError> {
        // Moved out of the root, not shared: a child this writer owns
        // already (an earlier transaction of its group changed it) is
        // changed in place, not copied again.
        let loaded = group.mem.is_none();
        let mut node = match group.mem.take() {
            Some(n) => n,
            None => {
                let loc = group.loc.expect("a child is in memory or on disk");
                load_to_change_at_level(self.src, loc, self.level)?
            }
        };
        let (mut freed, mut created, mut changed) = (Vec::new(), 0, false);
        let mut w = Writer {
            src: self.src,
            page_size: self.page_size,
            freed: &mut freed,
            created: &mut created,
        };
        let result = self.apply_changes(&mut w, &mut node, group.changes, &mut changed);
        if changed {
            group.changed = Some(node);
        } else if !loaded {
            group.mem = Some(node);
        }
        group.freed = freed;
        group.created = created;
        result
    }

    /// Apply changes under `node`; `changed` is set once it is changed.
    fn apply_changes(
        &self,
        w: &mut Writer<'_>,
        node: &mut Arc<Node>,
        changes: &[u32],
        changed: &mut bool,
    ) -> Result<(), BtreeError> {
        if changes.len() >= GROUP_MIN_CHANGES && node.as_branch().is_some() {
            // Shared out down the child's subtree, as on one thread.
            *changed = true;
            let n = w.make_mut(node);
            return w.apply_grouped(n, self.changes, changes);
        }
        for &c in changes {
            match self.changes[c as usize] {
                Change::Put { key, value, shared } => {
                    *changed = true;
                    let n = w.make_mut(node);
                    with_value(self.page_size, value, shared, |v| w.insert(n, key, v))?;
                }
                Change::Remove(key) => {
                    if read::find(Some(node), self.src, key)?.is_some() {
                        *changed = true;
                        let n = w.make_mut(node);
                        w.remove(n, key)?;
                    }
                }
            }
        }
        Ok(())
    }
}

impl Writer<'_> {
    /// Apply `changes[i]` for each `i` of `picked` (in that order) under
    /// `node`, which this writer owns: at a leaf one after the other; at
    /// a branch shared out among its children by key, each child taken
    /// once, given all of its changes, and then brought within a page.
    ///
    /// The same result as applying them one by one from the top, but each
    /// node on the way is reached (and copied) once per batch rather than
    /// once per change, and a child is split once, into as many pieces as
    /// it needs: a checkpoint's fold of sorted changes spent most of its
    /// time descending from the root for every key. Unlike
    /// [`TreeMut::remove`], a remove of an absent key still copies the
    /// nodes on its way (they are rewritten at the next checkpoint).
    ///
    /// The children are fixed from the last to the first, as in
    /// [`TreeMut::apply`] on several threads: fixing child `i` (split,
    /// removed, or merged with a sibling) leaves the positions of the
    /// children before it as they were, and those are the ones still to
    /// fix (a last child merges with the one before it, which is then
    /// fixed in turn if it was changed).
    pub(crate) fn apply_grouped(
        &mut self,
        node: &mut Node,
        changes: &[Change<'_>],
        picked: &[u32],
    ) -> Result<(), BtreeError> {
        let page_size = self.page_size;
        let Body::Branch(b) = node.body_mut() else {
            for &c in picked {
                match changes[c as usize] {
                    Change::Put { key, value, shared } => {
                        with_value(page_size, value, shared, |v| self.insert(node, key, v))?;
                    }
                    Change::Remove(key) => self.remove(node, key)?,
                }
            }
            return Ok(());
        };
        let (indices, runs) = by_child(b, changes, picked);
        let mut changed = Vec::with_capacity(runs.len());
        for (child, run) in runs {
            let run = &indices[run];
            if b.level() == 1 && ascending(changes, run) {
                self.merge_leaf(b, child, changes, run)?;
            } else {
                let node = self.child_mut(b, child)?;
                self.apply_grouped(node, changes, run)?;
            }
            changed.push(child);
        }
        // Every child has all its changes before any is fixed: fixing one
        // may merge it with a sibling, and then split the two again at
        // another key than their separator. Changed leaves side by side
        // are fixed together (packed: `Writer::fix_leaves`).
        let leaves = b.level() == 1;
        let mut end = changed.len();
        while end > 0 {
            let mut start = end - 1;
            while leaves && start > 0 && changed[start - 1] + 1 == changed[start] {
                start -= 1;
            }
            let (lo, hi) = (changed[start], changed[end - 1]);
            if hi > lo {
                self.fix_leaves(b, lo, hi)?;
            } else {
                self.fix_child(b, lo)?;
            }
            end = start;
        }
        Ok(())
    }
}

impl Writer<'_> {
    /// Apply `changes[i]` for each `i` of `picked` (keys strictly
    /// ascending) to leaf child `i` of `b` by building the changed leaf in
    /// one pass (`Leaf::merged`) instead of copying it and changing the
    /// copy one key at a time. The old leaf's page, and the pages of the
    /// overflow values it no longer holds, are reported freed, as
    /// [`Writer::child_mut`] and [`Writer::insert`] would.
    fn merge_leaf(
        &mut self,
        b: &mut Branch,
        i: usize,
        changes: &[Change<'_>],
        picked: &[u32],
    ) -> Result<(), BtreeError> {
        let (loc, mem) = b.child_mut(i).parts_mut();
        let node = match mem.take() {
            Some(n) => n,
            None => {
                let at = loc.expect("a child is in memory or on disk");
                load_to_change_at_level(self.src, at, 0)?
            }
        };
        let Body::Leaf(old) = node.body() else {
            unreachable!("a branch of level 1 has leaves for children")
        };
        let big: Vec<Option<Arc<OverflowValue>>> = picked
            .iter()
            .map(|&c| match changes[c as usize] {
                Change::Put { value, shared, .. } => overflow_value(self.page_size, value, shared),
                Change::Remove(_) => None,
            })
            .collect();
        let merges: Vec<Merge<'_>> = picked
            .iter()
            .zip(&big)
            .map(|(&c, big)| match changes[c as usize] {
                Change::Put { key, value, .. } => Merge::Put(
                    key,
                    match big {
                        Some(o) => ValueRef::Overflow(o),
                        None => ValueRef::Inline(value),
                    },
                ),
                Change::Remove(key) => Merge::Remove(key),
            })
            .collect();
        let (leaf, dropped) = old.merged(&merges);
        for value in &dropped {
            self.free_overflow(value)?;
        }
        if let Some(page) = node.page() {
            self.freed.push(page);
        }
        loc.take();
        *mem = Some(Arc::new(
            Node::new(Body::Leaf(leaf)).kept_if(node.was_cached()),
        ));
        Ok(())
    }
}

/// Whether the keys of `changes[i]` for each `i` of `picked` are strictly
/// ascending (a checkpoint's fold: sorted, each key once).
fn ascending(changes: &[Change<'_>], picked: &[u32]) -> bool {
    picked
        .windows(2)
        .all(|w| changes[w[0] as usize].key() < changes[w[1] as usize].key())
}

/// `picked` (indices into `changes`) shared out among `b`'s children by
/// key: the indices ordered by child, each child's in their order, and for
/// each child with changes its position and its run of those indices.
fn by_child(
    b: &Branch,
    changes: &[Change<'_>],
    picked: &[u32],
) -> (Vec<u32>, Vec<(usize, Range<usize>)>) {
    let mut order: Vec<(u32, u32)> = picked
        .iter()
        .map(|&c| (b.child_index(changes[c as usize].key()) as u32, c))
        .collect();
    // Stable: a key's changes keep their order.
    order.sort_by_key(|&(child, _)| child);
    let mut runs = Vec::new();
    let mut start = 0;
    while start < order.len() {
        let child = order[start].0;
        let end = start + order[start..].partition_point(|&(c, _)| c == child);
        runs.push((child as usize, start..end));
        start = end;
    }
    (order.into_iter().map(|(_, c)| c).collect(), runs)
}

/// Call `f` with `value` as the tree stores it: inline, or as an overflow
/// value (the caller's shared bytes kept as they are).
pub(crate) fn with_value<R>(
    page_size: PageSize,
    value: &[u8],
    shared: Option<&Arc<[u8]>>,
    f: impl FnOnce(ValueRef<'_>) -> R,
) -> R {
    match overflow_value(page_size, value, shared) {
        Some(overflow) => f(ValueRef::Overflow(&overflow)),
        None => f(ValueRef::Inline(value)),
    }
}

/// `value` as an overflow value, if it is too large to be inline (the
/// caller's shared bytes kept as they are).
fn overflow_value(
    page_size: PageSize,
    value: &[u8],
    shared: Option<&Arc<[u8]>>,
) -> Option<Arc<OverflowValue>> {
    (value.len() > page_size.max_inline_value_bytes()).then(|| {
        Arc::new(match shared {
            Some(bytes) => OverflowValue::shared(Arc::clone(bytes)),
            None => OverflowValue::in_memory(value),
        })
    })
}

impl TreeMut {
    /// Apply `changes` in order, on the threads `fork` offers when there
    /// are at least [`FORK_MIN_CHANGES`] and the root is a branch; on one
    /// thread, from [`GROUP_MIN_CHANGES`] under a branch root, shared out
    /// down the tree, each node reached once per batch. Every
    /// key and value is checked against the limits before anything
    /// changes. After another error (a page that fails to load) only
    /// some changes may be applied, and (on several threads, or shared
    /// out down the tree on one) a node may be left past a page: drop the
    /// working copy.
    pub fn apply(
        &mut self,
        src: &dyn PageSource,
        changes: &[Change<'_>],
        fork: Option<&dyn Fork>,
    ) -> Result<(), BtreeError> {
        for c in changes {
            if let Change::Put { key, value, .. } = c {
                self.check_limits(key, value)?;
            }
        }
        let fork = fork.filter(|_| changes.len() >= FORK_MIN_CHANGES);
        let root_is_branch = self.root().is_some_and(|r| r.as_branch().is_some());
        match fork {
            Some(fork) if root_is_branch => self.apply_forked(src, changes, fork),
            None if root_is_branch && changes.len() >= GROUP_MIN_CHANGES => {
                self.apply_grouped(src, changes)
            }
            _ => {
                for c in changes {
                    match *c {
                        Change::Put { key, value, shared } => {
                            self.insert_value(src, key, value, shared)?
                        }
                        Change::Remove(key) => {
                            self.remove(src, key)?;
                        }
                    }
                }
                Ok(())
            }
        }
    }

    /// [`TreeMut::apply`] on this thread, with a branch at the root: the
    /// changes are shared out among the root's children, and each
    /// child's among its own, down to the leaves (see
    /// [`Writer::apply_grouped`]).
    fn apply_grouped(
        &mut self,
        src: &dyn PageSource,
        changes: &[Change<'_>],
    ) -> Result<(), BtreeError> {
        let (root, mut w) = self.root_and_writer(src);
        let node = w.make_mut(root.as_mut().expect("checked: a branch"));
        let all: Vec<u32> = (0..changes.len() as u32).collect();
        w.apply_grouped(node, changes, &all)?;
        w.fix_root(root)
    }

    fn apply_forked(
        &mut self,
        src: &dyn PageSource,
        changes: &[Change<'_>],
        fork: &dyn Fork,
    ) -> Result<(), BtreeError> {
        let (root, mut w) = self.root_and_writer(src);
        let node = w.make_mut(root.as_mut().expect("checked: a branch"));
        let all: Vec<u32> = (0..changes.len() as u32).collect();
        w.apply_forked(node, changes, &all, fork)?;
        w.fix_root(root)
    }
}

impl Writer<'_> {
    /// Apply `changes[i]` for each `i` of `picked` under `node`, a branch
    /// this writer owns, sharing them out among the children of the
    /// highest node on their way that more than one child of takes some:
    /// each such child goes to whichever thread `fork` offers next. A
    /// checkpoint's fold gives a few thousand sorted keys at a time, which
    /// at ten million keys all fall under one child of the root (a few
    /// dozen children each over ~14,000 leaves) but spread over a dozen
    /// or more level-1 branches: sharing out at the root alone left every
    /// fold on one thread. Below level 2 (a few leaves) it stays on this
    /// thread: waking another costs more than those leaves.
    fn apply_forked(
        &mut self,
        node: &mut Node,
        changes: &[Change<'_>],
        picked: &[u32],
        fork: &dyn Fork,
    ) -> Result<(), BtreeError> {
        let level = node.as_branch().map_or(0, Branch::level);
        if level < 2 {
            return self.apply_grouped(node, changes, picked);
        }
        let Body::Branch(b) = node.body_mut() else {
            unreachable!("checked: a branch")
        };
        let (indices, runs) = by_child(b, changes, picked);
        if let [(child, _)] = runs[..] {
            let n = self.child_mut(b, child)?;
            self.apply_forked(n, changes, &indices, fork)?;
            return self.fix_child(b, child);
        }
        let mut groups = Vec::with_capacity(runs.len());
        for (child, run) in runs {
            let (loc, mem) = b.child_mut(child).parts_mut();
            groups.push(Mutex::new(Group {
                child,
                changes: &indices[run],
                loc: *loc,
                mem: mem.take(),
                changed: None,
                freed: Vec::new(),
                created: 0,
                result: Ok(()),
            }));
        }
        let batch = Batch {
            src: self.src,
            page_size: self.page_size,
            level: level - 1,
            changes,
            groups,
            next: AtomicUsize::new(0),
        };
        fork.fork(&|| batch.work());
        let mut result = Ok(());
        let mut changed = Vec::new();
        for group in batch.groups {
            let group = group.into_inner().unwrap_or_else(PoisonError::into_inner);
            self.freed.extend_from_slice(&group.freed);
            *self.created += group.created;
            if result.is_ok() {
                result = group.result;
            }
            let (loc, mem) = b.child_mut(group.child).parts_mut();
            match group.changed {
                Some(node) => {
                    // The child now differs from its page (reported
                    // freed when the group made the node its own).
                    *loc = None;
                    *mem = Some(node);
                    changed.push(group.child);
                }
                None => *mem = group.mem,
            }
        }
        // Every child is back in place before any is fixed: fixing one
        // may merge it with a sibling.
        for &i in changed.iter().rev() {
            self.fix_child(b, i)?;
        }
        result
    }
}
