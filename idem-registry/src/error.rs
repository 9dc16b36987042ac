//! The errors several rooms of the registry share: why a tool could not be registered, and
//! why a call's arguments were refused. This module depends on nothing else in the crate, so
//! every other module may name these types without making an import cycle.

/// Why a tool could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// Two tools share a name.
    #[error(
        "two tools are named `{name}`: one defined at {first}, the other at {second}; rename one with #[tool(name = \"...\")]"
    )]
    DuplicateName {
        /// The name.
        name: String,
        /// Where the first is defined.
        first: String,
        /// Where the second is defined.
        second: String,
    },
    /// A tool definition without a side-effect class.
    #[error(
        "tool `{tool}` has no class: every tool needs one of `read`, `idempotent_write`, `non_idempotent_write`, `irreversible`"
    )]
    MissingClass {
        /// The tool.
        tool: String,
    },
    /// A name providers would reject.
    #[error("tool name `{name}` is invalid: {reason}")]
    InvalidName {
        /// The name.
        name: String,
        /// Why.
        reason: String,
    },
    /// Some other part of the definition is unusable.
    #[error("tool `{tool}` is invalid: {reason}")]
    Invalid {
        /// The tool.
        tool: String,
        /// Why.
        reason: String,
    },
}

impl RegistryError {
    /// The definition of `tool` is unusable, for `reason`.
    pub(crate) fn invalid(tool: impl Into<String>, reason: impl Into<String>) -> Self {
        RegistryError::Invalid {
            tool: tool.into(),
            reason: reason.into(),
        }
    }
}

/// Arguments that do not fit the tool's parameters, with where and why, in words a model
/// can act on.
///
/// ```
/// use idem::tool::ArgumentError;
///
/// let err = ArgumentError::new("/to", "expected a string, got a number");
/// assert_eq!(err.to_string(), "invalid arguments at `/to`: expected a string, got a number");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid arguments at `{pointer}`: {message}")]
pub struct ArgumentError {
    /// JSON pointer to the offending value (`""` is the whole arguments object).
    pub pointer: String,
    /// The rule that was violated.
    pub message: String,
}

impl ArgumentError {
    /// An error at a JSON pointer.
    pub fn new(pointer: impl Into<String>, message: impl Into<String>) -> Self {
        ArgumentError {
            pointer: pointer.into(),
            message: message.into(),
        }
    }
}
