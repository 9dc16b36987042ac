//! The MCP doors: idem's server (in memory, over Streamable HTTP, on its stdio transport to a
//! host in a process of its own) and the proxy (before the provider's own MCP server), and a
//! host that sends one call twice through them.

use std::future::Future;
use std::path::Path;

use idem::approval::ApprovalKeys;
use idem::mcp::McpServer;
use idem::mcp::keys::ResendScope;
use idem::mcp::proxy::{McpProxy, ProxyConfig, ProxyKeys, UpstreamSpec};
use idem::prelude::*;
use idem::testing::Setup;
use idem::tool::ToolDef;
use rmcp::model::CallToolRequestParams;
use rmcp::service::serve_directly;
use rmcp::{ClientHandler, RoleClient, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio::net::unix::pipe;

use crate::pipes::{self, Provider};
use crate::{approval_key, approve_pending, approving, provider::ledger};

/// An rmcp client of `server` over an in-memory stream, sending no `_meta`, as hosts do.
fn connect<S: ServerHandler>(server: S) -> rmcp::service::RunningService<RoleClient, ()> {
    let (server_side, client_side) = tokio::io::duplex(64 * 1024);
    let running =
        serve_directly::<RoleServer, _, _, _, _>(server, server_side, Some(().get_info()));
    std::mem::forget(running);
    serve_directly::<RoleClient, _, _, _, _>((), client_side, None)
}

fn pay_request() -> CallToolRequestParams {
    let Value::Object(args) = json!({"order": "o-1", "amount": 100}) else {
        unreachable!()
    };
    CallToolRequestParams::new("pay").with_arguments(args)
}

/// Through the MCP server: the host calls `pay` with no `_meta`; it waits for a person's
/// approval; the person approves what waits in the store; the host sends the call again.
pub async fn through_mcp(setup: Setup, scope: ResendScope) {
    let d = approving(&setup);
    let server = McpServer::new(d.clone(), "shop")
        .expect("server")
        .resend_scope(scope);
    let client = connect(server);
    let Ok(first) = client.call_tool(pay_request()).await else {
        return;
    };
    if first.is_error == Some(true) {
        approve_pending(&d).await;
        let _ = client.call_tool(pay_request()).await;
    }
}

/// Through the MCP server over Streamable HTTP: each `tools/call` a request of its own (the
/// 2026-07-28 revision, no session), no `_meta` key; the person approves what waits in the
/// store; the host sends the request again.
pub async fn through_http(setup: Setup) {
    let d = approving(&setup);
    let server = McpServer::new(d.clone(), "shop").expect("server");
    let router = axum::Router::new().nest_service("/mcp", server.http_service(&["127.0.0.1"]));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let url = format!("http://{}/mcp", listener.local_addr().expect("its address"));
    tokio::spawn(async move { axum::serve(listener, router).await });
    let call = |id: u32| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "pay", "arguments": {"order": "o-1", "amount": 100},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "doors", "version": "0"}
        }}})
    };
    let send = |id: u32| {
        reqwest::Client::new()
            .post(&url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "pay")
            .json(&call(id))
            .send()
    };
    let Ok(first) = send(1).await else { return };
    let text = first.text().await.unwrap_or_default();
    if text.contains("approval_required") {
        approve_pending(&d).await;
        let _ = send(2).await;
    }
}

/// Serve a host process over named pipes with `serve` until the host exits; a person says
/// yes when the host is asked for one.
async fn serve_a_host<F, Fut>(dir: &Path, d: &Dispatcher, serve: F)
where
    F: FnOnce(pipe::Receiver, pipe::Sender) -> Fut,
    Fut: Future + Send + 'static,
    Fut::Output: Send,
{
    let (input, output, mut host) = pipes::to_a_host(dir).await;
    let serving = tokio::spawn(serve(input, output));
    if pipes::asked_or_done(dir, &mut host).await.is_some() {
        approve_pending(d).await;
        pipes::approved(dir);
    }
    let _ = host.wait().await;
    serving.abort();
}

/// Through the MCP server on idem's stdio transport (`serve_on`, which `serve_stdio` runs on
/// standard input and output), to a host in a process of its own; the resumed worker is a
/// new server process, as a host restarts its stdio server.
pub async fn through_stdio(setup: Setup) {
    let d = approving(&setup);
    let server = McpServer::new(d.clone(), "shop").expect("server");
    serve_a_host(setup.dir(), &d, move |input, output| {
        server.serve_on(input, output)
    })
    .await;
}

/// The proxy's table for the provider's tools.
const PROXY_TOML: &str = "tenant = \"shop\"\n\
    [tools.pay]\nclass = \"irreversible\"\n\
    [tools.open_ticket]\nclass = \"non_idempotent_write\"\n";

/// The proxy before the provider's MCP server (over Streamable HTTP, on a local port).
async fn proxy_before_provider(dir: &Path) -> Option<McpProxy> {
    let url = pipes::serve_provider(dir).await;
    let config = ProxyConfig::parse(PROXY_TOML, "proxy.toml").expect("the proxy's table");
    let upstream = UpstreamSpec::url(url).expect("an upstream URL");
    McpProxy::start(&config, Some(upstream)).await.ok()
}

/// Through the MCP proxy (`idem mcp-proxy`'s library) served on its stdio transport to a host
/// process, before the provider's own MCP server, which pays once per key it is sent.
pub async fn through_proxy(setup: Setup) {
    let Some(proxy) = proxy_before_provider(setup.dir()).await else {
        return;
    };
    let keys = ProxyKeys::new(None, ApprovalKeys::new([approval_key()]));
    let dispatcher = proxy
        .dispatcher(setup.store(), keys)
        .expect("the proxy's dispatcher");
    let d = setup.instrument(dispatcher);
    let server = proxy.server_over(d.clone()).expect("the proxy's server");
    serve_a_host(setup.dir(), &d, move |input, output| {
        server.serve_on(input, output)
    })
    .await;
}

/// The control of the stdio door: the same host process before a plain rmcp server (the
/// provider's own, without idem) on the same pipes; it pays for each call.
pub async fn stdio_without_idem(dir: &Path) {
    use rmcp::ServiceExt;
    let (input, output, mut host) = pipes::to_a_host(dir).await;
    let provider = Provider(dir.to_owned());
    let serving = tokio::spawn(async move {
        if let Ok(running) = provider.serve((input, output)).await {
            let _ = running.waiting().await;
        }
    });
    let _ = host.wait().await;
    serving.abort();
}

/// The control of the proxy door: the host calls the provider's server itself, without idem.
pub async fn provider_without_idem(dir: &Path) {
    let client = connect(Provider(dir.to_owned()));
    client
        .call_tool(pay_request())
        .await
        .expect("the provider answers");
}

/// Open a ticket twice through servers `server` makes, 3 ms apart, on one connection or
/// (with `reconnect`) on a new one to a new server.
async fn twice<S: ServerHandler>(server: impl Fn() -> S, reconnect: bool) {
    let Value::Object(args) = json!({"title": "refund not received"}) else {
        unreachable!()
    };
    let call = || CallToolRequestParams::new("open_ticket").with_arguments(args.clone());
    let first = connect(server());
    first.call_tool(call()).await.expect("the first call");
    tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    let second = match reconnect {
        true => connect(server()),
        false => first,
    };
    second.call_tool(call()).await.expect("the second call");
}

/// The tickets the provider opened in `dir`.
fn tickets(dir: &Path) -> usize {
    ledger(dir)
        .iter()
        .filter(|e| e.starts_with("ticket "))
        .count()
}

/// Open a ticket twice through idem's MCP server (its tool opens it at the provider, with
/// the call's downstream key); how many tickets were opened.
pub async fn tickets_through_server(dir: &Path, scope: ResendScope, reconnect: bool) -> usize {
    use std::sync::Arc;
    let at = dir.to_owned();
    let ticket = ToolDef::builder("open_ticket", ToolClass::NonIdempotentWrite)
        .description("Open a support ticket.")
        .input_schema(json!({"type": "object", "properties": {"title": {"type": "string"}}}))
        .handler(move |ctx: ToolContext, args: Value| {
            let at = at.clone();
            async move {
                let what = format!("ticket {}", args["title"].as_str().unwrap_or("?"));
                crate::provider::apply(&at, &what, Some(ctx.downstream_key().as_str()));
                Ok::<_, ToolError>(json!("opened"))
            }
        })
        .build()
        .expect("open_ticket");
    let registry = Registry::builder().add(ticket).build().expect("registry");
    let d = Dispatcher::new(registry, Arc::new(MemoryStore::new())).expect("dispatcher");
    // A server per connection, as a host that reconnects to a stdio server starts a new one.
    let server = || {
        McpServer::new(d.clone(), "shop")
            .expect("server")
            .resend_scope(scope)
    };
    twice(server, reconnect).await;
    tickets(dir)
}

/// Open a ticket twice through the proxy before the provider; how many it opened.
pub async fn tickets_through_proxy(dir: &Path, scope: ResendScope, reconnect: bool) -> usize {
    use std::sync::Arc;
    let proxy = proxy_before_provider(dir).await.expect("the proxy starts");
    let store: Arc<dyn idem::Store> = Arc::new(MemoryStore::new());
    let server = || {
        proxy
            .server(
                store.clone(),
                ProxyKeys::new(None, ApprovalKeys::new([approval_key()])),
            )
            .expect("the proxy's server")
            .resend_scope(scope)
    };
    twice(server, reconnect).await;
    tickets(dir)
}

/// The control: the host sends the call twice to the provider's own server, without idem.
pub async fn tickets_without_idem(dir: &Path) -> usize {
    twice(|| Provider(dir.to_owned()), false).await;
    tickets(dir)
}
