use idem::prelude::*;

/// Count the tickets.
#[tool(class = "read")]
async fn count_tickets(ctx: &mut ToolContext, queue: String) -> Result<usize, ToolError> {
    let _ = ctx;
    Ok(queue.len())
}

fn main() {}
