use idem::prelude::*;

/// Unlock a door.
#[tool(class = "irreversible")]
async fn unlock(#[secret] ctx: &ToolContext, pin: String) -> Result<bool, ToolError> {
    Ok(pin.len() == 4 && !ctx.idempotency_key().is_empty())
}

fn main() {}
