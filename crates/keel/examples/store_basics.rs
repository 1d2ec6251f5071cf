//! The store in a few lines: create, write in a transaction, read a
//! snapshot, scan a range and a prefix, drop a table, close.
//!
//! Run: `cargo run --release -p keel --example store_basics [DIR]`
//! (default DIR: a new directory under the system's temp directory).

use keel::db::{Database, DbError, Durability};

fn main() -> Result<(), DbError> {
    let dir = std::env::args().nth(1).map_or_else(
        || std::env::temp_dir().join(format!("keel-example-{}", std::process::id())),
        Into::into,
    );
    // Creates the directory (and missing parents) and the store in it, or
    // opens the store already there.
    let db = Database::create(&dir)?;

    // One write transaction at a time; its reads see its own writes.
    let txn = db.begin_write()?;
    {
        let mut users = txn.open_table("users")?;
        users.insert("alice", "admin")?;
        users.insert("bob", "reader")?;
        users.insert("carol", "writer")?;
        assert_eq!(users.get("bob")?.as_deref(), Some(&b"reader"[..]));
    }
    txn.open_table("sessions")?.insert("s-1", "alice")?;
    txn.commit()?; // durable when it returns

    // A commit that is not waited for: durable a moment later, unless the
    // machine fails first (see `Durability`).
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::Eventual);
    txn.open_table("sessions")?.insert("s-2", "bob")?;
    txn.commit()?;

    // Dropping a write transaction without commit rolls it back.
    let txn = db.begin_write()?;
    txn.open_table("users")?.remove("alice")?;
    drop(txn);

    // A read transaction sees one durable snapshot, whatever writers do.
    let read = db.begin_read();
    let users = read.open_table("users")?;
    println!("tables: {:?}", read.list_tables()?);
    println!("alice is {:?}", users.get("alice")?.map(|v| v.to_vec()));
    for kv in users.range("b"..) {
        let (key, value) = kv?;
        println!(
            "  {} = {}",
            String::from_utf8_lossy(&key),
            String::from_utf8_lossy(&value)
        );
    }
    let n = users.prefix("ca").count();
    println!("{n} user(s) whose name starts with \"ca\"");
    drop(read);

    let mut txn = db.begin_write()?;
    txn.delete_table("sessions")?;
    txn.commit()?;

    let s = db.stats();
    println!(
        "{} commits, {} pages, checkpoint at lsn {}",
        s.commits, s.page_count, s.checkpoint_lsn
    );
    // Close checkpoints, so the next open replays nothing, and reports
    // errors (dropping cannot).
    db.close()?;
    println!("store in {}", dir.display());
    Ok(())
}
