use idem::prelude::*;

/// Charge a card.
#[tool(class = "non_idempotent_write", version = " ")]
fn charge(cents: u64) -> Result<u64, ToolError> {
    Ok(cents)
}

fn main() {}
