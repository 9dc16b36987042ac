//! `idem mcp-proxy`'s library against a real upstream over Streamable HTTP (an rmcp server in
//! this process) that acts and then answers a JSON-RPC error, as servers do when a tool
//! raises "invalid params" after its effect: the proxy never re-sends such a call.

#![cfg(feature = "mcp-proxy")]

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use idem::mcp::proxy::{McpProxy, ProxyConfig, ProxyKeys, UpstreamSpec};
use idem::prelude::*;
use idem::{ErrorKind, MemoryStore};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;

/// An upstream whose `append` appends (the effect), then answers with the JSON-RPC error
/// `code`, or (code 0) with the line appended.
#[derive(Clone)]
struct ActsThenRefuses {
    effects: Arc<AtomicUsize>,
    code: i32,
    /// The arguments of every call, as the upstream saw them.
    seen: Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
}

impl ServerHandler for ActsThenRefuses {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}});
        let serde_json::Value::Object(schema) = schema else {
            unreachable!()
        };
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "append",
            "Append a line: twice is two lines.",
            schema,
        )]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let n = self.effects.fetch_add(1, Ordering::SeqCst) + 1;
        let arguments = serde_json::Value::Object(request.arguments.unwrap_or_default());
        self.seen.lock().unwrap().push(arguments);
        if self.code == 0 {
            let result =
                rmcp::model::CallToolResult::success(vec![rmcp::model::ContentBlock::text(
                    format!("line {n}"),
                )]);
            return Ok(result.into());
        }
        Err(ErrorData::new(
            rmcp::model::ErrorCode(self.code),
            "text: too long for the ledger",
            None,
        ))
    }
}

/// The upstream served over Streamable HTTP on a free loopback port; its URL.
async fn serve(upstream: ActsThenRefuses) -> String {
    let service = StreamableHttpService::new(
        move || Ok(upstream.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://127.0.0.1:{port}/mcp")
}

/// The proxy, configured by `table` (the tool's), before an upstream answering `code`.
async fn proxy_with(code: i32, table: &str) -> (McpProxy, ActsThenRefuses) {
    let upstream = ActsThenRefuses {
        effects: Arc::default(),
        code,
        seen: Arc::default(),
    };
    let url = serve(upstream.clone()).await;
    let config = ProxyConfig::parse(&format!("[tools.append]\n{table}"), "proxy.toml").unwrap();
    let proxy = McpProxy::start(&config, Some(UpstreamSpec::url(url).unwrap()))
        .await
        .unwrap();
    (proxy, upstream)
}

async fn proxy_before(code: i32, class: &str) -> (Dispatcher, Arc<AtomicUsize>) {
    let (proxy, upstream) = proxy_with(code, &format!("class = \"{class}\"\n")).await;
    let d = proxy
        .dispatcher(Arc::new(MemoryStore::new()), ProxyKeys::default())
        .unwrap();
    (d, upstream.effects)
}

/// An MCP client (rmcp's) of the proxy's server, in process, sending no `_meta`.
fn client_of(proxy: &McpProxy) -> rmcp::service::RunningService<rmcp::RoleClient, ()> {
    use rmcp::ServiceExt;
    let server = proxy
        .server(Arc::new(MemoryStore::new()), ProxyKeys::default())
        .unwrap();
    let (server_side, client_side) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_side).await {
            let _ = running.waiting().await;
        }
    });
    rmcp::service::serve_directly::<rmcp::RoleClient, _, _, _, _>(
        (),
        client_side,
        Some(rmcp::model::InitializeResult::default().into()),
    )
}

fn plain(arguments: serde_json::Value) -> CallToolRequestParams {
    let serde_json::Value::Object(arguments) = arguments else {
        unreachable!()
    };
    CallToolRequestParams::new("append").with_arguments(arguments)
}

#[tokio::test]
async fn a_client_that_sends_no_key_gets_one_effect_for_a_re_issued_call() {
    let (proxy, upstream) = proxy_with(0, "class = \"non_idempotent_write\"\n").await;
    let client = client_of(&proxy);
    let first = client.call_tool(plain(json!({"text": "a"}))).await.unwrap();
    assert_ne!(first.is_error, Some(true), "{first:?}");
    let again = client.call_tool(plain(json!({"text": "a"}))).await.unwrap();
    let meta = again.meta.clone().unwrap_or_default();
    assert_eq!(meta.0["io.idem/deduplicated"], json!(true));
    assert_eq!(upstream.effects.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_tool_table_turns_the_window_off_and_lets_the_model_key_calls() {
    let table = "class = \"non_idempotent_write\"\nresend_window_secs = 0\nmodel_key = true\n";
    let (proxy, upstream) = proxy_with(0, table).await;
    let client = client_of(&proxy);
    let listed = client.list_tools(None).await.unwrap().tools;
    assert!(listed[0].input_schema["properties"]["idempotency_key"].is_object());
    let bare = client.call_tool(plain(json!({"text": "a"}))).await.unwrap();
    assert_eq!(bare.is_error, Some(true), "no window, no key: refused");
    let keyed = || plain(json!({"text": "b", "idempotency_key": "act-1"}));
    client.call_tool(keyed()).await.unwrap();
    let again = client.call_tool(keyed()).await.unwrap();
    assert_eq!(
        again.meta.unwrap_or_default().0["io.idem/deduplicated"],
        json!(true)
    );
    assert_eq!(upstream.effects.load(Ordering::SeqCst), 1);
    assert_eq!(
        *upstream.seen.lock().unwrap(),
        [json!({"text": "b"})],
        "the upstream never sees the model's key"
    );
    // Bad values in the table are refused when the file is read.
    for (bad, says) in [
        ("resend_window_secs = -1", "resend_window_secs"),
        ("model_key = \"yes\"", "model_key"),
    ] {
        let err = ProxyConfig::parse(
            &format!("[tools.append]\nclass = \"non_idempotent_write\"\n{bad}\n"),
            "proxy.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains(says), "{err}");
    }
    let err = ProxyConfig::parse(
        "[tools.look]\nclass = \"read\"\nmodel_key = true\n",
        "p.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("no effect on a `read` tool"), "{err}");
    let err = ProxyConfig::parse("resend_scope = \"global\"\n", "p.toml")
        .unwrap_err()
        .to_string();
    assert!(err.contains("\"tenant\""), "{err}");
}

#[tokio::test]
async fn invalid_params_after_the_effect_is_never_sent_again() {
    let (d, effects) = proxy_before(-32602, "non_idempotent_write").await;
    let call = ToolCall::new("append", json!({"text": "pay 5"})).with_key("agent-call-1");
    let run = RunContext::new("local");
    let first = d.dispatch(&call, &run).await.unwrap_err();
    assert_eq!(first.code(), "outcome_unknown", "{first}");
    assert!(first.to_string().contains("invalid params"), "{first}");
    // The agent sends the call again: the record answers, the upstream is not asked.
    let again = d.dispatch(&call, &run).await.unwrap_err();
    assert_eq!(again.code(), "outcome_unknown", "{again}");
    assert_eq!(effects.load(Ordering::SeqCst), 1, "one effect upstream");
}

#[tokio::test]
async fn an_internal_error_is_ambiguous_and_an_unknown_method_is_not_applied() {
    let (d, effects) = proxy_before(-32603, "non_idempotent_write").await;
    let call = ToolCall::new("append", json!({"text": "x"})).with_key("k");
    let run = RunContext::new("local");
    assert_eq!(
        d.dispatch(&call, &run).await.unwrap_err().code(),
        "outcome_unknown"
    );
    assert_eq!(effects.load(Ordering::SeqCst), 1);

    // -32601 says the upstream never reached a tool: the key stays free (the fake here
    // acted anyway, so each dispatch shows as one more effect: two attempts per call).
    let (d, effects) = proxy_before(-32601, "non_idempotent_write").await;
    let err = d.dispatch(&call, &run).await.unwrap_err();
    let DispatchError::ToolFailed { error, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(error.kind(), ErrorKind::NotApplied, "{err}");
    assert!(effects.load(Ordering::SeqCst) >= 1);
}

/// `idem mcp-proxy --http` with `IDEM_PROXY_TOKENS` serves `McpProxy::server` with
/// `authenticate`: every request is authenticated before rmcp, and a session is its
/// opener's (a second principal and none are refused on it).
#[tokio::test]
async fn the_proxy_over_http_keeps_each_session_to_its_principal() {
    let (proxy, _upstream) = proxy_with(0, "class = \"non_idempotent_write\"\n").await;
    let server = proxy
        .server(Arc::new(MemoryStore::new()), ProxyKeys::default())
        .unwrap()
        .authenticate(
            |headers| match headers.get("authorization")?.to_str().ok()? {
                "Bearer token-a" => Some("a".to_owned()),
                "Bearer token-b" => Some("b".to_owned()),
                _ => None,
            },
        );
    let router = axum::Router::new().nest_service("/mcp", server.http_service(&[]));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    let send = |method, token, session| support::mcp_http::request(method, &url, token, session);
    let initialize = support::mcp_http::initialize();
    let anonymous = send(reqwest::Method::POST, None, None)
        .json(&initialize)
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    let opened = send(reqwest::Method::POST, Some("token-a"), None)
        .json(&initialize)
        .send()
        .await
        .unwrap();
    assert_eq!(opened.status(), 200);
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    for (token, status) in [(Some("token-b"), 404), (None, 401)] {
        let ended = send(reqwest::Method::DELETE, token, Some(&session))
            .send()
            .await
            .unwrap();
        assert_eq!(ended.status(), status, "DELETE as {token:?}");
        let resumed = send(reqwest::Method::GET, token, Some(&session))
            .send()
            .await
            .unwrap();
        assert_eq!(resumed.status(), status, "GET as {token:?}");
    }
}
