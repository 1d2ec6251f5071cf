//! Heap buffers aligned for direct I/O.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// A zero-initialised heap buffer whose address is a multiple of `align`.
/// `O_DIRECT` needs buffer addresses, lengths and file offsets aligned to the
/// device's logical block size; `Vec<u8>` only guarantees alignment 1.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    layout: Layout,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only give out `&[u8]`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes aligned to `align` (a power of two).
    ///
    /// # Panics
    /// If `align` is not a power of two or the size overflows.
    pub fn new(len: usize, align: usize) -> Self {
        assert!(
            align.is_power_of_two(),
            "alignment {align} is not a power of two"
        );
        let layout = Layout::from_size_align(len.max(1), align).expect("buffer layout");
        // SAFETY: layout has a non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            std::alloc::handle_alloc_error(layout)
        };
        AlignedBuf { ptr, len, layout }
    }

    /// The alignment of the buffer's address.
    pub fn align(&self) -> usize {
        self.layout.align()
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialised (zeroed) bytes for the
        // lifetime of self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with exactly this layout.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .field("align", &self.align())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed() {
        for align in [512, 4096, 65536] {
            let b = AlignedBuf::new(3 * align, align);
            assert_eq!(b.as_ptr() as usize % align, 0);
            assert_eq!(b.len(), 3 * align);
            assert!(b.iter().all(|&x| x == 0));
        }
        let mut b = AlignedBuf::new(0, 4096);
        assert!(b.is_empty());
        b.fill(1);
    }
}
