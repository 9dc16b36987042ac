//! MCP's stdio framing (one JSON-RPC message a line) on any byte stream, answering every
//! line it cannot deliver.
//!
//! rmcp's own transport for this framing ignores a line that is not JSON, answers a request
//! of the wrong shape without its `id`, reads a known method whose `params` do not fit as an
//! unknown method (`-32601`), and drops a line over its length bound without a word: in each
//! case the client waits for an answer that never comes, or is told something untrue. This
//! one answers as JSON-RPC 2.0 says, and keeps serving:
//!
//! | the line                                     | the answer                              |
//! |----------------------------------------------|-----------------------------------------|
//! | not JSON                                     | `-32700` parse error, `id` null         |
//! | a request whose envelope is wrong            | `-32600` invalid request, with its `id` |
//! | a request this server serves, `params` wrong | `-32602` invalid params, with its `id`  |
//! | any other JSON that is not an MCP message    | `-32600`, with its `id` if it has one   |
//! | over 16 MiB ([`MAX_LINE_BYTES`])             | `-32600` naming the bound, `id` null    |
//! | a notification or response it cannot read    | nothing: JSON-RPC never answers those   |
//!
//! rmcp stays quiet on unparsable input for fear of an error storm with a peer that echoes
//! what it receives. An answer here is itself a well-formed JSON-RPC error: echoed back, it
//! reads as an error response with a null `id`, which rmcp drops once a session has begun.
//! (Before the first request of a session, rmcp ends the session on any message that is not
//! a request; a peer that echoes garbage back that early loses its server, as with rmcp's
//! own transport on any stray response.)

use std::sync::Arc;

use rmcp::model::{
    CallToolRequest, ClientJsonRpcMessage, ClientRequest, DiscoverRequest, ErrorData,
    InitializeRequest, ListToolsRequest, PingRequest, RequestId, ServerJsonRpcMessage,
};
use rmcp::transport::Transport;
use rmcp::{RoleServer, ServiceExt};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

use crate::{McpServeError, McpServer};

/// The longest line [`McpServer::serve_on`] reads, in bytes: a longer one is discarded and
/// answered with an error. 16 MiB, rmcp's bound for the same framing.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

impl McpServer {
    /// Serve on standard input and output until the client goes away; a line that is not a
    /// message the server can read is answered with a JSON-RPC error (see
    /// [`serve_on`](Self::serve_on)).
    pub async fn serve_stdio(self) -> Result<(), McpServeError> {
        self.serve_on(tokio::io::stdin(), tokio::io::stdout()).await
    }

    /// Serve on a byte stream in MCP's stdio framing, one JSON-RPC message a line (a pipe, a
    /// socket, a child's standard input and output), until the client goes away. A line that
    /// is not a message the server can read is answered with a JSON-RPC error (see the
    /// module's table) and the server goes on with the next.
    ///
    /// ```no_run
    /// # async fn run(server: idem::mcp::McpServer) -> Result<(), Box<dyn std::error::Error>> {
    /// let socket = tokio::net::TcpStream::connect("127.0.0.1:7000").await?;
    /// let (read, write) = socket.into_split();
    /// server.serve_on(read, write).await?;
    /// # Ok(()) }
    /// ```
    pub async fn serve_on<R, W>(self, read: R, write: W) -> Result<(), McpServeError>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let running = self
            .for_connection()
            .serve(LineTransport::new(read, write, MAX_LINE_BYTES))
            .await
            .map_err(|e| McpServeError::Transport(e.to_string()))?;
        running
            .waiting()
            .await
            .map(|_| ())
            .map_err(|e| McpServeError::Transport(e.to_string()))
    }
}

/// What a line read from the client is for.
#[derive(Debug)]
enum Reading {
    /// A message for the server.
    Deliver(Box<ClientJsonRpcMessage>),
    /// An error response to send back instead.
    Answer(Value),
    /// Nothing to deliver or answer (a blank line, a notification or response it cannot read).
    Skip,
}

/// What a line is for: the decision, apart from the reading and writing.
fn reading(line: &[u8]) -> Reading {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Reading::Skip;
    }
    let error = match serde_json::from_slice::<ClientJsonRpcMessage>(line) {
        Ok(ClientJsonRpcMessage::Request(request)) => {
            if let ClientRequest::CustomRequest(custom) = &request.request
                && let Some(why) = served_params_error(&custom.method, custom.params.as_ref())
            {
                let message = format!("invalid params of `{}`: {why}", custom.method);
                return answer(ErrorData::invalid_params(message, None), Some(request.id));
            }
            return Reading::Deliver(Box::new(ClientJsonRpcMessage::Request(request)));
        }
        Ok(message) => return Reading::Deliver(Box::new(message)),
        Err(error) => error,
    };
    let value = match serde_json::from_slice::<Value>(line) {
        Ok(value) => value,
        Err(e) => {
            let message = format!("parse error: the line is not JSON ({e})");
            return answer(ErrorData::parse_error(message, None), None);
        }
    };
    let id = value
        .get("id")
        .and_then(|id| serde_json::from_value::<RequestId>(id.clone()).ok());
    let field = |name: &str| value.get(name).is_some();
    if value.is_object() && field("method") && !field("id") {
        // A notification: JSON-RPC never answers one, even in error.
        tracing::debug!("ignoring a notification the server cannot read: {error}");
        return Reading::Skip;
    }
    if value.is_object() && !field("method") && (field("result") || field("error")) {
        // A response: nobody to answer.
        tracing::debug!("ignoring a response the server cannot read: {error}");
        return Reading::Skip;
    }
    let why = envelope_error(&value).unwrap_or_else(|| error.to_string());
    answer(
        ErrorData::invalid_request(format!("invalid request: {why}"), None),
        id,
    )
}

fn answer(error: ErrorData, id: Option<RequestId>) -> Reading {
    Reading::Answer(super::error_response(error, id))
}

/// What is wrong with a JSON-RPC 2.0 request object's envelope, if anything.
fn envelope_error(value: &Value) -> Option<String> {
    let Some(object) = value.as_object() else {
        let kind = if value.is_array() {
            "a batch (MCP has none since 2025-06-18)"
        } else {
            "not an object"
        };
        return Some(format!("a message is one JSON-RPC object, this is {kind}"));
    };
    if object.get("jsonrpc") != Some(&Value::from("2.0")) {
        return Some("`jsonrpc` must be \"2.0\"".to_owned());
    }
    match object.get("method") {
        Some(Value::String(_)) => {}
        Some(other) => return Some(format!("`method` must be a string, got {other}")),
        None => return Some("a request needs a `method`".to_owned()),
    }
    match object.get("id") {
        None | Some(Value::String(_)) => {}
        Some(Value::Number(n)) if n.is_i64() => {}
        Some(other) => return Some(format!("`id` must be a string or an integer, got {other}")),
    }
    match object.get("params") {
        None | Some(Value::Object(_) | Value::Array(_)) => None,
        Some(other) => Some(format!("`params` must be an object, got {other}")),
    }
}

/// Why `params` do not fit `method`, when it is one this server serves (rmcp reads a
/// request whose params do not fit its method as a custom request of that name).
fn served_params_error(method: &str, params: Option<&Value>) -> Option<serde_json::Error> {
    fn check<T: DeserializeOwned>(
        method: &str,
        params: Option<&Value>,
    ) -> Option<serde_json::Error> {
        let mut request = serde_json::Map::new();
        request.insert("method".into(), Value::from(method));
        if let Some(params) = params {
            request.insert("params".into(), params.clone());
        }
        serde_json::from_value::<T>(Value::Object(request)).err()
    }
    match method {
        "tools/call" => check::<CallToolRequest>(method, params),
        "tools/list" => check::<ListToolsRequest>(method, params),
        "initialize" => check::<InitializeRequest>(method, params),
        "server/discover" => check::<DiscoverRequest>(method, params),
        "ping" => check::<PingRequest>(method, params),
        _ => None,
    }
}

/// Whole lines waiting to be written, the first perhaps in part: a write cut off by a
/// cancelled future goes on from where it stopped at the next flush, so lines never
/// interleave.
struct Outbox<W> {
    io: Option<W>,
    pending: Vec<u8>,
    written: usize,
}

impl<W: AsyncWrite + Unpin> Outbox<W> {
    fn push(&mut self, message: &impl serde::Serialize) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.pending, message)?;
        self.pending.push(b'\n');
        Ok(())
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        let Some(io) = self.io.as_mut() else {
            return Err(std::io::ErrorKind::NotConnected.into());
        };
        if self.pending.is_empty() {
            return Ok(());
        }
        while self.written < self.pending.len() {
            match io.write(&self.pending[self.written..]).await? {
                0 => return Err(std::io::ErrorKind::WriteZero.into()),
                n => self.written += n,
            }
        }
        self.pending.clear();
        self.written = 0;
        io.flush().await
    }
}

/// The transport: lines in, lines out.
struct LineTransport<R, W> {
    read: BufReader<R>,
    line: Vec<u8>,
    max: usize,
    /// Dropping the rest of a line over `max`, until its newline.
    discarding: bool,
    outbox: Arc<Mutex<Outbox<W>>>,
}

/// One line read, or why not.
enum Line {
    /// `line` holds a whole line.
    Read,
    /// A line over the bound was dropped.
    Oversized,
    /// The client closed the stream.
    End,
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> LineTransport<R, W> {
    fn new(read: R, write: W, max: usize) -> Self {
        LineTransport {
            read: BufReader::new(read),
            line: Vec::new(),
            max,
            discarding: false,
            outbox: Arc::new(Mutex::new(Outbox {
                io: Some(write),
                pending: Vec::new(),
                written: 0,
            })),
        }
    }

    /// Read a line into `self.line`, never holding more than `max + 1` bytes of it. Cancel
    /// safe (`receive` is polled in a `select!`): what was read stays in `self.line`, or is
    /// known to be discarded, and the next call goes on from there.
    async fn read_line(&mut self) -> std::io::Result<Line> {
        loop {
            if self.discarding {
                let available = self.read.fill_buf().await?;
                if available.is_empty() {
                    return Ok(Line::End);
                }
                let newline = available.iter().position(|b| *b == b'\n');
                let used = newline.map_or(available.len(), |at| at + 1);
                self.read.consume(used);
                if newline.is_some() {
                    self.discarding = false;
                    return Ok(Line::Oversized);
                }
                continue;
            }
            let room = (self.max + 1).saturating_sub(self.line.len()) as u64;
            let mut bounded = (&mut self.read).take(room);
            let n = bounded.read_until(b'\n', &mut self.line).await?;
            if self.line.ends_with(b"\n") {
                return Ok(Line::Read);
            }
            if self.line.len() > self.max {
                self.line.clear();
                self.discarding = true;
            } else if n == 0 {
                // The end of the stream; a last line without its newline is not a message.
                return Ok(Line::End);
            }
        }
    }
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let outbox = self.outbox.clone();
        async move {
            let mut outbox = outbox.lock().await;
            outbox.push(&item)?;
            outbox.flush().await
        }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            // An answer whose write a cancelled `receive` cut off goes out first.
            if let Err(e) = self.outbox.lock().await.flush().await {
                tracing::error!("cannot write to the MCP client: {e}");
                return None;
            }
            let read = match self.read_line().await {
                Ok(read) => read,
                Err(e) => {
                    tracing::error!("cannot read from the MCP client: {e}");
                    return None;
                }
            };
            let reading = match read {
                Line::End => return None,
                Line::Oversized => answer(
                    ErrorData::invalid_request(
                        format!(
                            "a message over {} bytes was discarded: pass large content by reference (a URL, an id)",
                            self.max
                        ),
                        None,
                    ),
                    None,
                ),
                Line::Read => {
                    let reading = reading(&self.line[..self.line.len() - 1]);
                    self.line.clear();
                    reading
                }
            };
            match reading {
                Reading::Deliver(message) => return Some(*message),
                Reading::Skip => {}
                Reading::Answer(error) => {
                    let mut outbox = self.outbox.lock().await;
                    if let Err(e) = outbox.push(&error) {
                        tracing::error!("cannot answer the MCP client: {e}");
                    }
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        let mut outbox = self.outbox.lock().await;
        let flushed = outbox.flush().await;
        if let Some(mut io) = outbox.io.take() {
            io.shutdown().await?;
        }
        flushed
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::ErrorCode;
    use serde_json::json;

    use super::*;

    /// The error a line is answered with: its code, its message and its id.
    fn answered(line: &str) -> Option<(ErrorCode, String, Value)> {
        match reading(line.as_bytes()) {
            Reading::Answer(message) => {
                let value = serde_json::to_value(&message).unwrap();
                assert!(
                    value.get("id").is_some(),
                    "JSON-RPC 2.0: an error always has an id"
                );
                let code = ErrorCode(value["error"]["code"].as_i64().unwrap() as i32);
                let text = value["error"]["message"].as_str().unwrap().to_owned();
                Some((code, text, value["id"].clone()))
            }
            _ => None,
        }
    }

    const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;

    #[test]
    fn every_line_is_delivered_answered_or_skipped_as_json_rpc_says() {
        let list =
            format!(r#"{{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{{{META}}}}}"#);
        let call = format!(
            r#"{{"jsonrpc":"2.0","id":"c","method":"tools/call","params":{{"name":"t",{META}}}}}"#
        );
        for delivered in [
            list.as_str(),
            call.as_str(),
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#,
            r#"{"jsonrpc":"2.0","id":9,"result":{}}"#,
            // A method the server does not serve: the server answers it (-32601).
            r#"{"jsonrpc":"2.0","id":3,"method":"no/such","params":{}}"#,
        ] {
            assert!(
                matches!(reading(delivered.as_bytes()), Reading::Deliver(_)),
                "{delivered}"
            );
        }
        for skipped in [
            "",
            "  \r",
            // Notifications and responses are never answered.
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":"x"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{},"error":{}}"#,
        ] {
            assert!(
                matches!(reading(skipped.as_bytes()), Reading::Skip),
                "{skipped}"
            );
        }
        let none = Value::Null;
        let cases: &[(&str, ErrorCode, &str, Value)] = &[
            (
                "this is not json",
                ErrorCode::PARSE_ERROR,
                "not JSON",
                none.clone(),
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"#,
                ErrorCode::PARSE_ERROR,
                "not JSON",
                none.clone(),
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"x"}"#,
                ErrorCode::INVALID_REQUEST,
                "`params` must be an object",
                json!(1),
            ),
            (
                r#"{"jsonrpc":"1.0","id":"a","method":"tools/list"}"#,
                ErrorCode::INVALID_REQUEST,
                "`jsonrpc` must be \"2.0\"",
                json!("a"),
            ),
            (
                r#"{"jsonrpc":"2.0","id":2,"method":7}"#,
                ErrorCode::INVALID_REQUEST,
                "`method` must be a string",
                json!(2),
            ),
            (
                r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":5}}"#,
                ErrorCode::INVALID_PARAMS,
                "invalid params of `tools/call`: invalid type: integer `5`",
                json!(2),
            ),
            ("[1,2]", ErrorCode::INVALID_REQUEST, "a batch", none.clone()),
            (
                "5",
                ErrorCode::INVALID_REQUEST,
                "not an object",
                none.clone(),
            ),
            (
                r#"{"jsonrpc":"2.0","id":8}"#,
                ErrorCode::INVALID_REQUEST,
                "needs a `method`",
                json!(8),
            ),
        ];
        for (line, code, says, id) in cases {
            let (got_code, message, got_id) =
                answered(line).unwrap_or_else(|| panic!("{line} is answered"));
            assert_eq!(got_code, *code, "{line}: {message}");
            assert!(message.contains(says), "{line}: {message}");
            assert_eq!(got_id, *id, "{line}");
        }
    }

    #[tokio::test]
    async fn a_line_over_the_bound_is_discarded_and_answered_and_the_next_is_read() {
        let (client, server) = tokio::io::duplex(4096);
        let (read, write) = tokio::io::split(server);
        let mut transport = LineTransport::new(read, write, 64);
        let (mut client_read, mut client_write) = tokio::io::split(client);
        let writer = tokio::spawn(async move {
            let long = format!("{}\n", "x".repeat(200));
            client_write.write_all(long.as_bytes()).await.unwrap();
            client_write
                .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n")
                .await
                .unwrap();
            client_write
        });
        let next = tokio::time::timeout(std::time::Duration::from_secs(10), transport.receive())
            .await
            .expect("the next line is read");
        assert!(
            matches!(next, Some(ClientJsonRpcMessage::Response(_))),
            "{next:?}"
        );
        let mut answer = String::new();
        BufReader::new(&mut client_read)
            .read_line(&mut answer)
            .await
            .unwrap();
        assert!(
            answer.contains("-32600") && answer.contains("over 64 bytes"),
            "{answer}"
        );
        drop(writer.await);
    }
}
