//! A scripted agent session: no LLM, no network. Realistic tools talk to fake providers that
//! count their effects, and the session plays everything that goes wrong in production:
//! retries, a replayed run, a timeout after the effect, a re-call with a new call id, a
//! concurrent duplicate, invalid arguments, and an irreversible call: refused pending, a
//! forged approval refused, then approved by an operator task from the store, run once and
//! replayed.
//!
//! Records live in SQLite, the embedded default store. Run it twice: the second run finds
//! the first run's records in the file and replays them.
//!
//! ```text
//! cargo run --example agent                  # store in the system temp dir
//! cargo run --example agent -- --db my.db    # or IDEM_DB=my.db
//! cargo run --example agent -- --fresh       # start from an empty store
//! ```
//!
//! With `--leave-to-operator`, the irreversible calls are left pending in the store for a
//! person, and a text message whose carrier timed out is left Unknown: `idem approvals` or
//! the inbox (`idem ui`) approves or denies the calls, `idem records resolve` settles the
//! message, and the next run with `--leave-to-operator` is the agent's retry: an approved
//! call runs once, a denied one is refused with its reason, the message is replayed. The
//! operator signs with the example's key:
//!
//! ```text
//! cargo run --example agent -- --db agent.db --fresh --leave-to-operator
//! export IDEM_APPROVAL_KEY=desk-2026-12:6578616d706c652d617070726f76616c2d6b65792d6e6f742d73656372657421
//! cargo run -p idem-cli -- approvals list --store sqlite:agent.db
//! cargo run --example agent -- --db agent.db --leave-to-operator
//! ```
//!
//! `--tenant NAME` acts for another customer (default `acme-corp`); `--approval-window SECS`
//! is how long a request waits for a decision (default 24 h).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem::prelude::*;
use idem::store::approvals::ApprovalFilter;
use idem::{ApprovalKey, Approver, SqliteStore, approval::ApprovalKeys, record::StateKind};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------
// Fake downstream providers. Like real ones (Stripe, SES, Zendesk), they dedupe on the
// idempotency key they are handed, and count what actually happened.

#[derive(Default)]
struct Provider {
    requests: usize,
    effects: BTreeMap<String, Value>,
}

impl Provider {
    /// Apply an effect once per key; a repeated key gets the first answer back.
    fn apply(&mut self, key: &str, effect: impl FnOnce(usize) -> Value) -> Value {
        self.requests += 1;
        let n = self.effects.len();
        self.effects
            .entry(key.to_owned())
            .or_insert_with(|| effect(n + 1))
            .clone()
    }
}

static MAIL: Mutex<Option<Provider>> = Mutex::new(None);
static TICKETS: Mutex<Option<Provider>> = Mutex::new(None);
static STATUS: Mutex<Option<Provider>> = Mutex::new(None);
static ACCOUNTS: Mutex<Option<Provider>> = Mutex::new(None);
static SMS: Mutex<Option<Provider>> = Mutex::new(None);
/// Recipients whose mail provider times out after accepting the message.
static SLOW_INBOXES: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
/// Statuses whose first write times out after it was applied.
static FLAKY_STATUS: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

fn with<T>(p: &Mutex<Option<Provider>>, f: impl FnOnce(&mut Provider) -> T) -> T {
    let mut guard = p.lock().unwrap_or_else(|e| e.into_inner());
    f(guard.get_or_insert_with(Provider::default))
}

// ---------------------------------------------------------------------------------------
// The tools.

/// Ask the mail provider's sent log whether our Message-ID went out (settles Unknown calls).
async fn mail_was_sent(ctx: &ToolContext) -> Result<Verified, ToolError> {
    let message_id = format!("<{}@mail.example>", ctx.idempotency_key());
    match with(&MAIL, |m| m.effects.get(&message_id).cloned()) {
        Some(receipt) => Ok(Verified::Applied(receipt)),
        None => Ok(Verified::NotApplied),
    }
}

/// Send an email to a customer.
// The settle delay before `mail_was_sent` is asked is 2 s here, so that the example does not
// wait the default 5 minutes; it is at least a lease, hence the short lease too.
#[tool(
    class = "non_idempotent_write",
    open_world,
    scopes = ["mail:send"],
    verify = mail_was_sent,
    verify_after_secs = 2,
    lease_secs = 2
)]
async fn send_email(
    ctx: &ToolContext,
    /// Recipient address.
    to: String,
    /// Subject line.
    subject: String,
    /// Plain-text body.
    body: String,
) -> Result<Value, ToolError> {
    // The key becomes the Message-ID: the provider never sends one message twice.
    let message_id = format!("<{}@mail.example>", ctx.idempotency_key());
    let receipt = with(&MAIL, |m| {
        m.apply(&message_id, |n| json!({"message_id": message_id, "queued": n, "to": to, "subject": subject, "bytes": body.len()}))
    });
    if SLOW_INBOXES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&to)
    {
        // The provider accepted the message, then the connection timed out.
        tokio::time::sleep(Duration::from_millis(5)).await;
        return Err(ToolError::ambiguous(
            "mail provider timed out after the request was sent",
        ));
    }
    Ok(receipt)
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Priority {
    Low,
    Normal,
    Urgent,
}

/// A ticket as the ticket system returns it.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Ticket {
    id: String,
    subject: String,
    priority: String,
}

/// The natural key of a ticket: one per customer, problem and day (find-or-create). The day
/// comes from the clock here to keep the script short; a real natural key should be a pure
/// function of the arguments (the model would pass the date), since it outranks call ids.
fn ticket_key(args: &Value) -> Option<String> {
    let customer = args.get("customer_id")?.as_str()?;
    let subject = args.get("subject")?.as_str()?;
    let words: Vec<String> = subject
        .to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| {
            w.len() > 2
                && ![
                    "the", "and", "not", "does", "doesn", "isn", "again", "still",
                ]
                .contains(w)
        })
        .map(str::to_owned)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let day = idem::record::Timestamp::now().as_millis() / 86_400_000;
    Some(format!("{customer}|{}|{day}", words.join(" ")))
}

/// Open a support ticket for a customer, or return the open one for the same problem today.
#[tool(class = "idempotent_write", natural_key = ticket_key)]
async fn create_ticket(
    ctx: &ToolContext,
    /// Customer identifier.
    customer_id: String,
    /// One-line summary of the problem.
    subject: String,
    /// How urgent it is (default normal).
    priority: Option<Priority>,
) -> Result<Ticket, ToolError> {
    let priority = format!("{:?}", priority.unwrap_or(Priority::Normal)).to_lowercase();
    let created = with(&TICKETS, |t| {
        t.apply(ctx.idempotency_key(), |n| json!({"id": format!("T-{}", 1000 + n), "customer_id": customer_id, "subject": subject, "priority": priority}))
    });
    serde_json::from_value(created)
        .map_err(|e| ToolError::terminal(format!("ticket system answered oddly: {e}")))
}

/// Set a ticket's status (an absolute state: setting it twice is setting it once).
#[tool(class = "idempotent_write", backoff_ms = 20)]
async fn set_status(
    ctx: &ToolContext,
    /// The ticket, e.g. `T-1001`.
    ticket_id: String,
    /// The new status.
    status: String,
) -> Result<Value, ToolError> {
    let applied = with(&STATUS, |s| {
        s.apply(
            ctx.idempotency_key(),
            |_| json!({"ticket_id": ticket_id, "status": status}),
        )
    });
    if FLAKY_STATUS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&status)
    {
        return Err(ToolError::ambiguous(
            "ticket system timed out after applying the change",
        ));
    }
    Ok(applied)
}

/// Current weather for a city.
#[tool(class = "read", open_world)]
fn get_weather(
    /// City name.
    city: String,
) -> Result<Value, ToolError> {
    let temp = 12 + city.len() as i64 % 9;
    Ok(json!({"city": city, "temp_c": temp, "sky": "overcast"}))
}

/// Text a customer. The carrier takes no idempotency key and cannot be asked what it sent,
/// and today it times out after accepting: the outcome is Unknown until a person settles it.
#[tool(class = "non_idempotent_write")]
async fn send_sms(
    ctx: &ToolContext,
    /// Phone number.
    to: String,
    /// Message.
    text: String,
) -> Result<Value, ToolError> {
    with(&SMS, |m| {
        m.apply(
            ctx.idempotency_key(),
            |n| json!({"sms": n, "to": to, "text": text}),
        )
    });
    Err(ToolError::ambiguous(
        "the carrier timed out after accepting the message",
    ))
}

/// Permanently delete a customer's account and data.
#[tool(class = "irreversible", scopes = ["accounts:delete"])]
async fn delete_account(
    ctx: &ToolContext,
    /// Customer identifier.
    customer_id: String,
) -> Result<Value, ToolError> {
    Ok(with(&ACCOUNTS, |a| {
        a.apply(ctx.idempotency_key(), |_| json!({"deleted": customer_id}))
    }))
}

// ---------------------------------------------------------------------------------------
// The session.

struct Row {
    call: String,
    class: String,
    happened: String,
}

struct Session {
    dispatcher: Dispatcher,
    run: RunContext,
    rows: Vec<Row>,
}

impl Session {
    async fn play(&mut self, what: &str, call: ToolCall) -> Result<Dispatched, DispatchError> {
        let result = self.dispatcher.dispatch(&call, &self.run).await;
        self.note(what, &call, &result);
        result
    }

    fn note(&mut self, what: &str, call: &ToolCall, result: &Result<Dispatched, DispatchError>) {
        let class = self
            .dispatcher
            .registry()
            .get(&call.name)
            .map(|t| t.class().to_string())
            .unwrap_or_else(|| "?".into());
        let happened = describe(result);
        self.rows.push(Row {
            call: format!("{what}: {}", call.name),
            class,
            happened,
        });
    }
}

fn describe(result: &Result<Dispatched, DispatchError>) -> String {
    match result {
        Ok(d) if d.deduplicated => format!("deduplicated (replayed {})", clip(&d.output_json)),
        Ok(d) => format!(
            "executed ({} attempt{}) -> {}",
            d.attempts,
            if d.attempts == 1 { "" } else { "s" },
            clip(&d.output_json)
        ),
        Err(DispatchError::ToolFailed {
            error,
            deduplicated: true,
            ..
        }) => format!("deduplicated (replayed error: {})", error.message()),
        // A denial is shown whole: its reason is what the model is told.
        Err(e @ DispatchError::ApprovalDenied { .. }) => format!("refused: {} ({e})", e.code()),
        Err(e) => format!("refused: {} ({})", e.code(), clip(&e.to_string())),
    }
}

fn clip(s: &str) -> String {
    if s.chars().count() > 70 {
        format!("{}...", s.chars().take(67).collect::<String>())
    } else {
        s.to_owned()
    }
}

/// The command line.
struct Options {
    path: PathBuf,
    fresh: bool,
    leave_to_operator: bool,
    tenant: String,
    approval_window: Option<Duration>,
}

fn options() -> Options {
    const USAGE: &str = "usage: agent [--db PATH] [--fresh] [--leave-to-operator] [--tenant NAME] [--approval-window SECS]";
    let mut args = std::env::args().skip(1);
    let mut options = Options {
        path: std::env::var_os("IDEM_DB")
            .map(PathBuf::from)
            .unwrap_or_else(|| std::env::temp_dir().join("idem-agent-example.db")),
        fresh: false,
        leave_to_operator: false,
        tenant: "acme-corp".into(),
        approval_window: None,
    };
    let value = |name: &str, v: Option<String>| {
        v.unwrap_or_else(|| {
            eprintln!("{name} needs a value; {USAGE}");
            std::process::exit(2);
        })
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--db" => options.path = PathBuf::from(value("--db", args.next())),
            "--fresh" => options.fresh = true,
            "--leave-to-operator" => options.leave_to_operator = true,
            "--tenant" => options.tenant = value("--tenant", args.next()),
            "--approval-window" => {
                let secs = value("--approval-window", args.next());
                let secs: u64 = secs.parse().unwrap_or_else(|_| {
                    eprintln!("--approval-window takes whole seconds, not `{secs}`; {USAGE}");
                    std::process::exit(2);
                });
                options.approval_window = Some(Duration::from_secs(secs));
            }
            other => {
                eprintln!("unknown argument `{other}`; {USAGE}");
                std::process::exit(2);
            }
        }
    }
    options
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let options = options();
    let path = options.path.clone();
    if options.fresh {
        for suffix in ["", "-wal", "-shm"] {
            let mut p = path.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(p);
        }
    }
    let store = Arc::new(SqliteStore::open(&path)?);
    let earlier = store
        .list(idem::store::ListFilter {
            state: Some(StateKind::Completed),
            limit: 10_000,
            ..Default::default()
        })
        .await?
        .len();
    println!(
        "store: SQLite at {} ({earlier} completed records from earlier runs)\n",
        path.display()
    );

    let registry = Registry::linked()?;
    // The key approvals are signed with. A deployment reads it from a secret manager; the
    // agent's host holds only what verifies (here both sides are one process).
    let approval_key = ApprovalKey::new("desk-2026-12", *b"example-approval-key-not-secret!")?;
    let keys = ApprovalKeys::new([approval_key.clone()]);
    let mut dispatcher =
        Dispatcher::approving(registry, store.clone(), keys)?.with_namespace("support-desk");
    if let Some(window) = options.approval_window {
        dispatcher = dispatcher.with_max_approval_validity(window);
    }
    let run = RunContext::new(options.tenant.clone())
        .with_run("run-2026-11-30", 1)
        .grant("mail:send")
        .grant("accounts:delete");
    let mut s = Session {
        dispatcher,
        run,
        rows: Vec::new(),
    };

    // 1. A normal turn: the model checks the weather, opens a ticket, writes to the customer.
    let weather = ToolCall::new("get_weather", json!({"city": "Lisbon"})).with_call_id("call_w1");
    let ticket = ToolCall::new("create_ticket", json!({"customer_id": "cus_42", "subject": "Printer is not printing", "priority": "urgent"}))
        .with_call_id("call_t1");
    let email = ToolCall::new(
        "send_email",
        json!({"to": "dana@example.com", "subject": "We're on it", "body": "Ticket opened for your printer."}),
    )
    .with_call_id("call_e1");
    s.play("normal call", weather.clone()).await.ok();
    s.play("normal call", ticket.clone()).await.ok();
    s.play("normal call", email.clone()).await.ok();

    // 2. The HTTP layer retries the same call after a 502.
    s.play("same call retried", email.clone()).await.ok();

    // 3. The whole run is replayed from a checkpoint after a deploy.
    for c in [&weather, &ticket, &email] {
        s.play("run replayed", c.clone()).await.ok();
    }

    // 4. Timeouts after the effect happened.
    SLOW_INBOXES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert("lee@example.com".into());
    let slow = ToolCall::new(
        "send_email",
        json!({"to": "lee@example.com", "subject": "Invoice", "body": "Attached."}),
    )
    .with_call_id("call_e2");
    s.play("timeout after sending", slow.clone()).await.ok();
    // At once: the provider may not have committed yet, so the hook is not asked.
    let early = s.play("model calls again at once", slow.clone()).await;
    if let Err(DispatchError::OutcomeUnknown {
        retry_after: Some(at),
        ..
    }) = early
    {
        let now = s.dispatcher.store().now().await?;
        tokio::time::sleep(Duration::from_millis(
            at.as_millis().saturating_sub(now.as_millis()),
        ))
        .await;
    }
    s.play("model calls again (verified)", slow).await.ok();
    FLAKY_STATUS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert("waiting_on_customer".into());
    let status = ToolCall::new(
        "set_status",
        json!({"ticket_id": "T-1001", "status": "waiting_on_customer"}),
    )
    .with_call_id("call_s1");
    s.play("timeout after applying", status).await.ok();

    // 5. The model, seeing no answer, re-calls with a new call id and reworded subject.
    let reworded = ToolCall::new(
        "create_ticket",
        json!({"customer_id": "cus_42", "subject": "printer STILL not printing!"}),
    )
    .with_call_id("call_t2");
    s.play("re-call, new id, reworded", reworded).await.ok();

    // 6. Two workers pick up the same call at once.
    let dup = ToolCall::new("send_email", json!({"to": "dana@example.com", "subject": "Update", "body": "A technician is on the way."}))
        .with_call_id("call_e3");
    let (a, b) = tokio::join!(
        s.dispatcher.dispatch(&dup, &s.run),
        s.dispatcher.dispatch(&dup, &s.run)
    );
    s.note("concurrent duplicate (worker 1)", &dup, &a);
    s.note("concurrent duplicate (worker 2)", &dup, &b);

    // 7. Invalid arguments: refused before anything is recorded, with a path the model can fix.
    let bad = ToolCall::new(
        "send_email",
        json!({"to": 42, "subject": "Hi", "body": "..."}),
    )
    .with_call_id("call_e4");
    s.play("invalid arguments", bad).await.ok();

    // 8. An irreversible call: refused, and recorded in the store as pending. An operator, in
    // a task of its own (another process in a deployment, hours later), finds it there and
    // approves it; the agent's retry, carrying nothing, runs it once.
    let delete =
        ToolCall::new("delete_account", json!({"customer_id": "cus_99"})).with_call_id("call_d1");
    if options.leave_to_operator {
        // Left to a person: `idem approvals` or the inbox decides, and the next run with
        // `--leave-to-operator` is the agent's retry.
        let other = ToolCall::new("delete_account", json!({"customer_id": "cus_77"}))
            .with_call_id("call_d2");
        for call in [delete, other] {
            s.play("irreversible, left to an operator", call).await.ok();
        }
        let sms = ToolCall::new(
            "send_sms",
            json!({"to": "+351 910 000 042", "text": "Your technician arrives at 3 pm."}),
        )
        .with_call_id("call_m1");
        s.play("carrier times out, left to an operator", sms)
            .await
            .ok();
        let waiting = s
            .dispatcher
            .approvals()
            .pending(&ApprovalFilter {
                tenant: Some(options.tenant.clone()),
                ..ApprovalFilter::default()
            })
            .await?;
        for call in &waiting {
            println!(
                "waiting for a person: {} {} (key {})",
                call.tool, call.arguments, call.key
            );
        }
        if !waiting.is_empty() {
            println!(
                "decide with `idem approvals list --store sqlite:{}`, then run again with --leave-to-operator\n",
                path.display()
            );
        }
    } else if let Err(DispatchError::ApprovalRequired { request }) =
        s.play("irreversible, no approval", delete.clone()).await
    {
        // Someone who controls the agent but not the key signs an approval: refused.
        let forger = ApprovalKey::new("desk-2026-12", *b"a-guess-at-the-key-is-not-a-key!")?;
        let forged =
            Approver::new("mallory", forger).approve_for(&request, Duration::from_secs(600));
        let run = s.run.clone();
        s.run = run.clone().approve(forged);
        s.play("irreversible, forged approval", delete.clone())
            .await
            .ok();
        s.run = run;

        let keys = ApprovalKeys::new([approval_key.clone()]);
        let operator = Dispatcher::approving(Registry::linked()?, store.clone(), keys)?
            .with_namespace("support-desk");
        let approver = Approver::new("dana@support-desk", approval_key);
        // The agent hands the operator what its refusal handed back (the request is JSON: a
        // ticket, a chat message; or its key, for `idem approvals approve KEY`), and the
        // operator approves exactly that call, with the arguments it was refused with. Any
        // other call pending for the tenant (from a run with --leave-to-operator) stays so.
        let approved = tokio::spawn(async move {
            let desk = operator.approvals();
            let call = desk
                .find(&request)
                .await?
                .ok_or("the refused call is not pending")?;
            println!(
                "operator sees: {} for {} with {}, requested {}",
                call.tool,
                call.tenant,
                call.arguments,
                call.requested_at.to_rfc3339()
            );
            desk.approve(&request, &approver, None, None).await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(request.key)
        })
        .await?
        .map_err(|e| e.to_string())?;
        println!("operator approved the refused call (key {approved})\n");
        s.play("irreversible, approved by the operator", delete.clone())
            .await
            .ok();
        s.play("irreversible, replayed", delete).await.ok();
    }

    // The table.
    let w1 = s
        .rows
        .iter()
        .map(|r| r.call.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let w2 = s
        .rows
        .iter()
        .map(|r| r.class.len())
        .max()
        .unwrap_or(5)
        .max(5);
    println!("{:<w1$}  {:<w2$}  what happened", "call", "class");
    println!("{}  {}  {}", "-".repeat(w1), "-".repeat(w2), "-".repeat(13));
    for r in &s.rows {
        println!("{:<w1$}  {:<w2$}  {}", r.call, r.class, r.happened);
    }

    println!("\neffects applied by the providers in this process (requests received -> effects):");
    for (name, p) in [
        ("mail provider", &MAIL),
        ("ticket system", &TICKETS),
        ("ticket statuses", &STATUS),
        ("account deletions", &ACCOUNTS),
        ("text messages", &SMS),
    ] {
        let (requests, effects) = with(p, |p| (p.requests, p.effects.len()));
        println!("  {name:<18} {requests} requests -> {effects} effects");
    }
    let unknown = store
        .list(idem::store::ListFilter {
            state: Some(StateKind::Unknown),
            limit: 100,
            ..Default::default()
        })
        .await?;
    println!(
        "\nrecords with an unknown outcome (an operator verifies and resolves them): {}",
        unknown.len()
    );
    for r in unknown {
        if let idem::record::RecordState::Unknown { last_error, .. } = &r.state {
            println!("  {} {} - {}", r.tool, &r.key.as_str()[..12], last_error);
        }
    }
    println!(
        "\nrun again to see every write replayed from {}",
        path.display()
    );
    Ok(())
}
