//! The MCP server (feature `mcp`) driven by rmcp's own client, in process: what a client
//! lists, and what a call, a re-sent call and a refused call answer.
#![cfg(feature = "mcp")]

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use idem::mcp::{
    META_DEDUPLICATED, META_DOWNSTREAM_KEY, META_ERROR, META_KEY, META_RETRY_AFTER, McpServer,
};
use idem::prelude::*;
use idem::{Store, ToolDef};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ErrorCode, InitializeResult, JsonObject, MetaObject,
    ProtocolVersion, RequestMetaObject,
};
use rmcp::service::{RunningService, ServiceError, serve_directly};
use rmcp::{ClientHandler, RoleClient, RoleServer};
use serde_json::{Value, json};

fn tools(sent: &Arc<AtomicUsize>) -> Vec<ToolDef> {
    let counter = sent.clone();
    let send = ToolDef::builder("send_email", ToolClass::NonIdempotentWrite)
        .description("Send an email.")
        .input_schema(json!({
            "type": "object",
            "properties": {"to": {"type": "string"}},
            "required": ["to"]
        }))
        .handler(move |ctx: ToolContext, args: Value| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>(json!({"to": args["to"], "message_id": ctx.idempotency_key()}))
            }
        })
        .build()
        .unwrap();
    let weather = ToolDef::builder("get_weather", ToolClass::Read)
        .description("Read the weather.")
        .input_schema(json!({"type": "object"}))
        .handler(|_: ToolContext, _: Value| async { Ok::<_, ToolError>(json!("sunny")) })
        .build()
        .unwrap();
    let delete = ToolDef::builder("delete_account", ToolClass::Irreversible)
        .description("Delete an account.")
        .input_schema(json!({"type": "object"}))
        .handler(|_: ToolContext, _: Value| async { Ok::<_, ToolError>(json!("deleted")) })
        .build()
        .unwrap();
    let slow = ToolDef::builder("rebuild_index", ToolClass::IdempotentWrite)
        .description("Rebuild the search index (slow).")
        .input_schema(json!({"type": "object"}))
        .handler(|_: ToolContext, _: Value| async {
            tokio::time::sleep(std::time::Duration::from_secs(30)).await;
            Ok::<_, ToolError>(json!("rebuilt"))
        })
        .build()
        .unwrap();
    let status = ToolDef::builder("set_status", ToolClass::IdempotentWrite)
        .description("Set a ticket's status.")
        .input_schema(json!({"type": "object", "properties": {"status": {"type": "string"}}}))
        .handler(|ctx: ToolContext, args: Value| async move {
            Ok::<_, ToolError>(json!({"status": args["status"], "key": ctx.idempotency_key()}))
        })
        .build()
        .unwrap();
    vec![send, weather, delete, slow, status]
}

/// A client connected to a server over the tools, on a memory store.
fn connect(sent: &Arc<AtomicUsize>) -> RunningService<RoleClient, ()> {
    connect_to(sent, Arc::new(MemoryStore::new()))
}

/// A client connected to a server over the tools, on `store`.
fn connect_to(sent: &Arc<AtomicUsize>, store: Arc<dyn Store>) -> RunningService<RoleClient, ()> {
    let mut registry = Registry::builder();
    for tool in tools(sent) {
        registry = registry.add(tool);
    }
    let dispatcher = support::dispatcher::dispatcher(registry.build().unwrap(), store);
    let server = McpServer::new(dispatcher, "tenant-mcp").unwrap();
    connect_server(server)
}

/// A client connected to a server over the tools on a memory store, configured by `setup`.
fn connect_with(setup: fn(McpServer) -> McpServer) -> RunningService<RoleClient, ()> {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut registry = Registry::builder();
    for tool in tools(&Arc::new(AtomicUsize::new(0))) {
        registry = registry.add(tool);
    }
    let dispatcher = support::dispatcher::dispatcher(registry.build().unwrap(), store);
    connect_server(setup(McpServer::new(dispatcher, "tenant-mcp").unwrap()))
}

/// A client connected to `server` in process.
fn connect_server(server: McpServer) -> RunningService<RoleClient, ()> {
    let (server_side, client_side) = tokio::io::duplex(64 * 1024);
    let running =
        serve_directly::<RoleServer, _, _, _, _>(server, server_side, Some(().get_info()));
    std::mem::forget(running); // lives as long as the test's runtime
    let mut peer = InitializeResult::default();
    peer.protocol_version = ProtocolVersion::V_2026_07_28;
    serve_directly::<RoleClient, _, _, _, _>((), client_side, Some(peer.into()))
}

fn params(tool: &str, arguments: Value, key: Option<&str>) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        panic!("arguments are an object")
    };
    let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
    if let Some(key) = key {
        let mut meta = MetaObject::new();
        meta.insert(META_KEY.into(), Value::from(key));
        params.meta = Some(RequestMetaObject::from(meta));
    }
    params
}

fn meta_of(result: &CallToolResult) -> JsonObject {
    result.meta.clone().map(|m| m.0).unwrap_or_default()
}

#[tokio::test]
async fn tools_are_listed_in_order_with_their_annotations() {
    let client = connect(&Arc::new(AtomicUsize::new(0)));
    let listed = client.list_tools(None).await.unwrap().tools;
    let names: Vec<_> = listed.iter().map(|t| t.name.to_string()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "a deterministic order");
    assert_eq!(names.len(), 5);
    let send = listed.iter().find(|t| t.name == "send_email").unwrap();
    // All four hints are stated, from the class (MCP's defaults are the pessimistic ones).
    let hints = send.annotations.clone().expect("annotations");
    let class = ToolClass::NonIdempotentWrite.hints();
    assert_eq!(hints.read_only_hint, Some(class.read_only));
    assert_eq!(hints.destructive_hint, Some(class.destructive));
    assert_eq!(hints.idempotent_hint, Some(false));
    assert_eq!(hints.open_world_hint, Some(false));
    assert_eq!(send.input_schema["required"], json!(["to"]));
    let read = listed.iter().find(|t| t.name == "get_weather").unwrap();
    assert_eq!(read.annotations.clone().unwrap().read_only_hint, Some(true));
}

#[tokio::test]
async fn a_re_sent_call_is_replayed_with_the_deduplicated_flag() {
    let sent = Arc::new(AtomicUsize::new(0));
    let client = connect(&sent);
    let call = || params("send_email", json!({"to": "a@b.c"}), Some("mcp-key-1"));
    let first = client.call_tool(call()).await.unwrap();
    assert_ne!(first.is_error, Some(true), "{first:?}");
    assert_eq!(meta_of(&first)[META_DEDUPLICATED], json!(false));
    let structured = first.structured_content.clone().unwrap();
    assert_eq!(structured["to"], "a@b.c");
    assert_eq!(
        structured["message_id"],
        meta_of(&first)[META_DOWNSTREAM_KEY],
        "the tool got the downstream key the result names"
    );
    // The stream broke; the client re-sends the call with a new request id.
    let again = client.call_tool(call()).await.unwrap();
    assert_eq!(meta_of(&again)[META_DEDUPLICATED], json!(true));
    assert_eq!(again.structured_content, first.structured_content);
    assert_eq!(sent.load(Ordering::SeqCst), 1, "sent once");
}

/// A read is never recorded, so never a replay: its result says so by carrying no
/// `io.idem/deduplicated`, and only the downstream key when the call gave key material.
#[tokio::test]
async fn a_read_result_carries_only_what_it_can_say() {
    let client = connect(&Arc::new(AtomicUsize::new(0)));
    let plain = client
        .call_tool(params("get_weather", json!({}), None))
        .await
        .unwrap();
    assert_eq!(plain.structured_content, Some(json!({"result": "sunny"})));
    assert_eq!(plain.meta, None, "nothing to say: {plain:?}");
    let keyed = client
        .call_tool(params("get_weather", json!({}), Some("read-key")))
        .await
        .unwrap();
    let meta = meta_of(&keyed);
    assert_eq!(meta.len(), 1, "{meta:?}");
    assert!(meta[META_DOWNSTREAM_KEY].as_str().is_some(), "{meta:?}");
}

#[tokio::test]
async fn a_write_without_a_key_is_refused_with_how_to_pass_one() {
    // With the re-send window off (it is on by default), a call without key material has no
    // key at all.
    let sent = Arc::new(AtomicUsize::new(0));
    let mut registry = Registry::builder();
    for tool in tools(&sent) {
        registry = registry.add(tool);
    }
    let dispatcher =
        support::dispatcher::dispatcher(registry.build().unwrap(), Arc::new(MemoryStore::new()));
    let server = McpServer::new(dispatcher, "tenant-mcp")
        .unwrap()
        .resend_window(None);
    let client = connect_server(server);
    let refused = client
        .call_tool(params("send_email", json!({"to": "a@b.c"}), None))
        .await
        .unwrap();
    assert_eq!(refused.is_error, Some(true));
    let text = format!("{:?}", refused.content);
    assert!(text.contains(META_KEY), "{text}");
    assert!(text.contains("resend_window"), "names the settings: {text}");
    assert_eq!(meta_of(&refused)["io.idem/error"], json!("missing_key"));
    assert_eq!(sent.load(Ordering::SeqCst), 0);
    // A read needs no key; its output, not an object, comes wrapped.
    let read = client
        .call_tool(params("get_weather", json!({}), None))
        .await
        .unwrap();
    assert_eq!(read.structured_content, Some(json!({"result": "sunny"})));
}

#[tokio::test]
async fn what_the_model_can_act_on_is_an_error_result_and_an_unknown_tool_a_protocol_error() {
    let client = connect(&Arc::new(AtomicUsize::new(0)));
    let invalid = client
        .call_tool(params("send_email", json!({"to": 42}), Some("k-invalid")))
        .await
        .unwrap();
    assert_eq!(invalid.is_error, Some(true));
    assert!(
        format!("{:?}", invalid.content).contains("/to"),
        "{invalid:?}"
    );
    let pending = client
        .call_tool(params("delete_account", json!({}), Some("k-delete")))
        .await
        .unwrap();
    assert_eq!(pending.is_error, Some(true));
    assert_eq!(
        meta_of(&pending)["io.idem/error"],
        json!("approval_required")
    );
    match client
        .call_tool(params("send_mail", json!({}), Some("k-unknown")))
        .await
    {
        Err(ServiceError::McpError(e)) => {
            assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
            assert!(e.message.contains("did you mean `send_email`"), "{e:?}");
        }
        other => panic!("expected a protocol error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_cancelled_call_leaves_no_live_claim() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let client = connect_to(&Arc::new(AtomicUsize::new(0)), store.clone());
    // The client gives up: dropping its request sends `notifications/cancelled`.
    let call = client.call_tool(params("rebuild_index", json!({}), Some("k-slow")));
    let waited = tokio::time::timeout(std::time::Duration::from_millis(300), call).await;
    assert!(waited.is_err(), "the tool was still running");
    // The dispatch is dropped and its claim given back (an idempotent write's is released),
    // so no record stays held by a dispatch that is gone.
    let mut held = usize::MAX;
    for _ in 0..200 {
        held = store
            .list(idem::store::ListFilter {
                state: Some(idem::record::StateKind::InProgress),
                ..idem::store::ListFilter::default()
            })
            .await
            .unwrap()
            .len();
        if held == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(held, 0, "no live claim is left behind");
}

#[tokio::test]
async fn a_server_that_authenticates_refuses_a_request_without_headers() {
    // Headers come only over HTTP (scripts/check_mcp.py drives that with bearer tokens):
    // a request without them acts for nobody.
    let client = connect_with(|s| s.authenticate(|_| Some("anyone".into())));
    for refused in [
        client.list_tools(None).await.map(|_| ()),
        client
            .call_tool(params("get_weather", json!({}), None))
            .await
            .map(|_| ()),
    ] {
        match refused {
            Err(ServiceError::McpError(e)) => {
                assert_eq!(e.code, ErrorCode::INVALID_REQUEST);
                assert!(e.message.contains("unauthenticated"), "{e:?}");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn keyless_idempotent_writes_are_keyed_by_their_arguments_when_allowed() {
    let strict = connect_with(|s| s.resend_window(None));
    let refused = strict
        .call_tool(params("set_status", json!({"status": "open"}), None))
        .await
        .unwrap();
    assert_eq!(refused.is_error, Some(true), "refused by default");
    let lenient = connect_with(|s| s.resend_window(None).keyless_idempotent_writes(true));
    let call = || params("set_status", json!({"status": "open"}), None);
    let first = lenient.call_tool(call()).await.unwrap();
    assert_ne!(first.is_error, Some(true), "{first:?}");
    let again = lenient.call_tool(call()).await.unwrap();
    assert_eq!(meta_of(&again)[META_DEDUPLICATED], json!(true));
    // Other writes still need a key.
    let send = lenient
        .call_tool(params("send_email", json!({"to": "a@b.c"}), None))
        .await
        .unwrap();
    assert_eq!(send.is_error, Some(true));
}

#[tokio::test]
async fn meta_of_the_wrong_type_is_a_protocol_error() {
    let client = connect(&Arc::new(AtomicUsize::new(0)));
    for (key, value) in [
        (META_KEY, json!(42)),
        (META_KEY, json!("")),
        ("io.idem/step", json!("one")),
    ] {
        let mut p = params("set_status", json!({"status": "open"}), None);
        let mut meta = MetaObject::new();
        meta.insert(key.into(), value.clone());
        p.meta = Some(RequestMetaObject::from(meta));
        match client.call_tool(p).await {
            Err(ServiceError::McpError(e)) => {
                assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
                assert!(e.message.contains(key), "{key}={value}: {e:?}");
            }
            other => panic!("{key}={value}: expected a protocol error, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn an_unknown_outcome_says_when_to_call_again_and_a_recorded_failure_is_marked_replayed() {
    let timing_out = ToolDef::builder("charge_card", ToolClass::NonIdempotentWrite)
        .description("Charge a card.")
        .input_schema(json!({"type": "object"}))
        .handler(|_: ToolContext, _: Value| async {
            Err::<Value, _>(ToolError::ambiguous("the processor timed out"))
        })
        .verify(|_: ToolContext, _: Value| async { Ok(idem::Verified::NotApplied) })
        .build()
        .unwrap();
    let declining = ToolDef::builder("refund", ToolClass::NonIdempotentWrite)
        .description("Refund a charge.")
        .input_schema(json!({"type": "object"}))
        .handler(|_: ToolContext, _: Value| async {
            Err::<Value, _>(ToolError::terminal("the charge was already refunded"))
        })
        .build()
        .unwrap();
    let registry = Registry::builder()
        .add(timing_out)
        .add(declining)
        .build()
        .unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let dispatcher = support::dispatcher::dispatcher(registry, store);
    let client = connect_server(McpServer::new(dispatcher, "tenant-mcp").unwrap());

    let unknown = client
        .call_tool(params("charge_card", json!({}), Some("k-charge")))
        .await
        .unwrap();
    assert_eq!(unknown.is_error, Some(true));
    let meta = meta_of(&unknown);
    assert_eq!(meta[META_ERROR], json!("outcome_unknown"));
    let at = meta[META_RETRY_AFTER].as_str().expect("when to call again");
    assert!(format!("{:?}", unknown.content).contains(at), "{unknown:?}");

    for deduplicated in [false, true] {
        let refused = client
            .call_tool(params("refund", json!({}), Some("k-refund")))
            .await
            .unwrap();
        assert_eq!(refused.is_error, Some(true));
        assert!(format!("{:?}", refused.content).contains("already refunded"));
        assert_eq!(meta_of(&refused)[META_DEDUPLICATED], json!(deduplicated));
    }
}
