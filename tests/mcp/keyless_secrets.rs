//! `keyless_idempotent_writes(true)` keys a call that brings no key by its arguments: by
//! their sealed fingerprint, so that a secret among them (a 4-digit PIN) cannot be recovered
//! from the stored record key or the downstream key by hashing guesses. Driven by rmcp's own
//! client, in process.

#![cfg(feature = "mcp")]

use crate::support;

use std::sync::{Arc, Mutex};

use idem::dispatch::DEFAULT_NAMESPACE;
use idem::key::{KeyMaterial, LogicalKey};
use idem::mcp::{META_DEDUPLICATED, META_DOWNSTREAM_KEY, McpServer};
use idem::prelude::*;
use idem::record::StateKind;
use idem::store::ListFilter;
use idem::{MemoryStore, SecretKey, Store, ToolDef};
use rmcp::model::{CallToolRequestParams, CallToolResult, ProtocolVersion};
use rmcp::service::{RunningService, serve_directly};
use rmcp::{ClientHandler, RoleClient, RoleServer};
use serde_json::{Value, json};

const TENANT: &str = "tenant-pin";

/// The PIN of every unlock below; the brute force must not find it.
const PIN: &str = "4821";

/// Every PIN the `unlock` tool ran with.
type Ran = Arc<Mutex<Vec<String>>>;

fn unlock(ran: &Ran) -> ToolDef {
    let ran = ran.clone();
    ToolDef::builder("unlock", ToolClass::IdempotentWrite)
        .description("Unlock a door with its PIN.")
        .input_schema(json!({
            "type": "object",
            "properties": {"door": {"type": "string"}, "pin": {"type": "string"}},
            "required": ["door", "pin"],
            "additionalProperties": false
        }))
        .secret("/pin")
        .handler(move |_: ToolContext, args: Value| {
            let ran = ran.clone();
            async move {
                ran.lock()
                    .unwrap()
                    .push(args["pin"].as_str().unwrap().to_owned());
                Ok::<_, ToolError>(json!({"unlocked": args["door"]}))
            }
        })
        .build()
        .unwrap()
}

/// A server that accepts keyless idempotent writes, over `unlock` on `store`.
fn server(ran: &Ran, store: Arc<dyn Store>) -> McpServer {
    let registry = Registry::builder().add(unlock(ran)).build().unwrap();
    let dispatcher = support::dispatcher::dispatcher(registry, store)
        .with_secret_key(SecretKey::new(*b"the dispatcher's secret, 32 byte").unwrap());
    McpServer::new(dispatcher, TENANT)
        .unwrap()
        .keyless_idempotent_writes(true)
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

fn arguments(pin: &str) -> Value {
    json!({"door": "front", "pin": pin})
}

/// An unlock as a host sends it: the arguments, no `_meta`.
fn call(pin: &str) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments(pin) else {
        panic!("an object")
    };
    CallToolRequestParams::new("unlock").with_arguments(arguments)
}

fn meta(result: &CallToolResult, name: &str) -> Value {
    result
        .meta
        .as_ref()
        .and_then(|m| m.0.get(name).cloned())
        .unwrap_or(Value::Null)
}

/// The keys a call of `unlock` with `arguments` gets from each way of hashing its raw
/// arguments an attacker could try: the plain hash `keyless_idempotent_writes` used, and the
/// re-send window's material over the tenant (its scope without a session).
fn keys_from_raw(arguments: &Value) -> Vec<(String, String)> {
    let fingerprint = idem::key::Fingerprint::of(arguments).to_hex();
    let materials = [
        KeyMaterial::Explicit {
            key: format!("arguments:{fingerprint}"),
        },
        KeyMaterial::Resend {
            scope: String::new(),
            fingerprint,
        },
    ];
    materials
        .iter()
        .map(|material| {
            let (record, downstream) =
                LogicalKey::derive(DEFAULT_NAMESPACE, TENANT, "unlock", material);
            (record.as_str().to_owned(), downstream.as_str().to_owned())
        })
        .collect()
}

#[tokio::test]
async fn a_keyless_calls_key_does_not_give_away_its_secret() {
    let ran: Ran = Arc::default();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let client = connect(server(&ran, store.clone()));

    let first = client.call_tool(call(PIN)).await.unwrap();
    assert_ne!(first.is_error, Some(true), "{first:?}");
    assert_eq!(meta(&first, META_DEDUPLICATED), json!(false));
    let downstream = meta(&first, META_DOWNSTREAM_KEY);
    let downstream = downstream.as_str().expect("a downstream key").to_owned();
    let completed = store
        .list(ListFilter {
            state: Some(StateKind::Completed),
            tenant: Some(TENANT.into()),
            ..ListFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(completed.len(), 1, "{completed:?}");
    let record = completed[0].key.as_str().to_owned();
    let stored = completed[0].arguments.as_deref().unwrap_or_default();
    assert!(
        !stored.contains(PIN),
        "the PIN is sealed in the record: {stored}"
    );

    // Whoever reads the store (or sees the downstream key) hashes every 4-digit guess.
    let recovered: Vec<String> = (0..10_000)
        .map(|n| format!("{n:04}"))
        .filter(|guess| {
            keys_from_raw(&arguments(guess))
                .iter()
                .any(|(r, d)| *r == record || *d == downstream)
        })
        .collect();
    assert_eq!(
        recovered,
        Vec::<String>::new(),
        "the record key or the downstream key was re-derived from the raw arguments"
    );

    // Still one call per arguments: the same unlock replays, another PIN is another call.
    let again = client.call_tool(call(PIN)).await.unwrap();
    assert_eq!(meta(&again, META_DEDUPLICATED), json!(true), "{again:?}");
    assert_eq!(meta(&again, META_DOWNSTREAM_KEY), json!(downstream));
    let other = client.call_tool(call("0000")).await.unwrap();
    assert_ne!(other.is_error, Some(true), "{other:?}");
    assert_eq!(meta(&other, META_DEDUPLICATED), json!(false));
    assert_ne!(meta(&other, META_DOWNSTREAM_KEY), json!(downstream));
    assert_eq!(*ran.lock().unwrap(), [PIN, "0000"]);
}

/// A tool without secrets keeps the keys `keyless_idempotent_writes` stored before the
/// dispatcher made them: its sealed arguments are its arguments.
#[tokio::test]
async fn a_keyless_call_without_secrets_keeps_its_stored_key() {
    let tool = ToolDef::builder("set_status", ToolClass::IdempotentWrite)
        .description("Set a ticket's status.")
        .input_schema(json!({"type": "object", "properties": {"status": {"type": "string"}}}))
        .handler(|_: ToolContext, args: Value| async move {
            Ok::<_, ToolError>(json!({"status": args["status"]}))
        })
        .build()
        .unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let dispatcher = support::dispatcher::with_tool(tool, store.clone());
    let server = McpServer::new(dispatcher, TENANT)
        .unwrap()
        .keyless_idempotent_writes(true);
    let client = connect(server);
    let Value::Object(sent) = json!({"status": "open"}) else {
        panic!("an object")
    };
    let done = client
        .call_tool(CallToolRequestParams::new("set_status").with_arguments(sent.clone()))
        .await
        .unwrap();
    assert_ne!(done.is_error, Some(true), "{done:?}");
    let by_arguments = idem::key::Fingerprint::of(&Value::Object(sent)).to_hex();
    let (record, downstream) = LogicalKey::derive(
        DEFAULT_NAMESPACE,
        TENANT,
        "set_status",
        &KeyMaterial::Explicit {
            key: format!("arguments:{by_arguments}"),
        },
    );
    assert_eq!(meta(&done, META_DOWNSTREAM_KEY), json!(downstream.as_str()));
    let stored = store.get(&record).await.unwrap();
    assert!(stored.is_some(), "the record is under the key of before");
}
