//! A tree page from arbitrary bytes: never a panic, and an accepted page
//! encodes back to the same bytes.
//!
//! The first byte chooses the mode: the bytes as they are (the checksum
//! must match, which random bytes rarely do), or with a valid checksum and
//! page number put in first, so that the layout checks are reached.
#![no_main]

use keel::btree::fuzzing;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    fuzzing::check_decode_page(rest, mode & 1 == 1);
});
