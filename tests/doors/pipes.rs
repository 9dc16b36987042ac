//! A host in a process of its own, speaking MCP's stdio framing (one JSON-RPC message a line)
//! to a server in the worker over two named pipes, and the payment provider's own MCP server
//! (a plain rmcp server, no idem), which the proxy rows put upstream.
//!
//! The host is this test binary run again (`pipes::host`); it cannot speak on its own
//! standard output, which libtest writes to, so the two pipes are named ones in the run's
//! folder: `to-server` and `to-host`. The host sends `pay` with no `_meta` (as hosts send it);
//! if the answer says an approval is required, it writes `asked`, waits for `approved` (a
//! person's yes, given in the worker), and sends the call again. A host whose server died
//! (the worker killed) reads the end of its pipe and exits.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio::net::unix::pipe;

use crate::provider::apply;

/// The folder of the run, given to the host process.
const HOST_DIR: &str = "IDEM_DOORS_HOST_DIR";
/// The longest the host waits for a person's yes.
const PATIENCE: Duration = Duration::from_secs(60);

/// The worker's ends of the pipes to a host process, which it starts: the server's input and
/// output. Both are opened before the host starts (read and write, so that neither open
/// waits for the other side), so the host finds a reader and a writer; the host's own ends
/// are one-way, so it reads the end of `to-host` when the worker dies.
pub async fn to_a_host(dir: &Path) -> (pipe::Receiver, pipe::Sender, tokio::process::Child) {
    for name in ["to-server", "to-host"] {
        let path = dir.join(name);
        let _ = std::fs::remove_file(&path);
        let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("a path");
        // SAFETY: `c_path` is a valid NUL-terminated path for the duration of the call.
        let made = unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) };
        assert_eq!(made, 0, "mkfifo {}", path.display());
    }
    let input = pipe::OpenOptions::new()
        .read_write(true)
        .open_receiver(dir.join("to-server"))
        .expect("the server's input");
    let output = pipe::OpenOptions::new()
        .read_write(true)
        .open_sender(dir.join("to-host"))
        .expect("the server's output");
    let host = tokio::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args(["pipes::host", "--exact", "--nocapture", "--test-threads=1"])
        .env(HOST_DIR, dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("a host process");
    (input, output, host)
}

/// Until the host asks for a person's yes (then `Some(())`, the caller decides and calls
/// [`approved`]) or exits (`None`).
pub async fn asked_or_done(dir: &Path, host: &mut tokio::process::Child) -> Option<()> {
    loop {
        if dir.join("asked").exists() {
            return Some(());
        }
        if host.try_wait().ok().flatten().is_some() {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Tell the host a person said yes.
pub fn approved(dir: &Path) {
    std::fs::write(dir.join("approved"), "yes").expect("the host's flag");
}

/// The host process (run by [`to_a_host`]; run alone, it does nothing).
#[test]
fn host() {
    let Ok(dir) = std::env::var(HOST_DIR) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let read = pipe::OpenOptions::new()
            .open_receiver(dir.join("to-host"))
            .expect("the host's input");
        let write = pipe::OpenOptions::new()
            .open_sender(dir.join("to-server"))
            .expect("the host's output");
        // A host that finds its server gone exits: the worker was killed.
        let Ok(client) = ().serve((read, write)).await else {
            return;
        };
        let Value::Object(args) = json!({"order": "o-1", "amount": 100}) else {
            unreachable!()
        };
        let call = || CallToolRequestParams::new("pay").with_arguments(args.clone());
        let Ok(first) = client.call_tool(call()).await else {
            return;
        };
        let text = serde_json::to_string(&first).unwrap_or_default();
        if first.is_error == Some(true) && text.contains("approval_required") {
            std::fs::write(dir.join("asked"), "pay").expect("the flag");
            let started = std::time::Instant::now();
            while !dir.join("approved").exists() {
                if client.is_closed() || started.elapsed() > PATIENCE {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let _ = client.call_tool(call()).await;
        }
        let _ = client.cancel().await;
    });
}

/// The payment provider's MCP server, without idem: `pay` pays and `open_ticket` opens a
/// ticket for every request, once per key where the request carries one in `_meta`
/// (`io.modelcontextprotocol/idempotencyKey`, as third-party servers read it); each effect is
/// a line of the run's ledger.
#[derive(Clone)]
pub struct Provider(pub PathBuf);

impl ServerHandler for Provider {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tool = |name: &'static str, description: &'static str, schema: Value| {
            let Value::Object(schema) = schema else {
                unreachable!()
            };
            Tool::new(name, description, schema)
        };
        Ok(ListToolsResult::with_all_items(vec![
            tool(
                "pay",
                "Pay an order's amount out to the customer.",
                json!({"type": "object", "properties": {
                    "order": {"type": "string"}, "amount": {"type": "integer"}}}),
            ),
            tool(
                "open_ticket",
                "Open a support ticket.",
                json!({"type": "object", "properties": {"title": {"type": "string"}}}),
            ),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        let key = context
            .meta
            .get("io.modelcontextprotocol/idempotencyKey")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let what = match request.name.as_ref() {
            "pay" => format!(
                "pay {} {}",
                args["order"].as_str().unwrap_or("?"),
                args["amount"]
            ),
            _ => format!("ticket {}", args["title"].as_str().unwrap_or("?")),
        };
        apply(&self.0, &what, key.as_deref());
        Ok(CallToolResult::success(vec![ContentBlock::text("done")]).into())
    }
}

/// The provider served over Streamable HTTP on a free loopback port, in this process; its URL.
pub async fn serve_provider(dir: &Path) -> String {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let provider = Provider(dir.to_owned());
    let service = StreamableHttpService::new(
        move || Ok(provider.clone()),
        std::sync::Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let port = listener.local_addr().expect("its address").port();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://127.0.0.1:{port}/mcp")
}
