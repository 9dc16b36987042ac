//! `idem mcp-proxy`'s library against a real upstream over Streamable HTTP (an rmcp server in
//! this process) that acts and then answers a JSON-RPC error, as servers do when a tool
//! raises "invalid params" after its effect: the proxy never re-sends such a call.

#![cfg(feature = "mcp-proxy")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use idem::mcp_proxy::{McpProxy, ProxyConfig, ProxyKeys, UpstreamSpec};
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
/// `code`.
#[derive(Clone)]
struct ActsThenRefuses {
    effects: Arc<AtomicUsize>,
    code: i32,
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
        _: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.effects.fetch_add(1, Ordering::SeqCst);
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

async fn proxy_before(code: i32, class: &str) -> (Dispatcher, Arc<AtomicUsize>) {
    let effects = Arc::new(AtomicUsize::new(0));
    let url = serve(ActsThenRefuses {
        effects: effects.clone(),
        code,
    })
    .await;
    let config = ProxyConfig::parse(
        &format!("[tools.append]\nclass = \"{class}\"\n"),
        "proxy.toml",
    )
    .unwrap();
    let proxy = McpProxy::start(&config, Some(UpstreamSpec::url(url).unwrap()))
        .await
        .unwrap();
    let d = proxy
        .dispatcher(Arc::new(MemoryStore::new()), ProxyKeys::default())
        .unwrap();
    (d, effects)
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
