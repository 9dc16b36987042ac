use idem::prelude::*;

/// Refund an order.
#[tool(class = "non_idempotent_write", limits = [3])]
async fn refund(order: String) -> Result<String, ToolError> {
    Ok(order)
}

fn main() {}
