//! Recovery without a caller, and the execution contract across deploys, in one process: a
//! worker that died holding a key is left as a claim in the store (made exactly as the
//! dispatcher makes one), the store's clock is moved past its lease, and a recovery pass or a
//! dispatcher of a later deploy meets the record. The same across processes killed with
//! SIGKILL, on the durable stores: `tests/recovery_processes.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem::prelude::*;
use idem::store::{Claim, ClaimRequest};
use idem::{
    SecretKey, ToolDef, ToolPolicy, dispatch::RecoveryAction, dispatch::RecoveryOptions,
    dispatch::Unrecoverable, key::Fingerprint, key::RecordKey, key::canonical_json,
    record::RecordState, store::ManualClock,
};
use serde_json::{Value, json};

use crate::support;
use support::dispatcher::dispatcher;

const TENANT: &str = "tenant-recovery";

/// A downstream service: every request's key, in order.
#[derive(Default)]
struct Downstream {
    keys: Mutex<Vec<String>>,
    verifies: AtomicUsize,
}

impl Downstream {
    fn calls(&self) -> Vec<String> {
        self.keys.lock().unwrap().clone()
    }
}

/// A deploy of the tool `charge`: its class, handler version, TTL, lease and verify hook.
#[derive(Clone)]
struct Deploy {
    class: ToolClass,
    version: &'static str,
    ttl: Duration,
    lease: Duration,
    verify: bool,
    secret: bool,
    natural: bool,
}

impl Deploy {
    fn of(class: ToolClass) -> Deploy {
        Deploy {
            class,
            version: "1",
            ttl: Duration::from_secs(3600),
            lease: Duration::from_secs(10),
            verify: false,
            secret: false,
            natural: false,
        }
    }

    fn tool(&self, downstream: &Arc<Downstream>) -> ToolDef {
        let policy = ToolPolicy {
            ttl: self.ttl,
            lease: self.lease,
            verify_after: Duration::from_secs(60),
            ..ToolPolicy::default()
        };
        let ran = downstream.clone();
        let mut builder = ToolDef::builder("charge", self.class)
            .description("Charge a card.")
            .input_schema(json!({
                "type": "object",
                "properties": {"cents": {"type": "integer"}, "card": {"type": "string"}},
                "required": ["cents"]
            }))
            .policy(policy)
            .version(self.version)
            .handler(move |ctx: ToolContext, args: Value| {
                let ran = ran.clone();
                async move {
                    ran.keys
                        .lock()
                        .unwrap()
                        .push(ctx.idempotency_key().to_string());
                    Ok::<_, ToolError>(
                        json!({"charged": args["cents"], "by": ctx.idempotency_key().to_string()}),
                    )
                }
            });
        if self.verify {
            let asked = downstream.clone();
            builder = builder.verify(move |ctx: ToolContext, _args: Value| {
                let asked = asked.clone();
                async move {
                    asked.verifies.fetch_add(1, Ordering::SeqCst);
                    let key = ctx.idempotency_key().to_string();
                    Ok::<_, ToolError>(if asked.calls().contains(&key) {
                        Verified::Applied(json!({"charged": "found", "by": key}))
                    } else {
                        Verified::NotApplied
                    })
                }
            });
        }
        if self.secret {
            builder = builder.secret("/card");
        }
        if self.natural {
            builder = builder.natural_key(|args: &Value| Some(args["cents"].to_string()));
        }
        builder.build().expect("the tool")
    }

    /// A dispatcher of this deploy over `store`.
    fn dispatcher(&self, downstream: &Arc<Downstream>, store: Arc<dyn Store>) -> Dispatcher {
        let registry = Registry::builder()
            .add(self.tool(downstream))
            .build()
            .unwrap();
        let d = dispatcher(registry, store);
        match self.secret {
            true => d.with_secret_key(SecretKey::new(vec![7; 32]).unwrap()),
            false => d,
        }
    }
}

fn call() -> ToolCall {
    ToolCall::new("charge", json!({"cents": 500})).with_key("order-1")
}

fn run() -> RunContext {
    RunContext::new(TENANT)
}

/// A worker of `d` that claimed `call` and died before recording: the claim the dispatcher
/// would have made, left in the store.
async fn died_holding(d: &Dispatcher, call: &ToolCall) -> RecordKey {
    let key = d.record_key(call, &run()).unwrap().expect("a key");
    let tool = d.registry().get(&call.name).unwrap();
    let canonical = canonical_json(&call.arguments);
    let request = ClaimRequest {
        key: key.clone(),
        tool: call.name.clone(),
        tenant: TENANT.into(),
        fingerprint: Fingerprint::of_canonical(&canonical),
        lease: tool.policy().lease,
        orphans: tool.class().orphan_policy(),
        arguments: Some(canonical),
        contract: Some(tool.contract(tool.policy().ttl)),
    };
    match d.store().claim(&request).await.unwrap() {
        Claim::Acquired { .. } => key,
        other => panic!("the dying worker did not claim: {other:?}"),
    }
}

fn setup() -> (Arc<ManualClock>, Arc<dyn Store>, Arc<Downstream>) {
    let clock = Arc::new(ManualClock::new());
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new().with_clock(clock.clone()));
    (clock, store, Arc::new(Downstream::default()))
}

/// The only action of a pass (the tests leave one record).
fn only(report: &idem::dispatch::RecoveryReport) -> &RecoveryAction {
    assert_eq!(report.records.len(), 1, "{report:?}");
    &report.records[0].action
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holders_idempotent_call_is_completed_once_with_its_key() {
    let (clock, store, downstream) = setup();
    let d = Deploy::of(ToolClass::IdempotentWrite).dispatcher(&downstream, store);
    let key = died_holding(&d, &call()).await;
    let options = RecoveryOptions::default();
    // The lease is live: recovery leaves the holder alone.
    assert!(d.recover(&options).await.unwrap().records.is_empty());
    clock.advance(Duration::from_secs(11));
    // Two recovery workers at once: one re-runs it; the other finds it taken, or held.
    let pass =
        |d: Dispatcher| tokio::spawn(async move { d.recover(&RecoveryOptions::default()).await });
    let (a, b) = (pass(d.clone()), pass(d.clone()));
    let actions: Vec<_> = [a.await.unwrap().unwrap(), b.await.unwrap().unwrap()]
        .into_iter()
        .flat_map(|r| r.records)
        .map(|r| r.action)
        .collect();
    let reran: Vec<_> = actions
        .iter()
        .filter_map(|a| match a {
            RecoveryAction::ReRan { key, outcome } => Some((key.clone(), outcome.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(reran.len(), 1, "{actions:?}");
    assert!(
        actions
            .iter()
            .all(|a| matches!(a, RecoveryAction::ReRan { .. } | RecoveryAction::Raced)),
        "{actions:?}"
    );
    let expected = idem::IdempotencyKey::of_record(&key).unwrap();
    assert_eq!(reran[0].0, expected);
    assert_eq!(
        downstream.calls(),
        vec![expected.to_string()],
        "run once, with the call's key"
    );
    // The caller's retry replays what recovery recorded.
    let replay = d.dispatch(&call(), &run()).await.unwrap();
    assert!(replay.deduplicated);
    assert_eq!(Ok(replay.output), reran[0].1);
    assert_eq!(replay.key, Some(expected));
    assert_eq!(downstream.calls().len(), 1);
    assert!(
        d.recover(&options).await.unwrap().records.is_empty(),
        "nothing left"
    );
}

#[tokio::test]
async fn a_dead_holders_non_idempotent_call_is_turned_unknown_then_verified() {
    let (clock, store, downstream) = setup();
    let deploy = Deploy {
        verify: true,
        ..Deploy::of(ToolClass::NonIdempotentWrite)
    };
    let d = deploy.dispatcher(&downstream, store);
    let key = died_holding(&d, &call()).await;
    // The dead worker's request did reach the provider.
    let downstream_key = idem::IdempotencyKey::of_record(&key).unwrap().to_string();
    downstream.keys.lock().unwrap().push(downstream_key.clone());
    clock.advance(Duration::from_secs(11));
    let options = RecoveryOptions::default();
    assert_eq!(
        only(&d.recover(&options).await.unwrap()),
        &RecoveryAction::MarkedUnknown
    );
    match only(&d.recover(&options).await.unwrap()) {
        RecoveryAction::Reported(Unrecoverable::NotYet { .. }) => {}
        other => panic!("verified before its settle delay: {other:?}"),
    }
    assert_eq!(downstream.verifies.load(Ordering::SeqCst), 0);
    clock.advance(Duration::from_secs(61));
    assert_eq!(
        only(&d.recover(&options).await.unwrap()),
        &RecoveryAction::Verified { applied: true }
    );
    assert_eq!(downstream.calls(), vec![downstream_key], "never run again");
    let replay = d.dispatch(&call(), &run()).await.unwrap();
    assert!(replay.deduplicated);
    assert_eq!(replay.output["charged"], json!("found"));
}

#[tokio::test]
async fn what_recovery_cannot_settle_is_reported_never_guessed() {
    // No verify hook: Unknown, reported after its settle delay as before it.
    let (clock, store, downstream) = setup();
    let d = Deploy::of(ToolClass::Irreversible).dispatcher(&downstream, store.clone());
    died_holding(&d, &call()).await;
    clock.advance(Duration::from_secs(11));
    let options = RecoveryOptions::default();
    assert_eq!(
        only(&d.recover(&options).await.unwrap()),
        &RecoveryAction::MarkedUnknown
    );
    clock.advance(Duration::from_secs(3600));
    assert_eq!(
        only(&d.recover(&options).await.unwrap()),
        &RecoveryAction::Reported(Unrecoverable::NoVerifyHook)
    );
    // A worker whose registry no longer has the tool.
    let other = dispatcher(Registry::builder().build().unwrap(), store);
    assert_eq!(
        only(&other.recover(&options).await.unwrap()),
        &RecoveryAction::Reported(Unrecoverable::ToolNotRegistered)
    );
    assert!(downstream.calls().is_empty(), "nothing ran");

    // Secret arguments are stored sealed: never re-run from their seals.
    let (clock, store, downstream) = setup();
    let deploy = Deploy {
        secret: true,
        ..Deploy::of(ToolClass::IdempotentWrite)
    };
    let d = deploy.dispatcher(&downstream, store);
    let secret_call = ToolCall::new("charge", json!({"cents": 1, "card": "4242"})).with_key("o-2");
    // Dispatch it for real so that the stored arguments are what the dispatcher stores, then
    // leave a dead holder under another key the same way.
    d.dispatch(&secret_call, &run()).await.unwrap();
    let stored = d
        .store()
        .get(&d.record_key(&secret_call, &run()).unwrap().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(
        !stored.arguments.as_deref().unwrap_or("").contains("4242"),
        "sealed in the record"
    );
    let dead = ToolCall::new("charge", json!({"cents": 2, "card": "4242"})).with_key("o-3");
    died_holding(&d, &dead).await;
    clock.advance(Duration::from_secs(11));
    assert_eq!(
        only(&d.recover(&options).await.unwrap()),
        &RecoveryAction::Reported(Unrecoverable::ArgumentsSealed)
    );
    assert_eq!(downstream.calls().len(), 1, "only the live dispatch ran");
}

// ---------------------------------------------------------------------------------------
// Deploys that change each field of the contract

/// Made under `before`, met under `after` once the dead holder's lease expired: what a
/// caller's retry and a recovery pass do.
async fn deployed(
    before: Deploy,
    after: Deploy,
) -> (
    Result<Dispatched, DispatchError>,
    Arc<Downstream>,
    Dispatcher,
    Arc<ManualClock>,
) {
    let (clock, store, downstream) = setup();
    let old = before.dispatcher(&downstream, store.clone());
    died_holding(&old, &call()).await;
    clock.advance(before.lease + Duration::from_secs(1));
    let new = after.dispatcher(&downstream, store);
    let retried = new.dispatch(&call(), &run()).await;
    (retried, downstream, new, clock)
}

#[tokio::test]
async fn a_deploy_that_relaxes_the_class_does_not_rerun_an_old_call() {
    let (retried, downstream, new, _) = deployed(
        Deploy::of(ToolClass::NonIdempotentWrite),
        Deploy::of(ToolClass::IdempotentWrite),
    )
    .await;
    match retried {
        Err(DispatchError::OutcomeUnknown { .. }) => {}
        other => panic!("an orphan made as non-idempotent was not left Unknown: {other:?}"),
    }
    assert!(downstream.calls().is_empty(), "not re-run by the caller");
    let report = new.recover(&RecoveryOptions::default()).await.unwrap();
    assert!(
        matches!(only(&report), RecoveryAction::Reported(_)),
        "{report:?}"
    );
    assert!(downstream.calls().is_empty(), "nor by recovery");
}

#[tokio::test]
async fn a_deploy_that_tightens_the_class_applies_the_new_one() {
    let (retried, downstream, _, _) = deployed(
        Deploy::of(ToolClass::IdempotentWrite),
        Deploy::of(ToolClass::NonIdempotentWrite),
    )
    .await;
    assert!(
        matches!(retried, Err(DispatchError::OutcomeUnknown { .. })),
        "{retried:?}"
    );
    assert!(downstream.calls().is_empty());
}

#[tokio::test]
async fn a_new_handler_version_never_verifies_an_old_call_but_reruns_an_idempotent_one() {
    let before = Deploy {
        verify: true,
        ..Deploy::of(ToolClass::NonIdempotentWrite)
    };
    let after = Deploy {
        version: "2",
        ..before.clone()
    };
    let (retried, downstream, new, clock) = deployed(before, after).await;
    assert!(
        matches!(retried, Err(DispatchError::OutcomeUnknown { .. })),
        "{retried:?}"
    );
    clock.advance(Duration::from_secs(3600));
    let again = new.dispatch(&call(), &run()).await.unwrap_err();
    assert!(
        again
            .to_string()
            .contains("handler version \"1\", now \"2\""),
        "{again}"
    );
    assert_eq!(
        only(&new.recover(&RecoveryOptions::default()).await.unwrap()),
        &RecoveryAction::Reported(Unrecoverable::VersionChanged {
            recorded: "1".into(),
            current: "2".into()
        })
    );
    assert_eq!(
        downstream.verifies.load(Ordering::SeqCst),
        0,
        "the new hook was never asked"
    );
    assert!(downstream.calls().is_empty());

    // An idempotent write under a new version: taken over, same downstream key.
    let before = Deploy::of(ToolClass::IdempotentWrite);
    let after = Deploy {
        version: "2",
        ..before.clone()
    };
    let (retried, downstream, _, _) = deployed(before, after).await;
    let done = retried.unwrap();
    assert!(!done.deduplicated);
    assert_eq!(downstream.calls(), vec![done.key.unwrap().to_string()]);
}

#[tokio::test]
async fn a_take_over_keeps_the_longer_ttl() {
    let before = Deploy::of(ToolClass::IdempotentWrite);
    let after = Deploy {
        ttl: Duration::from_secs(60),
        ..before.clone()
    };
    let (retried, _, new, clock) = deployed(before, after).await;
    retried.unwrap();
    let key = new.record_key(&call(), &run()).unwrap().unwrap();
    let record = new.store().get(&key).await.unwrap().unwrap();
    let now = new.store().now().await.unwrap();
    match record.state {
        RecordState::Completed { expires_at, .. } => {
            assert_eq!(
                expires_at,
                now.plus(Duration::from_secs(3600)),
                "the made-under TTL"
            )
        }
        other => panic!("{other:?}"),
    }
    clock.advance(Duration::from_secs(120));
    assert!(
        new.dispatch(&call(), &run()).await.unwrap().deduplicated,
        "still replayed"
    );
}

#[tokio::test]
async fn a_shorter_lease_does_not_make_a_live_holder_look_dead() {
    let (clock, store, downstream) = setup();
    let old = Deploy {
        lease: Duration::from_secs(60),
        ..Deploy::of(ToolClass::IdempotentWrite)
    }
    .dispatcher(&downstream, store.clone());
    died_holding(&old, &call()).await;
    clock.advance(Duration::from_secs(5));
    let new = Deploy {
        lease: Duration::from_secs(1),
        ..Deploy::of(ToolClass::IdempotentWrite)
    };
    let new = Dispatcher::clone(&new.dispatcher(&downstream, store));
    assert!(
        new.recover(&RecoveryOptions::default())
            .await
            .unwrap()
            .records
            .is_empty()
    );
    assert!(
        downstream.calls().is_empty(),
        "the holder's own lease still runs"
    );
}

#[tokio::test]
async fn natural_key_and_verify_changes_leave_the_take_over_as_it_was() {
    // A verify hook added under the same version settles an old Unknown record.
    let before = Deploy::of(ToolClass::NonIdempotentWrite);
    let after = Deploy {
        verify: true,
        ..before.clone()
    };
    let (retried, downstream, new, clock) = deployed(before, after).await;
    assert!(matches!(retried, Err(DispatchError::OutcomeUnknown { .. })));
    clock.advance(Duration::from_secs(3600));
    let settled = new.recover(&RecoveryOptions::default()).await.unwrap();
    assert_eq!(only(&settled), &RecoveryAction::Verified { applied: false });
    assert_eq!(downstream.verifies.load(Ordering::SeqCst), 1);
    // Released: the next call runs it.
    let ran = new.dispatch(&call(), &run()).await.unwrap();
    assert!(!ran.deduplicated);
    assert_eq!(downstream.calls().len(), 1);
}

#[tokio::test]
async fn a_completed_record_replays_under_any_later_contract() {
    let (_, store, downstream) = setup();
    let old = Deploy::of(ToolClass::NonIdempotentWrite).dispatcher(&downstream, store.clone());
    let first = old.dispatch(&call(), &run()).await.unwrap();
    let new = Deploy {
        version: "9",
        ttl: Duration::from_secs(5),
        verify: true,
        ..Deploy::of(ToolClass::IdempotentWrite)
    }
    .dispatcher(&downstream, store);
    let replay = new.dispatch(&call(), &run()).await.unwrap();
    assert!(replay.deduplicated);
    assert_eq!(replay.output, first.output);
    assert_eq!(downstream.calls().len(), 1);
}

#[tokio::test]
async fn a_natural_key_added_by_a_deploy_changes_no_rule() {
    // The record key names the call (an explicit key wins over a natural one), so a deploy
    // that adds a natural key takes an idempotent orphan over as before: run once more,
    // with the same downstream key.
    let before = Deploy::of(ToolClass::IdempotentWrite);
    let after = Deploy {
        natural: true,
        ..before.clone()
    };
    let (retried, downstream, new, _) = deployed(before, after).await;
    let done = retried.unwrap();
    assert!(!done.deduplicated);
    let key = new.record_key(&call(), &run()).unwrap().unwrap();
    assert_eq!(done.key, idem::IdempotencyKey::of_record(&key));
    assert_eq!(downstream.calls(), vec![done.key.unwrap().to_string()]);
}

#[tokio::test]
async fn an_unknown_write_that_cannot_run_again_is_reported_and_kept() {
    // An idempotent write left Unknown, whose stored arguments hold a seal: recovery must not
    // release it (it could not run it again), only report it.
    let (clock, store, downstream) = setup();
    let deploy = Deploy {
        secret: true,
        ..Deploy::of(ToolClass::IdempotentWrite)
    };
    let d = deploy.dispatcher(&downstream, store.clone());
    let dead = ToolCall::new("charge", json!({"cents": 2, "card": "4242"})).with_key("o-9");
    let key = died_holding(&d, &dead).await;
    let fence = store.get(&key).await.unwrap().unwrap().fence;
    store
        .mark_unknown(&key, fence, "timed out after sending")
        .await
        .unwrap();
    clock.advance(Duration::from_secs(3600));
    assert_eq!(
        only(&d.recover(&RecoveryOptions::default()).await.unwrap()),
        &RecoveryAction::Reported(Unrecoverable::ArgumentsSealed)
    );
    let kept = store.get(&key).await.unwrap().expect("the record is kept");
    assert!(
        matches!(kept.state, RecordState::Unknown { .. }),
        "{:?}",
        kept.state
    );
    assert!(downstream.calls().is_empty());
}

#[tokio::test]
async fn a_shorter_lease_does_not_shorten_the_settle_delay_of_an_old_record() {
    // Made with a ten-minute lease, met by a deploy with a ten-second one: the hook waits for
    // the old lease, which a holder granted it may still be using.
    let before = Deploy {
        verify: true,
        lease: Duration::from_secs(600),
        ..Deploy::of(ToolClass::NonIdempotentWrite)
    };
    let after = Deploy {
        lease: Duration::from_secs(10),
        ..before.clone()
    };
    let (retried, downstream, new, clock) = deployed(before, after).await;
    match retried {
        Err(DispatchError::OutcomeUnknown {
            since, retry_after, ..
        }) => {
            assert_eq!(retry_after, Some(since.plus(Duration::from_secs(600))))
        }
        other => panic!("{other:?}"),
    }
    clock.advance(Duration::from_secs(61));
    assert!(
        matches!(
            only(&new.recover(&RecoveryOptions::default()).await.unwrap()),
            RecoveryAction::Reported(Unrecoverable::NotYet { .. })
        ),
        "verified before the old lease ran out"
    );
    assert_eq!(downstream.verifies.load(Ordering::SeqCst), 0);
    clock.advance(Duration::from_secs(600));
    assert_eq!(
        only(&new.recover(&RecoveryOptions::default()).await.unwrap()),
        &RecoveryAction::Verified { applied: false }
    );
}

/// Holds the first two recovery workers at the write that settles the orphan, until both got
/// there: both read the record before either acted.
#[derive(Debug)]
struct BothBeforeActing {
    key: RecordKey,
    arrived: AtomicUsize,
    barrier: tokio::sync::Barrier,
}

#[async_trait::async_trait]
impl support::hooked_store::Hook for BothBeforeActing {
    async fn before(
        &self,
        op: support::hooked_store::Op,
        key: Option<&RecordKey>,
    ) -> Result<(), idem::store::StoreError> {
        use support::hooked_store::Op;
        let settling = matches!(op, Op::Claim | Op::MarkUnknown) && key == Some(&self.key);
        if settling && self.arrived.fetch_add(1, Ordering::SeqCst) < 2 {
            self.barrier.wait().await;
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_recoverers_only_the_one_that_turned_an_orphan_unknown_says_so() {
    let (clock, store, downstream) = setup();
    let deploy = Deploy::of(ToolClass::NonIdempotentWrite);
    let key = died_holding(&deploy.dispatcher(&downstream, store.clone()), &call()).await;
    clock.advance(Duration::from_secs(11));
    let hooked: Arc<dyn Store> = Arc::new(support::hooked_store::Hooked::new(
        store,
        BothBeforeActing {
            key: key.clone(),
            arrived: AtomicUsize::new(0),
            barrier: tokio::sync::Barrier::new(2),
        },
    ));
    let d = deploy.dispatcher(&downstream, hooked);
    let pass =
        |d: Dispatcher| tokio::spawn(async move { d.recover(&RecoveryOptions::default()).await });
    let (a, b) = (pass(d.clone()), pass(d.clone()));
    let mut actions: Vec<String> = [a.await.unwrap().unwrap(), b.await.unwrap().unwrap()]
        .into_iter()
        .flat_map(|r| r.records)
        .map(|r| format!("{:?}", r.action))
        .collect();
    actions.sort();
    assert_eq!(
        actions,
        ["MarkedUnknown", "Raced"],
        "one turned it Unknown; the other lost the race"
    );
    assert!(downstream.calls().is_empty(), "never run again");
}
