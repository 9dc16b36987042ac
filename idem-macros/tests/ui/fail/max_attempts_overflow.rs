use idem::prelude::*;

/// Set a ticket's status.
#[tool(class = "idempotent_write", max_attempts = 99999999999)]
fn set_status(ticket: u64) -> Result<u64, ToolError> {
    Ok(ticket)
}

fn main() {}
