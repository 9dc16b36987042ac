//! A run that undoes itself, across real processes, on SQLite, PostgreSQL and Redis: an
//! agent reserved an amount in one call and the capture failed for good in the next. Worker
//! A undoes the run and is killed (SIGKILL) right after the provider released the hold,
//! before the store knew; worker B, another process, takes the undo over once A's lease
//! lapsed and undoes it under the same downstream key; a third `undo_run` replays it. The
//! provider (a ledger file the processes share) saw one reservation, one declined capture,
//! and releases under a single key only (a provider deduping by key released once); the run's
//! account holds the undo once.
//!
//! The parent runs this binary again as a child running only [`undo_child`], told its store,
//! tenant, run and ledger by `IDEM_UNDO_PROCESSES_CHILD`.

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use idem::dispatch::{AppliedCall, RunUndo, UndoOptions, UndoOutcome};
use idem::prelude::*;
use idem::tool::{ToolDef, ToolPolicy};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::support::child::{Child, report};
use crate::support::dispatcher::dispatcher;
use crate::support::services::unique;
use crate::support::stores::open_store;

const CHILD_ENV: &str = "IDEM_UNDO_PROCESSES_CHILD";
/// What a child's report line starts with.
const UNDID: &str = "undid ";
/// The tools' lease: the parent waits longer than this after worker A died.
const LEASE: Duration = Duration::from_secs(1);
/// Safety net against a hang (not a measurement).
const CHILD_DEADLINE: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Spec {
    store: String,
    target: String,
    scope: String,
    tenant: String,
    run: String,
    ledger: PathBuf,
    /// Worker A: hang for good right after the provider released the hold.
    hang_after_release: bool,
}

/// One call of a child's undo report, as it prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Undid {
    tool: String,
    outcome: String,
    replayed: Option<bool>,
}

fn undid(report: &RunUndo) -> Vec<Undid> {
    report
        .calls
        .iter()
        .map(|c| Undid {
            tool: c.tool.clone(),
            outcome: c.outcome.name().to_owned(),
            replayed: match c.outcome {
                UndoOutcome::Undone { replayed } => Some(replayed),
                _ => None,
            },
        })
        .collect()
}

/// The reservation, undone now (by B) or earlier.
fn undone(replayed: bool) -> Vec<Undid> {
    vec![Undid {
        tool: "reserve".into(),
        outcome: "undone".into(),
        replayed: Some(replayed),
    }]
}

/// The provider: `effect` under the call's downstream key, a line of the ledger file the
/// processes share.
fn apply(ledger: &Path, effect: &str, ctx: &ToolContext) -> Result<(), ToolError> {
    let fail = |e: std::io::Error| ToolError::terminal(format!("{}: {e}", ledger.display()));
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(ledger)
        .map_err(fail)?;
    writeln!(file, "{effect} {}", ctx.downstream_key().as_str()).map_err(fail)?;
    file.sync_data().map_err(fail)
}

/// One line of the ledger: the effect, and the downstream key it came under (the last word).
#[derive(Debug, Clone)]
struct Effect {
    effect: String,
    key: String,
}

fn effects(ledger: &Path) -> Vec<Effect> {
    let text = std::fs::read_to_string(ledger).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            Some(Effect {
                effect: words.first()?.to_string(),
                key: words.last()?.to_string(),
            })
        })
        .collect()
}

fn of<'a>(effects: &'a [Effect], effect: &str) -> Vec<&'a Effect> {
    effects.iter().filter(|e| e.effect == effect).collect()
}

/// Release the hold under the undo's own key; worker A then hangs until it is killed.
async fn release(
    ctx: ToolContext,
    applied: AppliedCall,
    ledger: PathBuf,
    hang: bool,
) -> Result<(), ToolError> {
    let hold: String = applied.output_as::<Value>()?["hold"]
        .as_str()
        .ok_or_else(|| ToolError::terminal("the reservation recorded no hold"))?
        .to_owned();
    apply(&ledger, &format!("release {hold}"), &ctx)?;
    if hang {
        std::future::pending::<()>().await;
    }
    Ok(())
}

/// A reservation that can be released and a capture that always fails for good, both at
/// the provider of `ledger`.
fn payments(ledger: &Path, hang_after_release: bool) -> Registry {
    let policy = ToolPolicy {
        lease: LEASE,
        backoff: Duration::from_millis(1),
        ..ToolPolicy::default()
    };
    let (at_reserve, at_capture, at_release) =
        (ledger.to_owned(), ledger.to_owned(), ledger.to_owned());
    let reserve = ToolDef::builder("reserve", ToolClass::IdempotentWrite)
        .description("Reserve an amount on the customer's card.")
        .input_schema(json!({"type": "object", "properties": {"order": {"type": "string"}}}))
        .policy(policy.clone())
        .handler(move |ctx: ToolContext, args: Value| {
            let ledger = at_reserve.clone();
            async move {
                let order = args["order"].as_str().unwrap_or_default().to_owned();
                apply(&ledger, "reserve", &ctx)?;
                Ok::<_, ToolError>(json!({"hold": format!("hold-{order}")}))
            }
        })
        .undo(move |ctx, applied| release(ctx, applied, at_release.clone(), hang_after_release))
        .build()
        .expect("the reserve tool");
    let capture = ToolDef::builder("capture", ToolClass::NonIdempotentWrite)
        .description("Capture a reserved amount.")
        .input_schema(json!({"type": "object"}))
        .policy(policy)
        .handler(move |ctx: ToolContext, _: Value| {
            let ledger = at_capture.clone();
            async move {
                apply(&ledger, "capture", &ctx)?;
                Err::<Value, _>(ToolError::terminal("the card was declined"))
            }
        })
        .build()
        .expect("the capture tool");
    Registry::builder()
        .add(reserve)
        .add(capture)
        .build()
        .expect("the registry")
}

/// A worker of `spec`'s store and provider, keeping run accounts.
async fn worker(spec: &Spec) -> Dispatcher {
    let store = open_store(&spec.store, &spec.target, &spec.scope, 2).await;
    dispatcher(payments(&spec.ledger, spec.hang_after_release), store)
        .with_run_accounts(Duration::from_secs(3600))
}

/// A worker process: undo the run and print what became of each call (worker A never gets
/// that far: it is killed mid-undo).
#[test]
fn undo_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let spec: Spec = serde_json::from_str(&spec).expect("the child's spec");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let d = worker(&spec).await;
        let all = UndoOptions::all();
        let undo = d.undo_run(&spec.tenant, &spec.run, &all);
        // Worker A waits here to be killed; the deadline only ends an orphan.
        let undone = tokio::time::timeout(CHILD_DEADLINE, undo)
            .await
            .expect("the undo ends, or the parent kills this worker")
            .expect("the run is undone");
        report(UNDID, &undid(&undone));
    });
}

/// Reserve (applied), then fail to capture (for good), in one run.
async fn reserve_then_fail_to_capture(d: &Dispatcher, tenant: &str, run_id: &str) {
    let run = RunContext::new(tenant).with_run(run_id, 1);
    let reserve = ToolCall::new("reserve", json!({"order": "o1"})).with_call_id("call_reserve");
    d.dispatch(&reserve, &run).await.expect("reserved");
    let capture = ToolCall::new("capture", json!({})).with_call_id("call_capture");
    let failed = d
        .dispatch(&capture, &run.at_step(2))
        .await
        .expect_err("the capture fails for good");
    assert_eq!(failed.code(), "tool_failed", "{failed}");
}

/// Worker A undoes the run and is killed right after the provider released the hold.
async fn kill_mid_undo(spec: &Spec) {
    let spec = Spec {
        hang_after_release: true,
        ..spec.clone()
    };
    let dir = std::env::temp_dir();
    let name = format!("{}-a", spec.scope);
    let mut a = Child::spawn("undo_processes::undo_child", CHILD_ENV, &spec, &dir, &name)
        .expect("spawn worker A");
    let started = Instant::now();
    while of(&effects(&spec.ledger), "release").is_empty() {
        assert!(
            a.exited().is_none(),
            "worker A ended before it released: {}",
            a.stderr()
        );
        assert!(
            started.elapsed() < CHILD_DEADLINE,
            "worker A never released: {}",
            a.stderr()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pid = libc::pid_t::try_from(a.pid()).expect("a pid");
    // SAFETY: `kill` with the id of our own child, not yet waited for (so not reused).
    let rc = unsafe { libc::kill(pid, libc::SIGKILL) };
    assert_eq!(rc, 0, "kill worker A: {}", std::io::Error::last_os_error());
    let exited = a.wait(CHILD_DEADLINE).expect("worker A ends");
    assert_eq!(
        exited.status.signal(),
        Some(libc::SIGKILL),
        "worker A dies by SIGKILL mid-undo: {}",
        exited.dump()
    );
}

/// Worker B, another process, undoes the run again; what it says of each call.
fn take_over(spec: &Spec) -> Vec<Undid> {
    let spec = Spec {
        hang_after_release: false,
        ..spec.clone()
    };
    let dir = std::env::temp_dir();
    let name = format!("{}-b", spec.scope);
    let b = Child::spawn("undo_processes::undo_child", CHILD_ENV, &spec, &dir, &name)
        .expect("spawn worker B");
    let exited = b.wait(CHILD_DEADLINE).expect("worker B ends");
    assert!(exited.status.success(), "{}", exited.dump());
    let mut lines: Vec<Vec<Undid>> = exited.results(UNDID).expect("worker B's report");
    assert_eq!(lines.len(), 1, "one report line: {}", exited.dump());
    lines.remove(0)
}

/// The tools and outcomes of the run's account, in order.
async fn account(d: &Dispatcher, tenant: &str, run_id: &str) -> Vec<(String, String)> {
    let account = d
        .run_account(tenant, run_id)
        .await
        .expect("the run's account");
    account
        .calls
        .iter()
        .map(|c| (c.tool.clone(), c.outcome.name().to_owned()))
        .collect()
}

async fn a_worker_killed_mid_undo_is_taken_over_by_another_process(
    store: &str,
    target: &str,
    scope: &str,
) {
    let spec = Spec {
        store: store.to_owned(),
        target: target.to_owned(),
        scope: scope.to_owned(),
        tenant: unique("undo_processes"),
        run: unique("run"),
        ledger: std::env::temp_dir().join(format!("{scope}.ledger")),
        hang_after_release: false,
    };
    let d = worker(&spec).await;
    reserve_then_fail_to_capture(&d, &spec.tenant, &spec.run).await;

    kill_mid_undo(&spec).await;
    let released = of(&effects(&spec.ledger), "release").len();
    assert_eq!(released, 1, "worker A released before it died");

    // Once A's lease lapsed, B takes the undo over and runs it again: B undid it.
    tokio::time::sleep(LEASE + Duration::from_millis(500)).await;
    assert_eq!(take_over(&spec), undone(false), "worker B's undo");
    // And the undo is journaled: a third one replays it.
    let third = d
        .undo_run(&spec.tenant, &spec.run, &UndoOptions::all())
        .await
        .expect("the third undo");
    assert_eq!(undid(&third), undone(true), "{third}");

    let ledger = effects(&spec.ledger);
    assert_eq!(of(&ledger, "reserve").len(), 1, "reserved once: {ledger:?}");
    assert_eq!(of(&ledger, "capture").len(), 1, "declined once: {ledger:?}");
    let releases = of(&ledger, "release");
    assert_eq!(
        releases.len(),
        2,
        "released by A, then again by B's take-over, never by the replay: {ledger:?}"
    );
    let keys: BTreeSet<&str> = releases.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(
        keys.len(),
        1,
        "every release under the undo's one key, so the provider released once: {ledger:?}"
    );

    let calls = account(&d, &spec.tenant, &spec.run).await;
    let expected = [
        ("reserve", "applied"),
        ("capture", "refused"),
        ("reserve.undo", "applied"),
    ]
    .map(|(tool, outcome)| (tool.to_owned(), outcome.to_owned()));
    assert_eq!(calls, expected, "the run's account");
    let _ = std::fs::remove_file(&spec.ledger);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_worker_killed_mid_undo_is_taken_over_by_another_process() {
    let scope = unique("undo_processes_sqlite");
    let path = std::env::temp_dir().join(format!("{scope}.sqlite"));
    let _scratch = crate::Scratch(path.clone());
    a_worker_killed_mid_undo_is_taken_over_by_another_process(
        "sqlite",
        &path.display().to_string(),
        &scope,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_worker_killed_mid_undo_is_taken_over_by_another_process() {
    let test = "postgres_a_worker_killed_mid_undo_is_taken_over_by_another_process";
    let Some(url) =
        crate::support::services::service_url(crate::support::services::POSTGRES_URL, test)
    else {
        return;
    };
    let schemas = crate::support::postgres_schemas::postgres_schemas(&url);
    let scope = schemas.fresh("undo_processes_pg");
    a_worker_killed_mid_undo_is_taken_over_by_another_process("postgres", &url, &scope).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_worker_killed_mid_undo_is_taken_over_by_another_process() {
    let test = "redis_a_worker_killed_mid_undo_is_taken_over_by_another_process";
    let Some(url) =
        crate::support::services::service_url(crate::support::services::REDIS_URL, test)
    else {
        return;
    };
    let prefixes = crate::support::redis_keys::redis_prefixes(&url);
    let scope = prefixes.fresh("undo_processes_redis");
    a_worker_killed_mid_undo_is_taken_over_by_another_process("redis", &url, &scope).await;
}
