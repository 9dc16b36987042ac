//! The upstream MCP server: a child process spoken to over stdio, or a Streamable HTTP
//! endpoint. One connection carries every call; after a child exits, the next call starts
//! it again. What a failed call means for its effect is decided by [`kind_of`]
//! (`effect.rs`), a pure function of what the proxy saw, and only carried out here.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use idem_core::ToolError;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientRequest, MetaObject, RequestId, RequestMetaObject, ServerResult, Tool,
};
use rmcp::service::{Peer, PeerRequestOptions, RunningService, ServiceError};
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;

pub(super) use super::effect::{Failure, Transport, kind_of};
use crate::{META_DOWNSTREAM_KEY, META_KEY, META_MCP_KEY};

/// Where the upstream server is.
///
/// ```
/// use idem::mcp::proxy::UpstreamSpec;
///
/// let spec = UpstreamSpec::command(vec!["node".into(), "server.js".into()], Default::default());
/// assert_eq!(spec.unwrap().to_string(), "node server.js");
/// assert!(UpstreamSpec::url("https://example.com/mcp".into()).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum UpstreamSpec {
    /// A program the proxy starts, speaking MCP on its standard input and output. Its
    /// standard error is the proxy's.
    Command {
        /// The program.
        program: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to its environment.
        env: BTreeMap<String, String>,
    },
    /// A Streamable HTTP endpoint (`http://`; this build has no TLS).
    Url(String),
}

impl UpstreamSpec {
    /// A program and its arguments (`argv[0]` first), or `None` if `argv` is empty.
    pub fn command(argv: Vec<String>, env: BTreeMap<String, String>) -> Option<Self> {
        let mut argv = argv.into_iter();
        let program = argv.next().filter(|p| !p.is_empty())?;
        Some(UpstreamSpec::Command {
            program,
            args: argv.collect(),
            env,
        })
    }

    /// A Streamable HTTP endpoint: an `http://` URL.
    pub fn url(url: String) -> Result<Self, String> {
        if url.starts_with("http://") && url.len() > "http://".len() {
            Ok(UpstreamSpec::Url(url))
        } else if url.starts_with("https://") {
            Err(format!(
                "`{url}`: this build of the proxy speaks plain HTTP only (no TLS); run it beside the upstream and give its `http://` address"
            ))
        } else {
            Err(format!(
                "`{url}` is not an upstream URL: write the server's Streamable HTTP endpoint, e.g. `http://127.0.0.1:8000/mcp`"
            ))
        }
    }

    fn transport(&self) -> Transport {
        match self {
            UpstreamSpec::Command { .. } => Transport::Stdio,
            UpstreamSpec::Url(_) => Transport::Http,
        }
    }
}

impl fmt::Display for UpstreamSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UpstreamSpec::Command { program, args, .. } => {
                f.write_str(program)?;
                args.iter().try_for_each(|a| write!(f, " {a}"))
            }
            UpstreamSpec::Url(url) => f.write_str(url),
        }
    }
}

/// Why the upstream could not be used at start-up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamError {
    /// The program could not be started.
    #[error("cannot start the upstream `{upstream}`: {error}")]
    Spawn {
        /// The upstream.
        upstream: String,
        /// What the system said.
        error: std::io::Error,
    },
    /// The upstream did not complete MCP's handshake.
    #[error(
        "the upstream `{upstream}` is not an MCP server, or exited during the handshake: {reason}"
    )]
    Handshake {
        /// The upstream.
        upstream: String,
        /// What the client saw.
        reason: String,
    },
    /// The upstream did not answer in time.
    #[error(
        "the upstream `{upstream}` did not answer {what} within {} s (the upstream's `timeout_secs`)",
        after.as_secs()
    )]
    Timeout {
        /// The upstream.
        upstream: String,
        /// What it did not answer.
        what: &'static str,
        /// How long the proxy waited.
        after: Duration,
    },
    /// Listing the tools failed.
    #[error("the upstream `{upstream}` did not list its tools: {reason}")]
    List {
        /// The upstream.
        upstream: String,
        /// What the client saw.
        reason: String,
    },
}

/// A connection to the upstream server, shared by every call (clone it freely).
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use idem::mcp::proxy::{Upstream, UpstreamSpec};
///
/// let spec = UpstreamSpec::command(vec!["mcp-server-memory".into()], Default::default()).unwrap();
/// let upstream = Upstream::connect(spec, Duration::from_secs(60)).await?;
/// for tool in upstream.tools().await? {
///     println!("{}", tool.name);
/// }
/// upstream.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Upstream {
    inner: Arc<Inner>,
}

struct Inner {
    spec: UpstreamSpec,
    /// How long to wait for the handshake and the tool list.
    wait: Duration,
    /// The open connection, if any; a call (re)opens it under this lock, so that two calls
    /// never start two children.
    connection: tokio::sync::Mutex<Option<Connection>>,
}

struct Connection {
    service: RunningService<RoleClient, ()>,
    pid: Option<u32>,
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upstream")
            .field("spec", &self.inner.spec)
            .finish_non_exhaustive()
    }
}

impl Upstream {
    /// Start (or reach) the upstream and complete MCP's handshake, waiting at most `wait`.
    pub async fn connect(spec: UpstreamSpec, wait: Duration) -> Result<Self, UpstreamError> {
        let connection = open(&spec, wait).await?;
        Ok(Upstream {
            inner: Arc::new(Inner {
                spec,
                wait,
                connection: tokio::sync::Mutex::new(Some(connection)),
            }),
        })
    }

    /// The upstream, started (or reached) by its first use rather than now.
    pub fn lazy(spec: UpstreamSpec, wait: Duration) -> Self {
        Upstream {
            inner: Arc::new(Inner {
                spec,
                wait,
                connection: tokio::sync::Mutex::new(None),
            }),
        }
    }

    /// Where the upstream is.
    pub fn spec(&self) -> &UpstreamSpec {
        &self.inner.spec
    }

    /// Every tool the upstream lists (all pages).
    pub async fn tools(&self) -> Result<Vec<Tool>, UpstreamError> {
        let upstream = self.inner.spec.to_string();
        let peer = self.peer().await.map_err(|e| UpstreamError::List {
            upstream: upstream.clone(),
            reason: e.message().to_owned(),
        })?;
        match tokio::time::timeout(self.inner.wait, peer.list_all_tools()).await {
            Err(_) => Err(UpstreamError::Timeout {
                upstream,
                what: "tools/list",
                after: self.inner.wait,
            }),
            Ok(listed) => listed.map_err(|e| UpstreamError::List {
                upstream,
                reason: e.to_string(),
            }),
        }
    }

    /// Call `tool` upstream with `arguments`, passing `key` in the request's `_meta` (as
    /// [`META_KEY`], [`META_MCP_KEY`] and [`META_DOWNSTREAM_KEY`], so that an upstream that reads it dedupes
    /// too), and wait at most `timeout` for the answer. The error's kind says what the
    /// failure means for the effect (see the module's documentation).
    pub async fn call(
        &self,
        tool: &str,
        arguments: Value,
        key: &str,
        timeout: Duration,
    ) -> Result<Value, ToolError> {
        let transport = self.inner.spec.transport();
        let fail = |failure: Failure, what: String| {
            let effect = kind_of(failure, transport);
            Err(ToolError::new(
                effect.kind,
                format!("{what}; {}", effect.why),
            ))
        };
        let peer = self.peer().await?;
        let mut meta = MetaObject::new();
        if !key.is_empty() {
            meta.insert(META_KEY.into(), Value::from(key));
            meta.insert(META_MCP_KEY.into(), Value::from(key));
            meta.insert(META_DOWNSTREAM_KEY.into(), Value::from(key));
        }
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = match arguments {
            Value::Object(map) => Some(map),
            _ => None,
        };
        params.meta = Some(RequestMetaObject::from(meta));
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let options = PeerRequestOptions::with_timeout(timeout);
        let handle = match peer.send_request_with_option(request, options).await {
            Ok(handle) => handle,
            Err(e) => {
                return fail(
                    Failure::NotSent,
                    format!("the call to `{tool}` was not sent ({e})"),
                );
            }
        };
        // If the dispatch is dropped (its client went away), tell the upstream to stop.
        let guard = CancelOnDrop {
            peer: Some(peer.clone()),
            id: handle.id.clone(),
        };
        let answer = handle.await_response().await;
        guard.disarm();
        match answer {
            Ok(ServerResult::CallToolResult(result)) => output_of(tool, result),
            Ok(other) => fail(
                Failure::Unexpected,
                format!(
                    "the upstream answered `{tool}` with {}, which the proxy does not follow",
                    describe(&other)
                ),
            ),
            Err(ServiceError::Timeout { timeout }) => fail(
                Failure::TimedOut,
                format!(
                    "the upstream did not answer `{tool}` within {} s (`timeout_secs`)",
                    timeout.as_secs_f64()
                ),
            ),
            Err(ServiceError::McpError(e)) => fail(
                Failure::Refused(e.code.0),
                format!(
                    "the upstream answered `{tool}` with an error: {} (JSON-RPC {})",
                    e.message, e.code.0
                ),
            ),
            Err(ServiceError::TransportSend(e)) => {
                let refused = connection_refused(&e);
                fail(
                    Failure::WriteFailed { refused },
                    format!("the call to `{tool}` could not be sent to the upstream: {e}"),
                )
            }
            Err(ServiceError::UnexpectedResponse) => fail(
                Failure::Unexpected,
                format!("the upstream answered `{tool}` with something that is no tool result"),
            ),
            Err(ServiceError::TransportClosed) => fail(
                Failure::Lost,
                format!(
                    "the upstream's connection closed before it answered `{tool}` (it exited or crashed)"
                ),
            ),
            Err(e) => fail(
                Failure::Lost,
                format!("the call to `{tool}` ended without an answer ({e})"),
            ),
        }
    }

    /// Close the connection; a child is asked to exit (its standard input closed, then
    /// `SIGTERM`, then killed).
    pub async fn shutdown(&self) {
        if let Some(mut connection) = self.inner.connection.lock().await.take() {
            let _ = connection
                .service
                .close_with_timeout(Duration::from_secs(10))
                .await;
        }
    }

    /// The open connection's peer, starting the upstream again if it has gone away.
    async fn peer(&self) -> Result<Peer<RoleClient>, ToolError> {
        let mut slot = self.inner.connection.lock().await;
        if let Some(connection) = slot.as_ref() {
            if !connection.service.is_transport_closed() {
                return Ok(connection.service.peer().clone());
            }
            let pid = connection
                .pid
                .map(|p| format!(" (pid {p})"))
                .unwrap_or_default();
            tracing::warn!(
                upstream = %self.inner.spec,
                "the upstream{pid} has gone away: starting it again for the next call"
            );
        }
        *slot = None;
        match open(&self.inner.spec, self.inner.wait).await {
            Ok(connection) => {
                let peer = connection.service.peer().clone();
                *slot = Some(connection);
                Ok(peer)
            }
            Err(e) => Err(ToolError::new(
                kind_of(Failure::NotStarted, self.inner.spec.transport()).kind,
                format!(
                    "the upstream is not running and could not be started, so nothing was sent: {e}"
                ),
            )),
        }
    }
}

/// Start or reach the upstream and complete the handshake.
async fn open(spec: &UpstreamSpec, wait: Duration) -> Result<Connection, UpstreamError> {
    let upstream = spec.to_string();
    let handshake = |e: rmcp::service::ClientInitializeError| UpstreamError::Handshake {
        upstream: upstream.clone(),
        reason: e.to_string(),
    };
    let timed_out = || UpstreamError::Timeout {
        upstream: upstream.clone(),
        what: "the handshake",
        after: wait,
    };
    let (service, pid) = match spec {
        UpstreamSpec::Command { program, args, env } => {
            use rmcp::transport::TokioChildProcess;
            let mut command = tokio::process::Command::new(program);
            command.args(args).envs(env).kill_on_drop(true);
            let (transport, _) = TokioChildProcess::builder(command)
                .stderr(std::process::Stdio::inherit())
                .spawn()
                .map_err(|error| UpstreamError::Spawn {
                    upstream: upstream.clone(),
                    error,
                })?;
            let pid = transport.id();
            let service = tokio::time::timeout(wait, ().serve(transport))
                .await
                .map_err(|_| timed_out())?
                .map_err(handshake)?;
            (service, pid)
        }
        UpstreamSpec::Url(url) => {
            use rmcp::transport::StreamableHttpClientTransport;
            let transport = StreamableHttpClientTransport::from_uri(url.as_str());
            let service = tokio::time::timeout(wait, ().serve(transport))
                .await
                .map_err(|_| timed_out())?
                .map_err(handshake)?;
            (service, None)
        }
    };
    let pid_note = pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
    tracing::info!(upstream = %spec, "connected to the upstream{pid_note}");
    Ok(Connection { service, pid })
}

/// A tool result as the dispatcher records it: the structured content if there is one,
/// else a single text as a string, else the content blocks. An `isError` result is the
/// upstream's answer: a terminal error, recorded and replayed.
pub(super) fn output_of(tool: &str, result: CallToolResult) -> Result<Value, ToolError> {
    let texts: Vec<&str> = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect();
    if result.is_error == Some(true) {
        let message = if texts.is_empty() {
            format!("the upstream's `{tool}` reported an error without a message")
        } else {
            texts.join("\n")
        };
        let mut error = ToolError::terminal(message);
        if let Some(structured) = result.structured_content {
            error = error.with_details(structured);
        }
        return Err(error);
    }
    if let Some(structured) = result.structured_content {
        return Ok(structured);
    }
    match (texts.as_slice(), result.content.len()) {
        ([text], 1) => Ok(Value::from(*text)),
        _ => serde_json::to_value(&result.content).map_err(|e| {
            ToolError::terminal(format!(
                "the upstream's answer to `{tool}` cannot be stored: {e}"
            ))
        }),
    }
}

/// A short name of an answer that is no tool result.
fn describe(result: &ServerResult) -> &'static str {
    match result {
        ServerResult::InputRequiredResult(_) => "a request for more input (input_required)",
        ServerResult::CreateTaskResult(_) => "a task to poll",
        _ => "an answer that is no tool result",
    }
}

/// Whether a failed write failed at the connection itself (nothing of the request sent).
fn connection_refused(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(error);
    while let Some(e) = source {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        source = e.source();
    }
    false
}

/// Sends `notifications/cancelled` for a request still in flight when it is dropped.
struct CancelOnDrop {
    peer: Option<Peer<RoleClient>>,
    id: RequestId,
}

impl CancelOnDrop {
    fn disarm(mut self) {
        self.peer = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(peer) = self.peer.take() else {
            return;
        };
        let id = self.id.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let reason = "the proxy's client cancelled the call".to_owned();
                let _ = peer
                    .notify_cancelled(CancelledNotificationParam::new(Some(id), Some(reason)))
                    .await;
            });
        }
    }
}
