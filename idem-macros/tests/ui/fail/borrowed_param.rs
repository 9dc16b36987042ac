use idem::prelude::*;

/// Greet someone.
#[tool(class = "read")]
fn greet(name: &str) -> Result<String, ToolError> {
    Ok(format!("hello {name}"))
}

fn main() {}
