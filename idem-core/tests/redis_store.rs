//! The Redis store against a real server: the conformance suite plus what only Redis has
//! (key layout, TTLs, the fence counter, an unreachable server).
//!
//! Needs `IDEM_REDIS_URL` (e.g. `redis://127.0.0.1:6379/`); without it every test says why it
//! is skipped and passes, unless `IDEM_REQUIRE_SERVICES=1`.

#![cfg(all(feature = "redis", feature = "conformance"))]

mod support;

use std::time::Duration;

use idem_core::store::conformance::{self, Subject};
use idem_core::store::redis::RedisStore;
use idem_core::{
    Claim, DEFAULT_UNKNOWN_RETENTION, OrphanPolicy, Outcome, PurgeFilter, StateKind, Store,
    StoreError, Timestamp,
};
use serde_json::json;
use sha2::Digest;
use support::claims::{acquire, claim_request, record_key};
use support::redis_keys::redis_prefixes;
use support::services::{REDIS_URL, service_url, unique};

async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("raw connection")
}

/// Every key under a prefix.
async fn keys_under(url: &str, prefix: &str) -> Vec<String> {
    let mut conn = raw(url).await;
    let mut cursor: u64 = 0;
    let mut out = Vec::new();
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}:*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .expect("scan");
        out.extend(keys);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    out.sort();
    out.dedup();
    out
}

/// The cluster hash tag of a key, by the cluster's rule: the text between the first `{` and
/// the next `}`, if not empty.
fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let len = key[open + 1..].find('}')?;
    (len > 0).then(|| &key[open + 1..open + 1 + len])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_conforms() {
    let Some(url) = service_url(REDIS_URL, "redis_store_conforms") else {
        return;
    };
    let prefixes = redis_prefixes(&url);
    conformance::run_all("redis", || {
        let url = url.clone();
        let prefix = prefixes.fresh("idem-test");
        async move {
            Subject::reopenable((url, prefix), |(url, prefix)| async move {
                RedisStore::connect(&url, &prefix).await
            })
            .await
            .expect("connect")
        }
    })
    .await;
}

#[tokio::test]
async fn a_closed_port_is_unavailable() {
    // No server needed: nothing listens on port 1.
    let attempt = tokio::time::timeout(
        Duration::from_secs(30),
        RedisStore::connect("redis://127.0.0.1:1/", &unique("idem-test")),
    )
    .await
    .expect("connect gives up within its budget");
    match attempt {
        Err(StoreError::Unavailable(why)) => assert!(!why.is_empty()),
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[tokio::test]
async fn invalid_urls_and_prefixes_are_refused() {
    assert!(matches!(
        RedisStore::connect("not a url", "app").await,
        Err(StoreError::Unavailable(_))
    ));
    assert!(matches!(
        RedisStore::connect("redis://127.0.0.1:1/", "app{x}").await,
        Err(StoreError::Unavailable(why)) if why.contains("prefix")
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_records_keys_share_one_hash_tag() {
    let Some(url) = service_url(REDIS_URL, "a_records_keys_share_one_hash_tag") else {
        return;
    };
    let prefixes = redis_prefixes(&url);
    let prefix = prefixes.fresh("idem-test");
    let store = RedisStore::connect(&url, &prefix).await.expect("connect");
    let k = record_key("tag");
    let fence = acquire(
        &store,
        &claim_request(&k, Duration::from_secs(60), OrphanPolicy::TakeOver),
    )
    .await;
    store
        .journal(&k, fence, "reserve", "1")
        .await
        .expect("journal");
    let keys = keys_under(&url, &prefix).await;
    assert_eq!(keys.len(), 3, "a record, its steps and its fence: {keys:?}");
    for name in &keys {
        assert!(
            name.starts_with(&format!("{prefix}:")),
            "{name} is under the prefix"
        );
        assert_eq!(
            hash_tag(name),
            Some(k.as_str()),
            "{name} is tagged by the record key"
        );
    }
}

/// A budget is one string named by the SHA-256 of its scope (no scope text in the key, no
/// hash tag it could move), and carries the TTL of its last swap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_is_one_key_named_by_its_scope_digest_with_its_ttl() {
    let Some(url) = service_url(REDIS_URL, "a_budget_is_one_key_named_by_its_scope_digest") else {
        return;
    };
    let prefixes = redis_prefixes(&url);
    let prefix = prefixes.fresh("idem-test");
    let store = RedisStore::connect(&url, &prefix).await.expect("connect");
    let scope = "acme:{run-7}:refunds";
    assert!(
        store
            .swap_budget(scope, None, "1", Duration::from_secs(60))
            .await
            .expect("swap")
    );
    let digest: String = sha2::Sha256::digest(scope.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let name = format!("{prefix}:budget:{digest}");
    assert_eq!(keys_under(&url, &prefix).await, vec![name.clone()]);
    assert_eq!(hash_tag(&name), None, "no hash tag: a slot of its own");
    let mut conn = raw(&url).await;
    let mut pttl = async || -> i64 {
        redis::cmd("PTTL")
            .arg(&name)
            .query_async(&mut conn)
            .await
            .expect("pttl")
    };
    let first = pttl().await;
    assert!(first > 50_000 && first <= 60_000, "PTTL {first}");
    assert!(
        !store
            .swap_budget(scope, Some("0"), "2", Duration::from_secs(3600))
            .await
            .expect("swap"),
        "a stale swap"
    );
    assert!(pttl().await <= 60_000, "a refused swap keeps the TTL");
    assert!(
        store
            .swap_budget(scope, Some("1"), "2", Duration::from_secs(3600))
            .await
            .expect("swap")
    );
    let renewed = pttl().await;
    assert!(renewed > 3_500_000, "a swap puts its own TTL: {renewed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completed_and_unknown_records_carry_a_ttl() {
    let Some(url) = service_url(REDIS_URL, "completed_and_unknown_records_carry_a_ttl") else {
        return;
    };
    let prefixes = redis_prefixes(&url);
    let prefix = prefixes.fresh("idem-test");
    let store = RedisStore::connect(&url, &prefix).await.expect("connect");
    let conn = raw(&url).await;
    let pttl = |name: String| {
        let mut conn = conn.clone();
        async move {
            redis::cmd("PTTL")
                .arg(name)
                .query_async::<i64>(&mut conn)
                .await
                .expect("pttl")
        }
    };
    let lease = Duration::from_secs(60);

    let done = record_key("ttl-done");
    let f = acquire(&store, &claim_request(&done, lease, OrphanPolicy::TakeOver)).await;
    store.journal(&done, f, "step", "1").await.expect("journal");
    assert_eq!(
        pttl(format!("{prefix}:{{{done}}}:rec")).await,
        -1,
        "InProgress never expires"
    );
    store
        .complete(
            &done,
            f,
            &Outcome::success(&json!(1)),
            Duration::from_secs(3600),
        )
        .await
        .expect("complete");
    let rec = pttl(format!("{prefix}:{{{done}}}:rec")).await;
    assert!(
        rec > 3_000_000 && rec <= 3_601_000,
        "completed record TTL, got {rec}"
    );
    assert!(
        pttl(format!("{prefix}:{{{done}}}:steps")).await > 0,
        "its steps expire too"
    );
    assert!(
        pttl(format!("{prefix}:{{{done}}}:fence")).await > rec,
        "the fence outlives the record"
    );

    let unknown = record_key("ttl-unknown");
    let g = acquire(
        &store,
        &claim_request(&unknown, lease, OrphanPolicy::MarkUnknown),
    )
    .await;
    store
        .mark_unknown(&unknown, g, "timed out")
        .await
        .expect("mark unknown");
    // Unknown records wait for an operator for the Unknown retention, then Redis deletes
    // them: a server that may not evict cannot fill up with them.
    let retention = i64::try_from(DEFAULT_UNKNOWN_RETENTION.as_millis()).expect("ms");
    let rec = pttl(format!("{prefix}:{{{unknown}}}:rec")).await;
    assert!(
        rec > retention - 60_000 && rec <= retention,
        "Unknown record TTL is the retention, got {rec}"
    );
    assert!(
        pttl(format!("{prefix}:{{{unknown}}}:fence")).await > rec,
        "the fence outlives the Unknown record"
    );

    // A store with a shorter retention sets a shorter TTL.
    let short = RedisStore::connect(&url, &prefix)
        .await
        .expect("connect")
        .with_unknown_retention(Duration::from_secs(60));
    let brief = record_key("ttl-unknown-short");
    let h = acquire(
        &short,
        &claim_request(&brief, lease, OrphanPolicy::MarkUnknown),
    )
    .await;
    short
        .mark_unknown(&brief, h, "timed out")
        .await
        .expect("mark unknown");
    let rec = pttl(format!("{prefix}:{{{brief}}}:rec")).await;
    assert!(rec > 50_000 && rec <= 60_000, "got {rec}");

    // An orphan a claim turns Unknown gets the TTL too.
    let orphan = record_key("ttl-orphan");
    acquire(
        &store,
        &claim_request(&orphan, Duration::from_millis(1), OrphanPolicy::MarkUnknown),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    match store
        .claim(&claim_request(&orphan, lease, OrphanPolicy::MarkUnknown))
        .await
        .expect("claim")
    {
        Claim::Existing(r) => assert_eq!(r.state.kind(), StateKind::Unknown),
        other => panic!("expected the orphan turned Unknown, got {other:?}"),
    }
    let rec = pttl(format!("{prefix}:{{{orphan}}}:rec")).await;
    assert!(rec > retention - 60_000, "got {rec}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_never_go_back_after_release_or_eviction() {
    let Some(url) = service_url(REDIS_URL, "fences_never_go_back_after_release_or_eviction") else {
        return;
    };
    let prefixes = redis_prefixes(&url);
    let prefix = prefixes.fresh("idem-test");
    let store = RedisStore::connect(&url, &prefix).await.expect("connect");
    let k = record_key("fence");
    let req = claim_request(&k, Duration::from_secs(60), OrphanPolicy::TakeOver);
    let first = acquire(&store, &req).await;
    let server_us = store.now().await.expect("now").as_millis() * 1000 + 999;
    assert!(
        first <= server_us && server_us - first < 60_000_000,
        "a key's first fence is the server clock in µs ({first}, server at {server_us} µs)"
    );
    assert!(store.release(&k, first).await.expect("release"));
    let second = acquire(&store, &req).await;
    assert!(second > first, "a claim after a release gets a new fence");
    assert!(
        matches!(
            store
                .complete(
                    &k,
                    first,
                    &Outcome::success(&json!(0)),
                    Duration::from_secs(60)
                )
                .await,
            Err(StoreError::Fenced { .. })
        ),
        "the released holder stays fenced out"
    );
    store
        .complete(
            &k,
            second,
            &Outcome::success(&json!(1)),
            Duration::from_millis(100),
        )
        .await
        .expect("complete");
    // Past expiry and the eviction grace: Redis has dropped the record itself.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let rec_exists: i64 = redis::cmd("EXISTS")
        .arg(format!("{prefix}:{{{k}}}:rec"))
        .query_async(&mut raw(&url).await)
        .await
        .expect("exists");
    assert_eq!(rec_exists, 0, "the completed record was evicted by its TTL");
    let third = acquire(&store, &req).await;
    assert!(
        third > second,
        "a claim after eviction gets a greater fence"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_record_is_reported_corrupt() {
    let Some(url) = service_url(REDIS_URL, "a_damaged_record_is_reported_corrupt") else {
        return;
    };
    let prefixes = redis_prefixes(&url);
    let prefix = prefixes.fresh("idem-test");
    let store = RedisStore::connect(&url, &prefix).await.expect("connect");
    let k = record_key("corrupt");
    let f = acquire(
        &store,
        &claim_request(&k, Duration::from_secs(60), OrphanPolicy::TakeOver),
    )
    .await;
    store
        .complete(&k, f, &Outcome::success(&json!(1)), Duration::from_secs(60))
        .await
        .expect("complete");
    let _: i64 = redis::cmd("HSET")
        .arg(format!("{prefix}:{{{k}}}:rec"))
        .arg("outcome")
        .arg("not json")
        .query_async(&mut raw(&url).await)
        .await
        .expect("hset");
    match store.get(&k).await {
        Err(StoreError::Corrupt { key, .. }) => assert_eq!(key, k),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    let got = store.now().await.expect("now");
    assert!(
        got.as_millis().abs_diff(Timestamp::now().as_millis()) < 60_000,
        "server TIME in ms"
    );
    assert!(matches!(store.get(&record_key("absent")).await, Ok(None)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_records_past_the_retention_are_purged_with_their_fence() {
    let Some(url) = service_url(
        REDIS_URL,
        "unknown_records_past_the_retention_are_purged_with_their_fence",
    ) else {
        return;
    };
    let prefixes = redis_prefixes(&url);
    let prefix = prefixes.fresh("idem-test");
    let store = RedisStore::connect(&url, &prefix).await.expect("connect");
    let lease = Duration::from_secs(60);
    let mut unknown = Vec::new();
    for (i, tenant) in ["tenant-a", "tenant-b", "tenant-b"].into_iter().enumerate() {
        let k = record_key(&format!("purge-unknown-{i}"));
        let mut req = claim_request(&k, lease, OrphanPolicy::MarkUnknown);
        req.tenant = tenant.into();
        let f = acquire(&store, &req).await;
        store
            .mark_unknown(&k, f, "timed out")
            .await
            .expect("mark unknown");
        unknown.push(k);
    }
    let running = record_key("purge-running");
    acquire(
        &store,
        &claim_request(&running, lease, OrphanPolicy::MarkUnknown),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;

    let listed = store
        .list(idem_core::ListFilter {
            state: Some(StateKind::Unknown),
            tenant: Some("tenant-b".into()),
            ..Default::default()
        })
        .await
        .expect("list");
    assert_eq!(listed.len(), 2, "tenant-b's Unknown records: {listed:?}");
    assert!(listed.iter().all(|r| r.tenant == "tenant-b"));

    let young = store
        .purge_expired(&PurgeFilter::up_to(100))
        .await
        .expect("purge");
    assert_eq!(young, 0, "Unknown records within the retention are kept");
    let old = PurgeFilter {
        unknown_retention: Duration::from_millis(10),
        tenant: Some("tenant-b".into()),
        ..PurgeFilter::up_to(100)
    };
    assert_eq!(store.purge_expired(&old).await.expect("purge"), 2);
    assert!(store.get(&unknown[1]).await.expect("get").is_none());
    assert!(
        store.get(&unknown[0]).await.expect("get").is_some(),
        "another tenant's record is kept"
    );
    assert!(
        store.get(&running).await.expect("get").is_some(),
        "InProgress is never purged"
    );
    // The purged record's fence counter does not stay forever.
    let fence_ttl: i64 = redis::cmd("PTTL")
        .arg(format!("{prefix}:{{{}}}:fence", unknown[1]))
        .query_async(&mut raw(&url).await)
        .await
        .expect("pttl");
    assert!(fence_ttl > 0, "the fence counter expires, PTTL {fence_ttl}");
}
