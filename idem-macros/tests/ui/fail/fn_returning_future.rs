use idem::prelude::*;
use std::future::Future;

/// Look up the weather.
#[tool(class = "read")]
fn get_weather(city: String) -> impl Future<Output = Result<String, ToolError>> {
    async move { Ok(city) }
}

fn main() {}
