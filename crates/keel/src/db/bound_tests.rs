//! Stores whose data file was damaged behind their back, every page with a
//! valid checksum: a tree whose branches all share one subtree, a free
//! list that comes back on itself, a value longer than the store's limit.
//! Opening, reading, checkpointing and checking must each fail, naming the
//! page, within [`forge::WALK_TIMEOUT`] (`btree::bound` for the tree's
//! walks, `store::read_freelist` for the free list).

use std::path::Path;
use std::sync::Arc;

use super::meta::{self, Meta, PageRef};
use super::store::read_freelist;
use super::tests::builder;
use super::*;
use crate::btree::forge::{self, branch_page, leaf_page, within};
use crate::btree::{
    page_crc, BtreeError, Location, OverflowValue, PageCache, PageNo, PageSize, Tree, ValueRef,
    PAGE_TYPE_FREELIST,
};
use crate::io::{OpenMode, OpenOptions, SimVfs, SyncKind, VfsFile};
use crate::le::{put_u32, put_u64};

const DIR: &str = "/s";

/// A closed store with table `t` holding `a`..`z`.
fn store_with_a_table() -> Arc<SimVfs> {
    let vfs = SimVfs::new(3);
    let db = builder(&vfs).create(Path::new(DIR)).unwrap();
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table("t").unwrap();
        for k in b'a'..=b'z' {
            t.insert([k], [k; 8]).unwrap();
        }
    }
    w.commit().unwrap();
    db.close().unwrap();
    vfs
}

/// The data file of a closed store and its newest meta page, to change
/// both.
struct DataFile {
    file: Arc<dyn VfsFile>,
    ps: PageSize,
    meta: Meta,
}

impl DataFile {
    fn open(vfs: &SimVfs) -> DataFile {
        let path = Path::new(DIR).join(DATA_FILE);
        let file = vfs
            .open(&path, OpenOptions::new(OpenMode::Buffered))
            .unwrap();
        let ps = PageSize::DEFAULT;
        let mut slots = vec![0u8; 2 * ps.bytes()];
        file.read_exact_at(&mut slots, 0).unwrap();
        let (meta, _) = meta::choose(&slots[..ps.bytes()], &slots[ps.bytes()..]).unwrap();
        assert_eq!(meta.page_size as usize, ps.bytes());
        DataFile { file, ps, meta }
    }

    /// The tree's entries: full keys (table id first) and values.
    fn entries(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let cache = PageCache::new(Arc::clone(&self.file), self.ps, 1 << 20);
        let root = Location {
            page: self.meta.root.page,
            crc: self.meta.root.crc,
        };
        let tree = Tree::open(self.ps, &cache, Some(root)).unwrap();
        let all = tree.range(
            &cache,
            std::ops::Bound::Unbounded,
            std::ops::Bound::Unbounded,
        );
        all.map(|e| {
            let e = e.unwrap();
            (e.key().to_vec(), e.value().to_vec())
        })
        .collect()
    }

    /// Write `pages`, past the file's end or not, growing `page_count`.
    fn write(&mut self, pages: &[(PageNo, Vec<u8>)]) {
        for (page, bytes) in pages {
            let at = page * self.ps.bytes() as u64;
            self.file.write_at(bytes, at).unwrap();
            self.meta.page_count = self.meta.page_count.max(page + 1);
        }
    }

    /// Write the meta page, changed, over the one read.
    fn write_meta(&self) {
        let mut page = vec![0u8; self.ps.bytes()];
        self.meta.encode(&mut page);
        let at = self.meta.slot() * self.ps.bytes() as u64;
        self.file.write_at(&page, at).unwrap();
        self.file.sync(SyncKind::Data).unwrap();
    }
}

/// Table `name`'s id, as its catalog entry (table 0) in `entries` holds it:
/// the prefix of its full keys.
fn table_id(entries: &[(Vec<u8>, Vec<u8>)], name: &str) -> Vec<u8> {
    let key = [&[0u8; 4][..], name.as_bytes()].concat();
    let (_, id) = entries.iter().find(|(k, _)| *k == key).unwrap();
    id.clone()
}

/// Open the store and run `op` on it, on a thread of its own: it must
/// answer within the timeout.
fn on_store<T: Send + 'static>(
    vfs: &Arc<SimVfs>,
    what: &str,
    op: impl FnOnce(&Database) -> Result<T> + Send + 'static,
) -> Result<T> {
    let vfs = Arc::clone(vfs);
    within(what, move || {
        let db = builder(&vfs).open(Path::new(DIR))?;
        op(&db)
    })
}

fn assert_names_page<T: std::fmt::Debug>(what: &str, r: &Result<T>, page: PageNo) {
    let named = format!("page {page}:");
    match r {
        Err(e) if e.to_string().contains(&named) => {}
        other => panic!("{what}: expected an error naming page {page}, got {other:?}"),
    }
}

/// Table `t`'s keys and the catalog in one leaf, under 40 levels of
/// branches whose two children are both the level below (separated inside
/// `t`'s keys): lookups work, and a scan of `t`, a checkpoint dropping `t`
/// and the check stop where they reach the shared subtree again, instead
/// of walking its 2⁴⁰ paths.
#[test]
fn a_store_whose_branches_share_a_subtree_fails_instead_of_walking_every_path() {
    let vfs = store_with_a_table();
    let mut d = DataFile::open(&vfs);
    let entries = d.entries();
    let base = d.meta.page_count;
    let cells: Vec<(&[u8], ValueRef<'_>)> = entries
        .iter()
        .map(|(k, v)| (&k[..], ValueRef::Inline(v)))
        .collect();
    let (mut child, leaf) = leaf_page(d.ps, base, &cells);
    let mut pages = vec![(base, leaf)];
    let t_id = table_id(&entries, "t");
    let separator = [&t_id[..], b"m"].concat();
    for level in 1..=40u8 {
        let page = base + PageNo::from(level);
        let (loc, bytes) = branch_page(d.ps, page, level, &[child, child], &[&separator]);
        pages.push((page, bytes));
        child = loc;
    }
    d.write(&pages);
    d.meta.root = PageRef {
        page: child.page,
        crc: child.crc,
    };
    d.write_meta();

    let got = on_store(&vfs, "get", |db| {
        let r = db.begin_read();
        let t = r.open_table("t")?;
        Ok((
            t.get(b"a")?.map(|v| v.to_vec()),
            t.get(b"z")?.map(|v| v.to_vec()),
        ))
    });
    assert_eq!(got.unwrap(), (Some(vec![b'a'; 8]), Some(vec![b'z'; 8])));
    let scan = on_store(&vfs, "scan", |db| {
        let r = db.begin_read();
        let t = r.open_table("t")?;
        // Counted, not kept: a scan that does not end must not fill memory.
        let count = t.iter().try_fold(0u64, |n, kv| kv.map(|_| n + 1));
        count
    });
    assert_names_page("scan", &scan, base);
    let drop_t = on_store(&vfs, "checkpoint", |db| {
        let mut w = db.begin_write()?;
        assert!(w.delete_table("t")?);
        w.commit()?;
        db.checkpoint()
    });
    assert!(matches!(drop_t, Err(DbError::Poisoned(_))), "{drop_t:?}");
    assert_names_page("checkpoint", &drop_t, base);
    // The leaf's keys of `t` lie outside the bounds of the first path to
    // it.
    let check = on_store(&vfs, "check", |db| db.check().map(drop));
    assert_names_page("check", &check, base);
}

/// A free-list page of `ps` at `page` listing `free`, followed by `next`.
fn freelist_page(ps: PageSize, page: PageNo, next: Location, free: &[PageNo]) -> Vec<u8> {
    let mut b = vec![0u8; ps.bytes()];
    b[4] = PAGE_TYPE_FREELIST;
    put_u64(&mut b, 8, page);
    put_u64(&mut b, 16, next.page);
    put_u32(&mut b, 24, next.crc);
    put_u32(&mut b, 28, free.len() as u32);
    for (i, &p) in free.iter().enumerate() {
        put_u64(&mut b, 32 + 8 * i, p);
    }
    let crc = page_crc(&b);
    put_u32(&mut b, 0, crc);
    b
}

/// Free lists that come back to a page of theirs (one page naming itself,
/// two naming each other), checksums valid: the open (and the walk
/// `check` shares with it) fails at the page reached again.
#[test]
fn a_free_list_coming_back_on_itself_fails_the_open_at_that_page() {
    for pages_in_cycle in [1, 2] {
        let vfs = store_with_a_table();
        let mut d = DataFile::open(&vfs);
        let (ps, base) = (d.ps, d.meta.page_count);
        // The variant is a listed page: it changes the pages' parity.
        let (pages, first) = forge::cycle(0..16, |v, crc| {
            let back = Location { page: base, crc };
            let listed = [2 + PageNo::from(v)];
            if pages_in_cycle == 1 {
                return vec![(base, freelist_page(ps, base, back, &listed))];
            }
            let second = freelist_page(ps, base + 1, back, &listed);
            let to_second = Location {
                page: base + 1,
                crc: page_crc(&second),
            };
            vec![
                (base, freelist_page(ps, base, to_second, &[])),
                (base + 1, second),
            ]
        });
        d.write(&pages);
        d.meta.freelist = PageRef {
            page: first.page,
            crc: first.crc,
        };
        d.meta.free_pages = 1;
        d.write_meta();
        let meta = d.meta;
        let file = Arc::clone(&d.file);
        let read = within("read_freelist", move || {
            read_freelist(file.as_ref(), ps, &meta)
        });
        let why = format!("page {base}: the chain comes back to it");
        assert_eq!(read.unwrap_err(), why, "{pages_in_cycle} pages");
        let open = on_store(&vfs, "open", |_| Ok(()));
        assert!(
            matches!(&open, Err(DbError::Corrupt { reason, .. })
            if reason.ends_with(&why)),
            "{open:?}"
        );
    }
}

/// A free list listing more pages than the meta page counts free stops at
/// the page where it does, before keeping them.
#[test]
fn a_free_list_longer_than_the_meta_says_stops_where_it_outgrows_it() {
    let vfs = store_with_a_table();
    let mut d = DataFile::open(&vfs);
    // Past a few pages of zeros, so that the listed pages lie in the file.
    let (ps, base) = (d.ps, d.meta.page_count + 4);
    let last = freelist_page(ps, base + 1, Location { page: 0, crc: 0 }, &[3, 4, 5]);
    let to_last = Location {
        page: base + 1,
        crc: page_crc(&last),
    };
    let first = freelist_page(ps, base, to_last, &[2]);
    d.write(&[(base, first.clone()), (base + 1, last)]);
    d.meta.freelist = PageRef {
        page: base,
        crc: page_crc(&first),
    };
    d.meta.free_pages = 2;
    let why = format!(
        "page {}: the chain lists more than the meta page's 2 free pages",
        base + 1
    );
    assert_eq!(
        read_freelist(d.file.as_ref(), ps, &d.meta).unwrap_err(),
        why
    );
}

/// A value whose stated length is past the store's value limit (which the
/// journal's segment size sets: 256 KiB segments here) is `Corrupt` before
/// anything of it is read: its chain lies past the file's end.
#[test]
fn a_value_longer_than_the_store_takes_is_refused_unread() {
    let vfs = store_with_a_table();
    let mut d = DataFile::open(&vfs);
    let limit = builder(&vfs)
        .open(Path::new(DIR))
        .unwrap()
        .limits()
        .max_value_bytes;
    let mut entries = d.entries();
    let base = d.meta.page_count;
    let t_id = table_id(&entries, "t");
    let big_key = [&t_id[..], b"big"].concat();
    let past_end = Location {
        page: base + 1000,
        crc: 1,
    };
    let big = Arc::new(OverflowValue::on_disk(past_end, limit + 1));
    entries.push((big_key, Vec::new()));
    entries.sort();
    let cells: Vec<(&[u8], ValueRef<'_>)> = entries
        .iter()
        .map(|(k, v)| match &k[4..] {
            b"big" => (&k[..], ValueRef::Overflow(&big)),
            _ => (&k[..], ValueRef::Inline(v)),
        })
        .collect();
    let (root, leaf) = leaf_page(d.ps, base, &cells);
    d.write(&[(base, leaf)]);
    d.meta.root = PageRef {
        page: root.page,
        crc: root.crc,
    };
    d.write_meta();
    let get = on_store(&vfs, "get", |db| {
        let r = db.begin_read();
        let t = r.open_table("t")?;
        t.get(b"big").map(|v| v.map(|v| v.len()))
    });
    match &get {
        Err(DbError::Tree(e)) => match &**e {
            BtreeError::Corrupt { page, .. } if *page == past_end.page => {}
            other => panic!("get: {other:?}"),
        },
        other => panic!("get: {other:?}"),
    }
    let check = on_store(&vfs, "check", |db| db.check().map(drop));
    assert_names_page("check", &check, past_end.page);
}
