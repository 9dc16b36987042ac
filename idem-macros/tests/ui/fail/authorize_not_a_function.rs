use idem::prelude::*;

/// Cancel an order.
#[tool(class = "idempotent_write", authorize = "own_orders")]
async fn cancel_order(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn main() {}
