use idem::prelude::*;

/// Refund part of an order.
#[tool(class = "non_idempotent_write", approvers = 2)]
fn refund(amount: u64) -> Result<u64, ToolError> {
    Ok(amount)
}

fn main() {}
