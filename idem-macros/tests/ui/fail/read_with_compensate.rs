use idem::prelude::*;
use idem::tool::Undo;

async fn undo(_ctx: ToolContext, _undo: Undo) -> Result<(), ToolError> {
    Ok(())
}

/// Look a ticket up.
#[tool(class = "read", compensate = undo)]
fn get_ticket(ticket: u64) -> Result<u64, ToolError> {
    Ok(ticket)
}

fn main() {}
