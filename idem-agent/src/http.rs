//! The call's downstream key on every HTTP request a tool makes (feature `reqwest`).
//!
//! A local record cannot cover the crash between sending a request and recording its
//! outcome: only the API on the other side can, if it is told the same key on every
//! attempt. This module puts [`ToolContext::idempotency_key`] in the request's
//! `Idempotency-Key` header ([`IDEMPOTENCY_KEY_HEADER`], the IETF draft's and Stripe's name;
//! configurable), in one of two ways:
//!
//! - [`KeyedRequest::idempotency_key`] on a `reqwest` (or `reqwest-middleware`) request
//!   builder, given the tool's context;
//! - [`IdempotencyKeyMiddleware`] on a `reqwest-middleware` client: every write (any method
//!   but `GET`, `HEAD`, `OPTIONS` and `TRACE`) made while a tool body runs carries that
//!   call's key, so a body cannot forget it. Reads go out without one, outside a body every
//!   request goes out unchanged, and a header set by hand is never replaced.
//!
//! The key is the same on every attempt of a call, on every worker that takes it over, and
//! after a restart: it is derived from the call's identity, not drawn at random.
//!
//! Inside a journaled step (`ctx.step("charge", ...)`) the key sent is the step's own
//! ([`ToolContext::step_key`]): a tool that makes two different writes gives each a step,
//! and each a key, since an API that keeps idempotency keys (Stripe, and the IETF draft)
//! refuses one key for two different requests. Outside steps, the middleware stops a
//! second, different request under the key the call already used, before it is sent
//! ([`KeyAlreadyUsed`], naming the fix); the same request again (a retry) goes.
//!
//! ```no_run
//! use idem::agent::http::IdempotencyKeyMiddleware;
//! use idem::ToolContext;
//! use idem::ToolError;
//!
//! async fn charge(ctx: ToolContext, amount: u64) -> Result<String, ToolError> {
//!     // Built once per process in a real service.
//!     let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!         .with(IdempotencyKeyMiddleware::new())
//!         .build();
//!     let response = client
//!         .post("https://payments.example/v1/charges")
//!         .body(format!("amount={amount}"))
//!         .send() // carries `Idempotency-Key: <ctx.idempotency_key()>`
//!         .await
//!         .map_err(|e| ToolError::ambiguous(format!("the payment API did not answer: {e}")))?;
//!     # let _ = ctx;
//!     response.text().await.map_err(|e| ToolError::ambiguous(e))
//! }
//! ```

use http::{HeaderName, HeaderValue};
use idem_core::IdempotencyKey;
use idem_registry::ToolContext;
use idem_registry::context::{CurrentCall, DownstreamRequest};
use reqwest_middleware::{Middleware, Next};

/// The header the key is sent in by default.
pub const IDEMPOTENCY_KEY_HEADER: &str = "Idempotency-Key";

/// The downstream key of the call whose body is running on this task, if one is: inside one
/// of its journaled steps (`ToolContext::step`), the step's own key. A call dispatched inside
/// another call's step has its own key here, not the step's.
pub fn current_key() -> Option<IdempotencyKey> {
    CurrentCall::with(CurrentCall::downstream_key)
}

/// A request the middleware stopped before sending: it would have gone out under a key the
/// call already sent with another request, which an API that keeps idempotency keys refuses
/// (or answers with the first request's response, so the second effect never happens).
///
/// The middleware returns it as a `reqwest_middleware::Error`; [`KeyAlreadyUsed::of`] finds
/// it there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyAlreadyUsed {
    /// Outside steps, under the call's own key.
    #[error(
        "not sent: this call already sent {first} under its idempotency key, and {second} is another request; an API that keeps idempotency keys refuses one key for two requests (or answers with the first's response). Give each write a key of its own: wrap each in `ctx.step(\"name\", ...)`"
    )]
    Call {
        /// The request the key was first sent with (method and URL, no query).
        first: String,
        /// The one stopped.
        second: String,
    },
    /// Inside the journaled step `step`, under the step's key.
    #[error(
        "not sent: step `{step}` already sent {first} under its idempotency key, and {second} is another request; an API that keeps idempotency keys refuses one key for two requests (or answers with the first's response). Give each write a step of its own: split `ctx.step(\"{step}\", ...)` in two"
    )]
    Step {
        /// The step's name.
        step: String,
        /// The request the key was first sent with (method and URL, no query).
        first: String,
        /// The one stopped.
        second: String,
    },
}

impl KeyAlreadyUsed {
    /// The refusal inside an error a `reqwest-middleware` client returned, if it is one.
    pub fn of(error: &reqwest_middleware::Error) -> Option<&KeyAlreadyUsed> {
        match error {
            reqwest_middleware::Error::Middleware(e) => e.downcast_ref(),
            reqwest_middleware::Error::Reqwest(_) => None,
        }
    }
}

/// Note that `key` goes out with `request` for the current call; refused if the call sent it
/// with another one.
fn note_sent(
    call: &CurrentCall,
    key: &IdempotencyKey,
    request: &reqwest::Request,
) -> Result<(), KeyAlreadyUsed> {
    let sent = DownstreamRequest {
        method: request.method().to_string(),
        target: request.url().as_str().to_owned(),
        body: request.body().and_then(|b| b.as_bytes()).map(|bytes| {
            use sha2::Digest;
            sha2::Sha256::digest(bytes).into()
        }),
    };
    // The query is left out of what an error shows: it may carry what a log must not.
    let shown = |s: &DownstreamRequest| {
        let url = s.target.split('?').next().unwrap_or_default();
        format!("`{} {url}`", s.method)
    };
    call.note_sent(key, sent.clone()).map_err(|first| {
        let (first, second) = (shown(&first), shown(&sent));
        match call.step() {
            Some((step, _)) => KeyAlreadyUsed::Step {
                step,
                first,
                second,
            },
            None => KeyAlreadyUsed::Call { first, second },
        }
    })
}

/// A request builder that can carry a call's key.
pub trait KeyedRequest: Sized {
    /// Send `ctx`'s downstream key in the `Idempotency-Key` header.
    fn idempotency_key(self, ctx: &ToolContext) -> Self {
        self.idempotency_key_as(IDEMPOTENCY_KEY_HEADER, ctx)
    }

    /// Send `ctx`'s downstream key in the header `name`.
    fn idempotency_key_as(self, name: &str, ctx: &ToolContext) -> Self;
}

impl KeyedRequest for reqwest::RequestBuilder {
    fn idempotency_key_as(self, name: &str, ctx: &ToolContext) -> Self {
        self.header(name, ctx.downstream_key().as_str())
    }
}

impl KeyedRequest for reqwest_middleware::RequestBuilder {
    fn idempotency_key_as(self, name: &str, ctx: &ToolContext) -> Self {
        self.header(name, ctx.downstream_key().as_str())
    }
}

/// A `reqwest-middleware` middleware that sends the running call's downstream key in a
/// header (by default `Idempotency-Key`) on every write that does not set it already (a read,
/// `GET`, `HEAD`, `OPTIONS` or `TRACE`, goes without).
#[derive(Debug, Clone)]
pub struct IdempotencyKeyMiddleware {
    header: HeaderName,
}

impl Default for IdempotencyKeyMiddleware {
    fn default() -> Self {
        Self::new()
    }
}

impl IdempotencyKeyMiddleware {
    /// Send the key as `Idempotency-Key`.
    pub fn new() -> Self {
        IdempotencyKeyMiddleware {
            header: HeaderName::from_static("idempotency-key"),
        }
    }

    /// Send the key in the header `name` instead (e.g. `X-Idempotency-Key`). A name that is
    /// not a valid header name is refused, naming it.
    pub fn with_header(name: &str) -> Result<Self, InvalidHeaderName> {
        let header = HeaderName::try_from(name).map_err(|_| InvalidHeaderName(name.to_owned()))?;
        Ok(IdempotencyKeyMiddleware { header })
    }
}

/// A header name [`IdempotencyKeyMiddleware::with_header`] refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a valid HTTP header name (use letters, digits and `-`, e.g. `Idempotency-Key`)"
)]
pub struct InvalidHeaderName(pub String);

#[async_trait::async_trait]
impl Middleware for IdempotencyKeyMiddleware {
    async fn handle(
        &self,
        mut request: reqwest::Request,
        extensions: &mut http::Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        // A read (GET, HEAD, OPTIONS, TRACE) needs no key and is not a second request under
        // one: APIs that keep keys ignore them on reads.
        if !request.method().is_safe() && !request.headers().contains_key(&self.header) {
            let noted = CurrentCall::with(|call| {
                let key = call.downstream_key();
                note_sent(call, &key, &request).map(|()| key)
            });
            // A downstream key is hex with a short prefix: always a valid header value.
            if let Some(noted) = noted
                && let Ok(value) = HeaderValue::from_str(
                    noted
                        .map_err(reqwest_middleware::Error::middleware)?
                        .as_str(),
                )
            {
                request.headers_mut().insert(self.header.clone(), value);
            }
        }
        next.run(request, extensions).await
    }
}
