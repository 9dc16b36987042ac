use idem::prelude::*;

/// Send a note.
#[tool(class = "non_idempotent_write", on_key_reuse = "reject")]
fn send_note(text: String) -> Result<String, ToolError> {
    Ok(text)
}

fn main() {}
