//! A precondition checked after the claim and before every attempt: a ticket changed by
//! someone else between the model's read and its write is refused, saying what changed;
//! nothing is applied, the refusal is recorded and replayed, and never counted as an effect.

use std::sync::Arc;

use idem::prelude::*;
use serde::Deserialize;
use serde_json::json;

use crate::authorize::shop;
use crate::on_stores;
use crate::world::{Ticket, fresh_tenant, world};

/// What the precondition reads of the call.
#[derive(Deserialize)]
struct Expected {
    ticket_id: String,
    expected_version: u64,
}

/// The ticket is still at the version the model read.
async fn still_as_read(ctx: ToolContext, args: Expected) -> Result<(), ToolError> {
    let w = world(ctx.tenant());
    let Some(ticket) = w.tickets.get(&args.ticket_id) else {
        return Err(ToolError::terminal(format!(
            "ticket {} does not exist",
            args.ticket_id
        )));
    };
    if ticket.version != args.expected_version {
        return Err(ToolError::terminal(format!(
            "ticket {} changed since you read it: it is at version {} (you read {}) and its status is now `{}`; read it again before writing",
            args.ticket_id, ticket.version, args.expected_version, ticket.status
        )));
    }
    Ok(())
}

/// Set a ticket's status, if it is still as the model read it.
#[tool(class = "non_idempotent_write", precondition = still_as_read)]
async fn set_ticket_status(
    ctx: &ToolContext,
    ticket_id: String,
    /// The version the model read (the API's expected-version parameter).
    expected_version: u64,
    status: String,
) -> Result<String, ToolError> {
    let mut w = world(ctx.tenant());
    let key = ctx.downstream_key();
    // The API's own compare-and-set, with the version the model read.
    let ticket = w.tickets.get_mut(&ticket_id).expect("checked");
    if ticket.version != expected_version {
        return Err(ToolError::terminal("version conflict"));
    }
    ticket.version += 1;
    ticket.status = status.clone();
    w.apply(&format!("status {ticket_id} {status}"), key.as_str());
    Ok(format!("ticket {ticket_id} is {status}"))
}

async fn a_ticket_changed_after_the_read_is_refused_saying_what_changed(
    store: Arc<dyn idem::Store>,
) {
    let tenant = fresh_tenant("precondition");
    world(&tenant).tickets.insert(
        "t-1".into(),
        Ticket {
            version: 2,
            status: "open".into(),
        },
    );
    let d = shop(store.clone()).with_run_accounts(std::time::Duration::from_secs(3600));
    let run = RunContext::new(tenant.as_str()).with_run("run-pre", 1);
    // The model read version 2; someone else closes the ticket before its write.
    {
        let mut w = world(&tenant);
        let t = w.tickets.get_mut("t-1").unwrap();
        t.version = 3;
        t.status = "closed".into();
    }
    let call = ToolCall::new(
        "set_ticket_status",
        json!({"ticket_id": "t-1", "expected_version": 2, "status": "pending"}),
    )
    .with_call_id("call_w");
    let refused = d.dispatch(&call, &run).await.unwrap_err();
    let DispatchError::ToolFailed {
        error,
        deduplicated: false,
        attempts: 1,
        ..
    } = &refused
    else {
        panic!("a failed precondition is the call's refusal, got {refused:?}");
    };
    assert_eq!(
        error.message(),
        "precondition failed, nothing was applied: ticket t-1 changed since you read it: it is at version 3 (you read 2) and its status is now `closed`; read it again before writing"
    );
    assert!(world(&tenant).ledger.is_empty(), "nothing applied");
    assert_eq!(world(&tenant).tickets["t-1"].status, "closed");

    // Recorded like any refusal of the body: the same call replays it, running nothing.
    let again = d.dispatch(&call, &run).await.unwrap_err();
    assert!(matches!(
        again,
        DispatchError::ToolFailed {
            deduplicated: true,
            ..
        }
    ));

    // The model reads again and writes with the version it saw: applied once.
    let reread = ToolCall::new(
        "set_ticket_status",
        json!({"ticket_id": "t-1", "expected_version": 3, "status": "pending"}),
    )
    .with_call_id("call_w2");
    let done = d.dispatch(&reread, &run).await.expect("the fresh write");
    assert_eq!(done.output, json!("ticket t-1 is pending"));
    assert_eq!(world(&tenant).effects("status").len(), 1);

    // The account counts the refusal as refused, never as an effect.
    let account = d.run_account(&tenant, "run-pre").await.unwrap();
    assert_eq!(account.counts(), vec![("refused", 1), ("applied", 1)]);
}

on_stores!(a_ticket_changed_after_the_read_is_refused_saying_what_changed =>
    sqlite_a_ticket_changed_after_the_read_is_refused_saying_what_changed,
    postgres_a_ticket_changed_after_the_read_is_refused_saying_what_changed);
