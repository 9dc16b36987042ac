use idem::prelude::*;

struct Weather {
    celsius: i32,
}

/// Look up the weather.
#[tool(class = "read")]
fn get_weather(city: String) -> Result<Weather, ToolError> {
    Ok(Weather {
        celsius: city.len() as i32,
    })
}

fn main() {}
