//! A tool definition read from data (configuration, another system): [`ToolSpec`], checked
//! as `#[tool]` is, and its natural key computed from JSON Pointers into the arguments.

use std::future::Future;
use std::time::Duration;

use idem_core::{ToolClass, ToolError};
use serde::Deserialize;
use serde_json::Value;

use super::builder::ToolBuilder;
use super::controls::Rule;
use super::definition::ToolDef;
use super::policy::{ExplicitSettings, ToolPolicy};
use crate::context::ToolContext;
use crate::error::RegistryError;
use crate::schema::check_argument_pointer;

/// A tool definition read from data (configuration, another system). The class is
/// optional here only so that its absence can be refused with a clear error at
/// registration; see [`ToolSpec::into_def`]. The policy fields and their checks are those of
/// `#[tool]` (a record setting on a `read` tool, `"replay"` without a natural key, a duration
/// over ten years are refused), plus one only data needs: a natural key pointer naming an
/// argument the schema does not list is refused rather than left never to match. Read it
/// with serde; more fields may come, so it cannot be built field by field outside this crate.
///
/// ```
/// use idem::ToolSpec;
///
/// let spec: ToolSpec = serde_json::from_str(r#"{
///     "name": "open_ticket",
///     "class": "idempotent_write",
///     "description": "Open a support ticket, or find the one already open.",
///     "input_schema": {"type": "object", "properties": {
///         "customer": {"type": "string"}, "subject": {"type": "string"}}},
///     "ttl_secs": 604800,
///     "natural_key": ["/customer", "/subject"]
/// }"#).unwrap();
/// let def = spec.into_def(|_ctx, args| async move { Ok(args) }).unwrap();
/// assert!(def.has_natural_key());
/// assert_eq!(def.policy().ttl.as_secs(), 7 * 24 * 3600);
/// ```
///
/// Rules read the call and the run: here a refund must be for the customer the run acts for,
/// and one above the run's limit waits for a person.
///
/// ```
/// use idem::ToolSpec;
///
/// let spec: ToolSpec = serde_json::from_value(serde_json::json!({
///     "name": "refund",
///     "class": "non_idempotent_write",
///     "description": "Refund part of an order.",
///     "input_schema": {"type": "object", "properties": {
///         "customer_id": {"type": "string"}, "amount": {"type": "integer"}}},
///     "authorize": [{"pointer": "/customer_id", "equals": {"run": "acting_for"}}],
///     "approve_when": [{"pointer": "/amount", "above": {"limit": "refund"}}]
/// })).unwrap();
/// let def = spec.into_def(|_ctx, args| async move { Ok(args) }).unwrap();
/// assert!(def.may_need_approval());
///
/// // A rule on an argument the schema lacks is refused, naming the tool and the rule.
/// let bad: ToolSpec = serde_json::from_value(serde_json::json!({
///     "name": "refund",
///     "class": "non_idempotent_write",
///     "description": "Refund part of an order.",
///     "input_schema": {"type": "object", "properties": {"amount": {"type": "integer"}}},
///     "authorize": [{"pointer": "/customer", "equals": {"run": "acting_for"}}]
/// })).unwrap();
/// let err = bad.into_def(|_ctx, args| async move { Ok(args) }).unwrap_err().to_string();
/// assert!(err.contains("refund") && err.contains("`/customer`"), "{err}");
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
    /// What a call under the natural key with other arguments gets: `"replay"` (the default:
    /// find-or-create, the recorded outcome) or `"reject"` (`KeyReused`), as
    /// `#[tool(on_key_reuse)]`; only with a `natural_key`.
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
    /// The handler's version, recorded with every call (default `"1"`), as
    /// `#[tool(version)]`; see [`idem_core::contract`].
    #[serde(default)]
    pub version: Option<String>,
    /// Authorization rules over the arguments and the run ([`Rule`]): each must hold, or the
    /// call is refused naming it, before anything is recorded or run; as
    /// `#[tool(authorize)]` does with a function. A rule on a pointer the schema lacks, or a
    /// comparison the argument's type cannot make, is refused at registration.
    #[serde(default)]
    pub authorize: Vec<Rule>,
    /// Approval rules ([`Rule`]): a call for which one holds (or which one cannot judge)
    /// needs a person's approval, as `#[tool(approve_when)]`; for a write that is not
    /// `irreversible` (which always needs one).
    #[serde(default)]
    pub approve_when: Vec<Rule>,
    /// Four eyes: how many distinct people approve each call that needs approval, as
    /// [`ToolBuilder::approvers`] (default 1).
    #[serde(default)]
    pub approvers: Option<u8>,
    /// Four eyes by rule ([`ApproversWhen`](super::ApproversWhen)), as
    /// [`ToolBuilder::approvers_rule`]: `{"approvers": 2, "when": {"pointer": "/amount",
    /// "above": 10000}}`.
    #[serde(default)]
    pub approvers_when: Vec<super::ApproversWhen>,
    /// Limits across the calls of a run or a tenant ([`Limit`](super::Limit)), as
    /// [`ToolBuilder::limit`]: `{"name": "refunds per run", "max": 3}`.
    #[serde(default)]
    pub limits: Vec<super::Limit>,
    /// Combination rules ([`After`](super::After)), as [`ToolBuilder::after`]:
    /// `{"tool": "drop_database", "then": "ask"}`.
    #[serde(default)]
    pub after: Vec<super::After>,
    /// Which calls that end badly are sent to a person ([`Escalate`](super::Escalate)), as
    /// [`ToolBuilder::escalate`]: `"failures"`, `"unknown"` or `"failures_and_unknown"`.
    #[serde(default)]
    pub escalate: Option<super::Escalate>,
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
    /// use idem::registry::RegistryError; use idem::ToolSpec;
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
        self.into_builder(handler)?.build()
    }

    /// The spec as a [`ToolBuilder`] with the given handler, for what data cannot say: a
    /// verify hook ([`ToolBuilder::verify`]) or a natural key computed by a function
    /// ([`ToolBuilder::natural_key`], which replaces the spec's `natural_key` pointers).
    /// What the spec says is checked here and by [`ToolBuilder::build`], as by
    /// [`into_def`](Self::into_def).
    ///
    /// ```
    /// use idem::{ToolContext, ToolSpec, Verified};
    /// use serde_json::{Value, json};
    ///
    /// let spec: ToolSpec = serde_json::from_value(json!({
    ///     "name": "send_invoice",
    ///     "class": "non_idempotent_write",
    ///     "description": "Send an invoice.",
    ///     "input_schema": {"type": "object", "properties": {
    ///         "customer": {"type": "string"}, "month": {"type": "string"}}}
    /// })).unwrap();
    /// let def = spec
    ///     .into_builder(|ctx: ToolContext, _args: Value| async move {
    ///         Ok(json!({"sent": ctx.idempotency_key()}))
    ///     })
    ///     .unwrap()
    ///     .natural_key(|args: &Value| {
    ///         Some(format!("{}|{}", args["customer"].as_str()?, args["month"].as_str()?.to_lowercase()))
    ///     })
    ///     // Asked about an Unknown outcome: look the invoice up by its key.
    ///     .verify(|_ctx: ToolContext, _args: Value| async move { Ok(Verified::NotApplied) })
    ///     .build()
    ///     .unwrap();
    /// assert!(def.has_natural_key());
    /// ```
    pub fn into_builder<F, Fut>(self, handler: F) -> Result<ToolBuilder, RegistryError>
    where
        F: Fn(ToolContext, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
    {
        let Some(class) = self.class else {
            return Err(RegistryError::MissingClass { tool: self.name });
        };
        let invalid = |reason: String| RegistryError::invalid(&self.name, reason);
        let defaults = ToolPolicy::default();
        let replay_on_key_reuse = match self.on_key_reuse.as_deref() {
            None | Some("replay") => true,
            Some("reject") => false,
            Some(other) => {
                return Err(invalid(format!(
                    "unknown `on_key_reuse` policy `{other}`: expected \"replay\" (the default: \
                     find-or-create) or \"reject\""
                )));
            }
        };
        for pointer in &self.natural_key {
            check_argument_pointer("natural_key", pointer, &self.input_schema).map_err(&invalid)?;
        }
        // The builder checks the policy; it is told which settings the spec wrote out, so that
        // those that would do nothing are refused too.
        let written = ExplicitSettings {
            ttl_secs: self.ttl_secs.is_some(),
            lease_secs: self.lease_secs.is_some(),
            max_attempts: self.max_attempts.is_some(),
            wait_secs: self.wait_secs.is_some(),
            natural_key: !self.natural_key.is_empty(),
            on_key_reuse: self.on_key_reuse.is_some(),
            verify_after_secs: self.verify_after_secs.is_some(),
        };
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
            .explicit_settings(written)
            .handler(handler);
        for pointer in self.secret {
            builder = builder.secret(pointer);
        }
        for rule in self.authorize {
            builder = builder.authorize_rule(rule);
        }
        for rule in self.approve_when {
            builder = builder.approve_rule(rule);
        }
        if let Some(n) = self.approvers {
            builder = builder.approvers(n);
        }
        for rule in self.approvers_when {
            builder = builder.approvers_rule(rule.approvers, rule.when);
        }
        for limit in self.limits {
            builder = builder.limit(limit);
        }
        for rule in self.after {
            builder = builder.after(rule);
        }
        if let Some(which) = self.escalate {
            builder = builder.escalate(which);
        }
        if let Some(version) = self.version {
            builder = builder.version(version);
        }
        if !self.natural_key.is_empty() {
            let pointers = self.natural_key;
            builder = builder.natural_key(move |args| natural_key_at(args, &pointers));
        }
        Ok(builder)
    }
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
