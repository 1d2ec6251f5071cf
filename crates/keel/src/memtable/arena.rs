//! The memtable's memory: chunks from the allocator, faulted in ahead of
//! need and kept for the next memtable ([`ChunkPool`]), and the bump
//! allocator a memtable's writer takes its pieces from ([`Arena`]). See
//! the memtable's module doc for why by hand.

use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::{BIG_BYTES, CHUNK_BYTES, TOUCH_STEP};

/// A block of memory from the allocator, 4 KiB-aligned.
struct Chunk {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a chunk owns its memory; nothing else points into it until an
// arena hands out pieces, which are then owned by the arena's memtable.
unsafe impl Send for Chunk {}

impl Chunk {
    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len, 4096).expect("a chunk's size fits a layout")
    }

    fn new(len: usize) -> Chunk {
        let layout = Chunk::layout(len);
        // SAFETY: the layout's size is not zero (every caller asks for at
        // least a page).
        let ptr = unsafe { alloc::alloc(layout) };
        let ptr = NonNull::new(ptr).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        Chunk { ptr, len }
    }

    /// Write one byte per 4 KiB page, so that the kernel has backed every
    /// page before a writer needs it; call `pause` after every
    /// [`TOUCH_STEP`] bytes.
    fn touch(&mut self, pause: &dyn Fn()) {
        let mut at = 0;
        while at < self.len {
            // SAFETY: `at` is inside the chunk, which this owns.
            unsafe { self.ptr.as_ptr().add(at).write_volatile(0) };
            at += 4096;
            if at % TOUCH_STEP == 0 {
                pause();
            }
        }
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        // SAFETY: allocated in `Chunk::new` with this layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), Chunk::layout(self.len)) };
    }
}

/// Chunks kept for the next memtable: a memtable's memory goes back here
/// when it drops (up to a bound), and [`ChunkPool::prepare`] can fault new
/// chunks in ahead of need, on a thread that is not committing.
pub struct ChunkPool {
    free: Mutex<Vec<Chunk>>,
    keep: usize,
    /// Free chunks (kept beside the list, for a check without the lock).
    free_count: AtomicUsize,
    /// A [`ChunkPool::prepare`] was asked for and has not finished.
    preparing: AtomicBool,
}

impl std::fmt::Debug for ChunkPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkPool")
            .field("free_bytes", &self.free_bytes())
            .field("keep", &self.keep)
            .finish()
    }
}

impl ChunkPool {
    /// A pool that keeps at most `keep_bytes` of free chunks.
    pub fn new(keep_bytes: u64) -> Arc<ChunkPool> {
        Arc::new(ChunkPool {
            free: Mutex::new(Vec::new()),
            keep: usize::try_from(keep_bytes / CHUNK_BYTES as u64).unwrap_or(usize::MAX),
            free_count: AtomicUsize::new(0),
            preparing: AtomicBool::new(false),
        })
    }

    fn free(&self) -> MutexGuard<'_, Vec<Chunk>> {
        self.free.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Bytes of free chunks held.
    pub fn free_bytes(&self) -> u64 {
        (self.free_count.load(Ordering::Relaxed) * CHUNK_BYTES) as u64
    }

    /// Whether fewer than `bytes` are free and no [`ChunkPool::prepare`]
    /// is under way; if so, the caller must run one (the pool notes that
    /// it is under way).
    pub fn wants(&self, bytes: u64) -> bool {
        self.free_bytes() < bytes.min((self.keep * CHUNK_BYTES) as u64)
            && !self.preparing.swap(true, Ordering::AcqRel)
    }

    /// Allocate and fault in chunks until `bytes` (at most what the pool
    /// keeps) are free, calling `pause` after every [`TOUCH_STEP`] bytes
    /// faulted in: a chance for the thread to run more urgent work first
    /// (faulting in a chunk takes ~1 ms here). Returns the bytes added.
    pub fn prepare(&self, bytes: u64, pause: &dyn Fn()) -> u64 {
        let want = usize::try_from(bytes.div_ceil(CHUNK_BYTES as u64))
            .unwrap_or(usize::MAX)
            .min(self.keep);
        let mut added = 0;
        while self.free_count.load(Ordering::Relaxed) < want {
            // Faulted in without the lock: `take` stays quick meanwhile.
            let mut c = Chunk::new(CHUNK_BYTES);
            c.touch(pause);
            let mut free = self.free();
            free.push(c);
            self.free_count.store(free.len(), Ordering::Relaxed);
            added += CHUNK_BYTES as u64;
        }
        self.preparing.store(false, Ordering::Release);
        added
    }

    fn take(&self) -> Chunk {
        let mut free = self.free();
        let c = free.pop();
        self.free_count.store(free.len(), Ordering::Relaxed);
        drop(free);
        c.unwrap_or_else(|| Chunk::new(CHUNK_BYTES))
    }

    fn give(&self, c: Chunk) {
        let mut free = self.free();
        if c.len == CHUNK_BYTES && free.len() < self.keep {
            free.push(c);
            self.free_count.store(free.len(), Ordering::Relaxed);
        }
    }
}

/// A memtable's memory: pieces bump-allocated from chunks, all freed when
/// the arena drops. Only the memtable's one writer allocates.
pub(super) struct Arena {
    /// Full chunks, and the current one last.
    chunks: Vec<Chunk>,
    /// Bytes used in the current chunk.
    used: usize,
    /// Chunks of one large allocation each.
    big: Vec<Chunk>,
    pool: Option<Arc<ChunkPool>>,
}

impl Arena {
    pub(super) fn new(pool: Option<Arc<ChunkPool>>) -> Arena {
        Arena {
            chunks: Vec::new(),
            used: 0,
            big: Vec::new(),
            pool,
        }
    }

    /// `len` bytes, 8-aligned, that live as long as the arena.
    pub(super) fn alloc(&mut self, len: usize) -> NonNull<u8> {
        let len = len.next_multiple_of(8).max(8);
        if len > BIG_BYTES {
            let c = Chunk::new(len.next_multiple_of(4096));
            let p = c.ptr;
            self.big.push(c);
            return p;
        }
        if self.chunks.is_empty() || self.used + len > CHUNK_BYTES {
            let c = match &self.pool {
                Some(pool) => pool.take(),
                None => Chunk::new(CHUNK_BYTES),
            };
            self.chunks.push(c);
            self.used = 0;
        }
        let c = self.chunks.last().expect("a current chunk");
        // SAFETY: `used + len <= CHUNK_BYTES`: inside the chunk.
        let p = unsafe { c.ptr.add(self.used) };
        self.used += len;
        p
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            for c in self.chunks.drain(..) {
                pool.give(c);
            }
        }
    }
}
