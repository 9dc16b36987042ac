//! Tools: what a tool is, how one is built, and the policy it runs under.
//!
//! - `definition`: [`ToolDef`], the complete definition the registry and dispatcher hold,
//!   and the function types it carries (handler, preparer, natural key, verify hook);
//! - `arguments`: what a definition checks of a call's arguments (its compiled schema);
//! - `builder`: [`ToolBuilder`], a definition built in code;
//! - `spec`: [`ToolSpec`], a definition read from data;
//! - `controls`: what a tool layers around dedupe, read from the call: authorization and
//!   approval ([`Rule`]s or functions), its precondition, its compensation ([`Undo`]);
//! - `escalate`: which calls that end badly go to a person ([`Escalate`]);
//! - `policy`: [`ToolPolicy`] and its one check, [`ToolPolicy::check`], which every way of
//!   defining a tool goes through;
//! - `name`: the rule every tool name follows;
//! - `registration`: how a `#[tool]` reaches the registry ([`StaticTool`],
//!   [`ToolRegistration`]).
//!
//! Schemas are the [`schema`](crate::schema) module's business: nothing there knows a tool.

mod arguments;
mod builder;
mod controls;
mod definition;
mod escalate;
mod limits;
mod name;
mod policy;
mod registration;
mod spec;
mod undo;

pub use crate::context::PRECONDITION_STEP;
pub use crate::error::ArgumentError;
// A tool's class and what each class implies live in idem-core; they are shown here.
pub use idem_core::class::{ClassHints, OrphanPolicy, ToolClass, UnknownClass};

/// A boxed, sendable future: what a tool's handler and its controls return.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;
pub use builder::ToolBuilder;
pub(crate) use controls::typed_args;
pub use controls::{
    ApprovalSelector, ApproversWhen, Authorizer, Compensator, Precondition, Rule, Undo,
};
pub(crate) use definition::approvers_of;
pub use definition::{
    Handler, Location, NaturalKey, PreparedArguments, Preparer, ToolDef, ToolRules, TypedArguments,
    Verified, Verifier,
};
pub use escalate::Escalate;
pub use limits::{After, Exceeded, Limit, Per};
pub use name::check_name;
pub use policy::{
    DEFAULT_VERIFY_AFTER, ExplicitSettings, LONGEST_POLICY_DURATION, PolicyError, ToolPolicy,
};
pub use registration::{StaticTool, ToolRegistration};
pub use spec::ToolSpec;
pub use undo::{AppliedCall, UNDO_TOOL_SUFFIX, UndoOptions, Undoer};
