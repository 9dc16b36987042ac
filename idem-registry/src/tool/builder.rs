//! Building a [`ToolDef`] at run time: each part given by a method, everything checked at
//! once by [`ToolBuilder::build`], the class required from the start.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use idem_core::{ToolClass, ToolError};
use serde_json::Value;

use super::controls::{
    ApprovalSelector, Authorizer, Compensator, Precondition, Rule, Undo, guarded, precondition_of,
};
use super::definition::{
    Handler, Location, NaturalKey, PreparedArguments, Preparer, ToolDef, ToolRules, TypedArguments,
    Verified, Verifier,
};
use super::name::check_name;
use super::policy::{ExplicitSettings, ToolPolicy};
use crate::args::require_object;
use crate::context::ToolContext;
use crate::error::{ArgumentError, RegistryError};
use crate::run::RunContext;
use crate::schema::check_argument_pointer;

// The checks that may read: their methods in a room of their own.
#[path = "builder_authorize_async.rs"]
mod authorize_async;
// Which calls need a person, and how many.
#[path = "builder_approval.rs"]
mod approval;
// Rules across the calls of a run.
#[path = "builder_limits.rs"]
mod limits;
// How an applied call is undone when its run is.
#[path = "builder_undo.rs"]
mod undo;

impl ToolDef {
    /// Start a tool built at runtime. The class is a required argument: a tool cannot be
    /// constructed without one.
    ///
    /// ```
    /// use idem::{ToolClass, ToolContext, ToolDef, ToolError};
    /// use serde_json::{json, Value};
    ///
    /// let echo = ToolDef::builder("echo", ToolClass::Read)
    ///     .description("Echo the arguments back.")
    ///     .input_schema(json!({"type": "object", "properties": {"text": {"type": "string"}}}))
    ///     .handler(|_ctx: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(echo.name(), "echo");
    /// ```
    pub fn builder(name: impl Into<Cow<'static, str>>, class: ToolClass) -> ToolBuilder {
        ToolBuilder {
            name: name.into(),
            class,
            description: None,
            input_schema: None,
            output_schema: None,
            policy: ToolPolicy::default(),
            prepare: None,
            handler: None,
            natural_key: None,
            verify: None,
            secrets: Vec::new(),
            location: None,
            version: Cow::Borrowed(idem_core::DEFAULT_VERSION),
            explicit: ExplicitSettings::default(),
            authorize: Vec::new(),
            authorize_async: Vec::new(),
            approve_when: Vec::new(),
            approvers: 1,
            approvers_when: Vec::new(),
            rules: ToolRules::default(),
            precondition: None,
            compensate: None,
            undo: None,
            on_failure_undo: None,
            escalate: None,
        }
    }
}

/// Builds a [`ToolDef`]; see [`ToolDef::builder`].
pub struct ToolBuilder {
    name: Cow<'static, str>,
    class: ToolClass,
    description: Option<Cow<'static, str>>,
    input_schema: Option<Arc<Value>>,
    output_schema: Option<Arc<Value>>,
    policy: ToolPolicy,
    prepare: Option<Preparer>,
    handler: Option<Handler>,
    natural_key: Option<NaturalKey>,
    verify: Option<Verifier>,
    secrets: Vec<String>,
    location: Option<Location>,
    version: Cow<'static, str>,
    /// The policy settings the tool's author wrote out, for [`ToolPolicy::check`].
    explicit: ExplicitSettings,
    authorize: Vec<Authorizer>,
    authorize_async: Vec<super::controls::AsyncAuthorizer>,
    approve_when: Vec<ApprovalSelector>,
    approvers: u8,
    approvers_when: Vec<(u8, ApprovalSelector)>,
    rules: ToolRules,
    precondition: Option<Precondition>,
    compensate: Option<Compensator>,
    undo: Option<super::Undoer>,
    on_failure_undo: Option<crate::tool::UndoOptions>,
    escalate: Option<crate::tool::Escalate>,
}

impl fmt::Debug for ToolBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolBuilder")
            .field("name", &self.name)
            .field("class", &self.class)
            .finish_non_exhaustive()
    }
}

impl ToolBuilder {
    /// The handler's version, recorded with every call (default `"1"`): change it when a
    /// deploy changes what the handler does, so that calls made by the old handler are not
    /// settled by the new one's verify hook ([`idem_core::contract`]). 1 to 64 characters.
    pub fn version(mut self, version: impl Into<Cow<'static, str>>) -> Self {
        self.version = version.into();
        self
    }

    /// The description shown to the model (required).
    pub fn description(mut self, d: impl Into<Cow<'static, str>>) -> Self {
        self.description = Some(d.into());
        self
    }

    /// The arguments' JSON schema (required; its root must be an object schema).
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = Some(Arc::new(schema));
        self
    }

    /// Share an already built schema.
    pub fn input_schema_shared(mut self, schema: Arc<Value>) -> Self {
        self.input_schema = Some(schema);
        self
    }

    /// The output's JSON schema.
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(Arc::new(schema));
        self
    }

    /// Share an already built output schema.
    pub fn output_schema_shared(mut self, schema: Arc<Value>) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// Policy settings.
    pub fn policy(mut self, policy: ToolPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// How arguments are checked and normalised (default: they must be a JSON object).
    pub fn prepare(
        mut self,
        f: impl Fn(&Value) -> Result<Value, ArgumentError> + Send + Sync + 'static,
    ) -> Self {
        self.prepare = Some(Arc::new(move |v: &Value| {
            f(v).map(|v| PreparedArguments::untyped(Cow::Owned(v)))
        }));
        self
    }

    /// The arguments are a `T`: each call's arguments are deserialised into it (a failure
    /// names the offending field) and the typed value, re-serialised, is what the
    /// fingerprint covers (defaults applied, aliases resolved). What `#[tool]` uses.
    ///
    /// ```
    /// use idem::{ToolClass, ToolContext, ToolDef, ToolError};
    /// use serde_json::{json, Value};
    ///
    /// #[derive(serde::Deserialize, serde::Serialize)]
    /// #[serde(deny_unknown_fields)]
    /// struct Page { #[serde(default)] n: u32 }
    ///
    /// let tool = ToolDef::builder("page", ToolClass::Read)
    ///     .description("Read a page.")
    ///     .input_schema(json!({"type": "object", "properties": {"n": {"type": "integer"}}}))
    ///     .typed_arguments::<Page>()
    ///     .handler(|_: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
    ///     .build()
    ///     .unwrap();
    /// # let _ = tool;
    /// ```
    pub fn typed_arguments<T>(mut self) -> Self
    where
        T: serde::de::DeserializeOwned + serde::Serialize + 'static,
    {
        self.prepare = Some(Arc::new(|v: &Value| {
            crate::args::normalise_borrowed::<T>(v).map(PreparedArguments::untyped)
        }));
        self
    }

    /// How arguments are checked and normalised, and the typed value the preparer read
    /// them into, which goes on to a handler set with [`handler_typed`](Self::handler_typed)
    /// when the arguments were already normal (so that it is exactly what the handler would
    /// read from them). What `#[tool]` uses.
    pub(crate) fn prepare_carried(
        mut self,
        f: impl for<'a> Fn(&'a Value) -> Result<PreparedArguments<'a>, ArgumentError>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        self.prepare = Some(Arc::new(f));
        self
    }

    /// The body (required).
    pub fn handler<F, Fut>(self, f: F) -> Self
    where
        F: Fn(ToolContext, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
    {
        self.handler_typed(move |ctx, args: &Value, _| f(ctx, args.clone()))
    }

    /// The body, lent the arguments rather than given a copy: what `#[tool]` uses, since it
    /// deserialises its typed parameters from the borrow before the future starts.
    ///
    /// ```
    /// use idem::{ToolClass, ToolContext, ToolDef, ToolError};
    /// use serde_json::{json, Value};
    ///
    /// let tool = ToolDef::builder("shout", ToolClass::Read)
    ///     .description("Upper-case a word.")
    ///     .input_schema(json!({"type": "object", "properties": {"word": {"type": "string"}}}))
    ///     .handler_ref(|_: ToolContext, args: &Value| {
    ///         let word = args["word"].as_str().unwrap_or_default().to_uppercase();
    ///         async move { Ok::<_, ToolError>(json!(word)) }
    ///     })
    ///     .build()
    ///     .unwrap();
    /// # let _ = tool;
    /// ```
    pub fn handler_ref<F, Fut>(self, f: F) -> Self
    where
        F: Fn(ToolContext, &Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
    {
        self.handler_typed(move |ctx, args: &Value, _| f(ctx, args))
    }

    /// The body, lent the arguments and given the typed value the preparer built, if any
    /// (see [`prepare_carried`](Self::prepare_carried)).
    pub(crate) fn handler_typed<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(ToolContext, &Value, Option<TypedArguments>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
    {
        self.handler = Some(Arc::new(
            move |ctx, args: &Value, typed: Option<TypedArguments>| Box::pin(f(ctx, args, typed)),
        ));
        self
    }

    /// A natural key computed from the normalised arguments.
    pub fn natural_key(
        mut self,
        f: impl Fn(&Value) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.natural_key = Some(Arc::new(f));
        self
    }

    /// Mark the argument at a JSON Pointer (`"/card_number"`) secret: it reaches the body as
    /// given, and is sealed in records, fingerprints and approval requests and cut out of
    /// error messages (see [`crate::redact`]). A dispatcher needs a
    /// [`SecretKey`](crate::SecretKey) to run such a tool. A pointer that is not one, or that
    /// names an argument the schema does not list, is refused by [`build`](Self::build).
    pub fn secret(mut self, pointer: impl Into<String>) -> Self {
        self.secrets.push(pointer.into());
        self
    }

    /// A verify hook: when a call's outcome is Unknown, the dispatcher asks it (with the
    /// call's context, whose key is the downstream key, and the arguments) whether the effect
    /// happened, and settles the record from its answer instead of refusing the call.
    pub fn verify<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(ToolContext, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Verified, ToolError>> + Send + 'static,
    {
        self.verify = Some(Arc::new(move |ctx, args| Box::pin(f(ctx, args))));
        self
    }

    /// An authorization check over each call's arguments and its run, in the authorize stage
    /// (before any record or effect): `Err` is the refusal the model reads
    /// ([`DispatchError::NotAuthorized`](crate::DispatchError::NotAuthorized)); say which
    /// rule failed, not the arguments' values. Every check given must pass, beside the
    /// tool's scopes and rules.
    ///
    /// ```
    /// use idem::{RunContext, ToolClass, ToolContext, ToolDef, ToolError};
    /// use serde_json::{json, Value};
    ///
    /// let cancel = ToolDef::builder("cancel_order", ToolClass::IdempotentWrite)
    ///     .description("Cancel one of the customer's orders.")
    ///     .input_schema(json!({"type": "object", "properties": {"customer_id": {"type": "string"}}}))
    ///     .authorize(|args: &Value, run: &RunContext| {
    ///         match args["customer_id"].as_str() == run.acting_for.as_deref() {
    ///             true => Ok(()),
    ///             false => Err("only the orders of the customer this run acts for".into()),
    ///         }
    ///     })
    ///     .handler(|_: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
    ///     .build()
    ///     .unwrap();
    /// # let _ = cancel;
    /// ```
    pub fn authorize(
        mut self,
        f: impl Fn(&Value, &RunContext) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.authorize.push(Arc::new(f));
        self
    }

    /// An authorization [`Rule`] over one argument: it must hold, or the call is refused
    /// naming it. Checked against the schema by [`build`](Self::build).
    pub fn authorize_rule(mut self, rule: Rule) -> Self {
        self.rules.authorize.push(rule);
        self
    }

    /// A check made after the claim and before the body starts, given the context and the
    /// arguments: that the world is still as the model saw it (the resource's version still
    /// the one it read). A failed check (`Err` of a terminal or not-applied [`ToolError`],
    /// saying what changed) is the call's outcome: a terminal refusal whose message begins
    /// "precondition failed, nothing was applied", with `{"precondition": why}` as its
    /// details, recorded and replayed like any refusal of the body, never counted as an
    /// effect. A check that could not be made (a retryable or ambiguous error) applied
    /// nothing: it is a not-applied error, tried again as the class allows. The body is
    /// created only once the check passed. Only for a write.
    ///
    /// The precondition guards the start of the effect, not its continuation. Its pass is
    /// journaled (`idem:precondition`, [`PRECONDITION_STEP`](super::PRECONDITION_STEP))
    /// before the body runs; from then on the call is under way, and an attempt that
    /// continues it (a retry, a take-over of a stopped worker's call, recovery's rerun)
    /// runs the body without asking again, since the check may now fail because of the
    /// call's own effect (a transfer whose debit step ran no longer finds the amount at its
    /// source). So does a call whose journal holds a step of the tool's own.
    ///
    /// Where the API takes an expected version (`If-Match`, `expected_version`), send it with
    /// the write too: only the API's compare-and-set closes the window between the check
    /// and the effect; the precondition tells the model early, and in its words.
    pub fn precondition<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(ToolContext, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), ToolError>> + Send + 'static,
    {
        self.precondition = Some(precondition_of(f));
        self
    }

    /// A precondition given as a function of borrowed arguments (what `#[tool]` uses).
    pub(crate) fn precondition_boxed(
        mut self,
        f: fn(ToolContext, &Value) -> super::BoxFuture<'static, Result<(), ToolError>>,
    ) -> Self {
        self.precondition = Some(Arc::new(f));
        self
    }

    /// How to undo one completed step ([`ToolContext::step`]) of the tool, given the
    /// step's journaled output and key ([`Undo`]). When a later step fails for good, the
    /// completed steps are undone in reverse order, each exactly once (journaled, resumed by
    /// whoever takes the call over after a crash), and the call is recorded as compensated,
    /// naming what was undone. A compensation that fails, or whose outcome is unknown,
    /// leaves the record Unknown for a person. Only for a write.
    pub fn compensate<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(ToolContext, Undo) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), ToolError>> + Send + 'static,
    {
        self.compensate = Some(Arc::new(move |ctx, undo| Box::pin(f(ctx, undo))));
        self
    }

    /// Where the tool was defined.
    pub fn location(mut self, file: &'static str, line: u32) -> Self {
        self.location = Some(Location { file, line });
        self
    }

    /// Say which policy settings were written out by the tool's author, so that
    /// [`build`](Self::build) also refuses those that would do nothing (see
    /// [`ToolPolicy::check`]): what a [`ToolSpec`](super::ToolSpec) does, and what any other
    /// format of tool definitions can do.
    ///
    /// ```
    /// use idem::tool::ExplicitSettings;
    /// use idem::{ToolClass, ToolContext, ToolDef, ToolError};
    /// use serde_json::{json, Value};
    ///
    /// let mut written = ExplicitSettings::default();
    /// written.ttl_secs = true;
    /// let err = ToolDef::builder("lookup", ToolClass::Read)
    ///     .description("Look a customer up.")
    ///     .input_schema(json!({"type": "object"}))
    ///     .handler(|_: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
    ///     .explicit_settings(written)
    ///     .build()
    ///     .unwrap_err();
    /// assert!(err.to_string().contains("`ttl_secs` has no effect on a `read` tool"), "{err}");
    /// ```
    pub fn explicit_settings(mut self, written: ExplicitSettings) -> Self {
        self.explicit = written;
        self
    }

    /// Check and finish the definition.
    pub fn build(mut self) -> Result<ToolDef, RegistryError> {
        // A `'static` name (every `#[tool]`) stays borrowed: contexts then share it for free.
        let name_cow = std::mem::take(&mut self.name);
        let name = name_cow.to_string();
        check_name(&name)?;
        let description = match self.description.take() {
            Some(d) if !d.trim().is_empty() => d,
            _ => {
                return Err(RegistryError::invalid(
                    name,
                    "a description is required: the model chooses tools by it",
                ));
            }
        };
        let Some(input_schema) = self.input_schema.take() else {
            return Err(RegistryError::invalid(name, "an input schema is required"));
        };
        if input_schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err(RegistryError::invalid(
                name,
                "the input schema's root must have `\"type\": \"object\"`",
            ));
        }
        for pointer in &self.secrets {
            if pointer.is_empty() {
                return Err(RegistryError::invalid(
                    name,
                    "a secret pointer must name one argument, e.g. \"/card_number\"; \
                     \"\" would seal the whole arguments",
                ));
            }
            if let Err(reason) = check_argument_pointer("secret", pointer, &input_schema) {
                return Err(RegistryError::invalid(name, reason));
            }
        }
        if let Err(reason) = idem_core::contract::check_version(&self.version) {
            return Err(RegistryError::invalid(name, reason));
        }
        let Some(handler) = self.handler.take() else {
            return Err(RegistryError::invalid(name, "a handler is required"));
        };
        let mut written = self.explicit;
        // A natural key attached as a function to a spec that wrote `on_key_reuse`: the
        // setting applies to it.
        written.natural_key |= written.on_key_reuse && self.natural_key.is_some();
        if let Err(e) = self.policy.check(self.class, &written) {
            return Err(RegistryError::invalid(name, e.to_string()));
        }
        self.check_controls(&name, &input_schema)?;
        let mut authorize = self.authorize;
        for rule in &self.rules.authorize {
            let rule = rule.clone();
            authorize.push(Arc::new(move |args: &Value, run: &RunContext| {
                rule.holds(args, run)
            }));
        }
        let mut approve_when = self.approve_when;
        for rule in &self.rules.approve_when {
            let rule = rule.clone();
            approve_when.push(Arc::new(move |args: &Value, run: &RunContext| {
                // A condition that cannot be judged asks a person.
                rule.selects(args, run)
            }));
        }
        let mut approvers_when = self.approvers_when;
        for rule in &self.rules.approvers_when {
            let when = rule.when.clone();
            approvers_when.push((
                rule.approvers,
                Arc::new(move |args: &Value, run: &RunContext| when.selects(args, run)),
            ));
        }
        let has_precondition = self.precondition.is_some();
        let handler = match self.precondition {
            Some(check) => guarded(handler, check),
            None => handler,
        };
        let prepare = self.prepare.unwrap_or_else(|| {
            Arc::new(|v: &Value| {
                require_object(v).map(|()| PreparedArguments::untyped(Cow::Borrowed(v)))
            })
        });
        Ok(ToolDef {
            name: match name_cow {
                Cow::Borrowed(b) => Cow::Borrowed(b),
                Cow::Owned(_) => Cow::Owned(name),
            },
            class: self.class,
            description,
            input_schema,
            output_schema: self.output_schema,
            policy: self.policy,
            prepare,
            handler,
            natural_key: self.natural_key,
            verify: self.verify,
            secrets: self.secrets,
            authorize,
            authorize_async: self.authorize_async,
            approve_when,
            approvers: self.approvers,
            approvers_when,
            rules: Arc::new(self.rules),
            has_precondition,
            compensate: self.compensate,
            undo: self.undo,
            on_failure_undo: self.on_failure_undo,
            escalate: self.escalate,
            location: self.location,
            version: self.version,
            contract: Arc::default(),
            validator: Arc::default(),
        })
    }
}
