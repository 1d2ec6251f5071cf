//! Looking at the store: its durable meta and free pages, its tree's
//! figures, and `check` (every page the newest meta reaches, read from the
//! file, and each page accounted for exactly once).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::error::Result;
use super::state::Shared;
use super::store::{corrupt, read_freelist};
use super::sync::lock;
use crate::btree::{check_tree, Location, PageCache, PageNo, Tree, TreeStats, FIRST_TREE_PAGE};

impl Shared {
    /// Check the durable state on disk (every page the newest meta reaches,
    /// read from the file; pages accounted for exactly once) and the
    /// published tree in memory.
    pub(crate) fn check(&self) -> Result<(TreeStats, TreeStats)> {
        let _one = lock(&self.ckpt_run);
        let meta = self.meta();
        let ps = self.page_size;
        let fresh = PageCache::new(Arc::clone(&self.data), ps, 1 << 20)
            .with_max_value_bytes(self.cache.max_value_bytes());
        let root = (meta.root.page != 0).then_some(Location {
            page: meta.root.page,
            crc: meta.root.crc,
        });
        let disk = check_tree(&Tree::open(ps, &fresh, root)?, &fresh)?;
        let (list_pages, free) = read_freelist(self.data.as_ref(), ps, &meta)
            .map_err(|r| corrupt(&self.path, format!("free list: {r}")))?;
        if free.len() as u64 != meta.free_pages {
            return Err(corrupt(
                &self.path,
                format!(
                    "the meta page counts {} free pages but its list holds {}",
                    meta.free_pages,
                    free.len()
                ),
            ));
        }
        let mut owner: BTreeMap<PageNo, &'static str> = BTreeMap::new();
        let all = disk
            .pages
            .iter()
            .map(|&p| (p, "the tree"))
            .chain(list_pages.iter().map(|&p| (p, "the free list's pages")))
            .chain(free.iter().map(|&p| (p, "the free list")));
        for (p, who) in all {
            if p < FIRST_TREE_PAGE || p >= meta.page_count {
                return Err(corrupt(
                    &self.path,
                    format!("page {p} ({who}) is outside the file's tree pages"),
                ));
            }
            if let Some(first) = owner.insert(p, who) {
                return Err(corrupt(
                    &self.path,
                    format!("page {p} is used twice: by {first} and by {who}"),
                ));
            }
        }
        if let Some(p) = (FIRST_TREE_PAGE..meta.page_count).find(|p| !owner.contains_key(p)) {
            return Err(corrupt(
                &self.path,
                format!("page {p} is neither in the tree nor free (leaked)"),
            ));
        }
        let (base, _) = self.pin();
        let mem = check_tree(&base.tree, &self.cache);
        self.unpin(base.gen);
        Ok((disk, mem?))
    }

    /// The published snapshot's statistics (walks the whole tree).
    pub(crate) fn tree_stats(&self) -> Result<TreeStats> {
        let (base, _) = self.pin();
        let r = check_tree(&base.tree, &self.cache);
        self.unpin(base.gen);
        Ok(r?)
    }
}
