//! What `#[tool]` needs at run time, written once: each tool instantiates these generics
//! with its own types instead of spelling out closures, futures and caches of its own.
//!
//! The cost of a tool crate's build is the code rustc must check and compile per tool
//! (BENCHMARKS.md §5), so the expansion stays small: a tool's handler is a combinator future
//! around its body, not an `async` block; its schemas are cached by code that is not generic.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use idem_core::ToolError;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::ToolContext;
use crate::tool::{ToolBuilder, TypedArguments};

pub use futures_util::future::lazy;

/// One tool's schemas, built on first use and shared by every definition of it.
#[derive(Debug)]
pub struct Schemas {
    input: OnceLock<Arc<Value>>,
    output: OnceLock<Arc<Value>>,
}

impl Schemas {
    /// Nothing built yet.
    ///
    /// ```
    /// static SCHEMAS: idem_registry::glue::Schemas = idem_registry::glue::Schemas::new();
    /// ```
    pub const fn new() -> Self {
        Schemas {
            input: OnceLock::new(),
            output: OnceLock::new(),
        }
    }
}

impl Default for Schemas {
    fn default() -> Self {
        Self::new()
    }
}

/// Not generic, so one copy serves every tool.
fn cached(cell: &OnceLock<Arc<Value>>, build: fn() -> Value) -> Arc<Value> {
    cell.get_or_init(|| Arc::new(build())).clone()
}

/// Serialise a tool's output. The effect has happened by now, so a failure is ambiguous.
pub fn output_value<T: Serialize>(out: &T) -> Result<Value, ToolError> {
    serde_json::to_value(out).map_err(|e| {
        ToolError::ambiguous(format!(
            "the tool ran but its output cannot be serialised: {e}"
        ))
    })
}

/// The future a tool's handler returns: its body's future, whose outcome becomes the
/// handler's, or the refusal of arguments that do not fit its parameters.
///
/// Written out rather than composed from `futures_util` combinators (`Either<Map<..>, Ready<..>>`)
/// because it is compiled once per tool: this is less code for rustc to generate.
pub struct Call<Fut, C> {
    state: State<Fut>,
    error: C,
}

enum State<Fut> {
    Run(Fut),
    Refused(Option<ToolError>),
}

impl<Fut, C> Call<Fut, C> {
    fn new(state: State<Fut>, error: C) -> Self {
        Call { state, error }
    }
}

impl<T, E, Fut, C> Future for Call<Fut, C>
where
    T: Serialize,
    Fut: Future<Output = Result<T, E>>,
    C: Fn(E) -> ToolError,
{
    type Output = Result<Value, ToolError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: the body's future is never moved out of `state` nor `state` replaced while
        // it holds one (it is pinned projection, as `pin-project` would do), and `Call` has no
        // `Drop` of its own that could move it; the other fields are never pinned.
        let this = unsafe { self.get_unchecked_mut() };
        match &mut this.state {
            State::Run(body) => match unsafe { Pin::new_unchecked(body) }.poll(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(Ok(out)) => Poll::Ready(output_value(&out)),
                Poll::Ready(Err(e)) => Poll::Ready(Err((this.error)(e))),
            },
            State::Refused(e) => Poll::Ready(Err(e.take().unwrap_or_else(|| {
                ToolError::not_applied("the call was polled after it completed")
            }))),
        }
    }
}

/// Complete a `#[tool]`'s definition from its typed body: input and output schemas (cached
/// in `schemas`), argument normalisation, and the handler that parses the arguments, runs
/// `run` and converts its outcome with `error`.
pub fn define<A, O, E, F, Fut, C>(
    builder: ToolBuilder,
    schemas: &'static Schemas,
    run: F,
    error: C,
) -> ToolBuilder
where
    A: DeserializeOwned + Serialize + JsonSchema + Send + 'static,
    O: Serialize + JsonSchema + 'static,
    F: Fn(ToolContext, A) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, E>> + Send + 'static,
    C: Fn(E) -> ToolError + Copy + Send + Sync + 'static,
{
    builder
        .input_schema_shared(cached(&schemas.input, crate::schema::arguments::<A>))
        .output_schema_shared(cached(&schemas.output, crate::schema::output::<O>))
        .typed_arguments_carried::<A>()
        .handler_typed(
            move |ctx: ToolContext, args: &Value, typed: Option<TypedArguments>| {
                // The first attempt takes the value the preparer read; a retry reads it again.
                let parsed = match typed.and_then(|t| t.downcast::<A>().ok()) {
                    Some(typed) => Ok(*typed),
                    None => crate::args::located::parse::<A>(args),
                };
                let state = match parsed {
                    Ok(args) => State::Run(run(ctx, args)),
                    Err(e) => State::Refused(Some(ToolError::not_applied(e))),
                };
                Call::new(state, error)
            },
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    #[test]
    fn a_call_runs_a_pinned_body_and_converts_its_outcome() {
        // The body holds a borrow of its own state across an await: it is not `Unpin`, so
        // polling it through `Call` relies on the projection being sound.
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
        let error = |n: usize| ToolError::retryable(format!("{n} went wrong"));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let ok = rt.block_on(Call::new(State::Run(body(false)), error));
        assert_eq!(ok.unwrap(), Value::from("out"));
        let err = rt
            .block_on(Call::new(State::Run(body(true)), error))
            .unwrap_err();
        assert!(err.to_string().contains("3 went wrong"), "{err}");
    }

    #[test]
    fn a_refused_call_is_not_applied_and_stays_done() {
        let mut call = Call::new(
            State::<std::future::Ready<Result<(), ToolError>>>::Refused(Some(
                ToolError::not_applied("bad"),
            )),
            |e: ToolError| e,
        );
        let first = (&mut call).now_or_never().unwrap().unwrap_err();
        assert_eq!(first.kind(), idem_core::ErrorKind::NotApplied);
        assert!(first.to_string().contains("bad"));
        assert!((&mut call).now_or_never().unwrap().is_err());
    }
}
