use idem::prelude::*;

/// Look up the weather.
#[tool]
fn get_weather(city: String) -> Result<String, ToolError> {
    Ok(city)
}

fn main() {}
