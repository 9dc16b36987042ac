//! A run's account tells a read apart from an applied effect, and says each call's class
//! and how often its body ran: a ticket read, an assignment whose first attempt timed out
//! after the desk applied it, and a reply. The calls the account says were applied are the
//! effects in the desk's ledger, one for one.

use std::sync::Arc;
use std::time::Duration;

use idem::prelude::*;
use serde_json::json;

use crate::authorize::shop;
use crate::on_stores;
use crate::world::{Ticket, fresh_tenant, world};

/// Read a ticket's status.
#[tool(class = "read")]
async fn read_ticket(ctx: &ToolContext, ticket_id: String) -> Result<String, ToolError> {
    let w = world(ctx.tenant());
    match w.tickets.get(&ticket_id) {
        Some(ticket) => Ok(ticket.status.clone()),
        None => Err(ToolError::terminal(format!("no ticket {ticket_id}"))),
    }
}

/// Assign a ticket to an agent. The desk applies the first request, then times out.
#[tool(class = "idempotent_write", backoff_ms = 1)]
async fn assign_ticket(
    ctx: &ToolContext,
    ticket_id: String,
    agent: String,
) -> Result<String, ToolError> {
    let mut w = world(ctx.tenant());
    w.apply(
        &format!("assign {ticket_id} {agent}"),
        ctx.downstream_key().as_str(),
    );
    if ctx.attempt() == 1 {
        return Err(ToolError::ambiguous("the desk timed out"));
    }
    Ok(format!("{ticket_id} is {agent}'s"))
}

/// Reply to a ticket's customer.
#[tool(class = "non_idempotent_write")]
async fn reply_to_ticket(
    ctx: &ToolContext,
    ticket_id: String,
    text: String,
) -> Result<String, ToolError> {
    world(ctx.tenant()).apply(
        &format!("reply {ticket_id} {text}"),
        ctx.downstream_key().as_str(),
    );
    Ok("sent".into())
}

async fn a_runs_account_tells_reads_apart_and_each_calls_class_and_attempts(
    store: Arc<dyn idem::Store>,
) {
    let tenant = fresh_tenant("account_attempts");
    world(&tenant).tickets.insert(
        "t-3".into(),
        Ticket {
            version: 1,
            status: "open".into(),
        },
    );
    let d = shop(store).with_run_accounts(Duration::from_secs(3600));
    let run = RunContext::new(tenant.as_str()).with_run("run-desk", 0);
    let calls = [
        ToolCall::new("read_ticket", json!({"ticket_id": "t-3"})).with_call_id("c1"),
        ToolCall::new("assign_ticket", json!({"ticket_id": "t-3", "agent": "ana"}))
            .with_call_id("c2"),
        ToolCall::new(
            "reply_to_ticket",
            json!({"ticket_id": "t-3", "text": "Ana has your ticket."}),
        )
        .with_call_id("c3"),
    ];
    for (step, call) in calls.iter().enumerate() {
        d.dispatch(call, &run.clone().at_step(step as u64))
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", call.name));
    }

    let account = d.run_account(&tenant, "run-desk").await.unwrap();
    let outcomes: Vec<&str> = account.calls.iter().map(|c| c.outcome.name()).collect();
    assert_eq!(outcomes, ["answered", "applied", "applied"], "{account}");
    assert_eq!(
        account.counts(),
        vec![("answered", 1), ("applied", 2)],
        "a read is counted apart from the effects"
    );
    let text = account.to_string();
    for line in [
        "1. read_ticket [c1]: answered (read, 1 attempt)",
        "2. assign_ticket [c2]: applied (idempotent_write, 2 attempts)",
        "3. reply_to_ticket [c3]: applied (non_idempotent_write, 1 attempt)",
    ] {
        assert!(text.contains(line), "{line:?} in:\n{text}");
    }
    assert!(text.ends_with("in all: 1 answered, 2 applied"), "{text}");

    // What the account says was applied is what the desk applied, one for one; the two
    // attempts of the assignment were one effect (the desk's key dedupes the second).
    let w = world(&tenant);
    let applied = account
        .calls
        .iter()
        .filter(|c| c.outcome.name() == "applied");
    assert_eq!(applied.count(), w.ledger.len(), "{account}");
    assert_eq!(
        w.applied(),
        ["assign t-3 ana", "reply t-3 Ana has your ticket."],
        "the read applied nothing"
    );
}

on_stores!(a_runs_account_tells_reads_apart_and_each_calls_class_and_attempts =>
    sqlite_a_runs_account_tells_reads_apart_and_each_calls_class_and_attempts,
    postgres_a_runs_account_tells_reads_apart_and_each_calls_class_and_attempts);
