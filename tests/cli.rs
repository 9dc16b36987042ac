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

// ---------------------------------------------------------------------------------------
// 1. SQLite, with the example agent.

/// The example agent's approval key, as an operator hands it to `idem`.
const EXAMPLE_KEY: &str =
    "desk-2026-12:6578616d706c652d617070726f76616c2d6b65792d6e6f742d73656372657421";

/// The example agent built next to this test binary (`target/<profile>/examples/agent`).
fn example_agent() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lives in target/<profile>/deps");
    let agent = profile
        .join("examples")
        .join(format!("agent{}", std::env::consts::EXE_SUFFIX));
    assert!(
        agent.is_file(),
        "the example agent is not built at {}: run `cargo build --example agent` (with this test's --features) first",
        agent.display()
    );
    agent
}

/// Run the example agent on the SQLite file `db` with `args`; its standard output.
fn run_agent(agent: &Path, db: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new(agent)
        .arg("--db")
        .arg(db)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run the example agent");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the example agent failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The example's line for a provider: how many requests it received and effects it applied.
fn provider_line(name: &str, requests: usize, effects: usize) -> String {
    format!("  {name:<18} {requests} requests -> {effects} effects")
}

/// The rows of the example's table for `call` (`what: tool`), in the order they ran.
fn rows<'a>(stdout: &'a str, call: &str) -> Vec<&'a str> {
    stdout.lines().filter(|l| l.starts_with(call)).collect()
}

#[test]
fn an_operator_settles_what_the_example_agent_left_and_its_retry_obeys() {
    let agent = example_agent();
    let dir = TempDir::new("idem_cli_example");
    let db = dir.path().join("agent.db");
    let store = format!("sqlite:{}", db.display());
    let on_store = |args: &[&str]| {
        let mut cmd = idem(args);
        cmd.args(["--store", &store]);
        cmd
    };
    const DELETE_ROW: &str = "irreversible, left to an operator: delete_account";
    const SMS_ROW: &str = "carrier times out, left to an operator: send_sms";
    const REASON: &str = "the customer called back: keep the account";

    let first = run_agent(&agent, &db, &["--fresh", "--leave-to-operator"]);
    assert!(
        first.contains("waiting for a person: delete_account"),
        "{first}"
    );

    // The operator finds the unknown outcome the agent left...
    let open = run(&mut on_store(&["records", "list", "--json"]))
        .exited(0)
        .json();
    let open = entries(&open);
    assert_eq!(
        open.len(),
        1,
        "one open record, the text message: {open:#?}"
    );
    let sms = &open[0];
    assert_eq!(
        (&sms["tool"], &sms["tenant"], &sms["state"]),
        (&json!("send_sms"), &json!("acme-corp"), &json!("unknown"))
    );
    assert!(
        sms["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("carrier timed out")),
        "{sms:#}"
    );
    let sms_key = sms["key"].as_str().expect("a key").to_owned();

    // ...and the two deletions waiting for a person.
    let pending = run(&mut on_store(&["approvals", "list", "--json"]))
        .exited(0)
        .json();
    let pending = entries(&pending);
    assert_eq!(pending.len(), 2, "{pending:#?}");
    let key_for = |customer: &str| {
        let entry = pending
            .iter()
            .find(|e| e["arguments"] == json!({"customer_id": customer}))
            .unwrap_or_else(|| panic!("no pending deletion of {customer}: {pending:#?}"));
        assert_eq!(
            (&entry["tool"], &entry["tenant"], &entry["status"]),
            (
                &json!("delete_account"),
                &json!("acme-corp"),
                &json!("pending")
            )
        );
        entry["key"].as_str().expect("a key").to_owned()
    };
    let (keep, gone) = (key_for("cus_77"), key_for("cus_99"));

    // A prompt nothing answers changes nothing.
    run(
        on_store(&["approvals", "approve", &gone, "--as", "dana@desk"])
            .env("IDEM_APPROVAL_KEY", EXAMPLE_KEY),
    )
    .exited(6)
    .says(&["Proceed? [y/N]", "nothing changed", "--yes"]);
    still_pending(&["--store", &store], &gone);

    // The operator checked the carrier's log: the message went out. Answered at the prompt.
    let resolved = run(on_store(&[
        "records",
        "resolve",
        &sms_key,
        "--value",
        r#"{"sms": 1, "delivered": true}"#,
        "--as",
        "lee@desk",
    ])
    .write_stdin("y\n"))
    .exited(0)
    .says(&["Resolve", "send_sms", "Proceed? [y/N]"]);
    assert!(
        resolved
            .stdout
            .contains(&format!("resolved {sms_key} by lee@desk")),
        "{resolved:#?}"
    );
    let record = run(&mut on_store(&["records", "show", &sms_key, "--json"]))
        .exited(0)
        .json();
    assert_eq!(record["state"], "completed", "{record:#}");
    assert_eq!(
        record["outcome"]["success"],
        json!({"sms": 1, "delivered": true})
    );

    // One deletion approved, the other denied with a reason.
    let approved = run(
        on_store(&["approvals", "approve", &gone, "--as", "dana@desk", "--yes"])
            .env("IDEM_APPROVAL_KEY", EXAMPLE_KEY),
    )
    .exited(0);
    assert!(
        approved.stdout.contains(&format!("approved {gone}")),
        "{approved:#?}"
    );
    run(&mut on_store(&[
        "approvals",
        "deny",
        &keep,
        "--reason",
        REASON,
        "--as",
        "lee@desk",
        "--yes",
    ]))
    .exited(0);
    // A decision is made once.
    run(
        on_store(&["approvals", "approve", &gone, "--as", "dana@desk", "--yes"])
            .env("IDEM_APPROVAL_KEY", EXAMPLE_KEY),
    )
    .exited(5)
    .says(&["already decided", "dana@desk"]);
    let waiting = run(&mut on_store(&["approvals", "list", "--json"]))
        .exited(0)
        .json();
    assert_eq!(waiting, json!([]), "nothing waits for a person any more");

    // The agent's retry: the approved deletion runs once, the denied one is refused with the
    // reason, the text message is replayed as resolved.
    let second = run_agent(&agent, &db, &["--leave-to-operator"]);
    assert!(
        second.contains(&provider_line("account deletions", 1, 1)),
        "{second}"
    );
    assert!(
        second.contains(&provider_line("text messages", 0, 0)),
        "{second}"
    );
    let deletions = rows(&second, DELETE_ROW);
    assert_eq!(deletions.len(), 2, "{second}");
    assert!(deletions[0].contains("executed (1 attempt)"), "{second}");
    assert!(deletions[0].contains("cus_99"), "{second}");
    assert!(
        deletions[1].contains("refused: approval_denied") && deletions[1].contains(REASON),
        "{second}"
    );
    let texted = rows(&second, SMS_ROW);
    assert_eq!(texted.len(), 1, "{second}");
    assert!(texted[0].contains("deduplicated (replayed"), "{second}");
    assert!(texted[0].contains("delivered"), "{second}");
    assert!(!second.contains("waiting for a person"), "{second}");
    assert!(second.contains("resolves them): 0"), "{second}");

    // Once more: the deletion is replayed, never run again; the denial stands.
    let third = run_agent(&agent, &db, &["--leave-to-operator"]);
    assert!(
        third.contains(&provider_line("account deletions", 0, 0)),
        "{third}"
    );
    let deletions = rows(&third, DELETE_ROW);
    assert_eq!(deletions.len(), 2, "{third}");
    assert!(
        deletions[0].contains("deduplicated (replayed") && deletions[0].contains("cus_99"),
        "{third}"
    );
    assert!(deletions[1].contains("refused: approval_denied"), "{third}");
}

// ---------------------------------------------------------------------------------------
// 2. Redis and PostgreSQL: the test is the agent, `idem` the operator, on one store.

/// Whether the store deletes expired records by itself (Redis expires their keys), so that
/// a purge may find fewer than expired.
#[derive(Clone, Copy, PartialEq, Eq)]
#[cfg(any(feature = "redis", feature = "postgres"))]
enum Expiry {
    ByPurge,
    ByServer,
}

/// The flow an operator and an agent go through on the store at `url` under `prefix` (the
/// Redis key prefix or PostgreSQL schema): `store` is the agent's connection to it.
#[cfg(any(feature = "redis", feature = "postgres"))]
async fn operator_flow(store: Arc<dyn Store>, url: &str, prefix: &str, expiry: Expiry) {
    // The prefix is unique to this run; so are the tenants, and the tallies' labels with them.
    let tenant = prefix.to_owned();
    let purged_tenant = format!("{prefix}_old");
    let agent = agent(store);
    let run_ctx = RunContext::new(&tenant);
    let old = RunContext::new(&purged_tenant);
    let on_store = |args: &[&str]| {
        let mut cmd = idem(args);
        cmd.args(["--store", url, "--prefix", prefix]);
        cmd
    };
    let deciding = |args: &[&str]| {
        let mut cmd = on_store(args);
        cmd.env("IDEM_APPROVAL_KEY", desk_key_text());
        cmd
    };
    const REASON: &str = "the customer asked to keep the account";

    // What the agent leaves for a person: two irreversible calls, a text whose carrier timed
    // out; and, in another tenant, a text and two visits that will be old enough to purge.
    let (gone, keep) = (
        close("call-gone", "cus_gone"),
        close("call-keep", "cus_keep"),
    );
    left_for_approval(&agent, &gone, &run_ctx).await;
    left_for_approval(&agent, &keep, &run_ctx).await;
    let texted = text("call-text", "+351 910 000 042");
    left_unknown(&agent, &texted, &run_ctx).await;
    let stale = text("call-stale", "+351 910 000 043");
    left_unknown(&agent, &stale, &old).await;
    let visits = [visit("call-v1", "/pricing"), visit("call-v2", "/docs")];
    for call in &visits {
        agent.dispatch(call, &old).await.expect("a visit noted");
    }
    let (gone_key, keep_key) = (
        key_of(&agent, &gone, &run_ctx),
        key_of(&agent, &keep, &run_ctx),
    );
    let text_key = key_of(&agent, &texted, &run_ctx);
    let stale_key = key_of(&agent, &stale, &old);

    // The operator lists them.
    let open = run(&mut on_store(&[
        "records", "list", "--tenant", &tenant, "--json",
    ]))
    .exited(0)
    .json();
    let open = entries(&open);
    assert_eq!(open.len(), 1, "{open:#?}");
    assert_eq!(open[0]["key"], json!(text_key));
    assert_eq!(
        (&open[0]["tool"], &open[0]["state"]),
        (&json!("text_customer"), &json!("unknown"))
    );
    assert!(
        open[0]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("carrier timed out")),
        "{:#}",
        open[0]
    );
    let pending = run(&mut on_store(&[
        "approvals",
        "list",
        "--tenant",
        &tenant,
        "--json",
    ]))
    .exited(0)
    .json();
    let mut listed: Vec<(String, Value, Value)> = entries(&pending)
        .iter()
        .map(|e| {
            assert_eq!(
                (&e["tool"], &e["status"]),
                (&json!("close_account"), &json!("pending"))
            );
            (
                e["key"].as_str().expect("a key").to_owned(),
                e["arguments"].clone(),
                e["decision"].clone(),
            )
        })
        .collect();
    listed.sort_by_key(|entry| entry.1.to_string());
    assert_eq!(
        listed,
        vec![
            (
                gone_key.clone(),
                json!({"customer": "cus_gone"}),
                Value::Null
            ),
            (
                keep_key.clone(),
                json!({"customer": "cus_keep"}),
                Value::Null
            ),
        ]
    );
    let stats = run(&mut on_store(&["stats", "--json"])).exited(0).json();
    assert_eq!(stats["records"]["unknown"], 2, "{stats:#}");
    assert_eq!(stats["pending_approvals"], 2, "{stats:#}");

    // Resolved: the agent's next call replays the outcome the operator established, and the
    // carrier is not asked again.
    let texted_label = format!("{tenant}/+351 910 000 042");
    assert_eq!(TEXTED.count(&texted_label), 1);
    let resolved = run(&mut on_store(&[
        "records",
        "resolve",
        &text_key,
        "--value",
        r#"{"delivered": true}"#,
        "--as",
        "lee@desk",
        "--yes",
    ]))
    .exited(0);
    assert!(
        resolved
            .stdout
            .contains(&format!("resolved {text_key} by lee@desk")),
        "{resolved:#?}"
    );
    let replayed = agent
        .dispatch(&texted, &run_ctx)
        .await
        .expect("the resolved outcome");
    assert!(replayed.deduplicated, "{replayed:?}");
    assert_eq!(replayed.output, json!({"delivered": true}));
    assert_eq!(TEXTED.count(&texted_label), 1);

    // Approved: the agent's retry runs it once, and a further call is a replay.
    let gone_label = format!("{tenant}/cus_gone");
    assert_eq!(CLOSED.count(&gone_label), 0);
    let approved = run(&mut deciding(&[
        "approvals",
        "approve",
        &gone_key,
        "--as",
        "dana@desk",
        "--yes",
    ]))
    .exited(0);
    assert!(
        approved.stdout.contains(&format!("approved {gone_key}")),
        "{approved:#?}"
    );
    let ran = agent
        .dispatch(&gone, &run_ctx)
        .await
        .expect("the approved call");
    assert!(!ran.deduplicated, "{ran:?}");
    assert_eq!(ran.output["closed"], "cus_gone");
    assert_eq!(CLOSED.count(&gone_label), 1);
    let again = agent
        .dispatch(&gone, &run_ctx)
        .await
        .expect("the approved call, replayed");
    assert!(again.deduplicated, "{again:?}");
    assert_eq!(CLOSED.count(&gone_label), 1);
    run(&mut deciding(&[
        "approvals",
        "approve",
        &gone_key,
        "--as",
        "dana@desk",
        "--yes",
    ]))
    .exited(5)
    .says(&["already decided"]);

    // Denied: every retry is refused with the reason, and nothing runs.
    run(&mut on_store(&[
        "approvals",
        "deny",
        &keep_key,
        "--reason",
        REASON,
        "--as",
        "lee@desk",
        "--yes",
    ]))
    .exited(0);
    for _ in 0..2 {
        match agent.dispatch(&keep, &run_ctx).await {
            Err(DispatchError::ApprovalDenied { by, reason, .. }) => {
                assert_eq!((by.as_str(), reason.as_str()), ("lee@desk", REASON));
            }
            other => panic!("expected ApprovalDenied, got {other:?}"),
        }
    }
    assert_eq!(CLOSED.count(&format!("{tenant}/cus_keep")), 0);
    let decided = run(&mut on_store(&[
        "approvals",
        "list",
        "--tenant",
        &tenant,
        "--json",
    ]))
    .exited(0)
    .json();
    assert_eq!(decided, json!([]), "nothing waits for a person any more");

    // Purged: past their retention the old tenant's records go, and the others stay.
    run(&mut on_store(&["records", "show", &stale_key, "--json"])).exited(0);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    for call in &visits {
        let key = key_of(&agent, call, &old);
        run(&mut on_store(&["records", "show", &key]))
            .exited(4)
            .says(&["no record under key"]);
    }
    let purged = run(&mut on_store(&[
        "records",
        "purge",
        "--tenant",
        &purged_tenant,
        "--unknown-retention",
        "1s",
        "--json",
    ]))
    .exited(0)
    .json();
    let purged = purged["purged"]
        .as_u64()
        .expect("a count of purged records");
    match expiry {
        // The stale text and both visits.
        Expiry::ByPurge => assert_eq!(purged, 3),
        // The stale text; Redis may have expired the visits' keys itself already.
        Expiry::ByServer => assert!((1..=3).contains(&purged), "purged {purged}"),
    }
    run(&mut on_store(&["records", "show", &stale_key]))
        .exited(4)
        .says(&["no record under key"]);
    let kept = run(&mut on_store(&["records", "show", &text_key, "--json"]))
        .exited(0)
        .json();
    assert_eq!(kept["state"], "completed", "{kept:#}");
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_the_agent_obeys_what_the_operator_decided() {
    use support::redis_keys::redis_prefixes;
    use support::services::{REDIS_URL, service_url};
    let Some(url) = service_url(
        REDIS_URL,
        "on_redis_the_agent_obeys_what_the_operator_decided",
    ) else {
        return;
    };
    let prefixes = redis_prefixes(&url);
    let prefix = prefixes.fresh("idem_cli");
    let store = idem::RedisStore::connect(&url, &prefix)
        .await
        .expect("connect to Redis");
    operator_flow(Arc::new(store), &url, &prefix, Expiry::ByServer).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_the_agent_obeys_what_the_operator_decided() {
    use support::postgres_schemas::postgres_schemas;
    use support::services::{POSTGRES_URL, service_url};
    let Some(url) = service_url(
        POSTGRES_URL,
        "on_postgres_the_agent_obeys_what_the_operator_decided",
    ) else {
        return;
    };
    let schemas = postgres_schemas(&url);
    let schema = schemas.fresh("idem_cli");
    let store = idem::PostgresStore::connect(&url, &schema)
        .await
        .expect("connect to PostgreSQL");
    operator_flow(Arc::new(store), &url, &schema, Expiry::ByPurge).await;
}

// ---------------------------------------------------------------------------------------
// 3. Bad input: a clear message, and nothing changed.

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

#[test]
fn a_malformed_store_is_refused_naming_the_forms_a_store_takes() {
    for (spec, why) in [
        ("redis:/x", "a `redis` URL begins `redis://`"),
        ("postgres:x", "a `postgres` URL begins `postgres://`"),
        ("ftp://x", "unknown store scheme `ftp://`"),
    ] {
        run(&mut idem(&["records", "list", "--store", spec]))
            .exited(2)
            .says(&[
                &format!("`--store {spec}`"),
                why,
                "sqlite:PATH",
                "redis://HOST:PORT",
            ]);
    }
    run(&mut idem(&["records", "list", "--store", "sqlite:"]))
        .exited(2)
        .says(&["`sqlite:` needs a file's path after it"]);
    run(&mut idem(&["approvals", "list"]))
        .exited(2)
        .says(&["no store", "--store", "IDEM_STORE"]);
}

#[test]
fn a_sqlite_file_that_does_not_exist_is_not_created() {
    let dir = TempDir::new("idem_cli_missing");
    let path = dir.path().join("typo.db");
    let spec = format!("sqlite:{}", path.display());
    for args in [
        &["records", "list"][..],
        &["approvals", "list"],
        &["stats"],
        &["records", "purge"],
    ] {
        run(idem(args).args(["--store", &spec]))
            .exited(3)
            .says(&["no SQLite store at", &path.display().to_string()]);
        assert!(!path.exists(), "`idem {args:?}` created {}", path.display());
    }
}

#[tokio::test]
async fn an_unknown_key_is_not_found_and_a_known_one_is_untouched() {
    let dir = TempDir::new("idem_cli_unknown_key");
    let (store, agent, run_ctx, pending_key, _) = sqlite_with_work(&dir).await;
    let on_store = |args: &[&str]| {
        let mut cmd = idem(args);
        cmd.args(["--store", &store, "--as", "dana@desk", "--yes"])
            .env("IDEM_APPROVAL_KEY", desk_key_text());
        cmd
    };
    for args in [
        &["records", "resolve", "nope", "--value", "1"][..],
        &["records", "release", "nope"],
    ] {
        run(&mut on_store(args))
            .exited(4)
            .says(&["no record under key nope", "idem records list"]);
    }
    for args in [
        &["approvals", "approve", "nope"][..],
        &["approvals", "deny", "nope", "--reason", "no"],
    ] {
        run(&mut on_store(args))
            .exited(4)
            .says(&["no approval was requested under key nope"]);
    }
    run(idem(&["records", "show", "nope"]).args(["--store", &store]))
        .exited(4)
        .says(&["no record under key nope"]);
    run(idem(&["approvals", "show", "nope"]).args(["--store", &store]))
        .exited(4)
        .says(&["no approval was requested under key nope"]);

    still_pending(&["--store", &store], &pending_key);
    left_for_approval(&agent, &close("call-p", "cus_p"), &run_ctx).await;
}

#[tokio::test]
async fn a_decision_needs_an_identity_and_a_signing_key() {
    let dir = TempDir::new("idem_cli_identity");
    let (store, agent, run_ctx, pending_key, _) = sqlite_with_work(&dir).await;
    let approve = |extra: &[&str]| {
        let mut cmd = idem(&["approvals", "approve", &pending_key, "--yes"]);
        cmd.args(["--store", &store]).args(extra);
        cmd
    };

    run(approve(&[]).env("IDEM_APPROVAL_KEY", desk_key_text()))
        .exited(2)
        .says(&["who decides?", "--as", "IDEM_APPROVER"]);
    run(&mut idem(&[
        "approvals",
        "deny",
        &pending_key,
        "--reason",
        "no",
        "--yes",
        "--store",
        &store,
    ]))
    .exited(2)
    .says(&["who decides?"]);
    run(&mut approve(&["--as", "dana@desk"])).exited(2).says(&[
        "no key to sign approvals with",
        "IDEM_APPROVAL_KEY",
        "--approval-key-file",
    ]);
    // The identity from the environment is as good as `--as`; the key is still missing.
    run(approve(&[]).env("IDEM_APPROVER", "dana@desk"))
        .exited(2)
        .says(&["no key to sign approvals with"]);
    run(approve(&["--as", "dana@desk"]).env("IDEM_APPROVAL_KEY", "no-colon-here"))
        .exited(2)
        .says(&["IDEM_APPROVAL_KEY", "not `id:hex-secret`"]);
    let missing = dir.path().join("no-such-key");
    run(&mut approve(&[
        "--as",
        "dana@desk",
        "--approval-key-file",
        &missing.display().to_string(),
    ]))
    .exited(2)
    .says(&["cannot read the signing key file"]);

    // Nothing was decided: the agent's retry is still refused, waiting for a person.
    still_pending(&["--store", &store], &pending_key);
    left_for_approval(&agent, &close("call-p", "cus_p"), &run_ctx).await;
    assert_eq!(CLOSED.count(&format!("{}/cus_p", run_ctx.tenant)), 0);
}

#[tokio::test]
async fn a_resolve_with_invalid_json_changes_nothing() {
    let dir = TempDir::new("idem_cli_bad_json");
    let (store, agent, run_ctx, _, unknown_key) = sqlite_with_work(&dir).await;
    run(&mut idem(&[
        "records",
        "resolve",
        &unknown_key,
        "--value",
        r#"{"delivered": tru"#,
        "--as",
        "lee@desk",
        "--yes",
        "--store",
        &store,
    ]))
    .exited(2)
    .says(&["--value is not JSON", "quote a string"]);

    let record = record_at(&["--store", &store], &unknown_key);
    assert_eq!(record["state"], "unknown", "{record:#}");
    left_unknown(&agent, &text("call-u", "+351 910 000 044"), &run_ctx).await;
}

#[cfg(feature = "redis")]
#[test]
fn an_unreachable_redis_is_a_store_failure_naming_it() {
    let url = format!("redis://127.0.0.1:{}", closed_port());
    run(&mut idem(&["records", "list", "--store", &url]))
        .exited(3)
        .says(&["Redis", &url]);
}

#[cfg(feature = "redis")]
#[test]
fn an_empty_redis_prefix_says_it_may_be_mistyped() {
    use support::redis_keys::redis_prefixes;
    use support::services::{REDIS_URL, service_url};
    let Some(url) = service_url(REDIS_URL, "an_empty_redis_prefix_says_it_may_be_mistyped") else {
        return;
    };
    let prefixes = redis_prefixes(&url);
    let prefix = prefixes.fresh("idem_cli_typo");
    for command in [&["records", "list"][..], &["approvals", "list"], &["stats"]] {
        let mut args = command.to_vec();
        args.extend(["--store", &url, "--prefix", &prefix]);
        run(&mut idem(&args)).exited(0).says(&[
            &format!("nothing under the key prefix `{prefix}`"),
            "--prefix",
        ]);
    }
}

#[cfg(feature = "postgres")]
#[test]
fn an_unreachable_postgres_is_a_store_failure_naming_it() {
    let url = format!("postgres://idem@127.0.0.1:{}/idem", closed_port());
    run(&mut idem(&["approvals", "list", "--store", &url]))
        .exited(3)
        .says(&["PostgreSQL", &url]);
}

// ---------------------------------------------------------------------------------------
// 4. A PostgreSQL store that goes away while `idem` waits at its prompt.

/// `url` with the query parameter `param` added.
#[cfg(feature = "postgres")]
fn with_param(url: &str, param: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}{param}")
}

/// A pending approval of `close_account` on PostgreSQL, in a schema of its own: the agent,
/// its run, the call and its key.
#[cfg(feature = "postgres")]
async fn postgres_pending(url: &str, schema: &str) -> (Dispatcher, RunContext, ToolCall, String) {
    let store = idem::PostgresStore::connect(url, schema)
        .await
        .expect("connect to PostgreSQL");
    let agent = agent(Arc::new(store));
    let run_ctx = RunContext::new(schema);
    let call = close("call-cut", "cus_cut");
    left_for_approval(&agent, &call, &run_ctx).await;
    let key = key_of(&agent, &call, &run_ctx);
    (agent, run_ctx, call, key)
}

/// `idem approvals approve KEY` on `store_url`, waiting at its prompt.
#[cfg(feature = "postgres")]
async fn approve_at_prompt(store_url: &str, schema: &str, key: &str) -> Prompted {
    let mut cli = Prompted::start(
        &[
            "approvals",
            "approve",
            key,
            "--store",
            store_url,
            "--prefix",
            schema,
            "--as",
            "dana@desk",
        ],
        &[("IDEM_APPROVAL_KEY", desk_key_text())],
    );
    cli.wait_for("Proceed? [y/N]").await;
    cli
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_connection_terminated_at_the_prompt() {
    use idem::store::postgres::deadpool_postgres::tokio_postgres::{self, NoTls};
    use support::postgres_schemas::postgres_schemas;
    use support::services::{POSTGRES_URL, service_url};
    let Some(url) = service_url(
        POSTGRES_URL,
        "a_postgres_connection_terminated_at_the_prompt",
    ) else {
        return;
    };
    let schemas = postgres_schemas(&url);
    let schema = schemas.fresh("idem_cli_cut");
    let (agent, run_ctx, call, key) = postgres_pending(&url, &schema).await;

    // The command's connections carry a name of their own, so that only they are cut.
    let name = schema.clone();
    let cli_url = with_param(&url, &format!("application_name={name}"));
    let mut cli = approve_at_prompt(&cli_url, &schema, &key).await;
    let (admin, connection) = tokio_postgres::connect(&url, NoTls)
        .await
        .expect("connect to terminate idem's connection");
    tokio::spawn(connection);
    let cut = admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = $1 AND pid <> pg_backend_pid()",
            &[&name],
        )
        .await
        .expect("terminate idem's connection");
    assert!(!cut.is_empty(), "idem held no connection at its prompt");
    for _ in 0..500 {
        let left: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                &[&name],
            )
            .await
            .expect("idem's connections")
            .get(0);
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Time for idem's side of the connection to see it closed (its pool then opens a new
    // one); without it, the command may pick the dead connection and fail instead.
    tokio::time::sleep(Duration::from_millis(200)).await;
    cli.answer("y\n");
    let shown = cli.finish().await;

    // Either outcome is right as long as idem says which: a new connection and the approval
    // made, or a failure naming PostgreSQL and nothing changed.
    let label = format!("{}/cus_cut", run_ctx.tenant);
    if shown.code == Some(0) {
        eprintln!("idem opened a new connection after the cut and approved");
        assert!(
            shown.stdout.contains(&format!("approved {key}")),
            "{shown:#?}"
        );
        let ran = agent
            .dispatch(&call, &run_ctx)
            .await
            .expect("the approved call");
        assert!(!ran.deduplicated, "{ran:?}");
        let again = agent.dispatch(&call, &run_ctx).await.expect("a replay");
        assert!(again.deduplicated, "{again:?}");
        assert_eq!(CLOSED.count(&label), 1);
    } else {
        eprintln!("idem failed on the cut connection; nothing changed");
        shown.exited(3).says(&["PostgreSQL", "store unavailable"]);
        still_pending(&["--store", &url, "--prefix", &schema], &key);
        left_for_approval(&agent, &call, &run_ctx).await;
        assert_eq!(CLOSED.count(&label), 0);
    }
}

/// A TCP relay to a server that the test can cut: every connection through it is dropped
/// and new ones are refused, as when the server goes away.
#[cfg(feature = "postgres")]
struct Relay {
    addr: std::net::SocketAddr,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

#[cfg(feature = "postgres")]
impl Relay {
    async fn to(server: std::net::SocketAddr) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the relay");
        let addr = listener.local_addr().expect("the relay's address");
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let mut links = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((mut inbound, _)) = accepted else { break };
                        links.spawn(async move {
                            if let Ok(mut outbound) = tokio::net::TcpStream::connect(server).await {
                                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                            }
                        });
                    }
                    _ = stopped.changed() => break,
                }
            }
            drop(listener);
            links.abort_all();
            while links.join_next().await.is_some() {}
        });
        Relay { addr, stop, task }
    }

    /// Drop every connection and refuse new ones; returns once they are closed.
    async fn cut(self) {
        let _ = self.stop.send(true);
        self.task.await.expect("the relay stops");
    }
}

/// `url` with its host and port replaced by `addr`.
#[cfg(feature = "postgres")]
fn via(url: &str, addr: std::net::SocketAddr) -> String {
    let (scheme, rest) = url.split_once("://").expect("a postgres:// URL");
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let user = authority
        .rsplit_once('@')
        .map(|(user, _)| format!("{user}@"))
        .unwrap_or_default();
    format!("{scheme}://{user}{addr}{tail}")
}

/// The host and port of a PostgreSQL URL.
#[cfg(feature = "postgres")]
async fn server_of(url: &str) -> std::net::SocketAddr {
    use idem::store::postgres::deadpool_postgres::tokio_postgres::config::{Config, Host};
    let config: Config = url.parse().expect("a PostgreSQL URL");
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(host)) => host.clone(),
        other => panic!("this test relays TCP only, not {other:?}"),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    tokio::net::lookup_host((host.as_str(), port))
        .await
        .expect("resolve the PostgreSQL host")
        .next()
        .expect("an address of the PostgreSQL host")
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_server_gone_at_the_prompt_changes_nothing() {
    use support::postgres_schemas::postgres_schemas;
    use support::services::{POSTGRES_URL, service_url};
    let Some(url) = service_url(
        POSTGRES_URL,
        "a_postgres_server_gone_at_the_prompt_changes_nothing",
    ) else {
        return;
    };
    let schemas = postgres_schemas(&url);
    let schema = schemas.fresh("idem_cli_gone");
    let (agent, run_ctx, call, key) = postgres_pending(&url, &schema).await;

    // The command reaches the server through a relay, cut while it waits at its prompt.
    let relay = Relay::to(server_of(&url).await).await;
    let relayed = via(&url, relay.addr);
    let mut cli = approve_at_prompt(&relayed, &schema, &key).await;
    relay.cut().await;
    cli.answer("y\n");
    cli.finish().await.exited(3).says(&[
        "PostgreSQL at",
        &relay_shown(&relayed),
        "store unavailable",
    ]);

    // Nothing was decided: the agent's retry still waits for a person, and nothing ran.
    let label = format!("{}/cus_cut", run_ctx.tenant);
    still_pending(&["--store", &url, "--prefix", &schema], &key);
    left_for_approval(&agent, &call, &run_ctx).await;
    assert_eq!(CLOSED.count(&label), 0);

    // Once the server answers again, the same command decides it, and the call runs once.
    run(idem(&[
        "approvals",
        "approve",
        &key,
        "--as",
        "dana@desk",
        "--yes",
        "--store",
        &url,
        "--prefix",
        &schema,
    ])
    .env("IDEM_APPROVAL_KEY", desk_key_text()))
    .exited(0);
    let ran = agent
        .dispatch(&call, &run_ctx)
        .await
        .expect("the approved call");
    assert!(!ran.deduplicated, "{ran:?}");
    assert_eq!(CLOSED.count(&label), 1);
}

/// How idem names the relayed store: its URL up to the database (no password here).
#[cfg(feature = "postgres")]
fn relay_shown(url: &str) -> String {
    url.split('?').next().unwrap_or(url).to_owned()
}

// ---------------------------------------------------------------------------------------
// 5. An approval with edited arguments.

/// Approve the pending `close_account` of `customer` (call `call_id`) as closing `edited`
/// instead, with `edit` (`--edit JSON` or `--edit-file FILE`): the agent's call as made is
/// refused with the edited arguments, the call with them runs once, and a further one is a
/// replay.
async fn runs_once_as_edited(
    at: &[&str],
    agent: &Dispatcher,
    run_ctx: &RunContext,
    (call_id, customer): (&str, &str),
    edited: &str,
    edit: &[&str],
) {
    let call = close(call_id, customer);
    let key = key_of(agent, &call, run_ctx);
    let arguments = json!({"customer": edited});
    run(deciding(at, &["approvals", "approve", &key, "--yes"]).args(edit))
        .exited(0)
        .says(&["EDITED arguments", edited])
        .prints(&[
            &format!("approved {key}"),
            "refused with the edited arguments",
        ]);
    let decided = approval_at(at, &key);
    assert_eq!(decided["status"], "approved", "{decided:#}");
    assert_eq!(decided["decision"]["edited_arguments"], arguments);

    let (as_called, as_edited) = (
        format!("{}/{customer}", run_ctx.tenant),
        format!("{}/{edited}", run_ctx.tenant),
    );
    match agent.dispatch(&call, run_ctx).await {
        Err(DispatchError::ApprovalEdited { arguments: got, .. }) => assert_eq!(*got, arguments),
        other => panic!("expected ApprovalEdited, got {other:?}"),
    }
    assert_eq!((CLOSED.count(&as_called), CLOSED.count(&as_edited)), (0, 0));
    let edited_call = close(call_id, edited);
    let ran = agent
        .dispatch(&edited_call, run_ctx)
        .await
        .expect("the call with the edited arguments");
    assert!(!ran.deduplicated, "{ran:?}");
    assert_eq!(ran.output["closed"], edited);
    let again = agent
        .dispatch(&edited_call, run_ctx)
        .await
        .expect("a replay");
    assert!(again.deduplicated, "{again:?}");
    assert_eq!((CLOSED.count(&as_called), CLOSED.count(&as_edited)), (0, 1));
}

#[tokio::test]
async fn an_approval_edited_by_the_operator_runs_once_with_the_edits_only() {
    let dir = TempDir::new("idem_cli_edited");
    let (store, agent, run_ctx, pending_key, _) = sqlite_with_work(&dir).await;
    let at = ["--store", store.as_str()];
    let not_an_object = dir.path().join("list.json");
    std::fs::write(&not_an_object, "[1]").expect("write the edits");
    let not_an_object = not_an_object.display().to_string();

    // Edits that are not a call's arguments are refused, and nothing is decided.
    for (edit, why) in [
        (&["--edit", "[1]"][..], "edited arguments are a JSON object"),
        (&["--edit", "nope"], "--edit: not JSON"),
        (
            &["--edit-file", &not_an_object],
            "edited arguments are a JSON object",
        ),
        (
            &["--edit", "{}", "--edit-file", &not_an_object],
            "cannot be used with",
        ),
    ] {
        run(deciding(&at, &["approvals", "approve", &pending_key, "--yes"]).args(edit))
            .exited(2)
            .says(&[why]);
    }
    still_pending(&at, &pending_key);
    left_for_approval(&agent, &close("call-p", "cus_p"), &run_ctx).await;

    runs_once_as_edited(
        &at,
        &agent,
        &run_ctx,
        ("call-p", "cus_p"),
        "cus_p_instead",
        &["--edit", r#"{"customer": "cus_p_instead"}"#],
    )
    .await;

    left_for_approval(&agent, &close("call-q", "cus_q"), &run_ctx).await;
    let edits = dir.path().join("edits.json");
    std::fs::write(&edits, r#"{"customer": "cus_q_instead"}"#).expect("write the edits");
    runs_once_as_edited(
        &at,
        &agent,
        &run_ctx,
        ("call-q", "cus_q"),
        "cus_q_instead",
        &["--edit-file", &edits.display().to_string()],
    )
    .await;
}

// ---------------------------------------------------------------------------------------
// 6. Releasing and resolving: Unknown, in progress, and changed at the prompt.

#[tokio::test]
async fn an_unknown_record_released_runs_again_when_called() {
    let dir = TempDir::new("idem_cli_release");
    let (store, agent, run_ctx, _, unknown_key) = sqlite_with_work(&dir).await;
    let at = ["--store", store.as_str()];
    let call = text("call-u", "+351 910 000 044");
    let label = format!("{}/+351 910 000 044", run_ctx.tenant);
    assert_eq!(TEXTED.count(&label), 1);

    run(&mut on(
        &at,
        &[
            "records",
            "release",
            &unknown_key,
            "--as",
            "lee@desk",
            "--yes",
        ],
    ))
    .exited(0)
    .says(&["Release", "text_customer", "the call runs again"])
    .prints(&[&format!("released {unknown_key} by lee@desk")]);
    run(&mut on(&at, &["records", "show", &unknown_key]))
        .exited(4)
        .says(&["no record under key"]);

    // The carrier is asked again (and times out again).
    left_unknown(&agent, &call, &run_ctx).await;
    assert_eq!(TEXTED.count(&label), 2);
    assert_eq!(record_at(&at, &unknown_key)["state"], "unknown");
}

/// Dispatch `call` on a task of its own, and return once its body runs, held at the
/// `GATE`: its record is in progress until [`let_through`].
async fn running(
    agent: &Dispatcher,
    call: &ToolCall,
    run_ctx: &RunContext,
) -> tokio::task::JoinHandle<Result<Dispatched, DispatchError>> {
    let card = call.arguments["card"].as_str().expect("a card");
    let label = format!("{}/{card}", run_ctx.tenant);
    let before = CHARGED.count(&label);
    let (agent, call, run_ctx) = (agent.clone(), call.clone(), run_ctx.clone());
    let worker = tokio::spawn(async move { agent.dispatch(&call, &run_ctx).await });
    // A safety net against a body that never starts, not a measurement.
    for _ in 0..6000 {
        if CHARGED.count(&label) > before {
            return worker;
        }
        assert!(
            !worker.is_finished(),
            "the dispatch ended before its body ran"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the body of {label} never ran");
}

/// Let a body held at the `GATE` finish: what its dispatch returned.
async fn let_through(
    worker: tokio::task::JoinHandle<Result<Dispatched, DispatchError>>,
) -> Result<Dispatched, DispatchError> {
    GATE.add_permits(1);
    let ended = worker.await.expect("the dispatch's task");
    // A body stopped first because its worker lost the key took no permit: none is left over
    // for the next one.
    while let Ok(permit) = GATE.try_acquire() {
        permit.forget();
    }
    ended
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_progress_record_is_settled_only_with_force() {
    let dir = TempDir::new("idem_cli_in_progress");
    let (store, agent, run_ctx, _, _) = sqlite_with_work(&dir).await;
    let at = ["--store", store.as_str()];
    let (released, resolved) = (charge("call-c1", "card_1"), charge("call-c2", "card_2"));
    let (released_key, resolved_key) = (
        key_of(&agent, &released, &run_ctx),
        key_of(&agent, &resolved, &run_ctx),
    );
    let charged = |card: &str| CHARGED.count(&format!("{}/{card}", run_ctx.tenant));

    let worker = running(&agent, &released, &run_ctx).await;
    assert_eq!(
        listed(&at, &["--state", "in-progress"]),
        BTreeSet::from([released_key.clone()])
    );
    let before = record_at(&at, &released_key);
    assert_eq!(before["state"], "in_progress", "{before:#}");

    // Its worker may be alive: refused without --force, and the record left as it was.
    for args in [
        &["records", "release", &released_key][..],
        &["records", "resolve", &released_key, "--value", "1"],
    ] {
        run(on(&at, args).args(["--as", "lee@desk", "--yes"]))
            .exited(5)
            .says(&[
                "is in progress: a worker may still be running the call",
                "Pass --force",
            ]);
        let now = record_at(&at, &released_key);
        assert_eq!(
            (&now["state"], &now["fence"]),
            (&before["state"], &before["fence"]),
            "{now:#}"
        );
    }

    // With --force it is released: the worker is fenced out, and the call runs again.
    run(&mut on(
        &at,
        &[
            "records",
            "release",
            &released_key,
            "--force",
            "--as",
            "lee@desk",
            "--yes",
        ],
    ))
    .exited(0)
    .prints(&[&format!("released {released_key} by lee@desk")]);
    run(&mut on(&at, &["records", "show", &released_key]))
        .exited(4)
        .says(&["no record under key"]);
    match let_through(worker).await {
        Err(DispatchError::Fenced { .. }) => {}
        other => panic!("expected the released worker to be fenced out, got {other:?}"),
    }
    let again = let_through(running(&agent, &released, &run_ctx).await)
        .await
        .expect("the call, run again");
    assert!(!again.deduplicated, "{again:?}");
    let replayed = agent.dispatch(&released, &run_ctx).await.expect("a replay");
    assert!(replayed.deduplicated, "{replayed:?}");
    assert_eq!(charged("card_1"), 2);

    // With --force it is resolved: the worker is fenced out, and every call replays it.
    let worker = running(&agent, &resolved, &run_ctx).await;
    run(&mut on(
        &at,
        &[
            "records",
            "resolve",
            &resolved_key,
            "--value",
            r#"{"charged": "by hand"}"#,
            "--force",
            "--as",
            "lee@desk",
            "--yes",
        ],
    ))
    .exited(0)
    .prints(&[&format!("resolved {resolved_key} by lee@desk")]);
    let settled = record_at(&at, &resolved_key);
    assert_eq!(settled["state"], "completed", "{settled:#}");
    assert_eq!(settled["outcome"]["success"], json!({"charged": "by hand"}));
    match let_through(worker).await {
        Err(DispatchError::Fenced { .. }) => {}
        other => panic!("expected the resolved worker to be fenced out, got {other:?}"),
    }
    let replayed = agent.dispatch(&resolved, &run_ctx).await.expect("a replay");
    assert!(replayed.deduplicated, "{replayed:?}");
    assert_eq!(replayed.output, json!({"charged": "by hand"}));
    assert_eq!(charged("card_2"), 1);
}

/// Run `idem` with `args` on `at` up to its prompt, `change` the store meanwhile, then
/// answer yes: what it showed.
async fn changed_at_the_prompt(
    at: &[&str],
    args: &[&str],
    change: impl std::future::Future<Output = ()>,
) -> Shown {
    let args: Vec<&str> = args.iter().chain(at).copied().collect();
    let mut cli = Prompted::start(&args, &[]);
    cli.wait_for("Proceed? [y/N]").await;
    change.await;
    cli.answer("y\n");
    cli.finish().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_changed_at_the_prompt_is_left_as_it_is_now() {
    let dir = TempDir::new("idem_cli_changed");
    let (store, agent, run_ctx, _, unknown_key) = sqlite_with_work(&dir).await;
    let at = ["--store", store.as_str()];
    let records = agent.store().clone();

    // Released by someone else and called again while the operator looks: Unknown again,
    // at another fence. The release of the record shown changes nothing.
    let (released, number) = (text("call-u", "+351 910 000 044"), "+351 910 000 044");
    let label = format!("{}/{number}", run_ctx.tenant);
    let shown = record_at(&at, &unknown_key);
    changed_at_the_prompt(
        &at,
        &["records", "release", &unknown_key, "--as", "lee@desk"],
        async {
            let key = idem::key::RecordKey::from_stored(unknown_key.as_str());
            assert!(records.force_release(&key).await.expect("release it"));
            left_unknown(&agent, &released, &run_ctx).await;
        },
    )
    .await
    .exited(5)
    .says(&[
        "changed since it was shown",
        "it is now unknown",
        "nothing changed",
    ]);
    let now = record_at(&at, &unknown_key);
    assert_eq!(now["state"], "unknown", "{now:#}");
    assert_ne!(now["fence"], shown["fence"], "{now:#}");
    assert_eq!(TEXTED.count(&label), 2);

    // Resolved by someone else: the outcome they recorded stands, not the operator's.
    let resolved = text("call-u2", "+351 910 000 045");
    left_unknown(&agent, &resolved, &run_ctx).await;
    let resolved_key = key_of(&agent, &resolved, &run_ctx);
    changed_at_the_prompt(
        &at,
        &[
            "records",
            "resolve",
            &resolved_key,
            "--value",
            r#"{"delivered": false}"#,
            "--as",
            "lee@desk",
        ],
        async {
            let key = idem::key::RecordKey::from_stored(resolved_key.as_str());
            let delivered = idem::store::Outcome::success(&json!({"delivered": true}));
            records
                .resolve(&key, &delivered, Duration::from_secs(3600))
                .await
                .expect("resolve it");
        },
    )
    .await
    .exited(5)
    .says(&["changed since it was shown", "it is now completed"]);
    let now = record_at(&at, &resolved_key);
    assert_eq!(now["outcome"]["success"], json!({"delivered": true}));
    let replayed = agent.dispatch(&resolved, &run_ctx).await.expect("a replay");
    assert!(replayed.deduplicated, "{replayed:?}");
    assert_eq!(replayed.output, json!({"delivered": true}));

    // A completed record is neither released nor resolved again.
    for args in [
        &["records", "release", &resolved_key][..],
        &[
            "records",
            "resolve",
            &resolved_key,
            "--value",
            "1",
            "--force",
        ],
    ] {
        run(on(&at, args).args(["--as", "lee@desk", "--yes"]))
            .exited(5)
            .says(&["is already completed", "nothing changed"]);
    }
    assert_eq!(record_at(&at, &resolved_key), now);
    assert_eq!(
        TEXTED.count(&format!("{}/+351 910 000 045", run_ctx.tenant)),
        1
    );
}

// ---------------------------------------------------------------------------------------
// 7. Which records a listing shows.

#[tokio::test]
async fn records_list_filters_by_tool_tenant_state_age_and_count() {
    let dir = TempDir::new("idem_cli_filters");
    let path = dir.path().join("records.db");
    let agent = agent(Arc::new(
        idem::SqliteStore::open(&path).expect("open SQLite"),
    ));
    let store = format!("sqlite:{}", path.display());
    let at = ["--store", store.as_str()];
    let (north, south) = (RunContext::new("north"), RunContext::new("south"));
    let done = |call: ToolCall, run_ctx: RunContext| {
        let agent = agent.clone();
        async move {
            agent
                .dispatch(&call, &run_ctx)
                .await
                .expect("a ticket tagged");
            key_of(&agent, &call, &run_ctx)
        }
    };
    let unknown = |call: ToolCall, run_ctx: RunContext| {
        let agent = agent.clone();
        async move {
            left_unknown(&agent, &call, &run_ctx).await;
            key_of(&agent, &call, &run_ctx)
        }
    };

    let old_text = unknown(text("call-t1", "+351 910 000 051"), north.clone()).await;
    let old_ticket = done(ticket("call-k1", "T-1"), north.clone()).await;
    let south_text = unknown(text("call-t2", "+351 910 000 052"), south.clone()).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let new_text = unknown(text("call-t3", "+351 910 000 053"), north.clone()).await;
    let new_ticket = done(ticket("call-k2", "T-2"), north.clone()).await;
    let keys = |keys: &[&String]| keys.iter().map(|k| k.to_string()).collect::<BTreeSet<_>>();
    let everything = keys(&[&old_text, &old_ticket, &south_text, &new_text, &new_ticket]);
    let texts = keys(&[&old_text, &south_text, &new_text]);

    for (args, expected) in [
        (&[][..], texts.clone()),
        (&["--state", "unknown"], texts.clone()),
        (&["--state", "in-progress"], keys(&[])),
        (&["--state", "completed"], keys(&[&old_ticket, &new_ticket])),
        (&["--state", "all"], everything.clone()),
        (
            &["--state", "all", "--tool", "text_customer"],
            texts.clone(),
        ),
        (
            &["--state", "all", "--tool", "tag_ticket"],
            keys(&[&old_ticket, &new_ticket]),
        ),
        (&["--state", "all", "--tool", "no_such_tool"], keys(&[])),
        (
            &["--state", "all", "--tenant", "north"],
            keys(&[&old_text, &old_ticket, &new_text, &new_ticket]),
        ),
        (&["--tenant", "south"], keys(&[&south_text])),
        (
            &["--state", "all", "--older-than", "1s"],
            keys(&[&old_text, &old_ticket, &south_text]),
        ),
        (
            &[
                "--older-than",
                "1s",
                "--tenant",
                "north",
                "--tool",
                "text_customer",
            ],
            keys(&[&old_text]),
        ),
    ] {
        assert_eq!(listed(&at, args), expected, "idem records list {args:?}");
    }

    // `--limit` shows that many, and says there may be more.
    let one = listed(&at, &["--state", "all", "--limit", "1"]);
    assert_eq!(one.len(), 1, "{one:?}");
    assert!(everything.is_superset(&one), "{one:?}");
    let table = run(&mut on(
        &at,
        &["records", "list", "--state", "all", "--limit", "1"],
    ))
    .exited(0)
    .says(&["1 record(s)", "--limit N shows more"]);
    assert_eq!(
        table.stdout.lines().count(),
        2,
        "a header and one row: {table:#?}"
    );
    run(&mut on(&at, &["records", "list", "--state", "all"]))
        .exited(0)
        .says(&["5 record(s)"])
        .hides(&["--limit N shows more"]);
    for (args, why) in [
        (&["--limit", "0"][..], "--limit"),
        (&["--older-than", "1w"], "not a unit"),
        (&["--state", "lost"], "--state"),
    ] {
        run(on(&at, &["records", "list"]).args(args))
            .exited(2)
            .says(&[why]);
    }
    assert_eq!(
        listed(&at, &["--state", "all"]),
        everything,
        "listing changed nothing"
    );
}

// ---------------------------------------------------------------------------------------
// 8. A store `idem` must not use as it is: another version, not an idem store, a Redis
// that may evict, a PostgreSQL schema that does not exist. Refused, and left as it is.

/// Where a SQLite file keeps `PRAGMA user_version`: four big-endian bytes of its header.
const USER_VERSION_AT: std::ops::Range<usize> = 60..64;

/// A SQLite store made by an agent at `path`, with a request waiting for a person, closed:
/// the file holds all of it (closing it checkpointed its write-ahead log away).
async fn closed_sqlite_store(path: &Path) {
    let agent = agent(Arc::new(
        idem::SqliteStore::open(path).expect("open SQLite"),
    ));
    let run_ctx = RunContext::new(unique("closed"));
    left_for_approval(&agent, &close("call-v", "cus_v"), &run_ctx).await;
    drop(agent);
    let wal = PathBuf::from(format!("{}-wal", path.display()));
    assert!(
        !wal.exists(),
        "{} is still open: its header is not the file's",
        path.display()
    );
    assert_eq!(user_version(path), 3, "the store's schema version");
}

/// The `PRAGMA user_version` of the SQLite file at `path`.
fn user_version(path: &Path) -> u32 {
    let bytes = std::fs::read(path).expect("read the SQLite file");
    let version = bytes[USER_VERSION_AT].try_into().expect("four bytes");
    u32::from_be_bytes(version)
}

/// The SQLite file at `path` with its bytes changed by `edit`.
fn edit_file(path: &Path, edit: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = std::fs::read(path).expect("read the SQLite file");
    edit(&mut bytes);
    std::fs::write(path, bytes).expect("write the SQLite file");
}

/// `bytes` with every `from` replaced by `to`, of the same length.
fn replace_all(bytes: &mut [u8], from: &[u8], to: &[u8]) {
    assert_eq!(from.len(), to.len());
    let mut at = 0;
    while let Some(found) = bytes[at..].windows(from.len()).position(|w| w == from) {
        bytes[at + found..at + found + to.len()].copy_from_slice(to);
        at += found + to.len();
    }
}

#[tokio::test]
async fn a_sqlite_file_of_another_version_or_kind_is_refused_and_left_as_it_is() {
    let dir = TempDir::new("idem_cli_versions");
    let (newer, older, other) = (
        dir.path().join("newer.db"),
        dir.path().join("older.db"),
        dir.path().join("other.db"),
    );
    for path in [&newer, &older, &other] {
        closed_sqlite_store(path).await;
    }
    edit_file(&newer, |b| {
        b[USER_VERSION_AT].copy_from_slice(&99u32.to_be_bytes())
    });
    edit_file(&older, |b| {
        b[USER_VERSION_AT].copy_from_slice(&2u32.to_be_bytes())
    });
    // Another application's database: the same tables under names of its own.
    edit_file(&other, |b| replace_all(b, b"idem_", b"misc_"));

    for (path, why, version) in [
        (
            &newer,
            &[
                "schema version 99",
                "this version of idem understands version 3",
            ][..],
            99,
        ),
        (
            &older,
            &[
                "schema version 2, older than this idem's 3",
                "upgrade the agents first",
            ],
            2,
        ),
        (
            &other,
            &["is not an idem store", "no idem_records table"],
            3,
        ),
    ] {
        let spec = format!("sqlite:{}", path.display());
        let before = std::fs::read(path).expect("read the SQLite file");
        for args in [
            &["records", "list"][..],
            &["approvals", "list"],
            &["stats"],
            &["records", "purge"],
        ] {
            run(idem(args).args(["--store", &spec]))
                .exited(3)
                .says(why)
                .says(&[&path.display().to_string()]);
            assert!(
                std::fs::read(path).expect("read the SQLite file") == before,
                "`idem {args:?}` changed {}",
                path.display()
            );
        }
        assert_eq!(user_version(path), version);
    }
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn a_postgres_schema_that_does_not_exist_is_not_created() {
    use idem::store::postgres::deadpool_postgres::tokio_postgres::{self, NoTls};
    use support::postgres_schemas::postgres_schemas;
    use support::services::{POSTGRES_URL, service_url};
    let Some(url) = service_url(
        POSTGRES_URL,
        "a_postgres_schema_that_does_not_exist_is_not_created",
    ) else {
        return;
    };
    // Dropped at the end, should `idem` create it after all.
    let schemas = postgres_schemas(&url);
    let typo = schemas.fresh("idem_cli_typo");
    let (admin, connection) = tokio_postgres::connect(&url, NoTls)
        .await
        .expect("connect to PostgreSQL");
    let connection = tokio::spawn(connection);
    for args in [
        &["records", "list"][..],
        &["approvals", "list"],
        &["stats"],
        &["records", "purge"],
    ] {
        run(&mut on(&["--store", &url, "--prefix", &typo], args))
            .exited(3)
            .says(&[
                "PostgreSQL",
                &format!("schema `{typo}` holds no idem records (check the schema name"),
            ]);
        let created: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_namespace WHERE nspname = $1",
                &[&typo],
            )
            .await
            .expect("the schemas")
            .get(0);
        assert_eq!(created, 0, "`idem {args:?}` created the schema {typo}");
    }
    drop(admin);
    let _ = connection.await;
}

/// A `redis-server` of the test's own, on a free port, without persistence: one whose
/// configuration a test may choose (the shared server's is never touched). Killed, by the
/// child process this started, when dropped.
#[cfg(feature = "redis")]
struct PrivateRedis {
    child: std::process::Child,
    port: u16,
    _dir: TempDir,
}

#[cfg(feature = "redis")]
impl PrivateRedis {
    /// A server started with `args`; `None`, after saying why `test` skips, without
    /// `redis-server` (a failure under `IDEM_REQUIRE_SERVICES=1`).
    fn start(test: &str, args: &[&str]) -> Option<PrivateRedis> {
        let installed = std::process::Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !installed {
            support::services::unavailable(
                test,
                "`redis-server` is not installed",
                "install `redis-server` to run it",
            );
            return None;
        }
        // A port found free may be taken before the server binds it: try a few.
        for _ in 0..5 {
            let port = closed_port();
            let dir = TempDir::new("idem_cli_redis");
            let child = std::process::Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .arg("--dir")
                .arg(dir.path())
                .args(["--save", "", "--appendonly", "no"])
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start redis-server");
            let mut server = PrivateRedis {
                child,
                port,
                _dir: dir,
            };
            // A safety net against a server that never answers, not a measurement.
            for _ in 0..500 {
                if server.ask(&["PING"]).is_ok_and(|r| r == ["PONG"]) {
                    return Some(server);
                }
                if server
                    .child
                    .try_wait()
                    .expect("the server's status")
                    .is_some()
                {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("could not start a private redis-server");
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Send one command; its reply, flattened into strings.
    fn ask(&self, args: &[&str]) -> std::io::Result<Vec<String>> {
        use std::io::Write as _;
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut command = format!("*{}\r\n", args.len());
        for arg in args {
            command.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        stream.write_all(command.as_bytes())?;
        let mut reply = Vec::new();
        read_reply(&mut std::io::BufReader::new(stream), &mut reply)?;
        Ok(reply)
    }
}

#[cfg(feature = "redis")]
impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Read one RESP reply into `out`: its strings and numbers, arrays flattened.
#[cfg(feature = "redis")]
fn read_reply(from: &mut impl std::io::BufRead, out: &mut Vec<String>) -> std::io::Result<()> {
    use std::io::{Error, ErrorKind};
    let mut line = String::new();
    from.read_line(&mut line)?;
    let line = line.trim_end();
    let length = |n: &str| {
        n.parse::<i64>()
            .map_err(|e| Error::new(ErrorKind::InvalidData, format!("{line:?}: {e}")))
    };
    match line.split_at_checked(1) {
        Some(("+" | ":", text)) => out.push(text.to_owned()),
        Some(("-", error)) => return Err(Error::other(error.to_owned())),
        Some(("$", n)) => {
            if let Ok(n) = usize::try_from(length(n)?) {
                let mut text = vec![0; n + 2];
                from.read_exact(&mut text)?;
                out.push(String::from_utf8_lossy(&text[..n]).into_owned());
            }
        }
        Some(("*", n)) => {
            for _ in 0..length(n)?.max(0) {
                read_reply(from, out)?;
            }
        }
        _ => return Err(Error::new(ErrorKind::UnexpectedEof, format!("{line:?}"))),
    }
    Ok(())
}

#[cfg(feature = "redis")]
#[test]
fn a_redis_that_may_evict_is_refused_naming_the_fix() {
    let test = "a_redis_that_may_evict_is_refused_naming_the_fix";
    let Some(server) = PrivateRedis::start(test, &["--maxmemory-policy", "allkeys-lru"]) else {
        return;
    };
    let url = server.url();
    for args in [
        &["stats"][..],
        &["records", "list"],
        &["approvals", "list"],
        &["records", "purge"],
    ] {
        run(&mut on(&["--store", &url], args)).exited(3).says(&[
            &format!("Redis store at {url}"),
            "maxmemory-policy is `allkeys-lru`",
            "noeviction",
            "CONFIG SET maxmemory-policy noeviction",
        ]);
    }
    // Its configuration is the operator's to change, and nothing was written.
    assert_eq!(
        server
            .ask(&["CONFIG", "GET", "maxmemory-policy"])
            .expect("the policy"),
        ["maxmemory-policy", "allkeys-lru"]
    );
    assert_eq!(server.ask(&["DBSIZE"]).expect("the key count"), ["0"]);
}

// ---------------------------------------------------------------------------------------
// 9. What `idem` shows a person: never a password, and no text that reads as other text.

/// A password no message may hold.
const PASSWORD: &str = "hunter2-s3cret";

#[cfg(any(feature = "redis", feature = "postgres"))]
#[test]
fn a_store_password_never_reaches_a_message() {
    let port = closed_port();
    let mut stores = Vec::new();
    #[cfg(feature = "postgres")]
    stores.push((
        format!("postgres://ops:{PASSWORD}@127.0.0.1:{port}/idem"),
        format!("PostgreSQL store at postgres://ops:***@127.0.0.1:{port}/idem"),
    ));
    #[cfg(feature = "redis")]
    stores.push((
        format!("redis://:{PASSWORD}@127.0.0.1:{port}/"),
        format!("Redis store at redis://:***@127.0.0.1:{port}/"),
    ));
    for (url, named) in &stores {
        for args in [&["records", "list"][..], &["stats"]] {
            run(&mut on(&["--store", url], args))
                .exited(3)
                .says(&[named])
                .hides(&[PASSWORD]);
            run(idem(args).env("IDEM_STORE", url))
                .exited(3)
                .says(&[named])
                .hides(&[PASSWORD]);
        }
    }
}

#[test]
fn help_names_the_environment_but_never_its_values() {
    let store = format!("postgres://ops:{PASSWORD}@db/idem");
    for args in [
        &["records", "list", "--help"][..],
        &["approvals", "approve", "--help"],
        &["stats", "--help"],
    ] {
        run(idem(args)
            .env("IDEM_STORE", &store)
            .env("IDEM_STORE_PREFIX", format!("prefix-{PASSWORD}"))
            .env("IDEM_APPROVER", format!("approver-{PASSWORD}")))
        .exited(0)
        .prints(&["IDEM_STORE", "IDEM_STORE_PREFIX"])
        .hides(&[PASSWORD]);
    }
}

#[tokio::test]
async fn text_that_could_read_as_other_text_is_shown_by_its_code() {
    let dir = TempDir::new("idem_cli_spoof");
    let path = dir.path().join("records.db");
    let agent = agent(Arc::new(
        idem::SqliteStore::open(&path).expect("open SQLite"),
    ));
    let store = format!("sqlite:{}", path.display());
    let at = ["--store", store.as_str()];
    let run_ctx = RunContext::new(unique("spoof"));
    // Shown as is, it reads `cus_keep_99`: the override reverses what follows it.
    let customer = "cus_\u{202e}99_peek";
    let call = close("call-spoof", customer);
    left_for_approval(&agent, &call, &run_ctx).await;
    let key = key_of(&agent, &call, &run_ctx);

    let escaped = "cus_\\u202e99_peek";
    run(&mut on(&at, &["approvals", "list"]))
        .exited(0)
        .prints(&[&key, escaped])
        .hides(&["\u{202e}"]);
    run(&mut on(&at, &["approvals", "show", &key]))
        .exited(0)
        .prints(&[escaped])
        .hides(&["\u{202e}"]);
    // Asked to decide, the person sees the code too; unanswered, nothing is decided.
    run(&mut deciding(&at, &["approvals", "approve", &key]))
        .exited(6)
        .says(&[escaped])
        .hides(&["\u{202e}"]);
    // Scripts get the arguments exactly as called.
    let listed = run(&mut on(&at, &["approvals", "list", "--json"]))
        .exited(0)
        .prints(&["\u{202e}"])
        .json();
    assert_eq!(entries(&listed).len(), 1, "{listed:#}");
    assert_eq!(listed[0]["arguments"], json!({"customer": customer}));
    assert_eq!(
        approval_at(&at, &key)["arguments"],
        json!({"customer": customer})
    );
    still_pending(&at, &key);
    left_for_approval(&agent, &call, &run_ctx).await;
    assert_eq!(CLOSED.count(&format!("{}/{customer}", run_ctx.tenant)), 0);
}
