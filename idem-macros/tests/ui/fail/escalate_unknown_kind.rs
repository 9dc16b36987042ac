use idem::prelude::*;

/// Capture a reserved amount.
#[tool(class = "non_idempotent_write", escalate = "failure")]
fn capture(amount: u64) -> Result<u64, ToolError> {
    Ok(amount)
}

fn main() {}
