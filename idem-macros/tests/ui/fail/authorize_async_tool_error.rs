use idem::prelude::*;
use serde::Deserialize;

#[derive(Deserialize)]
struct Order {
    order_id: String,
}

// Written like a precondition: its error is a `ToolError`, not the refusal's words.
async fn owns_the_order(_ctx: ToolContext, args: Order) -> Result<(), ToolError> {
    let _ = args.order_id;
    Ok(())
}

/// Cancel an order.
#[tool(class = "idempotent_write", authorize_async = owns_the_order)]
async fn cancel_order(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn main() {}
