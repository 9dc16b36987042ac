//! The real servers under network faults: worker processes dispatch the same calls through a
//! fault-injecting TCP proxy (`support::fault_proxy`) to Redis or PostgreSQL while the test
//! delays the servers' replies past the lease, drops replies after the server got the
//! request, cuts every connection, partitions the workers, and kills one worker with SIGKILL.
//! Then a checker, connected directly, lets every lease lapse, runs recovery, sends every call
//! once more, and checks the downstream ledger (a file every process shares) and the records:
//!
//! - a non-idempotent write is executed at most once per key;
//! - every attempt of a call carries the call's one key;
//! - every call that was executed has a record, Completed or Unknown, and no claim is left.
//!
//! The `faults_*` tests run this binary again as worker children running only
//! [`faults_child`], told their store and calls by `IDEM_FAULTS_CHILD`.
//!
//! Redis and PostgreSQL need `IDEM_REDIS_URL` / `IDEM_POSTGRES_URL`; without them those tests
//! say why they are skipped, unless `IDEM_REQUIRE_SERVICES=1` makes that a failure. The
//! Redis Cluster (its failover, with and without `wait_for_replicas`) is not covered here.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use idem::prelude::*;
use idem::store::RecordState;
use serde::{Deserialize, Serialize};
use serde_json::json;
use support::child::Child;
use support::dispatcher::linked;
use support::fault_proxy::{Fault, FaultProxy};
use support::ledger::{call_downstream, parse_ledger};
use support::stores::open_store;

const CHILD_ENV: &str = "IDEM_FAULTS_CHILD";
const WORKERS: usize = 3;
/// Calls per class.
const CALLS: usize = 4;
const TOOLS: [&str; 3] = ["net_idem", "net_once", "net_plain"];
const TENANT: &str = "tenant-faults";
/// Safety net against a hang (not a measurement).
const CHILD_DEADLINE: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Spec {
    store: String,
    target: String,
    scope: String,
    ledger: PathBuf,
}

/// Apply the effect of `label` under the call's key, then take a while (faults land mid-call).
async fn effect(ctx: &ToolContext, ledger: &str, label: &str) -> Result<String, ToolError> {
    let key = ctx.downstream_key().to_string();
    let by = call_downstream(Path::new(ledger), label, &key, || {});
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(format!("{label} by {by}"))
}

/// An idempotent write.
#[tool(
    class = "idempotent_write",
    lease_secs = 2,
    wait_secs = 1,
    backoff_ms = 50
)]
async fn net_idem(ctx: &ToolContext, ledger: String, n: u32) -> Result<String, ToolError> {
    effect(ctx, &ledger, &format!("net_idem-{n}")).await
}

/// Whether `net_once`'s effect happened: its key applied in the ledger.
async fn applied(ctx: &ToolContext) -> Result<Verified, ToolError> {
    let ledger = ctx
        .arguments()
        .and_then(|a| a["ledger"].as_str().map(str::to_owned))
        .unwrap_or_default();
    let text = std::fs::read_to_string(&ledger).unwrap_or_default();
    let key = ctx.downstream_key().to_string();
    let found = parse_ledger(&text)
        .iter()
        .any(|e| e.kind == "applied" && e.key == key);
    Ok(match found {
        true => Verified::Applied(json!("found in the ledger")),
        false => Verified::NotApplied,
    })
}

/// A non-idempotent write with a verify hook.
#[tool(class = "non_idempotent_write", lease_secs = 2, wait_secs = 1, backoff_ms = 50, verify = applied, verify_after_secs = 1)]
async fn net_once(ctx: &ToolContext, ledger: String, n: u32) -> Result<String, ToolError> {
    effect(ctx, &ledger, &format!("net_once-{n}")).await
}

/// A non-idempotent write without one.
#[tool(
    class = "non_idempotent_write",
    lease_secs = 2,
    wait_secs = 1,
    backoff_ms = 50
)]
async fn net_plain(ctx: &ToolContext, ledger: String, n: u32) -> Result<String, ToolError> {
    effect(ctx, &ledger, &format!("net_plain-{n}")).await
}

fn calls(ledger: &Path) -> Vec<ToolCall> {
    let ledger = ledger.display().to_string();
    TOOLS
        .iter()
        .flat_map(|tool| {
            let ledger = ledger.clone();
            (0..CALLS as u32).map(move |n| {
                ToolCall::new(*tool, json!({"ledger": ledger, "n": n}))
                    .with_key(format!("{tool}-{n}"))
            })
        })
        .collect()
}

/// A worker: every call at once, each sent again while the store is unreachable or the call
/// is held elsewhere (as an agent's loop would), at most a bounded number of times; and all
/// of them again, ten times over the fault window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let spec: Spec = serde_json::from_str(&spec).expect("the child's spec");
    let store = open_store(&spec.store, &spec.target, &spec.scope, 4).await;
    let d = linked(store);
    // The same calls again and again over the fault window, as re-sends and replays send them.
    for _ in 0..10 {
        let tasks: Vec<_> = calls(&spec.ledger)
            .into_iter()
            .map(|call| {
                let d = d.clone();
                tokio::spawn(async move {
                    for _ in 0..30 {
                        match d.dispatch(&call, &RunContext::new(TENANT)).await {
                            Err(e)
                                if matches!(
                                    e.code(),
                                    "store_unavailable" | "store_error" | "in_progress" | "fenced"
                                ) =>
                            {
                                tokio::time::sleep(Duration::from_millis(150)).await;
                            }
                            _ => return,
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            let _ = t.await;
        }
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
}

/// One round on `store` (`direct` is the server's address as a store target, `via` the same
/// through the proxy): the violations found.
fn round(store: &str, direct: &str, via: &str, scope: &str, proxy: &FaultProxy) -> Vec<String> {
    let dir = std::env::temp_dir();
    let ledger = dir.join(format!("{scope}.ledger"));
    let spec = Spec {
        store: store.to_owned(),
        target: via.to_owned(),
        scope: scope.to_owned(),
        ledger: ledger.clone(),
    };
    let children: Vec<Child> = (0..WORKERS)
        .map(|i| {
            Child::spawn(
                "faults_child",
                CHILD_ENV,
                &spec,
                &dir,
                &format!("{scope}-w{i}"),
            )
            .expect("spawn a worker")
        })
        .collect();
    // The faults, while the workers run.
    let pause = |ms: u64| std::thread::sleep(Duration::from_millis(ms));
    pause(300);
    proxy.set(Fault::DelayReplies(Duration::from_millis(2_500)));
    pause(400);
    // A worker dies while its calls wait for delayed replies.
    // SAFETY: `kill` with a child's pid and SIGKILL: it only signals that process.
    unsafe { libc::kill(children[0].pid() as i32, libc::SIGKILL) };
    pause(1_100);
    proxy.set(Fault::Pass);
    pause(300);
    proxy.cut();
    pause(300);
    proxy.set(Fault::DropReplies);
    pause(400);
    proxy.set(Fault::Pass);
    pause(200);
    proxy.set(Fault::Partition);
    pause(1_500);
    proxy.set(Fault::Pass);
    let mut killed = 0;
    for child in children {
        let exited = child.wait(CHILD_DEADLINE).expect("the worker ends");
        if exited.status.signal() == Some(libc::SIGKILL) {
            killed += 1;
        }
    }
    assert_eq!(
        killed, 1,
        "one worker was killed while its calls were in flight"
    );

    // The checker, connected directly: leases lapse, recovery, every call once more.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let d = linked(open_store(store, direct, scope, 4).await);
        let run = RunContext::new(TENANT);
        tokio::time::sleep(Duration::from_secs(5)).await;
        for _ in 0..2 {
            let _ = d.recover(&idem::dispatch::RecoveryOptions::default()).await;
        }
        for call in calls(&ledger) {
            let _ = d.dispatch(&call, &run).await;
        }
        let entries = parse_ledger(&std::fs::read_to_string(&ledger).unwrap_or_default());
        let mut violations = Vec::new();
        let mut keys: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        let mut attempts: BTreeMap<&str, usize> = BTreeMap::new();
        for e in entries.iter().filter(|e| e.kind == "attempt") {
            keys.entry(e.label.as_str()).or_default().insert(e.key.as_str());
            *attempts.entry(e.label.as_str()).or_default() += 1;
        }
        for (label, keys) in &keys {
            if keys.len() > 1 {
                violations.push(format!("{label} was attempted under {} keys", keys.len()));
            }
            if !label.starts_with("net_idem") && attempts[label] > 1 {
                violations.push(format!("{label}, a non-idempotent write, ran {} times", attempts[label]));
            }
        }
        let mut states: BTreeMap<String, usize> = BTreeMap::new();
        for call in calls(&ledger) {
            let label = format!("{}-{}", call.name, call.arguments["n"]);
            let key = d.record_key(&call, &run).unwrap().expect("a key");
            let got = d.store().get(&key).await;
            let state = match &got {
                Ok(Some(r)) => format!("{:?}", r.state.kind()),
                Ok(None) => "none".into(),
                Err(_) => "error".into(),
            };
            *states.entry(state).or_default() += 1;
            match got {
                Ok(Some(r)) if matches!(r.state, RecordState::InProgress { .. }) => {
                    violations.push(format!("{label}: a claim is still held"));
                }
                Ok(None) if attempts.contains_key(label.as_str()) => {
                    violations.push(format!("{label}: executed, and nothing is recorded"));
                }
                Err(e) => violations.push(format!("{label}: the store failed: {e}")),
                _ => {}
            }
        }
        let total: usize = attempts.values().sum();
        println!("{store} round {scope}: {total} executions of {} calls; records {states:?}; {} violation(s)", calls(&ledger).len(), violations.len());
        let _ = std::fs::remove_file(&ledger);
        violations
    })
}

fn faults_on(
    store: &str,
    direct: &str,
    proxied: impl Fn(&str) -> String,
    scopes: impl Fn() -> String,
    server: &str,
) {
    let proxy = FaultProxy::start(server);
    let via = proxied(&proxy.addr.to_string());
    let rounds = 2;
    let mut violations = Vec::new();
    for _ in 0..rounds {
        violations.extend(round(store, direct, &via, &scopes(), &proxy));
    }
    println!(
        "{store}: {rounds} rounds under network faults, {} violations",
        violations.len()
    );
    assert!(violations.is_empty(), "{violations:#?}");
}

/// `host:port` of a `scheme://[user@]host:port/...` URL.
fn host_port(url: &str) -> String {
    let rest = url.split("://").nth(1).unwrap_or(url);
    let rest = rest.rsplit('@').next().unwrap_or(rest);
    rest.split('/').next().unwrap_or(rest).to_owned()
}

#[cfg(feature = "redis")]
#[test]
fn faults_redis() {
    use support::redis_keys::redis_prefixes;
    let Some(url) = support::services::service_url(support::services::REDIS_URL, "faults_redis")
    else {
        return;
    };
    let prefixes = redis_prefixes(&url);
    let server = host_port(&url);
    faults_on(
        "redis",
        &url,
        |proxy| url.replacen(&server, proxy, 1),
        || prefixes.fresh("idem-faults"),
        &server,
    );
}

#[cfg(feature = "postgres")]
#[test]
fn faults_postgres() {
    use support::postgres_schemas::postgres_schemas;
    let Some(url) =
        support::services::service_url(support::services::POSTGRES_URL, "faults_postgres")
    else {
        return;
    };
    let schemas = postgres_schemas(&url);
    let server = host_port(&url);
    faults_on(
        "postgres",
        &url,
        |proxy| url.replacen(&server, proxy, 1),
        || schemas.fresh("idem_faults"),
        &server,
    );
}
