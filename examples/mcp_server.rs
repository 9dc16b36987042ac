//! An MCP server over stdio whose tools keep their side-effect policy: a client that re-sends
//! a call after a broken stream gets the recorded result (`_meta` says `deduplicated`), and a
//! write without key material is refused with how to pass one. Records live in SQLite.
//!
//! ```text
//! cargo run --example mcp_server --features mcp               # store in the system temp dir
//! IDEM_DB=my.db cargo run --example mcp_server --features mcp
//! ```
//!
//! A client passes its key in the request's `_meta`:
//! `{"name": "create_ticket", "arguments": {...}, "_meta": {"io.idem/idempotency-key": "..."}}`.

use std::path::PathBuf;
use std::sync::Arc;

use idem::mcp::McpServer;
use idem::prelude::*;
use idem::{ApprovalKey, ApprovalKeys, SqliteStore};

/// Read the current weather in a city.
#[tool(class = "read")]
fn get_weather(
    /// The city.
    city: String,
) -> Result<String, ToolError> {
    Ok(format!("{city}: overcast, 18 °C"))
}

/// Open a support ticket for a customer.
#[tool(class = "idempotent_write")]
async fn create_ticket(
    ctx: &ToolContext,
    /// The customer's id.
    customer_id: String,
    /// One line saying what is wrong.
    subject: String,
) -> Result<String, ToolError> {
    // The downstream system's idempotency key: the same on every re-send.
    Ok(format!(
        "ticket {} for {customer_id}: {subject}",
        &ctx.idempotency_key()[..13]
    ))
}

/// Delete a customer's account. Irreversible: runs only with an operator's approval.
#[tool(class = "irreversible")]
async fn delete_account(
    /// The customer's id.
    customer_id: String,
) -> Result<String, ToolError> {
    Ok(format!("deleted {customer_id}"))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::var_os("IDEM_DB").map_or_else(
        || std::env::temp_dir().join("idem-mcp-example.db"),
        PathBuf::from,
    );
    let store = Arc::new(SqliteStore::open(&path)?);
    // Approvals are verified with this key; an operator signs them with it (see the agent
    // example). A deployment reads it from a secret manager.
    let key = ApprovalKey::new("mcp-2026-12", *b"example-approval-key-not-secret!")?;
    let dispatcher = Dispatcher::approving(Registry::linked()?, store, ApprovalKeys::new([key]))?
        .with_namespace("mcp-example");
    // Logs go to stderr: stdout is the protocol's.
    eprintln!("idem MCP server on stdio, records in {}", path.display());
    McpServer::new(dispatcher, "local")?.serve_stdio().await?;
    Ok(())
}
