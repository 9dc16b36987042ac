//! Registry, dispatcher and provider exports of idem.
//!
//! Most users depend on the `idem` facade, which re-exports everything here.
//!
//! The modules form layers, each using only those below it: `error` and `pointer` at the
//! bottom; `args` (reading a call's arguments); `schema` (generating, checking and
//! validating JSON Schemas, knowing nothing of tools); `tool` (definitions, builders,
//! specs, policy); `registry`; then `export` and `redact`, the dispatcher, `mcp` (feature `mcp`)
//! serving it, and `mcp_proxy` (feature `mcp-proxy`) serving another MCP server's tools through it.
//! `scripts/check_layers.py` fails on any import cycle between them.

#![warn(missing_docs)]

#[cfg(feature = "agent")]
pub mod agent;
pub mod approval;
pub mod args;
pub mod context;
pub mod dispatch;
mod error;
pub mod export;
mod heartbeat;
#[cfg(feature = "reqwest")]
pub mod http;
#[cfg(feature = "mcp")]
pub mod mcp;
#[cfg(feature = "mcp-proxy")]
pub mod mcp_proxy;
mod pointer;
pub mod redact;
pub mod registry;
#[cfg(feature = "rig")]
pub mod rig;
pub mod schema;
pub mod tool;
#[doc(hidden)]
pub mod tool_attribute;

/// Validating a model's arguments against a tool's schema, at the path it had before the
/// [`schema`] module held it.
#[doc(hidden)]
pub mod validate {
    pub use crate::schema::{ArgumentValidator, SchemaError, drop_absent_nulls};
}

pub use approval::{
    Approval, ApprovalKey, ApprovalKeyError, ApprovalKeys, ApprovalRefusal, ApprovalRequest,
    Approver,
};
pub use context::ToolContext;
pub use dispatch::{
    DecisionError, DispatchError, Dispatched, Dispatcher, Recovered, RecoveryAction,
    RecoveryOptions, RecoveryReport, RunContext, SetupError, ToolCall, Unrecoverable,
};
pub use error::{ArgumentError, RegistryError};
pub use redact::{SecretKey, SecretKeyTooShort};
pub use registry::{Registry, RegistryBuilder};
pub use tool::{
    DEFAULT_VERIFY_AFTER, LONGEST_POLICY_DURATION, StaticTool, ToolBuilder, ToolDef, ToolPolicy,
    ToolRegistration, ToolSpec, Verified,
};
