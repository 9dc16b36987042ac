use idem::prelude::*;

fn refund_limits() -> u64 {
    3
}

/// Refund an order.
#[tool(class = "non_idempotent_write", limits = refund_limits)]
async fn refund(order: String) -> Result<String, ToolError> {
    Ok(order)
}

fn main() {}
