//! Tables as redb and LMDB users know them: several open at once in one
//! write transaction, typed keys (integers that sort as numbers, a tuple
//! key as an index), scans from the end, `delete_range` and `retain`;
//! a read-only open beside the writer (a live snapshot); and a backup
//! taken while the store is open, which opens and checks clean.
//!
//! Run: `cargo run --release -p keel --example store_tables [DIR]`
//! (default DIR: a new directory under the system's temp directory).

use keel::db::{Database, DbError, TableDefinition};

/// Order number → the item ordered.
const ORDERS: TableDefinition<u64, &str> = TableDefinition::new("orders");
/// An index of the orders by customer: (customer, order number), no value.
const BY_CUSTOMER: TableDefinition<(&str, u64), ()> = TableDefinition::new("orders_by_customer");
/// Item → how many are left (it may go below zero: back-ordered).
const STOCK: TableDefinition<&str, i64> = TableDefinition::new("stock");

fn main() -> Result<(), DbError> {
    let dir = std::env::args().nth(1).map_or_else(
        || std::env::temp_dir().join(format!("keel-tables-{}", std::process::id())),
        Into::into,
    );
    let db = Database::create(&dir)?;

    // Four tables open at once in one transaction: three typed, one of
    // bytes. The transaction commits them together, or nothing.
    let txn = db.begin_write()?;
    let mut orders = txn.open_typed(&ORDERS)?;
    let mut by_customer = txn.open_typed(&BY_CUSTOMER)?;
    let mut stock = txn.open_typed(&STOCK)?;
    let mut log = txn.open_table("log")?;
    for item in ["lamp", "desk", "chair"] {
        stock.insert(item, 2)?;
    }
    let placed = [
        (998, "alice", "lamp"),
        (999, "bob", "desk"),
        (1000, "alice", "chair"),
        (1001, "carol", "lamp"),
        (1002, "alice", "lamp"),
    ];
    for (number, customer, item) in placed {
        orders.insert(number, item)?;
        by_customer.insert((customer, number), ())?;
        let left = stock.get(item)?.unwrap_or(0);
        stock.insert(item, left - 1)?;
        log.insert(
            format!("{number:08}"),
            format!("{customer} ordered a {item}"),
        )?;
    }
    txn.commit()?;

    let read = db.begin_read();
    // Integer keys sort as numbers (big-endian): the newest orders are
    // at the end, read backward.
    let orders = read.open_typed(&ORDERS)?;
    println!("the three newest orders:");
    for order in orders.iter().rev().take(3) {
        let (number, item) = order?;
        println!("  {number}: {item}");
    }
    // A tuple key sorts by its first part, then its second: one
    // customer's orders are one range.
    let alice: Vec<u64> = read
        .open_typed(&BY_CUSTOMER)?
        .range(("alice", 0)..=("alice", u64::MAX))
        .map(|entry| entry.map(|((_, number), ())| number))
        .collect::<Result<_, _>>()?;
    println!("alice's orders: {alice:?}");
    for entry in read.open_typed(&STOCK)?.iter() {
        let (item, left) = entry?;
        println!("  {item}: {left} left");
    }
    // A table of bytes: items are (key, value) pairs that compare with
    // byte strings and print as them.
    if let Some((key, message)) = read.open_table("log")?.last()? {
        println!("last log line: {key:?} {message:?}");
    }
    drop(read);

    // Orders below 1000 are archived: removed, with their index entries,
    // and the items no longer in stock, in one transaction.
    let txn = db.begin_write()?;
    let archived = txn.open_typed(&ORDERS)?.delete_range(..1000)?;
    let unindexed = txn
        .open_typed(&BY_CUSTOMER)?
        .retain(|&(_, number), ()| number >= 1000)?;
    let sold_out = txn.open_typed(&STOCK)?.retain(|_, &left| left > 0)?;
    txn.commit()?;
    println!("archived {archived} orders ({unindexed} index entries), {sold_out} items sold out");

    let read = db.begin_read();
    assert_eq!(read.open_typed(&ORDERS)?.len()?, 3);
    assert_eq!(read.open_typed(&BY_CUSTOMER)?.len()?, 3);
    // Opened with other types than it was made with: an error that says so.
    let wrong = TableDefinition::<u32, &str>::new("orders");
    if let Err(e) = read.open_typed(&wrong) {
        println!("as <u32, &str>: {e}");
    }
    drop(read);

    // Read-only beside the writer: here a second `Database` of this
    // process, and another process opens it the same way. It is a live
    // snapshot — every acknowledged commit, fixed at the open, nothing
    // written — that a later commit does not change: reopen to see it.
    let live = Database::open_read_only(&dir)?;
    assert!(live.is_live());
    let snapshot = live.begin_read();
    let orders_then = snapshot.open_typed(&ORDERS)?.len()?;
    let txn = db.begin_write()?;
    txn.open_typed(&ORDERS)?.insert(1003, "desk")?;
    txn.commit()?;
    assert_eq!(snapshot.open_typed(&ORDERS)?.len()?, orders_then);
    println!(
        "a live snapshot at lsn {}: {orders_then} orders",
        snapshot.lsn()
    );
    drop(snapshot);
    drop(live);
    let live = Database::open_read_only(&dir)?;
    let orders_now = live.begin_read().open_typed(&ORDERS)?.len()?;
    assert_eq!(orders_now, orders_then + 1);
    println!("reopened: {orders_now} orders");
    drop(live);

    // A consistent copy while the store is in use: a new store that opens
    // and checks clean, holding every table (typed ones read back typed).
    let copy = dir.with_extension("backup");
    let _ = std::fs::remove_dir_all(&copy);
    let report = db.backup(&copy)?;
    let backup = Database::open_read_only(&copy)?;
    backup.check()?;
    let read = backup.begin_read();
    assert_eq!(read.open_typed(&ORDERS)?.len()?, orders_now);
    assert_eq!(read.open_typed(&STOCK)?.get("chair")?, Some(1));
    println!(
        "backup at lsn {}: {} tables, {} entries, in {}",
        report.lsn,
        report.tables,
        report.entries,
        copy.display()
    );
    drop(read);
    backup.close()?;
    db.close()?;
    println!("store in {}", dir.display());
    Ok(())
}
