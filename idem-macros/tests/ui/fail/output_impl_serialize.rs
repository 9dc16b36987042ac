use idem::prelude::*;

/// Look a ticket up.
#[tool(class = "read")]
fn get_ticket(ticket: u64) -> Result<impl serde::Serialize, ToolError> {
    Ok(ticket)
}

fn main() {}
