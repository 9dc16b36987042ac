//! MCP clients that send no key, as every mainstream host does: the re-send window keys
//! their calls, a tool may let the model give a key, and a bad key from the model is a
//! clear error result that records nothing. Driven by rmcp's own client, in process.

#![cfg(feature = "mcp")]

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem::mcp::keys::{KeySettingError, MODEL_KEY_PARAMETER, ResendScope};
use idem::mcp::{META_DEDUPLICATED, McpServer};
use idem::prelude::*;
use idem::{MemoryStore, Store, ToolDef, store::ManualClock};
use rmcp::model::{CallToolRequestParams, CallToolResult, ProtocolVersion};
use rmcp::service::{RunningService, serve_directly};
use rmcp::{ClientHandler, RoleClient, RoleServer};
use serde_json::{Value, json};

/// Every argument list the `append` tool ran with.
type Ran = Arc<Mutex<Vec<Value>>>;

fn append(ran: &Ran) -> ToolDef {
    let ran = ran.clone();
    ToolDef::builder("append", ToolClass::NonIdempotentWrite)
        .description("Append a line: twice is two lines.")
        .input_schema(json!({
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
            "additionalProperties": false
        }))
        .handler(move |_: ToolContext, args: Value| {
            let ran = ran.clone();
            async move {
                ran.lock().unwrap().push(args.clone());
                Ok::<_, ToolError>(json!({"appended": args["text"]}))
            }
        })
        .build()
        .unwrap()
}

/// A server over `append` on `store`; each is a new connection.
fn server(ran: &Ran, store: Arc<dyn Store>) -> McpServer {
    let registry = Registry::builder().add(append(ran)).build().unwrap();
    McpServer::new(
        support::dispatcher::dispatcher(registry, store),
        "tenant-keys",
    )
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

/// A call as a host sends it: the arguments, no `_meta`.
fn plain(arguments: Value) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        panic!("an object")
    };
    CallToolRequestParams::new("append").with_arguments(arguments)
}

fn deduplicated(result: &CallToolResult) -> Option<bool> {
    result
        .meta
        .as_ref()
        .and_then(|m| m.0.get(META_DEDUPLICATED))
        .and_then(Value::as_bool)
}

#[tokio::test]
async fn a_re_issued_call_without_a_key_runs_once() {
    let ran: Ran = Arc::default();
    let clock = Arc::new(ManualClock::new());
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new().with_clock(clock.clone()));
    let client = connect(server(&ran, store.clone()));
    let first = client.call_tool(plain(json!({"text": "a"}))).await.unwrap();
    assert_ne!(first.is_error, Some(true), "{first:?}");
    assert_eq!(deduplicated(&first), Some(false));
    // The client lost the answer and sends the call again, with a new request id.
    let again = client.call_tool(plain(json!({"text": "a"}))).await.unwrap();
    assert_eq!(deduplicated(&again), Some(true));
    assert_eq!(again.structured_content, first.structured_content);
    assert_eq!(ran.lock().unwrap().len(), 1);
    // After the window, the same call is a new one.
    clock.advance(idem::mcp::keys::DEFAULT_RESEND_WINDOW + Duration::from_secs(1));
    let later = client.call_tool(plain(json!({"text": "a"}))).await.unwrap();
    assert_eq!(deduplicated(&later), Some(false));
    assert_eq!(ran.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn another_session_is_caught_only_with_the_tenant_scope() {
    let ran: Ran = Arc::default();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let one = connect(server(&ran, store.clone()));
    let two = connect(server(&ran, store.clone()));
    one.call_tool(plain(json!({"text": "b"}))).await.unwrap();
    let other = two.call_tool(plain(json!({"text": "b"}))).await.unwrap();
    assert_eq!(
        deduplicated(&other),
        Some(false),
        "another session, another call"
    );
    assert_eq!(ran.lock().unwrap().len(), 2);

    let tenant_wide = |ran: &Ran| server(ran, store.clone()).resend_scope(ResendScope::Tenant);
    let three = connect(tenant_wide(&ran));
    let four = connect(tenant_wide(&ran));
    three.call_tool(plain(json!({"text": "c"}))).await.unwrap();
    let reconnected = four.call_tool(plain(json!({"text": "c"}))).await.unwrap();
    assert_eq!(
        deduplicated(&reconnected),
        Some(true),
        "caught after a reconnect"
    );
    assert_eq!(ran.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn the_model_may_give_a_key_which_the_tool_never_sees() {
    let ran: Ran = Arc::default();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = server(&ran, store)
        .tool_resend_window("append", None)
        .unwrap()
        .model_key("append")
        .unwrap();
    let client = connect(server);
    let listed = client.list_tools(None).await.unwrap().tools;
    let schema = &listed[0].input_schema;
    assert_eq!(
        schema["properties"][MODEL_KEY_PARAMETER]["type"],
        json!("string")
    );
    assert!(
        schema["properties"][MODEL_KEY_PARAMETER]["description"]
            .as_str()
            .unwrap()
            .contains("reuse the same id"),
        "{schema:?}"
    );
    let required = schema["required"].as_array().unwrap();
    assert!(!required.contains(&json!(MODEL_KEY_PARAMETER)), "optional");

    let keyed = |text: &str, key: Value| plain(json!({"text": text, MODEL_KEY_PARAMETER: key}));
    let first = client.call_tool(keyed("x", json!("act-1"))).await.unwrap();
    assert_ne!(first.is_error, Some(true), "{first:?}");
    let retry = client.call_tool(keyed("x", json!("act-1"))).await.unwrap();
    assert_eq!(deduplicated(&retry), Some(true));
    let second = client.call_tool(keyed("x", json!("act-2"))).await.unwrap();
    assert_eq!(
        deduplicated(&second),
        Some(false),
        "a new id is a new action"
    );
    assert_eq!(
        *ran.lock().unwrap(),
        [json!({"text": "x"}), json!({"text": "x"})],
        "the tool never sees the key"
    );
    // Bad keys are error results naming what is wrong; nothing runs or is recorded.
    for (bad, says) in [
        (json!(""), "is empty"),
        (json!("k".repeat(201)), "over the limit"),
        (json!(42), "must be a string"),
    ] {
        let refused = client.call_tool(keyed("y", bad)).await.unwrap();
        assert_eq!(refused.is_error, Some(true));
        let text = format!("{:?}", refused.content);
        assert!(
            text.contains(says) && text.contains(MODEL_KEY_PARAMETER),
            "{text}"
        );
    }
    // With the window off and no key given, the call is refused naming the settings.
    let bare = client.call_tool(plain(json!({"text": "z"}))).await.unwrap();
    assert_eq!(bare.is_error, Some(true));
    assert!(format!("{:?}", bare.content).contains("model_key"));
    assert_eq!(ran.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn key_settings_name_a_served_tool_that_records() {
    let ran: Ran = Arc::default();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let err = server(&ran, store.clone())
        .model_key("apend")
        .err()
        .unwrap();
    assert_eq!(
        err,
        KeySettingError::UnknownTool {
            tool: "apend".into()
        }
    );
    let err = server(&ran, store)
        .tool_resend_window("nope", None)
        .err()
        .unwrap();
    assert!(err.to_string().contains("no tool `nope`"), "{err}");
}

/// A client of the 2026-07-28 revision over Streamable HTTP has no session (the revision
/// removed them, and rmcp builds a server per request): its re-issued call is caught by the
/// tenant, not lost to a scope of one request.
#[tokio::test]
async fn a_sessionless_http_client_is_scoped_by_its_tenant() {
    let ran: Ran = Arc::default();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let router = axum::Router::new().nest_service("/mcp", server(&ran, store).http_service(&[]));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    let call = |id: u32| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "append", "arguments": {"text": "a"},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "0"}
        }}})
    };
    let mut answers = Vec::new();
    for id in [1, 2] {
        let answer = reqwest::Client::new()
            .post(&url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "append")
            .json(&call(id))
            .send()
            .await
            .unwrap();
        let status = answer.status();
        let text = answer.text().await.unwrap();
        assert_eq!(status, 200, "{text}");
        answers.push(text);
    }
    assert!(
        answers[0].contains("\"io.idem/deduplicated\":false"),
        "{}",
        answers[0]
    );
    assert!(
        answers[1].contains("\"io.idem/deduplicated\":true"),
        "{}",
        answers[1]
    );
    assert_eq!(ran.lock().unwrap().len(), 1);
}

/// A call carrying `key` in `_meta` under each of `names`.
fn keyed(arguments: Value, names: &[(&str, &str)]) -> CallToolRequestParams {
    let mut params = plain(arguments);
    let mut meta = rmcp::model::MetaObject::new();
    for (name, key) in names {
        meta.insert((*name).into(), Value::from(*key));
    }
    params.meta = Some(rmcp::model::RequestMetaObject::from(meta));
    params
}

/// Third-party MCP code sends its key as `_meta["io.modelcontextprotocol/idempotencyKey"]`
/// or `_meta.idempotencyKey`: read, in a documented order after idem's own name, so a re-send
/// long after the re-send window is still the same call; two names giving different keys
/// are refused before anything runs.
#[tokio::test]
async fn a_key_under_the_names_in_use_is_read_in_order() {
    use idem::mcp::{META_BARE_KEY, META_KEY, META_KEY_NAMES, META_MCP_KEY};
    assert_eq!(META_KEY_NAMES, [META_KEY, META_MCP_KEY, META_BARE_KEY]);
    let ran: Ran = Arc::default();
    let clock = Arc::new(ManualClock::new());
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new().with_clock(clock.clone()));
    let client = connect(server(&ran, store.clone()));
    let past_the_window = idem::mcp::keys::DEFAULT_RESEND_WINDOW + Duration::from_secs(1);
    for (name, key, text) in [
        (META_MCP_KEY, "mcp-key-1", "a"),
        (META_BARE_KEY, "bare-key-1", "b"),
    ] {
        let first = client
            .call_tool(keyed(json!({"text": text}), &[(name, key)]))
            .await
            .unwrap();
        assert_eq!(deduplicated(&first), Some(false), "{name}: {first:?}");
        clock.advance(past_the_window);
        let again = client
            .call_tool(keyed(json!({"text": text}), &[(name, key)]))
            .await
            .unwrap();
        assert_eq!(
            deduplicated(&again),
            Some(true),
            "{name}: the key, not the window"
        );
    }
    assert_eq!(ran.lock().unwrap().len(), 2);

    // idem's own name is read first; another name agreeing with it changes nothing.
    let both = [(META_KEY, "mcp-key-1"), (META_MCP_KEY, "mcp-key-1")];
    let same = client
        .call_tool(keyed(json!({"text": "a"}), &both))
        .await
        .unwrap();
    assert_eq!(deduplicated(&same), Some(true));
    // Two names, two keys: refused, nothing runs.
    let differ = [(META_MCP_KEY, "mcp-key-1"), (META_BARE_KEY, "bare-key-1")];
    let refused = client
        .call_tool(keyed(json!({"text": "c"}), &differ))
        .await
        .unwrap_err();
    let said = refused.to_string();
    assert!(
        said.contains(META_MCP_KEY) && said.contains(META_BARE_KEY),
        "{said}"
    );
    assert_eq!(ran.lock().unwrap().len(), 2);
}
