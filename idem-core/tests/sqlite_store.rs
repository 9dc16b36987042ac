#![cfg(all(feature = "sqlite", feature = "conformance"))]
//! The SQLite store: the conformance suite (its cases of two instances open the file twice,
//! as two processes would), plus what only a file on disk can show (persistence, locks held
//! by others, damaged files, files from an older schema).

mod support;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem_core::store::conformance::{self, Subject};
use idem_core::store::sqlite::{SqliteStore, Synchronous};
use idem_core::store::{Claim, ListFilter, Store, StoreError};
use idem_core::{Fingerprint, OrphanPolicy, Outcome, RecordState, ToolError};
use serde_json::json;
use support::claims::{LEASE, TTL, acquire, claim_request, record_key};

/// A directory of its own for each test, removed when the test ends.
fn temp_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("idem-sqlite-test-{name}-"))
        .tempdir()
        .expect("create a temporary directory")
}

/// Count the rows in the table, from outside the store.
fn rows(path: &Path) -> i64 {
    let raw = rusqlite::Connection::open(path).expect("raw connection");
    raw.query_row("SELECT count(*) FROM idem_records", [], |r| r.get(0))
        .expect("count")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_store_conforms() {
    let dir = temp_dir("conformance");
    let cases = AtomicUsize::new(0);
    conformance::run_all("sqlite", || {
        let path = dir
            .path()
            .join(format!("case-{}.db", cases.fetch_add(1, Ordering::Relaxed)));
        // Each case may open the file a second time: another process on the same host.
        async move {
            Subject::reopenable(path, |path| async move { SqliteStore::open(path) })
                .await
                .expect("open")
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_survive_closing_and_reopening() {
    let dir = temp_dir("reopen");
    let path = dir.path().join("idem.db");
    let done = record_key("done");
    let journaled = record_key("journaled");
    let failure = Outcome::Failure(
        ToolError::terminal("insufficient funds").with_details(json!({"balance": 0})),
    );
    let success = Outcome::Success("{ \"id\" : 7 ,\"tags\":[] }".into());
    let journaled_fence;
    {
        let store = SqliteStore::open(&path).expect("open");
        let fence = acquire(
            &store,
            &claim_request(&done, LEASE, OrphanPolicy::MarkUnknown),
        )
        .await;
        store
            .complete(&done, fence, &success, TTL)
            .await
            .expect("complete");
        journaled_fence = acquire(
            &store,
            &claim_request(&journaled, LEASE, OrphanPolicy::MarkUnknown),
        )
        .await;
        store
            .journal(&journaled, journaled_fence, "reserve", r#"{"id":1}"#)
            .await
            .expect("journal");
        let failed = record_key("failed");
        let f = acquire(
            &store,
            &claim_request(&failed, LEASE, OrphanPolicy::MarkUnknown),
        )
        .await;
        store
            .complete(&failed, f, &failure, TTL)
            .await
            .expect("complete with a terminal error");
    }

    let store = SqliteStore::open(&path).expect("reopen");
    let record = store.get(&done).await.expect("get").expect("record kept");
    match record.state {
        RecordState::Completed { outcome, .. } => {
            assert_eq!(outcome, success, "the outcome comes back byte for byte")
        }
        other => panic!("expected Completed, got {other:?}"),
    }
    assert_eq!(record.tool, "send_email");
    assert_eq!(
        record.fingerprint,
        Fingerprint::of(&json!({"to": "a@example.com"}))
    );
    assert_eq!(
        record.arguments.as_deref(),
        Some(r#"{"to":"a@example.com"}"#)
    );
    match store
        .claim(&claim_request(&done, LEASE, OrphanPolicy::MarkUnknown))
        .await
        .expect("claim")
    {
        Claim::Existing(r) => assert!(matches!(r.state, RecordState::Completed { .. })),
        other => panic!("a completed key is not claimed again after a restart, got {other:?}"),
    }
    match store
        .get(&record_key("failed"))
        .await
        .expect("get")
        .map(|r| r.state)
    {
        Some(RecordState::Completed { outcome, .. }) => assert_eq!(outcome, failure),
        other => panic!("expected the terminal error, got {other:?}"),
    }

    let held = store
        .get(&journaled)
        .await
        .expect("get")
        .expect("in-progress record kept");
    assert_eq!(held.fence, journaled_fence);
    assert_eq!(held.steps.len(), 1);
    assert_eq!(held.steps[0].step, "reserve");
    // The holder's lease outlives the restart: it may still finish its call.
    store
        .complete(
            &journaled,
            journaled_fence,
            &Outcome::success(&json!(true)),
            TTL,
        )
        .await
        .expect("the holder completes after the store reopens");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_waits_for_another_connections_write_lock() {
    let dir = temp_dir("busy");
    let path = dir.path().join("idem.db");
    let store = SqliteStore::open(&path).expect("open");
    // Another process holds the write lock for a while.
    let mut other = rusqlite::Connection::open(&path).expect("raw connection");
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let holder = std::thread::spawn(move || {
        let tx = other
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .expect("take the write lock");
        locked_tx.send(()).expect("signal");
        // Longer than the store's retry back-off alone: only the busy timeout bridges it.
        std::thread::sleep(Duration::from_millis(800));
        tx.commit().expect("commit");
    });
    locked_rx.recv().expect("lock taken");
    let k = record_key("busy");
    let claim = store
        .claim(&claim_request(&k, LEASE, OrphanPolicy::MarkUnknown))
        .await;
    assert!(
        matches!(claim, Ok(Claim::Acquired { .. })),
        "the claim waits for the lock instead of failing, got {claim:?}"
    );
    holder.join().expect("holder thread");
}

#[test]
fn a_missing_directory_is_unavailable() {
    let dir = temp_dir("missing");
    let path = dir.path().join("no-such-directory").join("idem.db");
    match SqliteStore::open(&path) {
        Err(StoreError::Unavailable(msg)) => assert!(
            msg.contains("no-such-directory"),
            "the error names the path: {msg}"
        ),
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[test]
fn a_file_that_is_not_a_database_is_unavailable() {
    let dir = temp_dir("not-a-db");
    let path = dir.path().join("notes.txt");
    std::fs::write(
        &path,
        "these are not the records you are looking for\n".repeat(100),
    )
    .expect("write");
    match SqliteStore::open(&path) {
        Err(StoreError::Unavailable(msg)) => {
            assert!(msg.contains("notes.txt"), "the error names the path: {msg}")
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[test]
fn a_newer_schema_is_refused() {
    let dir = temp_dir("schema");
    let path = dir.path().join("idem.db");
    drop(SqliteStore::open(&path).expect("create"));
    drop(SqliteStore::open(&path).expect("opening twice is idempotent"));
    let raw = rusqlite::Connection::open(&path).expect("raw connection");
    raw.pragma_update(None, "user_version", 99)
        .expect("bump version");
    drop(raw);
    match SqliteStore::open(&path) {
        Err(StoreError::Unavailable(msg)) => {
            assert!(msg.contains("99"), "the error names the version: {msg}")
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

/// A file written by the idem that had no tenants (schema version 1) gains the column when it
/// is opened: its records read back with no tenant, new ones with theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_from_before_tenants_gains_the_column() {
    let dir = temp_dir("schema-v1");
    let path = dir.path().join("idem.db");
    let old = record_key("old");
    {
        let raw = rusqlite::Connection::open(&path).expect("raw connection");
        raw.execute_batch(
            "CREATE TABLE idem_records (
                key TEXT PRIMARY KEY NOT NULL, tool TEXT NOT NULL, fingerprint TEXT NOT NULL,
                fence INTEGER NOT NULL,
                state TEXT NOT NULL CHECK (state IN ('in_progress', 'completed', 'unknown')),
                lease_until INTEGER, expires_at INTEGER, since INTEGER, last_error TEXT,
                outcome TEXT, steps TEXT NOT NULL, arguments TEXT,
                created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
             CREATE INDEX idem_records_state_expires ON idem_records (state, expires_at);
             PRAGMA user_version = 1;",
        )
        .expect("a version 1 schema");
        raw.execute(
            "INSERT INTO idem_records VALUES (?1, 'send_email', ?2, 7, 'unknown', NULL, NULL, \
             1000, 'timed out', NULL, '[]', NULL, 1000, 1000)",
            [
                old.as_str(),
                &Fingerprint::of(&json!({"to": "a@example.com"})).to_hex(),
            ],
        )
        .expect("an old record");
    }
    for _ in 0..2 {
        // Opening again finds the column there and changes nothing.
        let store = SqliteStore::open(&path).expect("open a version 1 file");
        let record = store.get(&old).await.expect("get").expect("the old record");
        assert_eq!(record.tenant, "", "a record from before tenants has none");
        assert_eq!(record.contract, None, "nor a contract");
        assert_eq!(record.fence, 7);
        assert!(matches!(record.state, RecordState::Unknown { .. }));
        let new = record_key("new");
        let mut req = claim_request(&new, LEASE, OrphanPolicy::MarkUnknown);
        req.tenant = "acme".into();
        req.contract = Some(std::sync::Arc::new(idem_core::Contract::new(
            idem_core::ToolClass::NonIdempotentWrite,
            "2",
            Duration::from_secs(60),
            LEASE,
        )));
        if let Claim::Acquired { .. } = store.claim(&req).await.expect("claim") {
            let listed = store
                .list(ListFilter {
                    tenant: Some("acme".into()),
                    ..ListFilter::default()
                })
                .await
                .expect("list");
            assert_eq!(listed.len(), 1);
            assert_eq!(listed[0].key, new);
            assert_eq!(listed[0].tenant, "acme");
            assert_eq!(
                listed[0].contract, req.contract,
                "a new record keeps its contract"
            );
        }
    }
    let raw = rusqlite::Connection::open(&path).expect("raw connection");
    let version: i64 = raw
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("version");
    assert_eq!(
        version, 3,
        "brought to the version with tenants and contracts"
    );
}

/// A file from before budgets (version 3, every other table there) gains their table when it
/// is opened, at the same version, and keeps its records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_from_before_budgets_gains_their_table() {
    let dir = temp_dir("before-budgets");
    let path = dir.path().join("idem.db");
    let k = record_key("kept");
    {
        let store = SqliteStore::open(&path).expect("create");
        acquire(&store, &claim_request(&k, LEASE, OrphanPolicy::TakeOver)).await;
    }
    rusqlite::Connection::open(&path)
        .expect("raw connection")
        .execute_batch("DROP TABLE idem_budgets")
        .expect("a file from before budgets");
    for round in 0..2 {
        // Opening again finds the table there and changes nothing.
        let store = SqliteStore::open(&path).expect("open a file from before budgets");
        assert!(store.get(&k).await.expect("get").is_some(), "its record");
        let (expected, text) = match round {
            0 => (None, "1"),
            _ => (Some("1"), "2"),
        };
        assert!(
            store
                .swap_budget("acme:run:refunds", expected, text, TTL)
                .await
                .expect("swap")
        );
        assert_eq!(
            store.budget_text("acme:run:refunds").await.expect("budget"),
            Some(text.to_owned())
        );
    }
    let raw = rusqlite::Connection::open(&path).expect("raw connection");
    let version: i64 = raw
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("version");
    assert_eq!(version, 3, "budgets came without a new version");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_row_is_reported_not_replayed() {
    let dir = temp_dir("corrupt");
    let path = dir.path().join("idem.db");
    let store = SqliteStore::open(&path).expect("open");
    let damaged = record_key("damaged");
    let fence = acquire(
        &store,
        &claim_request(&damaged, LEASE, OrphanPolicy::MarkUnknown),
    )
    .await;
    store
        .complete(&damaged, fence, &Outcome::success(&json!({"id": 1})), TTL)
        .await
        .expect("complete");
    let bad_fence = record_key("bad-fence");
    acquire(
        &store,
        &claim_request(&bad_fence, LEASE, OrphanPolicy::MarkUnknown),
    )
    .await;

    let raw = rusqlite::Connection::open(&path).expect("raw connection");
    raw.execute(
        "UPDATE idem_records SET outcome = ?1 WHERE key = ?2",
        ["{not json", damaged.as_str()],
    )
    .expect("damage the outcome");
    raw.execute(
        "UPDATE idem_records SET fence = 'seven' WHERE key = ?1",
        [bad_fence.as_str()],
    )
    .expect("damage the fence");

    match store.get(&damaged).await {
        Err(StoreError::Corrupt { key, reason }) => {
            assert_eq!(key, damaged);
            assert!(
                reason.contains("outcome"),
                "the reason names the column: {reason}"
            );
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    let claim = store
        .claim(&claim_request(&damaged, LEASE, OrphanPolicy::MarkUnknown))
        .await;
    assert!(
        matches!(claim, Err(StoreError::Corrupt { .. })),
        "a corrupt record is neither replayed nor overwritten, got {claim:?}"
    );
    match store.get(&bad_fence).await {
        Err(StoreError::Corrupt { key, reason }) => {
            assert_eq!(key, bad_fence);
            assert!(
                reason.contains("fence"),
                "the reason names the column: {reason}"
            );
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_evict_expired_records() {
    let dir = temp_dir("evict");
    let path = dir.path().join("idem.db");
    let store = SqliteStore::open(&path).expect("open");
    for i in 0..3 {
        let k = record_key(&format!("short-{i}"));
        let fence = acquire(&store, &claim_request(&k, LEASE, OrphanPolicy::MarkUnknown)).await;
        store
            .complete(&k, fence, &Outcome::success(&json!(i)), TTL)
            .await
            .expect("complete");
    }
    assert_eq!(rows(&path), 3);
    // Let an hour pass for these records, without waiting one.
    let raw = rusqlite::Connection::open(&path).expect("raw connection");
    raw.execute("UPDATE idem_records SET expires_at = 0", [])
        .expect("expire");
    drop(raw);
    assert_eq!(store.get(&record_key("short-0")).await.expect("get"), None);
    acquire(
        &store,
        &claim_request(&record_key("new-0"), LEASE, OrphanPolicy::MarkUnknown),
    )
    .await;
    acquire(
        &store,
        &claim_request(&record_key("new-1"), LEASE, OrphanPolicy::MarkUnknown),
    )
    .await;
    assert_eq!(
        rows(&path),
        2,
        "two claims evicted the three expired records and kept their own"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builders_apply() {
    let dir = temp_dir("builders");
    let path = dir.path().join("idem.db");
    let store = SqliteStore::open(&path)
        .expect("open")
        .with_synchronous(Synchronous::Normal)
        .expect("synchronous normal")
        .with_max_outcome_bytes(8);
    let k = record_key("limited");
    let fence = acquire(&store, &claim_request(&k, LEASE, OrphanPolicy::MarkUnknown)).await;
    let big = store
        .complete(&k, fence, &Outcome::Success("\"123456789\"".into()), TTL)
        .await;
    assert!(
        matches!(
            big,
            Err(StoreError::TooLarge {
                bytes: 11,
                limit: 8
            })
        ),
        "got {big:?}"
    );
    store
        .complete(&k, fence, &Outcome::Success("[1,2]".into()), TTL)
        .await
        .expect("a small outcome fits");
    assert!(format!("{store:?}").contains("synchronous: Normal"));
    let durable = SqliteStore::open(&path).expect("open again");
    assert!(
        format!("{durable:?}").contains("synchronous: Full"),
        "the default"
    );
}
