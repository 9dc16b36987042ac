//! What the MCP server (feature `mcp`) does with what a broken client sends: every line of
//! its stdio framing that is not a message it can read is answered with a JSON-RPC error,
//! and an HTTP body rmcp refuses is answered with one; the server serves the next request,
//! and the call in it runs.
#![cfg(feature = "mcp")]

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem::ToolDef;
use idem::mcp::McpServer;
use idem::prelude::*;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};

/// A server with one idempotent write, `set_status`, counting its executions.
fn server(runs: &Arc<AtomicUsize>) -> McpServer {
    let counter = runs.clone();
    let status = ToolDef::builder("set_status", ToolClass::IdempotentWrite)
        .description("Set a ticket's status.")
        .input_schema(json!({"type": "object", "properties": {"status": {"type": "string"}}}))
        .handler(move |_: ToolContext, args: Value| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>(json!({"status": args["status"]}))
            }
        })
        .build()
        .unwrap();
    let store = Arc::new(MemoryStore::new());
    McpServer::new(
        support::dispatcher::with_tool(status, store),
        "tenant-bad-input",
    )
    .unwrap()
}

/// The 2026-07-28 revision has no handshake: every request carries its version in `_meta`.
fn request(id: u64, method: &str, mut params: Value) -> String {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.idem/idempotency-key": "k-after-garbage",
    });
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// The next line the server writes, as JSON.
async fn next_answer<R: tokio::io::AsyncBufRead + Unpin>(answers: &mut Lines<R>) -> Value {
    let line = tokio::time::timeout(Duration::from_secs(10), answers.next_line())
        .await
        .expect("an answer within 10 s")
        .unwrap()
        .expect("the server is still there");
    serde_json::from_str(&line).unwrap()
}

#[tokio::test]
async fn every_line_that_is_not_a_message_is_answered_and_the_next_call_runs() {
    let runs = Arc::new(AtomicUsize::new(0));
    let (client, server_side) = tokio::io::duplex(1 << 16);
    let (read, write) = tokio::io::split(server_side);
    tokio::spawn(server(&runs).serve_on(read, write));
    let (client_read, mut client_write) = tokio::io::split(client);
    let mut answers = BufReader::new(client_read).lines();
    let lines = [
        "this is not json".to_owned(),
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"x"}"#.to_owned(),
        request(2, "tools/call", json!({"name": 5})),
        request(
            3,
            "tools/call",
            json!({"name": "set_status", "arguments": {"status": "open"}}),
        ),
    ];
    for line in &lines {
        client_write
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }
    // (code, id) of each answer, in the order of the lines (the first three are answered by
    // the transport as it reads them, before the fourth reaches the server).
    let expected = [
        (-32700, Value::Null),
        (-32600, json!(1)),
        (-32602, json!(2)),
    ];
    for (code, id) in expected {
        let got = next_answer(&mut answers).await;
        assert_eq!(got["error"]["code"], code, "{got}");
        assert_eq!(got.get("id"), Some(&id), "{got}");
    }
    let ran = next_answer(&mut answers).await;
    assert_eq!(ran["id"], 3, "{ran}");
    assert_eq!(
        ran["result"]["structuredContent"]["status"], "open",
        "{ran}"
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the call after the garbage ran, once"
    );
}

#[tokio::test]
async fn an_http_body_rmcp_refuses_is_answered_with_a_json_rpc_error() {
    let runs = Arc::new(AtomicUsize::new(0));
    let router = axum::Router::new().nest_service("/mcp", server(&runs).http_service(&[]));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    // A body one byte over rmcp's 4 MiB limit (so the server has read all of it when it
    // refuses, and closes no socket with bytes unread), and one that is not JSON.
    for (body, says) in [
        (format!("\"{}\"", "x".repeat((4 << 20) - 1)), "4194304"),
        ("this is not json".to_owned(), "deserialize"),
    ] {
        let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n",
            body.len()
        );
        socket.write_all(head.as_bytes()).await.unwrap();
        socket.write_all(body.as_bytes()).await.unwrap();
        let mut response = Vec::new();
        socket.read_to_end(&mut response).await.unwrap();
        let response = String::from_utf8_lossy(&response);
        let (head, json) = response.split_once("\r\n\r\n").expect("a whole response");
        assert!(head.starts_with("HTTP/1.1 4"), "{head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: application/json"),
            "{head}"
        );
        let error: Value = serde_json::from_str(json).expect(json);
        assert_eq!(error["error"]["code"], -32600, "{error}");
        assert!(
            error["error"]["message"].as_str().unwrap().contains(says),
            "{error}"
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}
