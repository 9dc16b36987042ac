use idem::prelude::*;

/// Unlock a door.
#[tool(class = "irreversible")]
async fn unlock(#[secret(always)] pin: String) -> Result<bool, ToolError> {
    Ok(pin.len() == 4)
}

fn main() {}
