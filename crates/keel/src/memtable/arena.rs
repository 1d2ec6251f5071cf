//! The memtable's memory: chunks mapped from the kernel, faulted in ahead
//! of need and kept for the next memtable ([`ChunkPool`]), and the bump
//! allocator a memtable's writer takes its pieces from ([`Arena`]). See
//! the memtable's module doc for why by hand.

use std::alloc::{self, Layout};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rustix::mm;

use super::{BIG_BYTES, CHUNK_BYTES, TOUCH_STEP};

/// A block of memory mapped for the memtable, 4 KiB-aligned, in 4 KiB
/// pages.
///
/// Mapped here rather than taken from the allocator, so that it can be
/// kept out of transparent huge pages: a memtable's memory is written
/// once, front to back, and on the project's VM faulting it in cost
/// ~1.5–2 ms per MiB as 2 MiB pages against ~0.5–0.7 as 4 KiB pages
/// (docs/store-performance.md, "Fresh memory, measured in C"). The memtable's
/// searches go through its nodes, which the allocator places.
struct Chunk {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a chunk owns its memory; nothing else points into it until an
// arena hands out pieces, which are then owned by the arena's memtable.
unsafe impl Send for Chunk {}

/// Bytes of a 4 KiB page.
const PAGE: usize = 4096;

impl Chunk {
    /// `len` rounded up to whole pages: what is mapped.
    fn mapped(len: usize) -> usize {
        len.div_ceil(PAGE) * PAGE
    }

    fn new(len: usize) -> Chunk {
        // SAFETY: a fresh private anonymous mapping, at an address the
        // kernel chooses: nothing else uses that memory.
        let mapped = unsafe {
            mm::mmap_anonymous(
                ptr::null_mut(),
                Chunk::mapped(len),
                mm::ProtFlags::READ | mm::ProtFlags::WRITE,
                mm::MapFlags::PRIVATE,
            )
        };
        let ptr = match mapped {
            Ok(p) => NonNull::new(p.cast::<u8>()).expect("mmap does not return null"),
            Err(_) => alloc::handle_alloc_error(
                Layout::from_size_align(len.max(1), PAGE).expect("a chunk's size fits a layout"),
            ),
        };
        // SAFETY: the range is the mapping just made. Advice only: a
        // kernel without transparent huge pages refuses it, harmlessly.
        let _ = unsafe {
            mm::madvise(
                ptr.as_ptr().cast(),
                Chunk::mapped(len),
                mm::Advice::LinuxNoHugepage,
            )
        };
        Chunk { ptr, len }
    }

    /// Have the kernel back every page now, so that a writer does not
    /// fault them in; call `pause` after every [`TOUCH_STEP`] bytes.
    /// `MADV_POPULATE_WRITE` where the kernel has it (5.14 and later: no
    /// fault per page), else a write to each page.
    fn touch(&mut self, pause: &dyn Fn()) {
        let mapped = Chunk::mapped(self.len);
        let mut at = 0;
        while at < mapped {
            let step = TOUCH_STEP.min(mapped - at);
            // SAFETY: `at..at + step` is inside the mapping, which this
            // owns; populating writes nothing the chunk holds (it is not
            // handed out yet, and populating keeps contents anyway).
            let populated = unsafe {
                mm::madvise(
                    self.ptr.as_ptr().add(at).cast(),
                    step,
                    mm::Advice::LinuxPopulateWrite,
                )
            };
            if populated.is_err() {
                let mut page = at;
                while page < at + step {
                    // SAFETY: `page` is inside the mapping.
                    unsafe { self.ptr.as_ptr().add(page).write_volatile(0) };
                    page += PAGE;
                }
            }
            at += step;
            pause();
        }
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        // SAFETY: mapped in `Chunk::new` with this length; the arena's
        // pieces in it are gone with their memtable.
        let _ = unsafe { mm::munmap(self.ptr.as_ptr().cast(), Chunk::mapped(self.len)) };
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
