//! A tool read from data sets the same policy a `#[tool]` attribute does: retention, lease,
//! retries, waiting, a natural key (JSON Pointers into the arguments) and the key-reuse policy;
//! every bad value is refused at registration with an error naming the tool.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::support;

use idem::prelude::*;
use idem::{ToolDef, ToolSpec, registry::RegistryError};
use serde_json::{Value, json};
use support::dispatcher::with_tool;

fn spec(extra: Value) -> ToolSpec {
    let mut spec = json!({
        "name": "open_ticket",
        "class": "idempotent_write",
        "description": "Open a support ticket, or find the one already open.",
        "input_schema": {
            "type": "object",
            "properties": {
                "customer": {"type": "string"},
                "subject": {"type": "string"},
                "body": {"type": "string"},
                "order": {"type": "object", "properties": {"id": {"type": "integer"}}}
            }
        }
    });
    for (k, v) in extra.as_object().expect("an object") {
        spec[k] = v.clone();
    }
    serde_json::from_value(spec).expect("a spec")
}

/// The definition, with a handler that counts its runs and echoes a ticket number.
fn def(spec: ToolSpec, runs: &Arc<AtomicU32>) -> Result<ToolDef, RegistryError> {
    let runs = Arc::clone(runs);
    spec.into_def(move |_ctx, args| {
        let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
        async move { Ok(json!({ "ticket": run, "subject": args["subject"] })) }
    })
}

fn run() -> RunContext {
    RunContext::new("tenant-spec")
}

/// A call of `tool` under the provider's call id `id`, which must succeed.
async fn dispatched(d: &Dispatcher, tool: &str, args: Value, id: &str) -> Dispatched {
    let call = ToolCall::new(tool, args).with_call_id(id);
    d.dispatch(&call, &run()).await.unwrap()
}

#[test]
fn the_policy_fields_set_the_policy() {
    let runs = Arc::new(AtomicU32::new(0));
    let def = def(
        spec(json!({
            "ttl_secs": 3600,
            "lease_secs": 5,
            "max_attempts": 4,
            "wait_secs": 2,
            "backoff_ms": 20,
            "on_key_reuse": "replay",
            "natural_key": ["/customer", "/subject"]
        })),
        &runs,
    )
    .unwrap();
    let policy = def.policy();
    assert_eq!(policy.ttl, Duration::from_secs(3600));
    assert_eq!(policy.lease, Duration::from_secs(5));
    assert_eq!(policy.max_attempts, 4);
    assert_eq!(policy.wait, Duration::from_secs(2));
    assert_eq!(policy.backoff, Duration::from_millis(20));
    assert!(policy.replay_on_key_reuse);
    assert!(def.has_natural_key());

    // Left out, each is the default a `#[tool]` gets.
    let plain = self::def(spec(json!({})), &runs).unwrap();
    assert_eq!(plain.policy(), &idem::ToolPolicy::default());
    assert!(!plain.has_natural_key());
}

#[tokio::test]
async fn a_natural_key_finds_the_call_already_made_whatever_its_ids() {
    let runs = Arc::new(AtomicU32::new(0));
    let d = with_tool(
        def(
            spec(json!({ "natural_key": ["/customer", "/subject"], "on_key_reuse": "replay" })),
            &runs,
        )
        .unwrap(),
        Arc::new(MemoryStore::new()),
    );
    let args = json!({ "customer": "c-17", "subject": "Refund", "body": "Please refund." });
    let first = dispatched(&d, "open_ticket", args, "call-1").await;
    assert!(!first.deduplicated);
    // The model asks again, in other words, under another call id: the same ticket.
    let reworded = json!({ "customer": "c-17", "subject": "Refund", "body": "Refund me, please." });
    let again = dispatched(&d, "open_ticket", reworded, "call-2").await;
    assert!(again.deduplicated);
    assert_eq!(again.output, first.output);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // Another subject is another ticket.
    let other = json!({ "customer": "c-17", "subject": "Invoice" });
    let second = dispatched(&d, "open_ticket", other, "call-3").await;
    assert!(!second.deduplicated);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_call_without_the_natural_key_values_is_keyed_by_its_ids() {
    let runs = Arc::new(AtomicU32::new(0));
    let d = with_tool(
        def(
            spec(json!({ "natural_key": ["/customer", "/order/id"] })),
            &runs,
        )
        .unwrap(),
        Arc::new(MemoryStore::new()),
    );
    // A nested pointer works; a missing value or a null one means no natural key.
    for (i, args) in [
        json!({ "customer": "c-1", "order": { "id": 7 } }),
        json!({ "customer": "c-1" }),
        json!({ "customer": "c-1", "order": { "id": null } }),
    ]
    .into_iter()
    .enumerate()
    {
        let call = ToolCall::new("open_ticket", args).with_call_id(format!("call-ids-{i}"));
        assert!(!d.dispatch(&call, &run()).await.unwrap().deduplicated);
        assert!(d.dispatch(&call, &run()).await.unwrap().deduplicated);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    // Without ids either, a write has no key at all and is refused, not run.
    let keyless = ToolCall::new("open_ticket", json!({ "customer": "c-1" }));
    assert!(matches!(
        d.dispatch(&keyless, &run()).await,
        Err(DispatchError::MissingKey { .. })
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn natural_key_pointers_follow_rfc_6901() {
    let runs = Arc::new(AtomicU32::new(0));
    let spec: ToolSpec = serde_json::from_value(json!({
        "name": "route",
        "class": "idempotent_write",
        "description": "Route a parcel.",
        "input_schema": {"type": "object", "properties": {
            "from/to": {"type": "string"}, "a~b": {"type": "string"}, "note": {"type": "string"}
        }},
        "natural_key": ["/from~1to", "/a~0b"]
    }))
    .unwrap();
    let d = with_tool(def(spec, &runs).unwrap(), Arc::new(MemoryStore::new()));
    let call = |note: &str, id: &str| {
        ToolCall::new(
            "route",
            json!({ "from/to": "LHR-JFK", "a~b": "x", "note": note }),
        )
        .with_call_id(id)
    };
    assert!(
        !d.dispatch(&call("one", "c-1"), &run())
            .await
            .unwrap()
            .deduplicated
    );
    // Escaped names reach their arguments: the same values, another call id, one effect.
    let again = d.dispatch(&call("one", "c-2"), &run()).await.unwrap();
    assert!(again.deduplicated);
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // `/~01` names the argument `~1` (`~1` is unescaped before `~0`), and `/` names the
    // argument whose name is empty.
    let odd = Arc::new(AtomicU32::new(0));
    let spec: ToolSpec = serde_json::from_value(json!({
        "name": "odd_names",
        "class": "idempotent_write",
        "description": "Arguments with unusual names.",
        "input_schema": {"type": "object", "properties": {
            "~1": {"type": "string"}, "": {"type": "string"}, "note": {"type": "string"}
        }},
        "natural_key": ["/~01", "/"],
        "on_key_reuse": "replay"
    }))
    .unwrap();
    let d = with_tool(def(spec, &odd).unwrap(), Arc::new(MemoryStore::new()));
    for (id, note) in [("o-1", "first"), ("o-2", "second")] {
        let args = json!({ "~1": "tilde-one", "": "empty", "note": note });
        let out = dispatched(&d, "odd_names", args, id).await;
        assert_eq!(out.deduplicated, id == "o-2");
    }
    // With the argument `/` (escaped `~1`) instead, the key differs: another effect.
    let other = json!({ "~1": "other", "": "empty", "note": "third" });
    let out = dispatched(&d, "odd_names", other, "o-3").await;
    assert!(!out.deduplicated);
    assert_eq!(odd.load(Ordering::SeqCst), 2);

    // `""` points at the whole arguments: the tool says they are the effect's identity.
    let whole = Arc::new(AtomicU32::new(0));
    let d = with_tool(
        def(spec_with_key(json!([""])), &whole).unwrap(),
        Arc::new(MemoryStore::new()),
    );
    let args = json!({ "customer": "c-9", "subject": "Hi" });
    let first = ToolCall::new("open_ticket", args.clone()).with_call_id("w-1");
    let second = ToolCall::new("open_ticket", args).with_call_id("w-2");
    assert!(!d.dispatch(&first, &run()).await.unwrap().deduplicated);
    assert!(d.dispatch(&second, &run()).await.unwrap().deduplicated);
    assert_eq!(whole.load(Ordering::SeqCst), 1);
}

fn spec_with_key(natural_key: Value) -> ToolSpec {
    spec(json!({ "natural_key": natural_key }))
}

#[test]
fn a_natural_key_may_name_arguments_the_schema_admits_without_listing() {
    let runs = Arc::new(AtomicU32::new(0));
    for open in [
        json!({ "additionalProperties": true }),
        json!({ "additionalProperties": { "type": "string" } }),
        json!({ "patternProperties": { "^x-": { "type": "string" } } }),
    ] {
        let mut spec = json!({
            "name": "open_schema",
            "class": "idempotent_write",
            "description": "A schema open to more arguments.",
            "input_schema": { "type": "object", "properties": { "a": { "type": "string" } } },
            "natural_key": ["/x-tenant"]
        });
        for (k, v) in open.as_object().unwrap() {
            spec["input_schema"][k] = v.clone();
        }
        let spec: ToolSpec = serde_json::from_value(spec).unwrap();
        assert!(def(spec, &runs).is_ok(), "refused with {open}");
    }
    // Closed explicitly, it is checked as when nothing is said.
    let mut closed = json!({
        "name": "closed_schema",
        "class": "idempotent_write",
        "description": "A closed schema.",
        "input_schema": { "type": "object", "properties": { "a": { "type": "string" } },
            "additionalProperties": false },
        "natural_key": ["/x-tenant"]
    });
    let spec: ToolSpec = serde_json::from_value(closed.take()).unwrap();
    assert!(matches!(
        def(spec, &runs),
        Err(RegistryError::Invalid { .. })
    ));
}

#[test]
fn bad_policy_values_are_refused_naming_the_tool_and_the_fix() {
    let runs = Arc::new(AtomicU32::new(0));
    let refused = |extra: Value| match def(spec(extra.clone()), &runs) {
        Err(RegistryError::Invalid { tool, reason }) => {
            assert_eq!(tool, "open_ticket", "for {extra}");
            reason
        }
        other => panic!("{extra} should be refused, got {other:?}"),
    };
    let reason = refused(json!({ "on_key_reuse": "sometimes" }));
    assert!(
        reason.contains("sometimes") && reason.contains("\"replay\""),
        "{reason}"
    );
    let reason = refused(json!({ "natural_key": ["customer"] }));
    assert!(reason.contains("`/customer`"), "{reason}");
    let reason = refused(json!({ "ttl_secs": 0 }));
    assert!(
        reason.contains("`ttl_secs`") && reason.contains("longer than zero"),
        "{reason}"
    );
    let reason = refused(json!({ "lease_secs": 0 }));
    assert!(
        reason.contains("`lease_secs`") && reason.contains("longer than zero"),
        "{reason}"
    );
    let reason = refused(json!({ "max_attempts": 0 }));
    assert!(reason.contains("at least 1"), "{reason}");
    // Durations whose deadlines would overflow the clock.
    let reason = refused(json!({ "wait_secs": u64::MAX }));
    assert!(
        reason.contains("`wait_secs`") && reason.contains("ten years"),
        "{reason}"
    );
    let reason = refused(json!({ "ttl_secs": 400_000_000_u64 }));
    assert!(reason.contains("`ttl_secs`"), "{reason}");
    // A natural key that could never match is refused, not quietly ignored.
    let reason = refused(json!({ "natural_key": ["/custmer"] }));
    assert!(
        reason.contains("`custmer`") && reason.contains("body, customer, order, subject"),
        "{reason}"
    );
    let reason = refused(json!({ "natural_key": ["#/customer"] }));
    assert!(reason.contains("write `/customer`"), "{reason}");
    let reason = refused(json!({ "natural_key": ["#"] }));
    assert!(reason.contains("for the whole arguments"), "{reason}");
    let reason = refused(json!({ "backoff_ms": u64::MAX }));
    assert!(
        reason.contains("`backoff_ms`") && reason.contains(" ms (ten years)"),
        "{reason}"
    );
    let reason = refused(json!({ "on_key_reuse": "replay" }));
    assert!(reason.contains("add `natural_key`"), "{reason}");
    // A read records nothing: settings about records would do nothing.
    for field in [
        json!({ "ttl_secs": 60 }),
        json!({ "natural_key": ["/customer"] }),
        json!({ "on_key_reuse": "reject" }),
    ] {
        let mut read = field.clone();
        read["class"] = json!("read");
        let reason = refused(read);
        let name = field.as_object().unwrap().keys().next().unwrap().clone();
        assert!(
            reason.contains(&format!("`{name}` has no effect on a `read` tool")),
            "{reason}"
        );
    }

    // A misspelt field is an error, not a silently ignored setting.
    let misspelt = serde_json::from_value::<ToolSpec>(json!({
        "name": "t", "class": "read", "description": "d", "input_schema": {"type": "object"},
        "ttl": 60
    }))
    .unwrap_err();
    assert!(misspelt.to_string().contains("`ttl`"), "{misspelt}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[test]
fn a_misspelled_class_names_the_tool_and_the_nearest_class() {
    let err = serde_json::from_value::<ToolSpec>(serde_json::json!({
        "name": "open_ticket",
        "class": "idempotent-write",
        "description": "Open a ticket.",
        "input_schema": {"type": "object"}
    }))
    .unwrap_err()
    .to_string();
    assert!(err.contains("tool `open_ticket`"), "{err}");
    assert!(err.contains("did you mean `idempotent_write`"), "{err}");
}

#[test]
fn a_spec_records_its_handler_version() {
    let runs = Arc::new(AtomicU32::new(0));
    let given = def(spec(json!({"version": "2026-12"})), &runs).unwrap();
    assert_eq!(given.version(), "2026-12");
    assert_eq!(given.contract(Duration::from_secs(60)).version, "2026-12");
    assert_eq!(
        def(spec(json!({})), &runs).unwrap().version(),
        "1",
        "the default"
    );
    let e = def(spec(json!({"version": "  "})), &runs)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("open_ticket") && e.contains("handler version cannot be empty"),
        "{e}"
    );
}

/// A tool read from data attaches what data cannot say, as a builder tool does: a verify hook
/// that settles an Unknown outcome, and a natural key computed by a function.
#[tokio::test]
async fn a_spec_tool_carries_a_verify_hook_and_a_natural_key_function() {
    use idem::{MemoryStore, Verified, store::ManualClock};
    let sent = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let spec: ToolSpec = serde_json::from_value(json!({
        "name": "send_invoice",
        "class": "non_idempotent_write",
        "description": "Send an invoice to a customer.",
        "input_schema": {"type": "object", "properties": {
            "customer": {"type": "string"}, "month": {"type": "string"}}},
        "lease_secs": 1,
        "verify_after_secs": 1
    }))
    .unwrap();
    let log = Arc::clone(&sent);
    let looked_up = Arc::clone(&sent);
    let def = spec
        .into_builder(move |ctx: ToolContext, _args: Value| {
            let log = Arc::clone(&log);
            async move {
                // Sent, then the provider's answer is lost.
                log.lock().unwrap().push(ctx.idempotency_key().to_owned());
                Err::<Value, _>(ToolError::ambiguous("timed out after sending"))
            }
        })
        .unwrap()
        // One invoice per customer and month, however the model spells the month.
        .natural_key(|args: &Value| {
            Some(format!(
                "{}|{}",
                args["customer"].as_str()?,
                args["month"].as_str()?.to_lowercase()
            ))
        })
        .verify(move |ctx: ToolContext, _args: Value| {
            let looked_up = Arc::clone(&looked_up);
            async move {
                let key = ctx.idempotency_key().to_owned();
                Ok(match looked_up.lock().unwrap().contains(&key) {
                    true => Verified::Applied(json!({"sent": key})),
                    false => Verified::NotApplied,
                })
            }
        })
        .build()
        .unwrap();
    assert!(def.has_natural_key());
    let clock = Arc::new(ManualClock::new());
    let d = with_tool(def, Arc::new(MemoryStore::new().with_clock(clock.clone())));
    let call = |month: &str, id: &str| {
        ToolCall::new("send_invoice", json!({"customer": "c-9", "month": month})).with_call_id(id)
    };
    let err = d.dispatch(&call("March", "c1"), &run()).await.unwrap_err();
    assert_eq!(err.code(), "outcome_unknown", "{err}");
    clock.advance(Duration::from_secs(2));
    // Another call id, another spelling: the natural key finds the record, and the hook
    // settles it as sent.
    let settled = d.dispatch(&call("march", "c2"), &run()).await.unwrap();
    assert!(settled.deduplicated);
    assert_eq!(settled.output["sent"], json!(sent.lock().unwrap()[0]));
    assert_eq!(sent.lock().unwrap().len(), 1, "sent once");
}
