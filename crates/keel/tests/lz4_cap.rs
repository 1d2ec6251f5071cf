//! A compressed record states its original length; reading it must not
//! allocate whatever that untrusted length says. A record whose checksum
//! matches but whose stated length is 4 GiB is refused before any
//! allocation of that size (this binary counts allocations).

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use keel::io::{SimVfs, WriteMethod};
use keel::journal::fuzzing::RecordHeader;
use keel::journal::{inspect, Journal, JournalError, JournalOptions, RECORD_HEADER_BYTES};

/// The largest single allocation made since the counter was reset.
static LARGEST: AtomicUsize = AtomicUsize::new(0);

struct Counting;

// SAFETY: forwards every call to the system allocator unchanged; it only
// records sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc`/`alloc_zeroed` above, i.e. from
        // the system allocator, with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[test]
fn a_compressed_record_claiming_4_gib_is_refused_without_allocating_it() {
    let vfs = SimVfs::new(1);
    let dir = PathBuf::from("/j");
    let opts = JournalOptions {
        segment_size_bytes: 1 << 20,
        max_write_bytes: 64 << 10,
        method: Some(WriteMethod::OdirectDsync),
        lz4_min_bytes: Some(64),
        ..JournalOptions::default()
    };
    let j = Journal::open(vfs.clone(), &dir, opts.clone()).unwrap();
    j.append(&[b'k'; 10_000]).unwrap();
    drop(j);
    // Restate the record's original length as ~4 GiB, with a valid CRC.
    let scan = inspect(vfs.as_ref(), &dir).unwrap();
    let seg = &scan.segments[0];
    let rec = seg.records[0];
    assert_ne!(rec.flags & keel::journal::FLAG_LZ4, 0, "stored compressed");
    let bytes = vfs.contents(&seg.path).unwrap();
    let start = rec.pos as usize;
    let end = start + RECORD_HEADER_BYTES + rec.len as usize;
    let (h, stored) = RecordHeader::decode(&bytes[start..end]).unwrap();
    let mut stored = stored.to_vec();
    stored[..4].copy_from_slice(&0xffff_ff00u32.to_le_bytes());
    let mut out = vec![0u8; end - start];
    h.encode(&stored, &mut out);
    out[RECORD_HEADER_BYTES..].copy_from_slice(&stored);
    vfs.corrupt(&seg.path, rec.pos, &out).unwrap();
    let j = Journal::open(vfs.clone(), &dir, opts).unwrap();
    LARGEST.store(0, Ordering::Relaxed);
    let got = j.read_from(1).unwrap().next().unwrap();
    let largest = LARGEST.load(Ordering::Relaxed);
    assert!(
        matches!(got, Err(JournalError::BadCompressedRecord { lsn: 1 })),
        "{got:?}"
    );
    assert!(
        largest < 16 << 20,
        "reading allocated {largest} bytes at once for a 1 MiB segment"
    );
}
