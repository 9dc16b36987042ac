//! The Redis store against a Redis Cluster: the conformance suite, one slot per record (its
//! keys and its pending approval), records spread over every primary, and the operator
//! listings, which walk every primary.
//!
//! Needs `IDEM_REDIS_CLUSTER_URL`, the nodes' URLs comma-separated, every node a primary
//! (`scripts/redis-cluster start DIR` starts such a cluster and prints it); without it every
//! test says why it is skipped and passes, unless `IDEM_REQUIRE_SERVICES=1`.

#![cfg(all(feature = "redis", feature = "conformance"))]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use idem_core::store::approvals::{self, ApprovalFilter, PendingApproval};
use idem_core::store::conformance::{self, Subject};
use idem_core::store::redis::{RedisOptions, RedisStore};
use idem_core::{
    Fingerprint, ListFilter, OrphanPolicy, PurgeFilter, RecordKey, StateKind, Store, StoreError,
};
use serde_json::json;
use support::claims::{acquire, claim_request, record_key};
use support::redis_cluster::Cluster;
use support::redis_keys::redis_cluster_prefixes;
use support::services::{REDIS_CLUSTER_URL, service_url};

/// The nodes of the cluster in the variable, or `None` after saying why `test` skips.
fn cluster(test: &str) -> Option<(String, Vec<String>)> {
    let urls = service_url(REDIS_CLUSTER_URL, test)?;
    let nodes = urls
        .split(',')
        .map(|u| u.trim().to_owned())
        .filter(|u| !u.is_empty())
        .collect();
    Some((urls, nodes))
}

async fn connect(nodes: &[String], prefix: &str) -> RedisStore {
    RedisStore::connect_cluster(nodes, prefix)
        .await
        .expect("connect to the cluster")
}

async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("a connection to one node")
}

/// Every key under `prefix` on each node (by URL), as that node's own `SCAN` finds it.
async fn keys_by_node(nodes: &[String], prefix: &str) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for url in nodes {
        let mut conn = raw(url).await;
        let mut cursor: u64 = 0;
        let mut keys = Vec::new();
        loop {
            let (next, page): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(format!("{prefix}:*"))
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .expect("scan");
            keys.extend(page);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        keys.sort();
        keys.dedup();
        out.insert(url.clone(), keys);
    }
    out
}

/// How many records (`:rec` hashes) under `prefix` each node holds.
async fn records_by_node(nodes: &[String], prefix: &str) -> Vec<usize> {
    keys_by_node(nodes, prefix)
        .await
        .values()
        .map(|keys| keys.iter().filter(|k| k.ends_with(":rec")).count())
        .collect()
}

async fn slot_of(url: &str, name: &str) -> i64 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(name)
        .query_async(&mut raw(url).await)
        .await
        .expect("CLUSTER KEYSLOT")
}

fn pending(key: &RecordKey, now: idem_core::Timestamp) -> PendingApproval {
    PendingApproval {
        key: key.clone(),
        namespace: "cluster".into(),
        tenant: "acme".into(),
        tool: "refund".into(),
        downstream_key: format!("idem-{key}"),
        fingerprint: Fingerprint::of(&json!({ "key": key.as_str() })),
        arguments: json!({ "key": key.as_str() }),
        secret_parameters: false,
        policy: None,
        approvers: 1,
        approved_by: Vec::new(),
        requested_at: now,
        expires_at: now.plus(Duration::from_secs(3600)),
        decision: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_store_conforms() {
    let Some((urls, nodes)) = cluster("redis_cluster_store_conforms") else {
        return;
    };
    let prefixes = redis_cluster_prefixes(&urls);
    conformance::run_all("redis-cluster", || {
        let nodes = nodes.clone();
        let prefix = prefixes.fresh("idem-test");
        async move {
            Subject::reopenable((nodes, prefix), |(nodes, prefix)| async move {
                RedisStore::connect_cluster(&nodes, &prefix).await
            })
            .await
            .expect("connect")
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_and_its_approval_share_one_slot_and_records_spread_over_every_primary() {
    let Some((urls, nodes)) = cluster("a_record_and_its_approval_share_one_slot") else {
        return;
    };
    let prefixes = redis_cluster_prefixes(&urls);
    let prefix = prefixes.fresh("idem-test");
    let store = connect(&nodes, &prefix).await;
    let now = store.now().await.expect("now");

    let k = record_key("slot");
    let fence = acquire(
        &store,
        &claim_request(&k, Duration::from_secs(60), OrphanPolicy::TakeOver),
    )
    .await;
    store
        .journal(&k, fence, "step", "1")
        .await
        .expect("journal");
    approvals::request(&store, &pending(&k, now))
        .await
        .expect("request an approval");
    let names: Vec<String> = keys_by_node(&nodes, &prefix)
        .await
        .into_values()
        .flatten()
        .filter(|name| name.contains(&format!("{{{k}}}")))
        .collect();
    assert_eq!(names.len(), 4, "record, steps, fence, approval: {names:?}");
    let mut slots = Vec::new();
    for name in &names {
        slots.push(slot_of(&nodes[0], name).await);
    }
    slots.dedup();
    assert_eq!(slots.len(), 1, "one slot for {names:?}: {slots:?}");

    for i in 0..60 {
        let k = record_key(&format!("spread-{i}"));
        acquire(
            &store,
            &claim_request(&k, Duration::from_secs(60), OrphanPolicy::TakeOver),
        )
        .await;
    }
    let per_node = records_by_node(&nodes, &prefix).await;
    assert_eq!(per_node.iter().sum::<usize>(), 61, "{per_node:?}");
    assert!(
        per_node.len() >= 3 && per_node.iter().all(|&n| n > 0),
        "records on every primary: {per_node:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_and_purges_find_records_on_every_primary() {
    let Some((urls, nodes)) = cluster("listings_and_purges_find_records_on_every_primary") else {
        return;
    };
    let prefixes = redis_cluster_prefixes(&urls);
    let prefix = prefixes.fresh("idem-test");
    let store = connect(&nodes, &prefix).await;
    let now = store.now().await.expect("now");
    let lease = Duration::from_secs(60);

    let mut held = Vec::new();
    let mut done = Vec::new();
    for i in 0..40 {
        let k = record_key(&format!("listed-{i}"));
        let fence = acquire(&store, &claim_request(&k, lease, OrphanPolicy::TakeOver)).await;
        if i % 2 == 0 {
            // Unknown: purgeable at once under a zero retention.
            store
                .mark_unknown(&k, fence, "timed out")
                .await
                .expect("mark Unknown");
            done.push(k);
        } else {
            approvals::request(&store, &pending(&k, now))
                .await
                .expect("request an approval");
            held.push(k);
        }
    }
    let per_node = records_by_node(&nodes, &prefix).await;
    assert!(
        per_node.iter().all(|&n| n > 0),
        "records on every primary: {per_node:?}"
    );

    let listed = store
        .list(ListFilter {
            state: Some(StateKind::InProgress),
            tenant: None,
            limit: 1000,
            after: None,
        })
        .await
        .expect("list");
    let mut listed: Vec<RecordKey> = listed.into_iter().map(|r| r.key).collect();
    listed.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    held.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    assert_eq!(listed, held, "every InProgress record, from every primary");

    let waiting = approvals::list(
        &store,
        &ApprovalFilter {
            limit: 1000,
            ..ApprovalFilter::default()
        },
    )
    .await
    .expect("list approvals");
    let mut waiting: Vec<RecordKey> = waiting.into_iter().map(|a| a.key).collect();
    waiting.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    assert_eq!(waiting, held, "every pending approval, from every primary");

    // The Unknown records are purged wherever they are.
    let purged = store
        .purge_expired(&PurgeFilter {
            unknown_retention: Duration::ZERO,
            ..PurgeFilter::up_to(1000)
        })
        .await
        .expect("purge");
    assert_eq!(purged, done.len(), "every Unknown record is purged");
    for k in &done {
        assert!(store.get(k).await.expect("get").is_none(), "{k} is gone");
    }
    let left = records_by_node(&nodes, &prefix).await;
    assert_eq!(left.iter().sum::<usize>(), held.len(), "{left:?}");

    // A removed approval leaves the listing; the others stay.
    let first = approvals::get(&store, &held[0])
        .await
        .expect("get")
        .expect("an entry");
    let text = serde_json::to_string(&first).expect("json");
    assert!(
        store
            .remove_approval(&held[0], &text)
            .await
            .expect("remove"),
        "the entry is removed"
    );
    let after = approvals::list(
        &store,
        &ApprovalFilter {
            limit: 1000,
            ..ApprovalFilter::default()
        },
    )
    .await
    .expect("list approvals");
    assert_eq!(after.len(), held.len() - 1);
    assert!(after.iter().all(|a| a.key != held[0]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_replicas_reaches_the_primary_of_the_record() {
    let Some((urls, nodes)) = cluster("wait_for_replicas_reaches_the_primary_of_the_record") else {
        return;
    };
    let prefixes = redis_cluster_prefixes(&urls);
    let prefix = prefixes.fresh("idem-test");
    // The test cluster's primaries have no replica: WAIT for one cannot be met, and says so.
    let options = RedisOptions::new().wait_for_replicas(1, Duration::from_millis(20));
    let store = RedisStore::connect_cluster_with(&nodes, &prefix, options)
        .await
        .expect("connect");
    for i in 0..6 {
        let k = record_key(&format!("wait-{i}"));
        match store
            .claim(&claim_request(
                &k,
                Duration::from_secs(60),
                OrphanPolicy::TakeOver,
            ))
            .await
        {
            Err(StoreError::Unavailable(why)) => {
                assert!(why.contains("0 of 1 replica"), "{why}");
                assert!(why.contains("given back"), "{why}");
            }
            other => panic!("expected the claim to wait in vain, got {other:?}"),
        }
        assert!(
            store.get(&k).await.expect("get").is_none(),
            "the unconfirmed claim was given back on its primary"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_with_one_evicting_primary_is_refused() {
    if !support::redis_server::available("a_cluster_with_one_evicting_primary_is_refused") {
        return;
    }
    let cluster = Cluster::start(0);
    let _: String = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("allkeys-lru")
        .query_async(&mut raw(&cluster.nodes[2]).await)
        .await
        .expect("CONFIG SET on one primary");
    let port = cluster.nodes[2].rsplit(':').next().expect("a port");
    match RedisStore::connect_cluster(&cluster.nodes, "evict").await {
        Err(StoreError::Unavailable(why)) => {
            assert!(why.contains("allkeys-lru"), "{why}");
            assert!(why.contains(port), "the message names the primary: {why}");
        }
        other => panic!("expected the evicting primary to be refused, got {other:?}"),
    }
    // The operator's word skips the check.
    RedisStore::connect_cluster_with(
        &cluster.nodes,
        "evict",
        RedisOptions::new().assume_noeviction(),
    )
    .await
    .expect("connect when the policy is asserted");
}

#[tokio::test]
async fn a_closed_port_is_unavailable() {
    // No server needed: nothing listens on port 1.
    let attempt = tokio::time::timeout(
        Duration::from_secs(30),
        RedisStore::connect_cluster(&["redis://127.0.0.1:1"], "app"),
    )
    .await
    .expect("connect gives up within its budget");
    assert!(
        matches!(attempt, Err(StoreError::Unavailable(_))),
        "{attempt:?}"
    );
}

#[tokio::test]
async fn a_cluster_needs_a_node() {
    let none: [&str; 0] = [];
    assert!(matches!(
        RedisStore::connect_cluster(&none, "app").await,
        Err(StoreError::Unavailable(why)) if why.contains("no Redis Cluster node")
    ));
}

/// A cluster of three primaries with `replicas` replicas each, started by
/// `scripts/redis-cluster` in a temporary directory and stopped (by pid) when dropped.
/// The URL of the replica of the primary that owns `name`'s slot.
fn replica_of_owner(cluster: &Cluster, name: &str) -> String {
    let shards = cluster.shards();
    let owner = &shards[Cluster::owner(&shards, name)];
    let replica = owner.replica.as_ref().expect("the primary has a replica");
    format!("redis://127.0.0.1:{replica}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_follows_a_failover() {
    if !support::redis_server::available("the_store_follows_a_failover") {
        return;
    }
    let cluster = Cluster::start(1);
    assert_eq!(cluster.nodes.len(), 6, "{:?}", cluster.nodes);
    // Every write waits for the replica of its primary, so the failover below loses none.
    let options = RedisOptions::new().wait_for_replicas(1, Duration::from_secs(2));
    let store = RedisStore::connect_cluster_with(&cluster.nodes, "failover", options)
        .await
        .expect("connect");
    let lease = Duration::from_secs(60);

    let done = record_key("failover-done");
    let fence = acquire(&store, &claim_request(&done, lease, OrphanPolicy::TakeOver)).await;
    store
        .complete(
            &done,
            fence,
            &idem_core::Outcome::success(&json!("sent")),
            Duration::from_secs(3600),
        )
        .await
        .expect("complete");
    let held = record_key("failover-held");
    let held_fence = acquire(&store, &claim_request(&held, lease, OrphanPolicy::TakeOver)).await;

    // The replica of the primary that owns `done` takes over, by the operator's hand.
    let replica = replica_of_owner(&cluster, &format!("failover:{{{done}}}:rec"));
    let mut conn = raw(&replica).await;
    let _: String = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .query_async(&mut conn)
        .await
        .expect("CLUSTER FAILOVER");
    let mut promoted = false;
    for _ in 0..200 {
        let role: Vec<redis::Value> = redis::cmd("ROLE")
            .query_async(&mut conn)
            .await
            .expect("ROLE");
        if matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"master") {
            promoted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(promoted, "the replica at {replica} became a primary");

    // The store finds the record on the new primary (the old one answers MOVED)...
    let record = store.get(&done).await.expect("get").expect("the record");
    assert_eq!(record.state.kind(), StateKind::Completed);
    match store
        .claim(&claim_request(&done, lease, OrphanPolicy::TakeOver))
        .await
        .expect("claim")
    {
        idem_core::Claim::Existing(r) => assert_eq!(r.state.kind(), StateKind::Completed),
        other => panic!("a duplicate replays, got {other:?}"),
    }
    // ...a holder from before the failover records under its fence...
    store
        .complete(
            &held,
            held_fence,
            &idem_core::Outcome::success(&json!(1)),
            Duration::from_secs(3600),
        )
        .await
        .expect("the holder records after the failover");
    // ...and new keys on every primary are claimed and completed.
    for i in 0..12 {
        let k = record_key(&format!("after-failover-{i}"));
        let f = acquire(&store, &claim_request(&k, lease, OrphanPolicy::TakeOver)).await;
        store
            .complete(
                &k,
                f,
                &idem_core::Outcome::success(&json!(i)),
                Duration::from_secs(3600),
            )
            .await
            .expect("complete after the failover");
    }
    let listed = store
        .list(ListFilter {
            state: Some(StateKind::Completed),
            tenant: None,
            limit: 100,
            after: None,
        })
        .await
        .expect("list");
    assert_eq!(
        listed.len(),
        14,
        "every record, on the primaries as they are now"
    );
}
