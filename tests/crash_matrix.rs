//! The crash matrix: a process dispatching a write call is killed with SIGKILL at each named
//! point of the dispatch, against each durable store, and a restarted process dispatches the
//! same calls again. For every point × class × store:
//!
//! - `idempotent_write`: the effect is applied once downstream. A take-over after the dead
//!   holder's lease runs the body again with the *same* downstream key, which the downstream
//!   service dedupes; the ledger shows the repeated attempt and the single application.
//! - `non_idempotent_write` and `irreversible`: an orphan (claimed, maybe applied, never
//!   recorded) ends Unknown (`DispatchError::OutcomeUnknown`) and is never run again.
//! - no completed result is lost: a call completed before the kill replays with
//!   `deduplicated: true` and the same output, in every cell.
//!
//! How: the `crash_matrix_*` tests start this test binary again as a child process running
//! only [`crash_child`], configured by the `IDEM_CRASH_CHILD` environment variable. The child
//! dispatches call `A` (completes), then call `B`, and kills itself at the named point: inside
//! a wrapper [`Store`] around the real store (before or after `claim`, before or after
//! `complete`) or inside the tool's body (after the downstream service received the request,
//! before it applied it). A second child, without the kill, dispatches `A`, `B` and `B` again
//! and prints every result; the parent compares them with the ledger file the downstream
//! service wrote.
//!
//! Redis, Redis Cluster and PostgreSQL cells need `IDEM_REDIS_URL`, `IDEM_REDIS_CLUSTER_URL` /
//! `IDEM_POSTGRES_URL`; without them those tests say why they are skipped, unless
//! `IDEM_REQUIRE_SERVICES=1` makes that a failure.

mod support;

use std::fmt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use idem::prelude::*;
use idem::store::{Claim, ClaimRequest};
use idem::{key::RecordKey, store::StoreError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use support::child::{Child, Exited, Reported, report};
use support::dispatcher::{dispatch_approving, linked};
use support::hooked_store::{Hook, Hooked, Op};
use support::ledger::{LedgerEntry, call_downstream, parse_ledger};
#[cfg(feature = "postgres")]
use support::postgres_schemas::postgres_schemas;
#[cfg(feature = "redis")]
use support::redis_keys::redis_prefixes;
use support::services::unique;
use support::stores::open_store;

/// The environment variable that turns a run of this binary into a crash child.
const CHILD_ENV: &str = "IDEM_CRASH_CHILD";
/// Lines of the child's standard output that carry a result start with this.
const RESULT_PREFIX: &str = "IDEM-CRASH-RESULT ";
/// A child that neither dies nor exits by then is reported as hung (a safety net, not a
/// measurement: a healthy child takes about the lease, one second).
const CHILD_DEADLINE: Duration = Duration::from_secs(120);
const TENANT: &str = "tenant-crash";

// ---------------------------------------------------------------------------------------
// The matrix

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Point {
    /// Before the claim reaches the store.
    BeforeClaim,
    /// After the store granted the claim, before the body ran.
    AfterClaim,
    /// Inside the effect: the downstream service received the request and logged the
    /// attempt, and the process died before it applied it.
    InsideEffect,
    /// After the effect was applied, before `complete` reached the store.
    AfterEffect,
    /// After the store recorded the outcome, before the caller saw it.
    AfterComplete,
}

const POINTS: [Point; 5] = [
    Point::BeforeClaim,
    Point::AfterClaim,
    Point::InsideEffect,
    Point::AfterEffect,
    Point::AfterComplete,
];

const CLASSES: [ToolClass; 3] = [
    ToolClass::IdempotentWrite,
    ToolClass::NonIdempotentWrite,
    ToolClass::Irreversible,
];

fn tool_of(class: ToolClass) -> &'static str {
    match class {
        ToolClass::IdempotentWrite => "crash_idem",
        ToolClass::NonIdempotentWrite => "crash_once",
        ToolClass::Irreversible => "crash_irrev",
        other => panic!("no crash probe for {other:?}"),
    }
}

impl fmt::Display for Point {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = serde_json::to_value(self).expect("point name");
        f.write_str(name.as_str().unwrap_or("?"))
    }
}

/// What a child is told to do.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ChildSpec {
    /// `sqlite`, `redis` or `postgres`.
    store: String,
    /// The SQLite file, or the server's URL.
    target: String,
    /// The Redis prefix or PostgreSQL schema.
    scope: String,
    namespace: String,
    tool: String,
    ledger: PathBuf,
    /// Where to die; `None` in the restarted run.
    point: Option<Point>,
}

/// What a probe returns: which process executed it and which one the downstream service
/// says applied the effect (its dedupe answer on a repeated key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
struct Receipt {
    key: String,
    applied_by: u32,
    executed_by: u32,
    takeover: bool,
}

// ---------------------------------------------------------------------------------------
// A crash: SIGKILL, with no destructor, no flush and no heartbeat

fn kill_self() -> ! {
    // SAFETY: `kill` and `getpid` have no memory-safety preconditions; SIGKILL ends the
    // whole process here, with no destructor, no flush and no heartbeat, like a crash.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    loop {
        std::thread::park();
    }
}

// ---------------------------------------------------------------------------------------
// The probes

/// What the child was told, for the tool bodies.
struct ChildState {
    ledger: PathBuf,
    point: Option<Point>,
}

static CHILD: OnceLock<ChildState> = OnceLock::new();

async fn effect(ctx: &ToolContext, label: &str) -> Result<Receipt, ToolError> {
    let state = CHILD.get().expect("probes run only in a crash child");
    let die = label == "B" && state.point == Some(Point::InsideEffect);
    let applied_by = call_downstream(&state.ledger, label, ctx.idempotency_key(), || {
        if die {
            kill_self()
        }
    });
    Ok(Receipt {
        key: ctx.idempotency_key().to_owned(),
        applied_by,
        executed_by: std::process::id(),
        takeover: ctx.is_takeover(),
    })
}

/// Idempotent write probe.
#[tool(class = "idempotent_write", lease_secs = 1, wait_secs = 30)]
async fn crash_idem(ctx: &ToolContext, label: String) -> Result<Receipt, ToolError> {
    effect(ctx, &label).await
}

/// Non-idempotent write probe.
#[tool(class = "non_idempotent_write", lease_secs = 1, wait_secs = 30)]
async fn crash_once(ctx: &ToolContext, label: String) -> Result<Receipt, ToolError> {
    effect(ctx, &label).await
}

/// Irreversible probe.
#[tool(class = "irreversible", lease_secs = 1, wait_secs = 30)]
async fn crash_irrev(ctx: &ToolContext, label: String) -> Result<Receipt, ToolError> {
    effect(ctx, &label).await
}

// ---------------------------------------------------------------------------------------
// A store that dies at a named point of call `B`'s dispatch and otherwise forwards.

#[derive(Debug)]
struct Crashing {
    target: RecordKey,
    point: Option<Point>,
}

impl Crashing {
    fn at(&self, key: &RecordKey, point: Point) -> bool {
        self.point == Some(point) && *key == self.target
    }
}

#[async_trait]
impl Hook for Crashing {
    async fn before(&self, op: Op, key: Option<&RecordKey>) -> Result<(), StoreError> {
        let point = match op {
            Op::Claim => Point::BeforeClaim,
            Op::Complete => Point::AfterEffect,
            _ => return Ok(()),
        };
        if key.is_some_and(|k| self.at(k, point)) {
            kill_self();
        }
        Ok(())
    }
    async fn claimed(&self, r: &ClaimRequest, claim: &Result<Claim, StoreError>) {
        if self.at(&r.key, Point::AfterClaim) && matches!(claim, Ok(Claim::Acquired { .. })) {
            kill_self();
        }
    }
    async fn completed(&self, k: &RecordKey, done: &Result<(), StoreError>) {
        if self.at(k, Point::AfterComplete) && done.is_ok() {
            kill_self();
        }
    }
}

// ---------------------------------------------------------------------------------------
// The child

/// Not a test of its own: the body of a crash child, started by the `crash_matrix_*` tests.
/// Run directly, without `IDEM_CRASH_CHILD`, it does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let spec: ChildSpec = serde_json::from_str(&spec).expect("child spec");
    let _ = CHILD.set(ChildState {
        ledger: spec.ledger.clone(),
        point: spec.point,
    });
    let call = |label: &str| {
        ToolCall::new(spec.tool.clone(), json!({ "label": label }))
            .with_call_id(format!("call-{label}"))
    };
    let (a, b) = (call("A"), call("B"));
    let plain = linked(open_store(&spec.store, &spec.target, &spec.scope, 2).await)
        .with_namespace(spec.namespace.clone());
    let run = RunContext::new(TENANT);
    let target = plain
        .record_key(&b, &run)
        .expect("record key")
        .expect("keyed call");
    let store = Arc::new(Hooked::new(
        plain.store().clone(),
        Crashing {
            target,
            point: spec.point,
        },
    ));
    let d = linked(store).with_namespace(spec.namespace.clone());

    let a_done = dispatch_approving(&d, &a, &run).await;
    report(RESULT_PREFIX, &Reported::of("A", &a_done));
    let b_done = dispatch_approving(&d, &b, &run).await;
    report(RESULT_PREFIX, &Reported::of("B", &b_done));
    if spec.point.is_some() {
        panic!("the child should have died at {:?}", spec.point);
    }
    let b_again = dispatch_approving(&d, &b, &run).await;
    report(RESULT_PREFIX, &Reported::of("B-again", &b_again));
}

// ---------------------------------------------------------------------------------------
// The parent

/// Where the cells of one store keep their records.
#[derive(Debug, Clone)]
struct Target {
    store: &'static str,
    /// The server URL (Redis, PostgreSQL); `None` for SQLite, whose files are per cell.
    url: Option<String>,
    scope: String,
}

struct Cell {
    point: Point,
    class: ToolClass,
}

impl fmt::Display for Cell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} × {}", self.point, self.class.as_str())
    }
}

/// A child that exited, and the results it reported.
struct ChildRun {
    exited: Exited,
    results: Vec<Reported>,
}

impl ChildRun {
    fn result(&self, call: &str) -> Result<&Reported, String> {
        self.results
            .iter()
            .find(|r| r.call == call)
            .ok_or_else(|| format!("no result for call {call}; {}", self.dump()))
    }

    fn dump(&self) -> String {
        self.exited.dump()
    }
}

fn run_child(spec: &ChildSpec, dir: &Path, name: &str) -> Result<ChildRun, String> {
    let exited = Child::spawn("crash_child", CHILD_ENV, spec, dir, name)?.wait(CHILD_DEADLINE)?;
    let results = exited.results(RESULT_PREFIX)?;
    Ok(ChildRun { exited, results })
}

fn ensure(condition: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if condition { Ok(()) } else { Err(what()) }
}

fn receipt(r: &Reported) -> Result<Receipt, String> {
    let json = r
        .output_json
        .as_deref()
        .ok_or_else(|| format!("{}: no output", r.call))?;
    serde_json::from_str(json).map_err(|e| format!("{}: output {json}: {e}", r.call))
}

/// Run one cell: a child killed at the point, then a restarted one; check what they report
/// against the ledger.
fn run_cell(target: &Target, root: &Path, cell: &Cell) -> Result<(), String> {
    let name = format!("{}-{}", cell.point, cell.class.as_str());
    let dir = root.join(&name);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let ledger = dir.join("ledger");
    let spec = ChildSpec {
        store: target.store.to_owned(),
        target: match &target.url {
            Some(url) => url.clone(),
            None => dir.join("idem.db").display().to_string(),
        },
        scope: target.scope.clone(),
        namespace: format!("crash/{}/{name}", target.scope),
        tool: tool_of(cell.class).to_owned(),
        ledger: ledger.clone(),
        point: Some(cell.point),
    };

    let crashed = run_child(&spec, &dir, "crashed")?;
    ensure(
        crashed.exited.status.signal() == Some(libc::SIGKILL),
        || format!("the first child was not killed; {}", crashed.dump()),
    )?;
    let a1 = crashed.result("A")?;
    ensure(a1.code == "ok" && !a1.deduplicated, || {
        format!("A did not execute in the first child: {a1:?}")
    })?;
    ensure(crashed.result("B").is_err(), || {
        format!("B returned before the kill; {}", crashed.dump())
    })?;

    let restarted = run_child(
        &ChildSpec {
            point: None,
            ..spec.clone()
        },
        &dir,
        "restarted",
    )?;
    ensure(restarted.exited.status.success(), || {
        format!("the restarted child failed; {}", restarted.dump())
    })?;
    let (first, second) = (crashed.exited.pid, restarted.exited.pid);

    // No completed result is lost: A replays, with the output the first child recorded.
    let a2 = restarted.result("A")?;
    ensure(
        a2.code == "ok" && a2.deduplicated && a2.attempts == 0 && a2.output_json == a1.output_json,
        || format!("A was not replayed as recorded: first {a1:?}, then {a2:?}"),
    )?;

    let b = restarted.result("B")?;
    let b_again = restarted.result("B-again")?;
    let entries = parse_ledger(&std::fs::read_to_string(&ledger).unwrap_or_default());
    let of = |label: &str, kind: &str| -> Vec<LedgerEntry> {
        entries
            .iter()
            .filter(|e| e.label == label && e.kind == kind)
            .cloned()
            .collect()
    };
    let ledger_text = || format!("ledger: {entries:?}");

    ensure(
        of("A", "attempt").len() == 1 && of("A", "applied").len() == 1,
        || format!("A ran again after the restart; {}", ledger_text()),
    )?;

    let orphan_is_unknown = cell.class != ToolClass::IdempotentWrite
        && matches!(
            cell.point,
            Point::AfterClaim | Point::InsideEffect | Point::AfterEffect
        );
    // (attempts logged downstream, process that applied the effect, if any)
    let (attempts, applier): (usize, Option<u32>) = match (cell.point, orphan_is_unknown) {
        (Point::BeforeClaim, _) => (1, Some(second)),
        (Point::AfterClaim, false) => (1, Some(second)),
        (Point::AfterClaim, true) => (0, None),
        (Point::InsideEffect, false) => (2, Some(second)),
        (Point::InsideEffect, true) => (1, None),
        (Point::AfterEffect, false) => (2, Some(first)),
        (Point::AfterEffect, true) => (1, Some(first)),
        (Point::AfterComplete, _) => (1, Some(first)),
    };
    let b_attempts = of("B", "attempt");
    let b_applied = of("B", "applied");
    ensure(b_attempts.len() == attempts, || {
        format!(
            "expected {attempts} attempt(s) of B downstream; {}",
            ledger_text()
        )
    })?;
    ensure(
        b_applied.iter().map(|e| e.pid).collect::<Vec<_>>()
            == applier.into_iter().collect::<Vec<_>>(),
        || {
            format!(
                "expected B applied once by {applier:?} (first child {first}, restarted {second}); {}",
                ledger_text()
            )
        },
    )?;
    let key = b
        .key
        .clone()
        .ok_or_else(|| format!("B reported no key: {b:?}"))?;
    ensure(
        b_attempts.iter().chain(&b_applied).all(|e| e.key == key),
        || {
            format!(
                "every attempt must hand downstream the key {key}; {}",
                ledger_text()
            )
        },
    )?;

    if orphan_is_unknown {
        for r in [b, b_again] {
            ensure(r.code == "outcome_unknown", || {
                format!("the orphan should be Unknown, got {r:?}")
            })?;
        }
        return Ok(());
    }

    ensure(b.code == "ok", || {
        format!("B failed after the restart: {b:?}")
    })?;
    let out = receipt(b)?;
    match cell.point {
        Point::AfterComplete => {
            ensure(b.deduplicated && b.attempts == 0, || {
                format!("B completed before the kill, so it must replay: {b:?}")
            })?;
            ensure(out.executed_by == first, || {
                format!("the replay must carry the first child's output: {out:?}")
            })?;
        }
        point => {
            ensure(!b.deduplicated && b.attempts == 1, || {
                format!("B should have executed once in the restarted child: {b:?}")
            })?;
            ensure(out.executed_by == second, || {
                format!("B should have run in the restarted child: {out:?}")
            })?;
            let takeover = point != Point::BeforeClaim;
            ensure(out.takeover == takeover, || {
                format!("B's take-over flag should be {takeover}: {out:?}")
            })?;
        }
    }
    ensure(Some(out.applied_by) == applier, || {
        format!("the downstream service's answer names the wrong applier: {out:?}")
    })?;
    ensure(
        b_again.code == "ok"
            && b_again.deduplicated
            && b_again.attempts == 0
            && b_again.output_json == b.output_json,
        || format!("B again must replay B's output: {b:?} then {b_again:?}"),
    )?;
    Ok(())
}

/// Run every cell of one store, in parallel, and report every failing cell at once.
fn run_matrix(target: Target) {
    let root = std::env::temp_dir().join(unique(&format!("idem-crash-{}", target.store)));
    std::fs::create_dir_all(&root).expect("temp dir");
    let cells: Vec<Cell> = POINTS
        .iter()
        .flat_map(|&point| CLASSES.iter().map(move |&class| Cell { point, class }))
        .collect();
    let started = Instant::now();
    let failures: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = cells
            .iter()
            .map(|cell| {
                let (target, root) = (&target, &root);
                s.spawn(move || run_cell(target, root, cell))
            })
            .collect();
        cells
            .iter()
            .zip(handles)
            .filter_map(|(cell, h)| match h.join() {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(format!("[{} | {cell}] {e}", target.store)),
                Err(_) => Some(format!("[{} | {cell}] the cell panicked", target.store)),
            })
            .collect()
    });
    eprintln!(
        "crash matrix on {}: {} cells ({} points × {} classes) in {:.1?}, {} failed",
        target.store,
        cells.len(),
        POINTS.len(),
        CLASSES.len(),
        started.elapsed(),
        failures.len()
    );
    if failures.is_empty() {
        let _ = std::fs::remove_dir_all(&root);
    } else {
        panic!(
            "{} of {} cells failed (files kept in {}):\n\n{}",
            failures.len(),
            cells.len(),
            root.display(),
            failures.join("\n\n")
        );
    }
}

#[test]
fn crash_matrix_sqlite() {
    run_matrix(Target {
        store: "sqlite",
        url: None,
        scope: String::new(),
    });
}

#[cfg(feature = "redis")]
#[test]
fn crash_matrix_redis() {
    use support::services::{REDIS_URL, service_url};
    let Some(url) = service_url(REDIS_URL, "crash_matrix_redis") else {
        return;
    };
    let prefixes = redis_prefixes(&url);
    run_matrix(Target {
        store: "redis",
        scope: prefixes.fresh("idem-crash"),
        url: Some(url),
    });
}

#[cfg(feature = "redis")]
#[test]
fn crash_matrix_redis_cluster() {
    use support::redis_keys::redis_cluster_prefixes;
    use support::services::{REDIS_CLUSTER_URL, service_url};
    let Some(urls) = service_url(REDIS_CLUSTER_URL, "crash_matrix_redis_cluster") else {
        return;
    };
    let prefixes = redis_cluster_prefixes(&urls);
    run_matrix(Target {
        store: "redis-cluster",
        scope: prefixes.fresh("idem-crash"),
        url: Some(urls),
    });
}

#[cfg(feature = "postgres")]
#[test]
fn crash_matrix_postgres() {
    use support::services::{POSTGRES_URL, service_url};
    let Some(url) = service_url(POSTGRES_URL, "crash_matrix_postgres") else {
        return;
    };
    let schemas = postgres_schemas(&url);
    run_matrix(Target {
        store: "postgres",
        scope: schemas.fresh("idem_crash"),
        url: Some(url),
    });
}
