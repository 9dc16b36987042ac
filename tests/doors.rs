//! One yes, one effect, through the doors: an agent asks to pay, a person approves, the
//! payment is made, the worker dies, the agent is resumed (the same run, the same model
//! responses, another process). Through idem, crashed at every point by the harness
//! (`idem::testing`): one payment at every point. Beside each door, a control of the same
//! scenario without idem (the model's call run by the door's own parsing, the approval kept
//! in the process, the worker killed after the payment): two payments, or the control proves
//! nothing.
//!
//! `cargo test --features testing,agent,mcp --test doors -- --nocapture --test-threads=1`
//! prints the table that docs/guide/proof.md publishes.

#[path = "support/provider_file.rs"]
mod provider;

use std::path::{Path, PathBuf};
use std::process::Command;

use idem::agent::{Answer, Anthropic, Arguments, Gemini, OpenAiChat, Shape, run_tool_calls};
use idem::approval::{ApprovalKeys, ApprovalRequest};
use idem::prelude::*;
use idem::testing::{CrashTest, Setup};
use idem::tool::ToolDef;
use idem::{ApprovalKey, Approver};
use provider::{apply as pay_at, ledger};
use serde_json::{Value, json};

/// The doors the scenario goes through.
#[derive(Clone, Copy, Debug)]
enum Door {
    InProcess,
    OpenAi,
    Anthropic,
    Gemini,
    /// The MCP server (rmcp's client over an in-memory stream, sending no `_meta`, as hosts
    /// do), under its default re-send window: scoped by the connection.
    McpSession,
    /// The same, the window scoped by the tenant (`resend_scope(ResendScope::Tenant)`).
    McpTenant,
    /// The MCP server over Streamable HTTP (axum on a local port), each request of the
    /// 2026-07-28 revision on its own (no session), no `_meta` key.
    McpHttp,
}

impl Door {
    fn name(self) -> &'static str {
        match self {
            Door::InProcess => "in process (`Dispatcher::dispatch`)",
            Door::OpenAi => "OpenAI Chat loop (`run_tool_calls`, `OpenAiChat`)",
            Door::Anthropic => "Anthropic loop (`run_tool_calls`, `Anthropic`)",
            Door::Gemini => "Gemini loop (`run_tool_calls`, `Gemini`)",
            Door::McpSession => "MCP server, no `_meta`, default re-send window",
            Door::McpTenant => {
                "MCP server, no `_meta`, window scoped by the tenant (`ResendScope::Tenant`)"
            }
            Door::McpHttp => "MCP server over Streamable HTTP, no `_meta`, default window",
        }
    }

    /// The model's response asking to pay 100 for order o-1, in the door's format.
    fn response(self) -> Value {
        match self {
            Door::InProcess | Door::OpenAi | Door::McpSession | Door::McpTenant | Door::McpHttp => {
                json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": null,
                "tool_calls": [{"id": "call_pay", "type": "function",
                    "function": {"name": "pay", "arguments": "{\"order\":\"o-1\",\"amount\":100}"}}]}}]})
            }
            Door::Anthropic => {
                json!({"type": "message", "role": "assistant", "stop_reason": "tool_use", "content": [
                {"type": "tool_use", "id": "toolu_pay", "name": "pay", "input": {"order": "o-1", "amount": 100}}]})
            }
            Door::Gemini => json!({"candidates": [{"content": {"role": "model", "parts": [
                {"functionCall": {"name": "pay", "args": {"order": "o-1", "amount": 100}}}]}, "finishReason": "STOP"}]}),
        }
    }

    fn shape(self) -> &'static dyn Shape {
        match self {
            Door::InProcess | Door::OpenAi | Door::McpSession | Door::McpTenant | Door::McpHttp => {
                &OpenAiChat
            }
            Door::Anthropic => &Anthropic,
            Door::Gemini => &Gemini,
        }
    }

    /// Answer the model's response through the door: the approval request if the payment
    /// waits for one.
    async fn answer(self, d: &Dispatcher, run: &RunContext) -> Option<ApprovalRequest> {
        let refused = match self {
            Door::InProcess => {
                let call = ToolCall::new("pay", json!({"order": "o-1", "amount": 100}))
                    .with_call_id("call_pay");
                d.dispatch(&call, run).await.err()
            }
            door => {
                let turn = run_tool_calls(d, door.shape(), &door.response(), run)
                    .await
                    .ok()?;
                match turn.calls.into_iter().next()?.answer {
                    Answer::Refused(e) => Some(e),
                    _ => None,
                }
            }
        };
        match refused? {
            DispatchError::ApprovalRequired { request } => Some(*request),
            _ => None,
        }
    }
}

fn approval_key() -> ApprovalKey {
    ApprovalKey::new("doors-1", *b"idem-doors-table-approval-key-32").expect("a key")
}

fn pay(dir: &Path) -> ToolDef {
    let dir = dir.to_owned();
    ToolDef::builder("pay", ToolClass::Irreversible)
        .description("Pay an order's amount out to the customer.")
        .input_schema(json!({"type": "object", "properties": {
            "order": {"type": "string"}, "amount": {"type": "integer"}}}))
        .handler(move |ctx: ToolContext, args: Value| {
            let dir = dir.clone();
            async move {
                let what = format!(
                    "pay {} {}",
                    args["order"].as_str().unwrap_or("?"),
                    args["amount"]
                );
                pay_at(&dir, &what, Some(ctx.downstream_key().as_str()));
                Ok::<_, ToolError>(json!("paid"))
            }
        })
        .build()
        .expect("pay")
}

/// Through idem: ask, a person approves in the store, the host sends the model's call again.
async fn through_idem(setup: Setup, door: Door) {
    let registry = Registry::builder()
        .add(pay(setup.dir()))
        .build()
        .expect("registry");
    let keys = ApprovalKeys::new([approval_key()]);
    let dispatcher = Dispatcher::approving(registry, setup.store(), keys).expect("dispatcher");
    let d = setup.instrument(dispatcher);
    let run = RunContext::new("shop").with_run("run-1", 1);
    if let Some(request) = door.answer(&d, &run).await {
        let approver = Approver::new("ops@example.com", approval_key());
        // A resumed run finds the decision made: that is an answer too.
        let _ = d.approvals().approve(&request, &approver, None, None).await;
        let _ = door.answer(&d, &run).await;
    }
}

/// Through the MCP server: the host calls `pay` with no `_meta`; it waits for a person's
/// approval; the person approves what waits in the store; the host sends the call again.
async fn through_mcp(setup: Setup, scope: idem::mcp::keys::ResendScope) {
    use rmcp::model::CallToolRequestParams;
    use rmcp::service::serve_directly;
    use rmcp::{ClientHandler, RoleClient, RoleServer};
    let registry = Registry::builder()
        .add(pay(setup.dir()))
        .build()
        .expect("registry");
    let keys = ApprovalKeys::new([approval_key()]);
    let dispatcher = Dispatcher::approving(registry, setup.store(), keys).expect("dispatcher");
    let d = setup.instrument(dispatcher);
    let server = idem::mcp::McpServer::new(d.clone(), "shop")
        .expect("server")
        .resend_scope(scope);
    let (server_side, client_side) = tokio::io::duplex(64 * 1024);
    let running =
        serve_directly::<RoleServer, _, _, _, _>(server, server_side, Some(().get_info()));
    std::mem::forget(running);
    let client = serve_directly::<RoleClient, _, _, _, _>((), client_side, None);
    let Value::Object(args) = json!({"order": "o-1", "amount": 100}) else {
        unreachable!()
    };
    let call = || CallToolRequestParams::new("pay").with_arguments(args.clone());
    let Ok(first) = client.call_tool(call()).await else {
        return;
    };
    if first.is_error == Some(true) {
        let desk = d.approvals();
        let filter = idem::store::approvals::ApprovalFilter::default();
        let approver = Approver::new("ops@example.com", approval_key());
        for entry in desk.pending(&filter).await.unwrap_or_default() {
            let _ = desk.approve(&entry, &approver, None, None).await;
        }
        let _ = client.call_tool(call()).await;
    }
}

/// Through the MCP server over Streamable HTTP: each `tools/call` a request of its own (the
/// 2026-07-28 revision, no session), no `_meta` key; the person approves what waits in the
/// store; the host sends the request again.
async fn through_http(setup: Setup) {
    let registry = Registry::builder()
        .add(pay(setup.dir()))
        .build()
        .expect("registry");
    let keys = ApprovalKeys::new([approval_key()]);
    let dispatcher = Dispatcher::approving(registry, setup.store(), keys).expect("dispatcher");
    let d = setup.instrument(dispatcher);
    let server = idem::mcp::McpServer::new(d.clone(), "shop").expect("server");
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
        let desk = d.approvals();
        let filter = idem::store::approvals::ApprovalFilter::default();
        let approver = Approver::new("ops@example.com", approval_key());
        for entry in desk.pending(&filter).await.unwrap_or_default() {
            let _ = desk.approve(&entry, &approver, None, None).await;
        }
        let _ = send(2).await;
    }
}

/// The row of a door: every point of the scenario through idem, and its verdicts.
fn row(
    door: Door,
    scenario: fn(Setup) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
) -> (usize, usize, usize) {
    let report = CrashTest::new(scenario).effects(ledger).run();
    println!("{}:\n{report}", door.name());
    report.assert_held();
    let payments = report
        .baseline
        .iter()
        .filter(|e| e.starts_with("pay "))
        .count();
    (
        report.verdicts.len(),
        report.verdicts.iter().filter(|v| v.verdict.held()).count(),
        payments,
    )
}

/// The control: the door's own parsing of the model's call, the approval kept in the
/// process, no record; the worker dies after the payment, before its host's checkpoint, and
/// the resumed worker runs the model's call again. Returns the payments the ledger shows.
fn control(door: Door) -> usize {
    let dir = scratch(&format!("control-{door:?}"));
    for role in ["kill", "resume"] {
        let status = Command::new(std::env::current_exe().expect("the test binary"))
            .args([
                "control_worker",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CONTROL, format!("{door:?}:{role}"))
            .env(CONTROL_DIR, &dir)
            .output()
            .expect("a control worker");
        use std::os::unix::process::ExitStatusExt;
        match role {
            "kill" => assert_eq!(
                status.status.signal(),
                Some(9),
                "the control worker dies: {status:?}"
            ),
            _ => assert!(status.status.success(), "{status:?}"),
        }
    }
    let paid = ledger(&dir).len();
    let _ = std::fs::remove_dir_all(&dir);
    paid
}

const CONTROL: &str = "IDEM_DOORS_CONTROL";
const CONTROL_DIR: &str = "IDEM_DOORS_CONTROL_DIR";

/// The control's worker (run by `control` as a child; run alone, it does nothing).
#[test]
fn control_worker() {
    let (Ok(spec), Ok(dir)) = (std::env::var(CONTROL), std::env::var(CONTROL_DIR)) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let (door, role) = spec.split_once(':').expect("door:role");
    let door = [
        Door::InProcess,
        Door::OpenAi,
        Door::Anthropic,
        Door::Gemini,
        Door::McpSession,
        Door::McpTenant,
        Door::McpHttp,
    ]
    .into_iter()
    .find(|d| format!("{d:?}") == door)
    .expect("a door");
    // The person's yes lives in the process, as a framework's in-memory interrupt does; the
    // resumed process asks again and is told yes again.
    let approved = true;
    let calls = door
        .shape()
        .calls(&door.response())
        .expect("the model's call");
    for call in calls {
        let args = match call.arguments {
            Arguments::Json(args) => args,
            Arguments::NotJson { .. } => Value::Null,
        };
        if call.name == "pay" && approved {
            // Without a record of the call, each run of it is a new request to the provider.
            let what = format!(
                "pay {} {}",
                args["order"].as_str().unwrap_or("?"),
                args["amount"]
            );
            pay_at(&dir, &what, None);
        }
    }
    if role == "kill" {
        // The worker dies after the payment, before its host saved that it was made.
        // SAFETY: signalling this process with SIGKILL has no precondition.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("idem-doors-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a folder");
    dir
}

macro_rules! door_test {
    ($test:ident, $door:expr) => {
        #[test]
        fn $test() {
            let (points, held, payments) = row($door, |s| Box::pin(through_idem(s, $door)));
            let control = control($door);
            println!(
                "| {} | {points} | {held} | {payments} | {control} |",
                $door.name()
            );
            assert_eq!(payments, 1, "one payment without a crash");
            assert_eq!(held, points, "every point held");
            assert_eq!(
                control, 2,
                "the control shows the double payment, or it proves nothing"
            );
        }
    };
}

door_test!(in_process, Door::InProcess);
door_test!(openai_chat_loop, Door::OpenAi);
door_test!(anthropic_loop, Door::Anthropic);
door_test!(gemini_loop, Door::Gemini);

#[test]
fn mcp_server_window_scoped_by_the_tenant() {
    use idem::mcp::keys::ResendScope;
    let (points, held, payments) = row(Door::McpTenant, |s| {
        Box::pin(through_mcp(s, ResendScope::Tenant))
    });
    let control = control(Door::McpTenant);
    println!(
        "| {} | {points} | {held} | {payments} | {control} |",
        Door::McpTenant.name()
    );
    assert_eq!(payments, 1, "one payment without a crash");
    assert_eq!(held, points, "every point held");
    assert_eq!(control, 2, "the control shows the double payment");
}

#[test]
fn mcp_server_over_streamable_http() {
    let (points, held, payments) = row(Door::McpHttp, |s| Box::pin(through_http(s)));
    let control = control(Door::McpHttp);
    println!(
        "| {} | {points} | {held} | {payments} | {control} |",
        Door::McpHttp.name()
    );
    assert_eq!(payments, 1, "one payment without a crash");
    assert_eq!(held, points, "every point held");
    assert_eq!(control, 2, "the control shows the double payment");
}

/// Under the default window, scoped by the connection: a restarted server is a new
/// connection, and the resumed host re-issues the call. A call that may need approval is
/// windowed by its tenant whatever the scope, so the re-issue finds the first call (and its
/// approval); before, it was a new call, asked again, and a person's second yes paid twice.
#[test]
fn mcp_server_default_window_after_a_restart() {
    use idem::mcp::keys::ResendScope;
    let (points, held, payments) = row(Door::McpSession, |s| {
        Box::pin(through_mcp(s, ResendScope::Session))
    });
    let control = control(Door::McpSession);
    println!(
        "| {} | {points} | {held} | {payments} | {control} |",
        Door::McpSession.name()
    );
    assert_eq!(payments, 1, "one payment without a crash");
    assert_eq!(held, points, "every point held");
    assert_eq!(control, 2, "the control shows the double payment");
}

/// A host's double dispatch and a reconnect's re-issue, through the MCP server: no crash,
/// the host itself sends the call twice. Each row beside its control (the tool run for each
/// request, as a server without idem does).
#[test]
fn a_hosts_double_dispatch_and_a_reconnects_re_issue_through_mcp() {
    use idem::mcp::keys::ResendScope;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let control = tickets_without_idem().await;
        assert_eq!(control, 2, "the control shows two tickets, or it proves nothing");
        let double = tickets_through_mcp(ResendScope::Session, false).await;
        println!("| host double dispatch (2 identical calls 3 ms apart, new request ids), default window | {double} ticket(s) | control: {control} |");
        assert_eq!(double, 1, "the double dispatch opens one ticket");
        let reconnect = tickets_through_mcp(ResendScope::Session, true).await;
        println!("| reconnect re-issue (a new connection), default window | {reconnect} ticket(s) | control: {control} |");
        // Documented: the default window is the connection's; a re-issue on another one is
        // another call unless the scope is the tenant's (or the call needs approval).
        assert_eq!(reconnect, 2, "the default window does not span connections");
        let tenant = tickets_through_mcp(ResendScope::Tenant, true).await;
        println!("| reconnect re-issue (a new connection), window scoped by the tenant | {tenant} ticket(s) | control: {control} |");
        assert_eq!(tenant, 1, "the tenant's window spans connections");
    });
}

/// Open a ticket twice through the MCP server, 3 ms apart, on one connection or (with
/// `reconnect`) on a new one; how many tickets were opened.
async fn tickets_through_mcp(scope: idem::mcp::keys::ResendScope, reconnect: bool) -> usize {
    use rmcp::model::CallToolRequestParams;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let opened = Arc::new(AtomicUsize::new(0));
    let counter = opened.clone();
    let ticket = ToolDef::builder("open_ticket", ToolClass::NonIdempotentWrite)
        .description("Open a support ticket.")
        .input_schema(json!({"type": "object", "properties": {"title": {"type": "string"}}}))
        .handler(move |_: ToolContext, _: Value| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>(json!("opened"))
            }
        })
        .build()
        .expect("open_ticket");
    let registry = Registry::builder().add(ticket).build().expect("registry");
    let d = Dispatcher::new(registry, Arc::new(MemoryStore::new())).expect("dispatcher");
    // A server per connection, as a host that reconnects to a stdio server starts a new one.
    let server = || {
        idem::mcp::McpServer::new(d.clone(), "shop")
            .expect("server")
            .resend_scope(scope)
    };
    let connect = |server: idem::mcp::McpServer| {
        use rmcp::service::serve_directly;
        use rmcp::{ClientHandler, RoleClient, RoleServer};
        let (server_side, client_side) = tokio::io::duplex(64 * 1024);
        let running =
            serve_directly::<RoleServer, _, _, _, _>(server, server_side, Some(().get_info()));
        std::mem::forget(running);
        serve_directly::<RoleClient, _, _, _, _>((), client_side, None)
    };
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
    opened.load(Ordering::SeqCst)
}

/// The control: a plain rmcp server without idem, whose `open_ticket` opens a ticket for each
/// request; the host sends the call twice, 3 ms apart. How many tickets were opened.
async fn tickets_without_idem() -> usize {
    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
        PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    };
    use rmcp::service::{RequestContext, serve_directly};
    use rmcp::{ClientHandler, ErrorData, RoleClient, RoleServer, ServerHandler};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Clone)]
    struct Plain(Arc<AtomicUsize>);

    impl ServerHandler for Plain {
        fn get_info(&self) -> ServerConfig {
            ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
        }

        async fn list_tools(
            &self,
            _: Option<PaginatedRequestParams>,
            _: RequestContext<RoleServer>,
        ) -> Result<ListToolsResult, ErrorData> {
            let Value::Object(schema) = json!({"type": "object"}) else {
                unreachable!()
            };
            Ok(ListToolsResult::with_all_items(vec![Tool::new(
                "open_ticket",
                "Open a support ticket.",
                schema,
            )]))
        }

        async fn call_tool(
            &self,
            _: CallToolRequestParams,
            _: RequestContext<RoleServer>,
        ) -> Result<CallToolResponse, ErrorData> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(CallToolResult::success(vec![ContentBlock::text("opened")]).into())
        }
    }

    let opened = Arc::new(AtomicUsize::new(0));
    let (server_side, client_side) = tokio::io::duplex(64 * 1024);
    let running = serve_directly::<RoleServer, _, _, _, _>(
        Plain(opened.clone()),
        server_side,
        Some(().get_info()),
    );
    std::mem::forget(running);
    let client = serve_directly::<RoleClient, _, _, _, _>((), client_side, None);
    let Value::Object(args) = json!({"title": "refund not received"}) else {
        unreachable!()
    };
    for _ in 0..2 {
        let call = CallToolRequestParams::new("open_ticket").with_arguments(args.clone());
        client.call_tool(call).await.expect("a call");
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    opened.load(Ordering::SeqCst)
}
