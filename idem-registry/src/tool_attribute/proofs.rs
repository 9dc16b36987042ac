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
