//! A store transaction record from arbitrary bytes: never a panic, and an
//! accepted record encodes back to the same bytes.
#![no_main]

use keel::db::fuzzing;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    fuzzing::check_decode_txn_record(data);
});
