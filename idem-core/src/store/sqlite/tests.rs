//! The SQLite store's own tests: how its operations run (inline, pooled, around another
//! connection's locks), its checkpoints and durability settings, and the statements it
//! compiles. The contract is the conformance suite's.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, StatementStatus, TransactionBehavior};
use serde_json::json;

use super::connection::{CHECKPOINT_PAGES, CheckpointReservation, migrate};
use super::statements::{APPROVAL_TEXTS_OF_TENANT, EVICT_ON_CLAIM, PURGE_EXPIRED};
use super::{SqliteStore, Synchronous};
use crate::canonical::Fingerprint;
use crate::class::OrphanPolicy;
use crate::key::{KeyMaterial, LogicalKey, RecordKey};
use crate::record::{Outcome, Record, RecordState, Timestamp};
use crate::store::approvals::{self, ApprovalFilter, PendingApproval};
use crate::store::{Claim, ClaimRequest, ListFilter, PurgeFilter, Store, StoreError};

/// A directory of its own for each test, removed when the test ends.
fn temp_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("idem-sqlite-unit-{name}-"))
        .tempdir()
        .expect("create a temporary directory")
}

const LEASE: Duration = Duration::from_secs(60);
const TTL: Duration = Duration::from_secs(3600);

fn key(name: &str) -> RecordKey {
    LogicalKey::new(
        "idem-sqlite-unit",
        "tenant",
        "tool",
        KeyMaterial::Explicit { key: name.into() },
    )
    .record_key()
}

fn request(key: &RecordKey) -> ClaimRequest {
    ClaimRequest {
        key: key.clone(),
        tool: "send_email".into(),
        tenant: "tenant".into(),
        fingerprint: Fingerprint::of(&json!({"to": "a@example.com"})),
        lease: LEASE,
        orphans: OrphanPolicy::MarkUnknown,
        arguments: Some(r#"{"to":"a@example.com"}"#.into()),
        contract: None,
    }
}

async fn acquire(store: &SqliteStore, key: &RecordKey) -> u64 {
    match store.claim(&request(key)).await.expect("claim") {
        Claim::Acquired { fence, .. } => fence,
        other => panic!("expected to acquire {key}, got {other:?}"),
    }
}

/// A store whose writes may run inline: at `synchronous = NORMAL`.
fn inline_store(path: &Path) -> SqliteStore {
    SqliteStore::open(path)
        .expect("open")
        .with_synchronous(Synchronous::Normal)
        .expect("synchronous normal")
}

fn rows(path: &Path) -> i64 {
    let raw = Connection::open(path).expect("raw connection");
    raw.query_row("SELECT count(*) FROM idem_records", [], |r| r.get(0))
        .expect("count")
}

/// A record with its fence and clock readings zeroed: what two runs of the same operations
/// a few milliseconds apart must agree on. Lease and expiry keep their distance from the
/// last update, which the durations passed in decide.
fn timeless(mut r: Record) -> Record {
    let since = |t: Timestamp| Timestamp(t.0.saturating_sub(r.updated_at.0));
    r.state = match r.state {
        RecordState::InProgress { lease_until } => RecordState::InProgress {
            lease_until: since(lease_until),
        },
        RecordState::Completed {
            outcome,
            expires_at,
        } => RecordState::Completed {
            outcome,
            expires_at: since(expires_at),
        },
        RecordState::Unknown { last_error, .. } => RecordState::Unknown {
            since: Timestamp(0),
            last_error,
        },
    };
    r.fence = 0;
    r.created_at = Timestamp(0);
    r.updated_at = Timestamp(0);
    r
}

fn timeless_claim(c: Claim) -> Claim {
    match c {
        Claim::Acquired {
            steps, takeover, ..
        } => Claim::Acquired {
            fence: 0,
            steps,
            takeover,
        },
        Claim::Existing(r) => Claim::Existing(timeless(r)),
    }
}

/// Every operation of the store, successes and refusals, as text to compare.
async fn script(store: &SqliteStore) -> Vec<String> {
    let mut log = Vec::new();
    let outcome = Outcome::success(&json!({"id": 7, "tags": []}));
    let (k1, k2, k3, k4) = (key("one"), key("two"), key("three"), key("four"));

    let f1 = acquire(store, &k1).await;
    log.push(format!(
        "{:?}",
        store.journal(&k1, f1, "reserve", "1").await
    ));
    log.push(format!(
        "{:?}",
        store.renew(&k1, f1, LEASE).await.map(|_| ())
    ));
    log.push(format!(
        "{:?}",
        store.complete(&k1, f1, &outcome, TTL).await
    ));
    log.push(format!(
        "{:?}",
        store.claim(&request(&k1)).await.map(timeless_claim)
    ));

    let f2 = acquire(store, &k2).await;
    let stale = f2 - 1;
    let refused = store.complete(&k2, stale, &outcome, TTL).await;
    assert!(
        matches!(&refused, Err(StoreError::Fenced { fence, .. }) if *fence == stale),
        "a stale fence is refused, got {refused:?}"
    );
    log.push(format!("{:?}", refused.map_err(|_| "fenced")));
    log.push(format!("{:?}", store.release(&k2, stale).await));
    log.push(format!(
        "{:?}",
        store.mark_unknown(&k2, f2, "timed out").await
    ));
    log.push(format!(
        "{:?}",
        store
            .list(ListFilter::default())
            .await
            .map(|v| v.into_iter().map(timeless).collect::<Vec<_>>())
    ));
    log.push(format!(
        "{:?}",
        store.settle_unknown(&k2, f2, Some(&outcome), TTL).await
    ));

    let f3 = acquire(store, &k3).await;
    log.push(format!("{:?}", store.release(&k3, f3).await));
    log.push(format!("{:?}", store.get(&k3).await));

    acquire(store, &k4).await;
    log.push(format!("{:?}", store.force_release(&k4).await));
    log.push(format!(
        "{:?}",
        store.resolve(&k4, &outcome, TTL).await.map(timeless)
    ));
    log.push(format!(
        "{:?}",
        store.purge_expired(&PurgeFilter::up_to(10)).await
    ));
    for k in [&k1, &k2, &k3, &k4] {
        log.push(format!("{:?}", store.get(k).await.map(|r| r.map(timeless))));
    }
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_and_pooled_operations_leave_identical_records() {
    let dir = temp_dir("same");
    let inline = SqliteStore::open(dir.path().join("inline.inner.db"))
        .expect("open")
        .with_synchronous(Synchronous::Normal)
        .expect("synchronous normal");
    let durable = SqliteStore::open(dir.path().join("durable.inner.db")).expect("open");
    let pooled = SqliteStore::open(dir.path().join("pooled.inner.db"))
        .expect("open")
        .with_blocking_pool();
    assert!(inline.inner.inline_writes() && inline.inner.inline_reads());
    assert!(!durable.inner.inline_writes() && durable.inner.inline_reads());
    assert!(!pooled.inner.inline_writes() && !pooled.inner.inline_reads());
    let (a, b) = (script(&inline).await, script(&pooled).await);
    assert_eq!(a, b, "the same operations give the same answers either way");
    assert_eq!(
        script(&durable).await,
        a,
        "and so do writes on the pool with reads inline"
    );
    assert!(
        a.iter().any(|line| line.contains("fenced")) && a.iter().any(|l| l.contains("NotFound")),
        "the script covers refusals too: {a:#?}"
    );
    assert_eq!(inline.inner.db.counts.fell_back.load(Ordering::Relaxed), 0);
}

/// Another connection takes and drops the write lock over and over until told to stop.
/// It keeps the first lock until `met` says the store ran into it (or 10 s pass), so the
/// store meets a locked file for certain, however the threads are scheduled.
fn churn_the_lock(
    path: &Path,
    stop: Arc<AtomicBool>,
    met: impl Fn() -> bool + Send + 'static,
) -> (std::thread::JoinHandle<u32>, std::sync::mpsc::Receiver<()>) {
    let mut other = Connection::open(path).expect("raw connection");
    let (locked, first_lock) = std::sync::mpsc::channel();
    let holder = std::thread::spawn(move || {
        let mut held = 0;
        while !stop.load(Ordering::Relaxed) {
            let tx = other
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .expect("take the write lock");
            if held == 0 {
                locked.send(()).expect("the test waits for the first lock");
                let until = std::time::Instant::now() + Duration::from_secs(10);
                while !met() && std::time::Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(1));
                }
            } else {
                std::thread::sleep(Duration::from_millis(2));
            }
            tx.commit().expect("commit");
            held += 1;
            std::thread::sleep(Duration::from_millis(1));
        }
        held
    });
    (holder, first_lock)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_blocked_by_another_connection_go_to_the_pool_and_lose_nothing() {
    let dir = temp_dir("churn");
    let path = dir.path().join("idem.db");
    let store = Arc::new(inline_store(&path));
    let stop = Arc::new(AtomicBool::new(false));
    let watched = Arc::clone(&store);
    let (holder, first_lock) = churn_the_lock(&path, Arc::clone(&stop), move || {
        watched.inner.db.counts.fell_back.load(Ordering::Relaxed) > 0
    });
    first_lock
        .recv()
        .expect("the other connection holds the lock");
    // Four tasks at once also contend for the connection itself.
    let mut tasks = Vec::new();
    for t in 0..4 {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            for i in 0..50 {
                let k = key(&format!("churn-{t}-{i}"));
                let fence = acquire(&store, &k).await;
                let outcome = Outcome::success(&json!([t, i]));
                store
                    .complete(&k, fence, &outcome, TTL)
                    .await
                    .expect("complete");
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    stop.store(true, Ordering::Relaxed);
    assert!(holder.join().expect("holder") > 0);
    assert!(
        store.inner.db.counts.fell_back.load(Ordering::Relaxed) > 0,
        "some inline attempts met the other connection's lock"
    );
    assert_eq!(rows(&path), 200, "every record was written once");
    for t in 0..4 {
        for i in 0..50 {
            let k = key(&format!("churn-{t}-{i}"));
            match store.get(&k).await.expect("get").map(|r| r.state) {
                Some(RecordState::Completed { outcome, .. }) => {
                    assert_eq!(outcome, Outcome::success(&json!([t, i])))
                }
                other => panic!("{k} should be completed, got {other:?}"),
            }
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn the_runtime_keeps_running_while_another_connection_holds_the_lock() {
    let dir = temp_dir("runtime");
    let path = dir.path().join("idem.db");
    let store = inline_store(&path);
    let mut other = Connection::open(&path).expect("raw connection");
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let holder = std::thread::spawn(move || {
        let tx = other
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .expect("take the write lock");
        locked_tx.send(()).expect("signal");
        std::thread::sleep(Duration::from_millis(500));
        tx.commit().expect("commit");
    });
    locked_rx.recv().expect("lock taken");
    // On a single-threaded runtime, this ticker runs only while nothing blocks the thread.
    let ticks = Arc::new(AtomicU32::new(0));
    let ticker = tokio::spawn({
        let ticks = Arc::clone(&ticks);
        async move {
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
                ticks.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    let k = key("waiting");
    let fence = acquire(&store, &k).await;
    let during = ticks.load(Ordering::Relaxed);
    ticker.abort();
    holder.join().expect("holder");
    assert!(
        during >= 10,
        "the runtime kept running during the 500 ms wait ({during} ticks of 10 ms)"
    );
    assert_eq!(store.inner.db.counts.fell_back.load(Ordering::Relaxed), 1);
    // With the lock free again, the next write runs inline and sees the claim.
    store
        .complete(&k, fence, &Outcome::success(&json!(1)), TTL)
        .await
        .expect("complete");
    assert_eq!(store.inner.db.counts.fell_back.load(Ordering::Relaxed), 1);
}

fn wal_bytes(path: &Path) -> u64 {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(wal).map(|m| m.len()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_keep_the_wal_bounded() {
    let dir = temp_dir("checkpoint");
    let path = dir.path().join("idem.db");
    let store = SqliteStore::open(&path).expect("open");
    let page: i64 = {
        let raw = Connection::open(&path).expect("raw connection");
        raw.query_row("PRAGMA page_size", [], |r| r.get(0))
            .expect("page size")
    };
    let page = u64::try_from(page).expect("a positive page size");
    // Each claim writes at least three pages (the row, its key's index entry, its state's
    // index entry): enough claims for twenty checkpoints or more.
    let rounds = 20 * CHECKPOINT_PAGES / 3;
    let (mut first_half, mut largest) = (0, 0);
    for i in 0..rounds {
        acquire(&store, &key(&format!("wal-{i}"))).await;
        largest = largest.max(wal_bytes(&path));
        if i == rounds / 2 {
            first_half = largest;
        }
    }
    // Without checkpoints the WAL would hold all of those pages.
    let unbounded = u64::from(rounds) * 3 * page;
    let checkpoints = store.inner.db.counts.checkpoints.load(Ordering::Relaxed);
    assert!(
        checkpoints >= 10,
        "{checkpoints} checkpoints in {rounds} commits"
    );
    assert!(
        largest * 5 < unbounded,
        "the WAL reached {largest} bytes; without checkpoints it would pass {unbounded}"
    );
    assert!(
        largest < 2 * first_half,
        "the WAL stopped growing: {first_half} bytes after half the commits, {largest} after all"
    );
    assert_eq!(rows(&path), i64::from(rounds));
}

#[tokio::test(flavor = "current_thread")]
async fn a_queued_checkpoint_is_not_kept_waiting_by_inline_operations() {
    let dir = temp_dir("queued-checkpoint");
    let path = dir.path().join("idem.db");
    let store = inline_store(&path);
    // A checkpoint reserved and queued on the pool, not yet running (as `write` leaves it
    // when a commit crosses the threshold). With the connection free, an inline claim
    // could take it ahead of the checkpoint, again and again.
    assert!(!store.inner.db.checkpoint_waiting());
    store.inner.db.checkpointing.store(true, Ordering::Release);
    let reservation = CheckpointReservation::of(&store.inner.db);
    let k = key("behind");
    let fence = acquire(&store, &k).await;
    assert_eq!(
        store.inner.db.counts.stood_aside.load(Ordering::Relaxed),
        1,
        "the claim waited for the connection on the pool, behind the checkpoint"
    );
    // The checkpoint ran (or its task was dropped): the reservation goes, and operations
    // run inline again; nothing was lost on the way.
    drop(reservation);
    assert!(!store.inner.db.checkpoint_waiting());
    store
        .complete(&k, fence, &Outcome::success(&json!(1)), TTL)
        .await
        .expect("complete");
    assert_eq!(store.inner.db.counts.stood_aside.load(Ordering::Relaxed), 1);
    assert_eq!(rows(&path), 1);
}

/// `PRAGMA synchronous` on the store's connection, the one every operation and every
/// checkpoint runs on: 2 is FULL, 1 is NORMAL.
fn synchronous_of(store: &SqliteStore) -> i64 {
    store
        .inner
        .db
        .lock()
        .conn
        .query_row("PRAGMA synchronous", [], |r| r.get(0))
        .expect("read PRAGMA synchronous")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_every_commit_survives_a_power_loss() {
    let dir = temp_dir("durable");
    let path = dir.path().join("idem.db");
    let store = SqliteStore::open(&path).expect("open");
    assert_eq!(
        synchronous_of(&store),
        2,
        "synchronous = FULL: each commit syncs the WAL"
    );
    // Still so after writes and a checkpoint on the blocking pool.
    for i in 0..(CHECKPOINT_PAGES / 2) {
        acquire(&store, &key(&format!("durable-{i}"))).await;
    }
    while store.inner.db.checkpoint_waiting() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(store.inner.db.counts.checkpoints.load(Ordering::Relaxed) > 0);
    assert_eq!(synchronous_of(&store), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn normal_is_an_opt_in_whose_writes_run_inline() {
    let dir = temp_dir("normal");
    let path = dir.path().join("idem.db");
    let store = SqliteStore::open(&path)
        .expect("open")
        .with_synchronous(Synchronous::Normal)
        .expect("synchronous normal");
    assert_eq!(
        synchronous_of(&store),
        1,
        "synchronous = NORMAL when asked for"
    );
    assert!(store.inner.inline_writes());
    for i in 0..(CHECKPOINT_PAGES / 2) {
        acquire(&store, &key(&format!("normal-{i}"))).await;
    }
    while store.inner.db.checkpoint_waiting() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(store.inner.db.counts.checkpoints.load(Ordering::Relaxed) > 0);
    assert_eq!(synchronous_of(&store), 1, "a checkpoint keeps the setting");
    // A second store on the same file chooses for its own connection.
    let other = SqliteStore::open(&path).expect("open again");
    assert_eq!(synchronous_of(&other), 2);
    assert_eq!(synchronous_of(&store), 1);
    let back = store
        .with_synchronous(Synchronous::Full)
        .expect("synchronous full");
    assert_eq!(synchronous_of(&back), 2);
    assert!(!back.inner.inline_writes() && back.inner.inline_reads());
}

#[test]
fn the_claim_eviction_is_compiled_once() {
    let dir = temp_dir("reprepare");
    let conn = Connection::open(dir.path().join("idem.db")).expect("open");
    migrate(&conn, &dir.path().join("idem.db")).unwrap_or_else(|_| panic!("schema"));
    // As the store runs them: from rusqlite's statement cache, which clears the bindings
    // of a statement it takes back.
    let recompiled = |sql: &str, params: &dyn Fn(i64) -> Vec<Value>| {
        let mut count = 0;
        for now in 1..=4 {
            let mut stmt = conn.prepare_cached(sql).expect("prepare");
            stmt.execute(rusqlite::params_from_iter(params(now)))
                .expect("execute");
            count = stmt.get_status(StatementStatus::RePrepare);
        }
        count
    };
    assert_eq!(recompiled(EVICT_ON_CLAIM, &|now| vec![now.into()]), 0);
    // What the literal limit avoids: a bound limit, cleared and bound again, recompiles
    // the statement at every execution, even bound to the same value each time.
    let purge = |now: i64| vec![now.into(), now.into(), Value::Null, 2.into()];
    assert_eq!(recompiled(PURGE_EXPIRED, &purge), 4);
}

fn approval(key: &RecordKey, tenant: &str, now: Timestamp) -> PendingApproval {
    PendingApproval {
        key: key.clone(),
        namespace: "idem-sqlite-unit".into(),
        tenant: tenant.into(),
        tool: "wire".into(),
        downstream_key: "idem-wire".into(),
        fingerprint: Fingerprint::of(&json!({"cents": 1})),
        arguments: json!({"cents": 1}),
        secret_parameters: false,
        policy: None,
        approvers: 1,
        approved_by: Vec::new(),
        requested_at: now,
        expires_at: now.plus(TTL),
        decision: None,
    }
}

/// A version 2 file from before pending approvals gains their table when it is opened, at
/// the same version; a swap that finds another text changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_from_before_approvals_gains_their_table() {
    let dir = temp_dir("before-approvals");
    let path = dir.path().join("idem.db");
    drop(SqliteStore::open(&path).expect("create"));
    {
        let raw = Connection::open(&path).expect("raw connection");
        raw.execute_batch("DROP TABLE idem_approvals")
            .expect("a version 2 file without approvals");
    }
    let store = SqliteStore::open(&path).expect("open a file from before approvals");
    let k = key("approval");
    let entry = approval(&k, "tenant", store.now().await.expect("now"));
    assert_eq!(
        approvals::request(&store, &entry).await.expect("request"),
        entry
    );
    let text = store
        .approval_text(&k)
        .await
        .expect("text")
        .expect("an entry");
    assert!(
        !store
            .swap_approval(&k, None, &entry, "{}")
            .await
            .expect("swap"),
        "an entry is there"
    );
    assert!(
        !store
            .swap_approval(&k, Some("{}"), &entry, "{}")
            .await
            .expect("swap"),
        "its text is another"
    );
    assert_eq!(store.approval_text(&k).await.expect("text"), Some(text));
    let listed = store
        .approval_texts(&ApprovalFilter {
            tenant: Some("tenant".into()),
            tool: Some("wire".into()),
            ..ApprovalFilter::default()
        })
        .await
        .expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].0, k);
    drop(store);
    let raw = Connection::open(&path).expect("raw connection");
    let version: i64 = raw
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("version");
    // The approvals' table came without a new version; the contract column made version 3.
    assert_eq!(version, 3, "a version 2 file is brought to version 3");
}

/// A file from before the fence floor gains its table and trigger when it is opened: a key
/// released, then claimed again on the same clock reading, is fenced above its old holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_from_before_the_fence_floor_gains_it() {
    let dir = temp_dir("before-floor");
    let path = dir.path().join("idem.db");
    drop(SqliteStore::open(&path).expect("create"));
    Connection::open(&path)
        .expect("raw connection")
        .execute_batch("DROP TRIGGER idem_records_fence_floor; DROP TABLE idem_fence_floor")
        .expect("a file without the fence floor");
    let clock = Arc::new(crate::store::memory::ManualClock::new());
    let store = SqliteStore::open(&path)
        .expect("open a file from before the fence floor")
        .with_clock(clock)
        .expect("a manual clock");
    let k = key("floor");
    let old = acquire(&store, &k).await;
    assert!(store.release(&k, old).await.expect("release"));
    let new = acquire(&store, &k).await;
    assert!(
        new > old,
        "claimed again at the same instant: fence {new} after {old}"
    );
}

#[test]
fn a_tenants_approvals_are_found_through_the_index() {
    let dir = temp_dir("approvals-plan");
    let conn = Connection::open(dir.path().join("idem.db")).expect("open");
    migrate(&conn, &dir.path().join("idem.db")).unwrap_or_else(|_| panic!("schema"));
    let mut stmt = conn
        .prepare(&format!("EXPLAIN QUERY PLAN {APPROVAL_TEXTS_OF_TENANT}"))
        .expect("prepare");
    let plan: Vec<String> = stmt
        .query_map(rusqlite::params!["tenant", "wire"], |row| row.get(3))
        .expect("plan")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert!(
        plan.iter()
            .any(|step| step.contains("idem_approvals_tenant_tool")),
        "{plan:?}"
    );
}

#[test]
fn the_stores_thread_outlives_a_job_that_panics() {
    // Its connection closed already (there is none): the drop waits only for the thread.
    let closing = super::worker::Closing::new("idem.db".into());
    let worker = super::worker::Worker::new(closing.watch());
    drop(closing);
    let (told, heard) = std::sync::mpsc::channel();
    let panicking = told.clone();
    worker
        .run(Box::new(move || {
            let _keep = panicking;
            panic!("a job that panics");
        }))
        .expect("the job is taken");
    worker
        .run(Box::new(move || told.send("ran").expect("send")))
        .expect("the next job is taken");
    assert_eq!(
        heard.recv_timeout(Duration::from_secs(30)),
        Ok("ran"),
        "the job after a panic still runs"
    );
}

/// What a program that opens or copies the file right after the store was dropped finds:
/// no write-ahead log beside it, and the file alone (a copy of it) holding `k` completed.
fn assert_closed_holding(path: &Path, k: &RecordKey, round: u32) {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    assert!(
        !Path::new(&wal).exists(),
        "round {round}: the write-ahead log is still beside the file after the drop"
    );
    let copy = path.with_extension("copy");
    std::fs::copy(path, &copy).expect("copy the file alone");
    let raw = Connection::open(&copy).expect("open the copy");
    let state: Option<String> = raw
        .query_row(
            "SELECT state FROM idem_records WHERE key = ?1",
            [k.as_str()],
            |r| r.get(0),
        )
        .optional()
        .expect("read the copy");
    assert_eq!(
        state.as_deref(),
        Some("completed"),
        "round {round}: the file alone lacks the record written before the drop"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn dropping_the_last_handle_leaves_the_whole_database_in_the_file() {
    let dir = temp_dir("drop");
    // Writes at FULL run on the store's thread: its last job may still hold the connection
    // when the caller, answered, drops the store.
    for round in 0..20 {
        let path = dir.path().join(format!("idem-{round}.db"));
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).expect("open"));
        let shared = Arc::clone(&store);
        let k = key("dropped");
        let fence = match shared.claim(&request(&k)).await.expect("claim") {
            Claim::Acquired { fence, .. } => fence,
            other => panic!("expected to acquire {k}, got {other:?}"),
        };
        drop(shared);
        store
            .complete(&k, fence, &Outcome::success(&json!(1)), TTL)
            .await
            .expect("complete");
        drop(store);
        assert_closed_holding(&path, &k, round);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn an_operation_its_caller_gave_up_on_is_in_the_file_when_the_drop_returns() {
    let dir = temp_dir("drop-abandoned");
    let path = dir.path().join("idem.db");
    let store = SqliteStore::open(&path).expect("open");
    let k = key("abandoned");
    let fence = acquire(&store, &k).await;
    {
        // Polled once: handed to the store's thread, then dropped by its caller.
        let outcome = Outcome::success(&json!(1));
        let complete = std::pin::pin!(store.complete(&k, fence, &outcome, TTL));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let _ = complete.poll(&mut cx);
    }
    drop(store);
    assert_closed_holding(&path, &k, 0);
}

#[tokio::test(flavor = "current_thread")]
async fn a_checkpoint_queued_on_the_pool_does_not_keep_the_file_open() {
    let dir = temp_dir("drop-checkpoint");
    let path = dir.path().join("idem.db");
    let store = SqliteStore::open(&path).expect("open");
    let k = key("checkpointed");
    let fence = acquire(&store, &k).await;
    store
        .complete(&k, fence, &Outcome::success(&json!(1)), TTL)
        .await
        .expect("complete");
    // Reserved, not yet run (as a commit that crosses the threshold leaves it when the
    // blocking pool is busy).
    assert!(!store.inner.db.checkpoint_waiting());
    store.inner.db.checkpointing.store(true, Ordering::Release);
    let queued = CheckpointReservation::of(&store.inner.db);
    drop(store);
    assert_closed_holding(&path, &k, 0);
    // It runs (or its task is dropped) after the store is gone: nothing to do.
    queued.run();
}

#[test]
fn a_store_dropped_on_its_own_thread_closes_without_waiting_for_itself() {
    let dir = temp_dir("drop-on-worker");
    let path = dir.path().join("idem.db");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let store = Arc::new(SqliteStore::open(&path).expect("open"));
    let k = key("on-worker");
    runtime.block_on(async {
        let fence = acquire(&store, &k).await;
        store
            .complete(&k, fence, &Outcome::success(&json!(1)), TTL)
            .await
            .expect("complete");
    });
    // The last handle, dropped by a job on the store's own thread (as a clock the store
    // owns could do): joining the thread there would wait for itself.
    let (go, drop_now) = std::sync::mpsc::channel::<()>();
    let (done, dropped) = std::sync::mpsc::channel();
    let last = Arc::clone(&store);
    store
        .inner
        .worker
        .run(Box::new(move || {
            let _ = drop_now.recv();
            drop(last);
            let _ = done.send(());
        }))
        .expect("the job is taken");
    drop(store);
    go.send(()).expect("the job waits");
    assert_eq!(
        dropped.recv_timeout(Duration::from_secs(30)),
        Ok(()),
        "the drop on the store's thread returned"
    );
    assert_closed_holding(&path, &k, 0);
}
