use idem::ToolContext as Ctx;
use idem::prelude::*;

/// Count the tickets.
#[tool(class = "read")]
async fn count_tickets(ctx: &Ctx, queue: String) -> Result<usize, ToolError> {
    let _ = ctx;
    Ok(queue.len())
}

fn main() {}
