//! An Unknown outcome is verified only once the downstream system could have settled: a
//! provider that timed out may commit seconds later, and a verify hook asked too soon would
//! answer "not applied" and let the call run twice.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem::prelude::*;
use idem::store::{Claim, ClaimRequest};
use idem::{MemoryStore, ToolDef, ToolPolicy, Verified, record::Timestamp, store::ManualClock};
use serde_json::{Value, json};

use crate::support;
use support::dispatcher::with_tool;
use support::providers::{Mailer, send_mail, send_mail_call, timing_out};

/// A mail provider that accepts a message, times out, and shows it in its sent log only
/// once `commit` is called (as a provider's queue commits seconds after the timeout).
#[derive(Default)]
struct SlowMailer {
    requests: AtomicUsize,
    pending: Mutex<Vec<String>>,
    sent: Mutex<Vec<String>>,
}

impl Mailer for SlowMailer {
    fn send(&self, key: &str) -> Result<Value, ToolError> {
        let n = self.requests.fetch_add(1, Ordering::SeqCst);
        if n == 0 {
            self.pending.lock().unwrap().push(key.to_owned());
            return Err(ToolError::ambiguous("timed out after sending"));
        }
        self.sent.lock().unwrap().push(key.to_owned());
        Ok(json!({"message_id": key}))
    }

    fn verify(&self, key: &str) -> Result<Verified, ToolError> {
        Ok(if self.sent.lock().unwrap().iter().any(|k| k == key) {
            Verified::Applied(json!({"message_id": key, "verified": true}))
        } else {
            Verified::NotApplied
        })
    }
}

impl SlowMailer {
    fn commit(&self) {
        let mut pending = self.pending.lock().unwrap();
        self.sent.lock().unwrap().append(&mut pending);
    }

    fn delivered(&self) -> usize {
        self.sent.lock().unwrap().len()
    }
}

fn unknown_times(e: &DispatchError) -> (Timestamp, Option<Timestamp>) {
    match e {
        DispatchError::OutcomeUnknown {
            since, retry_after, ..
        } => (*since, *retry_after),
        other => panic!("expected OutcomeUnknown, got {other:?}"),
    }
}

#[tokio::test]
async fn a_late_commit_is_not_sent_twice() {
    let mailer = Arc::new(SlowMailer::default());
    let clock = Arc::new(ManualClock::new());
    let d = with_tool(
        send_mail(mailer.clone(), ToolPolicy::default()),
        Arc::new(MemoryStore::new().with_clock(clock.clone())),
    );
    let run = RunContext::new("t");

    let first = d.dispatch(&send_mail_call(), &run).await.unwrap_err();
    let (since, retry_after) = unknown_times(&first);
    let settle = ToolPolicy::default().verify_after;
    assert_eq!(retry_after, Some(since.plus(settle)), "{first}");

    // The agent retries at once: the provider has not committed yet, so a hook asked now
    // would say "not applied". The call must wait instead.
    clock.advance(Duration::from_secs(1));
    let early = d.dispatch(&send_mail_call(), &run).await.unwrap_err();
    assert_eq!(unknown_times(&early), (since, retry_after));
    assert_eq!(mailer.requests.load(Ordering::SeqCst), 1, "nothing re-sent");

    mailer.commit();
    clock.advance(settle);
    let settled = d.dispatch(&send_mail_call(), &run).await.unwrap();
    assert!(settled.deduplicated);
    assert_eq!(settled.output["verified"], json!(true));
    assert_eq!(mailer.requests.load(Ordering::SeqCst), 1);
    assert_eq!(mailer.delivered(), 1, "one message in the end");
}

#[tokio::test]
async fn after_the_delay_a_not_applied_call_runs_once_more() {
    let mailer = Arc::new(SlowMailer::default());
    let clock = Arc::new(ManualClock::new());
    let policy = ToolPolicy {
        verify_after: Duration::from_secs(60),
        ..ToolPolicy::default()
    };
    let d = with_tool(
        send_mail(mailer.clone(), policy),
        Arc::new(MemoryStore::new().with_clock(clock.clone())),
    );
    let run = RunContext::new("t");
    let (since, retry_after) =
        unknown_times(&d.dispatch(&send_mail_call(), &run).await.unwrap_err());
    assert_eq!(retry_after, Some(since.plus(Duration::from_secs(60))));
    // The provider dropped the message: it never commits.
    mailer.pending.lock().unwrap().clear();
    clock.advance(Duration::from_secs(59));
    assert!(
        d.dispatch(&send_mail_call(), &run).await.is_err(),
        "still too early"
    );
    clock.advance(Duration::from_secs(1));
    let again = d.dispatch(&send_mail_call(), &run).await.unwrap();
    assert!(!again.deduplicated, "certainly not sent, so sent now");
    assert_eq!(mailer.delivered(), 1);
}

#[tokio::test]
async fn the_tools_own_ambiguous_error_waits_the_settle_delay_alone() {
    // A tool with a fast, authoritative lookup and a long lease: the holder that got the
    // ambiguous error has finished, so nothing but the downstream system's own settling is
    // waited for (the lease bounds only orphans, whose holder may still be running).
    let mailer = Arc::new(SlowMailer::default());
    let clock = Arc::new(ManualClock::new());
    let policy = ToolPolicy {
        lease: Duration::from_secs(120),
        verify_after: Duration::from_secs(2),
        ..ToolPolicy::default()
    };
    let d = with_tool(
        send_mail(mailer.clone(), policy),
        Arc::new(MemoryStore::new().with_clock(clock.clone())),
    );
    let run = RunContext::new("t");
    let (since, retry_after) =
        unknown_times(&d.dispatch(&send_mail_call(), &run).await.unwrap_err());
    assert_eq!(retry_after, Some(since.plus(Duration::from_secs(2))));
    mailer.commit();
    clock.advance(Duration::from_secs(2));
    let settled = d.dispatch(&send_mail_call(), &run).await.unwrap();
    assert!(settled.deduplicated, "the hook found it sent");
    assert_eq!(mailer.delivered(), 1);
}

#[tokio::test]
async fn recovery_reads_the_same_rule_for_the_tools_own_ambiguous_error() {
    let mailer = Arc::new(SlowMailer::default());
    let clock = Arc::new(ManualClock::new());
    let policy = ToolPolicy {
        lease: Duration::from_secs(120),
        verify_after: Duration::from_secs(2),
        ..ToolPolicy::default()
    };
    let d = with_tool(
        send_mail(mailer.clone(), policy),
        Arc::new(MemoryStore::new().with_clock(clock.clone())),
    );
    unknown_times(
        &d.dispatch(&send_mail_call(), &RunContext::new("t"))
            .await
            .unwrap_err(),
    );
    mailer.commit();
    clock.advance(Duration::from_secs(2));
    let report = d
        .recover(&idem::dispatch::RecoveryOptions::default())
        .await
        .unwrap();
    let actions: Vec<_> = report.records.iter().map(|r| r.action.clone()).collect();
    assert_eq!(
        actions,
        [idem::dispatch::RecoveryAction::Verified { applied: true }]
    );
}

#[tokio::test]
async fn an_orphan_waits_the_same_delay_counted_from_when_it_was_found() {
    // The holder died mid-send: its lease (1 s) expires, the next call finds the orphan and
    // turns it Unknown. Verification waits the settle delay from then, not a lease.
    let mailer = Arc::new(SlowMailer::default());
    let clock = Arc::new(ManualClock::new());
    let store = Arc::new(MemoryStore::new().with_clock(clock.clone()));
    let policy = ToolPolicy {
        lease: Duration::from_secs(1),
        wait: Duration::ZERO,
        verify_after: Duration::from_secs(30),
        ..ToolPolicy::default()
    };
    let check = mailer.clone();
    let tool = ToolDef::builder("send_mail", ToolClass::NonIdempotentWrite)
        .description("Send a message.")
        .input_schema(json!({"type": "object"}))
        .policy(policy)
        .handler(|_ctx: ToolContext, _args: Value| async move {
            Ok::<_, ToolError>(json!("never reached"))
        })
        .verify(move |ctx: ToolContext, _args: Value| {
            let m = check.clone();
            async move { m.verify(ctx.idempotency_key()) }
        })
        .build()
        .unwrap();
    let d = with_tool(tool, store.clone());
    let run = RunContext::new("t");
    let key = d.record_key(&send_mail_call(), &run).unwrap().unwrap();
    // A holder that claimed and died.
    let request = ClaimRequest {
        key: key.clone(),
        tool: "send_mail".into(),
        tenant: "t".into(),
        fingerprint: idem::key::Fingerprint::of(&json!({"to": "a@example.com"})),
        lease: Duration::from_secs(1),
        orphans: idem::tool::OrphanPolicy::MarkUnknown,
        arguments: None,
        contract: None,
    };
    assert!(matches!(
        store.claim(&request).await.unwrap(),
        Claim::Acquired { .. }
    ));
    clock.advance(Duration::from_secs(2));
    let (since, retry_after) =
        unknown_times(&d.dispatch(&send_mail_call(), &run).await.unwrap_err());
    assert_eq!(retry_after, Some(since.plus(Duration::from_secs(30))));
    clock.advance(Duration::from_secs(29));
    assert!(d.dispatch(&send_mail_call(), &run).await.is_err());
    clock.advance(Duration::from_secs(1));
    // The dead holder never reached the provider: the hook says not applied, and the call
    // is released and runs.
    let ran = d.dispatch(&send_mail_call(), &run).await.unwrap();
    assert!(!ran.deduplicated);
}

#[tokio::test]
async fn without_a_hook_the_error_says_an_operator_must_settle_it() {
    let clock = Arc::new(ManualClock::new());
    let d = with_tool(
        timing_out("send_mail"),
        Arc::new(MemoryStore::new().with_clock(clock)),
    );
    let e = d
        .dispatch(&send_mail_call(), &RunContext::new("t"))
        .await
        .unwrap_err();
    let (_, retry_after) = unknown_times(&e);
    assert_eq!(retry_after, None);
    let text = e.to_string();
    assert!(text.contains("an operator must"), "{text}");
    // The time is RFC 3339, not raw milliseconds.
    let year = &text[text.find(" since ").expect("since") + 7..][..4];
    assert!(year.starts_with("20"), "{text}");
}

#[test]
fn a_settle_delay_over_ten_years_is_refused() {
    let policy = ToolPolicy {
        verify_after: Duration::from_secs(11 * 365 * 86_400),
        ..ToolPolicy::default()
    };
    let err = ToolDef::builder("send_mail", ToolClass::NonIdempotentWrite)
        .description("Send a message.")
        .input_schema(json!({"type": "object"}))
        .policy(policy)
        .handler(|_ctx: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("verify_after_secs"), "{err}");
}

#[tokio::test]
async fn a_caller_can_wait_for_an_unknown_to_settle_within_a_bound() {
    // The send times out after the provider accepted it; the provider commits a moment
    // later. One call waits for the settle delay (1 s here) and gets the send as recorded.
    let mailer = Arc::new(SlowMailer::default());
    let policy = ToolPolicy {
        verify_after: Duration::from_secs(1),
        ..ToolPolicy::default()
    };
    let d = with_tool(
        send_mail(mailer.clone(), policy),
        Arc::new(MemoryStore::new()),
    );
    let committing = mailer.clone();
    tokio::spawn(async move {
        while committing.requests.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        committing.commit();
    });
    let run = RunContext::new("t");
    let sent = d
        .dispatch_until_settled(&send_mail_call(), &run, Duration::from_secs(30))
        .await
        .expect("settled by the hook within the bound");
    assert!(
        sent.deduplicated,
        "the send the provider committed, replayed"
    );
    assert_eq!(sent.output["verified"], json!(true));
    assert_eq!(mailer.delivered(), 1);
    assert_eq!(
        mailer.requests.load(Ordering::SeqCst),
        1,
        "never sent again"
    );
}

#[tokio::test]
async fn a_bound_shorter_than_the_settle_delay_returns_the_unknown() {
    let mailer = Arc::new(SlowMailer::default());
    let d = with_tool(
        send_mail(mailer.clone(), ToolPolicy::default()),
        Arc::new(MemoryStore::new()),
    );
    let run = RunContext::new("t");
    // The default settle delay is five minutes: a bound of one second does not wait for it.
    let e = d
        .dispatch_until_settled(&send_mail_call(), &run, Duration::from_secs(1))
        .await
        .unwrap_err();
    let (since, retry_after) = unknown_times(&e);
    assert_eq!(
        retry_after,
        Some(since.plus(ToolPolicy::default().verify_after))
    );
    // Without a hook there is nothing to wait for.
    let d = with_tool(timing_out("send_mail"), Arc::new(MemoryStore::new()));
    let e = d
        .dispatch_until_settled(&send_mail_call(), &run, Duration::from_secs(3600))
        .await
        .unwrap_err();
    assert_eq!(unknown_times(&e).1, None);
}
