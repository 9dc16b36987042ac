//! # idem
//!
//! Exactly-once effects for the tools LLM agents call.
//!
//! Agents execute tools *at least once*: a timeout after the provider accepted the request,
//! a crash between the effect and the record, a retry on an ambiguous error, the model
//! calling again "to be sure", a replay from a checkpoint. idem makes each effect happen
//! once where that is promised, and makes every tool's side-effect policy impossible to
//! forget: `#[tool]` does not compile without a `class`, and the dispatcher applies it.
//!
//! ```
//! use std::sync::Arc;
//! use idem::prelude::*;
//!
//! /// Set a ticket's status.
//! #[tool(class = "idempotent_write")]
//! async fn set_status(
//!     ctx: &ToolContext,
//!     /// The ticket.
//!     ticket: u64,
//!     /// The new status.
//!     status: String,
//! ) -> Result<String, ToolError> {
//!     // Hand ctx.idempotency_key() to the downstream system.
//!     Ok(format!("#{ticket} is {status} ({})", ctx.idempotency_key()))
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let dispatcher = Dispatcher::new(Registry::linked().unwrap(), Arc::new(MemoryStore::new()));
//! let call = ToolCall::new("set_status", serde_json::json!({"ticket": 7, "status": "open"}))
//!     .with_call_id("call_1");
//! let run = RunContext::new("tenant-a");
//! let first = dispatcher.dispatch(&call, &run).await.unwrap();
//! let retry = dispatcher.dispatch(&call, &run).await.unwrap();
//! assert!(retry.deduplicated);
//! assert_eq!(first.output_json, retry.output_json);
//! # }
//! ```
//!
//! ## `#[tool]` keys
//!
//! | key | meaning | default |
//! |---|---|---|
//! | `class` | **required**: `read`, `idempotent_write`, `non_idempotent_write` or `irreversible` | none |
//! | `name` | the name the model calls (`^[a-zA-Z_][a-zA-Z0-9_-]{0,63}$`) | the function's name |
//! | `description` | what the model reads to choose the tool | the doc comment |
//! | `ttl_secs` | how long a completed call is replayed | 86400 |
//! | `lease_secs` | how long a holder's lease lasts (renewed every third of it) | 30 |
//! | `max_attempts` | attempts in total for classes that retry (capped at 2 for `non_idempotent_write`, 1 for `irreversible`) | 3 |
//! | `wait_secs` | how long a concurrent duplicate waits for the holder | 10 |
//! | `backoff_ms` | first retry delay, doubled per attempt with jitter, at most 5 s | 100 |
//! | `open_world` | MCP `openWorldHint` | false |
//! | `scopes` | scopes the principal must hold, e.g. `["mail:send"]` | none |
//! | `natural_key` | a `fn(&serde_json::Value) -> Option<String>` computing the key from the arguments | none |
//! | `on_key_reuse` | `"reject"` (a key with other arguments is `KeyReused`) or `"replay"` | `"reject"` |
//! | `crate` | the path of this crate if renamed, e.g. `"::my_idem"` | `"::idem"` |
//!
//! The function may be `async` or not, takes named parameters of types that implement
//! `Deserialize`, `Serialize` and `JsonSchema` (`Option<T>` ones are optional), at most one
//! `&ToolContext`, and returns `Result<T, E>` with `T: Serialize + JsonSchema` and
//! `E: Into<ToolError>`. Doc comments on parameters become their descriptions.
//!
//! `#[tool]` replaces the function by a unit type of the same name that implements
//! [`StaticTool`]: the body can only run through a [`Dispatcher`].

#![warn(missing_docs)]

pub use idem_core::store::memory::{ManualClock, MemoryStore};
#[cfg(feature = "postgres")]
pub use idem_core::store::postgres::PostgresStore;
#[cfg(feature = "redis")]
pub use idem_core::store::redis::RedisStore;
#[cfg(feature = "sqlite")]
pub use idem_core::store::sqlite::SqliteStore;
pub use idem_core::{
    ClassHints, ErrorKind, Fence, Fingerprint, IdempotencyKey, KeyMaterial, ListFilter, Outcome,
    Record, RecordKey, RecordState, StateKind, Store, StoreError, Timestamp, ToolClass, ToolError,
};
pub use idem_macros::tool;
pub use idem_registry::{
    Approval, ApprovalRequest, ArgumentError, DispatchError, Dispatched, Dispatcher, Registry,
    RegistryBuilder, RegistryError, RunContext, StaticTool, ToolBuilder, ToolCall, ToolContext,
    ToolDef, ToolPolicy, ToolSpec, Verified,
};

/// Stores, their contract, and the operator operations.
pub mod store {
    pub use idem_core::store::*;
}

/// Everything a tool author needs: `use idem::prelude::*;`.
pub mod prelude {
    pub use crate::{
        Approval, DispatchError, Dispatched, Dispatcher, ErrorKind, MemoryStore, Registry,
        RunContext, Store, ToolCall, ToolClass, ToolContext, ToolError, tool,
    };
}

#[doc(hidden)]
pub mod __private {
    pub use ::inventory;
    pub use ::schemars;
    pub use ::serde;
    pub use ::serde_json::Value;
    pub use idem_core::{ToolClass, ToolError};
    pub use idem_registry::{
        StaticTool, ToolContext, ToolDef, ToolPolicy, ToolRegistration, args, schema,
    };
    pub use std::sync::{Arc, OnceLock};
    pub use std::time::Duration;

    /// Finish a definition the macro has already checked.
    pub fn finish(builder: idem_registry::ToolBuilder) -> ToolDef {
        builder
            .build()
            .unwrap_or_else(|e| panic!("#[tool] produced an invalid definition: {e}"))
    }

    /// Serialise a tool's output. The effect has happened by now, so a failure is ambiguous.
    pub fn output_value<T: ::serde::Serialize>(out: &T) -> Result<Value, ToolError> {
        ::serde_json::to_value(out).map_err(|e| {
            ToolError::ambiguous(format!(
                "the tool ran but its output cannot be serialised: {e}"
            ))
        })
    }

    /// What a tool parameter must be.
    #[diagnostic::on_unimplemented(
        message = "`{Self}` cannot be a tool parameter",
        label = "this type must implement `serde::Deserialize`, `serde::Serialize` and `schemars::JsonSchema`",
        note = "derive them: `#[derive(serde::Deserialize, serde::Serialize, schemars::JsonSchema)]`"
    )]
    pub trait ToolParam {}

    impl<T: ::serde::de::DeserializeOwned + ::serde::Serialize + ::schemars::JsonSchema> ToolParam
        for T
    {
    }

    /// Checked for each parameter, spanned on its type.
    pub fn assert_param<T: ToolParam>() {}
}
