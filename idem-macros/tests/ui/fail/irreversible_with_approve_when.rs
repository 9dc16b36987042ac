use idem::prelude::*;

fn large(_args: &serde_json::Value, _run: &RunContext) -> bool {
    true
}

/// Wire money out of the company.
#[tool(class = "irreversible", approve_when = large)]
async fn wire(cents: u64) -> Result<u64, ToolError> {
    Ok(cents)
}

fn main() {}
