//! Serving the proxy's MCP server: on stdio, or over Streamable HTTP at `/mcp`.

use std::collections::HashMap;
use std::net::SocketAddr;

use idem_mcp::McpServer;

use crate::env::PROXY_TOKENS;

/// Serve on standard input and output until the client goes away (or Ctrl-C).
pub async fn stdio(server: McpServer) -> Result<(), String> {
    tokio::select! {
        served = server.serve_stdio() => served.map_err(|e| e.to_string()),
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

/// Serve over Streamable HTTP at `http://addr/mcp` until Ctrl-C. With [`PROXY_TOKENS`] set
/// (`token=tenant,...`), every request needs one of its bearer tokens and acts for that token's tenant; without,
/// the proxy serves its one tenant, and only on a loopback address.
pub async fn http(mut server: McpServer, addr: SocketAddr, hosts: &[String]) -> Result<(), String> {
    let tokens: HashMap<String, String> = std::env::var(PROXY_TOKENS)
        .unwrap_or_default()
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(token, tenant)| (format!("Bearer {}", token.trim()), tenant.trim().to_owned()))
        .collect();
    if tokens.is_empty() {
        if !addr.ip().is_loopback() {
            return Err(format!(
                "`--http {addr}` is reachable from other machines, and without {PROXY_TOKENS} anyone who reaches it could call the upstream's tools: set {PROXY_TOKENS}=token=tenant,... or serve on 127.0.0.1"
            ));
        }
    } else {
        server = server.authenticate(move |headers| {
            let presented = headers.get("authorization")?.to_str().ok()?;
            tokens.get(presented).cloned()
        });
    }
    let hosts: Vec<&str> = hosts.iter().map(String::as_str).collect();
    let router = axum::Router::new().nest_service("/mcp", server.http_service(&hosts));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!("serving MCP on http://{local}/mcp");
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| format!("the HTTP server failed: {e}"))
}
