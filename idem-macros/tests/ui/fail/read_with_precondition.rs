use idem::prelude::*;

async fn still_open(_ctx: ToolContext, _args: serde_json::Value) -> Result<(), ToolError> {
    Ok(())
}

/// Look a ticket up.
#[tool(class = "read", precondition = still_open)]
fn get_ticket(ticket: u64) -> Result<u64, ToolError> {
    Ok(ticket)
}

fn main() {}
