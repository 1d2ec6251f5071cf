//! A seeded random workload on the store and the model it must equal: a
//! map of tables to ordered maps. Shared by the model test and the crash
//! campaign.
//!
//! Keys are long (up to ~900 bytes) so that a few hundred entries make a
//! tree of depth 3 with 4 KiB pages; some values go to overflow pages.
//! `KEEL_STORE_TRACE=1` prints every change on stderr.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use keel::db::{Builder, Database, DbError, Durability, ReadTxn, TableMut, WriteTxn};
use keel::io::Vfs;
use keel::journal::JournalOptions;
use rand::rngs::SmallRng;
use rand::Rng;

pub type Tables = BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>;

pub const TABLES: [&str; 4] = ["alpha", "beta", "gamma", "delta"];

/// Options for tests: small journal segments (so checkpoints recycle
/// them; of 16 and 32 KiB, so that segments of both sizes are made,
/// recycled and replaced), no background thread (checkpoints come from the
/// workload), and folds written in parts of a few pages (crashes land
/// between parts).
pub fn builder(vfs: Arc<dyn Vfs>) -> Builder {
    Database::builder()
        .vfs(vfs)
        .journal(JournalOptions {
            segment_size_bytes: 32 << 10,
            first_segment_size_bytes: 16 << 10,
            ..JournalOptions::default()
        })
        .cache_bytes(256 << 10)
        .fold_bytes(32 << 10)
        .background_checkpoints(false)
        .backpressure_journal_bytes(1 << 20)
}

/// Key number `n`: filler of a length derived from `n`, then six digits.
/// Keys of one length share their filler, so the separators between them
/// are long and branches hold few children.
pub fn key(n: u32) -> Vec<u8> {
    let len = match n % 7 {
        0 => 0,
        1 | 2 => 34,
        3 => 300,
        _ => 400 + (n as usize * 37) % 500,
    };
    let mut k = vec![b'k'; len];
    k.extend_from_slice(format!("{n:06}").as_bytes());
    k
}

pub fn value(rng: &mut SmallRng) -> Vec<u8> {
    let len = match rng.random_range(0..20) {
        0 => rng.random_range(1100..9000), // overflow pages
        1 => 0,
        _ => rng.random_range(1..120),
    };
    let b: u8 = rng.random();
    (0..len).map(|i| b.wrapping_add(i as u8)).collect()
}

/// Read every table of a snapshot.
pub fn dump(r: &ReadTxn) -> Result<Tables, DbError> {
    let mut out = Tables::new();
    for name in r.list_tables()? {
        let t = r.open_table(&name)?;
        let mut m = BTreeMap::new();
        for kv in t.iter() {
            let kv = kv?;
            m.insert(kv.0.as_bytes().to_vec(), kv.1.as_bytes().to_vec());
        }
        out.insert(name, m);
    }
    Ok(out)
}

/// Describe how two states differ (first difference).
pub fn diff(got: &Tables, want: &Tables) -> String {
    let names = |t: &Tables| t.keys().cloned().collect::<Vec<_>>();
    if names(got) != names(want) {
        return format!("tables {:?}, model {:?}", names(got), names(want));
    }
    for (name, g) in got {
        let w = &want[name];
        if g.len() != w.len() {
            return format!("table {name}: {} entries, model {}", g.len(), w.len());
        }
        for ((gk, gv), (wk, wv)) in g.iter().zip(w) {
            if gk != wk || gv != wv {
                return format!(
                    "table {name}: key {:?} (len {}) vs model {:?} (len {})",
                    String::from_utf8_lossy(&gk[gk.len().saturating_sub(6)..]),
                    gv.len(),
                    String::from_utf8_lossy(&wk[wk.len().saturating_sub(6)..]),
                    wv.len()
                );
            }
        }
    }
    "equal".into()
}

/// Unwrap a change's result; a change refused for the transaction's size
/// changed nothing, and the transaction goes on without it.
macro_rules! change {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(DbError::TransactionTooLarge { .. }) => continue,
            // The store stopped accepting writes (a failed sync in a
            // background checkpoint) after `begin_write`: the transaction
            // takes the writer slot at its first read, and is refused.
            Err(DbError::Poisoned(_)) => return Ok(Outcome::Refused),
            Err(e) => return Err(e.to_string()),
        }
    };
}

/// What one transaction did.
pub enum Outcome {
    /// Committed (acknowledged) with this resulting state.
    Committed(Tables),
    /// Rolled back on purpose.
    Aborted,
    /// Failed before its record was submitted: nothing happened.
    Refused,
    /// Failed after submit (or the store was down): the state is either
    /// the old one or this one.
    InDoubt(Tables),
}

/// Run one random transaction against `db`, starting from `model` (the
/// writer's view), checking its own reads against the model as it goes.
pub fn random_txn(
    db: &Database,
    model: &Tables,
    rng: &mut SmallRng,
    key_space: u32,
    durability: Durability,
) -> Result<Outcome, String> {
    let mut m = model.clone();
    let mut w = match db.begin_write() {
        Ok(w) => w,
        Err(_) => return Ok(Outcome::Refused),
    };
    w.set_durability(durability);
    // One in eight: puts only, 16 or more (a blind transaction that a lone
    // committer publishes as a run before the helper inserts it).
    if rng.random_ratio(1, 8) {
        return blind_bulk_txn(w, m, rng, key_space);
    }
    let n_ops = if rng.random_ratio(1, 10) {
        rng.random_range(20..80)
    } else {
        rng.random_range(1..8)
    };
    let trace = std::env::var_os("KEEL_STORE_TRACE").is_some();
    for _ in 0..n_ops {
        let name = TABLES[rng.random_range(0..TABLES.len())];
        if rng.random_ratio(1, 150) {
            let existed = change!(w.delete_table(name));
            if trace {
                eprintln!("  drop {name} existed={existed}");
            }
            if existed != m.remove(name).is_some() {
                return Err(format!(
                    "delete_table {name}: {existed} disagrees with model"
                ));
            }
            continue;
        }
        let mut t = change!(w.open_table(name));
        let mt = m.entry(name.to_string()).or_default();
        let k = key(rng.random_range(0..key_space));
        match rng.random_range(0..10) {
            0..=5 => {
                let v = value(rng);
                change!(t.insert(&k, &v));
                if trace {
                    eprintln!(
                        "  put {name} {}",
                        String::from_utf8_lossy(&k[k.len() - 6..])
                    );
                }
                mt.insert(k, v);
            }
            6 | 7 => {
                let had = change!(t.remove(&k));
                if trace {
                    eprintln!(
                        "  del {name} {} had={had}",
                        String::from_utf8_lossy(&k[k.len() - 6..])
                    );
                }
                if had != mt.remove(&k).is_some() {
                    return Err("remove disagrees with the model".into());
                }
            }
            8 => {
                let got = change!(t.get(&k)).map(|v| v.to_vec());
                if got.as_ref() != mt.get(&k) {
                    return Err("own read disagrees with the model".into());
                }
            }
            _ => {
                if let Some(why) = change!(scan_disagrees(&t, mt, rng, key_space)) {
                    return Err(why);
                }
            }
        }
    }
    finish(w, m, rng)
}

/// A range or prefix scan of a transaction's own view of a table against
/// the model's `mt`: how they disagree, if they do.
fn scan_disagrees(
    t: &TableMut<'_>,
    mt: &BTreeMap<Vec<u8>, Vec<u8>>,
    rng: &mut SmallRng,
    key_space: u32,
) -> Result<Option<String>, DbError> {
    let a = key(rng.random_range(0..key_space));
    let keys = |kv: Result<keel::db::KeyValue, DbError>| kv.map(|kv| kv.0.as_bytes().to_vec());
    let (got, want): (Vec<Vec<u8>>, Vec<Vec<u8>>) = if rng.random() {
        let p = &a[..a.len().saturating_sub(4)];
        (
            t.prefix(p).map(keys).collect::<Result<_, _>>()?,
            mt.keys().filter(|x| x.starts_with(p)).cloned().collect(),
        )
    } else {
        let r = (Bound::Included(&a[..]), Bound::Unbounded);
        (
            t.range(r).take(20).map(keys).collect::<Result<_, _>>()?,
            mt.range::<[u8], _>(r)
                .take(20)
                .map(|(k, _)| k.clone())
                .collect(),
        )
    };
    if got == want {
        return Ok(None);
    }
    let tails = |v: &[Vec<u8>]| {
        v.iter()
            .map(|k| {
                let tail = String::from_utf8_lossy(&k[k.len().saturating_sub(6)..]);
                format!("{tail}({})", k.len())
            })
            .collect::<Vec<_>>()
    };
    Ok(Some(format!(
        "scan disagrees with the model ({} vs {} keys): {:?} vs {:?}",
        got.len(),
        want.len(),
        tails(&got),
        tails(&want)
    )))
}

/// Put 16 to 59 random keys into one table, reading nothing, then finish
/// the transaction as [`random_txn`] does.
fn blind_bulk_txn(
    w: WriteTxn,
    mut m: Tables,
    rng: &mut SmallRng,
    key_space: u32,
) -> Result<Outcome, String> {
    let name = TABLES[rng.random_range(0..TABLES.len())];
    for _ in 0..rng.random_range(16..60) {
        let mut t = change!(w.open_table(name));
        let k = key(rng.random_range(0..key_space));
        let v = value(rng);
        change!(t.insert(&k, &v));
        m.entry(name.to_string()).or_default().insert(k, v);
    }
    finish(w, m, rng)
}

/// Abort one transaction in twelve, else commit it: `m` is its model.
fn finish(w: WriteTxn, m: Tables, rng: &mut SmallRng) -> Result<Outcome, String> {
    if rng.random_ratio(1, 12) {
        w.abort();
        return Ok(Outcome::Aborted);
    }
    match w.commit() {
        Ok(()) => Ok(Outcome::Committed(m)),
        Err(DbError::TransactionTooLarge { .. }) => Ok(Outcome::Refused),
        Err(_) => Ok(Outcome::InDoubt(m)),
    }
}

/// Open (or create) the store in `dir`.
pub fn open(vfs: &Arc<dyn Vfs>, dir: &Path) -> Result<Database, DbError> {
    builder(Arc::clone(vfs)).create(dir)
}
