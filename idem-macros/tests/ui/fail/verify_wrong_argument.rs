use idem::prelude::*;

async fn check_sent(_ctx: ToolContext) -> Result<Verified, ToolError> {
    Ok(Verified::NotApplied)
}

/// Send an email.
#[tool(class = "non_idempotent_write", verify = check_sent)]
async fn send_email(to: String) -> Result<String, ToolError> {
    Ok(to)
}

fn main() {}
