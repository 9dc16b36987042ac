#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
// The modules form layers, each using only those below it: `error` and `pointer` at the
// bottom; `args`; `schema` (knowing nothing of tools); `tool`; `registry`; then `export`,
// `redact`, `context`, `approval` and the dispatcher. `scripts/check_layers.py` fails on any
// import cycle between them.

pub mod approval;
pub mod args;
pub mod context;
pub mod dispatch;
mod error;
pub mod export;
mod grant;
mod heartbeat;
pub mod pointer;
pub mod redact;
pub mod registry;
pub mod run;
pub mod schema;
mod signed;
#[cfg(all(feature = "testing", unix))]
pub mod testing;
pub mod tool;
#[doc(hidden)]
pub mod tool_attribute;

pub use approval::DecisionError;
pub use context::ToolContext;
pub use dispatch::{
    DispatchError, Dispatched, Dispatcher, Recovered, RecoveryAction, RecoveryOptions,
    RecoveryReport, RunContext, SetupError, ToolCall, Unrecoverable,
};
pub use error::{ArgumentError, RegistryError};
pub use redact::{SecretKey, SecretKeyTooShort};
pub use registry::{Registry, RegistryBuilder};
pub use signed::{
    Approval, ApprovalKey, ApprovalKeyError, ApprovalKeys, ApprovalRefusal, ApprovalRequest,
    Approver,
};
pub use tool::{
    DEFAULT_VERIFY_AFTER, LONGEST_POLICY_DURATION, StaticTool, ToolBuilder, ToolDef, ToolPolicy,
    ToolRegistration, ToolSpec, Verified,
};
