//! A call that brings no key (an MCP host sends none) is keyed for a re-send window by where
//! it came from and its arguments: a re-issue inside the window replays, the same call after
//! it runs again, and a key of its own always comes first.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use idem::prelude::*;
use idem::{MemoryStore, store::ManualClock};
use serde_json::json;
use support::dispatcher::linked;
use support::services::unique;
use support::tally::Tally;

static LEDGER: Tally = Tally::new();

/// Add a note.
#[tool(class = "non_idempotent_write")]
fn add_note(owner: String, text: String) -> Result<String, ToolError> {
    let n = LEDGER.note(&owner, "");
    Ok(format!("note {n}: {text}"))
}

/// Delete an account for good.
#[tool(class = "irreversible")]
fn close_account(owner: String) -> Result<String, ToolError> {
    LEDGER.note(&owner, "");
    Ok(format!("closed {owner}"))
}

const WINDOW: Duration = Duration::from_secs(300);

fn on_clock() -> (Dispatcher, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    let d = linked(Arc::new(MemoryStore::new().with_clock(clock.clone())));
    (d, clock)
}

fn note(owner: &str, text: &str, session: &str) -> ToolCall {
    ToolCall::new("add_note", json!({"owner": owner, "text": text}))
        .with_resend_window(session, WINDOW)
}

#[tokio::test]
async fn a_re_issued_call_inside_the_window_replays_and_after_it_runs_again() {
    let (d, clock) = on_clock();
    let run = RunContext::new("tenant-w");
    let owner = unique("o");
    let first = d.dispatch(&note(&owner, "hi", "s1"), &run).await.unwrap();
    assert!(!first.deduplicated);
    clock.advance(Duration::from_secs(120));
    let again = d.dispatch(&note(&owner, "hi", "s1"), &run).await.unwrap();
    assert!(again.deduplicated, "a re-send inside the window");
    assert_eq!(again.output, first.output);
    assert_eq!(LEDGER.count(&owner), 1);
    // Other arguments are another call.
    d.dispatch(&note(&owner, "bye", "s1"), &run).await.unwrap();
    assert_eq!(LEDGER.count(&owner), 2);
    // Another session is another scope.
    d.dispatch(&note(&owner, "hi", "s2"), &run).await.unwrap();
    assert_eq!(LEDGER.count(&owner), 3);
    // After the window, the same call is a new one.
    clock.advance(WINDOW);
    let later = d.dispatch(&note(&owner, "hi", "s1"), &run).await.unwrap();
    assert!(!later.deduplicated, "after the window");
    assert_eq!(LEDGER.count(&owner), 4);
}

#[tokio::test]
async fn a_key_of_its_own_comes_first() {
    let (d, _) = on_clock();
    let run = RunContext::new("tenant-w");
    let owner = unique("o");
    let keyed = |key: &str| note(&owner, "hi", "s1").with_key(key);
    d.dispatch(&keyed("k1"), &run).await.unwrap();
    d.dispatch(&keyed("k2"), &run).await.unwrap();
    assert_eq!(
        LEDGER.count(&owner),
        2,
        "two keys are two calls, whatever the window"
    );
    // Without any key material and without a window, a write is refused as before.
    let bare = ToolCall::new("add_note", json!({"owner": owner, "text": "x"}));
    assert_eq!(
        d.dispatch(&bare, &run).await.unwrap_err().code(),
        "missing_key"
    );
}

#[tokio::test]
async fn an_approval_outlives_the_window() {
    // The approved retry comes long after the window: it must find the same key and run
    // the call once, not be a new call needing a new approval.
    let (d, clock) = on_clock();
    let run = RunContext::new("tenant-w");
    let owner = unique("o");
    let call = ToolCall::new("close_account", json!({"owner": owner}))
        .with_resend_window("s1", Duration::from_secs(5));
    let request = match d.dispatch(&call, &run).await {
        Err(DispatchError::ApprovalRequired { request }) => request,
        other => panic!("{other:?}"),
    };
    clock.advance(Duration::from_secs(600));
    let approval = support::dispatcher::approver().approve_for(&request, Duration::from_secs(3600));
    let done = d
        .dispatch(&call, &run.clone().approve(approval.clone()))
        .await
        .unwrap();
    assert!(!done.deduplicated);
    // And the approval runs it once, even re-sent well after the window.
    clock.advance(Duration::from_secs(600));
    let again = d
        .dispatch(&call, &run.clone().approve(approval))
        .await
        .unwrap();
    assert!(again.deduplicated);
    assert_eq!(LEDGER.count(&owner), 1);
}
