//! A free-list page from arbitrary bytes: never a panic, and an accepted
//! page lists only tree pages inside the file, no more than fit.
//!
//! The first byte chooses the mode (the bytes as they are, or with a
//! valid checksum and page number put in first, so that the layout checks
//! are reached); the second, the file's page count.
#![no_main]

use keel::db::fuzzing;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [mode, pages, rest @ ..] = data else {
        return;
    };
    fuzzing::check_decode_freelist_page(rest, mode & 1 == 1, u64::from(*pages));
});
