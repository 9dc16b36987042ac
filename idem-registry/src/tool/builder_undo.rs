//! [`ToolBuilder::undo`]: how an applied call of a write is undone when its run is undone
//! (see [`Dispatcher::undo_run`](crate::Dispatcher::undo_run)).

use std::future::Future;
use std::sync::Arc;

use idem_core::ToolError;

use super::ToolBuilder;
use crate::context::ToolContext;
use crate::tool::AppliedCall;

impl ToolBuilder {
    /// How an applied call of this write is undone (a reservation released, a charge
    /// refunded) when its run is undone by [`Dispatcher::undo_run`](crate::Dispatcher::undo_run).
    /// `f` is given the call as it was recorded ([`AppliedCall`]: its arguments, sealed as
    /// recorded, its output and the key it handed downstream). While it runs,
    /// `ctx.downstream_key()` is a key of the undo's own, derived from the undone call's key
    /// and the same on every attempt, worker and process: send it with the undoing request,
    /// so that the provider undoes once. Each applied call is undone at most once, across
    /// crashes and concurrent hosts. Only a write has effects to undo: on a `read` tool the
    /// build is refused, naming the tool.
    ///
    /// ```
    /// use idem::{ToolContext, ToolDef};
    /// use idem::{ToolClass, ToolError};
    /// use serde_json::{json, Value};
    ///
    /// let reserve = ToolDef::builder("reserve", ToolClass::IdempotentWrite)
    ///     .description("Reserve stock for an order.")
    ///     .input_schema(json!({"type": "object"}))
    ///     .handler(|_: ToolContext, _: Value| async move { Ok::<_, ToolError>(json!({"hold": "h-1"})) })
    ///     .undo(|ctx: ToolContext, applied: idem::dispatch::AppliedCall| async move {
    ///         let hold = applied.output["hold"].as_str().unwrap_or_default().to_owned();
    ///         // release(hold, ctx.downstream_key()) at the provider
    ///         let _ = (hold, ctx.downstream_key());
    ///         Ok::<_, ToolError>(())
    ///     })
    ///     .build()
    ///     .unwrap();
    /// assert!(reserve.has_undo());
    /// ```
    pub fn undo<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(ToolContext, AppliedCall) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), ToolError>> + Send + 'static,
    {
        self.undo = Some(Arc::new(move |ctx, applied| Box::pin(f(ctx, applied))));
        self
    }
}

impl ToolBuilder {
    /// When a call of this tool fails for good (its error is the answer: a `terminal` one,
    /// or the last attempt's), undo its run's earlier applied calls as
    /// [`Dispatcher::undo_run`](crate::Dispatcher::undo_run) does with `options`, before
    /// answering; the answer's message then says what was undone (or what a person must
    /// settle) and its details carry it (`details.run_undo`). A capture that fails for good
    /// releases the run's reservation. Needs a dispatcher that keeps run accounts and a run
    /// with an id; otherwise the failure is answered as it is.
    ///
    /// ```
    /// use idem::dispatch::UndoOptions;
    /// use idem::{ToolContext, ToolDef};
    /// use idem::{ToolClass, ToolError};
    /// use serde_json::{json, Value};
    ///
    /// let capture = ToolDef::builder("capture", ToolClass::NonIdempotentWrite)
    ///     .description("Capture a reserved amount.")
    ///     .input_schema(json!({"type": "object"}))
    ///     .handler(|_: ToolContext, _: Value| async move { Err::<Value, _>(ToolError::terminal("declined")) })
    ///     .on_failure_undo_run(UndoOptions::only(["reserve"]))
    ///     .build()
    ///     .unwrap();
    /// # let _ = capture;
    /// ```
    pub fn on_failure_undo_run(mut self, options: crate::tool::UndoOptions) -> Self {
        self.on_failure_undo = Some(options);
        self
    }
}

impl ToolBuilder {
    /// Send this tool's calls that end badly to a person, as `which` says
    /// ([`Escalate`](crate::tool::Escalate)): such a call waits in the store as a case (its
    /// error, its run, what the run applied before it) that `idem cases`, the inbox, the run's
    /// account and [`Dispatcher::cases`](crate::Dispatcher::cases) list; every call under its
    /// key is answered `escalated` until the person decides to run it again under the same
    /// key, to say what happened (the answer then replayed), or to undo the run. A `read`
    /// keeps nothing to decide on: the build is refused, naming the tool.
    ///
    /// ```
    /// use idem::tool::Escalate;
    /// use idem::{ToolContext, ToolDef};
    /// use idem::{ToolClass, ToolError};
    /// use serde_json::{json, Value};
    ///
    /// let capture = ToolDef::builder("capture", ToolClass::NonIdempotentWrite)
    ///     .description("Capture a reserved amount.")
    ///     .input_schema(json!({"type": "object"}))
    ///     .handler(|_: ToolContext, _: Value| async move { Err::<Value, _>(ToolError::terminal("card declined")) })
    ///     .escalate(Escalate::Failures)
    ///     .build()
    ///     .unwrap();
    /// # let _ = capture;
    /// ```
    pub fn escalate(mut self, which: crate::tool::Escalate) -> Self {
        self.escalate = Some(which);
        self
    }
}
