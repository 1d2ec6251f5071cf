//! Arbitrary bytes walked as a segment, as recovery walks one: never a
//! panic, never a record whose checksum does not verify, records back to
//! back with consecutive LSNs.
//!
//! The first byte chooses the mode: raw bytes (with a block size and
//! segment sequence taken from the next bytes), or a recipe of valid
//! records with bit flips (`fuzzing::segment_from_recipe`), which gives the
//! fuzzer valid checksums to start from.
#![no_main]

use keel::journal::fuzzing;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        fuzzing::check_walk_segment(&fuzzing::segment_from_recipe(rest), 1, 512);
    } else if rest.len() >= 3 {
        let block = usize::from(u16::from_le_bytes([rest[0], rest[1]]));
        let seq = u64::from(rest[2] % 4);
        fuzzing::check_walk_segment(&rest[3..], seq, block);
    }
});
