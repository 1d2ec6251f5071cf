//! Which seeds a randomized campaign runs, from its environment variables
//! (`P` is the campaign's prefix, e.g. `KEEL_CRASH`):
//!
//! - `P_SEED=S`: seed `S` alone (to replay a failure);
//! - else `P_SEEDS=N` seeds (default: the CI amount) from `P_FROM=F`
//!   (default 0), so that a long campaign can run seeds CI never runs.

/// The seeds to run for the campaign with prefix `prefix`, `ci` of them by
/// default.
pub fn from_env(prefix: &str, ci: u64) -> Vec<u64> {
    let var = |name: &str| {
        let name = format!("{prefix}_{name}");
        std::env::var(&name).ok().map(|s| {
            s.parse::<u64>()
                .unwrap_or_else(|_| panic!("{name} is a number, not {s:?}"))
        })
    };
    if let Some(s) = var("SEED") {
        return vec![s];
    }
    let from = var("FROM").unwrap_or(0);
    (from..from + var("SEEDS").unwrap_or(ci)).collect()
}
