//! Descriptions written with `#[doc = concat!(..)]` or `#[doc = include_str!(..)]`: the tool's
//! description is what rustdoc shows.

use idem::prelude::*;

#[doc = concat!("Look up ", "the weather", ".")]
#[tool(class = "read")]
async fn weather(city: String) -> Result<String, ToolError> {
    Ok(city)
}

#[doc = include_str!("docs/summarise.md")]
#[tool(class = "read")]
fn summarise(text: String) -> Result<String, ToolError> {
    Ok(text)
}

/// Translate a text.
#[doc = concat!("Into ", "French.")]
#[tool(class = "read")]
fn translate(text: String) -> Result<String, ToolError> {
    Ok(text)
}

fn main() {
    let registry = Registry::linked().unwrap();
    assert_eq!(registry.get("weather").unwrap().description(), "Look up the weather.");
    assert_eq!(
        registry.get("summarise").unwrap().description(),
        "Summarise a document.\n\nKeeps the first paragraph."
    );
    assert_eq!(registry.get("translate").unwrap().description(), "Translate a text.\nInto French.");
}
