//! The policy of ARCHITECTURE.md ("Classes", "Keys", "Records", "The path of one call"),
//! one behaviour at a time, through the facade's public API on the memory store.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use idem::prelude::*;
use idem::store::ListFilter;
use idem::{
    MemoryStore, key::RecordKey, record::Record, record::RecordState, store::ManualClock,
    store::StoreError,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use support::dispatcher::linked;
use support::hooked_store::{Hook, Hooked, Op};
use support::services::unique;
use support::tally::Tally;

// ---------------------------------------------------------------------------------------
// Probe tools: every execution is written to a ledger under the call's `label`, with the
// key the tool was handed, so tests can count effects.

static LEDGER: Tally = Tally::new();

fn runs(label: &str) -> Vec<String> {
    LEDGER.entries(label)
}

/// How a probe behaves.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
struct Plan {
    /// `retryable`, `not_applied`, `terminal`, `ambiguous` or `panic`.
    #[serde(default)]
    fail: Option<String>,
    /// How many attempts of each dispatch fail (0 = all of them when `fail` is set).
    #[serde(default)]
    fail_times: u32,
    /// Sleep this long inside the body.
    #[serde(default)]
    sleep_ms: u64,
    /// Block forever on the first execution of this label (a crash mid-effect).
    #[serde(default)]
    hang_first: bool,
    /// What to return.
    #[serde(default)]
    output: Value,
}

async fn run_plan(ctx: &ToolContext, label: &str, plan: &Plan) -> Result<Value, ToolError> {
    let n = LEDGER.note(label, ctx.idempotency_key());
    if plan.hang_first && n == 1 {
        std::future::pending::<()>().await;
    }
    if plan.sleep_ms > 0 {
        tokio::time::sleep(Duration::from_millis(plan.sleep_ms)).await;
    }
    let failing = plan.fail.is_some() && (plan.fail_times == 0 || ctx.attempt() <= plan.fail_times);
    if failing {
        let why = format!("planned failure on attempt {}", ctx.attempt());
        return Err(match plan.fail.as_deref() {
            Some("retryable") => ToolError::retryable(why),
            Some("not_applied") => ToolError::not_applied(why),
            Some("terminal") => ToolError::terminal(why).with_details(json!({"code": 42})),
            Some("ambiguous") => ToolError::ambiguous(why),
            Some("panic") => panic!("{why}"),
            other => ToolError::terminal(format!("unknown plan {other:?}")),
        });
    }
    Ok(plan.output.clone())
}

/// Read probe.
#[tool(class = "read", backoff_ms = 1)]
async fn probe_read(
    ctx: &ToolContext,
    label: String,
    #[serde(default)] plan: Plan,
) -> Result<Value, ToolError> {
    run_plan(ctx, &label, &plan).await
}

/// Idempotent write probe.
#[tool(
    class = "idempotent_write",
    backoff_ms = 1,
    lease_secs = 1,
    wait_secs = 5
)]
async fn probe_idem(
    ctx: &ToolContext,
    label: String,
    #[serde(default)] plan: Plan,
) -> Result<Value, ToolError> {
    run_plan(ctx, &label, &plan).await
}

/// Non-idempotent write probe.
#[tool(class = "non_idempotent_write", backoff_ms = 1, lease_secs = 1)]
async fn probe_once(
    ctx: &ToolContext,
    label: String,
    #[serde(default)] plan: Plan,
) -> Result<Value, ToolError> {
    run_plan(ctx, &label, &plan).await
}

/// Irreversible probe.
#[tool(class = "irreversible", backoff_ms = 1, lease_secs = 1)]
async fn probe_irrev(
    ctx: &ToolContext,
    label: String,
    #[serde(default)] plan: Plan,
) -> Result<Value, ToolError> {
    run_plan(ctx, &label, &plan).await
}

/// Needs a scope.
#[tool(class = "idempotent_write", scopes = ["billing:write"])]
fn scoped_probe(ctx: &ToolContext, label: String) -> Result<u32, ToolError> {
    LEDGER.note(&label, ctx.idempotency_key());
    Ok(1)
}

/// Short wait for concurrent duplicates.
#[tool(class = "idempotent_write", wait_secs = 0)]
async fn impatient_probe(
    ctx: &ToolContext,
    label: String,
    #[serde(default)] plan: Plan,
) -> Result<Value, ToolError> {
    run_plan(ctx, &label, &plan).await
}

/// Multi-step probe: journals two steps, fails ambiguously after the first on attempt 1.
#[tool(class = "idempotent_write", backoff_ms = 1)]
async fn two_steps(ctx: &ToolContext, label: String) -> Result<Vec<u64>, ToolError> {
    let a: u64 = ctx
        .step("reserve", || async {
            LEDGER.note(&format!("{label}/reserve"), "");
            Ok(7)
        })
        .await?;
    if ctx.attempt() == 1 {
        return Err(ToolError::ambiguous("connection reset after reserving"));
    }
    let b: u64 = ctx
        .step("charge", || async {
            LEDGER.note(&format!("{label}/charge"), "");
            Ok(9)
        })
        .await?;
    Ok(vec![a, b])
}

// ---------------------------------------------------------------------------------------

fn label() -> String {
    unique("probe")
}

/// The namespace of every dispatcher here.
const NAMESPACE: &str = "policy-tests";

fn call(tool: &str, label: &str, plan: Value) -> ToolCall {
    ToolCall::new(tool, json!({"label": label, "plan": plan})).with_call_id(format!("call-{label}"))
}

fn run() -> RunContext {
    RunContext::new("tenant-a")
}

async fn record_of(d: &Dispatcher, c: &ToolCall, r: &RunContext) -> Option<Record> {
    let key = d.record_key(c, r).unwrap().expect("keyed call");
    d.store().get(&key).await.unwrap()
}

// ---------------------------------------------------------------------------------------
// Row `read`

#[tokio::test]
async fn read_is_not_recorded_and_executes_again() {
    let d = linked(Arc::new(MemoryStore::new())).with_namespace(NAMESPACE);
    let l = label();
    let c = call("probe_read", &l, json!({"output": {"temp": 21}}));
    let first = d.dispatch(&c, &run()).await.unwrap();
    let second = d.dispatch(&c, &run()).await.unwrap();
    assert!(!first.deduplicated && !second.deduplicated);
    assert_eq!(first.output, json!({"temp": 21}));
    assert_eq!(runs(&l).len(), 2, "a duplicate read executes again");
    assert_eq!(
        record_of(&d, &c, &run()).await,
        None,
        "reads write no record"
    );
}

#[tokio::test]
async fn read_retries_with_backoff_on_retryable_errors() {
    let d = linked(Arc::new(MemoryStore::new())).with_namespace(NAMESPACE);
    let l = label();
    let ok = d
        .dispatch(
            &call(
                "probe_read",
                &l,
                json!({"fail": "retryable", "fail_times": 2, "output": 1}),
            ),
            &run(),
        )
        .await
        .unwrap();
    assert_eq!(ok.attempts, 3);
    assert_eq!(runs(&l).len(), 3);
}

#[tokio::test]
async fn read_without_key_material_still_runs() {
    let d = linked(Arc::new(MemoryStore::new())).with_namespace(NAMESPACE);
    let l = label();
    let c = ToolCall::new(
        "probe_read",
        json!({"label": l, "plan": {"output": "sunny"}}),
    );
    let out = d.dispatch(&c, &RunContext::new("t")).await.unwrap();
    assert_eq!(out.output, json!("sunny"));
    assert_eq!(out.key, None);
}

// ---------------------------------------------------------------------------------------
// Row `idempotent_write`

#[tokio::test]
async fn idempotent_duplicate_replays_with_flag() {
    let d = linked(Arc::new(MemoryStore::new())).with_namespace(NAMESPACE);
    let l = label();
    let c = call("probe_idem", &l, json!({"output": {"ticket": 12}}));
    let first = d.dispatch(&c, &run()).await.unwrap();
    let again = d.dispatch(&c, &run()).await.unwrap();
    assert!(!first.deduplicated);
    assert!(again.deduplicated, "the duplicate is flagged");
    assert_eq!(again.attempts, 0);
    assert_eq!(again.output_json, first.output_json);
    assert_eq!(again.key, first.key, "the same key is reported");
    assert_eq!(runs(&l).len(), 1, "executed once");
}

#[tokio::test]
async fn idempotent_retries_ambiguous_errors_with_the_same_key() {
    let d = linked(Arc::new(MemoryStore::new())).with_namespace(NAMESPACE);
    let l = label();
    let out = d
        .dispatch(
            &call(
                "probe_idem",
                &l,
                json!({"fail": "ambiguous", "fail_times": 2, "output": "done"}),
            ),
            &run(),
        )
        .await
        .unwrap();
    assert_eq!(out.attempts, 3);
    let keys = runs(&l);
    assert_eq!(keys.len(), 3);
    assert!(
        keys.iter()
            .all(|k| Some(k.as_str()) == out.key.as_ref().map(|k| k.as_str())),
        "every attempt got the same downstream key"
    );
}

#[tokio::test]
async fn idempotent_exhausted_ambiguous_releases_the_key_for_a_later_retry() {
    let d = linked(Arc::new(MemoryStore::new())).with_namespace(NAMESPACE);
    let l = label();
    let c = call("probe_idem", &l, json!({"fail": "ambiguous"}));
    let err = d.dispatch(&c, &run()).await.unwrap_err();
    assert!(
        matches!(err, DispatchError::ToolFailed { ref error, attempts: 3, .. } if error.kind() == ErrorKind::Ambiguous),
        "{err:?}"
    );
    assert_eq!(
        record_of(&d, &c, &run()).await,
        None,
        "re-running is safe, so the claim is released"
    );
}

#[tokio::test]
async fn idempotent_orphan_is_taken_over_with_the_same_downstream_key() {
    let clock = Arc::new(ManualClock::new());
    let d =
        linked(Arc::new(MemoryStore::new().with_clock(clock.clone()))).with_namespace(NAMESPACE);
    let l = label();
    let c = call(
        "probe_idem",
        &l,
        json!({"hang_first": true, "output": "second holder"}),
    );
    crash_mid_body(&d, &c, &l).await;
    let orphan = record_of(&d, &c, &run()).await.unwrap();
    assert!(matches!(orphan.state, RecordState::InProgress { .. }));
    clock.advance(Duration::from_secs(5));
    let out = d.dispatch(&c, &run()).await.unwrap();
    assert_eq!(out.output, json!("second holder"));
    let keys = runs(&l);
    assert_eq!(keys.len(), 2, "the orphan ran again");
    assert_eq!(
        keys[0], keys[1],
        "the take-over handed downstream the same key"
    );
    assert_eq!(
        record_of(&d, &c, &run()).await.unwrap().fence,
        orphan.fence + 1,
        "the take-over incremented the fence"
    );
}

/// Start a dispatch, let its body begin, then abandon it without dropping (a process crash:
/// no destructor, no heartbeat).
async fn crash_mid_body(d: &Dispatcher, c: &ToolCall, l: &str) {
    let r = run();
    let mut fut = Box::pin(d.dispatch(c, &r));
    tokio::select! {
        res = &mut fut => panic!("the body should hang, got {res:?}"),
        _ = async { while runs(l).is_empty() { tokio::time::sleep(Duration::from_millis(1)).await } } => {}
    }
    std::mem::forget(fut);
}

#[tokio::test]
async fn sixty_four_concurrent_duplicates_execute_once() {
    let d = Arc::new(linked(Arc::new(MemoryStore::new())).with_namespace(NAMESPACE));
    let l = label();
    let c = call(
        "probe_idem",
        &l,
        json!({"sleep_ms": 50, "output": {"id": "T-1"}}),
    );
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (d, c) = (d.clone(), c.clone());
        tasks.push(tokio::spawn(async move { d.dispatch(&c, &run()).await }));
    }
    let mut executed = 0;
    let mut outputs = Vec::new();
    for t in tasks {
        let out = t.await.unwrap().unwrap();
        if !out.deduplicated {
            executed += 1;
        }
        outputs.push(out.output_json);
    }
    assert_eq!(executed, 1, "exactly one dispatch executed");
    assert_eq!(runs(&l).len(), 1, "the body ran once");
    assert!(
        outputs.iter().all(|o| o == r#"{"id":"T-1"}"#),
        "all 64 got the same output"
    );
}

#[tokio::test]
async fn concurrent_duplicate_past_its_wait_bound_gets_in_progress() {
    let d = Arc::new(linked(Arc::new(MemoryStore::new())).with_namespace(NAMESPACE));
    let l = label();
    let c = call("impatient_probe", &l, json!({"sleep_ms": 300, "output": 1}));
    let holder = {
        let (d, c) = (d.clone(), c.clone());
        tokio::spawn(async move { d.dispatch(&c, &run()).await })
    };
    while runs(&l).is_empty() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let err = d.dispatch(&c, &run()).await.unwrap_err();
    assert!(matches!(err, DispatchError::InProgress { .. }), "{err:?}");
    assert!(!holder.await.unwrap().unwrap().deduplicated);
    assert!(
        d.dispatch(&c, &run()).await.unwrap().deduplicated,
        "after the holder finished, a duplicate replays"
    );
}

// ---------------------------------------------------------------------------------------
// Row `non_idempotent_write`

#[tokio::test]
async fn non_idempotent_duplicate_replays() {
    let d = linked(Arc::new(MemoryStore::new())).with_namespace(NAMESPACE);
    let l = label();
    let c = call("probe_once", &l, json!({"output": "sent"}));
    assert!(!d.dispatch(&c, &run()).await.unwrap().deduplicated);
    assert!(d.dispatch(&c, &run()).await.unwrap().deduplicated);
    assert_eq!(runs(&l).len(), 1);
}

#[tokio::test]
async fn non_idempotent_retries_at_most_once_and_only_when_not_applied() {
    let d = linked(Arc::new(MemoryStore::new())).with_namespace(NAMESPACE);
    let l = label();
    let out = d
        .dispatch(
            &call(
                "probe_once",
                &l,
                json!({"fail": "not_applied", "fail_times": 1, "output": 1}),
            ),
            &run(),
        )
        .await
        .unwrap();
    assert_eq!(out.attempts, 2, "one retry after not_applied");

    let l2 = label();
    let c2 = call("probe_once", &l2, json!({"fail": "not_applied"}));
    let err = d.dispatch(&c2, &run()).await.unwrap_err();
    assert!(
        matches!(err, DispatchError::ToolFailed { attempts: 2, .. }),
        "at most one retry: {err:?}"
    );
    assert_eq!(
        record_of(&d, &c2, &run()).await,
        None,
        "not applied: the claim is released"
    );

    let l3 = label();
    let err = d
        .dispatch(
            &call(
                "probe_once",
                &l3,
                json!({"fail": "retryable", "fail_times": 1}),
            ),
            &run(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, DispatchError::ToolFailed { attempts: 1, .. }),
        "retryable is not retried for this class: {err:?}"
    );
}

#[tokio::test]
async fn non_idempotent_ambiguous_ends_unknown_and_is_never_rerun() {
    let d = linked(Arc::new(MemoryStore::new())).with_namespace(NAMESPACE);
    let l = label();
    let c = call("probe_once", &l, json!({"fail": "ambiguous"}));
    let err = d.dispatch(&c, &run()).await.unwrap_err();
    assert!(
        matches!(err, DispatchError::OutcomeUnknown { .. }),
        "{err:?}"
    );
    assert_eq!(runs(&l).len(), 1, "not retried");
    let again = d.dispatch(&c, &run()).await.unwrap_err();
    assert!(
        matches!(again, DispatchError::OutcomeUnknown { .. }),
        "{again:?}"
    );
    assert_eq!(runs(&l).len(), 1, "never re-executed automatically");
    assert!(matches!(
        record_of(&d, &c, &run()).await.unwrap().state,
        RecordState::Unknown { .. }
    ));
}

#[tokio::test]
async fn non_idempotent_orphan_becomes_unknown() {
    let clock = Arc::new(ManualClock::new());
    let d =
        linked(Arc::new(MemoryStore::new().with_clock(clock.clone()))).with_namespace(NAMESPACE);
    let l = label();
    let c = call("probe_once", &l, json!({"hang_first": true}));
    crash_mid_body(&d, &c, &l).await;
    clock.advance(Duration::from_secs(5));
    let err = d.dispatch(&c, &run()).await.unwrap_err();
    assert!(
        matches!(err, DispatchError::OutcomeUnknown { .. }),
        "{err:?}"
    );
    assert_eq!(runs(&l).len(), 1, "the orphan was not re-executed");
}

// ---------------------------------------------------------------------------------------
// Row `irreversible`

#[tokio::test]
async fn irreversible_needs_an_approval_bound_to_key_and_arguments() {
    let d = linked(Arc::new(MemoryStore::new())).with_namespace(NAMESPACE);
    let l = label();
    let c = call("probe_irrev", &l, json!({"output": "deleted"}));
    let err = d.dispatch(&c, &run()).await.unwrap_err();
    let DispatchError::ApprovalRequired { request } = err else {
        panic!("expected ApprovalRequired, got {err:?}")
    };
    assert_eq!(runs(&l).len(), 0, "nothing ran");
    assert_eq!(
        record_of(&d, &c, &run()).await,
        None,
        "nothing was recorded"
    );
    assert_eq!(request.arguments["label"], json!(l));

    // The approval does not transfer to other arguments under the same key...
    let other = ToolCall {
        arguments: json!({"label": l, "plan": {"output": "other"}}),
        ..c.clone()
    };
    let approved = run().approve(
        support::dispatcher::approver().approve_for(&request, std::time::Duration::from_secs(3600)),
    );
    assert!(matches!(
        d.dispatch(&other, &approved).await,
        Err(DispatchError::ApprovalRefused {
            refusal: idem::approval::ApprovalRefusal::OtherArguments,
            ..
        })
    ));
    // ...nor to another key with the same arguments.
    let other_key = c.clone().with_call_id("another-call");
    assert!(matches!(
        d.dispatch(&other_key, &approved).await,
        Err(DispatchError::ApprovalRequired { .. })
    ));

    let out = d.dispatch(&c, &approved).await.unwrap();
    assert_eq!(out.output, json!("deleted"));
    assert!(d.dispatch(&c, &approved).await.unwrap().deduplicated);
    assert_eq!(runs(&l).len(), 1);
}

#[tokio::test]
async fn irreversible_is_never_retried() {
    let d = linked(Arc::new(MemoryStore::new())).with_namespace(NAMESPACE);
    for kind in ["retryable", "not_applied", "ambiguous"] {
        let l = label();
        let c = call("probe_irrev", &l, json!({"fail": kind, "fail_times": 1}));
        let request = match d.dispatch(&c, &run()).await {
            Err(DispatchError::ApprovalRequired { request }) => request,
            other => panic!("{other:?}"),
        };
        let _ = d
            .dispatch(
                &c,
                &run().approve(
                    support::dispatcher::approver()
                        .approve_for(&request, std::time::Duration::from_secs(3600)),
                ),
            )
            .await
            .unwrap_err();
        assert_eq!(runs(&l).len(), 1, "{kind}: never retried");
    }
}

// ---------------------------------------------------------------------------------------
// Keys, fingerprints, tenants, refusals

#[tokio::test]
async fn key_reused_with_other_arguments_is_refused() {
    let d = linked(Arc::new(MemoryStore::new())).with_namespace(NAMESPACE);
    let l = label();
    let c = call("probe_idem", &l, json!({"output": 1}));
    d.dispatch(&c, &run()).await.unwrap();
    let changed = ToolCall {
        arguments: json!({"label": l, "plan": {"output": 2}}),
        ..c.clone()
    };
    let err = d.dispatch(&changed, &run()).await.unwrap_err();
    assert!(matches!(err, DispatchError::KeyReused { .. }), "{err:?}");
    assert_eq!(runs(&l).len(), 1);
    // Same meaning, other spelling: same fingerprint, so a replay.
    let respelled = ToolCall {
        arguments: json!({"plan": {"output": 1.0}, "label": l}),
        ..c.clone()
    };
    assert!(d.dispatch(&respelled, &run()).await.unwrap().deduplicated);
}

#[tokio::test]
async fn write_without_key_material_is_refused() {
    let d = linked(Arc::new(MemoryStore::new())).with_namespace(NAMESPACE);
    let l = label();
    let c = ToolCall::new("probe_idem", json!({"label": l}));
    let err = d.dispatch(&c, &RunContext::new("t")).await.unwrap_err();
    assert!(matches!(err, DispatchError::MissingKey { .. }), "{err:?}");
    assert_eq!(runs(&l).len(), 0);
    // A run id and step are key material.
    let out = d
        .dispatch(&c, &RunContext::new("t").with_run("run-1", 4))
        .await
        .unwrap();
    assert!(!out.deduplicated);
    assert!(
        d.dispatch(&c, &RunContext::new("t").with_run("run-1", 4))
            .await
            .unwrap()
            .deduplicated,
        "replaying a run dedupes by run and step"
    );
    assert!(
        !d.dispatch(&c, &RunContext::new("t").with_run("run-1", 5))
            .await
            .unwrap()
            .deduplicated,
        "another step is another call"
    );
}

#[tokio::test]
async fn explicit_key_wins_over_call_id() {
    let d = linked(Arc::new(MemoryStore::new())).with_namespace(NAMESPACE);
    let l = label();
    let a = call("probe_idem", &l, json!({"output": 1})).with_key("order-77");
    let b = a.clone().with_call_id("a-different-call-id");
    d.dispatch(&a, &run()).await.unwrap();
    assert!(d.dispatch(&b, &run()).await.unwrap().deduplicated);
}

#[tokio::test]
async fn two_tenants_never_share_a_record() {
    let d = linked(Arc::new(MemoryStore::new())).with_namespace(NAMESPACE);
    let l = label();
    let c = call("probe_idem", &l, json!({"output": "x"}));
    let a = d.dispatch(&c, &RunContext::new("tenant-a")).await.unwrap();
    let b = d.dispatch(&c, &RunContext::new("tenant-b")).await.unwrap();
    assert!(
        !a.deduplicated && !b.deduplicated,
        "each tenant executes its own call"
    );
    assert_ne!(a.key, b.key, "and gets its own downstream key");
    assert_eq!(runs(&l).len(), 2);
    assert_ne!(
        d.record_key(&c, &RunContext::new("tenant-a")).unwrap(),
        d.record_key(&c, &RunContext::new("tenant-b")).unwrap()
    );
}

#[tokio::test]
async fn falsy_outputs_replay_exactly() {
    let d = linked(Arc::new(MemoryStore::new())).with_namespace(NAMESPACE);
    for output in [
        json!(0),
        json!(false),
        json!(""),
        json!([]),
        json!(null),
        json!({}),
        json!(0.5),
    ] {
        let l = label();
        let c = call("probe_idem", &l, json!({"output": output}));
        let first = d.dispatch(&c, &run()).await.unwrap();
        let replay = d.dispatch(&c, &run()).await.unwrap();
        assert!(replay.deduplicated);
        assert_eq!(replay.output, output);
        assert_eq!(replay.output_json, first.output_json);
        assert_eq!(replay.output_json, output.to_string());
    }
}

#[tokio::test]
async fn terminal_errors_are_recorded_and_replayed() {
    let d = linked(Arc::new(MemoryStore::new())).with_namespace(NAMESPACE);
    let l = label();
    let c = call("probe_once", &l, json!({"fail": "terminal"}));
    let first = d.dispatch(&c, &run()).await.unwrap_err();
    let replay = d.dispatch(&c, &run()).await.unwrap_err();
    match (first, replay) {
        (
            DispatchError::ToolFailed {
                error: e1,
                deduplicated: false,
                attempts: 1,
                ..
            },
            DispatchError::ToolFailed {
                error: e2,
                deduplicated: true,
                attempts: 0,
                ..
            },
        ) => {
            assert_eq!(e1, e2);
            assert_eq!(e2.kind(), ErrorKind::Terminal);
            assert_eq!(e2.details(), Some(&json!({"code": 42})));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(runs(&l).len(), 1);
}

#[tokio::test]
async fn invalid_arguments_never_reach_the_body_and_record_nothing() {
    let d = linked(Arc::new(MemoryStore::new())).with_namespace(NAMESPACE);
    let l = label();
    let cases = [
        (json!({"label": 5}), "/label"),
        (
            json!({"label": l, "plan": {"sleep_ms": -1}}),
            "/plan/sleep_ms",
        ),
        (json!({"label": l, "unexpected": true}), "/unexpected"),
        (json!({}), ""),
        (json!("not an object"), ""),
    ];
    for (args, pointer) in cases {
        let c = ToolCall::new("probe_once", args.clone()).with_call_id(format!("bad-{l}"));
        match d.dispatch(&c, &run()).await {
            Err(DispatchError::InvalidArguments {
                pointer: p,
                message,
                ..
            }) => {
                assert_eq!(p, pointer, "pointer for {args}");
                assert!(!message.is_empty());
            }
            other => panic!("{args}: expected InvalidArguments, got {other:?}"),
        }
    }
    assert_eq!(runs(&l).len(), 0, "the body never ran");
    let listed = d
        .store()
        .list(ListFilter {
            state: None,
            limit: 1000,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(
        listed
            .iter()
            .all(|r| !r.arguments.as_deref().unwrap_or("").contains(&l)),
        "no record was written"
    );
}

#[tokio::test]
async fn refusals_come_in_order_and_before_any_effect() {
    let d = linked(Arc::new(MemoryStore::new())).with_namespace(NAMESPACE);
    let l = label();
    // Unknown tool first, with a suggestion.
    match d
        .dispatch(&ToolCall::new("probe_idm", json!({})), &run())
        .await
    {
        Err(DispatchError::UnknownTool { suggestion, .. }) => {
            assert_eq!(suggestion.as_deref(), Some("probe_idem"))
        }
        other => panic!("{other:?}"),
    }
    // Invalid arguments before permissions.
    let bad = ToolCall::new("scoped_probe", json!({"label": 1})).with_call_id("c");
    assert!(matches!(
        d.dispatch(&bad, &run()).await,
        Err(DispatchError::InvalidArguments { .. })
    ));
    // Permissions before the key.
    let unkeyed = ToolCall::new("scoped_probe", json!({"label": l}));
    match d.dispatch(&unkeyed, &run()).await {
        Err(DispatchError::PermissionDenied { missing, .. }) => {
            assert_eq!(missing, vec!["billing:write".to_owned()])
        }
        other => panic!("{other:?}"),
    }
    // With the scope, the missing key is next.
    let granted = run().grant("billing:write");
    assert!(matches!(
        d.dispatch(&unkeyed, &granted).await,
        Err(DispatchError::MissingKey { .. })
    ));
    assert_eq!(runs(&l).len(), 0);
    assert_eq!(
        d.dispatch(&unkeyed.with_call_id("c1"), &granted)
            .await
            .unwrap()
            .output,
        json!(1)
    );
}

// ---------------------------------------------------------------------------------------
// Panics, cancellation, fencing, journal, outages

#[tokio::test]
async fn a_panicking_body_leaves_the_dispatcher_usable() {
    let d = linked(Arc::new(MemoryStore::new())).with_namespace(NAMESPACE);
    // Idempotent: retried (same key), then released so a later call may run again.
    let l = label();
    let c = call("probe_idem", &l, json!({"fail": "panic"}));
    let err = d.dispatch(&c, &run()).await.unwrap_err();
    assert!(
        matches!(err, DispatchError::ToolFailed { ref error, .. } if error.kind() == ErrorKind::Ambiguous && error.message().contains("panicked")),
        "{err:?}"
    );
    assert_eq!(record_of(&d, &c, &run()).await, None);
    // Non-idempotent: the effect may have happened, so Unknown.
    let l2 = label();
    let c2 = call("probe_once", &l2, json!({"fail": "panic"}));
    assert!(matches!(
        d.dispatch(&c2, &run()).await,
        Err(DispatchError::OutcomeUnknown { .. })
    ));
    assert!(matches!(
        record_of(&d, &c2, &run()).await.unwrap().state,
        RecordState::Unknown { .. }
    ));
    assert_eq!(runs(&l2).len(), 1);
    // And the dispatcher still works.
    let l3 = label();
    assert_eq!(
        d.dispatch(&call("probe_idem", &l3, json!({"output": 3})), &run())
            .await
            .unwrap()
            .output,
        json!(3)
    );
}

#[tokio::test]
async fn a_dropped_dispatch_leaves_no_live_claim() {
    let d = linked(Arc::new(MemoryStore::new())).with_namespace(NAMESPACE);
    for (tool, expect_unknown) in [("probe_idem", false), ("probe_once", true)] {
        let l = label();
        let c = call(tool, &l, json!({"hang_first": true, "output": "later"}));
        let r = run();
        {
            let mut fut = Box::pin(d.dispatch(&c, &r));
            tokio::select! {
                res = &mut fut => panic!("should hang, got {res:?}"),
                _ = async { while runs(&l).is_empty() { tokio::time::sleep(Duration::from_millis(1)).await } } => {}
            }
            // Dropped here: the caller gave up (a timeout, a cancelled request).
        }
        let mut state = None;
        for _ in 0..200 {
            state = record_of(&d, &c, &r).await.map(|rec| rec.state);
            if !matches!(state, Some(RecordState::InProgress { .. })) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if expect_unknown {
            assert!(
                matches!(state, Some(RecordState::Unknown { .. })),
                "{tool}: {state:?}"
            );
        } else {
            assert_eq!(state, None, "{tool}: released so it can run again");
            assert_eq!(d.dispatch(&c, &r).await.unwrap().output, json!("later"));
        }
    }
}

#[tokio::test]
async fn a_stale_holder_cannot_record_over_the_new_one() {
    let clock = Arc::new(ManualClock::new());
    let d = Arc::new(
        linked(Arc::new(MemoryStore::new().with_clock(clock.clone()))).with_namespace(NAMESPACE),
    );
    let l = label();
    // The first holder sleeps past its lease; meanwhile a second one takes over and completes.
    let c = call("probe_idem", &l, json!({"sleep_ms": 400, "output": "same"}));
    let stale = {
        let (d, c) = (d.clone(), c.clone());
        tokio::spawn(async move { d.dispatch(&c, &run()).await })
    };
    while runs(&l).is_empty() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let first_fence = record_of(&d, &c, &run()).await.unwrap().fence;
    clock.advance(Duration::from_secs(10));
    let fresh = d.dispatch(&c, &run()).await.unwrap();
    assert!(!fresh.deduplicated, "the new holder executed");
    let err = stale.await.unwrap().unwrap_err();
    assert!(
        matches!(err, DispatchError::Fenced { .. }),
        "the stale holder's record was refused: {err:?}"
    );
    let rec = record_of(&d, &c, &run()).await.unwrap();
    assert_eq!(rec.fence, first_fence + 1);
    assert!(matches!(rec.state, RecordState::Completed { .. }));
}

#[tokio::test]
async fn journaled_steps_are_not_repeated_by_a_retry() {
    let d = linked(Arc::new(MemoryStore::new())).with_namespace(NAMESPACE);
    let l = label();
    let c = ToolCall::new("two_steps", json!({"label": l})).with_call_id(format!("c-{l}"));
    let out = d.dispatch(&c, &run()).await.unwrap();
    assert_eq!(out.output, json!([7, 9]));
    assert_eq!(out.attempts, 2);
    assert_eq!(
        runs(&format!("{l}/reserve")).len(),
        1,
        "the journaled step did not run again"
    );
    assert_eq!(runs(&format!("{l}/charge")).len(), 1);
}

/// Switches a store off, standing in for a Redis or Postgres outage.
#[derive(Debug)]
struct Flaky {
    down: AtomicBool,
}

#[async_trait]
impl Hook for Flaky {
    async fn before(&self, _op: Op, _key: Option<&RecordKey>) -> Result<(), StoreError> {
        if self.down.load(Ordering::SeqCst) {
            Err(StoreError::Unavailable("connection refused".into()))
        } else {
            Ok(())
        }
    }
}

#[tokio::test]
async fn an_unavailable_store_fails_writes_closed_and_lets_reads_pass() {
    let store = Arc::new(Hooked::new(
        Arc::new(MemoryStore::new()),
        Flaky {
            down: AtomicBool::new(true),
        },
    ));
    let d = linked(store.clone()).with_namespace(NAMESPACE);
    let l = label();
    let w = call("probe_once", &l, json!({"output": "sent"}));
    let err = d.dispatch(&w, &run()).await.unwrap_err();
    assert!(
        matches!(err, DispatchError::StoreUnavailable { .. }),
        "{err:?}"
    );
    assert_eq!(runs(&l).len(), 0, "nothing executes without a claim");
    let r = label();
    assert_eq!(
        d.dispatch(&call("probe_read", &r, json!({"output": 1})), &run())
            .await
            .unwrap()
            .output,
        json!(1)
    );
    store.hook.down.store(false, Ordering::SeqCst);
    assert!(!d.dispatch(&w, &run()).await.unwrap().deduplicated);
    assert!(d.dispatch(&w, &run()).await.unwrap().deduplicated);
    assert_eq!(
        runs(&l).len(),
        1,
        "back up: the run continues without duplicates"
    );
}
