//! The store's API as a user meets it: several tables open at once in a
//! write transaction, scans from both ends, `first`/`last`/`len`,
//! `delete_range` and `retain`, items that destructure and compare,
//! `Debug` that shows only an item's own bytes, typed tables and their
//! recorded types, who holds a store's lock, a store written by an
//! earlier Keel (`tests/fixtures/store-v2`), and reads through the memory
//! map or by `pread`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use keel::db::{
    Database, DbError, Key, LockHolder, ReadTxn, Table, TableDefinition, Value, WriteTxn,
};
use keel::io::{SimVfs, Vfs};
use keel::journal::JournalOptions;

fn db_on(vfs: &Arc<SimVfs>, segment_bytes: u64) -> Database {
    Database::builder()
        .vfs(Arc::clone(vfs) as Arc<dyn Vfs>)
        .journal(JournalOptions {
            segment_size_bytes: segment_bytes,
            ..JournalOptions::default()
        })
        .background_checkpoints(false)
        .create("/store")
        .unwrap()
}

fn db() -> Database {
    db_on(&SimVfs::new(5), 256 << 10)
}

fn keys(it: impl Iterator<Item = keel::db::Result<(Key, Value<'static>)>>) -> Vec<String> {
    it.map(|kv| String::from_utf8(kv.unwrap().0.to_vec()).unwrap())
        .collect()
}

/// What the example of the brief did not compile: `let (k, v) = kv?`,
/// `value == b"…"`, a second table while the first is alive.
#[test]
fn several_tables_at_once_and_items_that_destructure() -> keel::db::Result<()> {
    let db = db();
    let txn = db.begin_write()?;
    let mut users = txn.open_table("users")?;
    let mut log = txn.open_table("log")?;
    users.insert("alice", "admin")?;
    log.insert("0001", "alice made")?;
    users.insert("bob", "reader")?;
    log.insert("0002", "bob made")?;
    // The same table twice: both handles see one table.
    let mut again = txn.open_table("users")?;
    again.insert("carol", "reader")?;
    assert!(users.get("carol")?.unwrap() == "reader");
    txn.commit()?;

    let read = db.begin_read();
    let users = read.open_table("users")?;
    for kv in users.iter() {
        let (k, v) = kv?;
        assert!(k == "alice" || k == b"bob" || k == *b"carol");
        assert!(v == "admin" || v == b"reader");
    }
    let v = users.get(b"alice")?.unwrap();
    assert!(v == b"admin" && v == "admin" && v == *"admin" && v == b"admin"[..]);
    assert_eq!(v, users.get("alice")?.unwrap());
    let names: Vec<Key> = users
        .iter()
        .map(|kv| kv.map(|(k, _)| k))
        .collect::<Result<_, _>>()?;
    assert!(names.windows(2).all(|w| w[0] < w[1]));
    Ok(())
}

/// A scan of one table while the transaction writes another, and while
/// it removes, through a second handle, keys the scan has not reached:
/// no borrow error, and the scan sees the removals.
#[test]
fn a_scan_sees_changes_made_while_it_runs() -> keel::db::Result<()> {
    let db = db();
    let txn = db.begin_write()?;
    let mut src = txn.open_table("src")?;
    for i in 0..20u8 {
        src.insert([i], [i])?;
    }
    txn.commit()?;

    let txn = db.begin_write()?;
    let src = txn.open_table("src")?;
    let mut same = txn.open_table("src")?;
    let mut copy = txn.open_table("copy")?;
    let mut seen = Vec::new();
    for kv in src.iter() {
        let (k, v) = kv?;
        copy.insert(&k, &v)?;
        seen.push(k[0]);
        // The next key, ahead of the scan: it must not come out.
        same.remove([k[0] + 1])?;
    }
    assert_eq!(seen, (0..20).step_by(2).collect::<Vec<u8>>());
    assert_eq!(copy.len()?, 10);
    // Backward, the same: each key removes the one before it.
    let mut back = Vec::new();
    for kv in copy.iter().rev() {
        let (k, _) = kv?;
        back.push(k[0]);
        same.insert([k[0] + 1], b"again")?;
    }
    assert_eq!(back, (0..20).step_by(2).rev().collect::<Vec<u8>>());
    assert_eq!(src.len()?, 20);
    txn.commit()?;
    Ok(())
}

/// `WriteTxn` is `Send` (a transaction may move to another thread; its
/// table handles, which share it, stay with it), and read transactions
/// and the store are `Send + Sync`.
#[test]
fn transactions_keep_their_auto_traits() {
    fn send<T: Send>() {}
    fn send_sync<T: Send + Sync>() {}
    send::<WriteTxn>();
    send_sync::<ReadTxn>();
    send_sync::<Table<'static>>();
    send_sync::<Database>();
    send_sync::<Value>();
    send_sync::<Key>();
}

/// `rev`, `first`, `last`, `len`, `is_empty`, `contains_key`, in a read
/// and a write transaction, with the write transaction's own changes.
#[test]
fn reverse_scans_and_first_last_len() -> keel::db::Result<()> {
    let db = db();
    let txn = db.begin_write()?;
    let mut t = txn.open_table("t")?;
    assert!(t.is_empty()? && t.first()?.is_none() && t.last()?.is_none());
    for k in ["a", "b", "c", "d", "e"] {
        t.insert(k, k.to_uppercase())?;
    }
    txn.commit()?;

    let read = db.begin_read();
    let t = read.open_table("t")?;
    assert_eq!(keys(t.iter().rev()), ["e", "d", "c", "b", "a"]);
    assert_eq!(keys(t.range("b"..="d").rev()), ["d", "c", "b"]);
    let mut both = t.iter();
    let (a, e) = (both.next().unwrap()?, both.next_back().unwrap()?);
    assert!(a.0 == "a" && e.0 == "e" && e.1 == "E");
    assert_eq!(keys(both.by_ref().rev()), ["d", "c", "b"]);
    assert!(both.next().is_none());
    assert_eq!((t.len()?, t.is_empty()?), (5, false));
    assert!(t.first()?.unwrap().0 == "a" && t.last()?.unwrap().0 == "e");
    assert!(t.contains_key("c")? && !t.contains_key("cc")?);

    let txn = db.begin_write()?;
    let mut t = txn.open_table("t")?;
    t.remove("e")?;
    t.insert("f", "F")?;
    t.remove("a")?;
    assert_eq!(keys(t.iter().rev()), ["f", "d", "c", "b"]);
    assert!(t.first()?.unwrap().0 == "b" && t.last()?.unwrap().1 == "F");
    assert_eq!(t.len()?, 4);
    assert!(!t.contains_key("e")? && t.contains_key("f")?);
    Ok(())
}

/// `delete_range` and `retain` remove without the caller collecting keys,
/// count what they removed, and are all or nothing: a removal that would
/// pass the transaction's record limit removes none.
#[test]
fn delete_range_and_retain() -> keel::db::Result<()> {
    // 16 KiB segments: one record holds a few hundred deletes of these
    // keys, not the thousand below.
    let db = db_on(&SimVfs::new(9), 16 << 10);
    for part in 0..10u32 {
        let txn = db.begin_write()?;
        let mut t = txn.open_table("t")?;
        for i in part * 100..(part + 1) * 100 {
            t.insert(format!("key{i:04}"), i.to_be_bytes())?;
        }
        txn.commit()?;
    }
    let txn = db.begin_write()?;
    let mut t = txn.open_table("t")?;
    assert_eq!(t.delete_range("key0100".."key0150")?, 50);
    assert_eq!(t.delete_range("key0100".."key0150")?, 0);
    assert_eq!(t.retain_in("key0000".."key0100", |_, v| v[3] % 2 == 0)?, 50);
    // Keys ending in 7: 100, less the 5 deleted and the 10 odd ones gone.
    assert_eq!(t.retain(|k, _| !k.ends_with(b"7"))?, 85);
    assert_eq!(t.len()?, 1000 - 50 - 50 - 85);
    let before = t.len()?;
    let err = t.delete_range(..).unwrap_err();
    assert!(matches!(err, DbError::TransactionTooLarge { .. }), "{err}");
    assert_eq!(t.len()?, before, "a refused delete_range removed some");
    let err = t.retain(|_, _| false).unwrap_err();
    assert!(matches!(err, DbError::TransactionTooLarge { .. }), "{err}");
    assert_eq!(t.len()?, before);
    txn.commit()?;
    let read = db.begin_read();
    assert_eq!(read.open_table("t")?.len()?, before);
    assert!(read.open_table("t")?.get("key0149")?.is_none());
    Ok(())
}

/// `{:?}` of values, items, transactions and tables shows an item's own
/// bytes, at most 64 of them, and never its neighbours' (a tree entry
/// holds the whole leaf it was found in).
#[test]
fn debug_shows_only_an_items_own_bytes() -> keel::db::Result<()> {
    let db = db();
    let txn = db.begin_write()?;
    let mut t = txn.open_table("t")?;
    t.insert("a", "public")?;
    t.insert("b", "SECRET-neighbour")?;
    t.insert("c", vec![b'x'; 500])?;
    txn.commit()?;
    db.checkpoint()?; // the entries are in a tree leaf now
    let read = db.begin_read();
    let t = read.open_table("t")?;
    let v = t.get("a")?.unwrap();
    let item = t.first()?.unwrap();
    let last = t.last()?.unwrap();
    let shown = format!("{v:?} {item:?} {last:?} {read:?} {t:?}");
    assert!(!shown.contains("SECRET"), "{shown}");
    assert_eq!(format!("{v:?}"), r#"b"public""#);
    assert_eq!(format!("{item:?}"), r#"(b"a", b"public")"#);
    assert!(format!("{:?}", last.1).ends_with(" … (500 bytes)"));
    let w = db.begin_write()?;
    let wt = w.open_table("t")?;
    let got = wt.get("a")?.unwrap();
    let shown = format!("{got:?} {w:?} {wt:?}");
    assert!(!shown.contains("SECRET") && shown.len() < 200, "{shown}");
    Ok(())
}

const USERS: TableDefinition<u64, &str> = TableDefinition::new("users");

/// Typed tables: keys sort as numbers, reads decode, scans go both ways,
/// and `delete_range` and `retain` take typed ranges and entries.
#[test]
fn typed_tables() -> keel::db::Result<()> {
    let db = db();
    let txn = db.begin_write()?;
    let mut users = txn.open_typed(&USERS)?;
    for (id, name) in [
        (300u64, "carol"),
        (2, "alice"),
        (1_000_000, "dave"),
        (20, "bob"),
    ] {
        users.insert(id, name)?;
    }
    let name = String::from("erin");
    users.insert(&7, name.as_str())?;
    let scores = txn.open_typed(&TableDefinition::<(&str, i32), ()>::new("scores"))?;
    drop(scores);
    let mut scores = txn.open_typed(&TableDefinition::<(&str, i32), ()>::new("scores"))?;
    for (who, score) in [
        ("bob", 3),
        ("alice", -5),
        ("alice", 12),
        ("al", 7),
        ("bob", -1),
    ] {
        scores.insert((who, score), ())?;
    }
    txn.commit()?;

    let read = db.begin_read();
    let users = read.open_typed(&USERS)?;
    let ids: Vec<u64> = users
        .iter()
        .map(|kv| kv.map(|(k, _)| k))
        .collect::<Result<_, _>>()?;
    assert_eq!(ids, [2, 7, 20, 300, 1_000_000]);
    assert_eq!(users.get(300)?.as_deref(), Some("carol"));
    assert_eq!(users.get(&301)?, None);
    let last_two: Vec<(u64, String)> = users.range(10..).rev().take(2).collect::<Result<_, _>>()?;
    assert_eq!(
        last_two,
        [(1_000_000, "dave".into()), (300, "carol".into())]
    );
    assert_eq!(users.first()?, Some((2, "alice".to_string())));
    assert_eq!((users.len()?, users.contains_key(20)?), (5, true));
    let scores = read.open_typed(&TableDefinition::<(&str, i32), ()>::new("scores"))?;
    let all: Vec<(String, i32)> = scores
        .iter()
        .map(|kv| kv.map(|(k, ())| k))
        .collect::<Result<_, _>>()?;
    let want = [
        ("al", 7),
        ("alice", -5),
        ("alice", 12),
        ("bob", -1),
        ("bob", 3),
    ];
    assert_eq!(all, want.map(|(w, s)| (w.to_string(), s)));
    let alice: Vec<i32> = scores
        .range(("alice", i32::MIN)..=("alice", i32::MAX))
        .map(|kv| kv.map(|((_, s), ())| s))
        .collect::<Result<_, _>>()?;
    assert_eq!(alice, [-5, 12]);
    drop(read);

    let txn = db.begin_write()?;
    let mut users = txn.open_typed(&USERS)?;
    assert_eq!(users.delete_range(10..=300)?, 2);
    assert_eq!(users.retain(|&id, name| id > 2 || name != "alice")?, 1);
    assert_eq!(
        users.iter().collect::<Result<Vec<_>, _>>()?,
        [(7, "erin".into()), (1_000_000, "dave".into())]
    );
    txn.commit()?;
    Ok(())
}

/// A typed table opened with other types than it was made with is
/// `TableTypeMismatch`, in a read and a write transaction, and changes
/// nothing; `&str` and `String` are one type (one encoding). A table made
/// as bytes opens as any types and records them at its first typed open
/// in a write transaction; a dropped table's types go with it; and the
/// types' record is not a table anyone lists.
#[test]
fn a_wrong_type_open_is_a_clear_error() -> keel::db::Result<()> {
    let db = db();
    let txn = db.begin_write()?;
    txn.open_typed(&USERS)?.insert(1, "alice")?;
    txn.open_table("plain")?.insert("k", "v")?;
    txn.commit()?;

    let wrong = TableDefinition::<u32, &str>::new("users");
    let read = db.begin_read();
    match read.open_typed(&wrong) {
        Err(DbError::TableTypeMismatch {
            table,
            stored,
            requested,
        }) => {
            assert_eq!((&*table, &*stored), ("users", "<u64, str>"));
            assert_eq!(&*requested, "<u32, str>");
        }
        other => panic!("{other:?}"),
    }
    let e = read.open_typed(&wrong).unwrap_err().to_string();
    assert!(e.contains("<u64, str>") && e.contains("<u32, str>"), "{e}");
    read.open_typed(&TableDefinition::<u64, String>::new("users"))?;
    assert_eq!(read.list_tables()?, ["plain", "users"]);
    drop(read);

    let txn = db.begin_write()?;
    assert!(matches!(
        txn.open_typed(&wrong),
        Err(DbError::TableTypeMismatch { .. })
    ));
    // Bytes: allowed, unchecked.
    txn.open_table("users")?.insert("not a u64", "x")?;
    let plain = TableDefinition::<&str, &str>::new("plain");
    assert_eq!(txn.open_typed(&plain)?.get("k")?.as_deref(), Some("v"));
    txn.commit()?;
    let read = db.begin_read();
    assert!(matches!(
        read.open_typed(&USERS)?.iter().find_map(Result::err),
        Some(DbError::Decode { what: "a key", .. })
    ));
    assert!(matches!(
        read.open_typed(&TableDefinition::<&str, u8>::new("plain")),
        Err(DbError::TableTypeMismatch { .. })
    ));
    drop(read);

    let mut txn = db.begin_write()?;
    assert!(txn.delete_table("users")?);
    txn.commit()?;
    let txn = db.begin_write()?;
    txn.open_typed(&wrong)?.insert(5, "made again")?;
    txn.commit()?;
    let read = db.begin_read();
    assert_eq!(
        read.open_typed(&wrong)?.get(5)?.as_deref(),
        Some("made again")
    );
    assert_eq!(read.list_tables()?, ["plain", "users"]);
    drop(read);
    db.check()?;
    Ok(())
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("keel-store-api-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// `Locked` says who holds a store in this process: a `Database` still
/// open, or one closed whose read transactions are alive.
#[test]
fn locked_names_a_holder_in_this_process() -> keel::db::Result<()> {
    let dir = temp_dir("here");
    let db = Database::builder()
        .journal(JournalOptions {
            segment_size_bytes: 64 << 10,
            ..JournalOptions::default()
        })
        .create(&dir)?;
    let lock = std::fs::read_to_string(dir.join("LOCK")).unwrap();
    assert_eq!(lock.trim(), std::process::id().to_string());
    match Database::open(&dir) {
        Err(DbError::Locked { path, holder }) => {
            assert_eq!(path, dir);
            assert_eq!(holder, LockHolder::OpenDatabase { read_only: false });
        }
        other => panic!("{other:?}"),
    }
    let read = db.begin_read();
    let read2 = db.begin_read();
    db.close()?;
    let e = Database::open(&dir).unwrap_err();
    match &e {
        DbError::Locked { holder, .. } => assert_eq!(
            *holder,
            LockHolder::ClosedDatabase {
                read_transactions: 2
            }
        ),
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("this process"), "{e}");
    drop((read, read2));
    Database::open(&dir)?.close()?;
    assert_eq!(
        std::fs::read(dir.join("LOCK")).unwrap(),
        b"",
        "the id left behind"
    );
    std::fs::remove_dir_all(&dir).unwrap();
    Ok(())
}

/// The child of `locked_names_another_process_by_its_id`: holds the
/// store at `KEEL_API_HOLD` until the file `stop` appears beside it.
#[test]
fn child_holding_a_store() {
    let Some(dir) = std::env::var_os("KEEL_API_HOLD") else {
        return;
    };
    let dir = PathBuf::from(dir);
    let db = Database::open(&dir).unwrap();
    std::fs::write(dir.with_extension("ready"), b"").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !dir.with_extension("stop").exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    drop(db);
}

/// `Locked` names another process that holds a store by its id (which
/// the holder wrote into `LOCK`).
#[test]
fn locked_names_another_process_by_its_id() -> keel::db::Result<()> {
    let dir = temp_dir("there");
    Database::builder()
        .journal(JournalOptions {
            segment_size_bytes: 64 << 10,
            ..JournalOptions::default()
        })
        .create(&dir)?
        .close()?;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_holding_a_store", "--nocapture"])
        .env("KEEL_API_HOLD", &dir)
        .spawn()
        .unwrap();
    let ready = dir.with_extension("ready");
    while !ready.exists() {
        assert!(child.try_wait().unwrap().is_none(), "the child ended early");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let e = Database::open(&dir).unwrap_err();
    std::fs::write(dir.with_extension("stop"), b"").unwrap();
    assert!(child.wait().unwrap().success());
    match &e {
        DbError::Locked { holder, .. } => assert_eq!(
            *holder,
            LockHolder::OtherProcess {
                pid: Some(child.id())
            }
        ),
        other => panic!("{other:?}"),
    }
    assert!(
        e.to_string().contains(&format!("pid {}", child.id())),
        "{e}"
    );
    Database::open(&dir)?.close()?;
    for f in [dir.clone(), ready, dir.with_extension("stop")] {
        let _ = std::fs::remove_dir_all(&f);
        let _ = std::fs::remove_file(&f);
    }
    Ok(())
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        match e.file_type().unwrap().is_dir() {
            true => copy_dir(&e.path(), &target),
            false => {
                std::fs::copy(e.path(), &target).unwrap();
            }
        }
    }
}

/// A store written by the Keel before typed tables (`keel db create
/// --segment-size 16K`, three `put`s into `users`, one into `log`, `del
/// users user2`; tests/fixtures/store-v2) opens, reads, takes typed
/// tables and writes, and an older Keel would find nothing new but the
/// types' record, in a table it never lists.
#[test]
fn a_store_written_before_typed_tables_opens() -> keel::db::Result<()> {
    let dir = temp_dir("fixture");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store-v2");
    copy_dir(&fixture, &dir);
    assert!(!dir.join(keel::db::LIVE_FILE).exists());
    let db = Database::open(&dir)?;
    db.check()?;
    // Its first open by this Keel publishes for live readers.
    let live = Database::open_read_only(&dir)?;
    assert!(live.is_live());
    assert_eq!(live.begin_read().list_tables()?, ["log", "users"]);
    drop(live);
    let read = db.begin_read();
    assert_eq!(read.list_tables()?, ["log", "users"]);
    assert_eq!(keys(read.open_table("users")?.iter()), ["user1", "user3"]);
    let users = TableDefinition::<&str, &str>::new("users");
    assert_eq!(
        read.open_typed(&users)?.get("user3")?.as_deref(),
        Some("name3")
    );
    drop(read);
    let txn = db.begin_write()?;
    txn.open_typed(&users)?.insert("user4", "name4")?;
    txn.commit()?;
    db.close()?;
    let db = Database::open(&dir)?;
    let read = db.begin_read();
    assert_eq!(read.list_tables()?, ["log", "users"]);
    assert_eq!(read.open_typed(&users)?.len()?, 3);
    assert!(read
        .open_typed(&TableDefinition::<u64, &str>::new("users"))
        .is_err());
    drop(read);
    db.check()?;
    db.close()?;
    std::fs::remove_dir_all(&dir).unwrap();
    Ok(())
}

/// Salvage copies a store's typed tables as tables of bytes, and leaves
/// the types' record out (it names the old ids): no table of it appears.
#[test]
fn salvage_leaves_the_types_record_out() -> keel::db::Result<()> {
    let dir = temp_dir("salvage");
    let db = Database::builder()
        .journal(JournalOptions {
            segment_size_bytes: 64 << 10,
            ..JournalOptions::default()
        })
        .create(dir.join("from"))?;
    let txn = db.begin_write()?;
    txn.open_typed(&USERS)?.insert(1, "alice")?;
    txn.commit()?;
    db.close()?;
    let report = Database::salvage(dir.join("from"), dir.join("to"), Default::default())?;
    assert!(
        report.renamed_tables.is_empty(),
        "{:?}",
        report.renamed_tables
    );
    let db = Database::open(dir.join("to"))?;
    let read = db.begin_read();
    assert_eq!(read.list_tables()?, ["users"]);
    assert_eq!(read.open_typed(&USERS)?.get(1)?.as_deref(), Some("alice"));
    drop(read);
    db.close()?;
    std::fs::remove_dir_all(&dir).unwrap();
    Ok(())
}

/// Two stores of one path on two file systems (simulated ones, as tests
/// use): each refusal names its own store's holder.
#[test]
fn locked_names_the_holder_on_its_own_file_system() -> keel::db::Result<()> {
    let (a, b) = (SimVfs::new(1), SimVfs::new(2));
    let db_a = db_on(&a, 256 << 10);
    let db_b = db_on(&b, 256 << 10);
    let read_b = db_b.begin_read();
    db_b.close()?;
    let reopen = |vfs: &Arc<SimVfs>| match Database::builder()
        .vfs(Arc::clone(vfs) as Arc<dyn Vfs>)
        .open("/store")
    {
        Err(DbError::Locked { holder, .. }) => holder,
        other => panic!("{other:?}"),
    };
    assert_eq!(reopen(&a), LockHolder::OpenDatabase { read_only: false });
    assert_eq!(
        reopen(&b),
        LockHolder::ClosedDatabase {
            read_transactions: 1
        }
    );
    drop(read_b);
    db_a.close()?;
    Ok(())
}

/// A store on the real file system read through the memory map (the
/// default) and by `pread` (`read_mapped(false)`): the same answers; with
/// a page cache far smaller than the tree, the mapped store answers most
/// lookups from leaves searched in place, the other none.
#[test]
fn mapped_and_pread_reads_agree() -> keel::db::Result<()> {
    let dir = temp_dir("mapped");
    let key = |i: u32| format!("k{:08}", i.wrapping_mul(2_654_435_761) % 1_000_000);
    let db = Database::create(&dir)?;
    let txn = db.begin_write()?;
    let mut t = txn.open_table("t")?;
    for i in 0..20_000u32 {
        t.insert(key(i), i.to_le_bytes().repeat(20))?;
    }
    t.insert("big", vec![7u8; 100_000])?;
    txn.commit()?;
    db.close()?;
    let mut answers = Vec::new();
    for mapped in [true, false] {
        let db = Database::builder()
            .cache_bytes(64 << 10)
            .read_mapped(mapped)
            .open(&dir)?;
        let read = db.begin_read();
        let t = read.open_table("t")?;
        let mut got = Vec::new();
        for i in (0..20_000u32).step_by(7) {
            let v = t.get(key(i))?.expect("present");
            assert_eq!(v.as_bytes(), &i.to_le_bytes().repeat(20)[..]);
            got.push(v.to_vec());
        }
        assert_eq!(
            t.get("big")?.expect("present").as_bytes(),
            &[7u8; 100_000][..]
        );
        assert!(t.get("k")?.is_none() && t.get("k0000000x")?.is_none());
        got.push(t.iter().count().to_le_bytes().to_vec());
        let in_place = db.stats().cache.searched_in_place;
        if mapped {
            assert!(in_place > 1000, "{in_place} lookups searched in place");
        } else {
            assert_eq!(in_place, 0);
        }
        answers.push(got);
        drop(read);
        db.close()?;
    }
    assert_eq!(answers[0], answers[1]);
    std::fs::remove_dir_all(&dir).unwrap();
    Ok(())
}
