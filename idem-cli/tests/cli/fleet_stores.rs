//! Redis and PostgreSQL: the test is the agent, `idem` the operator, on one store.

use super::*;

/// Whether the store deletes expired records by itself (Redis expires their keys), so that
/// a purge may find fewer than expired.
#[derive(Clone, Copy, PartialEq, Eq)]
#[cfg(any(feature = "redis", feature = "postgres"))]
enum Expiry {
    ByPurge,
    ByServer,
}

/// The flow an operator and an agent go through on the store at `url` under `prefix` (the
/// Redis key prefix or PostgreSQL schema): `store` is the agent's connection to it.
#[cfg(any(feature = "redis", feature = "postgres"))]
async fn operator_flow(store: Arc<dyn Store>, url: &str, prefix: &str, expiry: Expiry) {
    // The prefix is unique to this run; so are the tenants, and the tallies' labels with them.
    let tenant = prefix.to_owned();
    let purged_tenant = format!("{prefix}_old");
    let agent = agent(store);
    let run_ctx = RunContext::new(&tenant);
    let old = RunContext::new(&purged_tenant);
    let on_store = |args: &[&str]| {
        let mut cmd = idem(args);
        cmd.args(["--store", url, "--prefix", prefix]);
        cmd
    };
    let deciding = |args: &[&str]| {
        let mut cmd = on_store(args);
        cmd.env("IDEM_APPROVAL_KEY", desk_key_text());
        cmd
    };
    const REASON: &str = "the customer asked to keep the account";

    // What the agent leaves for a person: two irreversible calls, a text whose carrier timed
    // out; and, in another tenant, a text and two visits that will be old enough to purge.
    let (gone, keep) = (
        close("call-gone", "cus_gone"),
        close("call-keep", "cus_keep"),
    );
    left_for_approval(&agent, &gone, &run_ctx).await;
    left_for_approval(&agent, &keep, &run_ctx).await;
    let texted = text("call-text", "+351 910 000 042");
    left_unknown(&agent, &texted, &run_ctx).await;
    let stale = text("call-stale", "+351 910 000 043");
    left_unknown(&agent, &stale, &old).await;
    let visits = [visit("call-v1", "/pricing"), visit("call-v2", "/docs")];
    for call in &visits {
        agent.dispatch(call, &old).await.expect("a visit noted");
    }
    let (gone_key, keep_key) = (
        key_of(&agent, &gone, &run_ctx),
        key_of(&agent, &keep, &run_ctx),
    );
    let text_key = key_of(&agent, &texted, &run_ctx);
    let stale_key = key_of(&agent, &stale, &old);

    // The operator lists them.
    let open = run(&mut on_store(&[
        "records", "list", "--tenant", &tenant, "--json",
    ]))
    .exited(0)
    .json();
    let open = entries(&open);
    assert_eq!(open.len(), 1, "{open:#?}");
    assert_eq!(open[0]["key"], json!(text_key));
    assert_eq!(
        (&open[0]["tool"], &open[0]["state"]),
        (&json!("text_customer"), &json!("unknown"))
    );
    assert!(
        open[0]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("carrier timed out")),
        "{:#}",
        open[0]
    );
    let pending = run(&mut on_store(&[
        "approvals",
        "list",
        "--tenant",
        &tenant,
        "--json",
    ]))
    .exited(0)
    .json();
    let mut listed: Vec<(String, Value, Value)> = entries(&pending)
        .iter()
        .map(|e| {
            assert_eq!(
                (&e["tool"], &e["status"]),
                (&json!("close_account"), &json!("pending"))
            );
            (
                e["key"].as_str().expect("a key").to_owned(),
                e["arguments"].clone(),
                e["decision"].clone(),
            )
        })
        .collect();
    listed.sort_by_key(|entry| entry.1.to_string());
    assert_eq!(
        listed,
        vec![
            (
                gone_key.clone(),
                json!({"customer": "cus_gone"}),
                Value::Null
            ),
            (
                keep_key.clone(),
                json!({"customer": "cus_keep"}),
                Value::Null
            ),
        ]
    );
    let stats = run(&mut on_store(&["stats", "--json"])).exited(0).json();
    assert_eq!(stats["records"]["unknown"], 2, "{stats:#}");
    assert_eq!(stats["pending_approvals"], 2, "{stats:#}");

    // Resolved: the agent's next call replays the outcome the operator established, and the
    // carrier is not asked again.
    let texted_label = format!("{tenant}/+351 910 000 042");
    assert_eq!(TEXTED.count(&texted_label), 1);
    let resolved = run(&mut on_store(&[
        "records",
        "resolve",
        &text_key,
        "--value",
        r#"{"delivered": true}"#,
        "--as",
        "lee@desk",
        "--yes",
    ]))
    .exited(0);
    assert!(
        resolved
            .stdout
            .contains(&format!("resolved {text_key} by lee@desk")),
        "{resolved:#?}"
    );
    let replayed = agent
        .dispatch(&texted, &run_ctx)
        .await
        .expect("the resolved outcome");
    assert!(replayed.deduplicated, "{replayed:?}");
    assert_eq!(replayed.output, json!({"delivered": true}));
    assert_eq!(TEXTED.count(&texted_label), 1);

    // Approved: the agent's retry runs it once, and a further call is a replay.
    let gone_label = format!("{tenant}/cus_gone");
    assert_eq!(CLOSED.count(&gone_label), 0);
    let approved = run(&mut deciding(&[
        "approvals",
        "approve",
        &gone_key,
        "--as",
        "dana@desk",
        "--yes",
    ]))
    .exited(0);
    assert!(
        approved.stdout.contains(&format!("approved {gone_key}")),
        "{approved:#?}"
    );
    let ran = agent
        .dispatch(&gone, &run_ctx)
        .await
        .expect("the approved call");
    assert!(!ran.deduplicated, "{ran:?}");
    assert_eq!(ran.output["closed"], "cus_gone");
    assert_eq!(CLOSED.count(&gone_label), 1);
    let again = agent
        .dispatch(&gone, &run_ctx)
        .await
        .expect("the approved call, replayed");
    assert!(again.deduplicated, "{again:?}");
    assert_eq!(CLOSED.count(&gone_label), 1);
    run(&mut deciding(&[
        "approvals",
        "approve",
        &gone_key,
        "--as",
        "dana@desk",
        "--yes",
    ]))
    .exited(5)
    .says(&["already decided"]);

    // Denied: every retry is refused with the reason, and nothing runs.
    run(&mut on_store(&[
        "approvals",
        "deny",
        &keep_key,
        "--reason",
        REASON,
        "--as",
        "lee@desk",
        "--yes",
    ]))
    .exited(0);
    for _ in 0..2 {
        match agent.dispatch(&keep, &run_ctx).await {
            Err(DispatchError::ApprovalDenied { by, reason, .. }) => {
                assert_eq!((by.as_str(), reason.as_str()), ("lee@desk", REASON));
            }
            other => panic!("expected ApprovalDenied, got {other:?}"),
        }
    }
    assert_eq!(CLOSED.count(&format!("{tenant}/cus_keep")), 0);
    let decided = run(&mut on_store(&[
        "approvals",
        "list",
        "--tenant",
        &tenant,
        "--json",
    ]))
    .exited(0)
    .json();
    assert_eq!(decided, json!([]), "nothing waits for a person any more");

    // Purged: past their retention the old tenant's records go, and the others stay.
    run(&mut on_store(&["records", "show", &stale_key, "--json"])).exited(0);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    for call in &visits {
        let key = key_of(&agent, call, &old);
        run(&mut on_store(&["records", "show", &key]))
            .exited(4)
            .says(&["no record under key"]);
    }
    let purged = run(&mut on_store(&[
        "records",
        "purge",
        "--tenant",
        &purged_tenant,
        "--unknown-retention",
        "1s",
        "--json",
    ]))
    .exited(0)
    .json();
    let purged = purged["purged"]
        .as_u64()
        .expect("a count of purged records");
    match expiry {
        // The stale text and both visits.
        Expiry::ByPurge => assert_eq!(purged, 3),
        // The stale text; Redis may have expired the visits' keys itself already.
        Expiry::ByServer => assert!((1..=3).contains(&purged), "purged {purged}"),
    }
    run(&mut on_store(&["records", "show", &stale_key]))
        .exited(4)
        .says(&["no record under key"]);
    let kept = run(&mut on_store(&["records", "show", &text_key, "--json"]))
        .exited(0)
        .json();
    assert_eq!(kept["state"], "completed", "{kept:#}");
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_the_agent_obeys_what_the_operator_decided() {
    use support::redis_keys::redis_prefixes;
    use support::services::{REDIS_URL, service_url};
    let Some(url) = service_url(
        REDIS_URL,
        "on_redis_the_agent_obeys_what_the_operator_decided",
    ) else {
        return;
    };
    let prefixes = redis_prefixes(&url);
    let prefix = prefixes.fresh("idem_cli");
    let store = idem::RedisStore::connect(&url, &prefix)
        .await
        .expect("connect to Redis");
    operator_flow(Arc::new(store), &url, &prefix, Expiry::ByServer).await;
}

/// The same on a Redis Cluster, which the operator names `redis-cluster://HOST:PORT,...`.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_redis_cluster_the_agent_obeys_what_the_operator_decided() {
    use support::redis_keys::redis_cluster_prefixes;
    use support::services::{REDIS_CLUSTER_URL, service_url};
    let Some(urls) = service_url(
        REDIS_CLUSTER_URL,
        "on_a_redis_cluster_the_agent_obeys_what_the_operator_decided",
    ) else {
        return;
    };
    let prefixes = redis_cluster_prefixes(&urls);
    let prefix = prefixes.fresh("idem_cli");
    let nodes: Vec<&str> = urls.split(',').collect();
    let store = idem::RedisStore::connect_cluster(&nodes, &prefix)
        .await
        .expect("connect to the Redis Cluster");
    let hosts: Vec<&str> = nodes
        .iter()
        .map(|node| node.trim_start_matches("redis://").trim_end_matches('/'))
        .collect();
    let spec = format!("redis-cluster://{}", hosts.join(","));
    operator_flow(Arc::new(store), &spec, &prefix, Expiry::ByServer).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_the_agent_obeys_what_the_operator_decided() {
    use support::postgres_schemas::postgres_schemas;
    use support::services::{POSTGRES_URL, service_url};
    let Some(url) = service_url(
        POSTGRES_URL,
        "on_postgres_the_agent_obeys_what_the_operator_decided",
    ) else {
        return;
    };
    let schemas = postgres_schemas(&url);
    let schema = schemas.fresh("idem_cli");
    let store = idem::PostgresStore::connect(&url, &schema)
        .await
        .expect("connect to PostgreSQL");
    operator_flow(Arc::new(store), &url, &schema, Expiry::ByPurge).await;
}
