//! What `#[tool]` needs at run time, written once: each tool instantiates these generics
//! with its own types instead of spelling out closures, futures and caches of its own.
//!
//! The cost of a tool crate's build is the code rustc must check and compile per tool
//! (BENCHMARKS.md §5), so the expansion stays small: a tool's handler is a combinator future
//! around its body, not an `async` block; its schemas are cached by code that is not generic.

use std::future::Future;
use std::sync::{Arc, OnceLock};

use futures_util::FutureExt;
use futures_util::future::{Either, ready};
use idem_core::ToolError;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::args::ArgumentError;
use crate::context::ToolContext;
use crate::tool::ToolBuilder;

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

/// A body's outcome as the handler returns it.
fn outcome<T: Serialize, E>(
    r: Result<T, E>,
    error: impl FnOnce(E) -> ToolError,
) -> Result<Value, ToolError> {
    match r {
        Ok(out) => output_value(&out),
        Err(e) => Err(error(e)),
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
    A: DeserializeOwned + Serialize + JsonSchema + 'static,
    O: Serialize + JsonSchema + 'static,
    F: Fn(ToolContext, A) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, E>> + Send + 'static,
    C: Fn(E) -> ToolError + Copy + Send + Sync + 'static,
{
    builder
        .input_schema_shared(cached(&schemas.input, crate::schema::arguments::<A>))
        .output_schema_shared(cached(&schemas.output, crate::schema::output::<O>))
        .prepare(normalise::<A>)
        .handler_ref(
            move |ctx: ToolContext, args: &Value| match crate::located::parse::<A>(args) {
                Ok(args) => Either::Left(run(ctx, args).map(move |r| outcome(r, error))),
                Err(e) => Either::Right(ready(Err(ToolError::not_applied(e)))),
            },
        )
}

/// Deserialise typed arguments, then serialise them back: what the fingerprint covers
/// (`args::normalise`, deserialising as the handler does, so that rustc compiles one
/// deserialiser per arguments type, not two).
fn normalise<A: DeserializeOwned + Serialize>(arguments: &Value) -> Result<Value, ArgumentError> {
    let typed: A = crate::located::parse(arguments)?;
    serde_json::to_value(&typed)
        .map_err(|e| ArgumentError::new("", format!("arguments could not be re-encoded: {e}")))
}
