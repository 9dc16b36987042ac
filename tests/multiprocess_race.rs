//! Four processes × sixteen tasks dispatch the same write calls at the same moment against
//! one store (one SQLite file, one Redis prefix, one PostgreSQL schema): every call executes
//! exactly once (the downstream ledger shows one attempt per key, across all processes), and
//! all sixty-four callers of a call get the same output, sixty-three of them as replays.
//!
//! The `race_*` tests start this test binary again as [`PROCESSES`] child processes running
//! only [`race_child`], configured by `IDEM_RACE_CHILD`. The children connect, report ready,
//! wait for a start signal (a file the parent creates once all are ready), then race; each
//! prints its callers' results, which the parent compares.
//!
//! Redis, a Redis Cluster and PostgreSQL need `IDEM_REDIS_URL`, `IDEM_REDIS_CLUSTER_URL` /
//! `IDEM_POSTGRES_URL`; without them those tests say why they are skipped, unless
//! `IDEM_REQUIRE_SERVICES=1` makes that a failure.

mod support;

use std::collections::BTreeMap;
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use idem::prelude::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use support::child::{Child, Reported, report};
use support::dispatcher::{dispatch_approving, linked};
use support::ledger::{call_downstream, parse_ledger};
#[cfg(feature = "postgres")]
use support::postgres_schemas::postgres_schemas;
#[cfg(feature = "redis")]
use support::redis_keys::redis_prefixes;
use support::services::unique;
use support::stores::open_store;

const CHILD_ENV: &str = "IDEM_RACE_CHILD";
const RESULT_PREFIX: &str = "IDEM-RACE-RESULT ";
/// Processes racing.
const PROCESSES: usize = 4;
/// Tasks racing in each process.
const TASKS: usize = 16;
/// How long the body holds the claim, so that every duplicate arrives while it runs.
const EFFECT_TIME: Duration = Duration::from_millis(150);
/// Safety nets against a hang (not measurements).
const CHILD_DEADLINE: Duration = Duration::from_secs(120);
const TENANT: &str = "tenant-race";

/// The calls every task dispatches: two per write class.
const CALLS: [(&str, &str); 6] = [
    ("race_idem", "idem-1"),
    ("race_idem", "idem-2"),
    ("race_once", "once-1"),
    ("race_once", "once-2"),
    ("race_irrev", "irrev-1"),
    ("race_irrev", "irrev-2"),
];

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ChildSpec {
    store: String,
    target: String,
    scope: String,
    namespace: String,
    ledger: PathBuf,
    ready: PathBuf,
    go: PathBuf,
}

/// What a probe returns: one value per execution, so two executions could never be mistaken
/// for one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
struct Receipt {
    key: String,
    applied_by: u32,
    executed_by: u32,
    execution: u64,
}

// ---------------------------------------------------------------------------------------
// The probes

static LEDGER: OnceLock<PathBuf> = OnceLock::new();
static EXECUTIONS: AtomicU64 = AtomicU64::new(0);

async fn effect(ctx: &ToolContext, label: &str) -> Result<Receipt, ToolError> {
    let ledger = LEDGER.get().expect("probes run only in a race child");
    let applied_by = call_downstream(ledger, label, ctx.idempotency_key(), || {});
    tokio::time::sleep(EFFECT_TIME).await;
    Ok(Receipt {
        key: ctx.idempotency_key().to_owned(),
        applied_by,
        executed_by: std::process::id(),
        execution: EXECUTIONS.fetch_add(1, Ordering::Relaxed),
    })
}

/// Idempotent write probe.
#[tool(class = "idempotent_write", wait_secs = 60)]
async fn race_idem(ctx: &ToolContext, label: String) -> Result<Receipt, ToolError> {
    effect(ctx, &label).await
}

/// Non-idempotent write probe.
#[tool(class = "non_idempotent_write", wait_secs = 60)]
async fn race_once(ctx: &ToolContext, label: String) -> Result<Receipt, ToolError> {
    effect(ctx, &label).await
}

/// Irreversible probe.
#[tool(class = "irreversible", wait_secs = 60)]
async fn race_irrev(ctx: &ToolContext, label: String) -> Result<Receipt, ToolError> {
    effect(ctx, &label).await
}

// ---------------------------------------------------------------------------------------
// The child

/// Not a test of its own: the body of a racing process, started by the `race_*` tests. Run
/// directly, without `IDEM_RACE_CHILD`, it does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn race_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let spec: ChildSpec = serde_json::from_str(&spec).expect("child spec");
    let _ = LEDGER.set(spec.ledger.clone());
    let d = Arc::new(
        linked(open_store(&spec.store, &spec.target, &spec.scope, 4).await)
            .with_namespace(spec.namespace.clone()),
    );
    File::create(&spec.ready).expect("report ready");
    let deadline = Instant::now() + CHILD_DEADLINE;
    while !spec.go.exists() {
        assert!(Instant::now() < deadline, "no start signal");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }

    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let d = d.clone();
        tasks.push(tokio::spawn(async move {
            let mut results = Vec::new();
            // Each task walks the calls from its own starting point, so every call has
            // callers arriving first from every process.
            for i in 0..CALLS.len() {
                let (tool, label) = CALLS[(task + i) % CALLS.len()];
                let call = ToolCall::new(tool, json!({ "label": label }))
                    .with_call_id(format!("call-{label}"));
                let run = RunContext::new(TENANT);
                results.push((label, dispatch_approving(&d, &call, &run).await));
            }
            results
        }));
    }
    for task in tasks {
        for (label, result) in task.await.expect("task") {
            report(RESULT_PREFIX, &Reported::of(label, &result));
        }
    }
}

// ---------------------------------------------------------------------------------------
// The parent

/// Race the processes on one store and check the outcome.
fn race(store: &str, target: Option<&str>, scope: &str) {
    let dir = std::env::temp_dir().join(unique(&format!("idem-race-{store}")));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let ledger = dir.join("ledger");
    let go = dir.join("go");
    let spec = |n: usize| ChildSpec {
        store: store.to_owned(),
        target: match target {
            Some(url) => url.to_owned(),
            None => dir.join("idem.db").display().to_string(),
        },
        scope: scope.to_owned(),
        namespace: format!("race/{scope}"),
        ledger: ledger.clone(),
        ready: dir.join(format!("ready-{n}")),
        go: go.clone(),
    };
    let mut children: Vec<Child> = (0..PROCESSES)
        .map(|n| {
            Child::spawn(
                "race_child",
                CHILD_ENV,
                &spec(n),
                &dir,
                &format!("child-{n}"),
            )
            .unwrap_or_else(|e| panic!("{e}"))
        })
        .collect();

    // Start them together once all are connected.
    let started = Instant::now();
    while (0..PROCESSES).any(|n| !spec(n).ready.exists()) {
        for child in &mut children {
            if let Some(status) = child.exited() {
                panic!(
                    "a child exited {status} before the start:\n{}",
                    child.stderr()
                );
            }
        }
        assert!(
            started.elapsed() < CHILD_DEADLINE,
            "the children did not get ready"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    File::create(&go).expect("start signal");

    let mut results: Vec<Reported> = Vec::new();
    for (n, child) in children.into_iter().enumerate() {
        let exited = child.wait(CHILD_DEADLINE).unwrap_or_else(|e| panic!("{e}"));
        let (status, stdout, stderr) = (exited.status, &exited.stdout, &exited.stderr);
        assert!(
            status.success(),
            "child {n} exited {status}\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
        );
        results.extend(
            exited
                .results::<Reported>(RESULT_PREFIX)
                .expect("result line"),
        );
    }
    let elapsed = started.elapsed();

    let entries = parse_ledger(&std::fs::read_to_string(&ledger).unwrap_or_default());
    let mut by_call: BTreeMap<&str, Vec<&Reported>> = BTreeMap::new();
    for r in &results {
        by_call.entry(r.call.as_str()).or_default().push(r);
    }
    assert_eq!(
        by_call.len(),
        CALLS.len(),
        "every call was reported: {by_call:?}"
    );
    for (_, label) in CALLS {
        let reports = &by_call[label];
        assert_eq!(
            reports.len(),
            PROCESSES * TASKS,
            "{label}: one result per caller"
        );
        let failed: Vec<_> = reports.iter().filter(|r| r.code != "ok").collect();
        assert!(failed.is_empty(), "{label}: callers failed: {failed:?}");
        let outputs: std::collections::BTreeSet<&str> = reports
            .iter()
            .filter_map(|r| r.output_json.as_deref())
            .collect();
        assert_eq!(
            outputs.len(),
            1,
            "{label}: every caller gets the same output, got {outputs:?}"
        );
        let executed = reports.iter().filter(|r| !r.deduplicated).count();
        assert_eq!(
            executed, 1,
            "{label}: exactly one caller executed, the others replayed"
        );
        let attempts: Vec<_> = entries
            .iter()
            .filter(|e| e.label == label && e.kind == "attempt")
            .collect();
        let applied: Vec<_> = entries
            .iter()
            .filter(|e| e.label == label && e.kind == "applied")
            .collect();
        assert_eq!(
            attempts.len(),
            1,
            "{label}: one execution across {PROCESSES} processes: {attempts:?}"
        );
        assert_eq!(applied.len(), 1, "{label}: applied once: {applied:?}");
        let receipt: Receipt =
            serde_json::from_str(outputs.first().expect("an output")).expect("receipt");
        assert_eq!(
            (receipt.key.as_str(), receipt.applied_by),
            (applied[0].key.as_str(), applied[0].pid),
            "{label}: the shared output is the one execution's"
        );
    }
    eprintln!(
        "race on {store}: {PROCESSES} processes × {TASKS} tasks × {} calls, {} dispatches, {} executions, in {elapsed:.1?}",
        CALLS.len(),
        results.len(),
        entries.iter().filter(|e| e.kind == "attempt").count()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn race_sqlite() {
    race("sqlite", None, "sqlite");
}

#[cfg(feature = "redis")]
#[test]
fn race_redis() {
    use support::services::{REDIS_URL, service_url};
    let Some(url) = service_url(REDIS_URL, "race_redis") else {
        return;
    };
    let prefixes = redis_prefixes(&url);
    race("redis", Some(&url), &prefixes.fresh("idem-race"));
}

#[cfg(feature = "redis")]
#[test]
fn race_redis_cluster() {
    use support::redis_keys::redis_cluster_prefixes;
    use support::services::{REDIS_CLUSTER_URL, service_url};
    let Some(urls) = service_url(REDIS_CLUSTER_URL, "race_redis_cluster") else {
        return;
    };
    let prefixes = redis_cluster_prefixes(&urls);
    race("redis-cluster", Some(&urls), &prefixes.fresh("idem-race"));
}

#[cfg(feature = "postgres")]
#[test]
fn race_postgres() {
    use support::services::{POSTGRES_URL, service_url};
    let Some(url) = service_url(POSTGRES_URL, "race_postgres") else {
        return;
    };
    let schemas = postgres_schemas(&url);
    race("postgres", Some(&url), &schemas.fresh("idem_race"));
}
