//! The `idem` operator binary as an operator runs it: a subprocess over real SQLite, Redis
//! and PostgreSQL stores that an agent wrote to. Each test checks what the operator sees (the
//! exit code, a message naming the store and the fix) and what the command did to the
//! agent's next call: a resolved outcome replays, an approved call runs once, a denied one is
//! refused with its reason, and bad input or a lost store changes nothing.
//!
//! The SQLite test drives the example agent (`examples/agent.rs`), so it needs the example
//! built: `cargo build --example agent` with this test's features. The Redis and PostgreSQL
//! tests read `IDEM_REDIS_URL` and `IDEM_POSTGRES_URL` and skip without them, unless
//! `IDEM_REQUIRE_SERVICES=1`; there the test itself is the agent, in-process, as it is for
//! the SQLite files of the other tests (edited approvals, in-progress and changed records,
//! the listing's filters, what a person is shown). The Redis that may evict is a private
//! `redis-server` of the test's own (the shared server's configuration is never touched),
//! skipped without one on the `PATH` unless `IDEM_REQUIRE_SERVICES=1`.

#[path = "../support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use assert_cmd::Command;
use idem::prelude::*;
use idem::{ApprovalKey, Store, approval::ApprovalKeys};
use serde_json::{Value, json};
use support::services::unique;
use support::tally::Tally;

// ---------------------------------------------------------------------------------------
// The agent's side: its tools, its dispatcher, the key it verifies approvals with.

/// Accounts closed, by `tenant/customer`.
static CLOSED: Tally = Tally::new();
/// Texts handed to the carrier, by `tenant/number`.
static TEXTED: Tally = Tally::new();

/// Close a customer's account for good.
#[tool(class = "irreversible")]
async fn close_account(ctx: &ToolContext, customer: String) -> Result<Value, ToolError> {
    let run = CLOSED.note(
        &format!("{}/{customer}", ctx.tenant()),
        ctx.idempotency_key(),
    );
    Ok(json!({"closed": customer, "run": run}))
}

/// Text a customer; the carrier times out after accepting every message, so the outcome is
/// Unknown until a person settles it.
#[tool(class = "non_idempotent_write")]
async fn text_customer(ctx: &ToolContext, to: String, text: String) -> Result<Value, ToolError> {
    TEXTED.note(&format!("{}/{to}", ctx.tenant()), &text);
    Err(ToolError::ambiguous(
        "the carrier timed out after accepting the message",
    ))
}

/// Note a page visit, kept one second: what `idem records purge` deletes.
#[tool(class = "idempotent_write", ttl_secs = 1)]
async fn note_visit(page: String) -> Result<Value, ToolError> {
    Ok(json!({"noted": page}))
}

/// Cards charged, by `tenant/card`.
static CHARGED: Tally = Tally::new();
/// What holds a charge until the test lets it through: its record stays in progress, as a
/// call still running on a worker, while an operator looks at it.
static GATE: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);

/// Charge a card, once the test lets the charge through the `GATE`.
#[tool(class = "non_idempotent_write")]
async fn charge_card(ctx: &ToolContext, card: String) -> Result<Value, ToolError> {
    let run = CHARGED.note(&format!("{}/{card}", ctx.tenant()), ctx.idempotency_key());
    GATE.acquire()
        .await
        .map_err(|_| ToolError::terminal("the gate closed"))?
        .forget();
    Ok(json!({"charged": card, "run": run}))
}

/// Tag a support ticket: a completed record, kept longer than any test.
#[tool(class = "idempotent_write")]
async fn tag_ticket(ticket: String) -> Result<Value, ToolError> {
    Ok(json!({"tagged": ticket}))
}

/// The key the test agents verify approvals with, and operators sign them with.
const DESK_KEY_ID: &str = "desk-tests";
const DESK_SECRET: &[u8; 32] = b"cli-tests-desk-approval-key-32by";

fn desk_key() -> ApprovalKey {
    ApprovalKey::new(DESK_KEY_ID, *DESK_SECRET).expect("the desk's key")
}

/// The desk's key as an operator hands it to `idem`: `id:hex`.
fn desk_key_text() -> String {
    let hex: String = DESK_SECRET.iter().map(|b| format!("{b:02x}")).collect();
    format!("{DESK_KEY_ID}:{hex}")
}

/// The agent: every `#[tool]` of this file, verifying approvals with the desk's key.
fn agent(store: Arc<dyn Store>) -> Dispatcher {
    Dispatcher::approving(
        Registry::linked().expect("registry"),
        store,
        ApprovalKeys::new([desk_key()]),
    )
    .expect("dispatcher")
}

fn close(call_id: &str, customer: &str) -> ToolCall {
    ToolCall::new("close_account", json!({"customer": customer})).with_call_id(call_id)
}

fn text(call_id: &str, to: &str) -> ToolCall {
    ToolCall::new(
        "text_customer",
        json!({"to": to, "text": "Your technician arrives at 3 pm."}),
    )
    .with_call_id(call_id)
}

fn charge(call_id: &str, card: &str) -> ToolCall {
    ToolCall::new("charge_card", json!({"card": card})).with_call_id(call_id)
}

fn ticket(call_id: &str, ticket: &str) -> ToolCall {
    ToolCall::new("tag_ticket", json!({"ticket": ticket})).with_call_id(call_id)
}

#[cfg(any(feature = "redis", feature = "postgres"))]
fn visit(call_id: &str, page: &str) -> ToolCall {
    ToolCall::new("note_visit", json!({"page": page})).with_call_id(call_id)
}

/// The record key of `call`, as `idem records list` and `idem approvals list` show it.
fn key_of(agent: &Dispatcher, call: &ToolCall, run: &RunContext) -> String {
    agent
        .record_key(call, run)
        .expect("a valid call")
        .expect("a call with a key")
        .as_str()
        .to_owned()
}

/// Dispatch an irreversible `call` that no one approved yet: it is refused, and left in the
/// store for a person.
async fn left_for_approval(agent: &Dispatcher, call: &ToolCall, run: &RunContext) {
    match agent.dispatch(call, run).await {
        Err(DispatchError::ApprovalRequired { .. }) => {}
        other => panic!("expected ApprovalRequired for {call:?}, got {other:?}"),
    }
}

/// Dispatch `call`, whose carrier times out: the outcome is left Unknown.
async fn left_unknown(agent: &Dispatcher, call: &ToolCall, run: &RunContext) {
    match agent.dispatch(call, run).await {
        Err(DispatchError::OutcomeUnknown { .. }) => {}
        other => panic!("expected OutcomeUnknown for {call:?}, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// The operator's side: `idem` as a subprocess, and what it showed.

/// The environment variables `idem` reads, none of which a test inherits from its shell.
const IDEM_ENV: [&str; 5] = [
    "IDEM_STORE",
    "IDEM_STORE_PREFIX",
    "IDEM_APPROVER",
    "IDEM_APPROVAL_KEY",
    "IDEM_LOG",
];

/// The `idem` binary with `args`, in a clean environment.
fn idem(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_idem"));
    for var in IDEM_ENV {
        cmd.env_remove(var);
    }
    // A safety net against a command that hangs, not a measurement.
    cmd.args(args).timeout(Duration::from_secs(120));
    cmd
}

/// What one run of `idem` showed.
#[derive(Debug)]
struct Shown {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Shown {
    /// It exited with `code`, or the test fails showing everything it wrote.
    fn exited(self, code: i32) -> Shown {
        assert_eq!(self.code, Some(code), "idem exited otherwise: {self:#?}");
        self
    }

    /// Its standard error says each of `texts`.
    fn says(self, texts: &[&str]) -> Shown {
        for text in texts {
            assert!(
                self.stderr.contains(text),
                "idem's stderr does not say {text:?}: {self:#?}"
            );
        }
        self
    }

    /// Its standard output says each of `texts`.
    fn prints(self, texts: &[&str]) -> Shown {
        for text in texts {
            assert!(
                self.stdout.contains(text),
                "idem's stdout does not say {text:?}: {self:#?}"
            );
        }
        self
    }

    /// Neither its standard output nor its standard error holds any of `texts`.
    fn hides(self, texts: &[&str]) -> Shown {
        for text in texts {
            assert!(
                !self.stdout.contains(text) && !self.stderr.contains(text),
                "idem showed {text:?}: {self:#?}"
            );
        }
        self
    }

    /// Its standard output, parsed as the JSON `--json` prints.
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("idem printed no JSON ({e}): {self:#?}"))
    }
}

/// Run `cmd`: what it showed.
fn run(cmd: &mut Command) -> Shown {
    let out = cmd.output().expect("run idem");
    Shown {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `idem` with `args` on the store `at` names: `--store SPEC`, and `--prefix P` if needed.
fn on(at: &[&str], args: &[&str]) -> Command {
    let mut cmd = idem(args);
    cmd.args(at);
    cmd
}

/// `on`, deciding as dana@desk with the desk's signing key.
fn deciding(at: &[&str], args: &[&str]) -> Command {
    let mut cmd = on(at, args);
    cmd.args(["--as", "dana@desk"])
        .env("IDEM_APPROVAL_KEY", desk_key_text());
    cmd
}

/// The record under `key`, as `idem records show KEY --json` shows it.
fn record_at(at: &[&str], key: &str) -> Value {
    run(&mut on(at, &["records", "show", key, "--json"]))
        .exited(0)
        .json()
}

/// The approval request under `key`, as `idem approvals show KEY --json` shows it.
fn approval_at(at: &[&str], key: &str) -> Value {
    run(&mut on(at, &["approvals", "show", key, "--json"]))
        .exited(0)
        .json()
}

/// The approval under `key` is still waiting for a person, as `idem approvals show` says.
fn still_pending(at: &[&str], key: &str) {
    let shown = approval_at(at, key);
    assert_eq!(
        (&shown["status"], &shown["decision"]),
        (&json!("pending"), &Value::Null),
        "{shown:#}"
    );
}

/// The keys `idem records list --json` with `args` lists.
fn listed(at: &[&str], args: &[&str]) -> BTreeSet<String> {
    let shown = run(on(at, &["records", "list", "--json"]).args(args))
        .exited(0)
        .json();
    entries(&shown)
        .iter()
        .map(|r| r["key"].as_str().expect("a key").to_owned())
        .collect()
}

/// The entries of a JSON array `idem` printed.
fn entries(value: &Value) -> &[Value] {
    value
        .as_array()
        .unwrap_or_else(|| panic!("expected a JSON array, got {value}"))
}

/// A directory of its own, removed when the test ends.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(unique(tag));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        TempDir(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A TCP port on which nothing listens.
#[cfg(any(feature = "redis", feature = "postgres"))]
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    let port = listener.local_addr().expect("its address").port();
    drop(listener);
    port
}

/// `idem` started with its standard input a pipe the test answers on, and what it writes
/// gathered as it comes: for acting while it waits at the prompt.
struct Prompted {
    child: std::process::Child,
    stdout: Arc<std::sync::Mutex<Vec<u8>>>,
    stderr: Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Prompted {
    fn start(args: &[&str], env: &[(&str, String)]) -> Prompted {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_idem"));
        for var in IDEM_ENV {
            cmd.env_remove(var);
        }
        for (var, value) in env {
            cmd.env(var, value);
        }
        let mut child = cmd
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start idem");
        let gather = |mut pipe: Box<dyn std::io::Read + Send>| {
            let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
            let into = seen.clone();
            std::thread::spawn(move || {
                let mut chunk = [0u8; 4096];
                while let Ok(n @ 1..) = pipe.read(&mut chunk) {
                    into.lock()
                        .expect("gathered output")
                        .extend_from_slice(&chunk[..n]);
                }
            });
            seen
        };
        let stdout = gather(Box::new(child.stdout.take().expect("stdout")));
        let stderr = gather(Box::new(child.stderr.take().expect("stderr")));
        Prompted {
            child,
            stdout,
            stderr,
        }
    }

    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().expect("gathered output")).into_owned()
    }

    /// Wait until its standard error says `text`; it must not exit first.
    async fn wait_for(&mut self, text: &str) {
        // A safety net against a command that never asks, not a measurement.
        for _ in 0..6000 {
            if self.stderr().contains(text) {
                return;
            }
            if let Some(status) = self.child.try_wait().expect("idem's status") {
                panic!(
                    "idem exited ({status}) before saying {text:?}:\n{}",
                    self.stderr()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("idem never said {text:?}:\n{}", self.stderr());
    }

    /// Answer the prompt with `line`, and close its standard input.
    fn answer(&mut self, line: &str) {
        use std::io::Write as _;
        let mut stdin = self.child.stdin.take().expect("stdin");
        stdin.write_all(line.as_bytes()).expect("answer idem");
    }

    /// Wait until it exits; what it showed.
    async fn finish(mut self) -> Shown {
        for _ in 0..6000 {
            if let Some(status) = self.child.try_wait().expect("idem's status") {
                // Its pipes are closed now: the readers finish at once.
                tokio::time::sleep(Duration::from_millis(50)).await;
                let text = |seen: &std::sync::Mutex<Vec<u8>>| {
                    String::from_utf8_lossy(&seen.lock().expect("gathered output")).into_owned()
                };
                return Shown {
                    code: status.code(),
                    stdout: text(&self.stdout),
                    stderr: text(&self.stderr),
                };
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = self.child.kill();
        panic!("idem hung after the prompt:\n{}", self.stderr());
    }
}

/// A SQLite store in `dir`, made by an agent, with a pending approval and an Unknown
/// record; the agent, and the keys of both.
async fn sqlite_with_work(dir: &TempDir) -> (String, Dispatcher, RunContext, String, String) {
    let path = dir.path().join("records.db");
    let store = idem::SqliteStore::open(&path).expect("open SQLite");
    let agent = agent(Arc::new(store));
    let run_ctx = RunContext::new(unique("bad_input"));
    let (pending, unknown) = (close("call-p", "cus_p"), text("call-u", "+351 910 000 044"));
    left_for_approval(&agent, &pending, &run_ctx).await;
    left_unknown(&agent, &unknown, &run_ctx).await;
    let keys = (
        key_of(&agent, &pending, &run_ctx),
        key_of(&agent, &unknown, &run_ctx),
    );
    (
        format!("sqlite:{}", path.display()),
        agent,
        run_ctx,
        keys.0,
        keys.1,
    )
}

mod audit;
mod bad_input;
mod batch;
mod cases;
#[cfg(unix)]
mod crashtest;
mod edited_approval;
mod example_agent;
mod fleet_stores;
mod grants;
mod listing;
mod notify;
mod prompt_postgres;
mod refused_call;
mod refused_stores;
mod release_and_resolve;
mod runs;
mod runs_account;
mod what_is_shown;
