//! Keys: a call id is scoped by its run, and a natural key from a `ToolSpec` is the same for
//! every Unicode spelling of the same text.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use idem::prelude::*;
use idem::{MemoryStore, ToolDef, ToolSpec};
use serde_json::{Value, json};
use support::dispatcher::with_tool;

fn counting(name: &str, runs: Arc<AtomicUsize>) -> ToolDef {
    ToolDef::builder(name.to_owned(), ToolClass::NonIdempotentWrite)
        .description("Send a message.")
        .input_schema(json!({"type": "object", "properties": {"to": {"type": "string"}}}))
        .handler(move |_ctx: ToolContext, args: Value| {
            let runs = runs.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>(args)
            }
        })
        .build()
        .unwrap()
}

#[tokio::test]
async fn two_runs_numbering_their_calls_alike_do_not_share_records() {
    // Local models and several OpenAI-compatible servers number calls call_0, call_1 in every
    // response: run B's call_0 is a new request, not a replay of run A's.
    let runs = Arc::new(AtomicUsize::new(0));
    let d = with_tool(
        counting("send_mail", runs.clone()),
        Arc::new(MemoryStore::new()),
    );
    let call = ToolCall::new("send_mail", json!({"to": "a@example.com"})).with_call_id("call_0");
    let run_a = RunContext::new("t").with_run("run-a", 1);
    let run_b = RunContext::new("t").with_run("run-b", 1);
    let a = d.dispatch(&call, &run_a).await.unwrap();
    let b = d.dispatch(&call, &run_b).await.unwrap();
    assert!(!a.deduplicated && !b.deduplicated, "two runs, two requests");
    assert_ne!(a.key, b.key, "each run hands its own key downstream");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    // Within one run the call id still dedupes, at any step.
    let again = d.dispatch(&call, &run_a.clone().at_step(2)).await.unwrap();
    assert!(again.deduplicated);
    assert_eq!(again.key, a.key);
}

#[tokio::test]
async fn a_natural_key_is_the_same_in_nfc_and_nfd() {
    let runs = Arc::new(AtomicUsize::new(0));
    let spec: ToolSpec = serde_json::from_value(json!({
        "name": "open_ticket",
        "class": "idempotent_write",
        "description": "Open a ticket for a customer, or find the open one.",
        "input_schema": {"type": "object", "properties": {"customer": {"type": "string"}}},
        "natural_key": ["/customer"]
    }))
    .unwrap();
    let counter = runs.clone();
    let def = spec
        .into_def(move |_ctx, args| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok(args)
            }
        })
        .unwrap();
    let d = with_tool(def, Arc::new(MemoryStore::new()));
    let run = RunContext::new("t");
    // "José" precomposed (U+00E9) and decomposed (e + U+0301).
    let nfc = ToolCall::new("open_ticket", json!({"customer": "Jos\u{e9}"})).with_call_id("c1");
    let nfd = ToolCall::new("open_ticket", json!({"customer": "Jose\u{301}"})).with_call_id("c2");
    let first = d.dispatch(&nfc, &run).await.unwrap();
    let second = d.dispatch(&nfd, &run).await;
    // One ticket: the second spelling finds the first's record (the arguments differ in
    // their bytes, so the default policy refuses the reuse rather than replaying).
    assert_eq!(runs.load(Ordering::SeqCst), 1, "{second:?}");
    assert_eq!(
        d.record_key(&nfc, &run).unwrap(),
        d.record_key(&nfd, &run).unwrap()
    );
    assert!(!first.deduplicated);
}
