//! A data file on the simulated file system, and checkpoints into it, for
//! the tree's tests.

use std::sync::Arc;

use super::*;
use crate::io::test_files::sim_file;
use crate::io::{SyncKind, VfsFile};

pub(crate) struct Disk {
    pub(crate) file: Arc<dyn VfsFile>,
    pub(crate) cache: PageCache,
    pub(crate) page_size: PageSize,
    /// Whether caches read pages through a map of the file (else `pread`).
    pub(crate) mapped: bool,
    /// The next never-used page: pages are not recycled here, so every old
    /// snapshot stays readable.
    pub(crate) next_page: PageNo,
}

impl Disk {
    /// A disk whose caches read pages through a map of the file.
    pub(crate) fn new(page_size: PageSize, cache_bytes: usize) -> Disk {
        Disk::reading(page_size, cache_bytes, true)
    }

    /// A disk whose caches read through a map (`mapped`) or with `pread`.
    pub(crate) fn reading(page_size: PageSize, cache_bytes: usize, mapped: bool) -> Disk {
        let file = sim_file(7);
        Disk {
            cache: cache(&file, page_size, cache_bytes, mapped),
            file,
            page_size,
            mapped,
            next_page: FIRST_TREE_PAGE,
        }
    }

    /// Write out what `tree` holds only in memory, as a store's checkpoint
    /// does, then let go of the in-memory copies.
    pub(crate) fn checkpoint(&mut self, tree: &Tree) -> Checkpoint {
        let mut next = self.next_page;
        let cp = assign_pages(tree, &mut || {
            next += 1;
            next - 1
        })
        .unwrap();
        self.next_page = next;
        self.write(&cp);
        self.file.sync(SyncKind::Data).unwrap();
        for (loc, node) in &cp.nodes {
            self.cache.insert(*loc, Arc::clone(node));
        }
        detach_clean(tree);
        assert_eq!(tree.root_location(), cp.root);
        cp
    }

    pub(crate) fn write(&self, cp: &Checkpoint) {
        for (page, bytes) in &cp.pages {
            assert_eq!(bytes.len(), self.page_size.bytes());
            self.file
                .write_at(bytes, page * self.page_size.bytes() as u64)
                .unwrap();
        }
    }

    /// A fresh cache over the same file: nothing decoded in memory.
    pub(crate) fn cold_cache(&self, cache_bytes: usize) -> PageCache {
        cache(&self.file, self.page_size, cache_bytes, self.mapped)
    }

    /// A fresh cache that reads the other way (`pread` if this disk's
    /// caches map the file, and the reverse).
    pub(crate) fn other_cache(&self, cache_bytes: usize) -> PageCache {
        cache(&self.file, self.page_size, cache_bytes, !self.mapped)
    }
}

fn cache(file: &Arc<dyn VfsFile>, ps: PageSize, cache_bytes: usize, mapped: bool) -> PageCache {
    let cache = PageCache::new(Arc::clone(file), ps, cache_bytes)
        .with_mapped_reads(mapped)
        .unwrap();
    assert_eq!(cache.reads_mapped(), mapped);
    cache
}

/// Runs the work on the calling thread and on one scoped thread.
pub(crate) struct TwoThreads;

impl Fork for TwoThreads {
    fn fork(&self, work: &(dyn Fn() + Sync)) {
        std::thread::scope(|s| {
            s.spawn(work);
            work();
        });
    }
}
