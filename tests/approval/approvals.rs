//! Approvals on the public API: only an approval signed with one of the dispatcher's keys,
//! for exactly the call dispatched and unexpired on the store's clock, runs an irreversible
//! call; every other is refused, naming the check that failed, and nothing runs.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem::prelude::*;
use idem::store::memory::ManualClock;
use idem::{
    ApprovalKey, Approver, ToolDef, ToolPolicy, approval::ApprovalKeys, approval::ApprovalRefusal,
    approval::ApprovalRequest, dispatch::SetupError, record::Timestamp,
};
use serde_json::{Value, json};
use support::dispatcher::{approval_key, approver};

const HOUR: Duration = Duration::from_secs(3600);

/// An irreversible tool that counts its executions.
fn wire(runs: &Arc<AtomicUsize>) -> ToolDef {
    let runs = runs.clone();
    ToolDef::builder("wire_money", ToolClass::Irreversible)
        .description("Wire money.")
        // Records kept a minute: shorter than the approvals below.
        .policy(ToolPolicy {
            ttl: Duration::from_secs(60),
            ..ToolPolicy::default()
        })
        .input_schema(json!({"type": "object", "properties": {"cents": {"type": "integer"}}}))
        .handler(move |_: ToolContext, args: Value| {
            let runs = runs.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>(json!({"wired": args["cents"]}))
            }
        })
        .build()
        .unwrap()
}

/// A second irreversible tool, for approvals of another tool.
fn close_account() -> ToolDef {
    ToolDef::builder("close_account", ToolClass::Irreversible)
        .description("Close an account.")
        .input_schema(json!({"type": "object"}))
        .handler(|_: ToolContext, _: Value| async { Ok::<_, ToolError>(json!("closed")) })
        .build()
        .unwrap()
}

struct Setup {
    d: Dispatcher,
    runs: Arc<AtomicUsize>,
    clock: Arc<ManualClock>,
}

fn setup_with(keys: ApprovalKeys) -> Setup {
    let runs = Arc::new(AtomicUsize::new(0));
    let clock = Arc::new(ManualClock::new());
    let store = Arc::new(MemoryStore::new().with_clock(clock.clone()));
    let registry = Registry::builder()
        .add(wire(&runs))
        .add(close_account())
        .build()
        .unwrap();
    let d = Dispatcher::approving(registry, store, keys).unwrap();
    Setup { d, runs, clock }
}

fn setup() -> Setup {
    setup_with(ApprovalKeys::new([approval_key()]))
}

fn call(cents: u64) -> ToolCall {
    ToolCall::new("wire_money", json!({ "cents": cents })).with_call_id("call-wire")
}

fn run() -> RunContext {
    RunContext::new("tenant-a")
}

async fn request(d: &Dispatcher, call: &ToolCall, run: &RunContext) -> ApprovalRequest {
    match d.dispatch(call, run).await {
        Err(DispatchError::ApprovalRequired { request }) => *request,
        other => panic!("expected ApprovalRequired, got {other:?}"),
    }
}

/// Dispatch with `approval` and expect its refusal, with nothing run.
async fn refused(
    s: &Setup,
    call: &ToolCall,
    run: RunContext,
    approval: Approval,
) -> ApprovalRefusal {
    let before = s.runs.load(Ordering::SeqCst);
    let err =
        s.d.dispatch(call, &run.approve(approval))
            .await
            .unwrap_err();
    assert_eq!(s.runs.load(Ordering::SeqCst), before, "nothing ran");
    match err {
        DispatchError::ApprovalRefused { refusal, .. } => {
            assert!(!refusal.to_string().is_empty());
            refusal
        }
        other => panic!("expected ApprovalRefused, got {other:?}"),
    }
}

#[tokio::test]
async fn a_signed_approval_runs_the_call_once_and_a_replay_needs_none() {
    let s = setup();
    let r = request(&s.d, &call(100), &run()).await;
    assert_eq!(
        (r.namespace.as_str(), r.tenant.as_str()),
        ("default", "tenant-a")
    );
    let approval = approver().approve_for(&r, HOUR);
    assert_eq!(approval.approver(), "operator@tests");
    let first =
        s.d.dispatch(&call(100), &run().approve(approval.clone()))
            .await
            .unwrap();
    assert!(!first.deduplicated);
    assert_eq!(first.output, json!({"wired": 100}));
    let again =
        s.d.dispatch(&call(100), &run().approve(approval))
            .await
            .unwrap();
    assert!(again.deduplicated);
    assert!(s.d.dispatch(&call(100), &run()).await.unwrap().deduplicated);
    assert_eq!(s.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_approval_signed_with_another_secret_is_refused() {
    let s = setup();
    let r = request(&s.d, &call(100), &run()).await;
    // The right key id, another secret: what an attacker who guesses the id can make.
    let forger = ApprovalKey::new("tests-1", [0x42; 32]).unwrap();
    let forged = Approver::new("mallory", forger).approve_for(&r, HOUR);
    let refusal = refused(&s, &call(100), run(), forged).await;
    assert_eq!(refusal, ApprovalRefusal::BadSignature);
    assert!(
        refusal.to_string().contains("signature does not match"),
        "{refusal}"
    );
}

#[tokio::test]
async fn an_approval_under_an_unknown_or_rotated_out_key_is_refused() {
    let old = ApprovalKey::new("2026-11", [1; 32]).unwrap();
    let new = ApprovalKey::new("2026-12", [2; 32]).unwrap();
    // During the rotation both verify.
    let s = setup_with(ApprovalKeys::new([old.clone(), new.clone()]));
    let r = request(&s.d, &call(100), &run()).await;
    let by_old = Approver::new("alice", old).approve_for(&r, HOUR);
    // After it, only the new key does.
    let after = setup_with(ApprovalKeys::new([new]));
    let refusal = refused(&after, &call(100), run(), by_old.clone()).await;
    assert_eq!(
        refusal,
        ApprovalRefusal::UnknownKey {
            key_id: "2026-11".into()
        }
    );
    assert!(refusal.to_string().contains("rotated out"), "{refusal}");
    assert!(
        !s.d.dispatch(&call(100), &run().approve(by_old))
            .await
            .unwrap()
            .deduplicated
    );
}

#[tokio::test]
async fn changing_any_field_of_an_approval_is_refused() {
    let s = setup();
    let r = request(&s.d, &call(100), &run()).await;
    let approval = approver().approve_for(&r, HOUR);
    let json = serde_json::to_value(&approval).unwrap();
    let changes: [(&str, Value); 8] = [
        ("approver", json!("root")),
        ("expires_at", json!(u64::MAX)),
        ("nonce", json!("00000000000000000000000000000000")),
        ("namespace", json!("payments")),
        ("signature", json!("00".repeat(32))),
        ("signature", json!("")), // no signature at all
        ("tenant", json!("tenant-b")),
        (
            "fingerprint",
            json!(idem::key::Fingerprint::of(&json!({"cents": 1})).to_hex()),
        ),
    ];
    for (field, value) in changes {
        let mut tampered = json.clone();
        tampered[field] = value;
        let tampered: Approval = serde_json::from_value(tampered).unwrap();
        assert_eq!(
            refused(&s, &call(100), run(), tampered).await,
            ApprovalRefusal::BadSignature,
            "{field}"
        );
    }
    // Changed to name another tool or key, it is no approval of this call at all.
    for (field, value) in [("tool", json!("close_account")), ("key", json!("k-other"))] {
        let mut tampered = json.clone();
        tampered[field] = value;
        still_required(&s, &s.d, serde_json::from_value(tampered).unwrap()).await;
    }
    // A field the schema does not have is refused when read.
    let mut extra = json.clone();
    extra["scope"] = json!("all");
    assert!(serde_json::from_value::<Approval>(extra).is_err());
    assert_eq!(s.runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_approval_expires_on_the_stores_clock() {
    let s = setup();
    let r = request(&s.d, &call(100), &run()).await;
    let now = s.d.store().now().await.unwrap();
    let approval = approver().approve_until(&r, Timestamp(now.as_millis() + 60_000));
    s.clock.advance(Duration::from_secs(61));
    let refusal = refused(&s, &call(100), run(), approval).await;
    assert!(
        matches!(refusal, ApprovalRefusal::Expired { .. }),
        "{refusal:?}"
    );
    assert!(refusal.to_string().contains("expired at"), "{refusal}");
}

#[tokio::test]
async fn an_approval_of_arguments_a_does_not_run_arguments_b() {
    let s = setup();
    let r = request(&s.d, &call(100), &run()).await;
    let approval = approver().approve_for(&r, HOUR);
    let refusal = refused(&s, &call(1_000_000), run(), approval).await;
    assert_eq!(refusal, ApprovalRefusal::OtherArguments);
}

/// Dispatch with `approval` and expect it to be no approval of this call at all.
async fn still_required(s: &Setup, d: &Dispatcher, approval: Approval) {
    let err = d
        .dispatch(&call(100), &run().approve(approval))
        .await
        .unwrap_err();
    assert!(
        matches!(err, DispatchError::ApprovalRequired { .. }),
        "{err:?}"
    );
    assert_eq!(s.runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn another_tenants_or_another_tools_approval_does_not_run_the_call() {
    let s = setup();
    // Their key is derived from their tenant: for tenant-a's call it names another call,
    // so the call still needs its own approval.
    let theirs = request(&s.d, &call(100), &RunContext::new("tenant-b")).await;
    still_required(&s, &s.d, approver().approve_for(&theirs, HOUR)).await;
    // Another tool's approval of the same call id does not either.
    let close = ToolCall::new("close_account", json!({})).with_call_id("call-wire");
    let other_tool = request(&s.d, &close, &run()).await;
    still_required(&s, &s.d, approver().approve_for(&other_tool, HOUR)).await;
}

#[tokio::test]
async fn another_namespaces_approval_does_not_run_the_call() {
    let s = setup();
    let r = request(&s.d, &call(100), &run()).await;
    // The namespace is part of the key too: there the approval names another call.
    let payments = s.d.clone().with_namespace("payments");
    still_required(&s, &payments, approver().approve_for(&r, HOUR)).await;
}

#[tokio::test]
async fn a_completed_call_replays_with_an_expired_approval() {
    let s = setup();
    let r = request(&s.d, &call(100), &run()).await;
    let approval = approver().approve_for(&r, Duration::from_secs(60));
    s.d.dispatch(&call(100), &run().approve(approval.clone()))
        .await
        .unwrap();
    s.clock.advance(Duration::from_secs(120));
    // A run replayed from a checkpoint carries its old approval: the call causes no
    // effect, so it replays.
    let replayed =
        s.d.dispatch(&call(100), &run().approve(approval))
            .await
            .unwrap();
    assert!(replayed.deduplicated);
    assert_eq!(s.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_irreversible_tool_without_approval_keys_is_a_setup_error() {
    let runs = Arc::new(AtomicUsize::new(0));
    let registry = Registry::builder().add(wire(&runs)).build().unwrap();
    let err = Dispatcher::new(registry, Arc::new(MemoryStore::new())).unwrap_err();
    assert_eq!(
        err,
        SetupError::NoApprovalKeys {
            tool: "wire_money".into()
        }
    );
    assert!(err.to_string().contains("Dispatcher::approving"), "{err}");
    let registry = Registry::builder().add(wire(&runs)).build().unwrap();
    assert!(
        Dispatcher::approving(
            registry,
            Arc::new(MemoryStore::new()),
            ApprovalKeys::new([])
        )
        .is_err()
    );
}

#[tokio::test]
async fn an_approval_used_once_never_runs_its_call_again() {
    let s = setup();
    let r = request(&s.d, &call(100), &run()).await;
    let approval = approver().approve_for(&r, HOUR);
    s.d.dispatch(&call(100), &run().approve(approval.clone()))
        .await
        .unwrap();
    // Past the tool's one-minute TTL the record is kept while the approval could still be
    // presented: the same approval replays instead of running the call again.
    for minutes in [2, 28, 29] {
        s.clock.advance(Duration::from_secs(60 * minutes));
        let again =
            s.d.dispatch(&call(100), &run().approve(approval.clone()))
                .await;
        assert!(again.unwrap().deduplicated, "after {minutes} more minutes");
    }
    assert_eq!(s.runs.load(Ordering::SeqCst), 1);
    // Once the approval has expired, the call still replays while its record is kept (no
    // effect happens)...
    s.clock.advance(HOUR);
    let replayed =
        s.d.dispatch(&call(100), &run().approve(approval.clone()))
            .await;
    assert!(replayed.unwrap().deduplicated);
    // ...and once the record has expired too (kept as long as the longest approval the
    // dispatcher accepts), the approval is refused: it never runs the call again.
    s.clock
        .advance(idem::approval::DEFAULT_MAX_APPROVAL_VALIDITY);
    let refusal = refused(&s, &call(100), run(), approval).await;
    assert!(
        matches!(refusal, ApprovalRefusal::Expired { .. }),
        "{refusal:?}"
    );
    assert_eq!(s.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn two_concurrent_uses_of_one_approval_run_the_call_once() {
    let s = setup();
    let r = request(&s.d, &call(100), &run()).await;
    let approved = run().approve(approver().approve_for(&r, HOUR));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (d, run) = (s.d.clone(), approved.clone());
        tasks.push(tokio::spawn(
            async move { d.dispatch(&call(100), &run).await },
        ));
    }
    let mut fresh = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(d) if !d.deduplicated => fresh += 1,
            Ok(_) | Err(DispatchError::InProgress { .. }) => {}
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(fresh, 1);
    assert_eq!(s.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_approval_valid_for_longer_than_the_dispatcher_accepts_is_refused() {
    let s = setup();
    let r = request(&s.d, &call(100), &run()).await;
    let week = approver().approve_for(&r, Duration::from_secs(7 * 86_400));
    let refusal = refused(&s, &call(100), run(), week.clone()).await;
    assert!(
        matches!(refusal, ApprovalRefusal::TooLong { .. }),
        "{refusal:?}"
    );
    assert!(
        refusal.to_string().contains("approve for less"),
        "{refusal}"
    );
    let lenient =
        s.d.clone()
            .with_max_approval_validity(Duration::from_secs(8 * 86_400));
    assert!(
        !lenient
            .dispatch(&call(100), &run().approve(week))
            .await
            .unwrap()
            .deduplicated
    );
}

/// An irreversible tool whose body fails as `fail` says, with a verify hook that finds the
/// effect applied.
fn flaky(runs: &Arc<AtomicUsize>, fail: fn() -> ToolError) -> ToolDef {
    let runs = runs.clone();
    ToolDef::builder("flaky_wire", ToolClass::Irreversible)
        .description("Wire money through a flaky provider.")
        .input_schema(json!({"type": "object"}))
        .policy(ToolPolicy {
            verify_after: Duration::from_secs(1),
            lease: Duration::from_secs(1),
            ..ToolPolicy::default()
        })
        .handler(move |_: ToolContext, _: Value| {
            let runs = runs.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Err::<Value, _>(fail())
            }
        })
        .verify(|_: ToolContext, _: Value| async {
            Verified::applied(&json!({"wired": "found downstream"}))
        })
        .build()
        .unwrap()
}

fn flaky_setup(fail: fn() -> ToolError) -> Setup {
    let runs = Arc::new(AtomicUsize::new(0));
    let clock = Arc::new(ManualClock::new());
    let store = Arc::new(MemoryStore::new().with_clock(clock.clone()));
    let registry = Registry::builder().add(flaky(&runs, fail)).build().unwrap();
    let keys = ApprovalKeys::new([approval_key()]);
    let d = Dispatcher::approving(registry, store, keys).unwrap();
    Setup { d, runs, clock }
}

#[tokio::test]
async fn the_verify_hook_of_an_approved_call_is_asked() {
    // The approval the record journals is not a step of the tool: an Unknown outcome is
    // still the verify hook's to settle.
    let s = flaky_setup(|| ToolError::ambiguous("timed out after sending"));
    let call = ToolCall::new("flaky_wire", json!({})).with_call_id("call-flaky");
    let r = request(&s.d, &call, &run()).await;
    let approved = run().approve(approver().approve_for(&r, HOUR));
    let err = s.d.dispatch(&call, &approved).await.unwrap_err();
    let DispatchError::OutcomeUnknown { retry_after, .. } = err else {
        panic!("expected OutcomeUnknown, got {err:?}")
    };
    assert!(retry_after.is_some(), "the hook will be asked");
    s.clock.advance(Duration::from_secs(2));
    let settled = s.d.dispatch(&call, &approved).await.unwrap();
    assert!(settled.deduplicated);
    assert_eq!(settled.output, json!({"wired": "found downstream"}));
    assert_eq!(s.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_approval_whose_call_failed_does_not_run_it_again() {
    // The effect did not happen, yet the approval was used: calling again with it replays
    // the failure instead of running the body a second time.
    let s = flaky_setup(|| ToolError::not_applied("card declined"));
    let call = ToolCall::new("flaky_wire", json!({})).with_call_id("call-declined");
    let r = request(&s.d, &call, &run()).await;
    let approved = run().approve(approver().approve_for(&r, HOUR));
    for n in 0..3 {
        let err = s.d.dispatch(&call, &approved).await.unwrap_err();
        assert!(
            matches!(err, DispatchError::ToolFailed { .. }),
            "dispatch {n}: {err:?}"
        );
    }
    assert_eq!(
        s.runs.load(Ordering::SeqCst),
        1,
        "one approval, one execution"
    );
}
