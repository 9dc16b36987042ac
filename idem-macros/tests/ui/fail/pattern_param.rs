use idem::prelude::*;

/// Add two numbers.
#[tool(class = "read")]
fn add((a, b): (u32, u32)) -> Result<u32, ToolError> {
    Ok(a + b)
}

fn main() {}
