//! MCP: the server over stdio and Streamable HTTP, its approval rounds, bad input, authentication, keys for hosts that send none, the re-send window, and the proxy.
//!
//! One test binary, a module a theme (each was its own binary before).

#[path = "../support/mod.rs"]
mod support;

mod keyless_secrets;
mod mcp;
mod mcp_account;
mod mcp_approval;
mod mcp_bad_input;
mod mcp_http_auth;
mod mcp_keys;
mod proxy_upstream;
mod resend_window;
mod window_unknown;
