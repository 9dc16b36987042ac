//! What a failed call to the upstream means for its effect: the decision, as a pure
//! function of what the proxy saw, apart from the code that meets the failures
//! (`upstream.rs`). Tested as a table (`tests.rs`).

use idem_core::ErrorKind;

/// How the proxy reaches the upstream: what a failed write means depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Transport {
    /// A child's standard input: a write fails only when the child no longer reads.
    Stdio,
    /// HTTP: a request may fail after the server received it.
    Http,
}

/// What went wrong with a call, as far as the proxy can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Failure {
    /// The upstream was not running and could not be started: nothing was sent.
    NotStarted,
    /// The connection was closed before the request was handed to it: nothing was sent.
    NotSent,
    /// Writing the request failed; `refused`: the connection itself was refused.
    WriteFailed {
        /// The server refused the connection (no byte of the request left).
        refused: bool,
    },
    /// The connection closed after the request was sent, before an answer.
    Lost,
    /// No answer within the timeout.
    TimedOut,
    /// A JSON-RPC error answer, with its code.
    Refused(i32),
    /// An answer that is no tool result (a task, a request for input).
    Unexpected,
}

/// What a failure means for the call's effect, and why: what the proxy tells the model and
/// the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Effect {
    /// Not applied (the key is given back) or ambiguous (a non-idempotent or irreversible
    /// call ends Unknown and is never run again by itself).
    pub kind: ErrorKind,
    /// Why the proxy judges so.
    pub why: &'static str,
}

/// What a failure means for the call's effect, which decides the record: the decision,
/// apart from the code that meets the failures. Only a failure that shows the request never
/// reached the upstream's tool is *not applied*: nothing left the proxy (not started, not
/// sent, a stdio write refused by a child that no longer reads, an HTTP connection
/// refused), or the upstream refused the message before any tool (parse error, invalid
/// request, unknown method: JSON-RPC -32700, -32600, -32601). Anything after the request
/// reached a tool is *ambiguous*: the connection lost, no answer in time, an answer the proxy
/// does not follow, and every other error code, invalid params (-32602) included, which
/// servers also answer from inside a tool after it acted.
pub(super) fn kind_of(failure: Failure, transport: Transport) -> Effect {
    let effect = |kind, why| Effect { kind, why };
    match failure {
        Failure::NotStarted => effect(
            ErrorKind::NotApplied,
            "the upstream was not running, so nothing was sent",
        ),
        Failure::NotSent => effect(
            ErrorKind::NotApplied,
            "the connection was closed before the request was handed to it",
        ),
        Failure::WriteFailed { refused: true } => effect(
            ErrorKind::NotApplied,
            "the upstream refused the connection, so no byte of the request left",
        ),
        Failure::WriteFailed { .. } if transport == Transport::Stdio => effect(
            ErrorKind::NotApplied,
            "the upstream no longer reads its input, so it never read the request",
        ),
        Failure::WriteFailed { .. } => effect(
            ErrorKind::Ambiguous,
            "the request failed part way over HTTP: the upstream may have received it",
        ),
        Failure::Refused(-32700 | -32600 | -32601) => effect(
            ErrorKind::NotApplied,
            "the upstream refused the message itself (JSON-RPC parse error, invalid request or unknown method) before any tool",
        ),
        Failure::Refused(-32602) => effect(
            ErrorKind::Ambiguous,
            "invalid params is also answered from inside a tool after it acted: it may have taken effect",
        ),
        Failure::Refused(_) => effect(
            ErrorKind::Ambiguous,
            "an error answered after the request reached the tool: it may have taken effect",
        ),
        Failure::Lost => effect(
            ErrorKind::Ambiguous,
            "the connection closed after the request was sent: it may have taken effect",
        ),
        Failure::TimedOut => effect(
            ErrorKind::Ambiguous,
            "no answer in time: the call may still be running, or have taken effect",
        ),
        Failure::Unexpected => effect(
            ErrorKind::Ambiguous,
            "an answer the proxy does not follow: the call may have taken effect",
        ),
    }
}
