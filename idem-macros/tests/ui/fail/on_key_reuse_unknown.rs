use idem::prelude::*;

/// Find or create a ticket.
#[tool(class = "idempotent_write", on_key_reuse = "ignore")]
fn open_ticket(title: String) -> Result<String, ToolError> {
    Ok(title)
}

fn main() {}
