//! A CPU hint shared by the memtable and the B+tree's read path.

/// Ask the CPU to bring the cache line at `p` in (a hint: no read the
/// program sees, no fault on any address).
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of x86-64 (every such CPU has it), and a
    // prefetch reads nothing the program sees and never faults.
    #[allow(unsafe_code)]
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
