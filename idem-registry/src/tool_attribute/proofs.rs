//! Proofs that a tool's types can do what the dispatcher needs of them, each reported once,
//! on the user's tokens.
//!
//! A tool's parameter, output and error types must implement some traits. The macro asks for
//! a proof of each, `param::<T, _>()`, spanned on the user's `T`, and builds the tool only
//! from the proofs: the arguments struct is generic, and its field types reach it as
//! `<P as Proven>::Type`. Each proof trait has a second, impossible impl, so rustc must weigh
//! both and, when neither applies, reports the one obligation `T: ToolParam<_>` with the
//! message below, instead of one error per missing trait and more from the derives. The
//! proof's type then stays unknown, and every use of it is ambiguous, which rustc does not
//! report once an error has been.

use std::marker::PhantomData;

use idem_core::ToolError;

/// The proof that `T` passed a check.
pub struct Checked<T>(PhantomData<fn() -> T>);

/// The impossible alternative of every proof trait.
pub enum Unchecked {}

/// Implemented by no type: the bound of the impossible impls.
pub trait Never {}

/// What a proof proves usable. Tool types are owned, hence `'static`.
pub trait Proven {
    /// The checked type.
    type Type: 'static;
}

impl<T: 'static> Proven for Checked<T> {
    type Type = T;
}

/// What a tool parameter must be.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool parameter",
    label = "a tool parameter must implement `serde::Deserialize`, `serde::Serialize` and `schemars::JsonSchema`",
    note = "derive them on the type and on the types it contains: `#[derive(serde::Deserialize, serde::Serialize, schemars::JsonSchema)]`; for a type of another crate, enable its serde and schemars features or wrap it in a type of yours"
)]
pub trait ToolParam<P> {}

impl<T: serde::de::DeserializeOwned + serde::Serialize + schemars::JsonSchema> ToolParam<Checked<T>>
    for T
{
}

impl<T: Never> ToolParam<Unchecked> for T {}

/// What a tool's output must be.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool's output",
    label = "a tool's output must implement `serde::Serialize` and `schemars::JsonSchema`",
    note = "derive them on the type and on the types it contains: `#[derive(serde::Serialize, schemars::JsonSchema)]`"
)]
pub trait ToolOutput<P> {}

impl<T: serde::Serialize + schemars::JsonSchema> ToolOutput<Checked<T>> for T {}

impl<T: Never> ToolOutput<Unchecked> for T {}

/// What a tool's error type must be.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool's error type",
    label = "a tool's error type must implement `Into<idem::ToolError>`",
    note = "implement `From<{Self}> for ToolError` with the `ErrorKind` that tells the dispatcher whether the effect happened, or return `ToolError` and convert in the body, e.g. `.map_err(ToolError::retryable)?`"
)]
pub trait IntoToolError<P> {
    /// The conversion.
    fn into_tool_error(self) -> ToolError;
}

impl<E: Into<ToolError>> IntoToolError<Checked<E>> for E {
    fn into_tool_error(self) -> ToolError {
        self.into()
    }
}

impl<E: Never> IntoToolError<Unchecked> for E {
    fn into_tool_error(self) -> ToolError {
        unreachable!("no type implements `Never`")
    }
}

/// The proof that `T` can be a tool parameter.
pub const fn param<T: ToolParam<P>, P>() -> PhantomData<P> {
    PhantomData
}

/// A parameter whose `#[serde(with = "...")]` (or another key naming code written for its
/// type) brings its own codec, which frees the type of the traits: taken as it is.
pub const fn param_with_codec<T>() -> PhantomData<Checked<T>> {
    PhantomData
}

/// The proof that `T` can be a tool's output.
pub const fn output<T: ToolOutput<P>, P>() -> PhantomData<P> {
    PhantomData
}

/// Convert a tool's error.
pub fn tool_error<E: IntoToolError<P>, P>(e: E) -> ToolError {
    e.into_tool_error()
}

/// The proofs of a tool's parameters, in order, as a list `(PhantomData<P0>, (PhantomData<P1>,
/// ()))`: a list of any length with two impls, where a tuple would need one per arity.
///
/// `Fields` (what the arguments struct is taken apart into) and `Params` (what the body is
/// called with) are the same types, spelled as two associated types on purpose: rustc caches
/// a normalised projection with its inference variables, so one spelling would tie the
/// struct's field types to the body's parameter types, and a parameter that failed its proof
/// would then reach the struct's derives and be reported again by each.
pub trait Proofs {
    /// The proven types, as the arguments struct's fields give them.
    type Fields;
    /// The proven types, as the body takes them.
    type Params;
    /// The fields as the body's parameters (the identity).
    fn pass(fields: Self::Fields) -> Self::Params;
}

impl Proofs for () {
    type Fields = ();
    type Params = ();
    fn pass((): ()) {}
}

impl<P: Proven, Rest: Proofs> Proofs for (PhantomData<P>, Rest) {
    type Fields = (P::Type, Rest::Fields);
    type Params = (P::Type, Rest::Params);
    fn pass((first, rest): Self::Fields) -> Self::Params {
        (first, Rest::pass(rest))
    }
}

/// A return type not spelled `Result<T, E>`, such as an alias `ToolResult<u32>`: the type
/// checker sees through the alias, and the proofs of the output and the error read `T` and
/// `E` here.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool's return type",
    label = "a tool must return `Result<T, E>` where `T` is its output and `E: Into<ToolError>`",
    note = "write `Result<{Self}, ToolError>`, or an alias of a `Result`"
)]
pub trait ToolReturn {
    /// `T`.
    type Ok;
    /// `E`.
    type Err;
    /// The value as the `Result` it is.
    fn result(self) -> Result<Self::Ok, Self::Err>;
}

impl<T, E> ToolReturn for Result<T, E> {
    type Ok = T;
    type Err = E;
    fn result(self) -> Self {
        self
    }
}

/// A tool body's future, proven `Send` and `'static` on the tool's name: the dispatcher may
/// move a call between threads at each `.await`.
#[diagnostic::on_unimplemented(
    message = "the future of this tool is not `Send`, so no dispatcher can run it",
    label = "a tool's body must be `Send`: the dispatcher runs it on a multi-threaded runtime, where it may resume on another thread after an `.await`",
    note = "the notes below name the value held across an `.await`: drop it before the `.await` (end its scope with a block, or call `drop`), or use a `Send` type instead (`Arc` for `Rc`, `tokio::sync::Mutex` for a guard held across `.await`)"
)]
pub trait SendFuture: std::future::Future + Send + 'static {}

impl<F: std::future::Future + Send + 'static> SendFuture for F {}

pin_project_lite::pin_project! {
    /// A body's future that [`send`] proved `Send`.
    pub struct Sent<F> {
        #[pin]
        future: F,
    }
}

// SAFETY: a `Sent<F>` is only ever built by `send`, whose bound proves `F: Send`; the field is
// private. What this buys is one error for a body that is not `Send`, reported by `send` on
// the tool's name, instead of a second one on the attribute where the declaration needs its
// handler to be `Send`.
unsafe impl<F> Send for Sent<F> {}

impl<F: std::future::Future> std::future::Future for Sent<F> {
    type Output = F::Output;
    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        self.project().future.poll(cx)
    }
}

/// The body's future, once proven `Send`. rustc prints the line of the bound that failed, so
/// the comment on it is what a user whose tool is not `Send` reads.
#[rustfmt::skip]
pub fn send<
    F: SendFuture, // tools resume on any thread: drop it before the `.await`, or use `Arc`/`tokio::sync::Mutex`
>(future: F) -> Sent<F> {
    Sent { future }
}

/// A `verify = ...` hook.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool's verify hook",
    label = "a verify hook is `async fn(ctx: &ToolContext) -> Result<Verified, ToolError>`",
    note = "it reads `ctx.idempotency_key()` and asks the downstream system whether the effect happened: `Ok(Verified::Applied(output))` or `Ok(Verified::NotApplied)`, or an `Err` when it cannot tell"
)]
pub trait VerifyHook<'a> {
    /// The hook's future.
    type Future: std::future::Future<Output = Result<crate::tool::Verified, ToolError>> + Send + 'a;
    /// Ask the hook.
    fn call(&self, ctx: &'a crate::context::ToolContext) -> Self::Future;
}

impl<'a, F, Fut> VerifyHook<'a> for F
where
    F: Fn(&'a crate::context::ToolContext) -> Fut,
    Fut: std::future::Future<Output = Result<crate::tool::Verified, ToolError>> + Send + 'a,
{
    type Future = Fut;
    fn call(&self, ctx: &'a crate::context::ToolContext) -> Fut {
        self(ctx)
    }
}

/// Ask a verify hook, once proven one. The future is boxed so that no type the proof
/// computes reaches the caller: a hook that is not one is reported once, on its path.
pub fn verify<'a, H: VerifyHook<'a>>(
    hook: &H,
    ctx: &'a crate::context::ToolContext,
) -> crate::tool::BoxFuture<'a, Result<crate::tool::Verified, ToolError>> {
    Box::pin(hook.call(ctx))
}

/// A `natural_key = ...` function.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool's natural key",
    label = "a natural key is `fn(args: &serde_json::Value) -> Option<String>`",
    note = "it reads the normalised arguments (a JSON object) and returns the key that identifies the effect, e.g. `args[\"order_id\"].as_str().map(str::to_owned)`, or `None` when the call has none"
)]
pub trait NaturalKeyFn {
    /// The key of these arguments.
    fn key(&self, args: &serde_json::Value) -> Option<String>;
}

impl<F: Fn(&serde_json::Value) -> Option<String>> NaturalKeyFn for F {
    fn key(&self, args: &serde_json::Value) -> Option<String> {
        self(args)
    }
}

/// An `authorize = ...` check.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool's authorization check",
    label = "an authorization check is `fn(args: &A, run: &RunContext) -> Result<(), String>`, `A` a `Deserialize` type of the arguments it reads",
    note = "`Err` says which rule failed, in words the model can act on (never an argument's value), e.g. `Err(\"only the orders of the customer this run acts for\".into())`"
)]
pub trait AuthorizeFn<A> {
    /// Check a call.
    fn check(&self, args: &A, run: &crate::run::RunContext) -> Result<(), String>;
}

impl<A, F: Fn(&A, &crate::run::RunContext) -> Result<(), String>> AuthorizeFn<A> for F {
    fn check(&self, args: &A, run: &crate::run::RunContext) -> Result<(), String> {
        self(args, run)
    }
}

/// Run an authorization check on the arguments read as its type: arguments it cannot read
/// are refused (fail closed).
pub fn authorize<A: serde::de::DeserializeOwned, F: AuthorizeFn<A>>(
    f: &F,
    args: &serde_json::Value,
    run: &crate::run::RunContext,
) -> Result<(), String> {
    let typed = crate::tool::typed_args::<A>("authorization check", args)?;
    f.check(&typed, run)
}

/// An `authorize_async = ...` check. Like the type proofs, it has an impossible second impl,
/// so that a function of another shape (the synchronous `authorize` form, a borrowed
/// context, another error type) is reported as this trait's message, naming the shape it
/// needs, rather than as a mismatch of closure signatures.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool's asynchronous authorization check",
    label = "an asynchronous authorization check is `async fn(ctx: ToolContext, args: A) -> Result<(), String>`, `A` a `Deserialize` type of the arguments it reads",
    note = "it may read what the call acts on (`ctx.tenant()`, `ctx.acting_for()` and `ctx.limit(..)` say whose run it is) and says why a call is refused: `Err(\"only the orders of the customer this run acts for\".into())`; a check of the arguments and the run alone is `authorize = f`, a `fn(&A, &RunContext) -> Result<(), String>`"
)]
pub trait AuthorizeAsyncFn<P> {
    /// The arguments it reads.
    type Args;
    /// The check's future.
    type Future: std::future::Future<Output = Result<(), String>> + 'static;
    /// Check a call.
    fn check(&self, ctx: crate::context::ToolContext, args: Self::Args) -> Self::Future;
}

impl<A, F, Fut> AuthorizeAsyncFn<Checked<A>> for F
where
    F: Fn(crate::context::ToolContext, A) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>> + 'static,
{
    type Args = A;
    type Future = Fut;
    fn check(&self, ctx: crate::context::ToolContext, args: A) -> Fut {
        self(ctx, args)
    }
}

impl<F: Never> AuthorizeAsyncFn<Unchecked> for F {
    type Args = Unchecked;
    type Future = std::future::Ready<Result<(), String>>;
    fn check(&self, _: crate::context::ToolContext, args: Unchecked) -> Self::Future {
        match args {}
    }
}

/// Run an asynchronous authorization check on the arguments read as its type: arguments it
/// cannot read are refused (fail closed). Its future must be `Send`, asked here, after the
/// shape, so that rustc names the value held across an `.await`.
pub fn authorize_async<P, F>(
    f: &F,
    ctx: crate::context::ToolContext,
    args: &serde_json::Value,
) -> crate::tool::BoxFuture<'static, Result<(), String>>
where
    F: AuthorizeAsyncFn<P>,
    F::Args: serde::de::DeserializeOwned,
    F::Future: Send,
{
    match crate::tool::typed_args::<F::Args>("authorization check", args) {
        Ok(typed) => Box::pin(f.check(ctx, typed)),
        Err(why) => Box::pin(std::future::ready(Err(why))),
    }
}

/// An `approve_when = ...` selector.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot select a tool's calls for approval",
    label = "an approval selector is `fn(args: &A, run: &RunContext) -> bool`, `A` a `Deserialize` type of the arguments it reads",
    note = "it returns `true` for the calls that need a person's approval, e.g. `args.amount > 50`"
)]
pub trait ApproveWhenFn<A> {
    /// Whether the call needs approval.
    fn select(&self, args: &A, run: &crate::run::RunContext) -> bool;
}

impl<A, F: Fn(&A, &crate::run::RunContext) -> bool> ApproveWhenFn<A> for F {
    fn select(&self, args: &A, run: &crate::run::RunContext) -> bool {
        self(args, run)
    }
}

/// Ask an approval selector about the arguments read as its type: arguments it cannot read
/// need a person (fail safe).
pub fn approve_when<A: serde::de::DeserializeOwned, F: ApproveWhenFn<A>>(
    f: &F,
    args: &serde_json::Value,
    run: &crate::run::RunContext,
) -> bool {
    match crate::tool::typed_args::<A>("approval rule", args) {
        Ok(typed) => f.select(&typed, run),
        Err(_) => true,
    }
}

/// A `precondition = ...` check.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool's precondition",
    label = "a precondition is `async fn(ctx: ToolContext, args: A) -> Result<(), ToolError>`, `A` a `Deserialize` type of the arguments it reads",
    note = "it checks, before every attempt, that the world is as the model saw it, and says what changed: `Err(ToolError::terminal(\"the ticket was closed since you read it\"))`"
)]
pub trait PreconditionFn<A> {
    /// The check's future.
    type Future: std::future::Future<Output = Result<(), ToolError>> + Send + 'static;
    /// Check.
    fn check(&self, ctx: crate::context::ToolContext, args: A) -> Self::Future;
}

impl<A, F, Fut> PreconditionFn<A> for F
where
    F: Fn(crate::context::ToolContext, A) -> Fut,
    Fut: std::future::Future<Output = Result<(), ToolError>> + Send + 'static,
{
    type Future = Fut;
    fn check(&self, ctx: crate::context::ToolContext, args: A) -> Fut {
        self(ctx, args)
    }
}

/// Run a precondition on the arguments read as its type.
pub fn precondition<A: serde::de::DeserializeOwned, F: PreconditionFn<A>>(
    f: &F,
    ctx: crate::context::ToolContext,
    args: &serde_json::Value,
) -> crate::tool::BoxFuture<'static, Result<(), ToolError>> {
    match crate::tool::typed_args::<A>("precondition", args) {
        Ok(typed) => Box::pin(f.check(ctx, typed)),
        Err(why) => Box::pin(std::future::ready(Err(ToolError::not_applied(why)))),
    }
}

/// A `compensate = ...` function.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool's compensation",
    label = "a compensation is `async fn(ctx: ToolContext, undo: Undo) -> Result<(), ToolError>`",
    note = "it undoes the completed step `undo.step`, whose journaled value is `undo.output`, sending `ctx.downstream_key()` with the undoing request"
)]
pub trait CompensateFn {
    /// The compensation's future.
    type Future: std::future::Future<Output = Result<(), ToolError>> + Send + 'static;
    /// Undo one step.
    fn undo(&self, ctx: crate::context::ToolContext, undo: crate::tool::Undo) -> Self::Future;
}

impl<F, Fut> CompensateFn for F
where
    F: Fn(crate::context::ToolContext, crate::tool::Undo) -> Fut,
    Fut: std::future::Future<Output = Result<(), ToolError>> + Send + 'static,
{
    type Future = Fut;
    fn undo(&self, ctx: crate::context::ToolContext, undo: crate::tool::Undo) -> Fut {
        self(ctx, undo)
    }
}

/// Run a compensation.
pub fn compensate<F: CompensateFn>(
    f: &F,
    ctx: crate::context::ToolContext,
    undo: crate::tool::Undo,
) -> crate::tool::BoxFuture<'static, Result<(), ToolError>> {
    Box::pin(f.undo(ctx, undo))
}
