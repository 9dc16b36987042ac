use idem::prelude::*;

/// Count the tickets.
#[tool(class = "read")]
fn count_tickets(queue: String) -> u32 {
    queue.len() as u32
}

fn main() {}
