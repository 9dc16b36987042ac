use idem::prelude::*;

fn always(_args: &serde_json::Value, _run: &RunContext) -> bool {
    true
}

/// Look a ticket up.
#[tool(class = "read", approve_when = always)]
fn get_ticket(ticket: u64) -> Result<u64, ToolError> {
    Ok(ticket)
}

fn main() {}
