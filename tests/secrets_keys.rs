//! An output or a step's value keyed by a secret: the key is cut like a string value, in the
//! answer and in the record, and no two keys merge into one.

mod support;

use std::sync::Arc;

use idem::prelude::*;
use idem::{MemoryStore, SecretKey, record::StateKind, store::ListFilter};
use serde_json::{Map, Value, json};
use support::dispatcher::linked;

const CARD: &str = "4111111111111111";
/// A short secret (under `CUT_INSIDE_VALUES`): cut where a whole key equals it.
const CODE: &str = "Zq7";

fn key() -> SecretKey {
    SecretKey::new(*b"an example key of 32 bytes long!").unwrap()
}

/// Everything a store keeps about its records, as text.
async fn stored(store: &MemoryStore) -> String {
    let mut all = String::new();
    for state in [
        StateKind::InProgress,
        StateKind::Completed,
        StateKind::Unknown,
    ] {
        let filter = ListFilter {
            state: Some(state),
            ..ListFilter::default()
        };
        all.push_str(&format!("{:?}", store.list(filter).await.unwrap()));
    }
    all
}

/// Put a card on file, answering (carelessly) with the card and its code as keys.
#[tool(class = "idempotent_write")]
async fn put_card_on_file(
    /// The card number.
    #[secret]
    card: String,
    /// The card's access code.
    #[secret]
    code: String,
) -> Result<Value, ToolError> {
    let mut answer = Map::new();
    answer.insert(card, json!("on file"));
    answer.insert(code, json!("set"));
    answer.insert("[redacted]".to_owned(), json!("a key of the tool's own"));
    Ok(Value::Object(answer))
}

#[tokio::test]
async fn an_output_keyed_by_a_secret_is_returned_and_recorded_with_the_key_cut() {
    let store = Arc::new(MemoryStore::new());
    let d = linked(store.clone()).with_secret_key(key());
    let run = RunContext::new("t");
    let call =
        ToolCall::new("put_card_on_file", json!({"card": CARD, "code": CODE})).with_key("card-1");
    let first = d.dispatch(&call, &run).await.unwrap();
    assert_eq!(
        first.output,
        json!({
            "[redacted 2]": "on file",
            "[redacted 3]": "set",
            "[redacted]": "a key of the tool's own",
        }),
        "every value is kept, under a key of its own"
    );
    // The tool's order (with all features, serde_json keeps an object's order: rig needs it).
    assert_eq!(
        first.output_json,
        r#"{"[redacted 2]":"on file","[redacted 3]":"set","[redacted]":"a key of the tool's own"}"#,
        "in the order the tool gave its keys"
    );
    for secret in [CARD, CODE] {
        assert!(!first.output_json.contains(secret), "{}", first.output_json);
    }
    let text = stored(&store).await;
    for secret in [CARD, CODE] {
        assert!(!text.contains(secret), "the record holds {secret}: {text}");
    }
    let again = d.dispatch(&call, &run).await.unwrap();
    assert!(again.deduplicated);
    assert_eq!(again.output_json, first.output_json);
}

/// Link a card and journal the provider's answer, which is keyed by the card.
#[tool(class = "idempotent_write", max_attempts = 1)]
async fn link_card(
    ctx: &ToolContext,
    /// The card number.
    #[secret]
    card: String,
) -> Result<Value, ToolError> {
    ctx.step("link", || async {
        let mut answer = Map::new();
        answer.insert(card.clone(), json!("linked"));
        Ok(Value::Object(answer))
    })
    .await
}

#[tokio::test]
async fn a_step_whose_value_is_keyed_by_a_secret_is_refused_and_journals_nothing() {
    let store = Arc::new(MemoryStore::new());
    let d = linked(store.clone()).with_secret_key(key());
    let call = ToolCall::new("link_card", json!({"card": CARD})).with_key("link-1");
    let err = d
        .dispatch(&call, &RunContext::new("t"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("not journaled"), "{err}");
    assert!(err.contains("`/card`"), "names the argument: {err}");
    assert!(!err.contains(CARD), "{err}");
    let text = stored(&store).await;
    assert!(!text.contains(CARD), "the record holds the card: {text}");
    assert!(!text.contains("linked"), "nothing journaled: {text}");
}
