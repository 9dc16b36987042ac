use idem::prelude::*;

/// Look a ticket up.
#[tool(class = "read")]
fn get_ticket(ticket: u64, #[cfg(any())] verbose: bool) -> Result<u64, ToolError> {
    Ok(ticket)
}

fn main() {}
