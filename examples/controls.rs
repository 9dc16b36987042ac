//! The controls beyond dedupe, in one scripted session of a shop's support agent: no LLM, no
//! network, fake providers that count every request they receive and what they applied,
//! records in SQLite.
//!
//! - **Permission that reads the call**: the agent acts for one customer; a refund for
//!   another customer's order is refused before anything is recorded.
//! - **Approval by argument**: a refund over the run's limit waits for a person; an operator
//!   approves it from the store, and the agent's retry runs it once.
//! - **A precondition**: a ticket changed by someone else after the agent read it is not
//!   written; the refusal says what changed.
//! - **Compensation**: a trip whose car cannot be booked has its flight and hotel cancelled,
//!   in reverse, once each.
//! - **A run's account**: what became of every call, from the store (a call the host sent
//!   again is one call), checked against the providers' own counts: a request idem sent
//!   twice would fail the example.
//!
//! ```text
//! cargo run --example controls
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem::prelude::*;
use idem::tool::Undo;
use idem::{ApprovalKey, Approver, SqliteStore, approval::ApprovalKeys};
use serde::Deserialize;
use serde_json::{Value, json};

/// The providers: every request they received, and what each applied, by key. A repeated
/// key applies nothing (as their idempotency keys promise) but is still a request received:
/// idem sending an effect twice shows in `received`, under one key or under two.
#[derive(Default)]
struct Providers {
    received: Vec<(String, String)>,
    applied: Vec<(String, String)>,
    tickets: BTreeMap<String, (u64, String)>,
}

static PROVIDERS: Mutex<Option<Providers>> = Mutex::new(None);

fn with_providers<T>(f: impl FnOnce(&mut Providers) -> T) -> T {
    let mut guard = PROVIDERS.lock().unwrap_or_else(|e| e.into_inner());
    f(guard.get_or_insert_with(Providers::default))
}

/// A request for `what` under `key`: counted whatever it is; `effect` happens only for a
/// key the provider has not seen.
fn request(what: String, key: &str, effect: impl FnOnce(&mut Providers)) {
    with_providers(|p| {
        p.received.push((what.clone(), key.to_owned()));
        if !p.applied.iter().any(|(_, k)| k == key) {
            p.applied.push((what, key.to_owned()));
            effect(p);
        }
    });
}

/// How many requests for `prefix` the providers received.
fn received(prefix: &str) -> usize {
    with_providers(|p| count(&p.received, prefix))
}

/// How many requests for `prefix` the providers applied.
fn applied(prefix: &str) -> usize {
    with_providers(|p| count(&p.applied, prefix))
}

fn count(requests: &[(String, String)], prefix: &str) -> usize {
    requests
        .iter()
        .filter(|(w, _)| w.starts_with(prefix))
        .count()
}

// ---- Refunds: permission and approval read the call.

#[derive(Deserialize)]
struct RefundArgs {
    customer_id: String,
    amount: u64,
}

/// Only the customer the run acts for.
fn own_customer(args: &RefundArgs, run: &RunContext) -> Result<(), String> {
    match run.acting_for.as_deref() == Some(args.customer_id.as_str()) {
        true => Ok(()),
        false => Err("a refund may go only to the customer this conversation is about".into()),
    }
}

/// Above the run's refund limit (or without one), a person decides.
fn over_limit(args: &RefundArgs, run: &RunContext) -> bool {
    run.limit("refund")
        .and_then(Value::as_u64)
        .is_none_or(|limit| args.amount > limit)
}

/// Refund part of an order to the customer.
#[tool(class = "non_idempotent_write", authorize = own_customer, approve_when = over_limit)]
async fn refund(
    ctx: &ToolContext,
    customer_id: String,
    order_id: String,
    /// In euros.
    amount: u64,
) -> Result<String, ToolError> {
    request(
        format!("refund {amount} to {customer_id} on {order_id}"),
        ctx.downstream_key().as_str(),
        |_| {},
    );
    Ok(format!("refunded {amount} EUR on {order_id}"))
}

// ---- Tickets: a precondition before every attempt.

#[derive(Deserialize)]
struct TicketArgs {
    ticket_id: String,
    expected_version: u64,
}

/// The ticket is still as the agent read it.
async fn as_read(_ctx: ToolContext, args: TicketArgs) -> Result<(), ToolError> {
    let now = with_providers(|p| p.tickets.get(&args.ticket_id).cloned());
    match now {
        Some((version, _)) if version == args.expected_version => Ok(()),
        Some((version, status)) => Err(ToolError::terminal(format!(
            "ticket {} changed since you read it (version {version}, you read {}): it is now `{status}`",
            args.ticket_id, args.expected_version
        ))),
        None => Err(ToolError::terminal(format!("no ticket {}", args.ticket_id))),
    }
}

/// Set a ticket's status, if it is still as you read it.
#[tool(class = "non_idempotent_write", precondition = as_read)]
async fn set_ticket_status(
    ctx: &ToolContext,
    ticket_id: String,
    /// The version you read: the desk refuses a write to another.
    expected_version: u64,
    status: String,
) -> Result<String, ToolError> {
    request(
        format!("status {ticket_id} {status}"),
        ctx.downstream_key().as_str(),
        |p| {
            let ticket = p
                .tickets
                .get_mut(&ticket_id)
                .expect("checked by the precondition");
            ticket.0 = expected_version + 1;
            ticket.1 = status.clone();
        },
    );
    Ok(format!("ticket {ticket_id} is {status}"))
}

// ---- Trips: compensation of completed steps.

/// Cancel a booked step, under the compensation's own key.
async fn cancel(ctx: ToolContext, undo: Undo) -> Result<(), ToolError> {
    let booking: String = undo.output_as()?;
    request(
        format!("cancel {booking}"),
        ctx.downstream_key().as_str(),
        |_| {},
    );
    Ok(())
}

/// Book a flight, a hotel and a car for a trip: all three, or none.
#[tool(class = "idempotent_write", compensate = cancel, backoff_ms = 1)]
async fn book_trip(ctx: &ToolContext, city: String, car: bool) -> Result<Value, ToolError> {
    let mut booked = Vec::new();
    for what in ["flight", "hotel"] {
        let booking: String = ctx
            .step(what, || async {
                request(
                    format!("book {what} {city}"),
                    ctx.downstream_key().as_str(),
                    |_| {},
                );
                Ok(format!("{what}-{city}"))
            })
            .await?;
        booked.push(booking);
    }
    if car {
        return Err(ToolError::not_applied(format!(
            "no car is available in {city} on those dates"
        )));
    }
    Ok(json!({"booked": booked}))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::temp_dir().join(format!("idem-controls-{}.db", std::process::id()));
    let store = Arc::new(SqliteStore::open(&path)?);
    let key = ApprovalKey::new("desk-2026-12", *b"example-approval-key-not-secret!")?;
    let agent = Dispatcher::approving(
        Registry::linked()?,
        store.clone(),
        ApprovalKeys::new([key.clone()]),
    )?
    .with_run_accounts(Duration::from_secs(24 * 3600));
    with_providers(|p| {
        p.tickets.insert("T-7".into(), (3, "open".into()));
    });
    let run = RunContext::new("shop")
        .with_run("conversation-1", 0)
        .acting_for("cus_ana")
        .with_limit("refund", 50);
    let say = |what: &str, result: &Result<Dispatched, DispatchError>| match result {
        Ok(done) if done.deduplicated => println!("{what}: {} (replayed)", done.output),
        Ok(done) => println!("{what}: {}", done.output),
        Err(e) => println!("{what}: refused ({}): {e}", e.code()),
    };

    let other = ToolCall::new(
        "refund",
        json!({"customer_id": "cus_bo", "order_id": "o-2", "amount": 30}),
    )
    .with_call_id("call_1");
    say(
        "refund to another customer",
        &agent.dispatch(&other, &run).await,
    );

    let small = ToolCall::new(
        "refund",
        json!({"customer_id": "cus_ana", "order_id": "o-1", "amount": 20}),
    )
    .with_call_id("call_2");
    say(
        "refund of 20",
        &agent.dispatch(&small, &run.clone().at_step(1)).await,
    );
    // The host sends the same call again (it timed out waiting): replayed, nothing sent to
    // the provider, and one call in the account.
    say(
        "refund of 20, sent again",
        &agent.dispatch(&small, &run.clone().at_step(1)).await,
    );

    let large = ToolCall::new(
        "refund",
        json!({"customer_id": "cus_ana", "order_id": "o-1", "amount": 400}),
    )
    .with_call_id("call_3");
    let refused = agent.dispatch(&large, &run.clone().at_step(2)).await;
    say("refund of 400", &refused);
    // A person at the approvals desk (idem approvals, the inbox) approves exactly the call
    // the agent was refused, with the arguments it was refused with.
    let request = refused
        .as_ref()
        .err()
        .and_then(DispatchError::approval_request)
        .expect("a refund over the limit waits for a person");
    agent
        .approvals()
        .approve(
            request,
            &Approver::new("dana@shop", key.clone()),
            None,
            None,
        )
        .await?;
    println!("dana@shop approved {} {}", request.tool, request.arguments);
    say(
        "refund of 400, again",
        &agent.dispatch(&large, &run.clone().at_step(2)).await,
    );

    // The agent read T-7 at version 3; a colleague closes it before the agent writes.
    with_providers(|p| {
        p.tickets.insert("T-7".into(), (4, "closed".into()));
    });
    let status = ToolCall::new(
        "set_ticket_status",
        json!({"ticket_id": "T-7", "expected_version": 3, "status": "waiting"}),
    )
    .with_call_id("call_4");
    say(
        "ticket T-7 to waiting",
        &agent.dispatch(&status, &run.clone().at_step(3)).await,
    );

    let trip =
        ToolCall::new("book_trip", json!({"city": "Porto", "car": true})).with_call_id("call_5");
    say(
        "trip to Porto with a car",
        &agent.dispatch(&trip, &run.clone().at_step(4)).await,
    );

    let account = agent.run_account("shop", "conversation-1").await?;
    println!("\n{account}");
    println!(
        "\nproviders: {} refund(s), {} status change(s), {} booking(s), {} cancellation(s) \
         applied, from {} request(s) received",
        applied("refund"),
        applied("status"),
        applied("book"),
        applied("cancel"),
        received(""),
    );
    // What the account says is what the providers did, and idem asked for each effect once:
    // a request sent twice (under one key or two) fails these.
    for (what, effects, why) in [
        (
            "refund",
            2,
            "two refunds: the re-send and the refused calls sent none",
        ),
        ("status", 0, "the stale write sent nothing"),
        ("book", 2, "the flight and the hotel, each once"),
        ("cancel", 2, "each booking undone once"),
    ] {
        assert_eq!(applied(what), effects, "{what} applied: {why}");
        assert_eq!(received(what), effects, "{what} requests received: {why}");
    }
    assert_eq!(
        account.calls.len(),
        5,
        "seven dispatches, five calls: {account}"
    );
    let counts = account.counts();
    assert_eq!(
        counts,
        vec![("refused", 2), ("applied", 2), ("compensated", 1)],
        "{account}"
    );
    drop(agent);
    let _ = std::fs::remove_file(&path);
    Ok(())
}
