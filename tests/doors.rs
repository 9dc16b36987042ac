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

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use idem::agent::{Answer, Anthropic, Arguments, Gemini, OpenAiChat, Shape, run_tool_calls};
use idem::approval::{ApprovalKeys, ApprovalRequest};
use idem::prelude::*;
use idem::testing::{CrashTest, Setup};
use idem::tool::ToolDef;
use idem::{ApprovalKey, Approver};
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
        }
    }

    /// The model's response asking to pay 100 for order o-1, in the door's format.
    fn response(self) -> Value {
        match self {
            Door::InProcess | Door::OpenAi | Door::McpSession | Door::McpTenant => {
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
            Door::InProcess | Door::OpenAi | Door::McpSession | Door::McpTenant => &OpenAiChat,
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

/// The payment provider: one ledger line per payment it made; a key it saw pays nothing
/// (`None`: a request without a key, paid every time).
fn pay_at(dir: &Path, what: &str, key: Option<&str>) {
    if let Some(key) = key {
        let seen = std::fs::read_to_string(dir.join("keys")).unwrap_or_default();
        if seen.lines().any(|k| k == key) {
            return;
        }
        append(&dir.join("keys"), key);
    }
    append(&dir.join("ledger"), what);
}

fn append(path: &Path, line: &str) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("the provider's file");
    writeln!(file, "{line}").expect("written");
    file.sync_all().expect("synced");
}

fn ledger(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("ledger"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
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
