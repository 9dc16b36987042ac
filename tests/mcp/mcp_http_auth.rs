//! MCP over Streamable HTTP authenticates every request before rmcp sees it (`initialize`,
//! the stream a `GET` resumes, `DELETE` included), and a session belongs to the principal
//! that opened it: another principal, or a request without credentials, is refused on it.
#![cfg(feature = "mcp")]

use crate::support;

use std::sync::Arc;

use idem::mcp::McpServer;
use idem::prelude::*;
use idem::{MemoryStore, ToolDef};
use serde_json::{Value, json};
use support::mcp_http::{initialize, request};

fn server() -> McpServer {
    let echo = ToolDef::builder("echo", ToolClass::Read)
        .description("Echo.")
        .input_schema(json!({"type": "object"}))
        .handler(|_: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
        .build()
        .unwrap();
    let registry = Registry::builder().add(echo).build().unwrap();
    let d = support::dispatcher::dispatcher(registry, Arc::new(MemoryStore::new()));
    McpServer::new(d, "nobody")
        .unwrap()
        .authenticate(
            |headers| match headers.get("authorization")?.to_str().ok()? {
                "Bearer token-acme" => Some("acme".to_owned()),
                "Bearer token-globex" => Some("globex".to_owned()),
                _ => None,
            },
        )
}

async fn start() -> String {
    let router = axum::Router::new().nest_service("/mcp", server().http_service(&[]));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://127.0.0.1:{port}/mcp")
}

/// Open a session as `token`: its id.
async fn open(url: &str, token: &str) -> String {
    let opened = request(reqwest::Method::POST, url, Some(token), None)
        .json(&initialize())
        .send()
        .await
        .unwrap();
    assert_eq!(opened.status(), 200);
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let sent = request(reqwest::Method::POST, url, Some(token), Some(&session))
        .json(&initialized)
        .send()
        .await
        .unwrap();
    assert!(sent.status().is_success(), "{}", sent.status());
    session
}

fn list() -> Value {
    json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}})
}

#[tokio::test]
async fn a_request_without_credentials_opens_no_session() {
    let url = start().await;
    let refused = request(reqwest::Method::POST, &url, None, None)
        .json(&initialize())
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    assert!(refused.headers().get("mcp-session-id").is_none());
    let wrong = request(reqwest::Method::POST, &url, Some("token-stolen"), None)
        .json(&initialize())
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let body = wrong.text().await.unwrap();
    assert!(
        !body.contains("token-stolen"),
        "never echoes a credential: {body}"
    );
}

#[tokio::test]
async fn a_session_belongs_to_the_principal_that_opened_it() {
    let url = start().await;
    let session = open(&url, "token-acme").await;
    // Another principal, and nobody, on acme's session: refused, whatever the method.
    for (token, status) in [(Some("token-globex"), 404), (None, 401)] {
        let listed = request(reqwest::Method::POST, &url, token, Some(&session))
            .json(&list())
            .send()
            .await
            .unwrap();
        assert_eq!(listed.status(), status, "tools/list as {token:?}");
        let resumed = request(reqwest::Method::GET, &url, token, Some(&session))
            .send()
            .await
            .unwrap();
        assert_eq!(resumed.status(), status, "GET as {token:?}");
        let ended = request(reqwest::Method::DELETE, &url, token, Some(&session))
            .send()
            .await
            .unwrap();
        assert_eq!(ended.status(), status, "DELETE as {token:?}");
    }
    // The session is still acme's, and works.
    let listed = request(
        reqwest::Method::POST,
        &url,
        Some("token-acme"),
        Some(&session),
    )
    .json(&list())
    .send()
    .await
    .unwrap();
    assert_eq!(listed.status(), 200);
    let body = listed.text().await.unwrap();
    assert!(body.contains("echo"), "{body}");
    // Its owner ends it.
    let ended = request(
        reqwest::Method::DELETE,
        &url,
        Some("token-acme"),
        Some(&session),
    )
    .send()
    .await
    .unwrap();
    assert!(ended.status().is_success(), "{}", ended.status());
}
