use idem::prelude::*;

/// Send an email.
#[tool(class = "non_idempotent_write", name = "send email")]
fn send_email(to: String) -> Result<String, ToolError> {
    Ok(to)
}

fn main() {}
