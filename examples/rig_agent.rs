//! idem's tools in a rig agent, on the embedded SQLite store. The model is rig's scripted
//! completion model (no network, no API key): it opens a ticket, opens it again "to be
//! sure", comments on it, re-sends that comment (a resumed turn), and asks to delete an
//! account. Then the whole run is played again from the start, as after a crash.
//!
//! ```sh
//! cargo run -p idem-tests --example rig_agent --features rig
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use idem::agent::rig::RigTools;
use idem::prelude::*;
use idem::{ApprovalKey, SqliteStore, approval::ApprovalKeys};
use rig_agent::AgentBuilder;
use rig_core::test_utils::{MockCompletionModel, MockTurn};
use serde_json::json;

static TICKETS: AtomicUsize = AtomicUsize::new(0);
static COMMENTS: AtomicUsize = AtomicUsize::new(0);

fn by_title(args: &serde_json::Value) -> Option<String> {
    args.get("title")?.as_str().map(str::to_owned)
}

/// Open a support ticket (one per title: opening it again finds the first).
#[tool(class = "non_idempotent_write", natural_key = by_title)]
async fn open_ticket(title: String) -> Result<String, ToolError> {
    let n = TICKETS.fetch_add(1, Ordering::SeqCst) + 1;
    Ok(format!("TICKET-{n}: {title}"))
}

/// Comment on a ticket.
#[tool(class = "non_idempotent_write")]
async fn add_comment(ticket: String, text: String) -> Result<String, ToolError> {
    COMMENTS.fetch_add(1, Ordering::SeqCst);
    Ok(format!("commented on {ticket}: {text}"))
}

/// Delete a customer's account for good.
#[tool(class = "irreversible")]
async fn delete_account(account: String) -> Result<String, ToolError> {
    Ok(format!("deleted {account}"))
}

fn model() -> MockCompletionModel {
    let ticket = json!({"title": "Export button does nothing"});
    let comment = json!({"ticket": "TICKET-1", "text": "Reproduced on Safari 17."});
    MockCompletionModel::from_turns([
        MockTurn::tool_call("call_Hx7Qm2Lw9Pz4", "open_ticket", ticket.clone()),
        MockTurn::tool_call("call_Rt5Vb8Nk3Jy6", "open_ticket", ticket),
        MockTurn::tool_call("call_Cm4Ts9Qe2Wd7", "add_comment", comment.clone()),
        MockTurn::tool_call("call_Cm4Ts9Qe2Wd7", "add_comment", comment),
        MockTurn::tool_call(
            "call_Dk2Wq7Ps4Mx1",
            "delete_account",
            json!({"account": "acme"}),
        ),
        MockTurn::text("Ticket opened and commented; deleting acme needs an approval."),
    ])
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::temp_dir().join(format!("idem-rig-agent-{}.db", std::process::id()));
    let store = Arc::new(SqliteStore::open(&path)?);
    // Irreversible tools need an approval key; nobody approves in this example, so the agent
    // is told its deletion waits for one.
    let key = ApprovalKey::new("rig-2026-12", *b"example-approval-key-not-secret!")?;
    let keys = ApprovalKeys::new([key]);
    let dispatcher = Arc::new(Dispatcher::approving(Registry::linked()?, store, keys)?);
    let run = RunContext::new("tenant-a").with_run("support-run-1", 0);
    for attempt in ["the run", "the same run again, from the start"] {
        let tools = RigTools::new(Arc::clone(&dispatcher), run.clone());
        let agent = AgentBuilder::new(model())
            .dynamic_tools(tools.tools())
            .add_hook(tools.hook())
            .build();
        let answer = agent
            .prompt("Export is broken; delete acme.")
            .max_turns(8)
            .run()
            .await?;
        println!("{attempt}: the agent said {:?}", answer.to_string());
        println!(
            "  tickets opened: {}, comments added: {}",
            TICKETS.load(Ordering::SeqCst),
            COMMENTS.load(Ordering::SeqCst)
        );
    }
    std::fs::remove_file(&path).ok();
    Ok(())
}
