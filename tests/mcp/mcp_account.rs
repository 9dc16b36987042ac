//! The `idem_run_account` tool tells the model each call of its session with its class and
//! attempts, and a read as answered, counted apart from the effects.
#![cfg(feature = "mcp")]

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use idem::mcp::{META_KEY, McpServer};
use idem::prelude::*;
use idem::tool::{ToolDef, ToolPolicy};
use rmcp::model::{
    CallToolRequestParams, InitializeResult, MetaObject, ProtocolVersion, RequestMetaObject,
};
use rmcp::service::{RunningService, serve_directly};
use rmcp::{ClientHandler, RoleClient, RoleServer};
use serde_json::{Value, json};

/// A read, an idempotent write whose first attempt times out, a non-idempotent write.
fn desk() -> Registry {
    let read = ToolDef::builder("read_invoice", ToolClass::Read)
        .description("Read an invoice.")
        .input_schema(json!({"type": "object"}))
        .handler(|_: ToolContext, _: Value| async move { Ok::<_, ToolError>(json!("unpaid")) })
        .build()
        .unwrap();
    let void = ToolDef::builder("void_invoice", ToolClass::IdempotentWrite)
        .description("Void an invoice.")
        .input_schema(json!({"type": "object"}))
        .policy(ToolPolicy {
            backoff: Duration::from_millis(1),
            ..Default::default()
        })
        .handler(|ctx: ToolContext, _: Value| async move {
            match ctx.attempt() {
                1 => Err(ToolError::ambiguous("the ledger timed out")),
                _ => Ok(json!("voided")),
            }
        })
        .build()
        .unwrap();
    let remind = ToolDef::builder("send_reminder", ToolClass::NonIdempotentWrite)
        .description("Send a payment reminder.")
        .input_schema(json!({"type": "object"}))
        .handler(|_: ToolContext, _: Value| async move { Ok::<_, ToolError>(json!("sent")) })
        .build()
        .unwrap();
    Registry::builder()
        .add(read)
        .add(void)
        .add(remind)
        .build()
        .unwrap()
}

/// A client of a server that serves the run account tool beside the desk's tools.
fn connect() -> RunningService<RoleClient, ()> {
    connect_to(desk(), Arc::new(MemoryStore::new()))
}

/// A client of a server over `store` that serves the run account tool beside `registry`'s
/// tools.
fn connect_to(registry: Registry, store: Arc<dyn idem::Store>) -> RunningService<RoleClient, ()> {
    let dispatcher = support::dispatcher::dispatcher(registry, store)
        .with_run_accounts(Duration::from_secs(3600));
    let server = McpServer::new(dispatcher, "tenant-mcp")
        .unwrap()
        .expose_run_account()
        .unwrap();
    let (server_side, client_side) = tokio::io::duplex(64 * 1024);
    let running =
        serve_directly::<RoleServer, _, _, _, _>(server, server_side, Some(().get_info()));
    std::mem::forget(running); // lives as long as the test's runtime
    let mut peer = InitializeResult::default();
    peer.protocol_version = ProtocolVersion::V_2026_07_28;
    serve_directly::<RoleClient, _, _, _, _>((), client_side, Some(peer.into()))
}

fn call(tool: &str, key: Option<&str>) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(Default::default());
    if let Some(key) = key {
        let mut meta = MetaObject::new();
        meta.insert(META_KEY.into(), Value::from(key));
        params.meta = Some(RequestMetaObject::from(meta));
    }
    params
}

#[tokio::test]
async fn the_run_account_tool_says_each_calls_class_and_attempts_and_a_read_as_answered() {
    let client = connect();
    for (tool, key) in [
        ("read_invoice", None),
        ("void_invoice", Some("void-inv-4")),
        ("send_reminder", Some("remind-inv-4")),
    ] {
        let done = client.call_tool(call(tool, key)).await.unwrap();
        assert_ne!(done.is_error, Some(true), "{tool}: {done:?}");
    }

    let account = client
        .call_tool(call("idem_run_account", None))
        .await
        .unwrap();
    assert_ne!(account.is_error, Some(true), "{account:?}");
    let structured = account
        .structured_content
        .clone()
        .expect("the account as JSON");
    let said: Vec<(&str, &str, &str, u64)> = structured["calls"]
        .as_array()
        .expect("its calls")
        .iter()
        .map(|c| {
            (
                c["tool"].as_str().unwrap_or("?"),
                c["outcome"].as_str().unwrap_or("?"),
                c["class"].as_str().unwrap_or("?"),
                c["attempts"].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect();
    assert_eq!(
        said,
        [
            ("read_invoice", "answered", "read", 1),
            ("void_invoice", "applied", "idempotent_write", 2),
            ("send_reminder", "applied", "non_idempotent_write", 1),
        ],
        "{structured:#}"
    );
    let text = account.content[0]
        .as_text()
        .map(|t| t.text.clone())
        .unwrap_or_default();
    for said in [
        "read_invoice: answered (read, 1 attempt)",
        "void_invoice: applied (idempotent_write, 2 attempts)",
        "send_reminder: applied (non_idempotent_write, 1 attempt)",
        "in all: 1 answered, 2 applied",
    ] {
        assert!(text.contains(said), "{said:?} in:\n{text}");
    }
}

/// A capture that fails for good goes to a person: the MCP client is answered `escalated`,
/// the run account lists it for a person, and once a person said what happened, the client's
/// re-send of the call is answered by that.
#[tokio::test]
async fn a_call_sent_to_a_person_is_answered_escalated_and_listed_in_the_account() {
    let capture = ToolDef::builder("capture", ToolClass::NonIdempotentWrite)
        .description("Capture a reserved amount.")
        .input_schema(json!({"type": "object"}))
        .handler(|_: ToolContext, _: Value| async move {
            Err::<Value, _>(ToolError::terminal("the card was declined"))
        })
        .escalate(idem::tool::Escalate::Failures)
        .build()
        .unwrap();
    let store: Arc<dyn idem::Store> = Arc::new(MemoryStore::new());
    let client = connect_to(
        Registry::builder().add(capture).build().unwrap(),
        store.clone(),
    );

    let sent = client
        .call_tool(call("capture", Some("capture-o-1")))
        .await
        .unwrap();
    assert_eq!(sent.is_error, Some(true), "{sent:?}");
    let code = sent
        .meta
        .as_ref()
        .and_then(|m| m.get(idem::mcp::META_ERROR))
        .cloned();
    assert_eq!(code, Some(json!("escalated")), "{sent:?}");
    let text = sent.content[0]
        .as_text()
        .map(|t| t.text.clone())
        .unwrap_or_default();
    assert!(
        text.contains("sent to a person") && text.contains("the card was declined"),
        "{text}"
    );

    let account = client
        .call_tool(call("idem_run_account", None))
        .await
        .unwrap();
    let structured = account
        .structured_content
        .clone()
        .expect("the account as JSON");
    assert_eq!(
        structured["calls"][0]["outcome"],
        json!("escalated"),
        "{structured:#}"
    );
    let listed = account.content[0]
        .as_text()
        .map(|t| t.text.clone())
        .unwrap_or_default();
    assert!(
        listed.contains("capture: escalated: failed: the card was declined (sent to a person)"),
        "{listed}"
    );

    // A person captured it by hand and says so; the client's re-send is answered by that.
    let desk = idem::dispatch::CaseDesk::over(&*store);
    let case = desk.pending(None, 10).await.unwrap().remove(0);
    let said = idem::record::Outcome::success(&json!("captured by hand"));
    desk.decide(
        &case,
        "dana@desk",
        idem::dispatch::CaseDecision::Resolve(said),
    )
    .await
    .unwrap();
    let again = client
        .call_tool(call("capture", Some("capture-o-1")))
        .await
        .unwrap();
    assert_ne!(again.is_error, Some(true), "{again:?}");
    let replayed = again
        .meta
        .as_ref()
        .and_then(|m| m.get(idem::mcp::META_DEDUPLICATED))
        .cloned();
    assert_eq!(replayed, Some(json!(true)), "{again:?}");
}
