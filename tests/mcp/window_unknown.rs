//! An Unknown outcome under a re-send window's key is not bound by the window: the same call
//! after the window is answered with the Unknown, never run over it, and the record stays
//! listed for a person until one settles it. Driven by rmcp's own client, in process.

#![cfg(feature = "mcp")]

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem::mcp::{META_DEDUPLICATED, META_ERROR, McpServer};
use idem::prelude::*;
use idem::record::StateKind;
use idem::store::{ListFilter, ManualClock};
use idem::{MemoryStore, Store, ToolDef};
use rmcp::model::{CallToolRequestParams, CallToolResult, ProtocolVersion};
use rmcp::service::{RunningService, serve_directly};
use rmcp::{ClientHandler, RoleClient, RoleServer};
use serde_json::{Value, json};

const TENANT: &str = "tenant-unknown";

const WINDOW: Duration = Duration::from_secs(60);

/// A payment whose first attempt times out after the request left: its outcome is unknown.
fn pay(runs: &Arc<AtomicUsize>) -> ToolDef {
    let runs = runs.clone();
    ToolDef::builder("pay", ToolClass::NonIdempotentWrite)
        .description("Pay an invoice.")
        .input_schema(json!({
            "type": "object",
            "properties": {"invoice": {"type": "string"}},
            "required": ["invoice"]
        }))
        .handler(move |_: ToolContext, args: Value| {
            let runs = runs.clone();
            async move {
                match runs.fetch_add(1, Ordering::SeqCst) {
                    0 => Err(ToolError::ambiguous("the bank timed out after the request")),
                    _ => Ok(json!({"paid": args["invoice"]})),
                }
            }
        })
        .build()
        .unwrap()
}

fn connect(server: McpServer) -> RunningService<RoleClient, ()> {
    let (server_side, client_side) = tokio::io::duplex(64 * 1024);
    let running =
        serve_directly::<RoleServer, _, _, _, _>(server, server_side, Some(().get_info()));
    std::mem::forget(running);
    let mut info = rmcp::model::InitializeResult::default();
    info.protocol_version = ProtocolVersion::V_2026_07_28;
    serve_directly::<RoleClient, _, _, _, _>((), client_side, Some(info.into()))
}

/// A payment as a host sends it: the arguments, no `_meta`.
fn call() -> CallToolRequestParams {
    let Value::Object(arguments) = json!({"invoice": "inv-7"}) else {
        panic!("an object")
    };
    CallToolRequestParams::new("pay").with_arguments(arguments)
}

fn meta(result: &CallToolResult, name: &str) -> Value {
    result
        .meta
        .as_ref()
        .and_then(|m| m.0.get(name).cloned())
        .unwrap_or(Value::Null)
}

/// The records a person is shown as needing attention (`idem list`'s default).
async fn needing_a_person(store: &Arc<dyn Store>) -> Vec<idem::record::Record> {
    store
        .list(ListFilter {
            tenant: Some(TENANT.into()),
            ..ListFilter::default()
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn an_unknown_under_a_window_key_is_reported_after_the_window_not_run_again() {
    let runs = Arc::new(AtomicUsize::new(0));
    let clock = Arc::new(ManualClock::new());
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new().with_clock(clock.clone()));
    let registry = Registry::builder().add(pay(&runs)).build().unwrap();
    let dispatcher = support::dispatcher::dispatcher(registry, store.clone());
    let server = McpServer::new(dispatcher, TENANT)
        .unwrap()
        .resend_window(Some(WINDOW));
    let client = connect(server);

    let first = client.call_tool(call()).await.unwrap();
    assert_eq!(first.is_error, Some(true), "{first:?}");
    assert_eq!(meta(&first, META_ERROR), json!("outcome_unknown"));
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // Long after the window, the host (or the model) sends the same call again.
    clock.advance(WINDOW * 10);
    let later = client.call_tool(call()).await.unwrap();
    assert_eq!(later.is_error, Some(true), "{later:?}");
    assert_eq!(
        meta(&later, META_ERROR),
        json!("outcome_unknown"),
        "the Unknown is reported, not run over: {later:?}"
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the payment did not run again"
    );
    let listed = needing_a_person(&store).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].state.kind(), StateKind::Unknown);

    // Once a person settles it (here: it did not happen, so the record is released), the
    // same call runs again.
    assert!(store.force_release(&listed[0].key).await.unwrap());
    let settled = client.call_tool(call()).await.unwrap();
    assert_ne!(settled.is_error, Some(true), "{settled:?}");
    assert_eq!(meta(&settled, META_DEDUPLICATED), json!(false));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert!(needing_a_person(&store).await.is_empty());
}
