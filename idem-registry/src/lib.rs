//! Registry, dispatcher and provider exports of idem.
//!
//! Most users depend on the `idem` facade, which re-exports everything here.

#![warn(missing_docs)]

pub mod approval;
pub mod args;
pub mod context;
pub mod dispatch;
pub mod export;
mod heartbeat;
mod located;
pub mod redact;
pub mod registry;
pub mod schema;
pub mod tool;
#[doc(hidden)]
pub mod tool_attribute;
pub mod validate;

pub use approval::{Approval, ApprovalRequest};
pub use args::ArgumentError;
pub use context::ToolContext;
pub use dispatch::{DispatchError, Dispatched, Dispatcher, RunContext, ToolCall};
pub use redact::{SecretKey, SecretKeyTooShort};
pub use registry::{Registry, RegistryBuilder, RegistryError};
pub use tool::{
    DEFAULT_VERIFY_AFTER, LONGEST_POLICY_DURATION, StaticTool, ToolBuilder, ToolDef, ToolPolicy,
    ToolRegistration, ToolSpec, Verified,
};
