use idem::prelude::*;
use serde::Deserialize;

#[derive(Deserialize)]
struct Order {
    order_id: String,
}

// The synchronous form, which `authorize = owns_the_order` takes.
fn owns_the_order(args: &Order, run: &RunContext) -> Result<(), String> {
    match run.acting_for.as_deref() == Some(args.order_id.as_str()) {
        true => Ok(()),
        false => Err("not theirs".into()),
    }
}

/// Cancel an order.
#[tool(class = "idempotent_write", authorize_async = owns_the_order)]
async fn cancel_order(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn main() {}
