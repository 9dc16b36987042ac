//! The `idem` operator binary as an operator runs it: a subprocess over real SQLite, Redis
//! and PostgreSQL stores that an agent wrote to. Each test checks what the operator sees (the
//! exit code, a message naming the store and the fix) and what the command did to the
//! agent's next call: a resolved outcome replays, an approved call runs once, a denied one is
//! refused with its reason, and bad input or a lost store changes nothing.
//!
//! The SQLite test drives the example agent (`examples/agent.rs`), so it needs the example
//! built: `cargo build --example agent` with this test's features. The Redis and PostgreSQL
//! tests read `IDEM_REDIS_URL` and `IDEM_POSTGRES_URL` and skip without them, unless
//! `IDEM_REQUIRE_SERVICES=1`; there the test itself is the agent, in-process.

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use assert_cmd::Command;
use idem::prelude::*;
use idem::{ApprovalKey, ApprovalKeys, Store};
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
    let still = run(&mut on_store(&["approvals", "show", &gone, "--json"]))
        .exited(0)
        .json();
    assert_eq!(still["status"], "pending", "{still:#}");
    assert_eq!(still["decision"], Value::Null, "{still:#}");

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

    let still = run(idem(&["approvals", "show", &pending_key, "--json"]).args(["--store", &store]))
        .exited(0)
        .json();
    assert_eq!(still["status"], "pending", "{still:#}");
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
    let still = run(idem(&["approvals", "show", &pending_key, "--json"]).args(["--store", &store]))
        .exited(0)
        .json();
    assert_eq!(
        (&still["status"], &still["decision"]),
        (&json!("pending"), &Value::Null)
    );
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

    let record = run(&mut idem(&[
        "records",
        "show",
        &unknown_key,
        "--json",
        "--store",
        &store,
    ]))
    .exited(0)
    .json();
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

/// `idem` started with its standard input a pipe the test answers on, and what it writes
/// gathered as it comes: for acting while it waits at the prompt.
#[cfg(feature = "postgres")]
struct Prompted {
    child: std::process::Child,
    stdout: Arc<std::sync::Mutex<Vec<u8>>>,
    stderr: Arc<std::sync::Mutex<Vec<u8>>>,
}

#[cfg(feature = "postgres")]
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
        still_pending(&url, &schema, &key).await;
        left_for_approval(&agent, &call, &run_ctx).await;
        assert_eq!(CLOSED.count(&label), 0);
    }
}

/// The approval under `key` is still waiting for a person, as `idem approvals show` says.
#[cfg(feature = "postgres")]
async fn still_pending(url: &str, schema: &str, key: &str) {
    let shown = run(&mut idem(&[
        "approvals",
        "show",
        key,
        "--json",
        "--store",
        url,
        "--prefix",
        schema,
    ]))
    .exited(0)
    .json();
    assert_eq!(
        (&shown["status"], &shown["decision"]),
        (&json!("pending"), &Value::Null),
        "{shown:#}"
    );
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
    still_pending(&url, &schema, &key).await;
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
