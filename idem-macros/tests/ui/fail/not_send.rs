use idem::prelude::*;
use std::rc::Rc;

/// Count the tickets.
#[tool(class = "read")]
async fn count_tickets(queue: String) -> Result<usize, ToolError> {
    let shared = Rc::new(queue);
    tokio::task::yield_now().await;
    Ok(shared.len())
}

fn main() {}
