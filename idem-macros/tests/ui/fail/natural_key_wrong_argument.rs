use idem::prelude::*;

fn by_order(order: &str) -> Option<String> {
    Some(order.to_owned())
}

/// Refund an order.
#[tool(class = "idempotent_write", natural_key = by_order)]
async fn refund(order: String) -> Result<String, ToolError> {
    Ok(order)
}

fn main() {}
