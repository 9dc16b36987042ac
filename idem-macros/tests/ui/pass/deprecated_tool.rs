//! `#[deprecated]` on a tool warns where the user names it, not on the macro's own code.

#![deny(deprecated)]

use idem::prelude::*;

/// Look up the weather (use `weather_v2`).
#[deprecated(note = "use weather_v2")]
#[tool(class = "read")]
async fn weather(city: String) -> Result<String, ToolError> {
    Ok(city)
}

fn main() {
    let registry = Registry::linked().unwrap();
    assert!(registry.get("weather").is_some());
}
