//! Edge cases of the holder's life: journals that must survive a give-back, retries after the
//! key was lost, verify hooks racing a slow holder, claims abandoned mid-flight, natural keys
//! under the replay policy, and parallel calls of one step.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use idem::prelude::*;
use idem::store::{Claim, ClaimRequest};
use idem::{
    MemoryStore, ToolDef, record::Record, record::RecordState, record::Timestamp,
    store::ManualClock, store::StoreError,
};
use serde_json::{Value, json};
use support::dispatcher::{linked, with_tool};
use support::hooked_store::{Hook, Hooked};
use support::services::unique;
use support::tally::Tally;

static LEDGER: Tally = Tally::new();
static CLOCKS: Mutex<Option<HashMap<String, Arc<ManualClock>>>> = Mutex::new(None);

fn count(what: &str) -> usize {
    LEDGER.count(what)
}

fn clock_for(label: &str) -> Arc<ManualClock> {
    CLOCKS
        .lock()
        .unwrap()
        .get_or_insert_with(HashMap::new)
        .entry(label.to_owned())
        .or_insert_with(|| Arc::new(ManualClock::new()))
        .clone()
}

fn label() -> String {
    unique("h")
}

/// Reserve then charge; `mode` makes the first execution stop after the reservation.
async fn staged(ctx: &ToolContext, label: &str, mode: &str) -> Result<Value, ToolError> {
    let first = LEDGER.note(&format!("{label}/run"), "") == 1;
    let id: u64 = ctx
        .step("reserve", || async {
            Ok(LEDGER.note(&format!("{label}/reserve"), "") as u64)
        })
        .await?;
    if first {
        match mode {
            "hang_after_reserve" => std::future::pending::<()>().await,
            "not_applied_after_reserve" => {
                return Err(ToolError::not_applied("card declined before charging"));
            }
            _ => {}
        }
    }
    let charged = ctx
        .step("charge", || async {
            Ok(LEDGER.note(&format!("{label}/charge"), "") as u64)
        })
        .await?;
    Ok(json!({"reservation": id, "charge": charged}))
}

/// Two-step idempotent write.
#[tool(
    class = "idempotent_write",
    lease_secs = 1,
    max_attempts = 1,
    backoff_ms = 1
)]
async fn staged_idem(ctx: &ToolContext, label: String, mode: String) -> Result<Value, ToolError> {
    staged(ctx, &label, &mode).await
}

/// Two-step non-idempotent write.
#[tool(
    class = "non_idempotent_write",
    lease_secs = 1,
    max_attempts = 1,
    backoff_ms = 1
)]
async fn staged_once(ctx: &ToolContext, label: String, mode: String) -> Result<Value, ToolError> {
    staged(ctx, &label, &mode).await
}

/// Fails ambiguously once, and meanwhile its lease runs out (the clock jumps).
#[tool(class = "idempotent_write", lease_secs = 1, backoff_ms = 1)]
async fn clock_jumper(ctx: &ToolContext, label: String) -> Result<u32, ToolError> {
    LEDGER.note(&format!("{label}/run"), "");
    if ctx.attempt() == 1 {
        clock_for(&label).advance(Duration::from_secs(10));
        return Err(ToolError::ambiguous("timed out"));
    }
    Ok(1)
}

/// Notes each run under its label.
#[tool(class = "idempotent_write")]
fn noted(label: String, value: u32) -> Result<u32, ToolError> {
    LEDGER.note(&label, "");
    Ok(value)
}

fn ticket_key(args: &Value) -> Option<String> {
    Some(format!(
        "{}|{}",
        args["customer"].as_str()?,
        args["subject"].as_str()?.to_lowercase().trim()
    ))
}

/// Find-or-create by natural key; hangs on its first execution when told to.
#[tool(class = "idempotent_write", natural_key = ticket_key, on_key_reuse = "replay", lease_secs = 1)]
async fn find_or_create(
    ctx: &ToolContext,
    customer: String,
    subject: String,
    hang_first: bool,
) -> Result<String, ToolError> {
    let n = LEDGER.note(&format!("{customer}/create"), "");
    if hang_first && n == 1 {
        std::future::pending::<()>().await;
    }
    Ok(format!(
        "ticket for {customer}: {subject} ({})",
        ctx.idempotency_key()
    ))
}

fn run() -> RunContext {
    RunContext::new("tenant")
}

async fn record(d: &Dispatcher, c: &ToolCall, r: &RunContext) -> Option<Record> {
    d.store()
        .get(&d.record_key(c, r).unwrap().unwrap())
        .await
        .unwrap()
}

/// Start a dispatch, wait until `ready` holds, then abandon it as a crash would.
async fn crash_when(d: &Dispatcher, c: &ToolCall, ready: impl Fn() -> bool) {
    let r = run();
    let mut fut = Box::pin(d.dispatch(c, &r));
    tokio::select! {
        res = &mut fut => panic!("should hang, got {res:?}"),
        _ = async { while !ready() { tokio::time::sleep(Duration::from_millis(1)).await } } => {}
    }
    std::mem::forget(fut);
}

#[tokio::test]
async fn a_take_over_resumes_after_the_journaled_steps_of_a_crashed_holder() {
    let clock = Arc::new(ManualClock::new());
    let d = linked(Arc::new(MemoryStore::new().with_clock(clock.clone())));
    let l = label();
    let c = ToolCall::new(
        "staged_idem",
        json!({"label": l, "mode": "hang_after_reserve"}),
    )
    .with_call_id(&l);
    crash_when(&d, &c, || count(&format!("{l}/reserve")) == 1).await;
    assert_eq!(
        record(&d, &c, &run()).await.unwrap().steps.len(),
        1,
        "the step is journaled in the store"
    );
    clock.advance(Duration::from_secs(5));
    let out = d.dispatch(&c, &run()).await.unwrap();
    assert_eq!(
        out.output,
        json!({"reservation": 1, "charge": 1}),
        "the recorded reservation was reused"
    );
    assert_eq!(
        count(&format!("{l}/reserve")),
        1,
        "the journaled step did not run again"
    );
    assert_eq!(count(&format!("{l}/charge")), 1);
}

#[tokio::test]
async fn not_applied_after_a_journaled_step_keeps_the_journal() {
    let d = linked(Arc::new(
        MemoryStore::new().with_clock(Arc::new(ManualClock::new())),
    ));
    // Idempotent: the claim is given back with its journal; the next call resumes.
    let l = label();
    let c = ToolCall::new(
        "staged_idem",
        json!({"label": l, "mode": "not_applied_after_reserve"}),
    )
    .with_call_id(&l);
    assert!(matches!(
        d.dispatch(&c, &run()).await,
        Err(DispatchError::ToolFailed { .. })
    ));
    let out = d.dispatch(&c, &run()).await.unwrap();
    assert_eq!(out.output["reservation"], json!(1));
    assert_eq!(count(&format!("{l}/reserve")), 1, "not reserved twice");

    // Non-idempotent: a journaled step happened, so the call is partly applied: Unknown.
    let l2 = label();
    let c2 = ToolCall::new(
        "staged_once",
        json!({"label": l2, "mode": "not_applied_after_reserve"}),
    )
    .with_call_id(&l2);
    match d.dispatch(&c2, &run()).await {
        Err(DispatchError::OutcomeUnknown { reason, .. }) => {
            assert!(reason.contains("partly applied"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        d.dispatch(&c2, &run()).await,
        Err(DispatchError::OutcomeUnknown { .. })
    ));
    assert_eq!(count(&format!("{l2}/reserve")), 1);
}

#[tokio::test]
async fn a_retry_never_runs_after_the_lease_was_lost() {
    let l = label();
    let d = linked(Arc::new(MemoryStore::new().with_clock(clock_for(&l))));
    let c = ToolCall::new("clock_jumper", json!({"label": l})).with_call_id(&l);
    let err = d.dispatch(&c, &run()).await.unwrap_err();
    assert!(matches!(err, DispatchError::Fenced { .. }), "{err:?}");
    assert_eq!(
        count(&format!("{l}/run")),
        1,
        "the retry did not run without the key"
    );
}

#[tokio::test]
async fn replay_on_key_reuse_applies_only_to_natural_keys() {
    // `find_or_create` opts into replay under its natural key. A call that brings its own key
    // is keyed by that instead, and reusing it for other arguments is the caller's mistake.
    // (Opting into replay without a natural key at all does not compile.)
    let d = linked(Arc::new(
        MemoryStore::new().with_clock(Arc::new(ManualClock::new())),
    ));
    let customer = label();
    let key = format!("explicit-{customer}");
    let args =
        |subject: &str| json!({"customer": customer, "subject": subject, "hang_first": false});
    let first = ToolCall::new("find_or_create", args("Refund")).with_key(&key);
    d.dispatch(&first, &run()).await.unwrap();
    let other = ToolCall::new("find_or_create", args("Invoice")).with_key(&key);
    let err = d.dispatch(&other, &run()).await.unwrap_err();
    assert!(
        matches!(err, DispatchError::KeyReused { .. }),
        "a reused explicit key is a mistake: {err:?}"
    );
    assert_eq!(count(&format!("{customer}/create")), 1);
}

#[tokio::test]
async fn a_reworded_natural_key_call_takes_over_an_orphan() {
    let clock = Arc::new(ManualClock::new());
    let d = linked(Arc::new(MemoryStore::new().with_clock(clock.clone())));
    let customer = label();
    let c = ToolCall::new(
        "find_or_create",
        json!({"customer": customer, "subject": "Printer", "hang_first": true}),
    )
    .with_call_id("c1");
    crash_when(&d, &c, || count(&format!("{customer}/create")) == 1).await;
    clock.advance(Duration::from_secs(5));
    let reworded = ToolCall::new(
        "find_or_create",
        json!({"customer": customer, "subject": "printer ", "hang_first": false}),
    )
    .with_call_id("c2");
    let out = d.dispatch(&reworded, &run()).await.unwrap();
    assert!(!out.deduplicated, "the orphan was taken over and completed");
    assert_eq!(count(&format!("{customer}/create")), 2);
    assert!(
        d.dispatch(&c, &run()).await.unwrap().deduplicated,
        "and the original wording replays it"
    );
}

#[tokio::test]
async fn parallel_calls_of_one_step_get_their_own_records() {
    let d = linked(Arc::new(
        MemoryStore::new().with_clock(Arc::new(ManualClock::new())),
    ));
    let l = label();
    let r = RunContext::new("t").with_run("run-1", 7);
    let a = ToolCall::new("noted", json!({"label": l, "value": 1}));
    let b = ToolCall::new("noted", json!({"label": l, "value": 1})).with_index(1);
    assert!(!d.dispatch(&a, &r).await.unwrap().deduplicated);
    assert!(
        !d.dispatch(&b, &r).await.unwrap().deduplicated,
        "the second call of the step runs"
    );
    assert!(
        d.dispatch(&b, &r).await.unwrap().deduplicated,
        "and replays on a replay of the run"
    );
    assert_eq!(count(&l), 2);
}

// ---------------------------------------------------------------------------------------
// Verify hooks and orphans whose holder may still be running.

#[tokio::test]
async fn a_fresh_orphan_is_not_verified_until_a_lease_has_passed() {
    let clock = Arc::new(ManualClock::new());
    let verified = Arc::new(AtomicUsize::new(0));
    let runs = Arc::new(AtomicUsize::new(0));
    let (v, r) = (verified.clone(), runs.clone());
    let tool = ToolDef::builder("notify", ToolClass::NonIdempotentWrite)
        .description("Notify.")
        .input_schema(json!({"type": "object"}))
        .policy(idem::ToolPolicy {
            lease: Duration::from_secs(1),
            verify_after: Duration::from_secs(2),
            ..Default::default()
        })
        .handler(move |_ctx: ToolContext, _args: Value| {
            let r = r.clone();
            async move {
                if r.fetch_add(1, Ordering::SeqCst) == 0 {
                    std::future::pending::<()>().await;
                }
                Ok::<_, ToolError>(json!("sent"))
            }
        })
        .verify(move |_ctx: ToolContext, _args: Value| {
            let v = v.clone();
            async move {
                v.fetch_add(1, Ordering::SeqCst);
                Ok(idem::Verified::NotApplied)
            }
        })
        .build()
        .unwrap();
    let d = with_tool(tool, Arc::new(MemoryStore::new().with_clock(clock.clone())));
    let c = ToolCall::new("notify", json!({})).with_call_id("n1");
    let runs_seen = runs.clone();
    crash_when(&d, &c, move || runs_seen.load(Ordering::SeqCst) == 1).await;
    clock.advance(Duration::from_millis(1500));
    assert!(matches!(
        d.dispatch(&c, &run()).await,
        Err(DispatchError::OutcomeUnknown { .. })
    ));
    assert_eq!(
        verified.load(Ordering::SeqCst),
        0,
        "too soon: the holder may still be sending"
    );
    clock.advance(Duration::from_secs(5));
    assert_eq!(d.dispatch(&c, &run()).await.unwrap().output, json!("sent"));
    assert_eq!(verified.load(Ordering::SeqCst), 1);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

// ---------------------------------------------------------------------------------------
// A claim in flight when the caller gives up.

#[derive(Debug)]
struct SlowClaims;

#[async_trait]
impl Hook for SlowClaims {
    /// The claim commits at once but its answer is slow to come back, as over a network.
    async fn claimed(&self, _r: &ClaimRequest, _claim: &Result<Claim, StoreError>) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_claim_abandoned_in_flight_is_given_back() {
    let d = linked(Arc::new(Hooked::new(
        Arc::new(MemoryStore::new()),
        SlowClaims,
    )));
    let l = label();
    let c = ToolCall::new("staged_once", json!({"label": l, "mode": "plain"})).with_call_id(&l);
    let r = run();
    let gave_up = tokio::time::timeout(Duration::from_millis(20), d.dispatch(&c, &r)).await;
    assert!(
        gave_up.is_err(),
        "the caller gave up while the claim was in flight"
    );
    let key = d.record_key(&c, &r).unwrap().unwrap();
    let mut state = Some(RecordState::InProgress {
        lease_until: Timestamp(0),
    });
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        state = d.store().get(&key).await.unwrap().map(|r| r.state);
        if state.is_none() {
            break;
        }
    }
    assert_eq!(state, None, "no claim is left that nobody will finish");
    assert_eq!(count(&format!("{l}/run")), 0, "the body never ran");
    assert!(
        !d.dispatch(&c, &r).await.unwrap().deduplicated,
        "the call can run now"
    );
}

#[test]
fn a_zero_ttl_write_tool_is_refused() {
    let err = ToolDef::builder("w", ToolClass::IdempotentWrite)
        .description("d")
        .input_schema(json!({"type": "object"}))
        .policy(idem::ToolPolicy {
            ttl: Duration::ZERO,
            ..Default::default()
        })
        .handler(|_: ToolContext, v: Value| async move { Ok::<_, ToolError>(v) })
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("TTL"), "{err}");
}
