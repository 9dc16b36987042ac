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
//! `faults_redis_cluster` runs a Redis Cluster of its own (three primaries, a replica each)
//! through a lagging replica, a primary killed with SIGKILL, a graceful `CLUSTER FAILOVER`
//! and a killed worker, with and without `wait_for_replicas`, and measures what is lost
//! without it.
//!
//! Redis and PostgreSQL need `IDEM_REDIS_URL` / `IDEM_POSTGRES_URL`; without them those tests
//! say why they are skipped, unless `IDEM_REQUIRE_SERVICES=1` makes that a failure (the
//! cluster needs `redis-server`).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use idem::prelude::*;
use idem::record::RecordState;
use serde::{Deserialize, Serialize};
use serde_json::json;
use support::child::Child;
use support::dispatcher::linked;
use support::fault_proxy::{Fault, FaultProxy};
use support::ledger::{call_downstream, parse_ledger};
#[cfg(feature = "redis")]
use support::redis_cluster::Cluster;
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

/// One round on `store` (`via` is where the workers find the server, `direct` where the
/// checker does): `before` runs before the workers start, `during` while they run (it kills
/// the first worker); the violations found, each led by the label of its call.
fn round(
    store: &str,
    direct: &str,
    via: &str,
    scope: &str,
    before: impl FnOnce(),
    during: impl FnOnce(&[Child], &Path),
) -> Vec<String> {
    let dir = std::env::temp_dir();
    let ledger = dir.join(format!("{scope}.ledger"));
    let spec = Spec {
        store: store.to_owned(),
        target: via.to_owned(),
        scope: scope.to_owned(),
        ledger: ledger.clone(),
    };
    before();
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
    during(&children, &ledger);
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

/// The proxy's faults while the workers run: replies delayed past the lease (and a worker
/// killed while its calls wait for them), every connection cut, replies dropped after the
/// server got the request, the workers partitioned.
fn proxy_faults(proxy: &FaultProxy, workers: &[Child]) {
    pause(300);
    proxy.set(Fault::DelayReplies(Duration::from_millis(2_500)));
    pause(400);
    kill(workers[0].pid(), libc::SIGKILL);
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
}

fn pause(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

/// Send `signal` to the process `pid` (a worker or a server this test started).
fn kill(pid: u32, signal: i32) {
    // SAFETY: `kill` with the pid of a process this test started: it only signals that
    // process.
    unsafe { libc::kill(pid as i32, signal) };
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
        let scope = scopes();
        violations.extend(round(
            store,
            direct,
            &via,
            &scope,
            || {},
            |workers, _| proxy_faults(&proxy, workers),
        ));
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

/// A Redis Cluster with a replica per primary, under the faults a fleet meets: the replica of
/// one primary falls behind (stopped) while workers write, then that primary is killed with
/// SIGKILL, its replica takes over and the killed node comes back as its replica; meanwhile
/// another shard fails over gracefully (`CLUSTER FAILOVER`) and one worker is killed. Run
/// once with `wait_for_replicas(1, 250 ms)`, where no call may run twice, and once without,
/// where the failover loses what the replica never got: the test measures that loss (the
/// non-idempotent calls on the killed primary run again) rather than hiding it; README states
/// the bound.
#[cfg(feature = "redis")]
#[test]
fn faults_redis_cluster() {
    let installed = std::process::Command::new("redis-server")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !installed {
        support::services::unavailable(
            "faults_redis_cluster",
            "`redis-server` is not installed",
            "install `redis-server` to run it",
        );
        return;
    }
    // The two rounds at once, each on its own cluster.
    std::thread::scope(|threads| {
        let rounds = [true, false].map(|wait| threads.spawn(move || cluster_round(wait)));
        for round in rounds {
            if let Err(panic) = round.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
}

/// One round of [`faults_redis_cluster`] on a cluster of its own, `wait`ing for replicas or
/// not.
#[cfg(feature = "redis")]
fn cluster_round(wait: bool) {
    let cluster = Cluster::start(1);
    let shards = cluster.shards();
    let scope = format!("idem-faults-{}-{wait}", std::process::id());
    // Which primary holds each call's record.
    let keys = linked(Arc::new(idem::store::memory::MemoryStore::new()));
    let run = RunContext::new(TENANT);
    let owner = |call: &ToolCall| -> usize {
        let key = keys.record_key(call, &run).unwrap().expect("a key");
        Cluster::owner(&shards, &format!("{scope}:{{{}}}:rec", key.as_str()))
    };
    let label = |call: &ToolCall| format!("{}-{}", call.name, call.arguments["n"]);
    let all = calls(Path::new(""));
    // The shard whose primary dies: the one holding most of the non-idempotent calls.
    let once = |call: &&ToolCall| call.name != "net_idem";
    let lost = (0..shards.len())
        .max_by_key(|&i| all.iter().filter(once).filter(|c| owner(c) == i).count())
        .expect("three shards");
    let on_lost: BTreeSet<String> = all.iter().filter(|c| owner(c) == lost).map(label).collect();
    let other = (lost + 1) % shards.len();
    let primary = &shards[lost].primary;
    let replica = shards[lost].replica.as_ref().expect("a replica");
    let store = if wait {
        "redis-cluster-wait"
    } else {
        "redis-cluster"
    };
    let targets = cluster.nodes.join(",");
    let started = std::time::Instant::now();
    let violations = round(
        store,
        &targets,
        &targets,
        &scope,
        // The replica falls behind: stopped, and dropped by its primary (whose replication
        // timeout is cut to a second), it receives nothing more. What the kernel had
        // already delivered to it is read once it runs again, so the primary must have
        // closed the link before the workers write.
        || {
            kill(cluster.pid(replica), libc::SIGSTOP);
            Cluster::cli(primary, &["config", "set", "repl-timeout", "1"]);
            Cluster::await_replication(primary, "connected_slaves:0");
        },
        |workers, ledger| {
            // The calls elsewhere done (and, without waiting for replicas, those on the
            // doomed primary: it acknowledges what its replica never gets).
            let applied = || -> BTreeSet<String> {
                parse_ledger(&std::fs::read_to_string(ledger).unwrap_or_default())
                    .into_iter()
                    .filter(|e| e.kind == "applied")
                    .map(|e| e.label)
                    .collect()
            };
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            let wanted = |done: &BTreeSet<String>, with_lost: bool| {
                all.iter()
                    .map(label)
                    .filter(|l| with_lost || !on_lost.contains(l))
                    .all(|l| done.contains(&l))
            };
            while !wanted(&applied(), false) && std::time::Instant::now() < deadline {
                pause(50);
            }
            let settle = std::time::Instant::now() + Duration::from_secs(1);
            while !wanted(&applied(), true) && std::time::Instant::now() < settle {
                pause(50);
            }
            kill(workers[0].pid(), libc::SIGKILL);
            kill(cluster.pid(primary), libc::SIGKILL);
            kill(cluster.pid(replica), libc::SIGCONT);
            let other = shards[other].replica.as_ref().expect("a replica");
            Cluster::cli(other, &["cluster", "failover"]);
            Cluster::await_replication(replica, "role:master");
            cluster.restart(primary);
            Cluster::await_replication(primary, "master_link_status:up");
        },
    );
    let ran_twice: Vec<&String> = violations
        .iter()
        .filter(|v| v.contains("a non-idempotent write, ran"))
        .collect();
    let line = format!(
        "{store}: {} violation(s) in {:.0?}; {} call(s) on the killed primary, {} of them non-idempotent, {} ran twice",
        violations.len(),
        started.elapsed(),
        on_lost.len(),
        all.iter().filter(once).filter(|c| owner(c) == lost).count(),
        ran_twice.len(),
    );
    println!("{line}");
    let elsewhere: Vec<&String> = violations
        .iter()
        .filter(|v| {
            !on_lost.iter().any(|l| {
                v.starts_with(&format!("{l} "))
                    || v.starts_with(&format!("{l}:"))
                    || v.starts_with(&format!("{l},"))
            })
        })
        .collect();
    assert!(
        elsewhere.is_empty(),
        "{store}: violations away from the killed primary: {elsewhere:#?}"
    );
    if wait {
        assert!(violations.is_empty(), "{store}: {violations:#?}");
    } else {
        // Without waiting for replicas the loss is real, and this test sees it: every
        // violation is a non-idempotent call of the killed primary that ran again.
        assert!(
            !ran_twice.is_empty(),
            "{store}: the failover lost nothing the replica missed, so this round proved nothing"
        );
        assert_eq!(ran_twice.len(), violations.len(), "{violations:#?}");
    }
}
