use idem::prelude::*;

/// Charge a card.
#[tool(class = "non_idempotent_write", version = 2)]
fn charge(cents: u64) -> Result<u64, ToolError> {
    Ok(cents)
}

fn main() {}
