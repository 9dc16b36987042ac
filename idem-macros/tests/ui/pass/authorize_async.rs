//! `authorize_async` names an async check that may read before anything is recorded: over
//! typed arguments or all of them, on a read or a write, beside `authorize`.

use std::sync::Arc;

use idem::prelude::*;
use serde::Deserialize;

/// The arguments the check reads (others are ignored).
#[derive(Deserialize)]
struct Order {
    order_id: String,
}

/// Who owns an order, as the order service answers.
async fn owner_of(order_id: &str) -> Result<String, String> {
    match order_id {
        "ord_a" => Ok("cus_a".to_owned()),
        "ord_b" => Ok("cus_b".to_owned()),
        other => Err(format!("the order service knows no order {other}")),
    }
}

async fn owns_the_order(ctx: ToolContext, args: Order) -> Result<(), String> {
    let owner = owner_of(&args.order_id).await?;
    match ctx.acting_for() == Some(owner.as_str()) {
        true => Ok(()),
        false => Err("an agent may act only on the orders of the customer it acts for".into()),
    }
}

fn some_customer(_args: &serde_json::Value, run: &RunContext) -> Result<(), String> {
    match run.acting_for {
        Some(_) => Ok(()),
        None => Err("the run must act for a customer".into()),
    }
}

async fn within_the_run(ctx: ToolContext, _args: serde_json::Value) -> Result<(), String> {
    match ctx.limit("reads") {
        Some(_) => Ok(()),
        None => Err("the run carries no `reads` limit".into()),
    }
}

/// Cancel an order.
#[tool(
    class = "idempotent_write",
    authorize = some_customer,
    authorize_async = owns_the_order
)]
async fn cancel_order(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

/// Read an order.
#[tool(class = "read", authorize_async = within_the_run)]
async fn read_order(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let registry = Registry::linked().unwrap();
    assert!(registry.get("cancel_order").unwrap().has_authorize_async());
    let dispatcher = Dispatcher::new(registry, Arc::new(MemoryStore::new())).unwrap();
    let run = RunContext::new("shop").acting_for("cus_a");
    let call = |order: &str, id: &str| {
        ToolCall::new("cancel_order", serde_json::json!({ "order_id": order })).with_call_id(id)
    };
    assert!(dispatcher.dispatch(&call("ord_a", "c1"), &run).await.is_ok());
    let theirs = dispatcher.dispatch(&call("ord_b", "c2"), &run).await.unwrap_err();
    assert_eq!(theirs.code(), "not_authorized");
    let unknown = dispatcher.dispatch(&call("ord_x", "c3"), &run).await.unwrap_err();
    assert!(unknown.to_string().contains("knows no order ord_x"), "{unknown}");

    let read = ToolCall::new("read_order", serde_json::json!({ "order_id": "ord_a" }));
    assert_eq!(dispatcher.dispatch(&read, &run).await.unwrap_err().code(), "not_authorized");
    let limited = run.clone().with_limit("reads", 10);
    assert!(dispatcher.dispatch(&read, &limited).await.is_ok());
}
