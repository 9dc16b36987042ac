//! Verify hooks settle Unknown outcomes by asking the downstream system.

use crate::support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem::prelude::*;
use idem::{MemoryStore, ToolPolicy, Verified, record::RecordState, store::ManualClock};
use serde_json::{Value, json};
use support::dispatcher::with_tool;
use support::providers::{Mailer, send_mail, send_mail_call};

/// A mail provider whose API may time out after accepting a message; it can be asked
/// whether a Message-ID was sent.
#[derive(Default)]
struct TimingOutMailer {
    sent: Mutex<HashSet<String>>,
    requests: AtomicUsize,
    /// Time out after sending (true) or before sending (false), on the next request only.
    next_timeout: Mutex<Option<bool>>,
    verify_fails: Mutex<bool>,
}

impl Mailer for TimingOutMailer {
    fn send(&self, key: &str) -> Result<Value, ToolError> {
        self.requests.fetch_add(1, Ordering::SeqCst);
        match self.next_timeout.lock().unwrap().take() {
            Some(true) => {
                self.sent.lock().unwrap().insert(key.to_owned());
                Err(ToolError::ambiguous("timed out after sending"))
            }
            Some(false) => Err(ToolError::ambiguous("timed out, nothing sent")),
            None => {
                self.sent.lock().unwrap().insert(key.to_owned());
                Ok(json!({"message_id": key}))
            }
        }
    }

    fn verify(&self, key: &str) -> Result<Verified, ToolError> {
        if *self.verify_fails.lock().unwrap() {
            return Err(ToolError::retryable("sent-log API unavailable"));
        }
        Ok(if self.sent.lock().unwrap().contains(key) {
            Verified::Applied(json!({"message_id": key, "verified": true}))
        } else {
            Verified::NotApplied
        })
    }
}

/// A dispatcher of `send_mail` through `mailer`, on a store whose clock the test moves past
/// the settle delay.
fn on_manual_clock(mailer: &Arc<TimingOutMailer>) -> (Dispatcher, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    let store = Arc::new(MemoryStore::new().with_clock(clock.clone()));
    let d = with_tool(send_mail(mailer.clone(), ToolPolicy::default()), store);
    (d, clock)
}

/// Past the settle delay (ToolPolicy::verify_after), when the hook may be asked.
fn settle(clock: &ManualClock) {
    clock.advance(ToolPolicy::default().verify_after);
}

#[tokio::test]
async fn applied_effect_is_settled_and_replayed_without_resending() {
    let mailer = Arc::new(TimingOutMailer::default());
    let (d, clock) = on_manual_clock(&mailer);
    let run = RunContext::new("t");
    *mailer.next_timeout.lock().unwrap() = Some(true);
    let first = d.dispatch(&send_mail_call(), &run).await.unwrap_err();
    assert!(
        matches!(first, DispatchError::OutcomeUnknown { .. }),
        "{first:?}"
    );
    settle(&clock);
    let again = d.dispatch(&send_mail_call(), &run).await.unwrap();
    assert!(
        again.deduplicated,
        "the verified effect is replayed, not re-sent"
    );
    assert_eq!(again.output["verified"], json!(true));
    assert_eq!(
        mailer.requests.load(Ordering::SeqCst),
        1,
        "the mail provider was called once"
    );
    let rec = d
        .store()
        .get(&d.record_key(&send_mail_call(), &run).unwrap().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(rec.state, RecordState::Completed { .. }));
}

#[tokio::test]
async fn effect_verified_not_applied_runs_once_more() {
    let mailer = Arc::new(TimingOutMailer::default());
    let (d, clock) = on_manual_clock(&mailer);
    let run = RunContext::new("t");
    *mailer.next_timeout.lock().unwrap() = Some(false);
    assert!(matches!(
        d.dispatch(&send_mail_call(), &run).await,
        Err(DispatchError::OutcomeUnknown { .. })
    ));
    settle(&clock);
    let again = d.dispatch(&send_mail_call(), &run).await.unwrap();
    assert!(
        !again.deduplicated,
        "certainly not sent, so it was sent now"
    );
    assert_eq!(mailer.requests.load(Ordering::SeqCst), 2);
    assert_eq!(
        mailer.sent.lock().unwrap().len(),
        1,
        "one message in the end"
    );
    assert!(
        d.dispatch(&send_mail_call(), &run)
            .await
            .unwrap()
            .deduplicated
    );
}

#[tokio::test]
async fn a_failing_verify_hook_leaves_the_outcome_unknown() {
    let mailer = Arc::new(TimingOutMailer::default());
    let (d, clock) = on_manual_clock(&mailer);
    let run = RunContext::new("t");
    *mailer.next_timeout.lock().unwrap() = Some(true);
    *mailer.verify_fails.lock().unwrap() = true;
    assert!(matches!(
        d.dispatch(&send_mail_call(), &run).await,
        Err(DispatchError::OutcomeUnknown { .. })
    ));
    settle(&clock);
    match d.dispatch(&send_mail_call(), &run).await {
        Err(DispatchError::OutcomeUnknown { reason, .. }) => {
            assert!(reason.contains("verification failed"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        mailer.requests.load(Ordering::SeqCst),
        1,
        "never re-sent while unverified"
    );
}

/// Ask the outbox whether a message to these arguments' recipient went out.
async fn sent_to(ctx: &ToolContext) -> Result<Verified, ToolError> {
    let to = ctx
        .arguments()
        .and_then(|a| a.get("to"))
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::terminal("no recipient"))?
        .to_owned();
    Ok(if OUTBOX.lock().unwrap().contains(&to) {
        Verified::Applied(json!({"to": to, "verified": true}))
    } else {
        Verified::NotApplied
    })
}

static OUTBOX: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Send a message that times out after it went out.
#[idem::tool(class = "non_idempotent_write", verify = sent_to, verify_after_secs = 0, lease_secs = 1)]
async fn send_once(to: String) -> Result<String, ToolError> {
    OUTBOX.lock().unwrap().push(to);
    Err(ToolError::ambiguous("timed out after sending"))
}

#[tokio::test]
async fn a_tool_attribute_hook_reads_the_arguments_from_its_context() {
    let clock = Arc::new(ManualClock::new());
    let store = Arc::new(MemoryStore::new().with_clock(clock.clone()));
    let d = with_tool(<send_once as idem::tool::StaticTool>::definition(), store);
    let call = ToolCall::new("send_once", json!({"to": "kim@example.com"})).with_call_id("c9");
    let run = RunContext::new("t");
    assert!(matches!(
        d.dispatch(&call, &run).await,
        Err(DispatchError::OutcomeUnknown { .. })
    ));
    clock.advance(Duration::from_secs(1));
    let settled = d.dispatch(&call, &run).await.unwrap();
    assert_eq!(
        settled.output,
        json!({"to": "kim@example.com", "verified": true})
    );
    assert_eq!(OUTBOX.lock().unwrap().len(), 1);
}
