//! Approval by argument: a refund above the run's limit is held for a person, pending in the
//! store as an irreversible call's would be, decided at the approvals desk (what `idem
//! approvals` and the inbox decide through), and then runs once; a refund within the limit
//! runs without asking.

use std::sync::Arc;

use idem::prelude::*;
use serde::Deserialize;
use serde_json::json;

use crate::authorize::shop;
use crate::on_stores;
use crate::support::dispatcher::approver;
use crate::world::{fresh_tenant, world};

#[derive(Deserialize)]
struct Transfer {
    cents: u64,
}

/// Transfers of more than 100.00 need a person.
fn large(args: &Transfer, _run: &RunContext) -> bool {
    args.cents > 10_000
}

/// Move money between the customer's own accounts.
#[tool(class = "non_idempotent_write", approve_when = large)]
async fn transfer(ctx: &ToolContext, cents: u64) -> Result<u64, ToolError> {
    world(ctx.tenant()).apply(&format!("transfer {cents}"), ctx.downstream_key().as_str());
    Ok(cents)
}

async fn a_refund_over_the_limit_waits_for_a_person_and_runs_once(store: Arc<dyn idem::Store>) {
    let tenant = fresh_tenant("approve_when");
    let d = shop(store.clone());
    let run = RunContext::new(tenant.as_str())
        .with_run("run-refunds", 1)
        .acting_for("cus_a")
        .with_limit("refund", 50);

    // Within the limit: no person asked.
    let small = ToolCall::new(
        "refund",
        json!({"customer_id": "cus_a", "order_id": "ord_1", "amount": 5}),
    )
    .with_call_id("call_small");
    d.dispatch(&small, &run).await.expect("a small refund runs");
    assert_eq!(world(&tenant).effects("refund").len(), 1);

    // Over it: held, pending in the store, nothing applied.
    let large_refund = ToolCall::new(
        "refund",
        json!({"customer_id": "cus_a", "order_id": "ord_2", "amount": 5000}),
    )
    .with_call_id("call_large");
    let Err(DispatchError::ApprovalRequired { request }) = d.dispatch(&large_refund, &run).await
    else {
        panic!("a refund over the limit must wait for a person");
    };
    assert_eq!(request.tool, "refund");
    assert_eq!(request.arguments["amount"], json!(5000));
    assert_eq!(world(&tenant).effects("refund").len(), 1, "not applied");
    let pending = d
        .approvals()
        .pending(&idem::store::approvals::ApprovalFilter {
            tenant: Some(tenant.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].tool, "refund");

    // A person approves it; the agent's next dispatch runs it, once.
    d.approvals()
        .approve(&pending[0].key, &approver(), None, None)
        .await
        .expect("approve");
    let done = d.dispatch(&large_refund, &run).await.expect("approved");
    assert!(!done.deduplicated);
    assert_eq!(done.output, json!({"refunded": 5000}));
    let again = d.dispatch(&large_refund, &run).await.expect("replayed");
    assert!(again.deduplicated);
    assert_eq!(world(&tenant).effects("refund 5000").len(), 1, "run once");

    // A run whose limit is larger lets the same amount through without a person.
    let generous = run.clone().with_limit("refund", 10_000).at_step(2);
    let other = ToolCall::new(
        "refund",
        json!({"customer_id": "cus_a", "order_id": "ord_3", "amount": 5000}),
    )
    .with_call_id("call_other");
    d.dispatch(&other, &generous)
        .await
        .expect("within this run's limit");

    // The macro's form: a function of the typed arguments.
    let big = ToolCall::new("transfer", json!({"cents": 20_000})).with_call_id("call_t1");
    assert!(matches!(
        d.dispatch(&big, &run).await,
        Err(DispatchError::ApprovalRequired { .. })
    ));
    let small = ToolCall::new("transfer", json!({"cents": 2_000})).with_call_id("call_t2");
    assert_eq!(d.dispatch(&small, &run).await.unwrap().output, json!(2000));
    assert_eq!(world(&tenant).effects("transfer").len(), 1);
}

on_stores!(a_refund_over_the_limit_waits_for_a_person_and_runs_once =>
    sqlite_a_refund_over_the_limit_waits_for_a_person_and_runs_once,
    postgres_a_refund_over_the_limit_waits_for_a_person_and_runs_once);

#[test]
fn a_dispatcher_without_approval_keys_refuses_a_tool_that_may_ask() {
    let registry = Registry::builder()
        .add(crate::authorize::refund_tool())
        .build()
        .unwrap();
    let err = Dispatcher::new(registry, Arc::new(MemoryStore::new())).unwrap_err();
    assert!(
        err.to_string()
            .contains("`refund` has calls that need approval"),
        "{err}"
    );
}
