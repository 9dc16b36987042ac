//! A body that blocks its thread cannot starve its lease: the heartbeat renews it from a
//! thread of its own, so a concurrent retry waits for the outcome instead of finding an orphan that
//! a verify hook would then release to run a second time.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem::prelude::*;
use idem::{MemoryStore, ToolDef, ToolPolicy, Verified};
use serde_json::{Value, json};
use support::dispatcher::with_tool;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_body_keeps_its_lease_and_runs_once() {
    let effects = Arc::new(AtomicUsize::new(0));
    let (body, check) = (effects.clone(), effects.clone());
    let policy = ToolPolicy {
        lease: Duration::from_millis(200),
        // As short as the rule allows (one lease), so that a starved lease would be verified
        // and released while the body still blocks.
        verify_after: Duration::ZERO,
        wait: Duration::from_secs(10),
        ..ToolPolicy::default()
    };
    let tool = ToolDef::builder("charge", ToolClass::NonIdempotentWrite)
        .description("Charge a card.")
        .input_schema(json!({"type": "object"}))
        .policy(policy)
        .handler(move |_ctx: ToolContext, _args: Value| {
            let effects = body.clone();
            async move {
                // Synchronous work that never yields: a blocking SDK call.
                std::thread::sleep(Duration::from_millis(1200));
                effects.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>(json!({"charged": true}))
            }
        })
        .verify(move |_ctx: ToolContext, _args: Value| {
            let effects = check.clone();
            async move {
                Ok(if effects.load(Ordering::SeqCst) > 0 {
                    Verified::Applied(json!({"charged": true}))
                } else {
                    Verified::NotApplied
                })
            }
        })
        .build()
        .unwrap();
    let d = with_tool(tool, Arc::new(MemoryStore::new()));
    let call = ToolCall::new("charge", json!({})).with_call_id("c1");
    let run = RunContext::new("t");

    let first = {
        let (d, call, run) = (d.clone(), call.clone(), run.clone());
        tokio::spawn(async move { d.dispatch(&call, &run).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A retry while the body blocks; it keeps calling while told the outcome is unknown, as
    // an agent honouring `retry_after` would.
    let retry = loop {
        match d.dispatch(&call, &run).await {
            Err(DispatchError::OutcomeUnknown { .. }) => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            other => break other,
        }
    };
    let first = first.await.unwrap();
    assert_eq!(effects.load(Ordering::SeqCst), 1, "{first:?} / {retry:?}");
    assert!(first.is_ok(), "{first:?}");
    assert!(retry.unwrap().deduplicated);
}
