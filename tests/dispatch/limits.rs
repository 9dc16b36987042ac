//! Limits: arguments too large to record are refused before anything happens; an output a
//! replay could not read back is never recorded; Unknown records do not live forever.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem::prelude::*;
use idem::{
    MemoryStore, ToolDef, record::StateKind, store::DEFAULT_UNKNOWN_RETENTION, store::ListFilter,
    store::ManualClock, store::PurgeFilter, store::StoreError,
};
use serde_json::{Value, json};

use crate::support;
use support::dispatcher::with_tool;
use support::providers::timing_out;

fn tool(class: ToolClass, runs: Arc<AtomicUsize>, output: fn() -> Value) -> ToolDef {
    ToolDef::builder("make", class)
        .description("Make something.")
        .input_schema(json!({"type": "object"}))
        .handler(move |_ctx: ToolContext, _args: Value| {
            let runs = runs.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>(output())
            }
        })
        .build()
        .unwrap()
}

fn nested(depth: usize) -> Value {
    let mut v = json!(1);
    for _ in 0..depth {
        v = json!([v]);
    }
    v
}

#[tokio::test]
async fn arguments_over_the_bound_are_refused_before_anything_is_recorded() {
    let runs = Arc::new(AtomicUsize::new(0));
    let store = Arc::new(MemoryStore::new());
    let d = with_tool(
        tool(ToolClass::IdempotentWrite, runs.clone(), || json!(1)),
        store.clone(),
    );
    let big = "x".repeat(2 * 1024 * 1024);
    let call = ToolCall::new("make", json!({"blob": big})).with_call_id("c1");
    let e = d.dispatch(&call, &RunContext::new("t")).await.unwrap_err();
    match &e {
        DispatchError::InvalidArguments { message, .. } => {
            assert!(
                message.contains("1048576") && message.contains("2097"),
                "names size and limit: {message}"
            );
        }
        other => panic!("expected InvalidArguments, got {other:?}"),
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert!(store.is_empty(), "nothing recorded");

    // The bound is configurable.
    let d = d.with_max_argument_bytes(4 * 1024 * 1024);
    assert!(d.dispatch(&call, &RunContext::new("t")).await.is_ok());
}

#[tokio::test]
async fn an_output_too_deep_to_replay_gives_an_idempotent_claim_back() {
    let runs = Arc::new(AtomicUsize::new(0));
    let store = Arc::new(MemoryStore::new());
    let d = with_tool(
        tool(ToolClass::IdempotentWrite, runs.clone(), || nested(200)),
        store.clone(),
    );
    let call = ToolCall::new("make", json!({})).with_call_id("c1");
    let run = RunContext::new("t");
    let e = d.dispatch(&call, &run).await.unwrap_err();
    assert!(
        matches!(
            &e,
            DispatchError::Store {
                error: StoreError::TooDeep { .. },
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        store.is_empty(),
        "the claim was given back: safe to run again"
    );
    // And it was never recorded as a success a replay would then fail to read.
    assert!(d.dispatch(&call, &run).await.is_err());
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_output_too_deep_to_replay_leaves_a_non_idempotent_call_unknown() {
    let runs = Arc::new(AtomicUsize::new(0));
    let store = Arc::new(MemoryStore::new());
    let d = with_tool(
        tool(ToolClass::NonIdempotentWrite, runs.clone(), || nested(200)),
        store.clone(),
    );
    let call = ToolCall::new("make", json!({})).with_call_id("c1");
    let run = RunContext::new("t");
    assert!(d.dispatch(&call, &run).await.is_err());
    let unknown = store
        .list(ListFilter {
            state: Some(StateKind::Unknown),
            ..ListFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(
        unknown.len(),
        1,
        "the effect happened: Unknown, not replayable"
    );
    assert!(matches!(
        d.dispatch(&call, &run).await,
        Err(DispatchError::OutcomeUnknown { .. })
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 1, "never run twice");
    // A shallow output of the same tool class records and replays as before.
    assert!(serde_json::from_str::<Value>(&nested(120).to_string()).is_ok());
}

#[tokio::test]
async fn unknown_records_are_purged_after_their_retention() {
    let clock = Arc::new(ManualClock::new());
    let store = Arc::new(MemoryStore::new().with_clock(clock.clone()));
    let d = with_tool(timing_out("make"), store.clone());
    for (tenant, id) in [("a", "c1"), ("b", "c2")] {
        let call = ToolCall::new("make", json!({})).with_call_id(id);
        assert!(d.dispatch(&call, &RunContext::new(tenant)).await.is_err());
    }
    assert_eq!(store.len(), 2);
    assert_eq!(
        store.purge_expired(&PurgeFilter::up_to(100)).await.unwrap(),
        0
    );
    clock.advance(DEFAULT_UNKNOWN_RETENTION + Duration::from_secs(1));
    // Scoped by tenant: only a's goes.
    let only_a = PurgeFilter {
        tenant: Some("a".into()),
        ..PurgeFilter::up_to(100)
    };
    assert_eq!(store.purge_expired(&only_a).await.unwrap(), 1);
    let left = store.list(ListFilter::default()).await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].tenant, "b", "records carry their tenant");
    assert_eq!(
        store.purge_expired(&PurgeFilter::up_to(100)).await.unwrap(),
        1
    );
    assert!(store.is_empty());
}
