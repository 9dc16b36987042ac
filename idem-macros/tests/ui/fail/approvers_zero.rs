use idem::prelude::*;

/// Wire money.
#[tool(class = "irreversible", approvers = 0)]
fn wire(cents: u64) -> Result<u64, ToolError> {
    Ok(cents)
}

fn main() {}
