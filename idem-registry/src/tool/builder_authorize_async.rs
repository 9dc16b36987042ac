//! [`ToolBuilder::authorize_async`]: authorization checks that may read what the call acts
//! on, before anything is recorded.

use std::future::Future;
use std::sync::Arc;

use serde_json::Value;

use super::ToolBuilder;
use crate::context::ToolContext;
use crate::tool::BoxFuture;

impl ToolBuilder {
    /// An authorization check that may read what the call acts on: "the order belongs to the
    /// customer this run acts for" needs a read of the order. It runs in the authorize stage
    /// of a dispatch, once the tool's scopes, its [`authorize`](Self::authorize) checks and
    /// its rules passed, and before the call is keyed, approved or claimed. Every check given
    /// runs, in the order given, and each must pass.
    ///
    /// `f` is given a context of the run (its [`tenant`](ToolContext::tenant),
    /// [`acting_for`](ToolContext::acting_for), [`limit`](ToolContext::limit)s, run and
    /// step) and the call's normalised arguments, and may await any read: the service the
    /// body calls, a database, the function behind a `read` tool. An `Err` refuses the call
    /// with [`DispatchError::NotAuthorized`](crate::DispatchError::NotAuthorized) (code
    /// `not_authorized`) in its words: say which rule failed, not the arguments' values (a
    /// secret argument's text is cut out anyway). Nothing is recorded and nothing runs.
    ///
    /// A check that cannot make its read refuses: return an `Err` that says so ("the order
    /// service did not answer, so the order's owner could not be checked; try again"). A
    /// refused call leaves no record, so the same call may simply be made again. A check
    /// that panics refuses the call too. Never let a call through because a read failed.
    ///
    /// The context is the run's, not the call's: the call has no key yet, so
    /// `ctx.idempotency_key()` is one of the check's own, and a step is not journaled. Only
    /// a dispatch asks the check: [`Dispatcher::record_key`](crate::Dispatcher::record_key)
    /// and [`Dispatcher::approval_request`](crate::Dispatcher::approval_request) read
    /// nothing (a call shown for approval that the check refuses is refused when it is
    /// dispatched).
    ///
    /// Which control to use: a condition on the arguments and the run alone is
    /// [`authorize`](Self::authorize) or a [`Rule`](super::Rule) (no read, and
    /// [`record_key`](crate::Dispatcher::record_key) applies it too). Whether this caller
    /// may act on the resource is this check: refused as `not_authorized`, unrecorded. Whether
    /// the resource is still as the model saw it is a [`precondition`](Self::precondition):
    /// asked after the claim, before the effect starts, its failure the call's recorded
    /// outcome.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use idem::{Dispatcher, MemoryStore, Registry, RunContext, ToolCall};
    /// use idem::{ToolClass, ToolContext, ToolDef, ToolError};
    /// use serde_json::{json, Value};
    ///
    /// // Who owns an order, as the order service answers.
    /// async fn owner_of(order_id: &str) -> Result<Option<String>, String> {
    ///     Ok(match order_id {
    ///         "ord_1" => Some("cus_a".to_owned()),
    ///         "ord_2" => Some("cus_b".to_owned()),
    ///         _ => None,
    ///     })
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let cancel = ToolDef::builder("cancel_order", ToolClass::IdempotentWrite)
    ///     .description("Cancel one of the customer's orders.")
    ///     .input_schema(json!({"type": "object", "properties": {"order_id": {"type": "string"}}}))
    ///     .authorize_async(|ctx: ToolContext, args: Value| async move {
    ///         let order = args["order_id"].as_str().unwrap_or_default();
    ///         let owner = owner_of(order).await.map_err(|e| {
    ///             format!("the order's owner could not be read ({e}); try again")
    ///         })?;
    ///         match (owner.as_deref(), ctx.acting_for()) {
    ///             (Some(owner), Some(me)) if owner == me => Ok(()),
    ///             _ => Err("an agent may cancel only the orders of the customer it acts for".into()),
    ///         }
    ///     })
    ///     .handler(|_: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
    ///     .build()
    ///     .unwrap();
    /// let registry = Registry::builder().add(cancel).build().unwrap();
    /// let dispatcher = Dispatcher::new(registry, Arc::new(MemoryStore::new())).unwrap();
    /// let run = RunContext::new("shop").acting_for("cus_a");
    ///
    /// let own = ToolCall::new("cancel_order", json!({"order_id": "ord_1"})).with_call_id("c1");
    /// assert!(dispatcher.dispatch(&own, &run).await.is_ok());
    /// let theirs = ToolCall::new("cancel_order", json!({"order_id": "ord_2"})).with_call_id("c2");
    /// let refused = dispatcher.dispatch(&theirs, &run).await.unwrap_err();
    /// assert_eq!(refused.code(), "not_authorized");
    /// # }
    /// ```
    pub fn authorize_async<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(ToolContext, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        self.authorize_async
            .push(Arc::new(move |ctx, args: &Value| {
                Box::pin(f(ctx, args.clone()))
            }));
        self
    }

    /// An authorization check that may read, given as a function of borrowed arguments (what
    /// `#[tool(authorize_async = f)]` uses).
    pub(crate) fn authorize_async_boxed(
        mut self,
        f: fn(ToolContext, &Value) -> BoxFuture<'static, Result<(), String>>,
    ) -> Self {
        self.authorize_async.push(Arc::new(f));
        self
    }
}
