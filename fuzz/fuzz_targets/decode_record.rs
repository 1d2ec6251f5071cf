//! A record header and payload from arbitrary bytes: never a panic, and an
//! accepted record is inside the input and encodes back to it.
#![no_main]

use keel::journal::fuzzing;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    fuzzing::check_decode_record(data);
});
