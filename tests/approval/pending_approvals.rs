//! Durable pending approvals: an irreversible call without an approval is recorded in the
//! store as pending; an operator approves, denies or approves edited arguments from another
//! dispatcher (another process, hours later); the agent's next dispatch finds the decision.
//! The flow runs on every store.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem::prelude::*;
use idem::store::approvals::{ApprovalFilter, PendingApproval, Verdict};
use idem::store::memory::ManualClock;
use idem::{
    ApprovalKey, Approver, Store, ToolDef, approval::APPROVAL_STEP, approval::ApprovalKeys,
    approval::DecisionError, key::RecordKey,
};
use serde_json::{Value, json};
use support::dispatcher::{approval_key, approver};

/// A registry of the irreversible tools the flow calls, counting executions by arguments.
fn registry(runs: &Arc<AtomicUsize>) -> Registry {
    registry_at(runs, "1")
}

/// [`registry`], with the refund's handler at `version`.
pub(crate) fn registry_at(runs: &Arc<AtomicUsize>, version: &str) -> Registry {
    let counter = runs.clone();
    let refund = ToolDef::builder("refund", ToolClass::Irreversible)
        .description("Refund a payment.")
        .version(version.to_owned())
        .input_schema(json!({
            "type": "object",
            "properties": {"payment": {"type": "string"}, "cents": {"type": "integer", "minimum": 1}},
            "required": ["payment", "cents"],
            "additionalProperties": false
        }))
        .handler(move |_: ToolContext, args: Value| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>(json!({"refunded": args["cents"]}))
            }
        })
        .build()
        .unwrap();
    Registry::builder().add(refund).build().unwrap()
}

/// The agent's dispatcher and the operator's, on one store: two processes in a deployment.
fn pair(store: Arc<dyn Store>, runs: &Arc<AtomicUsize>) -> (Dispatcher, Dispatcher) {
    let keys = || ApprovalKeys::new([approval_key()]);
    let agent = Dispatcher::approving(registry(runs), store.clone(), keys()).unwrap();
    let operator = Dispatcher::approving(registry(runs), store, keys()).unwrap();
    (agent, operator)
}

fn refund(id: &str, cents: u64) -> ToolCall {
    ToolCall::new("refund", json!({"payment": "pay_1", "cents": cents})).with_call_id(id)
}

async fn pending_of(operator: &Dispatcher, tenant: &str) -> Vec<PendingApproval> {
    operator
        .approvals()
        .pending(&ApprovalFilter {
            tenant: Some(tenant.into()),
            ..ApprovalFilter::default()
        })
        .await
        .unwrap()
}

async fn required(d: &Dispatcher, call: &ToolCall, run: &RunContext) {
    let err = d.dispatch(call, run).await.unwrap_err();
    assert!(
        matches!(err, DispatchError::ApprovalRequired { .. }),
        "{err:?}"
    );
}

/// The whole flow on `store`, in `tenant`'s name (unique per run, so that stores shared
/// between runs list only this one's).
async fn flow(store: Arc<dyn Store>, tenant: &str) {
    let runs = Arc::new(AtomicUsize::new(0));
    let (agent, operator) = pair(store.clone(), &runs);
    let run = RunContext::new(tenant);

    // 1. Refused pending; the request is in the store, with its arguments.
    required(&agent, &refund("call-a", 500), &run).await;
    required(&agent, &refund("call-a", 500), &run).await; // asking again keeps one request
    let pending = pending_of(&operator, tenant).await;
    assert_eq!(pending.len(), 1, "{pending:?}");
    let a = &pending[0];
    assert_eq!((a.tool.as_str(), a.tenant.as_str()), ("refund", tenant));
    assert_eq!(a.arguments, json!({"payment": "pay_1", "cents": 500}));
    assert!(a.expires_at > a.requested_at);
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    // 2. The operator approves it; the agent's retry, carrying nothing, runs it once.
    let decided = operator
        .approvals()
        .approve(&a.key, &approver(), None, None)
        .await
        .unwrap();
    let decision = decided.decision.as_ref().unwrap();
    assert_eq!(decision.by, "operator@tests");
    assert!(matches!(decision.verdict, Verdict::Approved { .. }));
    let done = agent.dispatch(&refund("call-a", 500), &run).await.unwrap();
    assert!(!done.deduplicated);
    assert_eq!(done.output, json!({"refunded": 500}));
    let again = agent.dispatch(&refund("call-a", 500), &run).await.unwrap();
    assert!(again.deduplicated);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // The record shows the approval that authorised it.
    let record = store.get(&a.key).await.unwrap().unwrap();
    let step = record
        .steps
        .iter()
        .find(|s| s.step == APPROVAL_STEP)
        .expect("the approval in the record's journal");
    let shown: Approval = serde_json::from_str(&step.value).unwrap();
    assert_eq!(shown.approver(), "operator@tests");
    // Approving twice is refused; so is denying what was approved.
    let twice = operator
        .approvals()
        .approve(&a.key, &approver(), None, None)
        .await;
    assert!(matches!(twice, Err(DecisionError::Refused(_))), "{twice:?}");
    let late = operator.approvals().deny(&a.key, "bob", "no", None).await;
    assert!(matches!(late, Err(DecisionError::Refused(_))), "{late:?}");

    // 3. A denial is replayed as a denial, with its reason, and never runs.
    required(&agent, &refund("call-b", 700), &run).await;
    let b = pending_of(&operator, tenant).await.remove(0);
    operator
        .approvals()
        .deny(&b.key, "bob@support", "refund already issued by hand", None)
        .await
        .unwrap();
    for _ in 0..2 {
        match agent
            .dispatch(&refund("call-b", 700), &run)
            .await
            .unwrap_err()
        {
            DispatchError::ApprovalDenied { by, reason, .. } => {
                assert_eq!(by, "bob@support");
                assert_eq!(reason, "refund already issued by hand");
            }
            other => panic!("expected ApprovalDenied, got {other:?}"),
        }
    }
    // Deny then approve: refused.
    let after = operator
        .approvals()
        .approve(&b.key, &approver(), None, None)
        .await;
    assert!(matches!(after, Err(DecisionError::Refused(_))), "{after:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // 4. Approved with edited arguments: the original call stays refused, with the edited
    // arguments to call again with; the edited call runs once.
    required(&agent, &refund("call-c", 90_000), &run).await;
    let c = pending_of(&operator, tenant).await.remove(0);
    let bad = json!({"payment": "pay_1", "cents": 0});
    let refused = operator
        .approvals()
        .approve(&c.key, &approver(), Some(&bad), None)
        .await;
    assert!(
        matches!(refused, Err(DecisionError::InvalidArguments(_))),
        "{refused:?}"
    );
    let edited = json!({"payment": "pay_1", "cents": 9_000});
    operator
        .approvals()
        .approve(&c.key, &approver(), Some(&edited), None)
        .await
        .unwrap();
    match agent
        .dispatch(&refund("call-c", 90_000), &run)
        .await
        .unwrap_err()
    {
        DispatchError::ApprovalEdited { arguments, .. } => assert_eq!(*arguments, edited),
        other => panic!("expected ApprovalEdited, got {other:?}"),
    }
    let out = agent
        .dispatch(&refund("call-c", 9_000), &run)
        .await
        .unwrap();
    assert_eq!(out.output, json!({"refunded": 9_000}));
    assert!(
        agent
            .dispatch(&refund("call-c", 9_000), &run)
            .await
            .unwrap()
            .deduplicated
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);

    // 5. A decision in the store that no approval key signed is refused (whoever can write
    // to the store cannot approve a call).
    required(&agent, &refund("call-d", 100), &run).await;
    let d = pending_of(&operator, tenant).await.remove(0);
    let forger = Approver::new("mallory", ApprovalKey::new("tests-1", [9u8; 32]).unwrap());
    let forged_operator = Dispatcher::approving(
        registry(&runs),
        store.clone(),
        ApprovalKeys::new([ApprovalKey::new("tests-1", [9u8; 32]).unwrap()]),
    )
    .unwrap();
    forged_operator
        .approvals()
        .approve(&d.key, &forger, None, None)
        .await
        .unwrap();
    let err = agent
        .dispatch(&refund("call-d", 100), &run)
        .await
        .unwrap_err();
    assert!(
        matches!(err, DispatchError::ApprovalRefused { .. }),
        "{err:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);

    // Nothing else is pending for the tenant.
    assert!(pending_of(&operator, tenant).await.is_empty());
}

#[tokio::test]
async fn the_flow_on_the_memory_store() {
    flow(Arc::new(MemoryStore::new()), "tenant-memory").await;
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn the_flow_on_sqlite() {
    let dir = std::env::temp_dir().join(support::services::unique("idem-pending"));
    std::fs::create_dir_all(&dir).unwrap();
    let store = idem::store::sqlite::SqliteStore::open(dir.join("idem.db")).unwrap();
    flow(Arc::new(store), "tenant-sqlite").await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn the_flow_on_redis() {
    use support::services::{REDIS_URL, service_url};
    let Some(url) = service_url(REDIS_URL, "the_flow_on_redis") else {
        return;
    };
    let prefixes = support::redis_keys::redis_prefixes(&url);
    let store =
        support::stores::open_store("redis", &url, &prefixes.fresh("idem-pending"), 4).await;
    flow(store, &support::services::unique("tenant-redis")).await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn the_flow_on_postgres() {
    use support::services::{POSTGRES_URL, service_url};
    let Some(url) = service_url(POSTGRES_URL, "the_flow_on_postgres") else {
        return;
    };
    let schemas = support::postgres_schemas::postgres_schemas(&url);
    let store =
        support::stores::open_store("postgres", &url, &schemas.fresh("idem_pending"), 4).await;
    flow(store, &support::services::unique("tenant-postgres")).await;
}

/// The agent and the operator on one memory store whose clock the test moves.
fn on_clock() -> (Dispatcher, Dispatcher, Arc<ManualClock>, Arc<AtomicUsize>) {
    let clock = Arc::new(ManualClock::new());
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new().with_clock(clock.clone()));
    let runs = Arc::new(AtomicUsize::new(0));
    let (agent, operator) = pair(store, &runs);
    (agent, operator, clock, runs)
}

#[tokio::test]
async fn a_request_expires_and_cannot_be_approved_after() {
    let (agent, operator, clock, runs) = on_clock();
    let run = RunContext::new("t");
    required(&agent, &refund("call-x", 5), &run).await;
    let x = pending_of(&operator, "t").await.remove(0);
    clock.advance(idem::approval::DEFAULT_MAX_APPROVAL_VALIDITY + Duration::from_secs(1));
    assert!(
        pending_of(&operator, "t").await.is_empty(),
        "an expired request is not pending"
    );
    let late = operator
        .approvals()
        .approve(&x.key, &approver(), None, None)
        .await;
    assert!(matches!(late, Err(DecisionError::Refused(_))), "{late:?}");
    // The agent calling again makes a new request.
    required(&agent, &refund("call-x", 5), &run).await;
    assert_eq!(pending_of(&operator, "t").await.len(), 1);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_denial_stands_until_it_expires() {
    let (agent, operator, clock, runs) = on_clock();
    let run = RunContext::new("t");
    required(&agent, &refund("call-y", 5), &run).await;
    let y = pending_of(&operator, "t").await.remove(0);
    operator
        .approvals()
        .deny(&y.key, "ops", "not today", None)
        .await
        .unwrap();
    clock.advance(Duration::from_secs(3600));
    assert!(matches!(
        agent.dispatch(&refund("call-y", 5), &run).await,
        Err(DispatchError::ApprovalDenied { .. })
    ));
    clock.advance(idem::approval::DEFAULT_MAX_APPROVAL_VALIDITY);
    required(&agent, &refund("call-y", 5), &run).await;
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn deciding_a_call_never_requested_is_refused() {
    let (_, operator, _, _) = on_clock();
    let nowhere = RecordKey::from_stored("no-such-call");
    let err = operator
        .approvals()
        .approve(&nowhere, &approver(), None, None)
        .await;
    assert!(matches!(err, Err(DecisionError::Refused(_))), "{err:?}");
    let err = operator.approvals().deny(&nowhere, "ops", "no", None).await;
    assert!(
        err.as_ref()
            .is_err_and(|e| e.to_string().contains("no approval was requested")),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_store_outage_between_approval_and_execution_runs_nothing() {
    use support::hooked_store::{Hook, Hooked, Op};
    #[derive(Debug, Default)]
    struct Down(std::sync::atomic::AtomicBool);
    #[async_trait::async_trait]
    impl Hook for Down {
        async fn before(
            &self,
            op: Op,
            _: Option<&RecordKey>,
        ) -> Result<(), idem::store::StoreError> {
            if self.0.load(Ordering::SeqCst) && op == Op::Claim {
                return Err(idem::store::StoreError::Unavailable(
                    "connection refused".into(),
                ));
            }
            Ok(())
        }
    }
    let inner: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let hooked = Arc::new(Hooked::new(inner, Down::default()));
    let runs = Arc::new(AtomicUsize::new(0));
    let (agent, operator) = pair(hooked.clone(), &runs);
    let run = RunContext::new("t");
    required(&agent, &refund("call-z", 5), &run).await;
    let z = pending_of(&operator, "t").await.remove(0);
    operator
        .approvals()
        .approve(&z.key, &approver(), None, None)
        .await
        .unwrap();
    hooked.hook.0.store(true, Ordering::SeqCst);
    let err = agent
        .dispatch(&refund("call-z", 5), &run)
        .await
        .unwrap_err();
    assert!(
        matches!(err, DispatchError::StoreUnavailable { .. }),
        "{err:?}"
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "nothing runs without the claim"
    );
    hooked.hook.0.store(false, Ordering::SeqCst);
    assert!(
        !agent
            .dispatch(&refund("call-z", 5), &run)
            .await
            .unwrap()
            .deduplicated
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_entry_whose_arguments_do_not_match_its_fingerprint_is_not_approved() {
    // Whoever can write to the store shows the operator small arguments under the
    // fingerprint of large ones: the operator's approval must not cover what they never saw.
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let (agent, operator) = pair(store.clone(), &runs);
    let run = RunContext::new("t");
    required(&agent, &refund("call-big", 90_000), &run).await;
    let real = pending_of(&operator, "t").await.remove(0);
    let shown = PendingApproval {
        arguments: json!({"payment": "pay_1", "cents": 5}),
        ..real.clone()
    };
    let text = serde_json::to_string(&real).unwrap();
    let forged = serde_json::to_string(&shown).unwrap();
    assert!(
        store
            .swap_approval(&real.key, Some(&text), &shown, &forged)
            .await
            .unwrap()
    );
    let err = operator
        .approvals()
        .approve(&real.key, &approver(), None, None)
        .await;
    assert!(matches!(err, Err(DecisionError::Tampered(_))), "{err:?}");
    assert!(
        agent
            .dispatch(&refund("call-big", 90_000), &run)
            .await
            .is_err()
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_store_failure_after_the_approval_runs_nothing() {
    use support::hooked_store::{Hook, Hooked, Op};
    #[derive(Debug, Default)]
    struct Fail(std::sync::Mutex<Option<Op>>);
    #[async_trait::async_trait]
    impl Hook for Fail {
        async fn before(
            &self,
            op: Op,
            _: Option<&RecordKey>,
        ) -> Result<(), idem::store::StoreError> {
            if *self.0.lock().unwrap() == Some(op) {
                return Err(idem::store::StoreError::Unavailable(
                    "connection reset".into(),
                ));
            }
            Ok(())
        }
    }
    let inner: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let hooked = Arc::new(Hooked::new(inner, Fail::default()));
    let runs = Arc::new(AtomicUsize::new(0));
    let (agent, operator) = pair(hooked.clone(), &runs);
    let run = RunContext::new("t");
    required(&agent, &refund("call-j", 5), &run).await;
    let j = pending_of(&operator, "t").await.remove(0);
    operator
        .approvals()
        .approve(&j.key, &approver(), None, None)
        .await
        .unwrap();
    // Reading the decision fails, then journaling the approval after the claim fails.
    for op in [Op::Approvals, Op::Journal] {
        *hooked.hook.0.lock().unwrap() = Some(op);
        let err = agent
            .dispatch(&refund("call-j", 5), &run)
            .await
            .unwrap_err();
        assert!(
            matches!(err, DispatchError::StoreUnavailable { .. }),
            "{op:?}: {err:?}"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 0, "{op:?}: nothing ran");
    }
    *hooked.hook.0.lock().unwrap() = None;
    assert!(
        !agent
            .dispatch(&refund("call-j", 5), &run)
            .await
            .unwrap()
            .deduplicated
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_call_run_with_a_carried_approval_is_no_longer_pending() {
    let (agent, operator, _, runs) = on_clock();
    let run = RunContext::new("t");
    let call = refund("call-carried", 5);
    let request = match agent.dispatch(&call, &run).await {
        Err(DispatchError::ApprovalRequired { request }) => request,
        other => panic!("{other:?}"),
    };
    assert_eq!(pending_of(&operator, "t").await.len(), 1);
    let approved = run.approve(approver().approve_for(&request, Duration::from_secs(600)));
    agent.dispatch(&call, &approved).await.unwrap();
    assert!(
        pending_of(&operator, "t").await.is_empty(),
        "it ran: nothing to decide"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
