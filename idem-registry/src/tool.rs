//! A tool's definition: name, class, description, schemas, policy and handler.

use std::any::Any;
use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use idem_core::{ToolClass, ToolError};
use serde::Deserialize;
use serde_json::Value;

use crate::args::ArgumentError;
use crate::context::ToolContext;
use crate::registry::RegistryError;

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Typed arguments a preparer built while checking a call, handed on to the handler so that
/// the arguments are not deserialised a second time (what `#[tool]` does).
pub type Typed = Box<dyn Any + Send>;

/// What runs a tool: context and normalised arguments in, JSON output or a tool error out.
/// The arguments are lent: a body that needs them owned (or typed) takes what it needs
/// before its future starts, and a retry lends them again. The typed arguments of the
/// [`Preparer`], when it built them, come with the first attempt only.
pub type Handler = Arc<
    dyn Fn(ToolContext, &Value, Option<Typed>) -> BoxFuture<'static, Result<Value, ToolError>>
        + Send
        + Sync,
>;

/// Checks and normalises arguments before anything else happens; arguments that are already
/// normal may come back borrowed.
pub type Preparer =
    Arc<dyn for<'a> Fn(&'a Value) -> Result<Prepared<'a>, ArgumentError> + Send + Sync>;

/// What a [`Preparer`] gives: the normalised arguments, and the typed value they were read
/// into if the handler can take it instead of reading them again.
pub struct Prepared<'a> {
    /// The normalised arguments (borrowed when they already were normal).
    pub arguments: Cow<'a, Value>,
    /// The typed arguments, exactly what the handler would deserialise from `arguments`.
    pub typed: Option<Typed>,
}

impl<'a> Prepared<'a> {
    /// Normalised arguments with no typed value.
    pub fn untyped(arguments: Cow<'a, Value>) -> Self {
        Prepared {
            arguments,
            typed: None,
        }
    }
}

impl fmt::Debug for Prepared<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prepared")
            .field("arguments", &self.arguments)
            .field("typed", &self.typed.is_some())
            .finish()
    }
}

/// Computes a natural key from the normalised arguments (find-or-create semantics).
pub type NaturalKey = Arc<dyn Fn(&Value) -> Option<String> + Send + Sync>;

/// What a verify hook found downstream about a call whose outcome was Unknown.
#[derive(Debug, Clone, PartialEq)]
pub enum Verified {
    /// The effect happened; this is the output to record and replay.
    Applied(Value),
    /// The effect certainly did not happen; the call may run.
    NotApplied,
}

impl Verified {
    /// The effect happened, with this output.
    ///
    /// ```
    /// # use idem_registry as idem;
    /// use idem::Verified;
    /// let v = Verified::applied(&serde_json::json!({"message_id": "m-1"})).unwrap();
    /// assert!(matches!(v, Verified::Applied(_)));
    /// ```
    pub fn applied<T: serde::Serialize>(output: &T) -> Result<Self, ToolError> {
        serde_json::to_value(output)
            .map(Verified::Applied)
            .map_err(|e| ToolError::ambiguous(format!("verified output cannot be serialised: {e}")))
    }
}

/// Asks the downstream system, by the call's key, whether an Unknown call's effect happened.
pub type Verifier = Arc<
    dyn Fn(ToolContext, Value) -> BoxFuture<'static, Result<Verified, ToolError>> + Send + Sync,
>;

/// Per-tool policy settings. Every field has a documented default. A duration longer than
/// [`LONGEST_POLICY_DURATION`] (ten years) is refused when the tool is built.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolPolicy {
    /// How long a completed record is kept for replay. Default 24 h (`ttl_secs`).
    pub ttl: Duration,
    /// How long a holder's lease lasts; it is renewed every third of it while the body runs.
    /// Default 30 s (`lease_secs`).
    pub lease: Duration,
    /// Attempts in total, first one included, for classes that retry. Default 3
    /// (`max_attempts`). `non_idempotent_write` is capped at 2 and `irreversible` at 1
    /// whatever this says.
    pub max_attempts: u32,
    /// How long a concurrent duplicate waits for the holder's outcome before getting
    /// `InProgress`. Default 10 s (`wait_secs`).
    pub wait: Duration,
    /// First retry delay; doubles per attempt, with jitter, up to 5 s. Default 100 ms
    /// (`backoff_ms`).
    pub backoff: Duration,
    /// MCP `openWorldHint`: the tool talks to systems outside the agent's control.
    /// Default `false` (`open_world`).
    pub open_world: bool,
    /// Scopes the principal must have been granted. Default none (`scopes`).
    pub scopes: Vec<String>,
    /// When a key arrives with arguments other than those recorded under it: `false`
    /// refuses the call with `KeyReused` (the default, `on_key_reuse = "reject"`); `true`
    /// replays the recorded outcome (`on_key_reuse = "replay"`), for find-or-create tools
    /// whose natural key is the identity of the effect and whose other arguments may vary.
    pub replay_on_key_reuse: bool,
    /// The settle delay: how long after a record became Unknown its verify hook may first be
    /// asked (`verify_after_secs`). Default 5 minutes; at least one lease is waited whatever
    /// this says. One rule for every Unknown record, whether the tool's own ambiguous error
    /// or an orphan (a holder whose lease expired) made it so, counted from the moment it
    /// became Unknown, on the store's clock. Until then a duplicate gets `OutcomeUnknown`
    /// with the time verification becomes possible.
    ///
    /// Why wait at all: a provider that timed out may commit the request later (a queued
    /// send, a payment confirmed asynchronously), and its lookup API may lag behind its
    /// writes; a hook asked too soon answers "not applied", and the call runs twice. Why five
    /// minutes: mail and payment APIs commonly time out clients at 30–80 s and settle a
    /// request within a couple of minutes of accepting it, and their sent logs, event lists
    /// and search indexes are documented as eventually consistent on that order; five
    /// minutes covers both with margin while an agent can still wait for it. A holder whose
    /// lease expired may also still be running: one lease more lets it notice (it renews
    /// every third of a lease and stops when refused) before anyone asks downstream.
    pub verify_after: Duration,
}

impl Default for ToolPolicy {
    fn default() -> Self {
        ToolPolicy {
            ttl: Duration::from_secs(24 * 3600),
            lease: Duration::from_secs(30),
            max_attempts: 3,
            wait: Duration::from_secs(10),
            backoff: Duration::from_millis(100),
            open_world: false,
            scopes: Vec::new(),
            replay_on_key_reuse: false,
            verify_after: DEFAULT_VERIFY_AFTER,
        }
    }
}

/// The default settle delay before a verify hook is asked about an Unknown record: 5 minutes
/// (see [`ToolPolicy::verify_after`] for why).
pub const DEFAULT_VERIFY_AFTER: Duration = Duration::from_secs(300);

impl ToolPolicy {
    /// Attempts this class may make in total.
    pub fn attempts_for(&self, class: ToolClass) -> u32 {
        let n = self.max_attempts.max(1);
        match class {
            ToolClass::Read | ToolClass::IdempotentWrite => n,
            ToolClass::NonIdempotentWrite => n.min(2),
            ToolClass::Irreversible => 1,
        }
    }
}

/// Where a tool was defined, for error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// Source file.
    pub file: &'static str,
    /// Line.
    pub line: u32,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// A complete tool definition, as the registry and dispatcher use it.
#[derive(Clone)]
pub struct ToolDef {
    pub(crate) name: Cow<'static, str>,
    pub(crate) class: ToolClass,
    pub(crate) description: Cow<'static, str>,
    pub(crate) input_schema: Arc<Value>,
    pub(crate) output_schema: Option<Arc<Value>>,
    pub(crate) policy: ToolPolicy,
    pub(crate) prepare: Preparer,
    pub(crate) handler: Handler,
    pub(crate) natural_key: Option<NaturalKey>,
    pub(crate) verify: Option<Verifier>,
    /// JSON Pointers of the secret arguments (see [`crate::redact`]).
    pub(crate) secrets: Vec<String>,
    pub(crate) location: Option<Location>,
    /// The compiled argument validator, shared by clones; see `ToolDef::arguments_validator`.
    pub(crate) validator: crate::validate::CompiledValidator,
}

impl fmt::Debug for ToolDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolDef")
            .field("name", &self.name)
            .field("class", &self.class)
            .field("policy", &self.policy)
            .field("natural_key", &self.natural_key.is_some())
            .field("verify", &self.verify.is_some())
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl ToolDef {
    /// Start a tool built at runtime. The class is a required argument: a tool cannot be
    /// constructed without one.
    ///
    /// ```
    /// # mod idem { pub use idem_core::*; pub use idem_registry::*; }
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
        }
    }

    /// The registered name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The side-effect class.
    pub fn class(&self) -> ToolClass {
        self.class
    }

    /// The description shown to the model.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The JSON schema of the arguments.
    pub fn input_schema(&self) -> &Value {
        &self.input_schema
    }

    /// The JSON schema of the output, if known.
    pub fn output_schema(&self) -> Option<&Value> {
        self.output_schema.as_deref()
    }

    /// The policy settings.
    pub fn policy(&self) -> &ToolPolicy {
        &self.policy
    }

    /// Whether the tool declares a verify hook.
    pub fn has_verify(&self) -> bool {
        self.verify.is_some()
    }

    /// Whether the tool declares a natural key.
    pub fn has_natural_key(&self) -> bool {
        self.natural_key.is_some()
    }

    /// Where the tool was defined, for tools declared with `#[tool]`.
    pub fn location(&self) -> Option<&Location> {
        self.location.as_ref()
    }

    /// The JSON Pointers of its secret arguments (see [`crate::redact`]).
    pub fn secrets(&self) -> &[String] {
        &self.secrets
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
            f(v).map(|v| Prepared::untyped(Cow::Owned(v)))
        }));
        self
    }

    /// The arguments are a `T`: each call's arguments are deserialised into it (a failure
    /// names the offending field) and the typed value, re-serialised, is what the
    /// fingerprint covers (defaults applied, aliases resolved). What `#[tool]` uses.
    ///
    /// ```
    /// # mod idem { pub use idem_core::*; pub use idem_registry::*; }
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
            crate::args::normalise_borrowed::<T>(v).map(Prepared::untyped)
        }));
        self
    }

    /// [`typed_arguments`](Self::typed_arguments) whose typed value goes on to a handler
    /// set with [`handler_typed`](Self::handler_typed), when the arguments were already
    /// normal (so that it is exactly what the handler would read from them).
    pub(crate) fn typed_arguments_carried<T>(mut self) -> Self
    where
        T: serde::de::DeserializeOwned + serde::Serialize + Send + 'static,
    {
        self.prepare = Some(Arc::new(|v: &Value| {
            crate::args::normalise_typed::<T>(v).map(|(arguments, typed)| Prepared {
                arguments,
                typed: typed.map(|t| Box::new(t) as Typed),
            })
        }));
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
    /// # mod idem { pub use idem_core::*; pub use idem_registry::*; }
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
    /// (see [`typed_arguments_carried`](Self::typed_arguments_carried)).
    pub(crate) fn handler_typed<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(ToolContext, &Value, Option<Typed>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
    {
        self.handler = Some(Arc::new(move |ctx, args: &Value, typed: Option<Typed>| {
            Box::pin(f(ctx, args, typed))
        }));
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

    /// Where the tool was defined.
    pub fn location(mut self, file: &'static str, line: u32) -> Self {
        self.location = Some(Location { file, line });
        self
    }

    /// Check and finish the definition.
    pub fn build(self) -> Result<ToolDef, RegistryError> {
        // A `'static` name (every `#[tool]`) stays borrowed: contexts then share it for free.
        let name_cow = self.name;
        let name = name_cow.to_string();
        crate::registry::check_name(&name)?;
        let description = match self.description {
            Some(d) if !d.trim().is_empty() => d,
            _ => {
                return Err(RegistryError::Invalid {
                    tool: name,
                    reason: "a description is required: the model chooses tools by it".into(),
                });
            }
        };
        let Some(input_schema) = self.input_schema else {
            return Err(RegistryError::Invalid {
                tool: name,
                reason: "an input schema is required".into(),
            });
        };
        if input_schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err(RegistryError::Invalid {
                tool: name,
                reason: "the input schema's root must have `\"type\": \"object\"`".into(),
            });
        }
        for pointer in &self.secrets {
            if pointer.is_empty() {
                return Err(RegistryError::Invalid {
                    tool: name,
                    reason: "a secret pointer must name one argument, e.g. \"/card_number\"; \
                             \"\" would seal the whole arguments"
                        .into(),
                });
            }
            if let Err(reason) = check_pointer("secret", pointer, &input_schema) {
                return Err(RegistryError::Invalid { tool: name, reason });
            }
        }
        let Some(handler) = self.handler else {
            return Err(RegistryError::Invalid {
                tool: name,
                reason: "a handler is required".into(),
            });
        };
        if self.policy.lease.is_zero() {
            return Err(RegistryError::Invalid {
                tool: name,
                reason: "the lease (`lease_secs`) must be longer than zero: a holder's lease \
                         of 0 s would expire before its body started"
                    .into(),
            });
        }
        if self.policy.ttl.is_zero() && self.class.records() {
            return Err(RegistryError::Invalid {
                tool: name,
                reason: "the TTL (`ttl_secs`) must be longer than zero: a record kept 0 s \
                         would never dedupe anything"
                    .into(),
            });
        }
        let policy = &self.policy;
        // Each in the unit of its `#[tool]` key: seconds, or milliseconds for the backoff.
        for (what, field, value, per_second, unit) in [
            ("TTL", "ttl_secs", policy.ttl, 1.0, "s"),
            ("lease", "lease_secs", policy.lease, 1.0, "s"),
            ("wait", "wait_secs", policy.wait, 1.0, "s"),
            ("backoff", "backoff_ms", policy.backoff, 1000.0, "ms"),
            (
                "settle delay",
                "verify_after_secs",
                policy.verify_after,
                1.0,
                "s",
            ),
        ] {
            if value > LONGEST_POLICY_DURATION {
                return Err(RegistryError::Invalid {
                    tool: name,
                    reason: format!(
                        "the {what} (`{field}`) of {} {unit} is longer than idem accepts: at \
                         most {} {unit} (ten years)",
                        value.as_secs_f64() * per_second,
                        LONGEST_POLICY_DURATION.as_secs_f64() * per_second
                    ),
                });
            }
        }
        let prepare = self.prepare.unwrap_or_else(|| {
            Arc::new(|v: &Value| {
                if v.is_object() {
                    Ok(Prepared::untyped(Cow::Borrowed(v)))
                } else {
                    Err(ArgumentError::new(
                        "",
                        format!(
                            "expected an object of named arguments, got {}",
                            crate::args::kind(v)
                        ),
                    ))
                }
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
            location: self.location,
            validator: Arc::default(),
        })
    }
}

/// The longest TTL, lease, wait or backoff a tool may set: ten years. Deadlines are computed
/// by adding these to the current time, which must not overflow.
pub const LONGEST_POLICY_DURATION: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// A tool definition read from data (configuration, another system). The class is
/// optional here only so that its absence can be refused with a clear error at
/// registration; see [`ToolSpec::into_def`]. The policy fields and their checks are those of
/// `#[tool]` (a record setting on a `read` tool, `"replay"` without a natural key, a duration
/// over ten years are refused), plus one only data needs: a natural key pointer naming an
/// argument the schema does not list is refused rather than left never to match. Read it
/// with serde; more fields may come, so it cannot be built field by field outside this crate.
///
/// ```
/// # use idem_registry as idem;
/// use idem::ToolSpec;
///
/// let spec: ToolSpec = serde_json::from_str(r#"{
///     "name": "open_ticket",
///     "class": "idempotent_write",
///     "description": "Open a support ticket, or find the one already open.",
///     "input_schema": {"type": "object", "properties": {
///         "customer": {"type": "string"}, "subject": {"type": "string"}}},
///     "ttl_secs": 604800,
///     "natural_key": ["/customer", "/subject"],
///     "on_key_reuse": "replay"
/// }"#).unwrap();
/// let def = spec.into_def(|_ctx, args| async move { Ok(args) }).unwrap();
/// assert!(def.has_natural_key());
/// assert_eq!(def.policy().ttl.as_secs(), 7 * 24 * 3600);
/// ```
#[derive(Debug, Clone, Deserialize)]
// The derived deserialiser is `ToolSpec::deserialize`; the trait's (below) wraps it to name
// the tool in every error.
#[serde(remote = "Self", deny_unknown_fields)]
#[non_exhaustive]
pub struct ToolSpec {
    /// The tool's name.
    pub name: String,
    /// Its class: required, checked at registration. A misspelled class is refused when the
    /// spec is read, with the nearest class.
    #[serde(default, deserialize_with = "class_by_name")]
    pub class: Option<ToolClass>,
    /// The description.
    pub description: String,
    /// The arguments' schema.
    #[serde(alias = "inputSchema", alias = "parameters")]
    pub input_schema: Value,
    /// MCP `openWorldHint`.
    #[serde(default)]
    pub open_world: bool,
    /// Required scopes.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// How long a completed record is kept for replay, in seconds (default 24 h; more than
    /// zero for a tool that records), as `#[tool(ttl_secs)]`.
    #[serde(default)]
    pub ttl_secs: Option<u64>,
    /// The holder's lease, in seconds (default 30; more than zero), as `#[tool(lease_secs)]`.
    #[serde(default)]
    pub lease_secs: Option<u64>,
    /// Attempts in total, first one included (default 3; capped by the class), as
    /// `#[tool(max_attempts)]`.
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// How long a concurrent duplicate waits for the holder, in seconds (default 10), as
    /// `#[tool(wait_secs)]`.
    #[serde(default)]
    pub wait_secs: Option<u64>,
    /// The first retry delay, in milliseconds (default 100), as `#[tool(backoff_ms)]`.
    #[serde(default)]
    pub backoff_ms: Option<u64>,
    /// The natural key: [JSON Pointers](https://www.rfc-editor.org/rfc/rfc6901) into the
    /// arguments whose values together are the identity of the effect (find-or-create), as
    /// `#[tool(natural_key)]` does with a function. A call whose arguments lack one of them,
    /// or hold `null` there, has no natural key and is keyed by its ids instead. Strings are
    /// normalised to Unicode NFC for the key, so every spelling of the same text finds the
    /// same record. Empty (the default): no natural key.
    #[serde(default)]
    pub natural_key: Vec<String>,
    /// `"reject"` (the default) or `"replay"`, as `#[tool(on_key_reuse)]`.
    #[serde(default)]
    pub on_key_reuse: Option<String>,
    /// The settle delay before an Unknown record is verified, in seconds (default 300), as
    /// `#[tool(verify_after_secs)]`; see [`ToolPolicy::verify_after`].
    #[serde(default)]
    pub verify_after_secs: Option<u64>,
    /// JSON Pointers of secret arguments, as `#[secret]` on a `#[tool]` parameter (see
    /// [`crate::redact`]).
    #[serde(default)]
    pub secret: Vec<String>,
}

impl<'de> Deserialize<'de> for ToolSpec {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = Value::deserialize(deserializer)?;
        let name = value
            .get("name")
            .and_then(Value::as_str)
            .map(|n| format!("tool `{n}`: "))
            .unwrap_or_default();
        ToolSpec::deserialize(value).map_err(|e| D::Error::custom(format!("{name}{e}")))
    }
}

/// A class given by name, refused with the nearest class's name when misspelled.
fn class_by_name<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<ToolClass>, D::Error> {
    let name = Option::<String>::deserialize(deserializer)?;
    name.map(|n| n.parse::<ToolClass>().map_err(serde::de::Error::custom))
        .transpose()
}

impl ToolSpec {
    /// Turn the spec into a definition with the given handler. A spec without a class is
    /// refused with [`RegistryError::MissingClass`] naming the tool.
    ///
    /// ```
    /// # use idem_registry as idem;
    /// use idem::{RegistryError, ToolSpec};
    ///
    /// let spec: ToolSpec = serde_json::from_str(
    ///     r#"{"name": "wire_money", "description": "Wire money.", "input_schema": {"type": "object"}}"#,
    /// ).unwrap();
    /// let err = spec.into_def(|_ctx, args| async move { Ok(args) }).unwrap_err();
    /// assert!(matches!(err, RegistryError::MissingClass { ref tool } if tool == "wire_money"));
    /// ```
    pub fn into_def<F, Fut>(self, handler: F) -> Result<ToolDef, RegistryError>
    where
        F: Fn(ToolContext, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
    {
        let Some(class) = self.class else {
            return Err(RegistryError::MissingClass { tool: self.name });
        };
        let invalid = |reason: String| RegistryError::Invalid {
            tool: self.name.clone(),
            reason,
        };
        let defaults = ToolPolicy::default();
        let replay_on_key_reuse = match self.on_key_reuse.as_deref() {
            None | Some("reject") => false,
            Some("replay") => true,
            Some(other) => {
                return Err(invalid(format!(
                    "unknown `on_key_reuse` policy `{other}`: expected \"reject\" (the default) \
                     or \"replay\""
                )));
            }
        };
        for pointer in &self.natural_key {
            check_pointer("natural_key", pointer, &self.input_schema).map_err(&invalid)?;
        }
        if self.max_attempts == Some(0) {
            return Err(invalid(
                "`max_attempts` counts the first attempt: it must be at least 1".into(),
            ));
        }
        if replay_on_key_reuse && self.natural_key.is_empty() {
            return Err(invalid(
                "`on_key_reuse = \"replay\"` applies only to calls keyed by a natural key: \
                 add `natural_key`, or remove `on_key_reuse`"
                    .into(),
            ));
        }
        if !class.records() {
            // A read records nothing: these settings would silently do nothing.
            let unused = [
                ("ttl_secs", self.ttl_secs.is_some()),
                ("lease_secs", self.lease_secs.is_some()),
                ("wait_secs", self.wait_secs.is_some()),
                ("natural_key", !self.natural_key.is_empty()),
                ("on_key_reuse", self.on_key_reuse.is_some()),
                ("verify_after_secs", self.verify_after_secs.is_some()),
            ];
            if let Some((field, _)) = unused.iter().find(|(_, set)| *set) {
                return Err(invalid(format!(
                    "`{field}` has no effect on a `read` tool, which records nothing: remove \
                     it, or give the tool the class of a write"
                )));
            }
        }
        let policy = ToolPolicy {
            ttl: self.ttl_secs.map_or(defaults.ttl, Duration::from_secs),
            lease: self.lease_secs.map_or(defaults.lease, Duration::from_secs),
            max_attempts: self.max_attempts.unwrap_or(defaults.max_attempts),
            wait: self.wait_secs.map_or(defaults.wait, Duration::from_secs),
            backoff: self
                .backoff_ms
                .map_or(defaults.backoff, Duration::from_millis),
            open_world: self.open_world,
            scopes: self.scopes,
            replay_on_key_reuse,
            verify_after: self
                .verify_after_secs
                .map_or(defaults.verify_after, Duration::from_secs),
        };
        let mut builder = ToolDef::builder(self.name, class)
            .description(self.description)
            .input_schema(self.input_schema)
            .policy(policy)
            .handler(handler);
        for pointer in self.secret {
            builder = builder.secret(pointer);
        }
        if !self.natural_key.is_empty() {
            let pointers = self.natural_key;
            builder = builder.natural_key(move |args| natural_key_at(args, &pointers));
        }
        builder.build()
    }
}

/// Refuse a `natural_key` entry that is not a JSON Pointer, or that names an argument the
/// schema does not list (when it lists them): a typo would otherwise never match, and every
/// call would quietly be keyed by its ids instead.
fn check_pointer(field: &str, pointer: &str, schema: &Value) -> Result<(), String> {
    if pointer.is_empty() {
        return Ok(());
    }
    let Some(path) = pointer.strip_prefix('/') else {
        let fix = pointer.trim_start_matches('#').trim_start_matches('/');
        let fix = if fix.is_empty() {
            "`\"\"` for the whole arguments".to_owned()
        } else {
            format!("`/{fix}`")
        };
        return Err(format!(
            "`{field}` entry `{pointer}` is not a JSON Pointer, which starts with `/`: \
             write {fix}"
        ));
    };
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Ok(());
    };
    // Arguments the schema admits without listing them: the pointer may name one of those.
    let closed = |keyword: &str| schema.get(keyword).is_none_or(|v| *v == Value::Bool(false));
    let unlisted_admitted = !closed("additionalProperties")
        || !closed("unevaluatedProperties")
        || ["patternProperties", "$ref", "dependentSchemas"]
            .iter()
            .any(|k| schema.get(*k).is_some());
    if unlisted_admitted {
        return Ok(());
    }
    let first = path.split('/').next().unwrap_or_default();
    let first = first.replace("~1", "/").replace("~0", "~");
    if properties.contains_key(&first) {
        return Ok(());
    }
    let known: Vec<&str> = properties.keys().map(String::as_str).collect();
    let known = if known.is_empty() {
        "it lists none".to_owned()
    } else {
        format!("it lists: {}", known.join(", "))
    };
    Err(format!(
        "`{field}` entry `{pointer}` names the argument `{first}`, which the input schema \
         does not list ({known}; `\"\"` stands for the whole arguments)"
    ))
}

/// The natural key of a [`ToolSpec`]: the values at `pointers`, as one canonical JSON array
/// (unambiguous whatever the values hold), or none if one of them is missing or `null`.
/// Every string in them (object keys included) is normalised to Unicode NFC first, so that
/// "José" typed precomposed or decomposed finds the same record.
fn natural_key_at(args: &Value, pointers: &[String]) -> Option<String> {
    let values = pointers
        .iter()
        .map(|p| args.pointer(p).filter(|v| !v.is_null()).map(nfc))
        .collect::<Option<Vec<Value>>>()?;
    Some(idem_core::canonical_json(&Value::Array(values)))
}

/// A copy of `value` with every string in Unicode Normalization Form C.
fn nfc(value: &Value) -> Value {
    use unicode_normalization::UnicodeNormalization;
    let text = |s: &str| -> String {
        // Most text is NFC already: skip the rebuild.
        if unicode_normalization::is_nfc(s) {
            s.to_owned()
        } else {
            s.nfc().collect()
        }
    };
    match value {
        Value::String(s) => Value::String(text(s)),
        Value::Array(items) => Value::Array(items.iter().map(nfc).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (text(k), nfc(v))).collect()),
        other => other.clone(),
    }
}

/// A tool declared with `#[tool]`: the macro implements this for the type it declares.
pub trait StaticTool {
    /// The registered name.
    const NAME: &'static str;
    /// The class.
    const CLASS: ToolClass;
    /// Build the definition.
    fn definition() -> ToolDef;
}

/// What `#[tool]` submits to the link-time registry.
#[derive(Debug)]
pub struct ToolRegistration {
    /// Builds the definition.
    pub build: fn() -> ToolDef,
    /// The tool's name, for duplicate checks without building.
    pub name: &'static str,
    /// Where it was defined.
    pub location: Location,
}

impl ToolRegistration {
    /// Used by the macro.
    pub const fn new(
        name: &'static str,
        build: fn() -> ToolDef,
        file: &'static str,
        line: u32,
    ) -> Self {
        ToolRegistration {
            build,
            name,
            location: Location { file, line },
        }
    }
}

inventory::collect!(ToolRegistration);
