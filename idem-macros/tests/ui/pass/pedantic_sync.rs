//! A user's strict lint set is not broken by code the macro requires or generates.

#![deny(clippy::pedantic, clippy::nursery, missing_docs, unused, unreachable_pub)]
//! A crate with strict lints.

use idem::prelude::*;

/// Normalise a name: a synchronous tool whose `Result` and owned parameter the macro requires.
#[tool(class = "read")]
fn normalise(name: String, upper: bool) -> Result<String, ToolError> {
    Ok(if upper { name.to_uppercase() } else { name })
}

fn main() {
    assert!(Registry::linked().unwrap().get("normalise").is_some());
}
