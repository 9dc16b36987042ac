use idem::prelude::*;

struct Oops;

/// Look up the weather.
#[tool(class = "read")]
fn get_weather(city: String) -> Result<String, Oops> {
    Ok(city)
}

fn main() {}
