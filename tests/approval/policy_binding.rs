//! Approvals bound to the policy they were made under: a request or an approval of a tool
//! whose class, handler version or controls changed since is refused naming the change and
//! asked again under the policy the tool has now; a denial stays final, across a restart.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use idem::approval::DecisionError;
use idem::prelude::*;
use idem::store::approvals::{ApprovalFilter, PendingApproval};
use idem::{Store, approval::ApprovalDesk, approval::ApprovalKeys, approval::ApprovalRefusal};
use serde_json::json;
use support::dispatcher::{approval_key, approver};

/// An agent whose irreversible `refund` is at handler `version`, counting its executions.
fn agent(store: Arc<dyn Store>, version: &str, runs: &Arc<AtomicUsize>) -> Dispatcher {
    let registry = crate::pending_approvals::registry_at(runs, version);
    Dispatcher::approving(registry, store, ApprovalKeys::new([approval_key()])).unwrap()
}

fn refund() -> ToolCall {
    ToolCall::new("refund", json!({"payment": "pay_9", "cents": 9000})).with_call_id("call-9")
}

async fn pending(store: &dyn Store) -> Vec<PendingApproval> {
    ApprovalDesk::over(store)
        .pending(&ApprovalFilter::default())
        .await
        .unwrap()
}

#[tokio::test]
async fn an_approval_under_another_policy_is_refused_naming_the_change_and_asked_again() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let run = RunContext::new("acme");
    let before = agent(store.clone(), "1", &runs);
    let err = before.dispatch(&refund(), &run).await.unwrap_err();
    assert!(
        matches!(err, DispatchError::ApprovalRequired { .. }),
        "{err:?}"
    );
    let asked = pending(&*store).await.remove(0);
    assert_eq!(asked.policy.as_ref().map(|p| p.version.as_str()), Some("1"));
    // An operator approves it from the command line (a store alone, no tools).
    ApprovalDesk::over(&*store)
        .approve(&asked.key, &approver(), None, None)
        .await
        .unwrap();

    // A deploy changes the handler before the agent calls again.
    let after = agent(store.clone(), "2", &runs);
    match after.dispatch(&refund(), &run).await {
        Err(DispatchError::ApprovalRefused {
            refusal: ApprovalRefusal::PolicyChanged { change },
            ..
        }) => assert_eq!(change, "handler version `1` became `2`"),
        other => panic!("expected ApprovalRefused (PolicyChanged), got {other:?}"),
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "nothing ran on the old approval"
    );
    // Asked again, under the policy the tool has now, for a person to decide.
    let again = pending(&*store).await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].decision, None);
    assert_eq!(
        again[0].policy.as_ref().map(|p| p.version.as_str()),
        Some("2")
    );
    assert!(matches!(
        after.dispatch(&refund(), &run).await,
        Err(DispatchError::ApprovalRequired { .. })
    ));

    ApprovalDesk::over(&*store)
        .approve(&again[0].key, &approver(), None, None)
        .await
        .unwrap();
    after.dispatch(&refund(), &run).await.unwrap();
    let replayed = after.dispatch(&refund(), &run).await.unwrap();
    assert!(replayed.deduplicated);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "approved under the new policy: once"
    );
}

#[tokio::test]
async fn a_desk_with_the_tools_will_not_approve_a_request_of_another_policy() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let run = RunContext::new("acme");
    let before = agent(store.clone(), "1", &runs);
    assert!(before.dispatch(&refund(), &run).await.is_err());
    let key = pending(&*store).await.remove(0).key;
    let operator = agent(store.clone(), "2", &runs);
    match operator
        .approvals()
        .approve(&key, &approver(), None, None)
        .await
    {
        Err(e @ DecisionError::PolicyChanged { .. }) => {
            assert!(
                e.to_string().contains("handler version `1` became `2`"),
                "{e}"
            );
        }
        other => panic!("expected PolicyChanged, got {other:?}"),
    }
    assert_eq!(
        pending(&*store).await[0].decision,
        None,
        "nothing was approved"
    );
}

#[tokio::test]
async fn a_denial_stays_final_across_a_policy_change_and_a_restart() {
    let dir = std::env::temp_dir().join(support::services::unique("idem_policy_denial"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("records.db");
    let runs = Arc::new(AtomicUsize::new(0));
    let run = RunContext::new("acme");
    {
        let store: Arc<dyn Store> = Arc::new(idem::SqliteStore::open(&path).unwrap());
        let before = agent(store.clone(), "1", &runs);
        assert!(before.dispatch(&refund(), &run).await.is_err());
        let key = pending(&*store).await.remove(0).key;
        ApprovalDesk::over(&*store)
            .deny(&key, "dana@desk", "the customer was refunded by hand", None)
            .await
            .unwrap();
    }
    // The process restarts, with a new handler.
    let store: Arc<dyn Store> = Arc::new(idem::SqliteStore::open(&path).unwrap());
    let after = agent(store.clone(), "2", &runs);
    for _ in 0..2 {
        match after.dispatch(&refund(), &run).await {
            Err(DispatchError::ApprovalDenied { by, reason, .. }) => {
                assert_eq!(
                    (by.as_str(), reason.as_str()),
                    ("dana@desk", "the customer was refunded by hand")
                );
            }
            other => panic!("expected ApprovalDenied, got {other:?}"),
        }
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert!(pending(&*store).await.is_empty(), "not asked again");
    drop((after, store));
    let _ = std::fs::remove_dir_all(&dir);
}
