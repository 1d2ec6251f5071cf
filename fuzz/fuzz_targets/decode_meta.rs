//! A meta page from arbitrary bytes: never a panic, and an accepted one
//! encodes to bytes that decode to the same meta.
#![no_main]

use keel::db::fuzzing;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    fuzzing::check_decode_meta(data);
});
