//! One tool on a store: what most dispatcher tests start from.

use std::sync::Arc;

use idem::prelude::*;
use idem::{Store, ToolDef};
use serde_json::{Value, json};

/// A dispatcher with `tool` alone in its registry.
pub fn dispatcher(tool: ToolDef, store: Arc<dyn Store>) -> Dispatcher {
    Dispatcher::new(Registry::builder().add(tool).build().unwrap(), store)
}

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
