//! The Redis store against private `redis-server`s this test starts: what needs a server
//! configured, flushed, restarted or replicated, which the shared server must never be.
//!
//! Needs only the `redis-server` binary; without it every test says why it is skipped and
//! passes, unless `IDEM_REQUIRE_SERVICES=1`.

#![cfg(feature = "redis")]

mod support;

use std::time::Duration;

use idem_core::store::redis::{RedisOptions, RedisStore};
use idem_core::{Claim, OrphanPolicy, Outcome, RecordKey, Store, StoreError, Timestamp};
use serde_json::json;
use support::claims::{LEASE, TTL, acquire, claim_request, record_key};
use support::redis_server::{self, RedisServer};

const PREFIX: &str = "idem-private";

async fn flushall(server: &RedisServer) {
    let mut conn = server.connection().await;
    let _: () = redis::cmd("FLUSHALL")
        .query_async(&mut conn)
        .await
        .expect("FLUSHALL on the private server");
}

// ---- 1. Eviction -------------------------------------------------------------------------

#[tokio::test]
async fn a_server_that_evicts_is_refused() {
    if !redis_server::available("a_server_that_evicts_is_refused") {
        return;
    }
    for policy in [
        "allkeys-lru",
        "volatile-lru",
        "volatile-ttl",
        "allkeys-random",
    ] {
        let server = RedisServer::start(&["--maxmemory-policy", policy]).await;
        match RedisStore::connect(&server.url(), PREFIX).await {
            Err(StoreError::Unavailable(why)) => {
                for needle in [
                    "maxmemory-policy",
                    policy,
                    "CONFIG SET maxmemory-policy noeviction",
                ] {
                    assert!(why.contains(needle), "{policy}: {why:?} names {needle:?}");
                }
            }
            other => panic!("{policy}: expected the server to be refused, got {other:?}"),
        }
    }
    // An operator who asserts the policy is believed (and owns the consequences).
    let server = RedisServer::start(&["--maxmemory-policy", "allkeys-lru"]).await;
    let store = RedisStore::connect_with(
        &server.url(),
        PREFIX,
        RedisOptions::new().assume_noeviction(),
    )
    .await
    .expect("assume_noeviction skips the check");
    acquire(
        &store,
        &claim_request(&record_key("assumed"), LEASE, OrphanPolicy::TakeOver),
    )
    .await;
}

#[tokio::test]
async fn a_replica_timeout_longer_than_the_response_timeout_is_refused() {
    // Checked before connecting: no server needed.
    let options = RedisOptions::new().wait_for_replicas(1, Duration::from_secs(5));
    match RedisStore::connect_with("redis://127.0.0.1:1/", PREFIX, options).await {
        Err(StoreError::Unavailable(why)) => assert!(why.contains("response timeout"), "{why}"),
        other => panic!("expected the options to be refused, got {other:?}"),
    }
}

#[tokio::test]
async fn a_server_that_never_evicts_is_accepted() {
    if !redis_server::available("a_server_that_never_evicts_is_accepted") {
        return;
    }
    let server = RedisServer::start(&["--maxmemory-policy", "noeviction"]).await;
    let store = RedisStore::connect(&server.url(), PREFIX)
        .await
        .expect("noeviction is accepted");
    acquire(
        &store,
        &claim_request(&record_key("accepted"), LEASE, OrphanPolicy::TakeOver),
    )
    .await;
}

// ---- 2. Fences after data loss -----------------------------------------------------------

#[tokio::test]
async fn fences_keep_increasing_after_the_data_is_flushed() {
    if !redis_server::available("fences_keep_increasing_after_the_data_is_flushed") {
        return;
    }
    let server = RedisServer::start(&[]).await;
    let store = RedisStore::connect(&server.url(), PREFIX)
        .await
        .expect("connect");
    let k = record_key("flushed");
    let before = Timestamp::now().as_millis();
    let stale = acquire(&store, &claim_request(&k, LEASE, OrphanPolicy::TakeOver)).await;
    flushall(&server).await;
    let fresh = acquire(&store, &claim_request(&k, LEASE, OrphanPolicy::TakeOver)).await;
    let late = store
        .complete(&k, stale, &Outcome::success(&json!("stale")), TTL)
        .await;
    assert!(
        fresh > stale,
        "a claim after the data was lost gets a greater fence ({fresh} after {stale}); \
         the stale holder's complete gave {late:?}"
    );
    assert!(
        matches!(late, Err(StoreError::Fenced { fence, .. }) if fence == stale),
        "the holder from before the loss is fenced, got {late:?}"
    );
    // In microseconds: a flush and a new claim within the millisecond of the first claim
    // (this test, on a fast machine) got the very same fence when it was milliseconds.
    assert!(
        stale.abs_diff(before * 1000) < 60_000_000,
        "a key's first fence is the server clock in µs, got {stale} (client clock {before} ms)"
    );
    store
        .complete(&k, fresh, &Outcome::success(&json!("fresh")), TTL)
        .await
        .expect("the new holder records its outcome");
}

#[tokio::test]
async fn fences_keep_increasing_after_a_restart_without_persistence() {
    if !redis_server::available("fences_keep_increasing_after_a_restart_without_persistence") {
        return;
    }
    let mut server = RedisServer::start(&[]).await;
    let store = RedisStore::connect(&server.url(), PREFIX)
        .await
        .expect("connect");
    let k = record_key("restarted");
    let stale = acquire(&store, &claim_request(&k, LEASE, OrphanPolicy::TakeOver)).await;
    server.restart().await;

    // The first command after the restart may meet the dropped connection; a claim that
    // certainly never reached the server is safe to send again.
    let mut fresh = None;
    for _ in 0..20 {
        match store
            .claim(&claim_request(&k, LEASE, OrphanPolicy::TakeOver))
            .await
        {
            Ok(Claim::Acquired { fence, .. }) => {
                fresh = Some(fence);
                break;
            }
            Ok(other) => panic!("the restarted server has no record, got {other:?}"),
            Err(StoreError::Unavailable(_)) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("claim after restart: {e}"),
        }
    }
    let fresh = fresh.expect("a claim succeeds once the server is back");
    assert!(
        fresh > stale,
        "a claim after the restart gets a greater fence ({fresh} after {stale})"
    );
    let late = store
        .complete(&k, stale, &Outcome::success(&json!("stale")), TTL)
        .await;
    assert!(
        matches!(late, Err(StoreError::Fenced { .. })),
        "the holder from before the restart is fenced, got {late:?}"
    );
}

#[tokio::test]
async fn a_server_that_hides_its_policy_is_refused() {
    if !redis_server::available("a_server_that_hides_its_policy_is_refused") {
        return;
    }
    // As a managed service that forbids CONFIG does.
    let server = RedisServer::start(&["--rename-command", "CONFIG", ""]).await;
    match RedisStore::connect(&server.url(), PREFIX).await {
        Err(StoreError::Unavailable(why)) => {
            for needle in ["maxmemory-policy", "CONFIG GET", "assume_noeviction"] {
                assert!(why.contains(needle), "{why:?} names {needle:?}");
            }
        }
        other => panic!("expected the server to be refused, got {other:?}"),
    }
    // The operator asserts the managed service's parameter group sets noeviction.
    let store = RedisStore::connect_with(
        &server.url(),
        PREFIX,
        RedisOptions::new().assume_noeviction(),
    )
    .await
    .expect("an asserted policy is not asked for");
    acquire(
        &store,
        &claim_request(&record_key("asserted"), LEASE, OrphanPolicy::TakeOver),
    )
    .await;
}

// ---- 3. Replication ----------------------------------------------------------------------

/// A primary and one replica of it, in sync.
async fn primary_and_replica() -> (RedisServer, RedisServer) {
    let primary = RedisServer::start(&[]).await;
    let port = primary.port().to_string();
    let replica = RedisServer::start(&["--replicaof", "127.0.0.1", &port]).await;
    let mut conn = primary.connection().await;
    for _ in 0..500 {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut conn)
            .await
            .expect("INFO");
        if info.contains("connected_slaves:1") && info.contains("state=online") {
            // Online is not yet acknowledging: on a loaded machine the first WAIT can time
            // out. Wait until the replica has acknowledged a write once.
            let acked: i64 = redis::cmd("WAIT")
                .arg(1)
                .arg(2000)
                .query_async(&mut conn)
                .await
                .expect("WAIT");
            if acked == 1 {
                return (primary, replica);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the replica did not come online");
}

/// A store that waits for `replicas` acknowledgements after each write.
async fn replicated_store(url: &str, replicas: u32, timeout: Duration) -> RedisStore {
    let options = RedisOptions::new().wait_for_replicas(replicas, timeout);
    RedisStore::connect_with(url, PREFIX, options)
        .await
        .expect("connect")
}

async fn on_replica(replica: &RedisServer, key: &RecordKey, field: &str) -> Option<String> {
    let mut conn = replica.connection().await;
    redis::cmd("HGET")
        .arg(format!("{PREFIX}:{{{key}}}:rec"))
        .arg(field)
        .query_async(&mut conn)
        .await
        .expect("HGET on the replica")
}

#[tokio::test]
async fn writes_wait_for_the_replicas() {
    if !redis_server::available("writes_wait_for_the_replicas") {
        return;
    }
    let (primary, replica) = primary_and_replica().await;
    // Long enough for a loaded machine's replica to answer; a frozen one then costs 2 s.
    let store = replicated_store(&primary.url(), 1, Duration::from_secs(2)).await;

    // The server forgets the scripts (as after a restart or a failover): the pipeline with
    // WAIT loads them again.
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut primary.connection().await)
        .await
        .expect("SCRIPT FLUSH on the private primary");

    // Acknowledged: each write is on the replica when it returns.
    let k = record_key("replicated");
    let fence = acquire(&store, &claim_request(&k, LEASE, OrphanPolicy::TakeOver)).await;
    assert_eq!(
        on_replica(&replica, &k, "state").await.as_deref(),
        Some("in_progress")
    );
    store
        .complete(&k, fence, &Outcome::success(&json!(1)), TTL)
        .await
        .expect("complete");
    assert_eq!(
        on_replica(&replica, &k, "state").await.as_deref(),
        Some("completed")
    );

    // The replica stops acknowledging: no write is reported done.
    let held = record_key("held-while-frozen");
    let held_fence = acquire(&store, &claim_request(&held, LEASE, OrphanPolicy::TakeOver)).await;
    replica.freeze();
    let claimed = store
        .claim(&claim_request(
            &record_key("claimed-while-frozen"),
            LEASE,
            OrphanPolicy::TakeOver,
        ))
        .await;
    let renewed = store.renew(&held, held_fence, LEASE).await;
    let journaled = store.journal(&held, held_fence, "step", "1").await;
    let completed = store
        .complete(&held, held_fence, &Outcome::success(&json!(2)), TTL)
        .await;
    replica.thaw();
    for (what, result) in [
        ("claim", claimed.map(|_| ())),
        ("renew", renewed.map(|_| ())),
        ("journal", journaled),
        ("complete", completed),
    ] {
        match result {
            Err(StoreError::Unavailable(why)) => {
                assert!(
                    why.contains("0 of 1 replica"),
                    "{what}: the error says how many replicas acknowledged: {why:?}"
                );
            }
            other => panic!("{what}: an unreplicated write must fail, got {other:?}"),
        }
    }
    // An unconfirmed claim is given back, so nothing holds the key for a worker that was
    // told it has no claim.
    assert!(
        store
            .get(&record_key("claimed-while-frozen"))
            .await
            .expect("get")
            .is_none(),
        "the unconfirmed claim was given back"
    );
    // An unconfirmed complete stands on the primary (documented): a duplicate replays it
    // unless the primary is lost before it replicates.
    let record = store.get(&held).await.expect("get").expect("a record");
    assert_eq!(record.state.kind(), idem_core::StateKind::Completed);
}

#[tokio::test]
async fn more_replicas_than_exist_is_an_error() {
    if !redis_server::available("more_replicas_than_exist_is_an_error") {
        return;
    }
    let (primary, _replica) = primary_and_replica().await;
    let store = replicated_store(&primary.url(), 2, Duration::from_secs(1)).await;
    let k = record_key("too-many");
    match store
        .claim(&claim_request(&k, LEASE, OrphanPolicy::TakeOver))
        .await
    {
        Err(StoreError::Unavailable(why)) => {
            // One replica exists; on a loaded machine it may not even answer in time.
            assert!(why.contains(" of 2 replicas"), "{why:?}")
        }
        other => panic!("expected the claim to fail, got {other:?}"),
    }
    assert!(store.get(&k).await.expect("get").is_none());
}

/// Waiting for replicas changes no decision of the store: the conformance suite against a
/// primary whose replica acknowledges every write.
#[cfg(feature = "conformance")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_waits_for_replicas_conforms() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use idem_core::store::conformance::{self, Subject};

    if !redis_server::available("a_store_that_waits_for_replicas_conforms") {
        return;
    }
    let (primary, _replica) = primary_and_replica().await;
    let url = primary.url();
    let subjects = AtomicU64::new(0);
    conformance::run_all("redis waiting for 1 replica", || {
        let prefix = format!("{PREFIX}:{}", subjects.fetch_add(1, Ordering::Relaxed));
        let options = RedisOptions::new().wait_for_replicas(1, Duration::from_secs(1));
        let url = url.clone();
        async move {
            // Each write waits for the replica: a lease of 300 ms can run out between two
            // writes of one holder when the machine is loaded.
            Subject::real_time(Arc::new(
                RedisStore::connect_with(&url, &prefix, options)
                    .await
                    .expect("connect"),
            ))
            .with_short_lease(Duration::from_secs(1))
        }
    })
    .await;
}
