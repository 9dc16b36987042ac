use idem::prelude::*;

/// Close a ticket.
#[tool(class = "idempotent_write")]
fn close_ticket(ticket: u64) {
    let _ = ticket;
}

fn main() {}
