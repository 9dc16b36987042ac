//! The run-time half of `#[tool]`: everything its expansion names, written once.
//!
//! A `#[tool]` expands to what only that tool can say: its arguments struct, its body, one
//! `static` [`Declaration`] literal (name, class, description, the keys the attribute was
//! given, and a [`Body`] typed by the proofs of its types), the `StaticTool` impl that hands the static
//! out, and its `inventory` registration. What every tool shares is here: the builder chain
//! that turns a declaration into a [`ToolDef`], the handler and its future, the schema cache,
//! and the proofs that make each misuse of `#[tool]` one compile error.
//!
//! The cost of a tool crate's build is the code rustc must check and compile per tool
//! (BENCHMARKS.md §5), so the expansion stays small: a declaration is data, and the code that
//! reads it is not generic; what must be generic (the body's types) is one type, [`Body`],
//! instantiated once per tool.
//!
//! Not an API: the facade re-exports this module as `idem::__private` for the macro alone.

mod body;
mod proofs;

/// Which calls that end badly go to a person, for `escalate = "..."`.
pub use crate::tool::Escalate;
use std::sync::{Arc, OnceLock};

use idem_core::ToolError;
use serde_json::Value;

pub use body::{Body, Derived, Named, Normal, ToolBody};
pub use futures_util::future::lazy;
pub use idem_core::ToolClass;
// The proof traits too, though the expansion does not name them: rustc names them in its
// errors by their shortest public path, `idem::__private::ToolParam`.
pub use proofs::{
    ApproveWhenFn, AuthorizeAsyncFn, AuthorizeFn, CompensateFn, IntoToolError, NaturalKeyFn,
    PreconditionFn, SendFuture, ToolOutput, ToolParam, ToolReturn, VerifyHook, approve_when,
    authorize, authorize_async, compensate, output, param, param_with_codec, precondition, send,
    tool_error, verify,
};
pub use {inventory, schemars, serde};

pub use crate::args::fields::FieldList;
pub use crate::context::ToolContext;
use crate::tool::{BoxFuture, ToolPolicy, Verified};
pub use crate::tool::{StaticTool, ToolDef, ToolRegistration};

/// A tool as `#[tool]` declares it: a `static` per tool, read by code shared by every tool.
pub struct Declaration {
    /// The registered name.
    pub name: &'static str,
    /// The side-effect class.
    pub class: ToolClass,
    /// The description shown to the model.
    pub description: &'static str,
    /// What the attribute (and `#[secret]` on parameters) set, in the order written; what it
    /// leaves out keeps [`ToolPolicy`]'s defaults.
    pub settings: &'static [Setting],
    /// The body and its types.
    pub body: &'static dyn ToolBody,
    /// Where the tool was defined: `file!()`.
    pub file: &'static str,
    /// Where the tool was defined: `line!()`.
    pub line: u32,
    /// The schemas, built on first use and shared by every definition of the tool.
    pub schemas: Schemas,
}

/// One key of a `#[tool]` attribute, in the attribute's units.
#[derive(Debug, Clone, Copy)]
pub enum Setting {
    /// `ttl_secs`.
    TtlSecs(u64),
    /// `lease_secs`.
    LeaseSecs(u64),
    /// `wait_secs`.
    WaitSecs(u64),
    /// `backoff_ms`.
    BackoffMs(u64),
    /// `verify_after_secs`.
    VerifyAfterSecs(u64),
    /// `max_attempts`.
    MaxAttempts(u32),
    /// `version`.
    Version(&'static str),
    /// `open_world`.
    OpenWorld,
    /// `on_key_reuse = "reject"` (`"replay"` is the default).
    RejectOnKeyReuse,
    /// `scopes`.
    Scopes(&'static [&'static str]),
    /// `natural_key`.
    NaturalKey(fn(&Value) -> Option<String>),
    /// `verify`, its hook called with the context it reads the call from.
    Verify(fn(ToolContext) -> BoxFuture<'static, Result<Verified, ToolError>>),
    /// `#[secret]` on the parameter at this JSON Pointer.
    Secret(&'static str),
    /// `authorize`, its check called with the arguments and the run.
    Authorize(fn(&Value, &crate::run::RunContext) -> Result<(), String>),
    /// `authorize_async`, its check called with a context of the run and the arguments.
    AuthorizeAsync(fn(ToolContext, &Value) -> BoxFuture<'static, Result<(), String>>),
    /// `approve_when`.
    ApproveWhen(fn(&Value, &crate::run::RunContext) -> bool),
    /// `approvers = n`: four eyes.
    Approvers(u8),
    /// `precondition`.
    Precondition(fn(ToolContext, &Value) -> BoxFuture<'static, Result<(), ToolError>>),
    /// `compensate`.
    Compensate(fn(ToolContext, crate::tool::Undo) -> BoxFuture<'static, Result<(), ToolError>>),
    /// `limits`, the function naming the tool's limits across a run's calls.
    Limits(fn() -> Vec<crate::tool::Limit>),
    /// `escalate = "failures"`, which calls that end badly go to a person.
    Escalate(crate::tool::Escalate),
}

/// One tool's schemas, built on first use.
#[derive(Debug)]
pub struct Schemas {
    input: OnceLock<Arc<Value>>,
    output: OnceLock<Arc<Value>>,
}

impl Schemas {
    /// Nothing built yet.
    ///
    /// ```
    /// static SCHEMAS: idem_registry::tool_attribute::Schemas =
    ///     idem_registry::tool_attribute::Schemas::new();
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

impl Declaration {
    /// The tool's definition. The macro checked everything [`ToolBuilder::build`] checks, so
    /// a refusal here is a bug of the macro.
    ///
    /// [`ToolBuilder::build`]: crate::ToolBuilder::build
    pub fn definition(&'static self) -> ToolDef {
        let body = self.body;
        let mut policy = ToolPolicy::default();
        let mut builder = ToolDef::builder(self.name, self.class)
            // A description a macro computed (`#[doc = include_str!(..)]`) keeps its ends.
            .description(self.description.trim())
            .location(self.file, self.line)
            .input_schema_shared(cached(&self.schemas.input, || body.arguments_schema()))
            .output_schema_shared(cached(&self.schemas.output, || body.output_schema()));
        builder = body.attach(builder);
        for setting in self.settings {
            match *setting {
                Setting::TtlSecs(s) => policy.ttl = std::time::Duration::from_secs(s),
                Setting::LeaseSecs(s) => policy.lease = std::time::Duration::from_secs(s),
                Setting::WaitSecs(s) => policy.wait = std::time::Duration::from_secs(s),
                Setting::BackoffMs(ms) => policy.backoff = std::time::Duration::from_millis(ms),
                Setting::VerifyAfterSecs(s) => {
                    policy.verify_after = std::time::Duration::from_secs(s)
                }
                Setting::MaxAttempts(n) => policy.max_attempts = n,
                Setting::Version(v) => builder = builder.version(v),
                Setting::OpenWorld => policy.open_world = true,
                Setting::RejectOnKeyReuse => policy.replay_on_key_reuse = false,
                Setting::Scopes(scopes) => {
                    policy.scopes = scopes.iter().map(|s| (*s).to_owned()).collect()
                }
                Setting::NaturalKey(key) => builder = builder.natural_key(key),
                Setting::Verify(hook) => builder = builder.verify(move |ctx, _| hook(ctx)),
                Setting::Secret(pointer) => builder = builder.secret(pointer),
                Setting::Authorize(check) => builder = builder.authorize(check),
                Setting::AuthorizeAsync(check) => builder = builder.authorize_async_boxed(check),
                Setting::ApproveWhen(select) => builder = builder.approve_when(select),
                Setting::Approvers(n) => builder = builder.approvers(n),
                Setting::Precondition(check) => builder = builder.precondition_boxed(check),
                Setting::Limits(limits) => {
                    for limit in limits() {
                        builder = builder.limit(limit);
                    }
                }
                Setting::Compensate(undo) => builder = builder.compensate(undo),
                Setting::Escalate(which) => builder = builder.escalate(which),
            }
        }
        builder
            .policy(policy)
            .build()
            .unwrap_or_else(|e| panic!("#[tool] produced an invalid definition: {e}"))
    }
}

/// Not generic, so one copy serves every tool.
fn cached(cell: &OnceLock<Arc<Value>>, build: impl FnOnce() -> Value) -> Arc<Value> {
    cell.get_or_init(|| Arc::new(build())).clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    // What `#[tool(class = "idempotent_write", ttl_secs = 60, scopes = ["words"], natural_key
    // = by_word)]` on `async fn shout(#[secret] word: String, times: u8)` expands to, by hand.
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct ShoutArgs<P0, P1> {
        word: P0,
        times: P1,
    }

    async fn shout(_ctx: ToolContext, word: String, times: u8) -> Result<String, ToolError> {
        if times == 0 {
            return Err(ToolError::terminal("nothing to shout"));
        }
        Ok(word.to_uppercase().repeat(times.into()))
    }

    fn by_word(args: &Value) -> Option<String> {
        args["word"].as_str().map(str::to_owned)
    }

    static SHOUT: Declaration = Declaration {
        name: "shout",
        class: ToolClass::IdempotentWrite,
        description: "Shout a word.",
        settings: &[
            Setting::TtlSecs(60),
            Setting::Scopes(&["words"]),
            Setting::NaturalKey(by_word),
            Setting::Verify(|_| Box::pin(async { Ok(Verified::NotApplied) })),
            Setting::Secret("/word"),
            Setting::AuthorizeAsync(|_, _| Box::pin(async { Ok(()) })),
        ],
        body: &Body::new(
            (param::<String, _>(), (param::<u8, _>(), ())),
            output::<String, _>(),
            Named(&["word", "times"]),
            |ShoutArgs { word, times }| (word, (times, ())),
            |ctx, (word, (times, ()))| shout(ctx, word, times),
            tool_error::<ToolError, _>,
        ),
        file: file!(),
        line: line!(),
        schemas: Schemas::new(),
    };

    #[test]
    fn a_declaration_becomes_the_definition_it_states() {
        let def = SHOUT.definition();
        assert_eq!(def.name(), "shout");
        assert_eq!(def.class(), ToolClass::IdempotentWrite);
        assert_eq!(def.description(), "Shout a word.");
        let expected = ToolPolicy {
            ttl: std::time::Duration::from_secs(60),
            scopes: vec!["words".to_owned()],
            ..ToolPolicy::default()
        };
        assert_eq!(def.policy(), &expected);
        assert!(def.has_natural_key() && def.has_verify() && def.has_authorize_async());
        assert_eq!(def.secrets(), ["/word"]);
        assert_eq!(def.location().map(|l| l.file), Some(file!()));
        assert_eq!(
            def.input_schema()["required"],
            serde_json::json!(["word", "times"])
        );
        assert_eq!(def.output_schema().unwrap()["type"], "string");
    }

    #[test]
    fn every_definition_of_a_tool_shares_its_schemas() {
        let (a, b) = (SHOUT.definition(), SHOUT.definition());
        assert!(Arc::ptr_eq(&a.input_schema, &b.input_schema));
        assert!(Arc::ptr_eq(
            a.output_schema.as_ref().unwrap(),
            b.output_schema.as_ref().unwrap()
        ));
    }

    #[test]
    fn the_handler_runs_the_body_or_refuses_arguments_that_do_not_fit() {
        let def = SHOUT.definition();
        let ctx = || ToolContext::detached("shout", ToolClass::IdempotentWrite, "k");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let run = |args: Value| rt.block_on((def.handler)(ctx(), &args, None));
        let out = run(serde_json::json!({"word": "hey", "times": 2}));
        assert_eq!(out.unwrap(), "HEYHEY");
        let err = run(serde_json::json!({"word": "hey", "times": 0})).unwrap_err();
        assert_eq!(err.kind(), idem_core::ErrorKind::Terminal);
        let err = run(serde_json::json!({"word": "hey", "times": 300})).unwrap_err();
        assert_eq!(err.kind(), idem_core::ErrorKind::NotApplied);
        assert!(err.to_string().contains("/times"), "{err}");
    }
}
