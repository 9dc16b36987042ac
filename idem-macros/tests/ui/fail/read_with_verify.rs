use idem::prelude::*;

async fn check(_ctx: ToolContext) -> Result<Verified, ToolError> {
    Ok(Verified::NotApplied)
}

/// Look a ticket up.
#[tool(class = "read", verify = check)]
fn get_ticket(ticket: u64) -> Result<u64, ToolError> {
    Ok(ticket)
}

fn main() {}
