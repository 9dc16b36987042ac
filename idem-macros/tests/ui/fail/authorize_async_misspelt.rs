use idem::prelude::*;

async fn owns_the_order(_ctx: ToolContext, _args: serde_json::Value) -> Result<(), String> {
    Ok(())
}

/// Cancel an order.
#[tool(class = "idempotent_write", authorise_async = owns_the_order)]
async fn cancel_order(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn main() {}
