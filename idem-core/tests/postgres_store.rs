//! The PostgreSQL store against a real server.
//!
//! Set `IDEM_POSTGRES_URL` (e.g. `postgres://postgres@127.0.0.1:5432/test`) to run the tests
//! that need a server; without it they are skipped, unless `IDEM_REQUIRE_SERVICES=1` makes
//! the missing service a failure. Every store works in a schema of its own, dropped at the end.

#![cfg(all(feature = "postgres", feature = "conformance"))]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_core::store::conformance::{self, Subject};
use idem_core::store::postgres::PostgresStore;
use idem_core::store::postgres::deadpool_postgres::tokio_postgres::{self, NoTls};
use idem_core::{
    Claim, ClaimRequest, Fingerprint, ListFilter, OrphanPolicy, Outcome, RecordState, Store,
    StoreError,
};
use serde_json::json;
use support::claims::{LEASE, TTL, acquire, claim_request, record_key};
use support::postgres_schemas::postgres_schemas;
use support::services::{POSTGRES_URL, service_url};
use tokio::sync::Barrier;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_store_conforms() {
    let Some(url) = service_url(POSTGRES_URL, "postgres_store_conforms") else {
        return;
    };
    let schemas = postgres_schemas(&url);
    conformance::run_all("postgres", || {
        let schema = schemas.fresh("idem_test");
        let url = url.clone();
        // Each case may connect a second time, as another worker on another host.
        async move {
            Subject::reopenable((url, schema), |(url, schema)| async move {
                PostgresStore::connect(&url, &schema).await
            })
            .await
            .expect("connect to PostgreSQL")
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_workers_set_up_one_schema_at_once() {
    let Some(url) = service_url(POSTGRES_URL, "many_workers_set_up_one_schema_at_once") else {
        return;
    };
    let schemas = postgres_schemas(&url);
    let schema = schemas.fresh("idem_test");
    let start = Arc::new(Barrier::new(8));
    let mut workers = Vec::new();
    for _ in 0..8 {
        let (url, schema, start) = (url.clone(), schema.clone(), start.clone());
        workers.push(tokio::spawn(async move {
            start.wait().await;
            PostgresStore::connect(&url, &schema).await
        }));
    }
    let mut stores = Vec::new();
    for w in workers {
        let store = w
            .await
            .expect("worker task")
            .expect("every worker's set-up succeeds");
        stores.push(store);
    }
    // They share one table: the first claim wins, the others see its record.
    let req = claim_request(&record_key("shared"), LEASE, OrphanPolicy::TakeOver);
    let mut acquired = 0;
    for store in &stores {
        match store.claim(&req).await.expect("claim") {
            Claim::Acquired { .. } => acquired += 1,
            Claim::Existing(r) => assert_eq!(r.key, req.key),
        }
    }
    assert_eq!(acquired, 1, "eight stores on one schema share its records");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_survive_a_new_connection() {
    let Some(url) = service_url(POSTGRES_URL, "records_survive_a_new_connection") else {
        return;
    };
    let schemas = postgres_schemas(&url);
    let schema = schemas.fresh("idem_test");
    let first = PostgresStore::connect(&url, &schema)
        .await
        .expect("connect");
    let req = claim_request(&record_key("durable"), LEASE, OrphanPolicy::TakeOver);
    let fence = acquire(&first, &req).await;
    first
        .journal(&req.key, fence, "reserve", r#"{"id": 7}"#)
        .await
        .expect("journal");
    let outcome = Outcome::Success("{ \"sent\" :  true }".into());
    first
        .complete(&req.key, fence, &outcome, TTL)
        .await
        .expect("complete");
    drop(first);

    let second = PostgresStore::connect(&url, &schema)
        .await
        .expect("reconnect");
    let rec = second
        .get(&req.key)
        .await
        .expect("get")
        .expect("record kept");
    assert_eq!(rec.tool, "send_email");
    assert_eq!(rec.fingerprint, req.fingerprint);
    assert_eq!(rec.steps.len(), 1);
    assert_eq!(
        rec.steps[0].value, r#"{"id": 7}"#,
        "journal text kept as written"
    );
    match rec.state {
        RecordState::Completed { outcome: got, .. } => {
            assert_eq!(got, outcome, "whitespace inside the outcome is kept")
        }
        other => panic!("expected Completed, got {other:?}"),
    }
    let db_now = second.now().await.expect("now").as_millis();
    assert!(rec.created_at.as_millis() <= db_now);
}

/// A table created by the idem that had no tenants gains the column when a store connects:
/// its records read back with no tenant, new ones with theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_from_before_tenants_gains_the_column() {
    let Some(url) = service_url(POSTGRES_URL, "a_table_from_before_tenants_gains_the_column")
    else {
        return;
    };
    let schemas = postgres_schemas(&url);
    let schema = schemas.fresh("idem_test");
    let (client, connection) = tokio_postgres::connect(&url, NoTls)
        .await
        .expect("raw connection");
    tokio::spawn(connection);
    client
        .batch_execute(&format!(
            r#"
CREATE SCHEMA "{schema}";
CREATE TABLE "{schema}".records (
key text COLLATE "C" PRIMARY KEY, tool text NOT NULL, fingerprint text NOT NULL,
fence bigint NOT NULL CHECK (fence >= 1),
state text NOT NULL CHECK (state IN ('in_progress', 'completed', 'unknown')),
lease_until bigint, outcome text, expires_at bigint, unknown_since bigint, last_error text,
steps jsonb NOT NULL DEFAULT '[]'::jsonb, arguments text,
created_at bigint NOT NULL, updated_at bigint NOT NULL,
last_claim text NOT NULL DEFAULT 'inserted');
CREATE INDEX records_expiry ON "{schema}".records (expires_at) WHERE state = 'completed';
CREATE INDEX records_open ON "{schema}".records (created_at, key) WHERE state <> 'completed';
"#
        ))
        .await
        .expect("a table from before tenants");
    // An Unknown record written as the idem of that table wrote them, at `fence`.
    let insert_unknown = |req: ClaimRequest, fence: i64| {
        let (client, schema) = (&client, &schema);
        async move {
            let insert = format!(
                "INSERT INTO \"{schema}\".records (key, tool, fingerprint, fence, state, \
                 unknown_since, last_error, created_at, updated_at) \
                 VALUES ($1, 'send_email', $2, $3, 'unknown', 1000, 'timed out', 1000, 1000)"
            );
            let fingerprint = req.fingerprint.to_hex();
            client
                .execute(&insert, &[&req.key.as_str(), &fingerprint, &fence])
                .await
        }
    };
    let old = claim_request(&record_key("old"), LEASE, OrphanPolicy::TakeOver);
    insert_unknown(old.clone(), 7).await.expect("an old record");
    let mut new = claim_request(&record_key("new"), LEASE, OrphanPolicy::TakeOver);
    new.tenant = "acme".into();
    for _ in 0..2 {
        // Connecting again finds the column there and changes nothing.
        let store = PostgresStore::connect(&url, &schema)
            .await
            .expect("connect to a table from before tenants");
        let rec = store
            .get(&old.key)
            .await
            .expect("get")
            .expect("the old record");
        assert_eq!(rec.tenant, "", "a record from before tenants has none");
        assert_eq!(rec.fence, 7);
        assert!(matches!(rec.state, RecordState::Unknown { .. }));
        store.claim(&new).await.expect("claim");
        let listed = store
            .list(ListFilter {
                tenant: Some("acme".into()),
                ..ListFilter::default()
            })
            .await
            .expect("list");
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert_eq!(listed[0].tenant, "acme");
    }
    // The pending approvals' table came later still: a schema from before it gains it too.
    for index in [
        "records_tenant_open",
        "records_unknown",
        "approvals",
        "approvals_tenant_tool",
        "fence_floor",
        "budgets",
    ] {
        let row = client
            .query_one(
                "SELECT to_regclass($1::text) IS NOT NULL",
                &[&format!("\"{schema}\".{index}")],
            )
            .await
            .expect("catalog");
        assert!(row.get::<_, bool>(0), "the schema gained {index}");
    }
    // The fence floor's trigger came with it: a deleted record whose fence is ahead of the
    // clock raises the floor to its fence; one below the clock (7) needs no floor.
    let ahead = claim_request(&record_key("ahead"), LEASE, OrphanPolicy::TakeOver);
    insert_unknown(ahead.clone(), 9_000_000_000_000)
        .await
        .expect("a record whose fence ran ahead");
    let store = PostgresStore::connect(&url, &schema)
        .await
        .expect("connect again");
    let floor = || async {
        let query = format!("SELECT fence FROM \"{schema}\".fence_floor WHERE id = 0");
        let row = client
            .query_one(&query, &[])
            .await
            .expect("the fence floor");
        row.get::<_, i64>(0)
    };
    assert!(store.force_release(&old.key).await.expect("force release"));
    assert_eq!(floor().await, 0, "a fence below the clock leaves the floor");
    assert!(
        store
            .force_release(&ahead.key)
            .await
            .expect("force release")
    );
    assert_eq!(
        floor().await,
        9_000_000_000_000,
        "a fence ahead of it raises it"
    );
    let Claim::Acquired { fence, .. } = store.claim(&ahead).await.expect("claim") else {
        panic!("a freed key is acquired");
    };
    assert_eq!(
        fence, 9_000_000_000_001,
        "claimed again above the freed fence"
    );
}

/// A schema from before budgets (every other table there) gains their table when a store
/// connects, and keeps its records; connecting again changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_from_before_budgets_gains_their_table() {
    let Some(url) = service_url(
        POSTGRES_URL,
        "a_schema_from_before_budgets_gains_their_table",
    ) else {
        return;
    };
    let schemas = postgres_schemas(&url);
    let schema = schemas.fresh("idem_test");
    let k = record_key("kept");
    {
        let store = PostgresStore::connect(&url, &schema)
            .await
            .expect("connect");
        acquire(&store, &claim_request(&k, LEASE, OrphanPolicy::TakeOver)).await;
    }
    let (client, connection) = tokio_postgres::connect(&url, NoTls)
        .await
        .expect("raw connection");
    tokio::spawn(connection);
    client
        .batch_execute(&format!("DROP TABLE \"{schema}\".budgets"))
        .await
        .expect("a schema from before budgets");
    for round in 0..2 {
        let store = PostgresStore::connect(&url, &schema)
            .await
            .expect("connect to a schema from before budgets");
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcome_limit_is_configurable() {
    let Some(url) = service_url(POSTGRES_URL, "outcome_limit_is_configurable") else {
        return;
    };
    let schemas = postgres_schemas(&url);
    let schema = schemas.fresh("idem_test");
    let store = PostgresStore::connect(&url, &schema)
        .await
        .expect("connect")
        .with_max_outcome_bytes(8);
    let req = claim_request(&record_key("limit"), LEASE, OrphanPolicy::TakeOver);
    let fence = acquire(&store, &req).await;
    let err = store
        .complete(
            &req.key,
            fence,
            &Outcome::Success("\"123456789\"".into()),
            Duration::from_secs(60),
        )
        .await;
    assert!(
        matches!(
            err,
            Err(StoreError::TooLarge {
                bytes: 11,
                limit: 8
            })
        ),
        "got {err:?}"
    );
    store
        .complete(
            &req.key,
            fence,
            &Outcome::Success("\"1234\"".into()),
            Duration::from_secs(60),
        )
        .await
        .expect("a small outcome fits");
}

/// Rules of the state machine the shared conformance suite does not pin down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_follows_the_state_machine_at_its_edges() {
    let Some(url) = service_url(POSTGRES_URL, "claim_follows_the_state_machine_at_its_edges")
    else {
        return;
    };
    let schemas = postgres_schemas(&url);
    let schema = schemas.fresh("idem_test");
    let store = PostgresStore::connect(&url, &schema)
        .await
        .expect("connect");
    let short = Duration::from_millis(300);
    let past_short = Duration::from_millis(700);
    let other_arguments = Fingerprint::of(&json!({"to": "b@example.com"}));

    // An orphan is never taken over (nor turned Unknown) by a call with other arguments.
    let orphan = claim_request(
        &record_key("orphan-other-args"),
        short,
        OrphanPolicy::TakeOver,
    );
    let fence = acquire(&store, &orphan).await;
    tokio::time::sleep(past_short).await;
    for orphans in [OrphanPolicy::TakeOver, OrphanPolicy::MarkUnknown] {
        let mut other = orphan.clone();
        other.fingerprint = other_arguments;
        other.orphans = orphans;
        match store.claim(&other).await.expect("claim") {
            Claim::Existing(r) => {
                assert_eq!(r.fence, fence, "{orphans:?}: fence unchanged");
                assert_eq!(r.fingerprint, orphan.fingerprint);
                assert!(
                    matches!(r.state, RecordState::InProgress { .. }),
                    "{orphans:?}: the orphan is left as it is, got {:?}",
                    r.state
                );
            }
            got => panic!("{orphans:?}: other arguments took an orphan over: {got:?}"),
        }
    }

    // A completed record past its expiry is reclaimed by any call: next fence, a fresh
    // journal, the new call's arguments.
    let done = claim_request(&record_key("reclaim"), LEASE, OrphanPolicy::TakeOver);
    let fence = acquire(&store, &done).await;
    store
        .journal(&done.key, fence, "reserve", "1")
        .await
        .expect("journal");
    store
        .complete(&done.key, fence, &Outcome::Success("1".into()), short)
        .await
        .expect("complete");
    tokio::time::sleep(past_short).await;
    let mut again = done.clone();
    again.fingerprint = other_arguments;
    again.arguments = Some(r#"{"to":"b@example.com"}"#.into());
    match store.claim(&again).await.expect("claim") {
        Claim::Acquired {
            fence: next,
            steps,
            takeover,
        } => {
            assert_eq!(next, fence + 1, "the fence keeps increasing");
            assert!(steps.is_empty(), "an expired call's journal is not resumed");
            assert!(!takeover);
        }
        got => panic!("an expired record is reclaimed, got {got:?}"),
    }
    let rec = store.get(&done.key).await.expect("get").expect("record");
    assert_eq!(rec.fingerprint, other_arguments);
    assert_eq!(rec.arguments, again.arguments);
    assert!(rec.steps.is_empty());
    assert!(matches!(rec.state, RecordState::InProgress { .. }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_journaled_again_keeps_its_place() {
    let Some(url) = service_url(POSTGRES_URL, "a_step_journaled_again_keeps_its_place") else {
        return;
    };
    let schemas = postgres_schemas(&url);
    let schema = schemas.fresh("idem_test");
    let store = PostgresStore::connect(&url, &schema)
        .await
        .expect("connect");
    let req = claim_request(&record_key("rejournal"), LEASE, OrphanPolicy::TakeOver);
    let fence = acquire(&store, &req).await;
    for (step, value) in [
        ("reserve", "1"),
        ("charge", "\"pending\""),
        ("ship", "null"),
        ("charge", "\"paid\""),
    ] {
        store
            .journal(&req.key, fence, step, value)
            .await
            .expect("journal");
    }
    let rec = store.get(&req.key).await.expect("get").expect("record");
    let steps: Vec<_> = rec
        .steps
        .iter()
        .map(|e| (e.step.as_str(), e.value.as_str()))
        .collect();
    assert_eq!(
        steps,
        vec![("reserve", "1"), ("charge", "\"paid\""), ("ship", "null")]
    );
}

/// PostgreSQL text cannot hold U+0000: such a write fails closed and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nul_characters_are_refused_without_a_write() {
    let Some(url) = service_url(POSTGRES_URL, "nul_characters_are_refused_without_a_write") else {
        return;
    };
    let schemas = postgres_schemas(&url);
    let schema = schemas.fresh("idem_test");
    let store = PostgresStore::connect(&url, &schema)
        .await
        .expect("connect");
    let mut bad = claim_request(&record_key("nul-arguments"), LEASE, OrphanPolicy::TakeOver);
    bad.arguments = Some("{\"to\":\"a\u{0}b\"}".into());
    let err = store.claim(&bad).await.expect_err("NUL in arguments");
    assert!(err.is_unavailable(), "got {err:?}");
    assert_eq!(
        store.get(&bad.key).await.expect("get"),
        None,
        "nothing written"
    );

    let req = claim_request(&record_key("nul-journal"), LEASE, OrphanPolicy::TakeOver);
    let fence = acquire(&store, &req).await;
    let err = store
        .journal(&req.key, fence, "step", "\"a\u{0}\"")
        .await
        .expect_err("NUL in a journal value");
    assert!(err.is_unavailable(), "got {err:?}");
    let rec = store.get(&req.key).await.expect("get").expect("record");
    assert!(rec.steps.is_empty(), "the refused step was not journaled");
    // An escaped NUL is ordinary JSON text and round-trips.
    store
        .journal(&req.key, fence, "step", "\"a\\u0000\"")
        .await
        .expect("escaped NUL");
    let rec = store.get(&req.key).await.expect("get").expect("record");
    assert_eq!(rec.steps[0].value, "\"a\\u0000\"");
}

#[tokio::test]
async fn invalid_schema_names_are_refused_with_a_clear_error() {
    // The name is checked before any connection is made, so no server is needed.
    let url = std::env::var(POSTGRES_URL)
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:1/test".into());
    for bad in [
        "",
        "Idem",
        "1idem",
        "idem-test",
        "idem test",
        "idem\"; DROP SCHEMA public; --",
        "pg_idem",
        &"a".repeat(64),
    ] {
        match PostgresStore::connect(&url, bad).await {
            Err(e) => {
                let message = e.to_string();
                assert!(
                    message.contains("invalid PostgreSQL schema name"),
                    "{bad:?}: unclear error {message}"
                );
            }
            Ok(store) => panic!("schema {bad:?} accepted: {store:?}"),
        }
    }
}

#[tokio::test]
async fn closed_port_is_unavailable_promptly() {
    let started = Instant::now();
    let result = tokio::time::timeout(
        Duration::from_secs(30),
        PostgresStore::connect("postgres://postgres@127.0.0.1:1/test", "idem_unreachable"),
    )
    .await
    .expect("connect to a closed port returns instead of hanging");
    match result {
        Err(e) => assert!(e.is_unavailable(), "expected Unavailable, got {e:?}"),
        Ok(store) => panic!("connected to a closed port: {store:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn malformed_url_is_refused() {
    let err = PostgresStore::connect("postgres://[broken", "idem")
        .await
        .expect_err("a malformed URL is refused");
    assert!(err.is_unavailable(), "got {err:?}");
    assert!(err.to_string().contains("URL"), "got {err}");
}
