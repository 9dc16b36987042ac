//! Approvals where people work, in one scripted session of a treasury agent: no LLM, no
//! network, a fake bank that counts every transfer it receives, records in SQLite.
//!
//! - **Four eyes**: a wire needs two distinct approvers. Dana approves at the desk; the wire
//!   still waits; Dana again (spelt otherwise, through another door) is refused; Lee
//!   approves; the agent's retry runs the wire once.
//! - **A standing grant**: Dana grants refunds up to 50 for this run, for an hour. A refund
//!   of 20 runs without asking; one of 90 asks; the run's account names the grant; once the
//!   grant is revoked, a refund of 30 asks again.
//! - **The decision log**: every decision above, in a hash chain in the store, verified.
//!
//! `idem ui` shows the same requests with who approved and who is awaited, `idem grants list`
//! the grant, `idem audit verify` the chain; `idem notify` (configured as in
//! `examples/notify.toml`) would have sent each request to Slack, Teams or a webhook.
//!
//! ```text
//! cargo run --example approvals
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem::approval::{ApprovalDesk, ApprovalKeys, GrantTerms};
use idem::prelude::*;
use idem::store::approvals::ApprovalFilter;
use idem::store::decisions;
use idem::tool::{Rule, ToolDef};
use idem::{ApprovalKey, Approver, SqliteStore, Store};
use serde_json::{Value, json};

/// Transfers the fake bank received.
static TRANSFERS: AtomicUsize = AtomicUsize::new(0);

async fn bank(_: ToolContext, args: Value) -> Result<Value, ToolError> {
    TRANSFERS.fetch_add(1, Ordering::SeqCst);
    Ok(json!({"sent": args["cents"]}))
}

fn tools() -> Registry {
    let schema = json!({
        "type": "object",
        "properties": {"to": {"type": "string"}, "cents": {"type": "integer", "minimum": 1}},
        "required": ["to", "cents"]
    });
    let wire = ToolDef::builder("wire", ToolClass::Irreversible)
        .description("Wire money to an account.")
        .input_schema(schema.clone())
        .approvers(2)
        .handler(bank)
        .build()
        .expect("the wire tool");
    let refund = ToolDef::builder("refund", ToolClass::Irreversible)
        .description("Refund a customer.")
        .input_schema(schema)
        .handler(bank)
        .build()
        .expect("the refund tool");
    Registry::builder()
        .add(wire)
        .add(refund)
        .build()
        .expect("the registry")
}

fn call(tool: &str, id: &str, cents: u64) -> ToolCall {
    ToolCall::new(tool, json!({"to": "acct-7", "cents": cents})).with_call_id(id)
}

fn asks(result: &Result<Dispatched, DispatchError>) -> bool {
    matches!(result, Err(DispatchError::ApprovalRequired { .. }))
}

fn check(ok: bool, what: &str) {
    if !ok {
        eprintln!("FAILED: {what}");
        std::process::exit(1);
    }
    println!("ok  {what}");
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let path = std::env::temp_dir().join(format!("idem-approvals-{}.db", std::process::id()));
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).expect("open SQLite"));
    let key = ApprovalKey::new("desk-1", *b"example-approval-key-not-secret!").expect("a key");
    let agent = Dispatcher::approving(tools(), store.clone(), ApprovalKeys::new([key.clone()]))
        .expect("the dispatcher")
        .with_run_accounts(Duration::from_secs(3600));
    let dana = Approver::new("dana@treasury", key.clone());
    let lee = Approver::new("lee@treasury", key);
    let run = RunContext::new("acme").with_run("run-1", 1);

    // Four eyes.
    let wire = call("wire", "w-1", 250_000);
    check(
        asks(&agent.dispatch(&wire, &run).await),
        "the wire waits for approval",
    );
    let pending = ApprovalDesk::over(&*store)
        .pending(&ApprovalFilter::default())
        .await
        .expect("the pending requests");
    let first = agent
        .approvals()
        .through("inbox")
        .approve(&pending[0], &dana, None, None)
        .await
        .expect("Dana's approval");
    check(
        first.awaiting() == 1,
        "Dana approved: one more approver awaited",
    );
    check(
        asks(&agent.dispatch(&wire, &run).await),
        "the wire still waits",
    );
    let again = agent
        .approvals()
        .through("cli")
        .approve(
            &pending[0],
            &Approver::new("DANA@treasury", dana.key().clone()),
            None,
            None,
        )
        .await;
    check(again.is_err(), "Dana again, through another door: refused");
    agent
        .approvals()
        .through("cli")
        .approve(&pending[0], &lee, None, None)
        .await
        .expect("Lee's approval");
    let sent = agent.dispatch(&wire, &run).await;
    check(sent.is_ok(), "after Lee, the agent's retry runs the wire");
    check(
        TRANSFERS.load(Ordering::SeqCst) == 1,
        "the bank received one transfer",
    );

    // A standing grant.
    let up_to_50: Rule =
        serde_json::from_value(json!({"pointer": "/cents", "at_most": 5000})).expect("a rule");
    let terms = GrantTerms::new("acme", "refund", Duration::from_secs(3600))
        .for_run("run-1")
        .within(up_to_50);
    let grant = agent
        .approvals()
        .grant(&terms, &dana)
        .await
        .expect("the grant");
    let small = agent.dispatch(&call("refund", "r-1", 2_000), &run).await;
    check(
        small.as_ref().is_ok_and(|d| d.granted.is_some()),
        "a refund of 20 runs without asking, let through by the grant",
    );
    check(
        asks(&agent.dispatch(&call("refund", "r-2", 9_000), &run).await),
        "a refund of 90, outside the grant, asks",
    );
    let account = agent
        .run_account("acme", "run-1")
        .await
        .expect("the account");
    println!("{account}");
    check(
        account
            .to_string()
            .contains(&format!("let through by grant {}", grant.id)),
        "the run's account names the grant",
    );
    agent
        .approvals()
        .revoke(&grant.id, "lee@treasury")
        .await
        .expect("the revocation");
    check(
        asks(&agent.dispatch(&call("refund", "r-3", 3_000), &run).await),
        "once revoked, a refund of 30 asks again",
    );
    check(
        TRANSFERS.load(Ordering::SeqCst) == 2,
        "the bank received two transfers in all",
    );

    // The decision log.
    let chain = decisions::verify(&*store).await;
    check(
        matches!(&chain, Ok(c) if c.entries == 4),
        "the decision log holds the two approvals, the grant and the revocation, unbroken",
    );
    let _ = std::fs::remove_file(&path);
}
