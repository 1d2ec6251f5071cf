//! Where the tree reads clean pages from: the [`PageSource`] trait, and
//! [`PageCache`], which reads pages through a read-only memory map of a
//! [`VfsFile`] (or with `pread`) and keeps a bounded number of decoded
//! nodes.
//!
//! The trait is deliberately narrow: a node by location, an overflow value
//! by its first page, and a key looked up in a leaf, which a source that
//! maps the file answers from the mapped page without decoding it.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_epoch::{self as epoch, Guard};

use super::bound::Visited;
use super::leaf::OverflowValue;
use super::node::{lock, Node};
use super::page::{decode_node, decode_overflow, search_leaf, FoundCell, LeafSearch};
use super::pagetable::{PageTable, MAX_PAGES};
use super::{BtreeError, Location, PageNo, PageSize};
use crate::hint::prefetch;
use crate::io::{AlignedBuf, GrowingMap, VfsFile};
use crate::stripe::Striped;

/// A value read from its overflow chain.
#[derive(Debug, Clone)]
pub struct OverflowData {
    /// The value.
    pub bytes: Arc<[u8]>,
    /// Every page of the chain, first to last.
    pub pages: Vec<PageNo>,
}

/// Reads clean pages for the tree.
pub trait PageSource: Send + Sync {
    /// The node at `loc`, validated: checksum (its own and the one its
    /// referrer recorded), page number, type, layout.
    fn load(&self, loc: Location) -> Result<Arc<Node>, BtreeError>;

    /// The node at `loc` as [`PageSource::load`] checks it, for a reader
    /// pinned by `guard`: a source that caches nodes lends its own for as
    /// long as the pin lasts, touching no reference count.
    fn load_pinned<'g>(
        &'g self,
        loc: Location,
        guard: &'g Guard,
    ) -> Result<NodeRef<'g>, BtreeError> {
        let _ = guard;
        self.load(loc).map(NodeRef::Owned)
    }

    /// The node at `loc`, checked as [`PageSource::load`] checks it, for
    /// a writer that will replace it (a checkpoint's fold): a source that
    /// caches nodes gives its own when it holds it, else reads the page
    /// without caching it and without its map.
    fn load_to_change(&self, loc: Location) -> Result<Arc<Node>, BtreeError> {
        self.load(loc)
    }

    /// The value of `len` bytes stored in the chain starting at `first`.
    fn load_overflow(&self, first: Location, len: u64) -> Result<OverflowData, BtreeError>;

    /// Look `key` up in the node at `loc`, which its parent says is a
    /// leaf, for a reader pinned by `guard`: the node (as
    /// [`PageSource::load_pinned`] gives it; the caller checks its level
    /// and searches it), or the answer read in place from the page,
    /// checked as `load` checks it.
    fn search_leaf<'g>(
        &'g self,
        loc: Location,
        key: &[u8],
        guard: &'g Guard,
    ) -> Result<LeafLookup<'g>, BtreeError> {
        let _ = key;
        self.load_pinned(loc, guard).map(LeafLookup::Node)
    }
}

/// What [`PageSource::search_leaf`] found.
#[derive(Debug)]
pub enum LeafLookup<'g> {
    /// The node, to search.
    Node(NodeRef<'g>),
    /// The key's entry, copied out of the page, or `None` if the leaf
    /// does not hold the key.
    Searched(Option<InPlace>),
}

/// An entry copied out of a leaf page that was searched in place.
#[derive(Debug)]
pub struct InPlace {
    /// The key, then (for an inline value) the value.
    pub(crate) bytes: Arc<[u8]>,
    pub(crate) key_len: usize,
    /// An overflow value's reference (its bytes are still on disk).
    pub(crate) overflow: Option<OverflowValue>,
}

impl InPlace {
    fn new(cell: FoundCell<'_>) -> InPlace {
        match cell {
            FoundCell::Inline(key, value) => InPlace {
                // One allocation: the iterator knows its exact length.
                bytes: key.iter().chain(value).copied().collect(),
                key_len: key.len(),
                overflow: None,
            },
            FoundCell::Overflow(key, value) => InPlace {
                bytes: key.into(),
                key_len: key.len(),
                overflow: Some(value),
            },
        }
    }
}

/// A source for trees that live only in memory: any load is an error.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoPageSource;

impl PageSource for NoPageSource {
    fn load(&self, loc: Location) -> Result<Arc<Node>, BtreeError> {
        Err(BtreeError::NotLoaded { page: loc.page })
    }

    fn load_overflow(&self, first: Location, _len: u64) -> Result<OverflowData, BtreeError> {
        Err(BtreeError::NotLoaded { page: first.page })
    }
}

/// Walk an overflow chain of `len` bytes from `first`, reading each page
/// with `read` (which fills a page-sized buffer). Every page but the last
/// must be full, so the chain's length follows from `len` and a chain cut
/// short or running on is caught. A chain that comes back to a page it
/// holds is caught there, before that page is read again: a length from a
/// damaged page would otherwise have the walk read (and keep) up to
/// 4 GiB of the same pages.
pub fn read_overflow_chain(
    page_size: PageSize,
    first: Location,
    len: u64,
    mut read: impl FnMut(PageNo, &mut [u8]) -> Result<(), BtreeError>,
) -> Result<OverflowData, BtreeError> {
    if len > super::MAX_VALUE_BYTES {
        return Err(BtreeError::Corrupt {
            page: first.page,
            reason: "an overflow value longer than the value limit",
        });
    }
    let count = page_size.overflow_pages(len);
    let full = page_size.overflow_data_bytes();
    // The length comes from a page: grow as pages prove it rather than
    // allocate up to 4 GiB on its word.
    let mut bytes = Vec::with_capacity((len as usize).min(64 * full));
    let mut pages = Vec::with_capacity((count as usize).min(64));
    let mut buf = AlignedBuf::new(page_size.bytes(), page_size.bytes().min(4096));
    let mut visited = Visited::default();
    let mut next = Some(first);
    for i in 0..count {
        let loc = next.ok_or(BtreeError::Corrupt {
            page: pages.last().copied().unwrap_or(first.page),
            reason: "an overflow chain shorter than its value",
        })?;
        visited.enter(loc.page, "an overflow chain that comes back to this page")?;
        read(loc.page, &mut buf)?;
        let page = decode_overflow(&buf, page_size, loc)?;
        let want = if i + 1 == count {
            len as usize - full * (count as usize - 1)
        } else {
            full
        };
        if page.data.len() != want {
            return Err(BtreeError::Corrupt {
                page: loc.page,
                reason: "an overflow page holding the wrong number of bytes",
            });
        }
        bytes.extend_from_slice(page.data);
        pages.push(loc.page);
        next = page.next;
    }
    if next.is_some() {
        return Err(BtreeError::Corrupt {
            page: first.page,
            reason: "an overflow chain longer than its value",
        });
    }
    Ok(OverflowData {
        bytes: bytes.into(),
        pages,
    })
}

/// Hits, misses and evictions of a [`PageCache`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Page loads the cache answered without reading the file.
    pub hits: u64,
    /// Page loads that read the file.
    pub misses: u64,
    /// Nodes dropped from the cache to stay within its budget.
    pub evictions: u64,
    /// Bytes charged for the nodes held now.
    pub cached_bytes: u64,
    /// Of the misses, leaf lookups answered from the mapped page without
    /// decoding it (and so not cached).
    pub searched_in_place: u64,
    /// Times the file was mapped anew as it grew.
    pub remaps: u64,
}

/// A node borrowed for `'g` from an `Arc` that keeps it at least that
/// long: the page cache's, under the reader's epoch pin, or the root's
/// holder. It is turned back into an `Arc` (a count, no copy) when a
/// caller must keep it past `'g`.
#[derive(Clone, Copy, Debug)]
pub struct Lent<'g>(&'g Node);

impl<'g> Lent<'g> {
    /// Borrow the node `arc` holds.
    pub fn of(arc: &'g Arc<Node>) -> Lent<'g> {
        Lent(arc)
    }

    /// Borrow `node`, which the page table holds in an `Arc`.
    ///
    /// # Safety
    /// `node` is the contents of an `Arc<Node>` of which a strong
    /// reference lives at least as long as `'g`.
    #[allow(unsafe_code)]
    pub(crate) unsafe fn in_arc(node: &'g Node) -> Lent<'g> {
        Lent(node)
    }

    /// A reference of its own to the node.
    pub fn to_arc(self) -> Arc<Node> {
        let p: *const Node = self.0;
        // SAFETY: a `Lent` is made only from a node inside an `Arc` with
        // a strong reference alive for `'g` (`Lent::of`, `Lent::in_arc`),
        // so the count is at least one here; taking one more and owning
        // it with `from_raw` is `Arc::clone` of that reference.
        #[allow(unsafe_code)]
        unsafe {
            Arc::increment_strong_count(p);
            Arc::from_raw(p)
        }
    }
}

impl std::ops::Deref for Lent<'_> {
    type Target = Node;
    fn deref(&self) -> &Node {
        self.0
    }
}

/// A node a reader reached while pinned: borrowed from the cache (alive
/// while the pin lasts, with no reference count touched) or its own
/// reference (read from the file, or from a source that does not pin).
#[derive(Debug)]
pub enum NodeRef<'g> {
    /// Borrowed from the cache under the reader's pin (or from the root).
    Borrowed(Lent<'g>),
    /// Held by this reference.
    Owned(Arc<Node>),
}

impl NodeRef<'_> {
    /// A reference of its own to the node.
    pub fn to_arc(&self) -> Arc<Node> {
        match self {
            NodeRef::Borrowed(n) => n.to_arc(),
            NodeRef::Owned(n) => Arc::clone(n),
        }
    }
}

impl std::ops::Deref for NodeRef<'_> {
    type Target = Node;
    fn deref(&self) -> &Node {
        match self {
            NodeRef::Borrowed(n) => n.0,
            NodeRef::Owned(n) => n,
        }
    }
}

const HITS: usize = 0;
const MISSES: usize = 1;
const EVICTIONS: usize = 2;
const IN_PLACE: usize = 3;

/// Reads pages from the data file and keeps decoded nodes up to a byte
/// budget, evicting with CLOCK (second chance) in each of a few shards.
///
/// Pages are read through a read-only map of the file when
/// [`PageCache::with_mapped_reads`] made one, else with `pread`; either
/// way every page is verified (checksum, the referrer's checksum, page
/// number, type, layout) each time it is read from the file. A leaf
/// lookup that misses while the cache is full searches the mapped page in
/// place and copies out only the entry found: the OS page cache is the
/// cache of leaves then, and decoding a leaf only to evict another would
/// cost more than the lookup (branches, few and hot, stay decoded here).
/// Such lookups still let leaves in, sparingly (see `ADMIT_EVERY`), so
/// that the cache follows readers when what they read moves.
///
/// A hit takes no lock and writes nothing another thread writes: the
/// index is a radix table of page numbers (`pagetable.rs`) read under an
/// epoch pin, the CLOCK bit is set only when clear, and the counters are
/// per thread. The shards' locks order the changes (an insert after a
/// miss, an eviction, an invalidation).
#[derive(Debug)]
pub struct PageCache {
    file: Arc<dyn VfsFile>,
    page_size: PageSize,
    budget_bytes: usize,
    max_value_bytes: u64,
    table: PageTable,
    shards: Box<[Mutex<Shard>]>,
    /// Each shard's `bytes`, readable without its lock.
    shard_bytes: Box<[AtomicUsize]>,
    counts: Striped<4>,
    map: Option<GrowingMap>,
}

/// Shards spread the lock taken on a miss; each needs room for many
/// nodes, or eviction degenerates to "keep the last one".
const MAX_SHARDS: usize = 16;
const MIN_NODES_PER_SHARD: usize = 32;

/// One in this many in-place leaf lookups (counted per thread) looks
/// at the node under its shard's CLOCK hand. If no reader has used that
/// node since the hand last passed it, the lookup loads its leaf into
/// the cache instead, evicting that node; else it clears the node's mark
/// and moves the hand on, as an eviction would.
///
/// Without this a full cache never takes a leaf from a read again: it
/// keeps the leaves read first, however cold, and a set of hot leaves
/// that came later is searched in place (its checksum checked) on every
/// lookup for as long as the store is open. On a tree of 10M keys read
/// at random until the cache filled, then only the keys of one
/// twentieth of the tree, that read 1.8x slower than the same hot set
/// cached (docs/store-performance.md, "A cache that follows its
/// readers").
///
/// Why sparingly: a try moves the hand by at most one node, so the hand
/// passes each cached leaf once per this many in-place lookups per
/// cached leaf. A leaf still in use is read again within that time and
/// found marked; a hand that swept faster would find leaves that are in
/// use but not yet read again, and trade them for others at a decode
/// each. Measured on scattered reads over a tree of 10M keys: ~2,500
/// evictions per 3 s, ~0.6 % of the time; a try costs one shard lock.
pub(super) const ADMIT_EVERY: u32 = 16;

thread_local! {
    /// In-place leaf lookups by this thread, modulo [`ADMIT_EVERY`].
    static IN_PLACE_TICK: Cell<u32> = const { Cell::new(0) };
}

/// Whether this thread's in-place lookup is one that tries to admit its
/// leaf (a thread-local count: nothing shared is written).
fn admission_due() -> bool {
    IN_PLACE_TICK.with(|t| {
        let n = (t.get() + 1) % ADMIT_EVERY;
        t.set(n);
        n == 0
    })
}

impl PageCache {
    /// A cache over `file` holding decoded nodes worth at most
    /// `budget_bytes` (as charged by [`Node::heap_bytes`]).
    pub fn new(file: Arc<dyn VfsFile>, page_size: PageSize, budget_bytes: usize) -> PageCache {
        let per_node = 2 * page_size.bytes();
        let shards = (budget_bytes / (per_node * MIN_NODES_PER_SHARD)).clamp(1, MAX_SHARDS);
        let shard_budget = budget_bytes / shards;
        PageCache {
            file,
            page_size,
            budget_bytes,
            max_value_bytes: super::MAX_VALUE_BYTES,
            table: PageTable::default(),
            shards: (0..shards)
                .map(|_| Mutex::new(Shard::new(shard_budget)))
                .collect(),
            shard_bytes: (0..shards).map(|_| AtomicUsize::new(0)).collect(),
            counts: Striped::default(),
            map: None,
        }
    }

    /// The cache, reading pages through a read-only map of its file when
    /// `yes` and the file layer maps files (else with `pread`). The file
    /// must only grow while the cache lives: nothing may truncate it.
    pub fn with_mapped_reads(mut self, yes: bool) -> Result<PageCache, BtreeError> {
        self.map = if yes {
            GrowingMap::new(Arc::clone(&self.file))?
        } else {
            None
        };
        Ok(self)
    }

    /// Whether pages are read through a map.
    pub fn reads_mapped(&self) -> bool {
        self.map.is_some()
    }

    /// The page size the cache reads.
    pub fn page_size(&self) -> PageSize {
        self.page_size
    }

    /// The most bytes of nodes the cache holds.
    pub fn budget_bytes(&self) -> usize {
        self.budget_bytes
    }

    /// The cache, refusing as `Corrupt` any overflow value longer than
    /// `max` bytes (a store's value limit: it never wrote a longer one)
    /// before it reads a page of it. Without this, the format's limit,
    /// [`super::MAX_VALUE_BYTES`].
    pub fn with_max_value_bytes(mut self, max: u64) -> PageCache {
        self.max_value_bytes = max.min(super::MAX_VALUE_BYTES);
        self
    }

    /// The longest overflow value the cache reads.
    pub fn max_value_bytes(&self) -> u64 {
        self.max_value_bytes
    }

    fn shard_index(&self, page: PageNo) -> usize {
        // Fibonacci hashing: consecutive pages land in different shards.
        let h = page.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
        (h % self.shards.len() as u64) as usize
    }

    /// Change page `page`'s shard under its lock, and publish its size.
    fn with_shard<R>(&self, page: PageNo, f: impl FnOnce(&mut Shard) -> R) -> R {
        let i = self.shard_index(page);
        let mut shard = lock(&self.shards[i]);
        let r = f(&mut shard);
        self.shard_bytes[i].store(shard.bytes, Ordering::Relaxed);
        r
    }

    /// Whether page `page`'s shard could take a decoded page without
    /// evicting one (read without its lock: a hint).
    fn has_room(&self, page: PageNo) -> bool {
        let i = self.shard_index(page);
        let budget = self.budget_bytes / self.shards.len();
        self.shard_bytes[i].load(Ordering::Relaxed) + 2 * self.page_size.bytes() <= budget
    }

    /// Whether the CLOCK hand of `page`'s shard rests on a node unused
    /// since the hand last passed it (see [`ADMIT_EVERY`]); if the node
    /// there is marked, the mark is cleared and the hand moves on.
    fn hand_finds_cold(&self, page: PageNo) -> bool {
        let guard = epoch::pin();
        self.with_shard(page, |s| s.hand_finds_cold(&self.table, &guard))
    }

    /// Put a node a checkpoint just wrote (and synced) at `loc`.
    pub fn insert(&self, loc: Location, node: Arc<Node>) {
        debug_assert_eq!(node.location(), Some(loc));
        let guard = epoch::pin();
        let evicted = self.with_shard(loc.page, |s| s.insert(&self.table, loc, node, &guard));
        self.counts.add(EVICTIONS, evicted);
    }

    /// Forget page `page`: its number is about to be reused.
    pub fn invalidate(&self, page: PageNo) {
        let guard = epoch::pin();
        self.with_shard(page, |s| s.remove(&self.table, page, &guard));
    }

    /// What the cache holds and has done.
    pub fn stats(&self) -> CacheStats {
        let cached: usize = self.shards.iter().map(|s| lock(s).bytes).sum();
        let [hits, misses, evictions, in_place] = self.counts.sum();
        CacheStats {
            hits,
            misses,
            evictions,
            cached_bytes: cached as u64,
            searched_in_place: in_place,
            remaps: self.map.as_ref().map_or(0, GrowingMap::remaps),
        }
    }

    fn page_offset(&self, page: PageNo) -> Result<u64, BtreeError> {
        page.checked_mul(self.page_size.bytes() as u64)
            .ok_or(BtreeError::Corrupt {
                page,
                reason: "a page number past any file",
            })
    }

    fn read_page(&self, page: PageNo, buf: &mut [u8]) -> Result<(), BtreeError> {
        let offset = self.page_offset(page)?;
        if let Some(map) = &self.map {
            let guard = epoch::pin();
            if let Some(bytes) = map.read(offset, buf.len(), &guard)? {
                buf.copy_from_slice(&bytes);
                return Ok(());
            }
        }
        self.file.read_exact_at(buf, offset)?;
        Ok(())
    }

    /// The cached node of `loc` (that version of the page), borrowed for
    /// as long as `guard` pins.
    fn hit<'g>(&'g self, loc: Location, guard: &'g Guard) -> Option<Lent<'g>> {
        let node = self.table.get(loc.page, guard)?;
        if node.location() != Some(loc) {
            return None;
        }
        node.touch();
        self.counts.add(HITS, 1);
        // SAFETY: the table holds its nodes in `Arc`s and drops a
        // reference only through the epoch, which `guard` pins for `'g`.
        #[allow(unsafe_code)]
        Some(unsafe { Lent::in_arc(node) })
    }

    /// Read and decode the node at `loc` and cache it: `marked` (as a
    /// point lookup's leaf is, see [`Shard::hand_finds_cold`]) or not (a
    /// scan's, or a branch's, which its many readers mark soon enough): a
    /// node a scan read once is among the first the hand evicts, so that a
    /// scan does not push out what readers use.
    fn miss(&self, loc: Location, marked: bool) -> Result<Arc<Node>, BtreeError> {
        self.counts.add(MISSES, 1);
        let node = match &self.map {
            Some(map) => {
                let guard = epoch::pin();
                match map.read(self.page_offset(loc.page)?, self.page_size.bytes(), &guard)? {
                    Some(bytes) => decode_node(&bytes, self.page_size, loc)?,
                    None => self.pread_node(loc)?,
                }
            }
            None => self.pread_node(loc)?,
        };
        let node = Arc::new(node);
        if marked {
            node.touch();
        }
        self.insert(loc, Arc::clone(&node));
        Ok(node)
    }

    fn pread_node(&self, loc: Location) -> Result<Node, BtreeError> {
        // Direct-I/O descriptors need an aligned buffer; page sizes are
        // multiples of any logical block size up to 4096.
        let mut buf = AlignedBuf::new(self.page_size.bytes(), self.page_size.bytes().min(4096));
        self.file
            .read_exact_at(&mut buf, self.page_offset(loc.page)?)?;
        Ok(decode_node(&buf, self.page_size, loc)?)
    }

    /// Search the leaf at `loc` in the mapped page, if the map shows it
    /// (`None`: load it instead).
    fn search_mapped<'g>(
        &'g self,
        map: &'g GrowingMap,
        loc: Location,
        key: &[u8],
        guard: &'g Guard,
    ) -> Result<Option<LeafLookup<'g>>, BtreeError> {
        let offset = self.page_offset(loc.page)?;
        let Some(bytes) = map.read(offset, self.page_size.bytes(), guard)? else {
            return Ok(None);
        };
        prefetch_page(&bytes);
        self.counts.add(MISSES, 1);
        let found = match search_leaf(&bytes, self.page_size, loc, key)? {
            LeafSearch::Found(cell) => Some(InPlace::new(cell)),
            LeafSearch::Absent => None,
            LeafSearch::NotALeaf => {
                // Not searched: decoded, for the caller to say what is
                // wrong with it (as a load would).
                let node = decode_node(&bytes, self.page_size, loc)?;
                return Ok(Some(LeafLookup::Node(NodeRef::Owned(Arc::new(node)))));
            }
        };
        self.counts.add(IN_PLACE, 1);
        Ok(Some(LeafLookup::Searched(found)))
    }
}

impl PageSource for PageCache {
    fn load(&self, loc: Location) -> Result<Arc<Node>, BtreeError> {
        let guard = epoch::pin();
        if let Some(node) = self.hit(loc, &guard) {
            return Ok(node.to_arc());
        }
        drop(guard);
        self.miss(loc, false)
    }

    /// A miss is read with `pread` and not cached: the fold makes a new
    /// version of the node, so the old one would only take the place of
    /// pages readers use (a fold of scattered keys reads nearly every
    /// leaf, many times the cache), and reading it through the map would
    /// leave the whole tree in the process's resident pages after every
    /// checkpoint.
    fn load_to_change(&self, loc: Location) -> Result<Arc<Node>, BtreeError> {
        let guard = epoch::pin();
        if let Some(node) = self.hit(loc, &guard) {
            return Ok(node.to_arc());
        }
        drop(guard);
        self.counts.add(MISSES, 1);
        Ok(Arc::new(self.pread_node(loc)?))
    }

    fn load_pinned<'g>(
        &'g self,
        loc: Location,
        guard: &'g Guard,
    ) -> Result<NodeRef<'g>, BtreeError> {
        match self.hit(loc, guard) {
            Some(node) => Ok(NodeRef::Borrowed(node)),
            None => self.miss(loc, false).map(NodeRef::Owned),
        }
    }

    fn load_overflow(&self, first: Location, len: u64) -> Result<OverflowData, BtreeError> {
        if len > self.max_value_bytes {
            return Err(BtreeError::Corrupt {
                page: first.page,
                reason: "an overflow value longer than the store's value limit",
            });
        }
        read_overflow_chain(self.page_size, first, len, |page, buf| {
            self.read_page(page, buf)
        })
    }

    fn search_leaf<'g>(
        &'g self,
        loc: Location,
        key: &[u8],
        guard: &'g Guard,
    ) -> Result<LeafLookup<'g>, BtreeError> {
        if let Some(node) = self.hit(loc, guard) {
            return Ok(LeafLookup::Node(NodeRef::Borrowed(node)));
        }
        if let Some(map) = self.map.as_ref().filter(|_| !self.has_room(loc.page)) {
            let admit = admission_due() && self.hand_finds_cold(loc.page);
            if !admit {
                if let Some(found) = self.search_mapped(map, loc, key, guard)? {
                    return Ok(found);
                }
            }
        }
        // Marked: the lookup used it, so the hand passes it once before it
        // can be a victim, like a node a hit marked (without, a try at
        // admission soon after the cache filled would trade it away).
        self.miss(loc, true)
            .map(|n| LeafLookup::Node(NodeRef::Owned(n)))
    }
}

/// The bookkeeping of one cached page (its node is in the table).
#[derive(Debug)]
struct Slot {
    page: PageNo,
    charge: usize,
}

#[derive(Debug)]
struct Shard {
    budget: usize,
    bytes: usize,
    index: HashMap<PageNo, usize>,
    slots: Vec<Slot>,
    hand: usize,
}

impl Shard {
    fn new(budget: usize) -> Shard {
        Shard {
            budget,
            bytes: 0,
            index: HashMap::new(),
            slots: Vec::new(),
            hand: 0,
        }
    }

    /// Insert (or replace) a node; returns how many were evicted.
    fn insert(&mut self, table: &PageTable, loc: Location, node: Arc<Node>, guard: &Guard) -> u64 {
        let charge = node.heap_bytes();
        self.remove(table, loc.page, guard);
        if charge > self.budget || loc.page >= MAX_PAGES {
            return 0;
        }
        let mut evicted = 0;
        while self.bytes + charge > self.budget {
            self.evict_one(table, guard);
            evicted += 1;
        }
        node.note_cached();
        let stored = table.set(loc.page, Some(node), guard);
        debug_assert!(stored, "a page below MAX_PAGES");
        self.index.insert(loc.page, self.slots.len());
        self.slots.push(Slot {
            page: loc.page,
            charge,
        });
        self.bytes += charge;
        evicted
    }

    /// Whether the node under the hand is unmarked (the next victim, the
    /// hand left on it); a marked one is cleared and passed. One step of
    /// [`Shard::evict_one`]'s sweep.
    fn hand_finds_cold(&mut self, table: &PageTable, guard: &Guard) -> bool {
        if self.slots.is_empty() {
            return false;
        }
        if self.hand >= self.slots.len() {
            self.hand = 0;
        }
        let page = self.slots[self.hand].page;
        let referenced = table.get(page, guard).is_some_and(Node::take_referenced);
        if referenced {
            self.hand += 1;
        }
        !referenced
    }

    /// Advance the hand past referenced slots (clearing their bit) and
    /// evict the first unreferenced one. The slot moved into its place is
    /// the newest (the last); the hand steps past it, so it gets a whole
    /// turn of the clock like every other, rather than being the next
    /// victim.
    fn evict_one(&mut self, table: &PageTable, guard: &Guard) {
        assert!(!self.slots.is_empty(), "evicting from an empty shard");
        while !self.hand_finds_cold(table, guard) {}
        let page = self.slots[self.hand].page;
        self.hand += 1;
        self.remove(table, page, guard);
    }

    fn remove(&mut self, table: &PageTable, page: PageNo, guard: &Guard) {
        let Some(i) = self.index.remove(&page) else {
            return;
        };
        table.set(page, None, guard);
        let slot = self.slots.swap_remove(i);
        self.bytes -= slot.charge;
        if let Some(moved) = self.slots.get(i) {
            self.index.insert(moved.page, i);
        }
    }
}

/// Ask for every line of `page` at once: its check reads all of them
/// (the checksum), and requesting them together overlaps their misses
/// instead of leaving the CPU's prefetcher to find the stream.
#[inline]
fn prefetch_page(page: &[u8]) {
    for line in page.chunks(64) {
        prefetch(line.as_ptr());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btree::leaf::{Leaf, ValueRef};
    use crate::btree::node::Body;
    use crate::btree::page::{encode_node, encode_overflow, page_crc};
    use crate::btree::PageError;
    use crate::io::{OpenMode, OpenOptions, SimVfs, Vfs};
    use std::path::Path;

    const PS: PageSize = PageSize::DEFAULT;

    fn file() -> Arc<dyn VfsFile> {
        let vfs = SimVfs::new(1);
        vfs.create_dir_durable(Path::new("/db")).unwrap();
        vfs.open(
            Path::new("/db/data"),
            OpenOptions::new(OpenMode::Buffered).create(true),
        )
        .unwrap()
    }

    fn leaf_page(page: PageNo, key: &[u8]) -> (Location, Vec<u8>) {
        let mut leaf = Leaf::default();
        leaf.push(key, ValueRef::Inline(&[9u8; 1000]));
        let bytes = encode_node(&Node::new(Body::Leaf(leaf)), page, PS);
        (
            Location {
                page,
                crc: page_crc(&bytes),
            },
            bytes,
        )
    }

    fn write(f: &dyn VfsFile, page: PageNo, bytes: &[u8]) {
        f.write_at(bytes, page * PS.bytes() as u64).unwrap();
    }

    #[test]
    fn loads_validates_and_caches() {
        let f = file();
        let (loc, bytes) = leaf_page(3, b"k");
        write(&*f, 3, &bytes);
        let cache = PageCache::new(Arc::clone(&f), PS, 1 << 20);
        let a = cache.load(loc).unwrap();
        let b = cache.load(loc).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.location(), Some(loc));
        let s = cache.stats();
        assert_eq!((s.hits, s.misses), (1, 1));
    }

    /// A lost write: the parent points to version 2 of a page, but the
    /// disk still holds version 1 at that place, intact. Only the
    /// checksum in the parent can tell.
    #[test]
    fn an_older_valid_page_in_place_is_caught_by_the_parents_checksum() {
        let f = file();
        let (v1, old) = leaf_page(3, b"old");
        let (v2, _new) = leaf_page(3, b"new");
        assert_ne!(v1.crc, v2.crc);
        write(&*f, 3, &old);
        let cache = PageCache::new(Arc::clone(&f), PS, 1 << 20);
        match cache.load(v2) {
            Err(BtreeError::Page(PageError::UnexpectedChecksum {
                page: 3,
                expected,
                found,
            })) => assert_eq!((expected, found), (v2.crc, v1.crc)),
            other => panic!("{other:?}"),
        }
        // A valid page that sits at another page's place.
        write(&*f, 4, &old);
        assert!(matches!(
            cache.load(Location {
                page: 4,
                crc: v1.crc
            }),
            Err(BtreeError::Page(PageError::WrongPageNo {
                expected: 4,
                found: 3
            }))
        ));
    }

    #[test]
    fn a_cached_older_version_is_not_returned() {
        let f = file();
        let (v1, old) = leaf_page(3, b"old");
        let (v2, new) = leaf_page(3, b"new");
        write(&*f, 3, &old);
        let cache = PageCache::new(Arc::clone(&f), PS, 1 << 20);
        cache.load(v1).unwrap();
        write(&*f, 3, &new);
        let n = cache.load(v2).unwrap();
        assert_eq!(n.as_leaf().unwrap().key(0), b"new");
        cache.invalidate(3);
        assert_eq!(cache.stats().cached_bytes, 0);
    }

    #[test]
    fn stays_within_its_byte_budget() {
        let f = file();
        let mut locs = Vec::new();
        for page in 2..202 {
            let (loc, bytes) = leaf_page(page, &page.to_be_bytes());
            write(&*f, page, &bytes);
            locs.push(loc);
        }
        let budget = 64 * 1024;
        let cache = PageCache::new(Arc::clone(&f), PS, budget);
        for round in 0..3 {
            for (i, loc) in locs.iter().enumerate() {
                let n = cache.load(*loc).unwrap();
                assert_eq!(n.location(), Some(*loc));
                // A hot page stays cached thanks to its CLOCK bit.
                cache.load(locs[0]).unwrap();
                let held = cache.stats().cached_bytes as usize;
                assert!(held <= budget, "round {round} page {i}: {held} bytes");
            }
        }
        let s = cache.stats();
        assert!(
            s.evictions > 0 && s.cached_bytes > (budget / 2) as u64,
            "{s:?}"
        );
        assert!(s.hits >= 3 * 200 - 3, "the hot page was evicted: {s:?}");
    }

    /// Readers borrowing nodes under their pins while other threads'
    /// misses evict them, and pages are invalidated and written anew:
    /// every node a reader holds is the version it asked for, whole.
    #[test]
    fn readers_keep_what_they_borrow_while_others_evict() {
        let f = file();
        let mut locs = Vec::new();
        for page in 2..66 {
            let (loc, bytes) = leaf_page(page, &page.to_be_bytes());
            write(&*f, page, &bytes);
            locs.push(loc);
        }
        // Room for about 8 of the 64 pages: most loads evict.
        let cache = PageCache::new(Arc::clone(&f), PS, 8 * 2 * PS.bytes());
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (cache, locs) = (&cache, &locs);
                s.spawn(move || {
                    let mut x = t + 1;
                    for _ in 0..20_000 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let loc = locs[(x % locs.len() as u64) as usize];
                        let guard = epoch::pin();
                        let node = cache.load_pinned(loc, &guard).unwrap();
                        let page = &loc.page.to_be_bytes()[..];
                        assert_eq!(node.as_leaf().unwrap().key(0), page);
                        if x % 97 == 0 {
                            cache.invalidate(loc.page);
                        }
                        // Still whole after whatever the others did.
                        assert_eq!(node.as_leaf().unwrap().key(0), page);
                    }
                });
            }
        });
        let s = cache.stats();
        assert_eq!(s.hits + s.misses, 80_000, "{s:?}");
        assert!(s.evictions > 1000, "{s:?}");
        assert!(s.cached_bytes as usize <= 8 * 2 * PS.bytes(), "{s:?}");
    }

    #[test]
    fn overflow_chains_are_checked_for_length() {
        let f = file();
        let cap = PS.overflow_data_bytes();
        let data: Vec<u8> = (0..cap + 100).map(|i| i as u8).collect();
        let last = encode_overflow(6, None, &data[cap..], PS);
        let last_loc = Location {
            page: 6,
            crc: page_crc(&last),
        };
        let first = encode_overflow(5, Some(last_loc), &data[..cap], PS);
        let first_loc = Location {
            page: 5,
            crc: page_crc(&first),
        };
        write(&*f, 5, &first);
        write(&*f, 6, &last);
        let cache = PageCache::new(Arc::clone(&f), PS, 1 << 20);
        let got = cache.load_overflow(first_loc, data.len() as u64).unwrap();
        assert_eq!(&got.bytes[..], &data[..]);
        assert_eq!(got.pages, vec![5, 6]);
        for wrong_len in [cap as u64, cap as u64 + 99, 2 * cap as u64 + 1] {
            assert!(matches!(
                cache.load_overflow(first_loc, wrong_len),
                Err(BtreeError::Corrupt { .. })
            ));
        }
    }
}
