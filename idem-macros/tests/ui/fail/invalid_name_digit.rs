use idem::prelude::*;

/// Send an email.
#[tool(class = "non_idempotent_write", name = "2fa_send")]
fn send_code(to: String) -> Result<String, ToolError> {
    Ok(to)
}

fn main() {}
