//! Fake downstream providers, as the tools that call them: one whose every call times out
//! after it was sent, and a mail provider whose answers (sent, timed out, what its log shows)
//! the test decides.

use std::sync::Arc;

use idem::prelude::*;
use idem::{ToolDef, ToolPolicy, Verified};
use serde_json::{Value, json};

/// A `non_idempotent_write` named `name` whose every call times out after sending: the
/// shortest way to an Unknown record.
pub fn timing_out(name: &str) -> ToolDef {
    ToolDef::builder(name.to_owned(), ToolClass::NonIdempotentWrite)
        .description("Send something; the provider always times out after accepting it.")
        .input_schema(json!({"type": "object"}))
        .handler(|_ctx: ToolContext, _args: Value| async move {
            Err::<Value, _>(ToolError::ambiguous("timed out after sending"))
        })
        .build()
        .unwrap()
}

/// A mail provider's API, by the Message-ID a call hands it (the call's idempotency key).
pub trait Mailer: Send + Sync + 'static {
    /// Send a message, or fail as the provider does.
    fn send(&self, message_id: &str) -> Result<Value, ToolError>;
    /// Whether the provider's sent log shows the message.
    fn verify(&self, message_id: &str) -> Result<Verified, ToolError>;
}

/// `send_mail`, a `non_idempotent_write` under `policy` that sends through `mailer` and whose
/// verify hook asks `mailer`'s sent log.
pub fn send_mail(mailer: Arc<impl Mailer>, policy: ToolPolicy) -> ToolDef {
    let check = mailer.clone();
    ToolDef::builder("send_mail", ToolClass::NonIdempotentWrite)
        .description("Send a message.")
        .input_schema(json!({"type": "object", "properties": {"to": {"type": "string"}}}))
        .policy(policy)
        .handler(move |ctx: ToolContext, _args: Value| {
            let m = mailer.clone();
            async move { m.send(ctx.idempotency_key()) }
        })
        .verify(move |ctx: ToolContext, _args: Value| {
            let m = check.clone();
            async move { m.verify(ctx.idempotency_key()) }
        })
        .build()
        .unwrap()
}

/// The one call of `send_mail` the tests make.
pub fn send_mail_call() -> ToolCall {
    ToolCall::new("send_mail", json!({"to": "a@example.com"})).with_call_id("call-1")
}
