//! A natural key is find-or-create: a call whose arguments identify an effect already made
//! replays it and says which of its arguments differ from the recorded call's. And every
//! `KeyReused` says what its reader can do, by where the key came from.

use crate::support;

use std::sync::Arc;

use idem::MemoryStore;
use idem::key::KeySource;
use idem::prelude::*;
use serde_json::{Value, json};
use support::dispatcher::linked;
use support::services::unique;
use support::tally::Tally;

static LEDGER: Tally = Tally::new();

/// The seed's own example: the same customer and subject, however worded, is one ticket.
fn ticket_key(args: &Value) -> Option<String> {
    Some(format!(
        "{}|{}",
        args["customer"].as_str()?,
        args["subject"].as_str()?.to_lowercase().trim()
    ))
}

/// Open a support ticket for a customer (or find the one already open).
#[tool(class = "non_idempotent_write", natural_key = ticket_key)]
fn create_ticket(customer: String, subject: String, body: String) -> Result<String, ToolError> {
    let n = LEDGER.note(&customer, "");
    Ok(format!("ticket {n} for {customer}: {subject} / {body}"))
}

/// The same, for a desk that wants a reworded call refused.
#[tool(class = "non_idempotent_write", natural_key = ticket_key, on_key_reuse = "reject")]
fn create_ticket_strict(
    customer: String,
    subject: String,
    body: String,
) -> Result<String, ToolError> {
    let n = LEDGER.note(&customer, "");
    Ok(format!("ticket {n} for {customer}: {subject} / {body}"))
}

/// Notes each run.
#[tool(class = "non_idempotent_write")]
fn send_note(to: String, text: String) -> Result<String, ToolError> {
    LEDGER.note(&to, "");
    Ok(format!("sent to {to}: {text}"))
}

fn run() -> RunContext {
    RunContext::new("tenant-natural")
}

fn ticket(tool: &str, customer: &str, subject: &str, body: &str, id: &str) -> ToolCall {
    ToolCall::new(
        tool,
        json!({"customer": customer, "subject": subject, "body": body}),
    )
    .with_call_id(id)
}

#[tokio::test]
async fn a_reworded_call_finds_the_ticket_already_made() {
    let d = linked(Arc::new(MemoryStore::new()));
    let customer = unique("cust");
    let first = d
        .dispatch(
            &ticket(
                "create_ticket",
                &customer,
                "Printer broken",
                "It jams.",
                "c1",
            ),
            &run(),
        )
        .await
        .unwrap();
    assert!(!first.deduplicated);
    assert!(first.differing_arguments.is_empty());
    // The model calls again "to be sure", in other words, under a new call id.
    let again = d
        .dispatch(
            &ticket(
                "create_ticket",
                &customer,
                "printer broken ",
                "It jams on page 2.",
                "c2",
            ),
            &run(),
        )
        .await
        .expect("find-or-create replays the ticket already made");
    assert!(again.deduplicated);
    assert_eq!(
        again.output, first.output,
        "the recorded ticket, not a new one"
    );
    assert_eq!(again.differing_arguments, ["/body", "/subject"]);
    assert_eq!(LEDGER.count(&customer), 1, "one ticket");
    // The same wording replays and differs in nothing.
    let same = d
        .dispatch(
            &ticket(
                "create_ticket",
                &customer,
                "Printer broken",
                "It jams.",
                "c3",
            ),
            &run(),
        )
        .await
        .unwrap();
    assert!(same.deduplicated && same.differing_arguments.is_empty());
}

#[tokio::test]
async fn reject_opts_out_and_says_the_entity_exists() {
    let d = linked(Arc::new(MemoryStore::new()));
    let customer = unique("cust");
    let call =
        |subject: &str, id: &str| ticket("create_ticket_strict", &customer, subject, "Body.", id);
    d.dispatch(&call("Refund", "c1"), &run()).await.unwrap();
    let err = d.dispatch(&call("refund", "c2"), &run()).await.unwrap_err();
    let DispatchError::KeyReused {
        key_source,
        differing,
        ..
    } = &err
    else {
        panic!("refused as a reused key: {err:?}");
    };
    assert_eq!(*key_source, KeySource::Natural);
    assert_eq!(differing, &["/subject"]);
    let text = err.to_string();
    assert!(text.contains("already exists"), "{text}");
    assert!(
        !text.contains("use a new key"),
        "the model cannot choose one: {text}"
    );
    assert_eq!(LEDGER.count(&customer), 1);
}

#[tokio::test]
async fn key_reused_says_what_its_reader_can_do_by_key_source() {
    let d = linked(Arc::new(MemoryStore::new()));
    let to = unique("to");
    let note = |text: &str| ToolCall::new("send_note", json!({"to": to, "text": text}));

    // A call id reused for another call: the host's mistake, not the model's.
    d.dispatch(&note("hello").with_call_id("call_0"), &run())
        .await
        .unwrap();
    let err = d
        .dispatch(&note("bye").with_call_id("call_0"), &run())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, DispatchError::KeyReused { key_source: KeySource::CallId, differing, .. } if differing == &["/text"]),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains("call id"), "{text}");
    assert!(text.contains("host"), "{text}");

    // An explicit key: whoever chose it chooses a new one.
    d.dispatch(&note("one").with_key("k-1"), &run())
        .await
        .unwrap();
    let err = d
        .dispatch(&note("two").with_key("k-1"), &run())
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            DispatchError::KeyReused {
                key_source: KeySource::Explicit,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("new key"), "{err}");

    // A run and step reused for another call: the host's numbering.
    let step = RunContext::new("tenant-natural").with_run("run-1", 3);
    d.dispatch(&note("first"), &step).await.unwrap();
    let err = d.dispatch(&note("second"), &step).await.unwrap_err();
    assert!(
        matches!(
            &err,
            DispatchError::KeyReused {
                key_source: KeySource::RunStep,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("run"), "{err}");
    assert_eq!(LEDGER.count(&to), 3, "nothing ran for a refused call");
}

/// The model reads, in the agent loop's answer, that its reworded call made nothing new.
#[cfg(feature = "agent")]
#[tokio::test]
async fn the_agent_loop_tells_the_model_which_arguments_differ() {
    use idem::agent::{OpenAiChat, Responder};
    let d = linked(Arc::new(MemoryStore::new()));
    let customer = unique("cust");
    let response = |id: &str, subject: &str| {
        let arguments = json!({"customer": customer, "subject": subject, "body": "Jams."});
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function",
            "function": {"name": "create_ticket", "arguments": arguments.to_string()}}]})
    };
    let agent = Responder::new(&d);
    let first = agent
        .answer(
            &OpenAiChat,
            &response("call_a", "Printer"),
            &run().with_run("run-1", 1),
        )
        .await
        .unwrap();
    let repeat = agent
        .answer(
            &OpenAiChat,
            &response("call_b", "printer"),
            &run().with_run("run-1", 2),
        )
        .await
        .unwrap();
    let recorded: Value =
        serde_json::from_str(first.messages[0]["content"].as_str().unwrap()).unwrap();
    let told: Value =
        serde_json::from_str(repeat.messages[0]["content"].as_str().unwrap()).unwrap();
    assert_eq!(told["output"], recorded, "the ticket already made");
    assert_eq!(told["deduplicated"], json!(true));
    assert_eq!(told["differing_arguments"], json!(["/subject"]));
    assert!(
        told["note"]
            .as_str()
            .unwrap()
            .contains("nothing was made again"),
        "{told}"
    );
    assert_eq!(LEDGER.count(&customer), 1);
}

/// Over MCP, the result's `_meta` names the differing arguments and its text says so.
#[cfg(feature = "mcp")]
#[tokio::test]
async fn an_mcp_result_names_the_arguments_that_differ() {
    use idem::mcp::{META_DEDUPLICATED, META_DIFFERING_ARGUMENTS, McpServer};
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    let d = linked(Arc::new(MemoryStore::new()));
    let server = McpServer::new(d, "tenant-natural").unwrap();
    let (server_side, client_side) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_side).await {
            let _ = running.waiting().await;
        }
    });
    let client = ().serve(client_side).await.unwrap();
    let customer = unique("cust");
    let call = |subject: &str| {
        let Value::Object(arguments) =
            json!({"customer": customer, "subject": subject, "body": "Jams."})
        else {
            unreachable!()
        };
        CallToolRequestParams::new("create_ticket").with_arguments(arguments)
    };
    // A host sends no key: the natural key is the call's key.
    let first = client.call_tool(call("Printer")).await.unwrap();
    let repeat = client.call_tool(call("PRINTER")).await.unwrap();
    let meta = repeat.meta.clone().map(|m| m.0).unwrap_or_default();
    assert_eq!(meta[META_DEDUPLICATED], json!(true));
    assert_eq!(meta[META_DIFFERING_ARGUMENTS], json!(["/subject"]));
    assert_eq!(repeat.structured_content, first.structured_content);
    let texts: Vec<String> = repeat
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect();
    assert!(
        texts
            .iter()
            .any(|t| t.contains("/subject") && t.contains("nothing was made again")),
        "{texts:?}"
    );
    assert_eq!(LEDGER.count(&customer), 1);
}

#[tokio::test]
async fn a_reworded_call_asks_the_verify_hook_about_the_recorded_call() {
    use idem::{ToolDef, ToolPolicy, Verified, store::ManualClock};
    use std::sync::Mutex;
    // The first call times out after the desk opened its ticket: Unknown. The reworded call
    // that follows stands for it, and the hook must look up the ticket the record stands for.
    let asked: Arc<Mutex<Vec<Value>>> = Arc::default();
    let seen = asked.clone();
    let tool = ToolDef::builder("open_ticket", ToolClass::NonIdempotentWrite)
        .description("Open a ticket.")
        .input_schema(json!({"type": "object", "properties": {
            "customer": {"type": "string"}, "subject": {"type": "string"}, "body": {"type": "string"}}}))
        .natural_key(ticket_key)
        .handler(|_: ToolContext, _: Value| async {
            Err::<Value, _>(ToolError::ambiguous("the desk timed out after opening it"))
        })
        .verify(move |_: ToolContext, args: Value| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push(args.clone());
                Ok(Verified::Applied(json!({"ticket": "T-1", "body": args["body"]})))
            }
        })
        .build()
        .unwrap();
    let clock = Arc::new(ManualClock::new());
    let store = Arc::new(MemoryStore::new().with_clock(clock.clone()));
    let d = support::dispatcher::with_tool(tool, store);
    let customer = unique("cust");
    let first = ticket("open_ticket", &customer, "Printer", "It jams.", "v1");
    let err = d.dispatch(&first, &run()).await.unwrap_err();
    assert!(matches!(err, DispatchError::OutcomeUnknown { .. }), "{err}");
    clock.advance(ToolPolicy::default().verify_after);
    let reworded = ticket(
        "open_ticket",
        &customer,
        "printer",
        "It jams on page 2.",
        "v2",
    );
    let settled = d.dispatch(&reworded, &run()).await.unwrap();
    assert!(settled.deduplicated);
    assert_eq!(settled.differing_arguments, ["/body", "/subject"]);
    let asked = asked.lock().unwrap();
    assert_eq!(asked.len(), 1);
    assert_eq!(
        asked[0]["body"], "It jams.",
        "the hook is asked about the recorded call, not the rewording"
    );
    assert_eq!(settled.output["body"], "It jams.");
}

/// Close a customer's account for good (once per customer and reason, however worded).
#[tool(class = "irreversible", natural_key = ticket_key)]
fn close_account(customer: String, subject: String, body: String) -> Result<String, ToolError> {
    let n = LEDGER.note(&customer, "");
    Ok(format!("closure {n} for {customer}: {subject} / {body}"))
}

#[tokio::test]
async fn a_reworded_irreversible_call_replays_without_asking_for_another_approval() {
    let d = linked(Arc::new(MemoryStore::new()));
    let customer = unique("cust");
    let first = ticket("close_account", &customer, "Fraud", "Card stolen.", "k1");
    let done = support::dispatcher::dispatch_approving(&d, &first, &run())
        .await
        .unwrap();
    // The model asks again in other words: the closure is made, nothing would run.
    let reworded = ticket(
        "close_account",
        &customer,
        "fraud",
        "The card was stolen.",
        "k2",
    );
    let again = d
        .dispatch(&reworded, &run())
        .await
        .expect("replayed, not sent to a person for an effect that cannot happen");
    assert!(again.deduplicated);
    assert_eq!(again.output, done.output);
    assert_eq!(again.differing_arguments, ["/body", "/subject"]);
    assert_eq!(LEDGER.count(&customer), 1);
}
