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
//! - [`IdempotencyKeyMiddleware`] on a `reqwest-middleware` client: every request made while
//!   a tool body runs carries that call's key, so a body cannot forget it. Outside a body a
//!   request goes out unchanged, and a header set by hand is never replaced.
//!
//! The key is the same on every attempt of a call, on every worker that takes it over, and
//! after a restart: it is derived from the call's identity, not drawn at random.
//!
//! ```no_run
//! use idem_registry::http::IdempotencyKeyMiddleware;
//! use idem_registry::{ToolContext};
//! use idem_core::ToolError;
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

use std::future::Future;

use http::{HeaderName, HeaderValue};
use idem_core::IdempotencyKey;
use reqwest_middleware::{Middleware, Next};

use crate::context::ToolContext;

/// The header the key is sent in by default.
pub const IDEMPOTENCY_KEY_HEADER: &str = "Idempotency-Key";

tokio::task_local! {
    /// The downstream key of the call whose body is running on this task.
    static CURRENT: IdempotencyKey;
}

/// Run `body` with `key` as the current call's key (the dispatcher does, for every body).
pub(crate) fn scoped<F: Future>(key: IdempotencyKey, body: F) -> impl Future<Output = F::Output> {
    CURRENT.scope(key, body)
}

/// The downstream key of the call whose body is running on this task, if one is.
pub fn current_key() -> Option<IdempotencyKey> {
    CURRENT.try_with(Clone::clone).ok()
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
        self.header(name, ctx.idempotency_key())
    }
}

impl KeyedRequest for reqwest_middleware::RequestBuilder {
    fn idempotency_key_as(self, name: &str, ctx: &ToolContext) -> Self {
        self.header(name, ctx.idempotency_key())
    }
}

/// A `reqwest-middleware` middleware that sends the running call's downstream key in a
/// header (by default `Idempotency-Key`) on every request that does not set it already.
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
        if !request.headers().contains_key(&self.header)
            && let Some(key) = current_key()
            // A downstream key is hex with a short prefix: always a valid header value.
            && let Ok(value) = HeaderValue::from_str(key.as_str())
        {
            request.headers_mut().insert(self.header.clone(), value);
        }
        next.run(request, extensions).await
    }
}
