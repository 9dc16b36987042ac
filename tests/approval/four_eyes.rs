//! Four eyes: a tool (or a rule) that needs N distinct approvers runs a call after the Nth;
//! one person never counts twice, whatever door or spelling; a run carrying one approval of
//! two does not run it; the store's word for who approved is not believed.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use idem::approval::{ApprovalDesk, ApprovalKeys, ApprovalRefusal, DecisionError};
use idem::prelude::*;
use idem::store::approvals::{ApprovalFilter, DecisionRefused, PendingApproval};
use idem::tool::ToolDef;
use idem::{Approver, Store};
use serde_json::{Value, json};
use support::dispatcher::approval_key;

/// A wire that needs two approvers for every call, and a refund that needs one above 50
/// and two above 5000, counting their executions.
fn agent(store: Arc<dyn Store>, runs: &Arc<AtomicUsize>) -> Dispatcher {
    let counted = |runs: &Arc<AtomicUsize>| {
        let runs = runs.clone();
        move |_: ToolContext, args: Value| {
            let runs = runs.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>(args)
            }
        }
    };
    let schema = json!({"type": "object", "properties": {"cents": {"type": "integer"}}});
    let wire = ToolDef::builder("wire", ToolClass::Irreversible)
        .description("Wire money.")
        .input_schema(schema.clone())
        .approvers(2)
        .handler(counted(runs))
        .build()
        .unwrap();
    let refund = ToolDef::builder("refund", ToolClass::NonIdempotentWrite)
        .description("Refund.")
        .input_schema(schema)
        .approve_when(|args: &Value, _: &RunContext| args["cents"].as_u64() > Some(50))
        .approvers_rule(
            2,
            serde_json::from_value(json!({"pointer": "/cents", "above": 5000})).unwrap(),
        )
        .handler(counted(runs))
        .build()
        .unwrap();
    let registry = Registry::builder().add(wire).add(refund).build().unwrap();
    Dispatcher::approving(registry, store, ApprovalKeys::new([approval_key()])).unwrap()
}

fn person(who: &str) -> Approver {
    Approver::new(who, approval_key())
}

async fn pending(store: &dyn Store) -> Vec<PendingApproval> {
    ApprovalDesk::over(store)
        .pending(&ApprovalFilter::default())
        .await
        .unwrap()
}

fn wire(cents: u64) -> ToolCall {
    ToolCall::new("wire", json!({"cents": cents})).with_call_id(format!("w-{cents}"))
}

#[tokio::test]
async fn the_call_runs_after_the_second_distinct_approver_and_one_person_never_counts_twice() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = agent(store.clone(), &runs);
    let run = RunContext::new("bank");
    assert!(matches!(
        agent.dispatch(&wire(700), &run).await,
        Err(DispatchError::ApprovalRequired { .. })
    ));
    let asked = pending(&*store).await.remove(0);
    assert_eq!((asked.approvers, asked.awaiting()), (2, 2));

    // Dana approves at the inbox: one of two, the call still waits.
    let first = ApprovalDesk::over(&*store)
        .through("inbox")
        .approve(&asked, &person("dana@desk"), None, None)
        .await
        .unwrap();
    assert_eq!(first.awaiting(), 1);
    assert!(matches!(
        agent.dispatch(&wire(700), &run).await,
        Err(DispatchError::ApprovalRequired { .. })
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    // Dana again, at the command line and spelled otherwise: the same person, refused.
    let again = ApprovalDesk::over(&*store)
        .through("cli")
        .approve(&asked.key, &person("Dana@Desk"), None, None)
        .await;
    assert!(
        matches!(
            again,
            Err(DecisionError::Refused(DecisionRefused::ApprovedAlready {
                approvers: 2,
                ..
            }))
        ),
        "{again:?}"
    );
    // An edit is refused: both approve the call as made.
    let edited = ApprovalDesk::over(&*store)
        .approve(
            &asked.key,
            &person("lee@desk"),
            Some(&json!({"cents": 1})),
            None,
        )
        .await;
    assert!(
        matches!(
            edited,
            Err(DecisionError::Refused(
                DecisionRefused::EditNeedsOneApprover { .. }
            ))
        ),
        "{edited:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    // Lee approves: the second distinct person; the call runs once.
    let decided = ApprovalDesk::over(&*store)
        .through("cli")
        .approve(&asked.key, &person("lee@desk"), None, None)
        .await
        .unwrap();
    assert_eq!(decided.awaiting(), 0);
    let who: Vec<_> = decided.approved_by.iter().map(|g| g.by.as_str()).collect();
    assert_eq!(who, ["dana@desk", "lee@desk"]);
    agent.dispatch(&wire(700), &run).await.unwrap();
    assert!(agent.dispatch(&wire(700), &run).await.unwrap().deduplicated);
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // The decision log has both, each through its door.
    let log = idem::store::decisions::read(&*store, 1, 100).await.unwrap();
    let doors: Vec<_> = log
        .iter()
        .map(|e| (e.decision.by.as_str(), e.decision.door.as_str()))
        .collect();
    assert_eq!(doors, [("dana@desk", "inbox"), ("lee@desk", "cli")]);
}

#[tokio::test]
async fn the_stores_word_for_who_approved_is_not_believed() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = agent(store.clone(), &runs);
    let run = RunContext::new("bank");
    assert!(agent.dispatch(&wire(900), &run).await.is_err());
    let asked = pending(&*store).await.remove(0);
    let first = ApprovalDesk::over(&*store)
        .approve(&asked, &person("dana@desk"), None, None)
        .await
        .unwrap();
    // Someone who can write to the store (and holds no approval key) copies Dana's approval
    // as a second person's and marks the call decided.
    let mut forged = first.clone();
    let mut twin = forged.approved_by[0].clone();
    twin.by = "mallory@desk".into();
    forged.approved_by.push(twin);
    let copy = first.approved_by[0].approval.clone();
    forged.decision = Some(idem::store::approvals::ApprovalDecision {
        by: "mallory@desk".into(),
        at: first.requested_at,
        verdict: idem::store::approvals::Verdict::Approved {
            approval: copy,
            arguments: first.arguments.clone(),
            fingerprint: first.fingerprint,
        },
    });
    let old = serde_json::to_string(&first).unwrap();
    let new = serde_json::to_string(&forged).unwrap();
    assert!(
        store
            .swap_approval(&first.key, Some(&old), &forged, &new)
            .await
            .unwrap()
    );
    match agent.dispatch(&wire(900), &run).await {
        Err(DispatchError::ApprovalRefused {
            refusal: ApprovalRefusal::TooFewApprovers { needed: 2, got: 1 },
            ..
        }) => {}
        other => panic!("expected TooFewApprovers, got {other:?}"),
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_run_carrying_one_approval_of_two_does_not_run_the_call() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = agent(store.clone(), &runs);
    let Err(DispatchError::ApprovalRequired { request }) =
        agent.dispatch(&wire(300), &RunContext::new("bank")).await
    else {
        panic!("expected ApprovalRequired");
    };
    let ttl = std::time::Duration::from_secs(600);
    let dana = person("dana@desk").approve_for(&request, ttl);
    let dana_twice = person("DANA@desk").approve_for(&request, ttl);
    let one = RunContext::new("bank").approve(dana.clone());
    let same = one.clone().approve(dana_twice);
    for run in [&one, &same] {
        match agent.dispatch(&wire(300), run).await {
            Err(DispatchError::ApprovalRefused {
                refusal: ApprovalRefusal::TooFewApprovers { needed: 2, got: 1 },
                ..
            }) => {}
            other => panic!("expected TooFewApprovers, got {other:?}"),
        }
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let two = one.approve(person("lee@desk").approve_for(&request, ttl));
    agent.dispatch(&wire(300), &two).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_rule_asks_two_approvers_only_for_the_calls_it_selects() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = agent(store.clone(), &runs);
    let run = RunContext::new("shop");
    let small = ToolCall::new("refund", json!({"cents": 20})).with_call_id("r-1");
    let large = ToolCall::new("refund", json!({"cents": 90})).with_call_id("r-2");
    let huge = ToolCall::new("refund", json!({"cents": 9000})).with_call_id("r-3");
    agent.dispatch(&small, &run).await.unwrap();
    for call in [&large, &huge] {
        assert!(matches!(
            agent.dispatch(call, &run).await,
            Err(DispatchError::ApprovalRequired { .. })
        ));
    }
    let mut asked = pending(&*store).await;
    asked.sort_by_key(|e| e.arguments["cents"].as_u64());
    assert_eq!(
        asked.iter().map(|e| e.approvers).collect::<Vec<_>>(),
        [1, 2]
    );
    for entry in &asked {
        ApprovalDesk::over(&*store)
            .approve(entry, &person("dana@desk"), None, None)
            .await
            .unwrap();
    }
    agent.dispatch(&large, &run).await.unwrap();
    assert!(matches!(
        agent.dispatch(&huge, &run).await,
        Err(DispatchError::ApprovalRequired { .. })
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 2, "the small and the large");
    let policy = agent.registry().get("refund").unwrap().approval_policy();
    assert!(
        policy
            .controls
            .iter()
            .any(|c| c.starts_with("approvers_when: 2 if") && c.contains("/cents")),
        "{:?}",
        policy.controls
    );
}

#[test]
fn approvers_out_of_range_or_without_effect_are_refused_at_build() {
    let build = |class, n: u8, rule: bool| {
        let mut b = ToolDef::builder("t", class)
            .description("d")
            .input_schema(json!({"type": "object", "properties": {}}))
            .approvers(n)
            .handler(|_: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) });
        if rule {
            b = b.approvers_when(1, |_: &Value, _: &RunContext| true);
        }
        b.build().err().map(|e| e.to_string())
    };
    let zero = build(ToolClass::Irreversible, 0, false).unwrap();
    assert!(zero.contains("`approvers` is 0"), "{zero}");
    let idle = build(ToolClass::NonIdempotentWrite, 2, false).unwrap();
    assert!(idle.contains("has no effect"), "{idle}");
    let one = build(ToolClass::Irreversible, 1, true).unwrap();
    assert!(one.contains("asks for 1 approvers"), "{one}");
    let read = build(ToolClass::Read, 2, false).unwrap();
    assert!(
        read.contains("`approvers` has no effect on a `read` tool"),
        "{read}"
    );
    assert_eq!(build(ToolClass::Irreversible, 2, false), None);
}

#[tokio::test]
async fn a_standing_grant_never_stands_for_two_approvers() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = agent(store.clone(), &runs);
    let run = RunContext::new("shop");
    let small = ToolCall::new("refund", json!({"cents": 90})).with_call_id("g-1");
    let huge = ToolCall::new("refund", json!({"cents": 9000})).with_call_id("g-2");
    assert!(
        agent.dispatch(&small, &run).await.is_err(),
        "asks: the policy is now known"
    );
    // Granted from the command line (a desk without the tools): every refund of the tenant.
    let terms =
        idem::approval::GrantTerms::new("shop", "refund", std::time::Duration::from_secs(600));
    ApprovalDesk::over(&*store)
        .grant(&terms, &person("dana@desk"))
        .await
        .unwrap();
    agent.dispatch(&small, &run).await.unwrap();
    assert!(matches!(
        agent.dispatch(&huge, &run).await,
        Err(DispatchError::ApprovalRequired { .. })
    ));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the grant let the small one through only"
    );
}

#[tokio::test]
async fn an_edit_that_needs_more_approvers_is_asked_again_of_them() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = agent(store.clone(), &runs);
    let run = RunContext::new("shop");
    let asked = ToolCall::new("refund", json!({"cents": 90})).with_call_id("e-1");
    let edited = ToolCall::new("refund", json!({"cents": 9000})).with_call_id("e-1");
    assert!(matches!(
        agent.dispatch(&asked, &run).await,
        Err(DispatchError::ApprovalRequired { .. })
    ));
    let entry = pending(&*store).await.remove(0);
    assert_eq!(entry.approvers, 1);
    // An operator without the tools edits the refund up into the range two must approve.
    ApprovalDesk::over(&*store)
        .approve(
            &entry,
            &person("dana@desk"),
            Some(&json!({"cents": 9000})),
            None,
        )
        .await
        .unwrap();
    assert!(matches!(
        agent.dispatch(&asked, &run).await,
        Err(DispatchError::ApprovalEdited { .. })
    ));
    // Called with the edit, it is asked again, of two people.
    match agent.dispatch(&edited, &run).await {
        Err(DispatchError::ApprovalRefused {
            refusal: ApprovalRefusal::TooFewApprovers { needed: 2, got: 0 },
            ..
        }) => {}
        other => panic!("expected TooFewApprovers, got {other:?}"),
    }
    let again = pending(&*store).await;
    assert_eq!(again.len(), 1, "asked again");
    assert_eq!(
        (again[0].approvers, &again[0].arguments),
        (2, &json!({"cents": 9000}))
    );
    for who in ["dana@desk", "lee@desk"] {
        ApprovalDesk::over(&*store)
            .approve(&again[0].key, &person(who), None, None)
            .await
            .unwrap();
    }
    agent.dispatch(&edited, &run).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
