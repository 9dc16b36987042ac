use idem::prelude::*;

/// Open a ticket.
#[tool(class = "idempotent_write", on_key_reuse = "replay")]
fn open_ticket(title: String) -> Result<String, ToolError> {
    Ok(title)
}

fn main() {}
