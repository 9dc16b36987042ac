//! Recovery without a caller, across processes, on each durable store: a worker process is
//! killed with SIGKILL while it holds three calls, one per kind of recovery, and two recovery
//! processes started at the same moment settle them with `Dispatcher::recover`:
//!
//! - `rec_idem` (`idempotent_write`): the worker logged the attempt downstream and died before
//!   the effect was applied. Exactly one recovery process runs it again, with the *same*
//!   downstream key (`RecoveryAction::ReRan`, `Ok`); the effect is applied once; a later
//!   dispatch of the call replays the recorded output.
//! - `rec_once` (`non_idempotent_write` with a verify hook): the worker applied the effect and
//!   died before recording it. It is never run again: it is turned Unknown (`MarkedUnknown`)
//!   and, past its settle delay, its hook finds the effect in the ledger
//!   (`Verified { applied: true }`); a later dispatch replays the hook's answer.
//! - `rec_plain` (`non_idempotent_write`, no hook): never run again either; turned Unknown and
//!   then left for an operator (`Reported(NoVerifyHook)`); a later dispatch still says its
//!   outcome is unknown.
//!
//! How: the `recovery_across_processes_*` tests start this test binary again as child
//! processes running only [`recovery_child`], told their role by `IDEM_RECOVERY_CHILD`: a
//! worker (dispatches the three calls at once and kills itself once all three bodies have
//! started), two recoverers (wait for a start signal, then run recovery passes until nothing
//! is left to do, printing every `Recovered` line) and a checker (reads the records and
//! dispatches the three calls again). The downstream service is a ledger file
//! (`support::ledger`), which the parent compares with what the children printed.
//! Each recovery report line is checked against the ledger, so a record run twice, or a
//! non-idempotent record run at all, fails the test.
//!
//! Redis, Redis Cluster and PostgreSQL need `IDEM_REDIS_URL`, `IDEM_REDIS_CLUSTER_URL` /
//! `IDEM_POSTGRES_URL`; without them those tests say why they are skipped, unless
//! `IDEM_REQUIRE_SERVICES=1` makes that a failure.

mod support;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use idem::prelude::*;
use idem::{
    Verified, dispatch::RecoveryAction, dispatch::RecoveryOptions, dispatch::Unrecoverable,
    record::StateKind, store::ListFilter,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use support::child::{Child, Exited, Reported, report};
use support::dispatcher::{dispatch_approving, linked};
use support::ledger::{LedgerEntry, call_downstream, parse_ledger};
#[cfg(feature = "postgres")]
use support::postgres_schemas::postgres_schemas;
#[cfg(feature = "redis")]
use support::redis_keys::redis_prefixes;
use support::services::unique;
use support::stores::open_store;

/// The environment variable that turns a run of this binary into a child.
const CHILD_ENV: &str = "IDEM_RECOVERY_CHILD";
/// Lines of a child's standard output that carry a result start with this.
const RESULT_PREFIX: &str = "IDEM-RECOVERY-RESULT ";
/// Safety nets against a hang (not measurements).
const CHILD_DEADLINE: Duration = Duration::from_secs(120);
const WORKER_DEADLINE: Duration = Duration::from_secs(60);
/// The tools' lease: the parent lets at least this much pass after the worker died before
/// starting the recoverers (a wait, never an assertion on time).
const LEASE: Duration = Duration::from_secs(1);
/// A recoverer's passes, at most, and its pause between two passes.
const MAX_PASSES: usize = 12;
const PASS_PAUSE: Duration = Duration::from_millis(400);
const TENANT: &str = "tenant-recovery-processes";

/// The three calls: (tool, the explicit key of its call, the label the ledger logs).
const CALLS: [(&str, &str, &str); 3] = [
    ("rec_idem", "recover-idem-1", "idem"),
    ("rec_once", "recover-once-1", "once"),
    ("rec_plain", "recover-plain-1", "plain"),
];

fn call_of(tool: &str) -> ToolCall {
    let (tool, key, label) = CALLS
        .iter()
        .find(|(t, _, _)| *t == tool)
        .expect("one of the three calls");
    ToolCall::new(*tool, json!({ "label": label }))
        .with_call_id(format!("call-{label}"))
        .with_key(*key)
}

fn label_of(tool: &str) -> &'static str {
    CALLS
        .iter()
        .find(|(t, _, _)| *t == tool)
        .map(|(_, _, l)| *l)
        .expect("one of the three calls")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Role {
    /// Dispatches the three calls and dies holding them.
    Worker,
    /// Runs recovery passes, after the start signal.
    Recoverer,
    /// Reads the records and dispatches the calls again.
    Checker,
}

/// What a child is told to do.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ChildSpec {
    role: Role,
    /// `sqlite`, `redis`, `redis-cluster` or `postgres`.
    store: String,
    /// The SQLite file, or the server's URL(s).
    target: String,
    /// The Redis prefix or PostgreSQL schema.
    scope: String,
    namespace: String,
    ledger: PathBuf,
    /// A recoverer creates this file once connected...
    ready: Option<PathBuf>,
    /// ...and starts once this one exists.
    go: Option<PathBuf>,
}

/// What a probe returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
struct Receipt {
    key: String,
    applied_by: u32,
    executed_by: u32,
    takeover: bool,
    /// Made by the verify hook, not by a run of the body.
    verified: bool,
}

/// One line a child prints.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "line", rename_all = "snake_case")]
enum Line {
    /// The worker: a call's record key, before dispatching it.
    Key { tool: String, record_key: String },
    /// A recoverer: one `Recovered` of a pass.
    Recovered {
        pass: usize,
        tool: String,
        record_key: String,
        tenant: String,
        /// The variant, in snake case (`re_ran`, `verified_applied`, `reported_no_verify_hook`...).
        action: String,
        /// A re-run's downstream key.
        rerun_key: Option<String>,
        /// A re-run's output (`Ok`), as JSON.
        rerun_output: Option<String>,
        /// A re-run's error, or the action's debug text otherwise.
        detail: String,
    },
    /// A recoverer: it stopped after this many passes, with nothing left to do.
    Done { passes: usize },
    /// The checker: a record's state (`None`: no record).
    State {
        tool: String,
        state: Option<StateKind>,
    },
    /// The checker: a dispatch of a call again.
    Dispatched { tool: String, result: Reported },
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

/// What the child was told, for the tool bodies and the hook.
struct ChildState {
    ledger: PathBuf,
    worker: bool,
}

static CHILD: OnceLock<ChildState> = OnceLock::new();
/// In the worker: how many of `rec_once` and `rec_plain` have applied their effect.
static SETTLED_BODIES: AtomicUsize = AtomicUsize::new(0);

fn child_state() -> &'static ChildState {
    CHILD.get().expect("probes run only in a recovery child")
}

fn receipt(ctx: &ToolContext, applied_by: u32) -> Receipt {
    Receipt {
        key: ctx.idempotency_key().to_owned(),
        applied_by,
        executed_by: std::process::id(),
        takeover: ctx.is_takeover(),
        verified: false,
    }
}

/// In the worker: applies nothing before the two others applied their effect, then dies
/// inside the effect (the downstream service logged the attempt, did not apply it).
/// Anywhere else: applies its effect under the call's key.
#[tool(class = "idempotent_write", lease_secs = 1, wait_secs = 30)]
async fn rec_idem(ctx: &ToolContext, label: String) -> Result<Receipt, ToolError> {
    let state = child_state();
    if state.worker {
        while SETTLED_BODIES.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        call_downstream(&state.ledger, &label, ctx.idempotency_key(), || kill_self());
        unreachable!("the worker dies inside the effect");
    }
    let applied_by = call_downstream(&state.ledger, &label, ctx.idempotency_key(), || {});
    Ok(receipt(ctx, applied_by))
}

/// Applies its effect; in the worker, then waits for the kill (it is never recorded).
#[tool(
    class = "non_idempotent_write",
    lease_secs = 1,
    verify_after_secs = 0,
    verify = once_applied,
    wait_secs = 30
)]
async fn rec_once(ctx: &ToolContext, label: String) -> Result<Receipt, ToolError> {
    applied_then_hang(ctx, &label).await
}

/// Applies its effect; in the worker, then waits for the kill. No verify hook.
#[tool(class = "non_idempotent_write", lease_secs = 1, wait_secs = 30)]
async fn rec_plain(ctx: &ToolContext, label: String) -> Result<Receipt, ToolError> {
    applied_then_hang(ctx, &label).await
}

async fn applied_then_hang(ctx: &ToolContext, label: &str) -> Result<Receipt, ToolError> {
    let state = child_state();
    let applied_by = call_downstream(&state.ledger, label, ctx.idempotency_key(), || {});
    if state.worker {
        SETTLED_BODIES.fetch_add(1, Ordering::SeqCst);
        std::future::pending::<()>().await;
    }
    Ok(receipt(ctx, applied_by))
}

/// `rec_once`'s hook: the ledger says whether the effect under the call's key was applied.
async fn once_applied(ctx: &ToolContext) -> Result<Verified, ToolError> {
    let state = child_state();
    let text = std::fs::read_to_string(&state.ledger)
        .map_err(|e| ToolError::retryable(format!("read the ledger: {e}")))?;
    Ok(
        match parse_ledger(&text)
            .into_iter()
            .find(|e| e.kind == "applied" && e.key == ctx.idempotency_key())
        {
            Some(entry) => Verified::Applied(
                serde_json::to_value(Receipt {
                    key: entry.key,
                    applied_by: entry.pid,
                    executed_by: entry.pid,
                    takeover: false,
                    verified: true,
                })
                .expect("a receipt"),
            ),
            None => Verified::NotApplied,
        },
    )
}

// ---------------------------------------------------------------------------------------
// The children

fn action_name(action: &RecoveryAction) -> &'static str {
    match action {
        RecoveryAction::ReRan { .. } => "re_ran",
        RecoveryAction::Verified { applied: true } => "verified_applied",
        RecoveryAction::Verified { applied: false } => "verified_not_applied",
        RecoveryAction::MarkedUnknown => "marked_unknown",
        RecoveryAction::Reported(Unrecoverable::NoVerifyHook) => "reported_no_verify_hook",
        RecoveryAction::Reported(Unrecoverable::NotYet { .. }) => "reported_not_yet",
        RecoveryAction::Reported(_) => "reported_other",
        RecoveryAction::Raced => "raced",
        _ => "other",
    }
}

/// Not a test of its own: the body of a child, started by the `recovery_across_processes_*`
/// tests. Run directly, without `IDEM_RECOVERY_CHILD`, it does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let spec: ChildSpec = serde_json::from_str(&spec).expect("child spec");
    let _ = CHILD.set(ChildState {
        ledger: spec.ledger.clone(),
        worker: spec.role == Role::Worker,
    });
    let d = linked(open_store(&spec.store, &spec.target, &spec.scope, 2).await)
        .with_namespace(spec.namespace.clone());
    let run = RunContext::new(TENANT);
    match spec.role {
        Role::Worker => {
            for (tool, _, _) in CALLS {
                let key = d
                    .record_key(&call_of(tool), &run)
                    .expect("record key")
                    .expect("keyed call");
                report(
                    RESULT_PREFIX,
                    &Line::Key {
                        tool: tool.into(),
                        record_key: key.as_str().into(),
                    },
                );
            }
            let (idem, once, plain) = (
                call_of("rec_idem"),
                call_of("rec_once"),
                call_of("rec_plain"),
            );
            let all = async {
                tokio::join!(
                    dispatch_approving(&d, &idem, &run),
                    dispatch_approving(&d, &once, &run),
                    dispatch_approving(&d, &plain, &run),
                )
            };
            let done = tokio::time::timeout(WORKER_DEADLINE, all).await;
            panic!("the worker should have died holding the three calls: {done:?}");
        }
        Role::Recoverer => {
            let ready = spec.ready.as_ref().expect("a ready file");
            let go = spec.go.as_ref().expect("a go file");
            std::fs::write(ready, b"ready").expect("the ready file");
            let waiting = Instant::now();
            while !go.exists() {
                assert!(waiting.elapsed() < CHILD_DEADLINE, "no start signal");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let options = RecoveryOptions {
                tenant: Some(TENANT.into()),
                ..RecoveryOptions::default()
            };
            for pass in 1..=MAX_PASSES {
                let recovered = d.recover(&options).await.expect("a recovery pass");
                let mut busy = false;
                for r in &recovered.records {
                    let (rerun_key, rerun_output, detail) = match &r.action {
                        RecoveryAction::ReRan { key, outcome } => (
                            Some(key.as_str().to_owned()),
                            outcome.as_ref().ok().map(|v| v.to_string()),
                            outcome.as_ref().err().cloned().unwrap_or_default(),
                        ),
                        other => (None, None, format!("{other:?}")),
                    };
                    busy |= !matches!(
                        r.action,
                        RecoveryAction::Reported(Unrecoverable::NoVerifyHook)
                    );
                    report(
                        RESULT_PREFIX,
                        &Line::Recovered {
                            pass,
                            tool: r.tool.clone(),
                            record_key: r.key.as_str().into(),
                            tenant: r.tenant.clone(),
                            action: action_name(&r.action).into(),
                            rerun_key,
                            rerun_output,
                            detail,
                        },
                    );
                }
                // Nothing left to do: nothing held (a live lease is left out of a report) and
                // every record reported is one only an operator can settle.
                let held = d
                    .store()
                    .list(ListFilter {
                        state: Some(StateKind::InProgress),
                        tenant: Some(TENANT.into()),
                        limit: 100,
                        after: None,
                    })
                    .await
                    .expect("list the records held");
                if !busy && held.is_empty() {
                    report(RESULT_PREFIX, &Line::Done { passes: pass });
                    return;
                }
                tokio::time::sleep(PASS_PAUSE).await;
            }
            panic!("recovery still busy after {MAX_PASSES} passes");
        }
        Role::Checker => {
            for (tool, _, _) in CALLS {
                let key = d
                    .record_key(&call_of(tool), &run)
                    .expect("record key")
                    .expect("keyed call");
                let record = d.store().get(&key).await.expect("read a record");
                report(
                    RESULT_PREFIX,
                    &Line::State {
                        tool: tool.into(),
                        state: record.map(|r| r.state.kind()),
                    },
                );
            }
            for (tool, _, _) in CALLS {
                let result = dispatch_approving(&d, &call_of(tool), &run).await;
                report(
                    RESULT_PREFIX,
                    &Line::Dispatched {
                        tool: tool.into(),
                        result: Reported::of(tool, &result),
                    },
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The parent

/// Where one store's test keeps its records.
#[derive(Debug, Clone)]
struct Target {
    store: &'static str,
    /// The server URL(s); `None` for SQLite, whose file is in the test's directory.
    url: Option<String>,
    scope: String,
}

struct ChildRun {
    exited: Exited,
    lines: Vec<Line>,
}

fn finish(child: Child) -> Result<ChildRun, String> {
    let exited = child.wait(CHILD_DEADLINE)?;
    let lines = exited.results(RESULT_PREFIX)?;
    Ok(ChildRun { exited, lines })
}

fn ensure(condition: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if condition { Ok(()) } else { Err(what()) }
}

fn read_ledger(ledger: &Path) -> Vec<LedgerEntry> {
    parse_ledger(&std::fs::read_to_string(ledger).unwrap_or_default())
}

fn entries<'a>(ledger: &'a [LedgerEntry], tool: &str, kind: &str) -> Vec<&'a LedgerEntry> {
    let label = label_of(tool);
    ledger
        .iter()
        .filter(|e| e.label == label && e.kind == kind)
        .collect()
}

/// One recovery line, flattened for the checks.
#[derive(Debug, Clone)]
struct Action {
    /// The recoverer (0 or 1) that reported it, and its pid.
    child: usize,
    pid: u32,
    tool: String,
    record_key: String,
    tenant: String,
    action: String,
    rerun_key: Option<String>,
    rerun_output: Option<String>,
    detail: String,
}

fn run_test(target: Target) {
    let root = std::env::temp_dir().join(unique(&format!("idem-recovery-{}", target.store)));
    std::fs::create_dir_all(&root).expect("temp dir");
    let started = Instant::now();
    let result = run_scenario(&target, &root);
    eprintln!(
        "recovery across processes on {}: {} in {:.1?}",
        target.store,
        if result.is_ok() { "passed" } else { "failed" },
        started.elapsed()
    );
    match result {
        Ok(()) => {
            let _ = std::fs::remove_dir_all(&root);
        }
        Err(e) => panic!("[{}] {e}\n(files kept in {})", target.store, root.display()),
    }
}

fn run_scenario(target: &Target, dir: &Path) -> Result<(), String> {
    let ledger = dir.join("ledger");
    let spec = |role: Role| ChildSpec {
        role,
        store: target.store.to_owned(),
        target: match &target.url {
            Some(url) => url.clone(),
            None => dir.join("idem.db").display().to_string(),
        },
        scope: target.scope.clone(),
        namespace: format!("recovery/{}", target.scope),
        ledger: ledger.clone(),
        ready: None,
        go: None,
    };

    // 1. The worker dies holding the three calls.
    let worker = finish(Child::spawn(
        "recovery_child",
        CHILD_ENV,
        &spec(Role::Worker),
        dir,
        "worker",
    )?)?;
    let died = Instant::now();
    let worker_dump = || worker.exited.dump();
    ensure(worker.exited.status.signal() == Some(libc::SIGKILL), || {
        format!("the worker was not killed; {}", worker_dump())
    })?;
    let record_key = |tool: &str| -> Result<String, String> {
        worker
            .lines
            .iter()
            .find_map(|l| match l {
                Line::Key {
                    tool: t,
                    record_key,
                } if t == tool => Some(record_key.clone()),
                _ => None,
            })
            .ok_or_else(|| format!("the worker printed no key for {tool}; {}", worker_dump()))
    };
    let keys: Vec<(&str, String)> = CALLS
        .iter()
        .map(|(tool, _, _)| Ok((*tool, record_key(tool)?)))
        .collect::<Result<_, String>>()?;
    let w = worker.exited.pid;
    let before = read_ledger(&ledger);
    let ledger_text = |l: &[LedgerEntry]| format!("ledger: {l:?}");
    ensure(
        entries(&before, "rec_idem", "attempt").len() == 1
            && entries(&before, "rec_idem", "applied").is_empty()
            && ["rec_once", "rec_plain"].iter().all(|t| {
                entries(&before, t, "attempt").len() == 1
                    && entries(&before, t, "applied").iter().map(|e| e.pid).eq([w])
            }),
        || {
            format!(
                "the worker ({w}) should have attempted rec_idem and applied the two others; {}",
                ledger_text(&before)
            )
        },
    )?;
    let idem_key = entries(&before, "rec_idem", "attempt")[0].key.clone();

    // 2. Two recoverers, started at once after the dead worker's lease.
    let go = dir.join("go");
    let mut recoverers = Vec::new();
    for i in 0..2 {
        let ready = dir.join(format!("ready-{i}"));
        let child = Child::spawn(
            "recovery_child",
            CHILD_ENV,
            &ChildSpec {
                ready: Some(ready.clone()),
                go: Some(go.clone()),
                ..spec(Role::Recoverer)
            },
            dir,
            &format!("recoverer-{i}"),
        )?;
        recoverers.push((child, ready));
    }
    let waiting = Instant::now();
    while !recoverers.iter().all(|(_, ready)| ready.exists()) || died.elapsed() < LEASE * 3 / 2 {
        if waiting.elapsed() > CHILD_DEADLINE {
            return Err("the recoverers never got ready".into());
        }
        for (child, _) in recoverers.iter_mut() {
            if child.exited().is_some() {
                return Err(format!(
                    "a recoverer exited before the start: {}",
                    child.stderr()
                ));
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    std::fs::write(&go, b"go").map_err(|e| e.to_string())?;
    let mut runs = Vec::new();
    for (child, _) in recoverers {
        runs.push(finish(child)?);
    }
    let dumps = || {
        runs.iter()
            .map(|r| r.exited.dump())
            .collect::<Vec<_>>()
            .join("\n\n")
    };
    for r in &runs {
        ensure(r.exited.status.success(), || {
            format!("a recoverer failed; {}", r.exited.dump())
        })?;
        ensure(
            r.lines.iter().any(|l| matches!(l, Line::Done { .. })),
            || format!("a recoverer did not finish; {}", r.exited.dump()),
        )?;
    }
    let actions: Vec<Action> = runs
        .iter()
        .enumerate()
        .flat_map(|(child, r)| {
            let pid = r.exited.pid;
            r.lines.iter().filter_map(move |l| match l {
                Line::Recovered {
                    tool,
                    record_key,
                    tenant,
                    action,
                    rerun_key,
                    rerun_output,
                    detail,
                    ..
                } => Some(Action {
                    child,
                    pid,
                    tool: tool.clone(),
                    record_key: record_key.clone(),
                    tenant: tenant.clone(),
                    action: action.clone(),
                    rerun_key: rerun_key.clone(),
                    rerun_output: rerun_output.clone(),
                    detail: detail.clone(),
                }),
                _ => None,
            })
        })
        .collect();
    let of = |tool: &str| -> Vec<&Action> { actions.iter().filter(|a| a.tool == tool).collect() };
    let count = |tool: &str, action: &str| of(tool).iter().filter(|a| a.action == action).count();
    let only = |tool: &str, allowed: &[&str]| -> Result<(), String> {
        ensure(
            of(tool)
                .iter()
                .all(|a| allowed.contains(&a.action.as_str())),
            || format!("{tool}: only {allowed:?} may be reported: {:#?}", of(tool)),
        )
    };

    ensure(
        actions.iter().all(|a| {
            keys.iter().any(|(t, k)| *t == a.tool && *k == a.record_key) && a.tenant == TENANT
        }),
        || {
            format!(
                "a recovered record is not one of the worker's: {actions:#?}; worker keys {keys:?}"
            )
        },
    )?;

    // rec_idem: re-run once, by one recoverer, under the key the worker handed downstream.
    only("rec_idem", &["re_ran", "raced"])?;
    let reran: Vec<&Action> = of("rec_idem")
        .into_iter()
        .filter(|a| a.action == "re_ran")
        .collect();
    ensure(reran.len() == 1, || {
        format!(
            "rec_idem must be re-run exactly once across both recoverers: {actions:#?}\n{}",
            dumps()
        )
    })?;
    let rerun = reran[0];
    ensure(
        rerun.rerun_key.as_deref() == Some(idem_key.as_str()),
        || format!("the re-run must hand downstream the worker's key {idem_key}: {rerun:?}"),
    )?;
    let output: Receipt = rerun
        .rerun_output
        .as_deref()
        .ok_or_else(|| format!("the re-run failed: {}; {rerun:?}", rerun.detail))
        .and_then(|o| serde_json::from_str(o).map_err(|e| format!("re-run output {o}: {e}")))?;
    ensure(
        output.executed_by == rerun.pid
            && output.applied_by == rerun.pid
            && output.takeover
            && output.key == idem_key,
        || {
            format!(
                "the re-run's receipt (recoverer {} = {}): {output:?}",
                rerun.child, rerun.pid
            )
        },
    )?;

    // rec_once: turned Unknown, then verified applied by its hook; never run.
    only(
        "rec_once",
        &[
            "marked_unknown",
            "reported_not_yet",
            "verified_applied",
            "raced",
        ],
    )?;
    ensure(
        count("rec_once", "marked_unknown") >= 1 && count("rec_once", "verified_applied") >= 1,
        || {
            format!(
                "rec_once must be marked Unknown, then verified applied: {:#?}",
                of("rec_once")
            )
        },
    )?;

    // rec_plain: turned Unknown, then left for an operator; never run.
    only(
        "rec_plain",
        &["marked_unknown", "reported_no_verify_hook", "raced"],
    )?;
    ensure(
        count("rec_plain", "marked_unknown") >= 1
            && count("rec_plain", "reported_no_verify_hook") >= 1,
        || {
            format!(
                "rec_plain must be marked Unknown, then reported: {:#?}",
                of("rec_plain")
            )
        },
    )?;

    // The ledger: rec_idem attempted again once and applied once, all under one key; the
    // two others never attempted again.
    let after = read_ledger(&ledger);
    let check_ledger = |l: &[LedgerEntry], stage: &str| -> Result<(), String> {
        let idem_attempts = entries(l, "rec_idem", "attempt");
        let idem_applied = entries(l, "rec_idem", "applied");
        ensure(
            idem_attempts.iter().map(|e| e.pid).eq([w, rerun.pid])
                && idem_applied.iter().map(|e| e.pid).eq([rerun.pid])
                && idem_attempts
                    .iter()
                    .chain(&idem_applied)
                    .all(|e| e.key == idem_key),
            || {
                format!(
                    "{stage}: rec_idem must be attempted by the worker ({w}) and the re-run ({}), \
                     applied once by the re-run, all under {idem_key}; {}",
                    rerun.pid,
                    ledger_text(l)
                )
            },
        )?;
        for tool in ["rec_once", "rec_plain"] {
            ensure(
                entries(l, tool, "attempt").iter().map(|e| e.pid).eq([w])
                    && entries(l, tool, "applied").iter().map(|e| e.pid).eq([w]),
                || format!("{stage}: {tool} must never run again; {}", ledger_text(l)),
            )?;
        }
        ensure(l.len() == 7, || {
            format!("{stage}: unexpected ledger lines; {}", ledger_text(l))
        })
    };
    check_ledger(&after, "after recovery")?;

    // 3. A checker: the records' states, and the calls dispatched again.
    let checker = finish(Child::spawn(
        "recovery_child",
        CHILD_ENV,
        &spec(Role::Checker),
        dir,
        "checker",
    )?)?;
    ensure(checker.exited.status.success(), || {
        format!("the checker failed; {}", checker.exited.dump())
    })?;
    let state = |tool: &str| {
        checker.lines.iter().find_map(|l| match l {
            Line::State { tool: t, state } if t == tool => Some(*state),
            _ => None,
        })
    };
    let expected = [
        ("rec_idem", StateKind::Completed),
        ("rec_once", StateKind::Completed),
        ("rec_plain", StateKind::Unknown),
    ];
    for (tool, kind) in expected {
        ensure(state(tool) == Some(Some(kind)), || {
            format!(
                "{tool} should be {kind:?} in the store, is {:?}; {}",
                state(tool),
                checker.exited.dump()
            )
        })?;
    }
    let again = |tool: &str| -> Result<&Reported, String> {
        checker
            .lines
            .iter()
            .find_map(|l| match l {
                Line::Dispatched { tool: t, result } if t == tool => Some(result),
                _ => None,
            })
            .ok_or_else(|| format!("no dispatch of {tool}; {}", checker.exited.dump()))
    };
    let replay = |tool: &str| -> Result<Receipt, String> {
        let r = again(tool)?;
        ensure(r.code == "ok" && r.deduplicated && r.attempts == 0, || {
            format!("{tool} dispatched again must replay: {r:?}")
        })?;
        let json = r.output_json.as_deref().unwrap_or_default();
        serde_json::from_str(json).map_err(|e| format!("{tool}: output {json}: {e}"))
    };
    let idem_again = replay("rec_idem")?;
    ensure(idem_again == output, || {
        format!("rec_idem must replay the re-run's output {output:?}: {idem_again:?}")
    })?;
    let once_again = replay("rec_once")?;
    ensure(once_again.verified && once_again.applied_by == w, || {
        format!(
            "rec_once must replay the hook's answer (applied by the worker {w}): {once_again:?}"
        )
    })?;
    let plain_again = again("rec_plain")?;
    ensure(plain_again.code == "outcome_unknown", || {
        format!("rec_plain must stay Unknown: {plain_again:?}")
    })?;
    check_ledger(&read_ledger(&ledger), "after the checker")?;
    Ok(())
}

#[cfg(feature = "sqlite")]
#[test]
fn recovery_across_processes_sqlite() {
    run_test(Target {
        store: "sqlite",
        url: None,
        scope: String::new(),
    });
}

#[cfg(feature = "redis")]
#[test]
fn recovery_across_processes_redis() {
    use support::services::{REDIS_URL, service_url};
    let Some(url) = service_url(REDIS_URL, "recovery_across_processes_redis") else {
        return;
    };
    let prefixes = redis_prefixes(&url);
    run_test(Target {
        store: "redis",
        scope: prefixes.fresh("idem-recovery"),
        url: Some(url),
    });
}

#[cfg(feature = "redis")]
#[test]
fn recovery_across_processes_redis_cluster() {
    use support::redis_keys::redis_cluster_prefixes;
    use support::services::{REDIS_CLUSTER_URL, service_url};
    let Some(urls) = service_url(REDIS_CLUSTER_URL, "recovery_across_processes_redis_cluster")
    else {
        return;
    };
    let prefixes = redis_cluster_prefixes(&urls);
    run_test(Target {
        store: "redis-cluster",
        scope: prefixes.fresh("idem-recovery"),
        url: Some(urls),
    });
}

#[cfg(feature = "postgres")]
#[test]
fn recovery_across_processes_postgres() {
    use support::services::{POSTGRES_URL, service_url};
    let Some(url) = service_url(POSTGRES_URL, "recovery_across_processes_postgres") else {
        return;
    };
    let schemas = postgres_schemas(&url);
    run_test(Target {
        store: "postgres",
        scope: schemas.fresh("idem_recovery"),
        url: Some(url),
    });
}
