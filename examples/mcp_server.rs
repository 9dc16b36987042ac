//! An MCP server over stdio whose tools keep their side-effect policy: a client that re-sends
//! a call after a broken stream gets the recorded result (`_meta` says `deduplicated`), whether
//! or not it sends a key; an irreversible call runs once its user says yes to a question
//! showing the exact call (a client that cannot ask its user gets the call refused as pending,
//! for an operator). Records live in SQLite.
//!
//! ```text
//! cargo run -p idem-tests --example mcp_server --features mcp               # stdio, store in the temp dir
//! IDEM_DB=my.db cargo run -p idem-tests --example mcp_server --features mcp
//! IDEM_MCP_TOKENS="token-a=acme,token-b=globex" \
//!     cargo run -p idem-tests --example mcp_server --features mcp -- --http 127.0.0.1:8080
//! cargo run -p idem-tests --example mcp_server --features mcp -- --resend-window 0 --model-key add_note
//! ```
//!
//! Over HTTP (`POST /mcp`), each request acts for the tenant of its bearer token
//! (`Authorization: Bearer token-a` acts for `acme`); a request without a known token is
//! refused. Two tenants never share a record, even under the same key.
//!
//! How a call is keyed, first match wins:
//!
//! - A key in the request's `_meta`, for a client that keeps one across re-sends:
//!   `{"name": "create_ticket", "arguments": {...}, "_meta": {"io.idem/idempotency-key": "..."}}`.
//! - For a tool named with `--model-key`, the `idempotency_key` argument the model gives (the
//!   tool's listed schema gains it; the tool never sees it).
//! - Otherwise, the re-send window, as for the hosts people use, which send no key: a call
//!   is keyed by its session (an HTTP client's `Mcp-Session-Id`; over stdio, the connection),
//!   tool and arguments, and the same call again within the window replays the first,
//!   `deduplicated: true`. A deliberate identical call inside the window is replayed too.
//!
//! Settings (all optional, in any order):
//!
//! - `--resend-window SECS`: how long a call without a key stands for its re-sends (default
//!   300). `0` turns the window off: a write without a key is refused, saying how to pass one.
//! - `--resend-scope tenant`: scope the window by the tenant alone, not the session, so that
//!   a call re-issued after a reconnect or a restart is caught too (default `session`).
//! - `--model-key TOOL`: let the model key `TOOL`'s calls (repeatable).
//! - `--inbox URL`: send a client that opens URLs (URL-mode elicitation) to the approval
//!   inbox's page of an irreversible call (`idem ui` at `URL`, started with this example's
//!   approval key, `IDEM_APPROVAL_KEY=mcp-2026-12:6578616d706c652d617070726f76616c2d6b65792d6e6f742d73656372657421`);
//!   a person approves there, and the client's retry runs the call once.
//! - `--inbox-link-secs SECS`: how long the inbox shows such a link (default 3600).
//!
//! Beside its tools the server serves `idem_run_account`, a read-only tool that tells the
//! model what became of the calls of its session (or of the run its `_meta` names): applied,
//! replayed, refused and why, unknown, waiting for a person.
//!
//! `add_note` answers after `delay_ms`, like a slow downstream system: a client can cancel it
//! mid-call, or send it twice at once under one key, and see it run once. With `IDEM_NOTES`
//! naming a file, each execution of `add_note` or `delete_account` appends a line to it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use idem::mcp::McpServer;
use idem::mcp::keys::{DEFAULT_RESEND_WINDOW, ResendScope};
use idem::prelude::*;
use idem::{ApprovalKey, Approver, SqliteStore, approval::ApprovalKeys};

/// Read the current weather in a city.
#[tool(class = "read")]
fn get_weather(
    /// The city.
    city: String,
) -> Result<String, ToolError> {
    Ok(format!("{city}: overcast, 18 °C"))
}

/// Open a support ticket for a customer.
#[tool(class = "idempotent_write")]
async fn create_ticket(
    ctx: &ToolContext,
    /// The customer's id.
    customer_id: String,
    /// One line saying what is wrong.
    subject: String,
) -> Result<String, ToolError> {
    // The downstream system's idempotency key: the same on every re-send.
    Ok(format!(
        "ticket {} for {customer_id}: {subject}",
        &ctx.idempotency_key()[..13]
    ))
}

/// Add a note to the notebook; the notebook takes `delay_ms` to answer.
#[tool(class = "idempotent_write")]
async fn add_note(
    ctx: &ToolContext,
    /// The note.
    note: String,
    /// How long the notebook takes, in milliseconds.
    delay_ms: u64,
) -> Result<String, ToolError> {
    tokio::time::sleep(Duration::from_millis(delay_ms)).await;
    let key = &ctx.idempotency_key()[..13];
    // The notebook keeps one note per key, so running this again under a key is safe.
    note_execution(&format!("{key} {note}"))?;
    Ok(format!("note {key}: {note}"))
}

/// Delete a customer's account. Irreversible: runs only with an operator's approval.
#[tool(class = "irreversible")]
async fn delete_account(
    /// The customer's id.
    customer_id: String,
) -> Result<String, ToolError> {
    note_execution(&format!("delete_account {customer_id}"))?;
    Ok(format!("deleted {customer_id}"))
}

/// Append `line` to the file `IDEM_NOTES` names, if any: a log of executions, for whoever
/// wants to count them.
fn note_execution(line: &str) -> Result<(), ToolError> {
    let Some(path) = std::env::var_os("IDEM_NOTES") else {
        return Ok(());
    };
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| ToolError::retryable(format!("the notebook is unavailable: {e}")))?;
    // One write per line: concurrent servers appending to one file never interleave.
    file.write_all(format!("{line}\n").as_bytes())
        .map_err(|e| ToolError::retryable(format!("the notebook is unavailable: {e}")))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let options = match Options::parse(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(why) => {
            eprintln!("{why}\n{USAGE}");
            std::process::exit(2);
        }
    };
    let path = std::env::var_os("IDEM_DB").map_or_else(
        || std::env::temp_dir().join("idem-mcp-example.db"),
        PathBuf::from,
    );
    let store = Arc::new(SqliteStore::open(&path)?);
    // Approvals are verified with this key; an operator signs them with it (see the agent
    // example). A deployment reads it from a secret manager.
    let key = ApprovalKey::new("mcp-2026-12", *b"example-approval-key-not-secret!")?;
    let keys = ApprovalKeys::new([key.clone()]);
    // Every call is accounted for (a client that sends no run id: under its session), and
    // the model can read the account with the `idem_run_account` tool.
    let dispatcher = Dispatcher::approving(Registry::linked()?, store, keys)?
        .with_namespace("mcp-example")
        .with_run_accounts(Duration::from_secs(24 * 3600));
    // A client that can elicit asks its user, showing the exact call; the user's yes is an
    // approval signed with the key. Other clients' calls wait for an operator.
    let mut server = McpServer::new(dispatcher, "local")?
        .approve_by_elicitation(Approver::new("the MCP client's user", key.clone()))
        .resend_window(options.resend_window)
        .resend_scope(options.resend_scope)
        .expose_run_account()?;
    if let Some(inbox) = &options.inbox {
        server = server.approve_in_inbox_for(inbox, key, options.inbox_link_validity);
    }
    for tool in &options.model_key {
        server = server.model_key(tool).unwrap_or_else(|why| {
            eprintln!("--model-key {tool}: {why}");
            std::process::exit(2);
        });
    }
    match options.http {
        None => {
            // Logs go to stderr: stdout is the protocol's.
            eprintln!("idem MCP server on stdio, records in {}", path.display());
            server.serve_stdio().await?;
        }
        Some(addr) => serve_http(server, &addr).await?,
    }
    Ok(())
}

const USAGE: &str = "usage: mcp_server [--http ADDR] [--resend-window SECS] \
[--resend-scope session|tenant] [--model-key TOOL]... [--inbox URL] [--inbox-link-secs SECS]";

/// The command line.
struct Options {
    http: Option<String>,
    resend_window: Option<Duration>,
    resend_scope: ResendScope,
    model_key: Vec<String>,
    inbox: Option<String>,
    inbox_link_validity: Duration,
}

impl Options {
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Self, String> {
        let mut options = Options {
            http: None,
            resend_window: Some(DEFAULT_RESEND_WINDOW),
            resend_scope: ResendScope::Session,
            model_key: Vec::new(),
            inbox: None,
            inbox_link_validity: idem::mcp::inbox::DEFAULT_LINK_VALIDITY,
        };
        while let Some(flag) = args.next() {
            let mut value = || args.next().ok_or(format!("{flag} needs a value"));
            match flag.as_str() {
                "--http" => options.http = Some(value()?),
                "--resend-window" => {
                    let given = value()?;
                    let secs: u64 = given.parse().map_err(|_| {
                        format!("--resend-window takes whole seconds (0: off), got {given:?}")
                    })?;
                    options.resend_window = (secs > 0).then(|| Duration::from_secs(secs));
                }
                "--resend-scope" => {
                    options.resend_scope = match value()?.as_str() {
                        "session" => ResendScope::Session,
                        "tenant" => ResendScope::Tenant,
                        other => {
                            return Err(format!(
                                "--resend-scope is session or tenant, got {other:?}"
                            ));
                        }
                    }
                }
                "--model-key" => options.model_key.push(value()?),
                "--inbox" => options.inbox = Some(value()?),
                "--inbox-link-secs" => {
                    let given = value()?;
                    let secs: u64 = given.parse().ok().filter(|&secs| secs > 0).ok_or(format!(
                        "--inbox-link-secs takes whole seconds (at least 1), got {given:?}"
                    ))?;
                    options.inbox_link_validity = Duration::from_secs(secs);
                }
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        Ok(options)
    }
}

/// Serve over Streamable HTTP at `addr`, each request acting for its bearer token's tenant
/// (tokens from `IDEM_MCP_TOKENS`, as `token=tenant,token=tenant`).
async fn serve_http(server: McpServer, addr: &str) -> Result<(), Box<dyn std::error::Error>> {
    let tokens: std::collections::HashMap<String, String> = std::env::var("IDEM_MCP_TOKENS")
        .unwrap_or_default()
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(token, tenant)| (format!("Bearer {}", token.trim()), tenant.trim().to_owned()))
        .collect();
    if tokens.is_empty() {
        return Err(
            "set IDEM_MCP_TOKENS to `token=tenant,...`: every HTTP request needs one".into(),
        );
    }
    let server = server.authenticate(move |headers| {
        let presented = headers.get("authorization")?.to_str().ok()?;
        tokens.get(presented).cloned()
    });
    let router = axum::Router::new().nest_service("/mcp", server.http_service(&[]));
    let listener = tokio::net::TcpListener::bind(addr).await?;
    eprintln!("idem MCP server on http://{}/mcp", listener.local_addr()?);
    axum::serve(listener, router).await?;
    Ok(())
}
