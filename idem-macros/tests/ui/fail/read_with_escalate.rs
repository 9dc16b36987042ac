use idem::prelude::*;

/// Look an order up.
#[tool(class = "read", escalate = "failures")]
fn get_order(id: String) -> Result<String, ToolError> {
    Ok(id)
}

fn main() {}
