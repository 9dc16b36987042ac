use idem::prelude::*;

/// Set a ticket's status.
#[tool(class = "idempotent_write")]
fn set_status(ctx: &ToolContext, ticket: u64, again: &ToolContext) -> Result<u64, ToolError> {
    let _ = (ctx, again);
    Ok(ticket)
}

fn main() {}
