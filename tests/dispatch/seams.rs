//! The dispatcher's seams, each used as a capability would use it: an observer of dispatch
//! events, and a wrapper around the body's execution (ARCHITECTURE.md, "Seams"). The store
//! layers have their own test next to the layers.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem::dispatch::{Attempt, BodyFuture, DispatchEvent, EventKind, Execution, Observer, Stage};
use idem::prelude::*;
use idem::{ErrorKind, ToolDef, ToolPolicy};
use serde_json::{Value, json};

/// One event as the test keeps it: kind, class, key hash, error code.
type Kept = (EventKind, Option<ToolClass>, Option<String>, Option<String>);

/// What an observer saw; a stage's time is kept as zero (tests never assert on the clock).
#[derive(Default)]
struct Seen(Mutex<Vec<Kept>>);

impl Observer for Seen {
    fn event(&self, e: &DispatchEvent<'_>) {
        let error = e.error.map(|e| e.code().to_owned());
        let kind = match e.kind {
            EventKind::Stage { stage, .. } => timed(stage),
            kind => kind,
        };
        self.0
            .lock()
            .unwrap()
            .push((kind, e.class, e.key.map(str::to_owned), error));
    }
}

/// A stage as [`Seen`] keeps it.
fn timed(stage: Stage) -> EventKind {
    EventKind::Stage {
        stage,
        took: Duration::ZERO,
    }
}

impl Seen {
    fn kinds(&self) -> Vec<EventKind> {
        self.0.lock().unwrap().iter().map(|e| e.0).collect()
    }

    fn take(&self) -> Vec<Kept> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// An `idempotent_write` that fails retryably `failures` times, then succeeds; counts runs.
fn flaky(name: &str, class: ToolClass, failures: u32, runs: Arc<AtomicU32>) -> ToolDef {
    ToolDef::builder(name.to_owned(), class)
        .description("Do something that fails a few times first.")
        .input_schema(json!({"type": "object"}))
        .policy(ToolPolicy {
            backoff: Duration::from_millis(1),
            ..ToolPolicy::default()
        })
        .handler(move |_ctx: ToolContext, _args: Value| {
            let runs = runs.clone();
            async move {
                let n = runs.fetch_add(1, Ordering::SeqCst);
                if n < failures {
                    Err(ToolError::retryable("busy"))
                } else {
                    Ok(json!({"done": n + 1}))
                }
            }
        })
        .build()
        .unwrap()
}

fn dispatcher(tools: Vec<ToolDef>) -> Dispatcher {
    let mut registry = Registry::builder();
    for t in tools {
        registry = registry.add(t);
    }
    Dispatcher::new(registry.build().unwrap(), Arc::new(MemoryStore::new())).unwrap()
}

#[tokio::test]
async fn an_observer_sees_claim_retry_execution_and_replay_under_one_key() {
    let seen = Arc::new(Seen::default());
    let runs = Arc::new(AtomicU32::new(0));
    let d = dispatcher(vec![flaky(
        "sync",
        ToolClass::IdempotentWrite,
        1,
        runs.clone(),
    )])
    .with_observer(seen.clone());
    let call = ToolCall::new("sync", json!({"secretish": "card 4242"})).with_call_id("c1");
    let run = RunContext::new("t");

    let first = d.dispatch(&call, &run).await.unwrap();
    assert_eq!(first.attempts, 2);
    let events = seen.take();
    let kinds: Vec<_> = events.iter().map(|e| e.0).collect();
    assert_eq!(
        kinds,
        [
            EventKind::Claimed { takeover: false },
            timed(Stage::Claim),
            timed(Stage::Execute),
            EventKind::Retried {
                attempt: 1,
                error: ErrorKind::Retryable
            },
            timed(Stage::Execute),
            timed(Stage::Record),
            EventKind::Executed { attempts: 2 },
        ]
    );
    // One key hash for every event of the call: the record key's first 16 hex digits.
    let record_key = d.record_key(&call, &run).unwrap().unwrap();
    for (_, class, key, error) in &events {
        assert_eq!(*class, Some(ToolClass::IdempotentWrite));
        assert_eq!(key.as_deref(), Some(&record_key.as_str()[..16]));
        assert_eq!(*error, None);
    }

    d.dispatch(&call, &run).await.unwrap();
    assert_eq!(seen.kinds(), [timed(Stage::Claim), EventKind::Replayed]);
    assert_eq!(runs.load(Ordering::SeqCst), 2, "the replay ran nothing");
}

#[tokio::test]
async fn an_observer_sees_refusals_failures_and_unknown_outcomes_with_their_errors() {
    let seen = Arc::new(Seen::default());
    let runs = Arc::new(AtomicU32::new(0));
    let send = ToolDef::builder("send", ToolClass::NonIdempotentWrite)
        .description("Send; always times out after sending.")
        .input_schema(json!({"type": "object"}))
        .handler(|_ctx: ToolContext, _args: Value| async move {
            Err::<Value, _>(ToolError::ambiguous("timed out after sending"))
        })
        .build()
        .unwrap();
    let d = dispatcher(vec![
        send,
        flaky("never", ToolClass::NonIdempotentWrite, u32::MAX, runs),
    ])
    .with_observer(seen.clone());
    let run = RunContext::new("t");

    let unknown = ToolCall::new("nope", json!({}));
    d.dispatch(&unknown, &run).await.unwrap_err();
    let missing_key = ToolCall::new("send", json!({}));
    d.dispatch(&missing_key, &run).await.unwrap_err();
    let ambiguous = ToolCall::new("send", json!({})).with_call_id("s1");
    d.dispatch(&ambiguous, &run).await.unwrap_err();
    let failing = ToolCall::new("never", json!({})).with_call_id("n1");
    d.dispatch(&failing, &run).await.unwrap_err();

    let events = seen.take();
    let ends: Vec<_> = events
        .iter()
        .filter(|e| !matches!(e.0, EventKind::Claimed { .. } | EventKind::Stage { .. }))
        .map(|e| (e.0, e.1, e.3.clone()))
        .collect();
    let code = |c: &str| Some(c.to_owned());
    let nidw = Some(ToolClass::NonIdempotentWrite);
    assert_eq!(
        ends,
        [
            (
                EventKind::Refused {
                    code: "unknown_tool"
                },
                None,
                code("unknown_tool")
            ),
            (
                EventKind::Refused {
                    code: "missing_key"
                },
                nidw,
                code("missing_key")
            ),
            // Made Unknown here, then reported so.
            (EventKind::LeftUnknown, nidw, None),
            (EventKind::Unknown, nidw, code("outcome_unknown")),
            // A non_idempotent_write is not retried on a retryable error: one attempt.
            (EventKind::Failed { attempts: 1 }, nidw, code("tool_failed")),
        ]
    );
}

/// Answers the first attempt of every call with a retryable fault, without running the body.
#[derive(Default)]
struct FailFirstAttempt {
    wrapped: AtomicU32,
}

impl Execution for FailFirstAttempt {
    fn execute<'a>(&'a self, attempt: Attempt<'a>, body: BodyFuture<'a>) -> BodyFuture<'a> {
        self.wrapped.fetch_add(1, Ordering::SeqCst);
        if attempt.attempt == 1 {
            Box::pin(async { Err(ToolError::retryable("injected fault")) })
        } else {
            body
        }
    }
}

#[tokio::test]
async fn an_execution_wrapper_injects_a_fault_and_the_class_retries_it() {
    let runs = Arc::new(AtomicU32::new(0));
    let faults = Arc::new(FailFirstAttempt::default());
    let d = dispatcher(vec![flaky(
        "sync",
        ToolClass::IdempotentWrite,
        0,
        runs.clone(),
    )])
    .with_execution(faults.clone());
    let call = ToolCall::new("sync", json!({})).with_call_id("c1");
    let out = d.dispatch(&call, &RunContext::new("t")).await.unwrap();
    assert_eq!(out.attempts, 2, "the injected fault cost one attempt");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the body ran once, on the second attempt"
    );
    assert_eq!(faults.wrapped.load(Ordering::SeqCst), 2);
    assert_eq!(out.output, json!({"done": 1}));

    // A replay does not execute: the wrapper is not asked.
    d.dispatch(&call, &RunContext::new("t")).await.unwrap();
    assert_eq!(faults.wrapped.load(Ordering::SeqCst), 2);
}

/// Gives every body at most the given time to answer.
struct Timeout(Duration);

impl Execution for Timeout {
    fn execute<'a>(&'a self, _attempt: Attempt<'a>, body: BodyFuture<'a>) -> BodyFuture<'a> {
        Box::pin(async move {
            tokio::time::timeout(self.0, body)
                .await
                .unwrap_or_else(|_| Err(ToolError::ambiguous("the tool timed out")))
        })
    }
}

#[tokio::test]
async fn a_timeout_wrapper_makes_a_slow_write_unknown_not_repeated() {
    let runs = Arc::new(AtomicU32::new(0));
    let counted = runs.clone();
    let slow = ToolDef::builder("charge", ToolClass::NonIdempotentWrite)
        .description("Charge a card; the provider is slow today.")
        .input_schema(json!({"type": "object"}))
        .handler(move |_ctx: ToolContext, _args: Value| {
            let runs = counted.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(5)).await;
                Ok::<_, ToolError>(json!({"charged": true}))
            }
        })
        .build()
        .unwrap();
    let d = dispatcher(vec![slow]).with_execution(Arc::new(Timeout(Duration::from_millis(20))));
    let call = ToolCall::new("charge", json!({"cents": 500})).with_call_id("c1");
    let run = RunContext::new("t");
    for _ in 0..2 {
        let err = d.dispatch(&call, &run).await.unwrap_err();
        assert!(
            matches!(err, DispatchError::OutcomeUnknown { ref reason, .. } if reason.contains("timed out")),
            "{err}"
        );
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the duplicate found Unknown and ran nothing"
    );
}
