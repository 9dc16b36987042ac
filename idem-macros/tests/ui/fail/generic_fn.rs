use idem::prelude::*;

/// Echo a value.
#[tool(class = "read")]
fn echo<T>(value: T) -> Result<T, ToolError> {
    Ok(value)
}

fn main() {}
