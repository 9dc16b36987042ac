//! A user's strict lint set holds on code `#[tool]` expands: CI runs clippy on this file with
//! `-D warnings`, so a lint that fires on the expansion (`unnecessary_wraps` on the `Result`
//! a synchronous tool must return, `needless_pass_by_value` on its owned parameters,
//! `unused_async`) fails the build.

#![deny(clippy::pedantic)]

use idem::prelude::*;

/// Normalise a name: a synchronous tool that never fails.
#[tool(class = "read")]
fn normalise(name: String, upper: bool) -> Result<String, ToolError> {
    Ok(if upper { name.to_uppercase() } else { name })
}

/// Echo a word, asynchronously, without awaiting anything.
#[tool(class = "read")]
async fn echo(word: String) -> Result<String, ToolError> {
    Ok(word)
}

#[test]
fn strictly_linted_tools_register() {
    let registry = Registry::linked().unwrap();
    assert!(registry.get("normalise").is_some());
    assert!(registry.get("echo").is_some());
}
