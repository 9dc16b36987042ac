use idem::prelude::*;

/// Look up the weather.
#[tool(class = "read", ttl = 5)]
fn get_weather(city: String) -> Result<String, ToolError> {
    Ok(city)
}

fn main() {}
