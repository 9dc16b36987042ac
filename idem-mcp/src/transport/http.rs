//! rmcp's Streamable HTTP service, with every request authenticated and refusals a client
//! can read.
//!
//! For a server that authenticates ([`McpServer::authenticate`]), every request is
//! authenticated here, before rmcp sees it: `initialize`, `tools/*`, the stream a `GET`
//! resumes and the `DELETE` that ends a session alike (401 without credentials it accepts).
//! A session belongs to the principal (the tenant its credentials map to) that opened it: a
//! request of another principal on it is answered as rmcp answers an unknown session (404),
//! so it can neither read that session's results nor end it.
//!
//! rmcp refuses some POSTs before it reads a JSON-RPC message out of them (a body over its
//! 4 MiB limit: 413; a body that is not a JSON-RPC message: 415; a bad header: 400) with a
//! plain-text body. A client reads a JSON-RPC error from the body of a failed POST when
//! there is one (the official Python client does, and gives it to the caller of the request)
//! and otherwise says only that the server failed. [`McpHttpService`] puts rmcp's words in
//! such an error, under the same status.

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use rmcp::model::ErrorData;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{SessionId, SessionManager};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::McpServer;

type Inner = StreamableHttpService<McpServer, LocalSessionManager>;
type Response = http::Response<BoxBody<Bytes, Infallible>>;

/// An [`McpServer`] as a Streamable HTTP service (a tower `Service`, made by
/// [`McpServer::http_service`]): rmcp's, except that a POST rmcp refuses before reading a
/// message (a body over 4 MiB, a body that is not JSON-RPC) is answered with a JSON-RPC
/// error (`-32600`, rmcp's words as its message) instead of plain text.
///
/// ```no_run
/// # async fn run(server: idem::mcp::McpServer) -> Result<(), Box<dyn std::error::Error>> {
/// let service: idem::mcp::transport::McpHttpService = server.http_service(&[]);
/// # let _ = service; Ok(()) }
/// ```
impl McpServer {
    /// The server as a Streamable HTTP service (rmcp's, a tower `Service`): mount it in a
    /// router, e.g. axum's `Router::new().nest_service("/mcp", server.http_service())`. It
    /// accepts requests for `localhost` only unless `hosts` names others (what the `Host`
    /// header may say: a guard against DNS rebinding). A POST rmcp refuses before reading a
    /// message (a body over 4 MiB, say) is answered with a JSON-RPC error the client can show.
    pub fn http_service(self, hosts: &[&str]) -> McpHttpService {
        McpHttpService::new(self, hosts)
    }
}

/// The server as a tower service for Streamable HTTP ([`McpServer::http_service`]): mount it
/// at a path of an axum router (or any server of tower services).
#[derive(Clone)]
pub struct McpHttpService {
    inner: Inner,
    /// For a server that authenticates: who may use which session.
    guard: Option<Arc<Guard>>,
}

/// Every request authenticated before rmcp sees it, and each session kept to the principal
/// that opened it.
struct Guard {
    who: crate::Authenticate,
    /// Session id → the principal (tenant) that opened it.
    owners: Mutex<HashMap<String, String>>,
    /// rmcp's sessions, asked which still exist when `owners` grows past `prune_at`.
    sessions: Arc<LocalSessionManager>,
    prune_at: Mutex<usize>,
}

/// How many sessions' owners are kept before those rmcp no longer has are dropped.
const FIRST_PRUNE: usize = 1024;

/// What the guard says of a request.
enum Admitted {
    /// Authenticated, and the session (if any) is its principal's.
    Yes {
        principal: String,
        session: Option<String>,
    },
    /// Refused, with this answer.
    No(Response),
}

impl Guard {
    fn admit(&self, headers: &http::HeaderMap) -> Admitted {
        let Some(principal) = (self.who)(headers) else {
            return Admitted::No(refusal(
                http::StatusCode::UNAUTHORIZED,
                "unauthenticated: this server needs credentials it accepts (e.g. `Authorization: Bearer <token>`) on every request",
            ));
        };
        let session = headers
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if let Some(id) = &session {
            let owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
            if owners.get(id).is_some_and(|owner| *owner != principal) {
                // Said as rmcp says an unknown session: another's is not revealed.
                return Admitted::No(refusal(
                    http::StatusCode::NOT_FOUND,
                    "no such session for these credentials: open one with `initialize`",
                ));
            }
        }
        Admitted::Yes { principal, session }
    }

    /// After rmcp answered: a session it opened is the principal's; one it ended is gone.
    /// Whether the owners kept have grown past the next pruning.
    fn answered(&self, response: &Response, principal: String, ended: Option<String>) -> bool {
        let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(opened) = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
        {
            owners.entry(opened.to_owned()).or_insert(principal);
        }
        if let Some(ended) = ended
            && response.status().is_success()
        {
            owners.remove(&ended);
        }
        owners.len() > *self.prune_at.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drop the owners of sessions rmcp no longer has (ended by their idle timeout): only
    /// those, so that a live session is never left without its owner.
    async fn prune(&self) {
        let ids: Vec<String> = {
            let owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
            owners.keys().cloned().collect()
        };
        let mut gone = Vec::new();
        for id in ids {
            let session: SessionId = Arc::from(id.as_str());
            if !self.sessions.has_session(&session).await.unwrap_or(true) {
                gone.push(id);
            }
        }
        let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        for id in gone {
            owners.remove(&id);
        }
        *self.prune_at.lock().unwrap_or_else(|e| e.into_inner()) =
            FIRST_PRUNE.max(owners.len() * 2);
    }
}

/// The header of a Streamable HTTP session's id.
const SESSION_HEADER: &str = "mcp-session-id";

/// A refusal before rmcp: a JSON-RPC error (no `id`: none was read) under `status`.
fn refusal(status: http::StatusCode, message: &str) -> Response {
    let error = super::error_response(ErrorData::invalid_request(message.to_owned(), None), None);
    http::Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(error.to_string().into_bytes())).boxed())
        .unwrap_or_else(|_| http::Response::new(Full::new(Bytes::new()).boxed()))
}

impl McpHttpService {
    /// `server` over HTTP, accepting requests for `localhost` and `hosts`.
    pub(crate) fn new(server: McpServer, hosts: &[&str]) -> Self {
        let mut config = StreamableHttpServerConfig::default();
        if !hosts.is_empty() {
            config = config.with_allowed_hosts(hosts.iter().map(|h| (*h).to_owned()));
        }
        let sessions = Arc::new(LocalSessionManager::default());
        let guard = server.authenticate.clone().map(|who| {
            Arc::new(Guard {
                who,
                owners: Mutex::default(),
                sessions: sessions.clone(),
                prune_at: Mutex::new(FIRST_PRUNE),
            })
        });
        let inner = StreamableHttpService::new(
            // One server per session: its own re-send scope when a client sends no session.
            move || Ok(server.clone().for_connection()),
            sessions,
            config,
        );
        McpHttpService { inner, guard }
    }
}

impl<B> tower_service::Service<http::Request<B>> for McpHttpService
where
    Inner: tower_service::Service<http::Request<B>, Response = Response, Error = Infallible>,
    <Inner as tower_service::Service<http::Request<B>>>::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        tower_service::Service::<http::Request<B>>::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let post = request.method() == http::Method::POST;
        let delete = request.method() == http::Method::DELETE;
        let admitted = match &self.guard {
            None => None,
            Some(guard) => match guard.admit(request.headers()) {
                Admitted::No(refused) => return Box::pin(async move { Ok(refused) }),
                Admitted::Yes { principal, session } => {
                    Some((guard.clone(), principal, session.filter(|_| delete)))
                }
            },
        };
        let answered = self.inner.call(request);
        Box::pin(async move {
            let response = answered.await?;
            if let Some((guard, principal, ended)) = admitted
                && guard.answered(&response, principal, ended)
            {
                guard.prune().await;
            }
            if post && unreadable_refusal(response.status(), response.headers()) {
                Ok(as_json_rpc_error(response).await)
            } else {
                Ok(response)
            }
        })
    }
}

/// Whether a response to a POST is a refusal a client cannot read: a 4xx without JSON.
fn unreadable_refusal(status: http::StatusCode, headers: &http::HeaderMap) -> bool {
    let json = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim()
                .to_ascii_lowercase()
                .starts_with("application/json")
        });
    status.is_client_error() && !json
}

/// The same refusal, its text the message of a JSON-RPC error (without an `id`: rmcp did not
/// read one, so `null`; a client puts its request's), on a connection that closes after it.
async fn as_json_rpc_error(response: Response) -> Response {
    let (mut parts, body) = response.into_parts();
    let text = match body.collect().await {
        Ok(collected) => String::from_utf8_lossy(&collected.to_bytes()).into_owned(),
        Err(never) => match never {},
    };
    let error = super::error_response(ErrorData::invalid_request(text, None), None);
    let body = error.to_string().into_bytes();
    parts.headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    parts.headers.remove(http::header::CONTENT_LENGTH);
    // rmcp may have left the body unread, and then the connection ends with this response:
    // said so, a client does not send its next request on it.
    parts.headers.insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    http::Response::from_parts(parts, Full::new(Bytes::from(body)).boxed())
}

#[cfg(test)]
mod tests {
    use http::StatusCode;
    use serde_json::Value;

    use super::*;

    #[tokio::test]
    async fn pruning_drops_only_the_owners_of_sessions_rmcp_no_longer_has() {
        let registry = idem_registry::Registry::builder().build().unwrap();
        let store = std::sync::Arc::new(idem_core::store::memory::MemoryStore::new());
        let dispatcher = idem_registry::Dispatcher::new(registry, store).unwrap();
        let server = McpServer::new(dispatcher, "t")
            .unwrap()
            .authenticate(|_| Some("acme".to_owned()));
        let mut service = server.http_service(&[]);
        let initialize = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "test", "version": "0"}}});
        let request = http::Request::post("/")
            .header(http::header::HOST, "localhost")
            .header(http::header::ACCEPT, "application/json, text/event-stream")
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(initialize.to_string())))
            .unwrap();
        let opened = tower_service::Service::call(&mut service, request)
            .await
            .unwrap();
        assert_eq!(opened.status(), StatusCode::OK);
        let live = opened.headers()[SESSION_HEADER]
            .to_str()
            .unwrap()
            .to_owned();
        let guard = service.guard.clone().unwrap();
        guard
            .owners
            .lock()
            .unwrap()
            .insert("ended-long-ago".into(), "acme".into());
        guard.prune().await;
        let owners = guard.owners.lock().unwrap();
        assert_eq!(owners.get(&live).map(String::as_str), Some("acme"));
        assert!(!owners.contains_key("ended-long-ago"));
    }

    #[test]
    fn only_a_refusal_without_json_is_rewritten() {
        let typed = |content_type: &str| {
            let mut headers = http::HeaderMap::new();
            headers.insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_str(content_type).unwrap(),
            );
            headers
        };
        let none = http::HeaderMap::new();
        let cases = [
            (StatusCode::PAYLOAD_TOO_LARGE, &none, true),
            (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                &typed("text/plain"),
                true,
            ),
            (StatusCode::BAD_REQUEST, &none, true),
            // Already a JSON-RPC error (rmcp's own, or the server's refusal of a tenant).
            (StatusCode::BAD_REQUEST, &typed("application/json"), false),
            (
                StatusCode::BAD_REQUEST,
                &typed("Application/JSON; charset=utf-8"),
                false,
            ),
            // Not refusals.
            (StatusCode::OK, &typed("text/event-stream"), false),
            (StatusCode::ACCEPTED, &none, false),
            // The server's own failure: not the client's to read as its mistake.
            (StatusCode::INTERNAL_SERVER_ERROR, &none, false),
        ];
        for (status, headers, rewritten) in cases {
            assert_eq!(
                unreadable_refusal(status, headers),
                rewritten,
                "{status} {headers:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_refusal_keeps_its_status_and_says_what_rmcp_said_as_json_rpc() {
        let refusal = http::Response::builder()
            .status(StatusCode::PAYLOAD_TOO_LARGE)
            .header(http::header::CONTENT_LENGTH, "52")
            .body(
                Full::new(Bytes::from(
                    "Payload Too Large: request body exceeds 4194304 bytes",
                ))
                .boxed(),
            )
            .unwrap();
        let rewritten = as_json_rpc_error(refusal).await;
        assert_eq!(rewritten.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(
            rewritten.headers()[http::header::CONTENT_TYPE],
            "application/json"
        );
        assert!(
            rewritten
                .headers()
                .get(http::header::CONTENT_LENGTH)
                .is_none()
        );
        assert_eq!(rewritten.headers()[http::header::CONNECTION], "close");
        let body = rewritten.into_body().collect().await.unwrap().to_bytes();
        let error: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(error["jsonrpc"], "2.0");
        assert_eq!(
            error.get("id"),
            Some(&Value::Null),
            "JSON-RPC 2.0: `id` is there, null"
        );
        assert_eq!(error["error"]["code"], -32600);
        assert_eq!(
            error["error"]["message"],
            "Payload Too Large: request body exceeds 4194304 bytes"
        );
    }
}
