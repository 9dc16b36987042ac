use idem::prelude::*;

fn own_orders(_args: &serde_json::Value) -> bool {
    true
}

/// Cancel an order.
#[tool(class = "idempotent_write", authorize = own_orders)]
async fn cancel_order(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn main() {}
