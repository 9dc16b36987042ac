//! A worker killed (SIGKILL) in the middle of a compensation: the next dispatch of the call
//! takes it over once the lease lapsed and resumes the compensation where the journal says it
//! stopped. The undo that was in flight is asked again under the same key, so the agency
//! (a ledger file shared by the processes) applies every cancellation once.
//!
//! The parent runs this binary again as a child running only [`compensation_child`], told
//! its store and ledger by `IDEM_CONTROLS_CHILD`; the child books a trip whose car step fails,
//! and kills itself right after the agency applied the hotel's cancellation, before the
//! journal knew.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::Duration;

use idem::prelude::*;
use idem::tool::Undo;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::support::child::Child;
use crate::support::dispatcher::linked;
use crate::support::ledger::{call_downstream, parse_ledger};
use crate::support::services::unique;
use crate::support::stores::open_store;

const CHILD_ENV: &str = "IDEM_CONTROLS_CHILD";
/// The tool's lease: the parent waits longer than this after the child died.
const LEASE: Duration = Duration::from_secs(1);
/// Safety net against a hang (not a measurement).
const CHILD_DEADLINE: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Spec {
    store: String,
    target: String,
    scope: String,
    tenant: String,
}

/// Cancel a booked step at the agency, under the compensation's key; a child dies right after
/// the hotel's cancellation was applied.
async fn cancel_booked(ctx: ToolContext, undo: Undo) -> Result<(), ToolError> {
    let ledger: String = undo
        .output
        .get("ledger")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let label = format!("undo-{}", undo.step);
    call_downstream(
        Path::new(&ledger),
        &label,
        ctx.downstream_key().as_str(),
        || {},
    );
    if undo.step == "hotel" && std::env::var(CHILD_ENV).is_ok() {
        // SAFETY: `kill` with this process's own id and SIGKILL: the process ends here.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
    Ok(())
}

/// Book a flight, a hotel and a car at the agency of the ledger file.
#[tool(class = "idempotent_write", compensate = cancel_booked, lease_secs = 1, backoff_ms = 1, max_attempts = 1)]
async fn book_trip_file(ctx: &ToolContext, ledger: String) -> Result<Value, ToolError> {
    for step in ["flight", "hotel"] {
        let ledger = ledger.clone();
        let _: Value = ctx
            .step(step, || async {
                let label = format!("book-{step}");
                call_downstream(
                    Path::new(&ledger),
                    &label,
                    ctx.downstream_key().as_str(),
                    || {},
                );
                Ok(json!({"ledger": ledger}))
            })
            .await?;
    }
    Err(ToolError::not_applied("no car is available on those dates"))
}

fn call(ledger: &Path) -> ToolCall {
    ToolCall::new(
        "book_trip_file",
        json!({"ledger": ledger.display().to_string()}),
    )
    .with_call_id("call_killed_trip")
}

#[test]
fn compensation_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let spec: Spec = serde_json::from_str(&spec).expect("the child's spec");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = open_store(&spec.store, &spec.target, &spec.scope, 2).await;
        let d = linked(store);
        let ledger = std::env::temp_dir().join(format!("{}.ledger", spec.scope));
        let run = RunContext::new(spec.tenant.as_str());
        let _ = d.dispatch(&call(&ledger), &run).await;
        unreachable!("the child kills itself during the compensation");
    });
}

async fn a_compensation_killed_midway_is_resumed_once(store: &str, target: &str, scope: &str) {
    let tenant = unique("killed");
    let ledger = std::env::temp_dir().join(format!("{scope}.ledger"));
    let spec = Spec {
        store: store.to_owned(),
        target: target.to_owned(),
        scope: scope.to_owned(),
        tenant: tenant.clone(),
    };
    let dir = std::env::temp_dir();
    let child = Child::spawn("kill::compensation_child", CHILD_ENV, &spec, &dir, scope)
        .expect("spawn the child");
    let exited = child.wait(CHILD_DEADLINE).expect("the child ends");
    assert_eq!(
        exited.status.signal(),
        Some(libc::SIGKILL),
        "the child dies by SIGKILL mid-compensation: {}",
        exited.dump()
    );
    let before = parse_ledger(&std::fs::read_to_string(&ledger).unwrap());
    let applied = |entries: &[crate::support::ledger::LedgerEntry], label: &str| {
        entries
            .iter()
            .filter(|e| e.kind == "applied" && e.label == label)
            .count()
    };
    assert_eq!(applied(&before, "undo-hotel"), 1, "{before:?}");
    assert_eq!(applied(&before, "undo-flight"), 0, "{before:?}");

    // Another worker, once the lease lapsed: the same call resumes the compensation.
    tokio::time::sleep(LEASE + Duration::from_millis(500)).await;
    let d = linked(open_store(store, target, scope, 2).await);
    let run = RunContext::new(tenant.as_str());
    let resumed = d.dispatch(&call(&ledger), &run).await.unwrap_err();
    let DispatchError::ToolFailed { error, .. } = &resumed else {
        panic!("the resumed call ends compensated, got {resumed:?}");
    };
    assert!(
        error
            .message()
            .ends_with("it was compensated: the steps it had completed were undone (`hotel`, `flight`), so nothing of it remains applied"),
        "{}",
        error.message()
    );
    let after = parse_ledger(&std::fs::read_to_string(&ledger).unwrap());
    for label in ["book-flight", "book-hotel", "undo-hotel", "undo-flight"] {
        assert_eq!(applied(&after, label), 1, "{label} applied once: {after:?}");
    }
    let hotel_undo_keys: std::collections::BTreeSet<&str> = after
        .iter()
        .filter(|e| e.label == "undo-hotel")
        .map(|e| e.key.as_str())
        .collect();
    assert_eq!(
        hotel_undo_keys.len(),
        1,
        "the undo in flight was asked again under its own key: {after:?}"
    );
    assert!(
        after.iter().filter(|e| e.label == "undo-hotel").count() >= 3,
        "asked twice (an attempt and its application, then the resumed attempt): {after:?}"
    );
    let _ = std::fs::remove_file(&ledger);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_compensation_killed_midway_is_resumed_once() {
    let scope = unique("killed_sqlite");
    let path = std::env::temp_dir().join(format!("{scope}.sqlite"));
    let _scratch = crate::Scratch(path.clone());
    a_compensation_killed_midway_is_resumed_once("sqlite", &path.display().to_string(), &scope)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_compensation_killed_midway_is_resumed_once() {
    let test = "postgres_a_compensation_killed_midway_is_resumed_once";
    let Some(url) =
        crate::support::services::service_url(crate::support::services::POSTGRES_URL, test)
    else {
        return;
    };
    let schemas = crate::support::postgres_schemas::postgres_schemas(&url);
    let scope = schemas.fresh("killed_pg");
    a_compensation_killed_midway_is_resumed_once("postgres", &url, &scope).await;
}
