//! Secret arguments never appear in clear in a record, an error, a log line or an approval
//! request, while distinct secrets still give distinct fingerprints.

mod support;

use std::sync::{Arc, Mutex};

use idem::prelude::*;
use idem::{MemoryStore, SecretKey, ToolDef, ToolSpec, record::StateKind, store::ListFilter};
use serde_json::{Value, json};
use support::dispatcher::{linked, with_tool};

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
    let d = linked(store.clone()).with_secret_key(key());
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
    let d = linked(store.clone()).with_secret_key(key());
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

/// Everything logged by this test binary so far, at every level: one subscriber for the
/// whole process, since tracing caches per call site whether anyone listens.
fn logged() -> String {
    String::from_utf8_lossy(&LOG.lock().unwrap()).into_owned()
}

static LOG: Mutex<Vec<u8>> = Mutex::new(Vec::new());

fn capture_logs() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        struct Sink;
        impl std::io::Write for Sink {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                LOG.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(|| Sink)
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("one subscriber");
    });
}

#[tokio::test]
async fn log_lines_do_not_carry_a_secret() {
    capture_logs();
    let d = linked(Arc::new(MemoryStore::new())).with_secret_key(key());
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
    let logs = logged();
    assert!(!logs.is_empty());
    assert!(!logs.contains(CARD), "{logs}");
}

#[tokio::test]
async fn a_tool_with_secrets_needs_a_key() {
    let d = linked(Arc::new(MemoryStore::new()));
    let call = ToolCall::new("charge", json!({"amount": 1, "card": CARD})).with_key("k");
    let e = d.dispatch(&call, &RunContext::new("t")).await.unwrap_err();
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
    let d = with_tool(def, Arc::new(MemoryStore::new())).with_secret_key(key());
    let call = ToolCall::new("unlock", json!({"door": "front", "pin": "1234"})).with_key("k");
    let e = d.dispatch(&call, &RunContext::new("t")).await.unwrap_err();
    let DispatchError::ApprovalRequired { request } = e else {
        panic!("{e:?}")
    };
    assert_eq!(request.arguments["door"], "front");
    assert!(!request.arguments.to_string().contains("1234"));
    // So does the pending approval the store keeps for operators.
    let pending = d
        .approvals()
        .pending(&idem::store::approvals::ApprovalFilter::default())
        .await
        .unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].arguments, request.arguments);
    assert!(!serde_json::to_string(&pending[0]).unwrap().contains("1234"));
    // Approving what was shown runs the call.
    let run = RunContext::new("t").approve(
        support::dispatcher::approver().approve_for(&request, std::time::Duration::from_secs(3600)),
    );
    assert_eq!(d.dispatch(&call, &run).await.unwrap().output, json!("open"));
}

#[tokio::test]
async fn a_refusal_logs_where_the_arguments_are_wrong_not_their_values() {
    capture_logs();
    let d = linked(Arc::new(MemoryStore::new())).with_secret_key(key());
    // `amount` is not a secret, but a refusal's log line still carries no argument value.
    let call = ToolCall::new("charge", json!({"amount": -98765, "card": CARD})).with_key("k");
    let e = d.dispatch(&call, &RunContext::new("t")).await.unwrap_err();
    assert!(e.to_string().contains("98765"), "the caller is told: {e}");
    let logs = logged();
    assert!(logs.contains("/amount"), "{logs}");
    assert!(!logs.contains("98765"), "{logs}");
}

fn unlock_with(schema: Value, natural_key: bool) -> ToolDef {
    let mut spec = json!({
        "name": "unlock", "class": "non_idempotent_write", "description": "Unlock a door.",
        "input_schema": schema, "secret": ["/pin"],
        "lease_secs": 1, "verify_after_secs": 0
    });
    if natural_key {
        spec["natural_key"] = json!(["/pin"]);
    }
    let spec: ToolSpec = serde_json::from_value(spec).unwrap();
    spec.into_def(|_ctx, _args| async move { Err(ToolError::ambiguous("the lock did not answer")) })
        .unwrap()
}

#[tokio::test]
async fn a_long_secret_is_not_quoted_by_a_validation_error() {
    let schema = json!({"type": "object", "properties": {
        "pin": {"type": "string", "pattern": "^[0-9]+$"}}});
    let d =
        with_tool(unlock_with(schema, false), Arc::new(MemoryStore::new())).with_secret_key(key());
    // Longer than a validator quotes whole: cut, its prefix would escape a plain search.
    let token = format!("tok_{}", "abcdefghij".repeat(10));
    let call = ToolCall::new("unlock", json!({"pin": token})).with_key("k");
    let e = d.dispatch(&call, &RunContext::new("t")).await.unwrap_err();
    assert!(matches!(e, DispatchError::InvalidArguments { .. }), "{e:?}");
    assert!(!format!("{e} {e:?}").contains("abcdefghij"), "{e:?}");
    assert!(e.to_string().contains("/pin"), "{e}");
}

#[tokio::test]
async fn a_natural_key_over_a_secret_is_derived_from_its_seal() {
    let schema = json!({"type": "object", "properties": {"pin": {"type": "string"}}});
    let d =
        with_tool(unlock_with(schema, true), Arc::new(MemoryStore::new())).with_secret_key(key());
    let run = RunContext::new("t");
    let key_of = |pin: &str| {
        d.record_key(&ToolCall::new("unlock", json!({"pin": pin})), &run)
            .unwrap()
            .unwrap()
    };
    // What anyone could compute from a guessed PIN, without the secret key.
    let guessable = idem::key::LogicalKey::derive(
        idem::dispatch::DEFAULT_NAMESPACE,
        "t",
        "unlock",
        &idem::key::KeyMaterial::Natural {
            key: r#"["1234"]"#.to_owned(),
        },
    )
    .0;
    assert_ne!(key_of("1234"), guessable);
    assert_eq!(key_of("1234"), key_of("1234"));
    assert_ne!(key_of("1234"), key_of("1235"));
}

#[tokio::test]
async fn a_verify_hook_error_does_not_echo_a_secret() {
    let clock = Arc::new(idem::store::ManualClock::new());
    let tool = ToolDef::builder("unlock", ToolClass::NonIdempotentWrite)
        .description("Unlock a door.")
        .input_schema(json!({"type": "object", "properties": {"pin": {"type": "string"}}}))
        .secret("/pin")
        .policy(idem::ToolPolicy {
            lease: std::time::Duration::from_secs(1),
            verify_after: std::time::Duration::ZERO,
            ..idem::ToolPolicy::default()
        })
        .handler(|_ctx: ToolContext, _args: Value| async move {
            Err::<Value, _>(ToolError::ambiguous("the lock did not answer"))
        })
        .verify(|_ctx: ToolContext, args: Value| async move {
            Err(ToolError::retryable(format!(
                "lookup of pin {} failed",
                args["pin"]
            )))
        })
        .build()
        .unwrap();
    let d = with_tool(tool, Arc::new(MemoryStore::new().with_clock(clock.clone())))
        .with_secret_key(key());
    let call = ToolCall::new("unlock", json!({"pin": "98127"})).with_key("k");
    let run = RunContext::new("t");
    assert!(d.dispatch(&call, &run).await.is_err());
    clock.advance(std::time::Duration::from_secs(2));
    let e = d.dispatch(&call, &run).await.unwrap_err();
    assert!(format!("{e}").contains("verification failed"), "{e}");
    assert!(!format!("{e} {e:?}").contains("98127"), "{e:?}");
}

/// Verify a card.
#[tool(class = "read")]
async fn check_card(
    #[serde(default, rename = "cardNumber")]
    #[secret]
    card: String,
) -> Result<bool, ToolError> {
    Ok(!card.is_empty())
}

#[test]
fn a_renamed_secret_parameter_is_sealed_under_its_json_name() {
    let registry = Registry::linked().unwrap();
    let def = registry.get("check_card").expect("registered");
    assert_eq!(def.secrets(), ["/cardNumber"]);
}

/// Log in to a provider and say with which token (a careless tool echoing its secret).
#[tool(class = "idempotent_write")]
async fn connect_account(
    ctx: &ToolContext,
    account: String,
    /// The provider's API token.
    #[secret]
    token: String,
) -> Result<Value, ToolError> {
    // A journaled step (its value holds no secret: see the test of one that does).
    let session: String = ctx
        .step("login", || async { Ok(format!("session for {account}")) })
        .await?;
    Ok(json!({"account": account, "used": token, "session": session, "digits": 4242}))
}

/// Look an account up, echoing the token it was asked with.
#[tool(class = "read")]
async fn peek_account(#[secret] token: String) -> Result<String, ToolError> {
    Ok(format!("read with {token}"))
}

#[tokio::test]
async fn an_output_repeating_a_secret_is_recorded_and_returned_without_it() {
    let store = Arc::new(MemoryStore::new());
    let d = linked(store.clone()).with_secret_key(key());
    let run = RunContext::new("t");
    let token = "tok_live_9f8e7d6c5b4a";
    let call = ToolCall::new(
        "connect_account",
        json!({"account": "acme", "token": token}),
    )
    .with_key("connect-1");
    let first = d.dispatch(&call, &run).await.unwrap();
    assert!(!first.output_json.contains(token), "{}", first.output_json);
    assert_eq!(first.output["used"], json!("[redacted]"));
    assert_eq!(first.output["session"], json!("session for acme"));
    assert_eq!(first.output["account"], json!("acme"));
    assert_eq!(
        first.output["digits"],
        json!(4242),
        "only the secret's text is cut"
    );
    let text = stored(&store).await;
    assert!(!text.contains(token), "the record holds the token: {text}");
    // The replay and the first answer are alike.
    let again = d.dispatch(&call, &run).await.unwrap();
    assert!(again.deduplicated);
    assert_eq!(again.output_json, first.output_json);

    let read = ToolCall::new("peek_account", json!({"token": token}));
    let peeked = d.dispatch(&read, &run).await.unwrap();
    assert_eq!(peeked.output, json!("read with [redacted]"));
}

/// Authorize a payment with a card's security code: the provider's answer, journaled.
#[tool(class = "idempotent_write")]
async fn authorize_payment(
    ctx: &ToolContext,
    amount: u64,
    /// The card's security code.
    #[secret]
    cvc: String,
) -> Result<Value, ToolError> {
    // The provider's authorization id and a count: data that happens to hold the CVC's digit.
    let auth: Value = ctx
        .step("authorize", || async {
            Ok(json!({"id": "auth_1x71", "holds": 1, "amount": amount}))
        })
        .await?;
    if ctx.attempt() == 1 {
        // The first attempt fails after the step: the retry reads the step back.
        return Err(ToolError::retryable("the ledger is busy"));
    }
    let _ = cvc;
    Ok(json!({"authorization": auth, "attempt": ctx.attempt()}))
}

#[tokio::test]
async fn a_short_secret_leaves_data_that_happens_to_hold_its_digits_alone() {
    let store = Arc::new(MemoryStore::new());
    let d = linked(store.clone()).with_secret_key(key());
    let call = ToolCall::new("authorize_payment", json!({"amount": 100, "cvc": "1"}))
        .with_key("authorize-1");
    let done = d.dispatch(&call, &RunContext::new("t")).await.unwrap();
    assert_eq!(done.output["attempt"], 2, "the retry read the step back");
    assert_eq!(
        done.output["authorization"],
        json!({"id": "auth_1x71", "holds": 1, "amount": 100}),
        "the step's value reads back as it was made, and is returned unchanged"
    );
}

/// Log in and journal the provider's answer, which (carelessly) repeats the token.
#[tool(class = "idempotent_write", max_attempts = 1)]
async fn log_in(
    ctx: &ToolContext,
    /// The provider's API token.
    #[secret]
    token: String,
) -> Result<String, ToolError> {
    ctx.step("login", || async { Ok(format!("session for {token}")) })
        .await
}

#[tokio::test]
async fn a_step_whose_value_holds_a_secret_is_refused_naming_it_and_journals_nothing() {
    let store = Arc::new(MemoryStore::new());
    let d = linked(store.clone()).with_secret_key(key());
    let token = "tok_live_9f8e7d6c5b4a";
    let call = ToolCall::new("log_in", json!({"token": token})).with_key("login-1");
    let err = d
        .dispatch(&call, &RunContext::new("t"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("`/token`"), "names the argument: {err}");
    assert!(err.contains("not journaled"), "{err}");
    assert!(!err.contains(token), "{err}");
    let text = stored(&store).await;
    assert!(!text.contains(token), "the record holds the token: {text}");
    assert!(!text.contains("session for"), "nothing journaled: {text}");
}
