//! A `#[tool]` body as its handler runs it: one generic type built in `const`, so that the
//! tool's declaration can be a `static`, and reached through a trait object, so that the
//! code turning a declaration into a [`ToolDef`](crate::ToolDef) is compiled once for every
//! tool.

use std::borrow::Cow;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use idem_core::ToolError;
use pin_project_lite::pin_project;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::proofs::{Proofs, Proven, ToolReturn};
use crate::args::ArgumentError;
use crate::args::fields::FieldList;
use crate::context::ToolContext;
use crate::tool::{PreparedArguments, ToolBuilder, TypedArguments};

/// What a declaration needs of its body, whatever its types.
pub trait ToolBody: Sync {
    /// The JSON schema of the arguments.
    fn arguments_schema(&self) -> Value;
    /// The JSON schema of the output.
    fn output_schema(&self) -> Value;
    /// Give the builder the typed argument reader and the handler.
    fn attach(&'static self, builder: ToolBuilder) -> ToolBuilder;
}

/// How a body's arguments are normalised (the value record keys are computed from).
///
/// [`Named`] serialises the fields under their names, with code generic over their types
/// only, shared by every tool with parameters of the same types; [`Derived`] serialises the
/// arguments struct by its derived `Serialize`, for parameters whose serde attributes change
/// their serialisation. Both give the same value for the same fields.
pub trait Normal<A, F>: Sync {
    /// The normal form of `arguments`, read into `typed`, and the fields `fields` takes out of
    /// it when the arguments were already normal (a handler may then take them as they are).
    fn normalise<'a>(
        &self,
        arguments: &'a Value,
        typed: A,
        fields: &impl Fn(A) -> F,
    ) -> Result<(Cow<'a, Value>, Option<F>), ArgumentError>;
}

/// The fields, serialised under these names in this order.
pub struct Named(pub &'static [&'static str]);

impl<A, F: FieldList> Normal<A, F> for Named {
    fn normalise<'a>(
        &self,
        arguments: &'a Value,
        typed: A,
        fields: &impl Fn(A) -> F,
    ) -> Result<(Cow<'a, Value>, Option<F>), ArgumentError> {
        let fields = fields(typed);
        let normal = crate::args::fields::normalise(self.0, &fields, arguments)?;
        let carried = matches!(normal, Cow::Borrowed(_)).then_some(fields);
        Ok((normal, carried))
    }
}

/// The arguments struct, serialised by its derived `Serialize`.
pub struct Derived;

impl<A: Serialize, F> Normal<A, F> for Derived {
    fn normalise<'a>(
        &self,
        arguments: &'a Value,
        typed: A,
        fields: &impl Fn(A) -> F,
    ) -> Result<(Cow<'a, Value>, Option<F>), ArgumentError> {
        let normal = crate::args::normal_form(&typed, arguments)?;
        let carried = matches!(normal, Cow::Borrowed(_)).then(|| fields(typed));
        Ok((normal, carried))
    }
}

/// A tool's body with the types its proofs gave: `Pr` the parameters' proofs, `MO` the
/// output's, `A` the arguments struct, `E` the body's error, `Fut` its future; `N` normalises
/// the arguments, `S` takes the arguments struct apart, `F` runs the body, `C` converts its
/// error.
pub struct Body<Pr, MO, A, E, Fut, N, S, F, C> {
    normal: N,
    fields: S,
    run: F,
    error: C,
    types: Types<(Pr, MO, A, E, Fut)>,
}

/// Types a value is generic over without holding one of them: `fn() -> T` is `Send` and
/// `Sync` whatever `T` is.
type Types<T> = PhantomData<fn() -> T>;

impl<Pr, MO, A, E, Fut, N, S, F, C> Body<Pr, MO, A, E, Fut, N, S, F, C>
where
    Pr: Proofs,
    MO: Proven,
    S: Fn(A) -> Pr::Fields,
    F: Fn(ToolContext, Pr::Params) -> Fut,
    Fut: Future<Output: ToolReturn<Ok = MO::Type, Err = E>>,
    C: Fn(E) -> ToolError,
{
    /// The body `run`, called with the fields `fields` takes out of the arguments struct,
    /// whose errors `error` converts; `normal` gives the arguments' normal form. The bounds
    /// are here, not only on the [`ToolBody`] impl, because they are what tells rustc the
    /// closures' parameter types.
    pub const fn new(
        proofs: Pr,
        output: PhantomData<MO>,
        normal: N,
        fields: S,
        run: F,
        error: C,
    ) -> Self {
        // The proofs are types only; a `const fn` may not drop a value of a generic type.
        std::mem::forget(proofs);
        let _ = output;
        Body {
            normal,
            fields,
            run,
            error,
            types: PhantomData,
        }
    }
}

impl<Pr, MO, A, E, Fut, N, S, F, C> ToolBody for Body<Pr, MO, A, E, Fut, N, S, F, C>
where
    Pr: Proofs<Fields: Send + 'static>,
    MO: Proven,
    MO::Type: Serialize + JsonSchema,
    A: DeserializeOwned + JsonSchema + 'static,
    N: Normal<A, Pr::Fields> + 'static,
    S: Fn(A) -> Pr::Fields + Sync + 'static,
    F: Fn(ToolContext, Pr::Params) -> Fut + Sync + 'static,
    Fut: Future<Output: ToolReturn<Ok = MO::Type, Err = E>> + Send + 'static,
    C: Fn(E) -> ToolError + Sync + 'static,
{
    fn arguments_schema(&self) -> Value {
        crate::schema::arguments::<A>()
    }

    fn output_schema(&self) -> Value {
        crate::schema::output::<MO::Type>()
    }

    fn attach(&'static self, builder: ToolBuilder) -> ToolBuilder {
        builder
            .prepare_carried(move |arguments: &Value| {
                // The deserialiser the handler uses too: one copy of `A`'s visitor.
                let typed: A = crate::args::located::parse(arguments)?;
                let (normal, fields) = self.normal.normalise(arguments, typed, &self.fields)?;
                Ok(PreparedArguments {
                    arguments: normal,
                    typed: fields.map(|f| Box::new(f) as TypedArguments),
                })
            })
            .handler_typed(
                move |ctx: ToolContext, args: &Value, typed: Option<TypedArguments>| {
                    // The first attempt takes the fields the preparer read; a retry reads
                    // them again.
                    let parsed = match typed.and_then(|t| t.downcast::<Pr::Fields>().ok()) {
                        Some(fields) => Ok(*fields),
                        None => crate::args::located::parse::<A>(args).map(&self.fields),
                    };
                    match parsed {
                        Ok(fields) => Call::Running {
                            body: (self.run)(ctx, Pr::pass(fields)),
                            error: &self.error,
                        },
                        Err(e) => Call::Refused {
                            error: Some(ToolError::not_applied(e)),
                        },
                    }
                },
            )
    }
}

pin_project! {
    /// The future a tool's handler returns: its body's future, whose outcome becomes the
    /// handler's, or the refusal of arguments that do not fit its parameters.
    ///
    /// Written out rather than composed from `futures_util` combinators
    /// (`Either<Map<..>, Ready<..>>`) because it is compiled once per tool: this is less code
    /// for rustc to generate.
    #[project = CallState]
    enum Call<Fut, C: 'static> {
        Running { #[pin] body: Fut, error: &'static C },
        Refused { error: Option<ToolError> },
    }
}

impl<T, E, Fut, C> Future for Call<Fut, C>
where
    T: Serialize,
    Fut: Future<Output: ToolReturn<Ok = T, Err = E>>,
    C: Fn(E) -> ToolError,
{
    type Output = Result<Value, ToolError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            CallState::Running { body, error } => {
                body.poll(cx).map(|outcome| match outcome.result() {
                    Ok(out) => output_value(&out),
                    Err(e) => Err(error(e)),
                })
            }
            CallState::Refused { error } => Poll::Ready(Err(error.take().unwrap_or_else(|| {
                ToolError::not_applied("the call was polled after it completed")
            }))),
        }
    }
}

/// Serialise a tool's output. The effect has happened by now, so a failure is ambiguous.
fn output_value<T: Serialize>(out: &T) -> Result<Value, ToolError> {
    serde_json::to_value(out).map_err(|e| {
        ToolError::ambiguous(format!(
            "the tool ran but its output cannot be serialised: {e}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    static RETRYABLE: fn(usize) -> ToolError = |n| ToolError::retryable(format!("{n} went wrong"));

    #[test]
    fn a_call_runs_a_pinned_body_and_converts_its_outcome() {
        // The body holds a borrow of its own state across an await: it is not `Unpin`, so
        // polling it through `Call` relies on the projection pinning it.
        let body = |fail: bool| async move {
            let text = String::from("out");
            let borrowed = &text;
            tokio::task::yield_now().await;
            if fail {
                Err(borrowed.len())
            } else {
                Ok(borrowed.clone())
            }
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let ok = rt.block_on(Call::Running {
            body: body(false),
            error: &RETRYABLE,
        });
        assert_eq!(ok.unwrap(), Value::from("out"));
        let err = rt
            .block_on(Call::Running {
                body: body(true),
                error: &RETRYABLE,
            })
            .unwrap_err();
        assert!(err.to_string().contains("3 went wrong"), "{err}");
    }

    #[test]
    fn a_refused_call_is_not_applied_and_stays_done() {
        let mut call = Call::<std::future::Ready<Result<(), usize>>, _>::Refused {
            error: Some(ToolError::not_applied("bad")),
        };
        // The type of the error converter a refused call never uses.
        let _: &Call<_, fn(usize) -> ToolError> = &call;
        let first = (&mut call).now_or_never().unwrap().unwrap_err();
        assert_eq!(first.kind(), idem_core::ErrorKind::NotApplied);
        assert!(first.to_string().contains("bad"));
        assert!((&mut call).now_or_never().unwrap().is_err());
    }

    #[test]
    fn an_output_that_cannot_be_serialised_is_ambiguous() {
        // A map with non-string keys has no JSON form.
        let out: std::collections::BTreeMap<(u8, u8), u8> = [((1, 2), 3)].into();
        let err = output_value(&out).unwrap_err();
        assert_eq!(err.kind(), idem_core::ErrorKind::Ambiguous);
    }
}
