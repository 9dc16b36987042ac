use idem::prelude::*;

/// Look a ticket up.
#[tool(class = "read", approvers = 2)]
fn get_ticket(ticket: u64) -> Result<u64, ToolError> {
    Ok(ticket)
}

fn main() {}
