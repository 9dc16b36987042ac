//! The body only ever sees arguments that satisfy the published schema, whatever serde
//! attributes its parameter types use: the arguments are checked again in the form the body
//! reads them (after the typed round trip), not only as the model sent them.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use idem::MemoryStore;
use idem::prelude::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use support::dispatcher::linked;

static SEEN: AtomicUsize = AtomicUsize::new(0);
/// The tests of this file run on parallel threads and share `SEEN`: each holds this lock so
/// that one test's bodies never count as another's.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn ten_thousand() -> u32 {
    10_000
}

/// An order line; `qty` is accepted as an alias.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
struct Line {
    #[serde(alias = "qty", default)]
    #[schemars(range(max = 10))]
    quantity: u32,
}

/// A line whose omitted quantity defaults to a value the schema forbids.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
struct Defaulted {
    #[serde(default = "ten_thousand")]
    #[schemars(range(max = 10))]
    quantity: u32,
}

/// A cart with its limits flattened into it.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
struct Cart {
    sku: String,
    #[serde(flatten)]
    line: Line,
}

/// An amount given either as a line or as a note.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
enum Amount {
    Line(Line),
    Note { note: String },
}

/// Order with an aliased quantity.
#[tool(class = "idempotent_write")]
async fn order_alias(line: Line) -> Result<u32, ToolError> {
    SEEN.fetch_add(1, Ordering::SeqCst);
    assert!(line.quantity <= 10, "the body saw {}", line.quantity);
    Ok(line.quantity)
}

/// Order with a defaulted quantity.
#[tool(class = "idempotent_write")]
async fn order_default(line: Defaulted) -> Result<u32, ToolError> {
    SEEN.fetch_add(1, Ordering::SeqCst);
    assert!(line.quantity <= 10, "the body saw {}", line.quantity);
    Ok(line.quantity)
}

/// Order with flattened limits.
#[tool(class = "idempotent_write")]
async fn order_flatten(cart: Cart) -> Result<u32, ToolError> {
    SEEN.fetch_add(1, Ordering::SeqCst);
    assert!(
        cart.line.quantity <= 10,
        "the body saw {}",
        cart.line.quantity
    );
    Ok(cart.line.quantity)
}

/// Order with an untagged amount.
#[tool(class = "idempotent_write")]
async fn order_untagged(amount: Amount) -> Result<u32, ToolError> {
    SEEN.fetch_add(1, Ordering::SeqCst);
    match amount {
        Amount::Line(line) => {
            assert!(line.quantity <= 10, "the body saw {}", line.quantity);
            Ok(line.quantity)
        }
        Amount::Note { .. } => Ok(0),
    }
}

async fn refused(tool: &str, arguments: serde_json::Value) -> DispatchError {
    let _serial = SERIAL.lock().await;
    let d = linked(Arc::new(MemoryStore::new()));
    let before = SEEN.load(Ordering::SeqCst);
    let call = ToolCall::new(tool, arguments).with_call_id("c1");
    let result = d.dispatch(&call, &RunContext::new("t")).await;
    assert_eq!(
        SEEN.load(Ordering::SeqCst),
        before,
        "{tool}: the body ran: {result:?}"
    );
    let e = result.expect_err("refused");
    assert!(
        matches!(&e, DispatchError::InvalidArguments { message, .. } if message.contains("10")),
        "{tool}: {e:?}"
    );
    e
}

#[tokio::test]
async fn an_alias_cannot_bypass_a_bound() {
    refused("order_alias", json!({"line": {"qty": 1000}})).await;
}

#[tokio::test]
async fn a_default_cannot_bypass_a_bound() {
    refused("order_default", json!({"line": {}})).await;
}

#[tokio::test]
async fn a_flattened_field_cannot_bypass_a_bound() {
    refused(
        "order_flatten",
        json!({"cart": {"sku": "A-1", "qty": 1000}}),
    )
    .await;
}

#[tokio::test]
async fn an_untagged_enum_cannot_bypass_a_bound() {
    refused("order_untagged", json!({"amount": {"qty": 1000}})).await;
}

#[tokio::test]
async fn values_within_the_bounds_still_run() {
    let _serial = SERIAL.lock().await;
    let d = linked(Arc::new(MemoryStore::new()));
    let run = RunContext::new("t");
    for (tool, args) in [
        ("order_alias", json!({"line": {"qty": 3}})),
        ("order_flatten", json!({"cart": {"sku": "A-1", "qty": 3}})),
        ("order_untagged", json!({"amount": {"quantity": 3}})),
    ] {
        let call = ToolCall::new(tool, args).with_call_id("ok");
        let out = d.dispatch(&call, &run).await.unwrap();
        assert_eq!(out.output, json!(3), "{tool}");
    }
}
