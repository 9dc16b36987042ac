use idem::prelude::*;

/// Set a ticket's status.
#[tool(class = "idempotent_write", lease_secs = 0)]
fn set_status(ticket: u64) -> Result<u64, ToolError> {
    Ok(ticket)
}

fn main() {}
