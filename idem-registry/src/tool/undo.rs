//! What a tool says of undoing its applied calls, used by a run that undoes itself
//! ([`Dispatcher::undo_run`](crate::Dispatcher::undo_run)): the undo function
//! ([`Undoer`]), the call it is given ([`AppliedCall`]), which calls a run's undo takes
//! ([`UndoOptions`]).

use std::sync::Arc;

use idem_core::{IdempotencyKey, RecordKey, ToolError};
use serde_json::Value;

use super::BoxFuture;
use crate::context::ToolContext;

/// How an applied call of a tool is undone ([`ToolBuilder::undo`](crate::ToolBuilder::undo)).
pub type Undoer = Arc<
    dyn Fn(ToolContext, AppliedCall) -> BoxFuture<'static, Result<(), ToolError>> + Send + Sync,
>;

/// What the name of an undo's tool ends with: the undo of `reserve` is recorded as
/// `reserve.undo` (a name no registered tool can have).
pub const UNDO_TOOL_SUFFIX: &str = ".undo";

/// An applied call to undo, as it was recorded.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AppliedCall {
    /// The tool.
    pub tool: String,
    /// The provider's call id, if the call had one.
    pub call_id: Option<String>,
    /// Its arguments as recorded: a secret argument is sealed, as the record keeps it.
    pub arguments: Value,
    /// Its recorded output.
    pub output: Value,
    /// The key it handed downstream.
    pub downstream_key: IdempotencyKey,
    /// Its record key.
    pub record: RecordKey,
}

impl AppliedCall {
    /// The recorded output read as a `T`.
    ///
    /// ```
    /// use idem::dispatch::AppliedCall;
    /// # fn check(applied: AppliedCall) {
    /// let hold: Result<String, _> = applied.output_as();
    /// # }
    /// ```
    pub fn output_as<T: serde::de::DeserializeOwned>(&self) -> Result<T, ToolError> {
        serde_json::from_value(self.output.clone()).map_err(|e| {
            ToolError::terminal(format!(
                "the recorded output of `{}` cannot be read for its undo: {e}",
                self.tool
            ))
        })
    }
}

/// Which of a run's applied calls [`Dispatcher::undo_run`](crate::Dispatcher::undo_run) undoes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct UndoOptions {
    /// Only the calls of these tools; `None`: every tool that declares an undo.
    pub tools: Option<Vec<String>>,
    /// Who or what undoes the run (a person, the call whose failure undoes it), kept with
    /// each undo in the run's account; `None`: the host.
    pub by: Option<String>,
}

impl UndoOptions {
    /// Every applied call of a tool that declares an undo.
    pub fn all() -> Self {
        UndoOptions::default()
    }

    /// Only the applied calls of `tools` (a group of calls undone together).
    ///
    /// ```
    /// use idem::dispatch::UndoOptions;
    /// let options = UndoOptions::only(["reserve", "capture"]);
    /// assert_eq!(options.tools.unwrap().len(), 2);
    /// ```
    pub fn only<I, S>(tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        UndoOptions {
            tools: Some(tools.into_iter().map(Into::into).collect()),
            by: None,
        }
    }

    /// Name who or what undoes the run: each undo's entry in the run's account says so
    /// (`decided.by`). A failure policy names the failed call; a person's decision, the
    /// person.
    ///
    /// ```
    /// use idem::dispatch::UndoOptions;
    /// let options = UndoOptions::all().by("refund desk, ticket 4411");
    /// assert_eq!(options.by.as_deref(), Some("refund desk, ticket 4411"));
    /// ```
    pub fn by(mut self, who: impl Into<String>) -> Self {
        self.by = Some(who.into());
        self
    }

    pub(crate) fn includes(&self, tool: &str) -> bool {
        self.tools
            .as_ref()
            .is_none_or(|tools| tools.iter().any(|t| t == tool))
    }
}
