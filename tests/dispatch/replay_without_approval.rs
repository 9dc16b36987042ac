//! Replaying a completed irreversible call causes no effect, so it needs no approval; any
//! call that could execute still does.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use idem::prelude::*;
use idem::{MemoryStore, ToolDef};
use serde_json::{Value, json};
use support::dispatcher::with_tool;

#[tokio::test]
async fn a_checkpoint_replay_of_a_completed_irreversible_call_replays_without_approval() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let tool = ToolDef::builder("wire_money", ToolClass::Irreversible)
        .description("Wire money.")
        .input_schema(json!({"type": "object", "properties": {"cents": {"type": "integer"}}}))
        .handler(move |_ctx: ToolContext, _args: Value| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>(json!({"wired": true}))
            }
        })
        .build()
        .unwrap();
    let d = with_tool(tool, Arc::new(MemoryStore::new()));
    let call = ToolCall::new("wire_money", json!({"cents": 100})).with_call_id("call-1");
    let plain = RunContext::new("t").with_run("run-1", 1);
    let DispatchError::ApprovalRequired { request } = d.dispatch(&call, &plain).await.unwrap_err()
    else {
        panic!("an irreversible call first needs approval")
    };
    let approved = plain.clone().approve(
        support::dispatcher::approver().approve_for(&request, std::time::Duration::from_secs(3600)),
    );
    assert!(!d.dispatch(&call, &approved).await.unwrap().deduplicated);

    // The run is replayed from a checkpoint, without its approvals.
    let replayed = d.dispatch(&call, &plain).await.unwrap();
    assert!(replayed.deduplicated);
    assert_eq!(replayed.output, json!({"wired": true}));
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // Other arguments under no record still need approval.
    let other = ToolCall::new("wire_money", json!({"cents": 999})).with_call_id("call-2");
    assert!(matches!(
        d.dispatch(&other, &plain).await,
        Err(DispatchError::ApprovalRequired { .. })
    ));
}
