//! Running a tool's body once: the execution seam, panics caught, and a holder's lost key.
//!
//! Seam (ARCHITECTURE.md, "Seams"): an [`Execution`] wraps every execution of a body, for
//! timeouts, metrics or injected faults in tests. It sees the attempt and the body's future
//! and gives back a future of the same output; it cannot skip the checks before the body nor
//! the recording after it, and what it returns is handled by the class like anything the
//! body returns (a timeout reported as `Ambiguous` becomes Unknown for a
//! `non_idempotent_write`, say).
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use idem::dispatch::{Attempt, BodyFuture, Execution};
//! use idem::ToolError;
//!
//! /// Gives every body at most the given time to answer; a late one may still have had its
//! /// effect, so it is reported as ambiguous.
//! struct Timeout(Duration);
//!
//! impl Execution for Timeout {
//!     fn execute<'a>(&'a self, _attempt: Attempt<'a>, body: BodyFuture<'a>) -> BodyFuture<'a> {
//!         Box::pin(async move {
//!             tokio::time::timeout(self.0, body)
//!                 .await
//!                 .unwrap_or_else(|_| Err(ToolError::ambiguous("the tool timed out")))
//!         })
//!     }
//! }
//!
//! let registry = idem::Registry::builder().build().unwrap();
//! let dispatcher = idem::Dispatcher::new(registry, Arc::new(idem::MemoryStore::new()))
//!     .unwrap()
//!     .with_execution(Arc::new(Timeout(Duration::from_secs(30))));
//! # let _ = dispatcher;
//! ```

use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use idem_core::{IdempotencyKey, ToolClass, ToolError};
use serde_json::Value;

use crate::context::ToolContext;
use crate::heartbeat::Registration;
use crate::tool::{BoxFuture, ToolDef, TypedArguments};

/// A body's execution, as an [`Execution`] sees it.
pub type BodyFuture<'a> = BoxFuture<'a, Result<Value, ToolError>>;

/// The attempt an [`Execution`] wraps.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Attempt<'a> {
    /// The tool.
    pub tool: &'a str,
    /// Its class.
    pub class: ToolClass,
    /// 1 for the first execution in this dispatch.
    pub attempt: u32,
    /// The key handed downstream.
    pub key: &'a IdempotencyKey,
}

/// Wraps every execution of a body (see the module docs).
pub trait Execution: Send + Sync + 'static {
    /// Run `body` (or not: an injected fault may answer in its place) for `attempt`.
    fn execute<'a>(&'a self, attempt: Attempt<'a>, body: BodyFuture<'a>) -> BodyFuture<'a>;
}

/// Run the body once: through the dispatcher's [`Execution`] if it has one, catching panics
/// (a panic is ambiguous: the effect may have happened), and for a holder, stopping when the
/// heartbeat reports the key lost.
pub(crate) async fn run(
    tool: &ToolDef,
    execution: Option<&dyn Execution>,
    ctx: ToolContext,
    args: &Value,
    typed: Option<TypedArguments>,
    lease: Option<Registration>,
) -> Result<Value, ToolError> {
    let downstream = ctx.key().clone();
    // Borrowed by the wrapper's future for as long as the body runs.
    let key: IdempotencyKey;
    let body = match execution {
        Some(execution) => {
            key = ctx.key().clone();
            let attempt = ctx.attempt();
            // Created when the wrapper first polls it: a wrapper that answers in its place
            // leaves a handler that works when called (before polling) uncalled.
            let body: BodyFuture<'_> =
                Box::pin(async move { (tool.handler)(ctx, args, typed).await });
            let attempt = Attempt {
                tool: &tool.name,
                class: tool.class,
                attempt,
                key: &key,
            };
            execution.execute(attempt, body)
        }
        None => (tool.handler)(ctx, args, typed),
    };
    guard(downstream, body, lease).await
}

/// Run a body's future as the call's (for code it calls to find the call's key), catching
/// panics (a panic is ambiguous), and for a holder stopping when the heartbeat reports the
/// key lost.
pub(crate) async fn guard(
    downstream: IdempotencyKey,
    body: BodyFuture<'_>,
    lease: Option<Registration>,
) -> Result<Value, ToolError> {
    // The call is the task's while the body runs, for code the body calls (an HTTP
    // middleware) to send its key.
    let body = crate::context::CurrentCall::scope(downstream, body);
    let body = AssertUnwindSafe(body).catch_unwind();
    let flatten = |r: std::thread::Result<Result<Value, ToolError>>| {
        r.unwrap_or_else(|panic| {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".into());
            Err(ToolError::ambiguous(format!("the tool panicked: {msg}")))
        })
    };
    let Some(lease) = lease else {
        return flatten(body.await);
    };
    tokio::select! {
        biased;
        r = body => flatten(r),
        // Another worker owns the call now (a take-over, an Unknown settled by a verify
        // hook): stop, rather than apply an effect it may also apply.
        () = lease.lost() => Err(ToolError::ambiguous(
            "this worker lost the key while the tool was running",
        )),
    }
}

/// A tool's error with its secrets' text cut out of the message and details, before it is
/// recorded, returned or logged.
pub(crate) fn scrub_tool_error(tool: &ToolDef, arguments: &Value, error: ToolError) -> ToolError {
    if tool.secrets.is_empty() {
        return error;
    }
    let scrubbed = ToolError::new(
        error.kind(),
        crate::redact::scrub(error.message(), arguments, &tool.secrets),
    );
    match error.details() {
        Some(details) => {
            let mut details = details.clone();
            crate::redact::scrub_value(&mut details, arguments, &tool.secrets);
            scrubbed.with_details(details)
        }
        None => scrubbed,
    }
}

/// A tool's output with its secrets' text cut out, before it is recorded or returned: a
/// first answer and its replays read alike, and the record holds no secret in clear.
pub(crate) fn scrub_output(tool: &ToolDef, arguments: &Value, mut output: Value) -> Value {
    if !tool.secrets.is_empty() {
        crate::redact::scrub_value(&mut output, arguments, &tool.secrets);
    }
    output
}
