//! Raw Streamable HTTP requests to an MCP server, as a client sends them: with or without a
//! bearer token and a session id; and the `initialize` that opens a session.

use serde_json::{Value, json};

/// A request to `url`, with `token` (if any) as a bearer token and `session` (if any) as
/// the `Mcp-Session-Id` of a 2025-06-18 session.
pub fn request(
    method: reqwest::Method,
    url: &str,
    token: Option<&str>,
    session: Option<&str>,
) -> reqwest::RequestBuilder {
    let mut r = reqwest::Client::new()
        .request(method, url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json");
    if let Some(token) = token {
        r = r.header("authorization", format!("Bearer {token}"));
    }
    if let Some(session) = session {
        r = r
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-06-18");
    }
    r
}

/// The `initialize` request of a 2025-06-18 client, which opens a session.
pub fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"}}})
}
