//! Secret arguments never appear in clear in a record, an error, a log line or an approval
//! request, while distinct secrets still give distinct fingerprints.

use std::sync::{Arc, Mutex};

use idem::prelude::*;
use idem::{ListFilter, MemoryStore, SecretKey, StateKind, ToolDef, ToolSpec};
use serde_json::{Value, json};

const CARD: &str = "4242424242424242";

fn key() -> SecretKey {
    SecretKey::new(*b"an example key of 32 bytes long!").unwrap()
}

/// Charge a card.
#[tool(class = "non_idempotent_write")]
async fn charge(
    /// The amount, in cents.
    amount: u64,
    /// The card number.
    #[secret]
    card: String,
) -> Result<String, ToolError> {
    if amount == 0 {
        return Err(ToolError::terminal(format!(
            "card {card} declined for a zero amount"
        )));
    }
    Ok(format!(
        "charged {amount} to a card ending {}",
        &card[card.len() - 4..]
    ))
}

fn dispatcher(store: Arc<MemoryStore>) -> Dispatcher {
    Dispatcher::new(Registry::linked().unwrap(), store).with_secret_key(key())
}

/// Everything a store keeps about its records, as text.
async fn stored(store: &MemoryStore) -> String {
    let mut all = String::new();
    for state in [
        StateKind::InProgress,
        StateKind::Completed,
        StateKind::Unknown,
    ] {
        let records = store
            .list(ListFilter {
                state: Some(state),
                ..ListFilter::default()
            })
            .await
            .unwrap();
        all.push_str(&format!("{records:?}"));
    }
    all
}

#[tokio::test]
async fn a_secret_is_sealed_in_the_record_and_its_fingerprint_still_tells_cards_apart() {
    let store = Arc::new(MemoryStore::new());
    let d = dispatcher(store.clone());
    let run = RunContext::new("t");
    let call = ToolCall::new("charge", json!({"amount": 500, "card": CARD})).with_key("order-1");
    let done = d.dispatch(&call, &run).await.unwrap();
    assert_eq!(done.output, json!("charged 500 to a card ending 4242"));
    let text = stored(&store).await;
    assert!(
        !text.contains(CARD),
        "the card number is stored in clear: {text}"
    );
    assert!(text.contains("[secret hmac-sha256:"), "{text}");
    // The same call replays; another card under the same key is a reused key.
    assert!(d.dispatch(&call, &run).await.unwrap().deduplicated);
    let other = ToolCall::new("charge", json!({"amount": 500, "card": "4000000000000002"}))
        .with_key("order-1");
    assert!(matches!(
        d.dispatch(&other, &run).await,
        Err(DispatchError::KeyReused { .. })
    ));
}

#[tokio::test]
async fn errors_and_recorded_failures_do_not_echo_a_secret() {
    let store = Arc::new(MemoryStore::new());
    let d = dispatcher(store.clone());
    let run = RunContext::new("t");
    // A validation error (the card must be a string; a number is echoed by the validator).
    let bad = ToolCall::new(
        "charge",
        json!({"amount": "lots", "card": 4242424242424242u64}),
    )
    .with_key("order-2");
    let e = d.dispatch(&bad, &run).await.unwrap_err();
    assert!(!format!("{e} {e:?}").contains(CARD), "{e:?}");
    let bad_card = ToolCall::new("charge", json!({"amount": 1, "card": 4242424242424242u64}))
        .with_key("order-3");
    let e = d.dispatch(&bad_card, &run).await.unwrap_err();
    assert!(matches!(e, DispatchError::InvalidArguments { .. }), "{e:?}");
    assert!(!format!("{e} {e:?}").contains(CARD), "{e:?}");
    // A terminal error whose message names the card: recorded and returned without it.
    let zero = ToolCall::new("charge", json!({"amount": 0, "card": CARD})).with_key("order-4");
    let e = d.dispatch(&zero, &run).await.unwrap_err();
    assert!(!format!("{e} {e:?}").contains(CARD), "{e:?}");
    assert!(format!("{e}").contains("[redacted]"), "{e}");
    let text = stored(&store).await;
    assert!(!text.contains(CARD), "{text}");
}

#[tokio::test]
async fn log_lines_do_not_carry_a_secret() {
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sink = Sink::default();
    let writer = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let d = dispatcher(Arc::new(MemoryStore::new()));
    let run = RunContext::new("t");
    for args in [
        json!({"amount": 0, "card": CARD}),
        json!({"amount": 1, "card": 4242424242424242u64}),
        json!({"amount": 7, "card": CARD}),
    ] {
        let _ = d
            .dispatch(&ToolCall::new("charge", args).with_key("k"), &run)
            .await;
    }
    let logs = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    assert!(!logs.is_empty());
    assert!(!logs.contains(CARD), "{logs}");
}

#[tokio::test]
async fn a_tool_with_secrets_needs_a_key() {
    let d = Dispatcher::new(Registry::linked().unwrap(), Arc::new(MemoryStore::new()));
    let call = ToolCall::new("charge", json!({"amount": 1, "card": CARD})).with_key("k");
    let e = d.dispatch(&call, &RunContext::new("t")).await.unwrap_err();
    assert!(e.to_string().contains("98765"), "the caller is told: {e}");
    assert!(matches!(e, DispatchError::SecretKeyMissing { .. }), "{e:?}");
    assert!(e.to_string().contains("with_secret_key"), "{e}");
}

#[test]
fn builder_and_spec_mark_secrets_and_check_their_pointers() {
    let schema = json!({"type": "object", "properties": {"pin": {"type": "string"}},
                        "additionalProperties": false});
    let built = ToolDef::builder("unlock", ToolClass::Irreversible)
        .description("Unlock a door.")
        .input_schema(schema.clone())
        .secret("/pin")
        .handler(|_ctx: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
        .build()
        .unwrap();
    assert_eq!(built.secrets(), ["/pin"]);
    let typo = ToolDef::builder("unlock", ToolClass::Irreversible)
        .description("Unlock a door.")
        .input_schema(schema)
        .secret("/pni")
        .handler(|_ctx: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
        .build()
        .unwrap_err();
    assert!(typo.to_string().contains("`secret` entry `/pni`"), "{typo}");
    let spec: ToolSpec = serde_json::from_value(json!({
        "name": "unlock", "class": "irreversible", "description": "Unlock a door.",
        "input_schema": {"type": "object", "properties": {"pin": {"type": "string"}}},
        "secret": ["/pin"]
    }))
    .unwrap();
    let def = spec.into_def(|_ctx, args| async move { Ok(args) }).unwrap();
    assert_eq!(def.secrets(), ["/pin"]);
}

#[tokio::test]
async fn an_approval_request_shows_the_secret_sealed() {
    let spec: ToolSpec = serde_json::from_value(json!({
        "name": "unlock", "class": "irreversible", "description": "Unlock a door.",
        "input_schema": {"type": "object", "properties": {"door": {"type": "string"}, "pin": {"type": "string"}}},
        "secret": ["/pin"]
    }))
    .unwrap();
    let def = spec
        .into_def(|_ctx, _args| async move { Ok(json!("open")) })
        .unwrap();
    let d = Dispatcher::new(
        Registry::builder().add(def).build().unwrap(),
        Arc::new(MemoryStore::new()),
    )
    .with_secret_key(key());
    let call = ToolCall::new("unlock", json!({"door": "front", "pin": "1234"})).with_key("k");
    let e = d.dispatch(&call, &RunContext::new("t")).await.unwrap_err();
    assert!(e.to_string().contains("98765"), "the caller is told: {e}");
    let DispatchError::ApprovalRequired { request } = e else {
        panic!("{e:?}")
    };
    assert_eq!(request.arguments["door"], "front");
    assert!(!request.arguments.to_string().contains("1234"));
    // Approving what was shown runs the call.
    let run = RunContext::new("t").approve(request.approve());
    assert_eq!(d.dispatch(&call, &run).await.unwrap().output, json!("open"));
}

#[tokio::test]
async fn a_refusal_logs_where_the_arguments_are_wrong_not_their_values() {
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sink = Sink::default();
    let writer = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let d = dispatcher(Arc::new(MemoryStore::new()));
    // `amount` is not a secret, but a refusal's log line still carries no argument value.
    let call = ToolCall::new("charge", json!({"amount": -98765, "card": CARD})).with_key("k");
    let e = d.dispatch(&call, &RunContext::new("t")).await.unwrap_err();
    assert!(e.to_string().contains("98765"), "the caller is told: {e}");
    let logs = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("/amount"), "{logs}");
    assert!(!logs.contains("98765"), "{logs}");
}
