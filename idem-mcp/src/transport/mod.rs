//! Where a client's bytes meet the server: what rmcp's transports cannot read is answered
//! with a JSON-RPC error the client can show, and the server goes on serving.
//!
//! - [`McpServer::serve_on`] (and so [`McpServer::serve_stdio`]): MCP's stdio framing, one
//!   message a line, with every line it cannot deliver answered (see its table in `lines.rs`).
//! - [`McpHttpService`] ([`McpServer::http_service`]): rmcp's Streamable HTTP service, with the
//!   POSTs it refuses before reading a message answered with a JSON-RPC error body.
//!
//! [`McpServer::serve_on`]: crate::McpServer::serve_on
//! [`McpServer::serve_stdio`]: crate::McpServer::serve_stdio
//! [`McpServer::http_service`]: crate::McpServer::http_service

mod http;
mod lines;

pub use http::McpHttpService;
pub use lines::MAX_LINE_BYTES;

use rmcp::model::{ErrorData, RequestId};
use serde_json::{Value, json};

/// A JSON-RPC error response, as it goes on the wire. Without the request's id, `"id": null`,
/// as JSON-RPC 2.0 says (MCP's schema lets it be left out, and rmcp leaves it out; the
/// official Python client reads an error without it as no message at all).
fn error_response(error: ErrorData, id: Option<RequestId>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": error})
}
