//! One yes, one effect, through the doors: an agent asks to pay, a person approves, the
//! payment is made, the worker dies, the agent is resumed (the same run, the same model
//! responses, another process). Through idem, crashed at every point by the harness
//! (`idem::testing`): one payment at every point. Beside each door, a control of the same
//! scenario without idem (the model's call run by the door's own parsing, the approval kept
//! in the process, the worker killed after the payment): two payments, or the control proves
//! nothing.
//!
//! `cargo test -p idem-tests --features testing,rig,mcp-proxy --test doors -- --nocapture --test-threads=1`
//! prints the table that docs/guide/proof.md publishes.

#[path = "doors/mcp.rs"]
mod mcp;
#[path = "doors/pipes.rs"]
mod pipes;
#[path = "support/provider_file.rs"]
mod provider;
#[path = "doors/rig.rs"]
mod rig;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Command;

use idem::agent::{Answer, Anthropic, Arguments, Gemini, OpenAiChat, Shape, run_tool_calls};
use idem::approval::{ApprovalKeys, ApprovalRequest};
use idem::mcp::keys::ResendScope;
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
    /// The MCP server on its stdio transport, to a host in a process of its own.
    McpStdio,
    /// The MCP proxy on its stdio transport to a host process, before the provider's own MCP
    /// server.
    Proxy,
    /// A rig agent with the registry's tools (`RigTools`).
    Rig,
}

/// Every door, for the control worker to find one by name.
const DOORS: [Door; 10] = [
    Door::InProcess,
    Door::OpenAi,
    Door::Anthropic,
    Door::Gemini,
    Door::McpSession,
    Door::McpTenant,
    Door::McpHttp,
    Door::McpStdio,
    Door::Proxy,
    Door::Rig,
];

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
            Door::McpStdio => {
                "MCP server on stdio (`serve_on`) to a host process, no `_meta`, default window"
            }
            Door::Proxy => {
                "MCP proxy on stdio to a host process, before the provider's MCP server (HTTP)"
            }
            Door::Rig => "rig agent (`RigTools`, rig's scripted model)",
        }
    }

    /// The model's response asking to pay 100 for order o-1, in the door's format.
    fn response(self) -> Value {
        match self {
            Door::Anthropic => {
                json!({"type": "message", "role": "assistant", "stop_reason": "tool_use", "content": [
                {"type": "tool_use", "id": "toolu_pay", "name": "pay", "input": {"order": "o-1", "amount": 100}}]})
            }
            Door::Gemini => json!({"candidates": [{"content": {"role": "model", "parts": [
                {"functionCall": {"name": "pay", "args": {"order": "o-1", "amount": 100}}}]}, "finishReason": "STOP"}]}),
            _ => {
                json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": null,
                "tool_calls": [{"id": "call_pay", "type": "function",
                    "function": {"name": "pay", "arguments": "{\"order\":\"o-1\",\"amount\":100}"}}]}}]})
            }
        }
    }

    fn shape(self) -> &'static dyn Shape {
        match self {
            Door::Anthropic => &Anthropic,
            Door::Gemini => &Gemini,
            _ => &OpenAiChat,
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

/// The payment tool's dispatcher over the run's store, approvals on, through the harness's
/// instruments.
fn approving(setup: &Setup) -> Dispatcher {
    let registry = Registry::builder()
        .add(pay(setup.dir()))
        .build()
        .expect("registry");
    let keys = ApprovalKeys::new([approval_key()]);
    let dispatcher = Dispatcher::approving(registry, setup.store(), keys).expect("dispatcher");
    setup.instrument(dispatcher)
}

/// A person approves every call waiting for a yes in the store; how many there were.
async fn approve_pending(d: &Dispatcher) -> usize {
    let desk = d.approvals();
    let filter = idem::store::approvals::ApprovalFilter::default();
    let approver = Approver::new("ops@example.com", approval_key());
    let pending = desk.pending(&filter).await.unwrap_or_default();
    for entry in &pending {
        let _ = desk.approve(entry, &approver, None, None).await;
    }
    pending.len()
}

/// Through idem: ask, a person approves in the store, the host sends the model's call again.
async fn through_idem(setup: Setup, door: Door) {
    let d = approving(&setup);
    let run = RunContext::new("shop").with_run("run-1", 1);
    if let Some(request) = door.answer(&d, &run).await {
        let approver = Approver::new("ops@example.com", approval_key());
        // A resumed run finds the decision made: that is an answer too.
        let _ = d.approvals().approve(&request, &approver, None, None).await;
        let _ = door.answer(&d, &run).await;
    }
}

/// A scenario through a door, as the harness runs it.
type Scenario = fn(Setup) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// The row of a door: every point of the scenario through idem, and its verdicts.
fn row(door: Door, scenario: Scenario) -> (usize, usize, usize) {
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
    let door = DOORS
        .into_iter()
        .find(|d| format!("{d:?}") == door)
        .expect("a door");
    // The doors of their own: the same door without idem (its host, its agent).
    let own = match door {
        Door::Rig => Some(Box::pin(rig::without_idem(&dir)) as Pin<Box<dyn Future<Output = ()>>>),
        Door::McpStdio => Some(Box::pin(mcp::stdio_without_idem(&dir)) as _),
        Door::Proxy => Some(Box::pin(mcp::provider_without_idem(&dir)) as _),
        _ => None,
    };
    if let Some(own) = own {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(own);
        die_after_the_payment(role);
        return;
    }
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
    die_after_the_payment(role);
}

/// The killed control worker dies after the payment, before its host saved that it was made.
fn die_after_the_payment(role: &str) {
    if role == "kill" {
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

/// A door's row: every point through idem beside the control, printed as the guide's table
/// prints it, and asserted.
fn prove(door: Door, scenario: Scenario) {
    let (points, held, payments) = row(door, scenario);
    let control = control(door);
    println!(
        "| {} | {points} | {held} | {payments} | {control} |",
        door.name()
    );
    assert_eq!(payments, 1, "one payment without a crash");
    assert_eq!(held, points, "every point held");
    assert_eq!(
        control, 2,
        "the control shows the double payment, or it proves nothing"
    );
}

#[test]
fn in_process() {
    prove(Door::InProcess, |s| {
        Box::pin(through_idem(s, Door::InProcess))
    });
}

#[test]
fn openai_chat_loop() {
    prove(Door::OpenAi, |s| Box::pin(through_idem(s, Door::OpenAi)));
}

#[test]
fn anthropic_loop() {
    prove(Door::Anthropic, |s| {
        Box::pin(through_idem(s, Door::Anthropic))
    });
}

#[test]
fn gemini_loop() {
    prove(Door::Gemini, |s| Box::pin(through_idem(s, Door::Gemini)));
}

#[test]
fn rig_agent() {
    prove(Door::Rig, |s| Box::pin(rig::through_rig(s)));
}

#[test]
fn mcp_server_window_scoped_by_the_tenant() {
    prove(Door::McpTenant, |s| {
        Box::pin(mcp::through_mcp(s, ResendScope::Tenant))
    });
}

/// Under the default window, scoped by the connection: a restarted server is a new
/// connection, and the resumed host re-issues the call. A call that may need approval is
/// windowed by its tenant whatever the scope, so the re-issue finds the first call (and its
/// approval); before, it was a new call, asked again, and a person's second yes paid twice.
#[test]
fn mcp_server_default_window_after_a_restart() {
    prove(Door::McpSession, |s| {
        Box::pin(mcp::through_mcp(s, ResendScope::Session))
    });
}

#[test]
fn mcp_server_over_streamable_http() {
    prove(Door::McpHttp, |s| Box::pin(mcp::through_http(s)));
}

#[test]
fn mcp_server_on_stdio_to_a_host_process() {
    prove(Door::McpStdio, |s| Box::pin(mcp::through_stdio(s)));
}

#[test]
fn mcp_proxy_before_the_providers_server() {
    prove(Door::Proxy, |s| Box::pin(mcp::through_proxy(s)));
}

/// A host's double dispatch and a reconnect's re-issue, through the MCP server and the
/// proxy: no crash, the host itself sends the call twice. Each beside its control (the
/// provider's own server, which opens a ticket for each request, as a server without idem
/// does).
#[test]
fn a_hosts_double_dispatch_and_a_reconnects_re_issue() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let fresh = |name: &str| scratch(&format!("tickets-{name}"));
        let control = mcp::tickets_without_idem(&fresh("control")).await;
        assert_eq!(
            control, 2,
            "the control shows two tickets, or it proves nothing"
        );
        let rows = [
            (
                "double dispatch (2 identical calls 3 ms apart, new request ids), default window",
                false,
                ResendScope::Session,
                1,
            ),
            (
                "reconnect re-issue (a new connection to a new server), default window",
                true,
                ResendScope::Session,
                2,
            ),
            (
                "reconnect re-issue, window scoped by the tenant (`ResendScope::Tenant`)",
                true,
                ResendScope::Tenant,
                1,
            ),
        ];
        for (n, (what, reconnect, scope, expected)) in rows.into_iter().enumerate() {
            let server =
                mcp::tickets_through_server(&fresh(&format!("server-{n}")), scope, reconnect).await;
            let proxy =
                mcp::tickets_through_proxy(&fresh(&format!("proxy-{n}")), scope, reconnect).await;
            println!("| {what} | {server} | {proxy} | {control} |");
            // The second row is the default window's documented trade-off: it is the
            // connection's, so a re-issue on another one is another call unless the scope is
            // the tenant's (or the call needs approval).
            assert_eq!(server, expected, "{what}, through the server");
            assert_eq!(proxy, expected, "{what}, through the proxy");
        }
    });
}
