//! The legend under a text report: one line per word or column the report
//! uses, then where the docs say more. Every bench prints one after its
//! tables (on stdout, as part of the report; `--json` has no legend, its
//! fields are named).

/// A term and what it means, in one line.
pub type Term = (&'static str, &'static str);

/// Latency percentiles, as every bench prints them.
pub const LATENCY: Term = (
    "p50, p99, p99.9, max µs",
    "the latency of one operation that 50 %, 99 %, 99.9 % and all of them stayed under, in \
     microseconds (a p99 of fewer than 100 operations is the slowest one)",
);
/// Megabytes as every bench counts them.
pub const MB_PER_S: Term = ("MB/s", "10^6 bytes per second of payload");
/// The file preparations of `--prealloc`.
pub const PREALLOC: Term = (
    "prealloc",
    "how the file was prepared before timing: fallocate (blocks reserved as unwritten extents: \
     the first write to each also converts it, a metadata change the sync must persist), \
     zerofill (zeros written and synced: overwrites change no metadata), none (an empty or \
     sparse file; every write also allocates)",
);
/// The write methods of `bench methods` and `probe`.
pub const METHODS: Term = (
    "method",
    "how a commit is made durable: buffered (pwrite, no sync), fsync / fdatasync (pwrite, then \
     that call), odsync (pwrite on an O_DSYNC descriptor), odirect (O_DIRECT, no sync), \
     odirect_dsync (O_DIRECT|O_DSYNC), pwritev2_dsync (pwritev2 with RWF_DSYNC), \
     uring_odirect_dsync / uring_fdatasync (io_uring: an O_DIRECT|O_DSYNC write, or a write \
     linked to an fdatasync)",
);

/// `Terms:`, one `- term: meaning` line each, then the pointer to `more`.
pub fn legend(terms: &[Term], more: &str) -> String {
    let mut out = String::from("\nTerms:\n");
    for (term, meaning) in terms {
        out.push_str(&format!("- {term}: {meaning}\n"));
    }
    if !more.is_empty() {
        out.push_str(&format!("More: {more}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_term_then_the_pointer() {
        let text = legend(&[LATENCY, MB_PER_S], "docs/toolkit.md");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], "Terms:");
        assert!(lines[2].starts_with("- p50, p99"));
        assert!(lines[3].starts_with("- MB/s: "));
        assert_eq!(lines[4], "More: docs/toolkit.md");
    }
}
