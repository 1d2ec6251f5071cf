//! A segment header from arbitrary bytes: never a panic, and an accepted
//! header encodes back to the same bytes.
#![no_main]

use keel::journal::fuzzing;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    fuzzing::check_decode_segment_header(data);
});
