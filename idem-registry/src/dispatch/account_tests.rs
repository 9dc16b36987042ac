//! What a run's account says of each call: its outcome (a read answered, never applied), its
//! class and its attempts, entries written by an earlier idem, and a compensation's Unknown.

use std::sync::Arc;
use std::time::Duration;

use idem_core::store::memory::MemoryStore;
use idem_core::{Store, ToolClass, ToolError};
use serde_json::{Value, json};

use crate::context::ToolContext;
use crate::dispatch::{CallOutcome, DispatchError, Dispatcher, ToolCall};
use crate::registry::Registry;
use crate::run::RunContext;
use crate::tool::{ToolDef, ToolPolicy, Undo};

fn accounting(tools: Vec<ToolDef>, store: Arc<dyn Store>) -> Dispatcher {
    let mut registry = Registry::builder();
    for tool in tools {
        registry = registry.add(tool);
    }
    Dispatcher::new(registry.build().unwrap(), store)
        .unwrap()
        .with_run_accounts(Duration::from_secs(3600))
}

/// A read, an idempotent write whose first attempt times out, a non-idempotent write.
fn desk() -> Vec<ToolDef> {
    let read = ToolDef::builder("read_ticket", ToolClass::Read)
        .description("Read a ticket.")
        .input_schema(json!({"type": "object"}))
        .handler(|_: ToolContext, _: Value| async move { Ok::<_, ToolError>(json!("open")) })
        .build()
        .unwrap();
    let assign = ToolDef::builder("assign_ticket", ToolClass::IdempotentWrite)
        .description("Assign a ticket.")
        .input_schema(json!({"type": "object"}))
        .policy(ToolPolicy {
            backoff: Duration::from_millis(1),
            ..ToolPolicy::default()
        })
        .handler(|ctx: ToolContext, _: Value| async move {
            match ctx.attempt() {
                1 => Err(ToolError::ambiguous("the desk timed out")),
                _ => Ok(json!("assigned")),
            }
        })
        .build()
        .unwrap();
    let reply = ToolDef::builder("reply_to_ticket", ToolClass::NonIdempotentWrite)
        .description("Reply to a ticket.")
        .input_schema(json!({"type": "object"}))
        .handler(|_: ToolContext, _: Value| async move { Ok::<_, ToolError>(json!("sent")) })
        .build()
        .unwrap();
    vec![read, assign, reply]
}

#[tokio::test]
async fn a_read_is_answered_not_applied_and_each_call_says_its_class_and_attempts() {
    let d = accounting(desk(), Arc::new(MemoryStore::new()));
    let run = RunContext::new("tenant-a").with_run("run-1", 0);
    let read = ToolCall::new("read_ticket", json!({})).with_call_id("r1");
    let assign = ToolCall::new("assign_ticket", json!({}))
        .with_call_id("w1")
        .with_key("assign-7");
    let reply = ToolCall::new("reply_to_ticket", json!({}))
        .with_call_id("w2")
        .with_key("reply-7");
    for call in [&read, &assign, &reply] {
        d.dispatch(call, &run).await.unwrap();
    }

    let account = d.run_account("tenant-a", "run-1").await.unwrap();
    let said: Vec<(&str, Option<ToolClass>, Option<u32>)> = account
        .calls
        .iter()
        .map(|c| (c.outcome.name(), c.class, c.attempts))
        .collect();
    assert_eq!(
        said,
        [
            ("answered", Some(ToolClass::Read), Some(1)),
            ("applied", Some(ToolClass::IdempotentWrite), Some(2)),
            ("applied", Some(ToolClass::NonIdempotentWrite), Some(1)),
        ],
        "{account}"
    );
    assert_eq!(account.counts(), vec![("answered", 1), ("applied", 2)]);
    let shown = account.to_string();
    for line in [
        "1. read_ticket [r1]: answered (read, 1 attempt)\n",
        "2. assign_ticket [w1]: applied (idempotent_write, 2 attempts)\n",
        "3. reply_to_ticket [w2]: applied (non_idempotent_write, 1 attempt)\n",
    ] {
        assert!(shown.contains(line), "{line:?} in {shown}");
    }
    assert!(shown.ends_with("in all: 1 answered, 2 applied"), "{shown}");
    let json = serde_json::to_value(&account).unwrap();
    assert_eq!(json["calls"][0]["outcome"], "answered");
    assert_eq!(json["calls"][1]["class"], "idempotent_write");
    assert_eq!(json["calls"][1]["attempts"], 2);

    // Sent again under their call ids: the write is replayed (no attempt), the read runs
    // again. A call's attempts are every execution of its body, summed over its dispatches.
    d.dispatch(&assign, &run).await.unwrap();
    d.dispatch(&read, &run).await.unwrap();
    let account = d.run_account("tenant-a", "run-1").await.unwrap();
    assert_eq!(account.calls.len(), 3, "{account}");
    assert_eq!(account.calls[0].outcome, CallOutcome::Answered);
    assert_eq!(account.calls[0].attempts, Some(2), "the read ran twice");
    assert_eq!(account.calls[1].outcome, CallOutcome::Applied);
    assert_eq!(account.calls[1].attempts, Some(2), "the replay ran nothing");
}

#[tokio::test]
async fn a_refusal_ran_nothing_and_an_unknown_outcome_does_not_claim_a_count() {
    let unsure = ToolDef::builder("send_sms", ToolClass::NonIdempotentWrite)
        .description("Send a text.")
        .input_schema(json!({
            "type": "object",
            "properties": {"to": {"type": "string"}},
            "required": ["to"]
        }))
        .handler(|_: ToolContext, _: Value| async move {
            Err::<Value, _>(ToolError::ambiguous("the carrier timed out"))
        })
        .build()
        .unwrap();
    let d = accounting(vec![unsure], Arc::new(MemoryStore::new()));
    let run = RunContext::new("tenant-a").with_run("run-2", 0);
    let calls = [
        ToolCall::new("send_smss", json!({"to": "+351 910 000 001"})).with_call_id("c1"),
        ToolCall::new("send_sms", json!({"to": 351})).with_call_id("c2"),
        ToolCall::new("send_sms", json!({"to": "+351 910 000 001"})).with_call_id("c3"),
    ];
    for call in &calls {
        assert!(d.dispatch(call, &run).await.is_err());
    }
    let account = d.run_account("tenant-a", "run-2").await.unwrap();
    let said: Vec<(&str, Option<ToolClass>, Option<u32>)> = account
        .calls
        .iter()
        .map(|c| (c.outcome.name(), c.class, c.attempts))
        .collect();
    assert_eq!(
        said,
        [
            // No such tool: no class, and nothing ran.
            ("refused", None, Some(0)),
            // Arguments the schema refuses: refused before the body.
            ("refused", Some(ToolClass::NonIdempotentWrite), Some(0)),
            // The dispatcher's error does not say how often the body ran.
            ("unknown", Some(ToolClass::NonIdempotentWrite), None),
        ],
        "{account}"
    );
    let shown = account.to_string();
    assert!(shown.contains("[c1]: refused: "), "{shown}");
    assert!(shown.contains(" (0 attempts)\n"), "{shown}");
    assert!(
        shown.ends_with(
            "(a person must settle it) (non_idempotent_write)\nin all: 2 refused, 1 unknown"
        ),
        "{shown}"
    );
}

/// Entries exactly as the idem before classes and attempts wrote them.
const EARLIER_ENTRIES: [&str; 2] = [
    r#"{"at":1796568165765,"tool":"add_note","call_id":"c1","step":3,"key":"idem-24702ead8b33292ea36b48f8874f6847ea4ff308","record":"9e21d3af312d61d590b0345deb08f637158634934eb0b2a7e4fff42732953e1c","outcome":"applied"}"#,
    r#"{"at":1796568165765,"tool":"add_note","call_id":"c2","step":3,"key":"idem-847062f2b1bc12e75ee0079274fe27bd426753f7","record":"c9413f7ed76d82f3b67c3bcd692e9668bd0f4d4981a2f2aef76b64828f80c602","outcome":"refused","why":"the ticket is closed"}"#,
];

#[tokio::test]
async fn an_entry_written_before_classes_and_attempts_reads_as_it_did() {
    let store = MemoryStore::new();
    for text in EARLIER_ENTRIES {
        store
            .append_run_entry("tenant-a", "run-old", text, Duration::from_secs(3600))
            .await
            .unwrap();
    }
    let account = crate::dispatch::run_account(&store, "tenant-a", "run-old")
        .await
        .unwrap();
    assert_eq!(account.calls.len(), 2);
    let first = &account.calls[0];
    assert_eq!(
        (
            first.outcome.name(),
            first.class,
            first.attempts,
            first.step
        ),
        ("applied", None, None, Some(3))
    );
    assert_eq!(
        account.calls[1].outcome,
        CallOutcome::Refused {
            why: "the ticket is closed".into()
        }
    );
    let shown = account.to_string();
    assert!(shown.contains("1. add_note [c1]: applied\n"), "{shown}");
    assert!(
        shown.contains("2. add_note [c2]: refused: the ticket is closed\n"),
        "{shown}"
    );
    // And read back as written: nothing said that the entry did not say.
    let json = serde_json::to_value(&account.calls[0]).unwrap();
    assert!(json.get("class").is_none() && json.get("attempts").is_none());
}

#[tokio::test]
async fn an_outcome_of_a_newer_idem_is_listed_not_dropped() {
    let store = MemoryStore::new();
    let newer = r#"{"at":1796568165765,"tool":"wire_money","call_id":"c1","class":"irreversible","attempts":1,"outcome":"escalated","to":"finance","limits":{"wire":{"used":1,"left":0}}}"#;
    store
        .append_run_entry("tenant-a", "run-new", newer, Duration::from_secs(3600))
        .await
        .unwrap();
    let account = crate::dispatch::run_account(&store, "tenant-a", "run-new")
        .await
        .unwrap();
    assert_eq!(account.calls.len(), 1);
    let call = &account.calls[0];
    assert_eq!(call.outcome, CallOutcome::Unrecognized);
    assert_eq!(
        (call.tool.as_str(), call.class, call.attempts),
        ("wire_money", Some(ToolClass::Irreversible), Some(1))
    );
}

/// A trip whose car cannot be booked, and whose flight the agency will not cancel.
fn trip() -> ToolDef {
    ToolDef::builder("book_trip", ToolClass::IdempotentWrite)
        .description("Book a flight and a car.")
        .input_schema(json!({"type": "object"}))
        .handler(|ctx: ToolContext, _: Value| async move {
            let _: String = ctx
                .step("flight", || async { Ok("flight-oslo".to_owned()) })
                .await?;
            Err(ToolError::terminal("no car is available"))
        })
        .compensate(|_: ToolContext, undo: Undo| async move {
            Err(ToolError::terminal(format!(
                "the agency refuses to cancel {}",
                undo.step
            )))
        })
        .build()
        .unwrap()
}

fn times(text: &str, phrase: &str) -> usize {
    text.to_lowercase().matches(phrase).count()
}

#[tokio::test]
async fn an_unknown_after_a_failed_undo_says_once_who_must_settle_it() {
    let dispatcher = accounting(vec![trip()], Arc::new(MemoryStore::new()));
    let run = RunContext::new("tenant-a").with_run("run-1", 0);
    let call = ToolCall::new("book_trip", json!({})).with_call_id("c1");
    let error = dispatcher.dispatch(&call, &run).await.unwrap_err();
    assert!(
        matches!(
            error,
            DispatchError::OutcomeUnknown {
                retry_after: None,
                ..
            }
        ),
        "{error}"
    );
    // The caller is told once who settles it (the error's own words, not the reason's).
    let told = error.to_string();
    assert_eq!(times(&told, "must settle"), 0, "{told}");
    assert_eq!(times(&told, "an operator must"), 1, "{told}");

    let account = dispatcher.run_account("tenant-a", "run-1").await.unwrap();
    assert!(matches!(
        account.calls[0].outcome,
        CallOutcome::Unknown {
            retry_after: None,
            ..
        }
    ));
    assert_eq!(account.needing_a_person().count(), 1);
    let shown = account.to_string();
    assert!(shown.contains("undoing step `flight`"), "{shown}");
    assert_eq!(times(&shown, "a person must settle"), 1, "{shown}");
}
