//! A tool's definition as the registry and dispatcher hold it: name, class, description,
//! schemas, policy, and the functions that prepare its arguments, run it, key it and verify
//! it. What builds one is in `builder` and `spec`; what checks a call's arguments against
//! it is in `arguments`.

use std::any::Any;
use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, OnceLock};

use idem_core::{ToolClass, ToolError};
use serde_json::Value;

use super::BoxFuture;
use super::controls::{ApprovalSelector, Authorizer, Compensator, Rule};
use super::policy::ToolPolicy;
use crate::context::ToolContext;
use crate::error::ArgumentError;
use crate::schema::{ArgumentValidator, SchemaError};

/// A call's arguments already read into the tool's own arguments type (behind `dyn Any`,
/// since the registry does not know that type), by the [`Preparer`] while it checked them,
/// and handed on to the handler so that they are not deserialised a second time (what
/// `#[tool]` does).
pub type TypedArguments = Box<dyn Any + Send>;

/// What runs a tool: context and normalised arguments in, JSON output or a tool error out.
/// The arguments are lent: a body that needs them owned (or typed) takes what it needs
/// before its future starts, and a retry lends them again. The typed arguments of the
/// [`Preparer`], when it built them, come with the first attempt only.
pub type Handler = Arc<
    dyn Fn(
            ToolContext,
            &Value,
            Option<TypedArguments>,
        ) -> BoxFuture<'static, Result<Value, ToolError>>
        + Send
        + Sync,
>;

/// Checks and normalises arguments before anything else happens; arguments that are already
/// normal may come back borrowed.
pub type Preparer =
    Arc<dyn for<'a> Fn(&'a Value) -> Result<PreparedArguments<'a>, ArgumentError> + Send + Sync>;

/// What a [`Preparer`] gives: the normalised arguments, and the typed value they were read
/// into if the handler can take it instead of reading them again.
pub struct PreparedArguments<'a> {
    /// The normalised arguments (borrowed when they already were normal).
    pub arguments: Cow<'a, Value>,
    /// The typed arguments, exactly what the handler would deserialise from `arguments`.
    pub typed: Option<TypedArguments>,
}

impl<'a> PreparedArguments<'a> {
    /// Normalised arguments with no typed value.
    pub fn untyped(arguments: Cow<'a, Value>) -> Self {
        PreparedArguments {
            arguments,
            typed: None,
        }
    }
}

impl fmt::Debug for PreparedArguments<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreparedArguments")
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

/// A tool's argument validator, compiled once (at registration, or on first use) and shared
/// by the clones of its definition.
pub(crate) type CompiledValidator = Arc<OnceLock<Result<ArgumentValidator, SchemaError>>>;

/// The rules a tool was given as data ([`Rule`]), kept with its definition.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolRules {
    /// Authorization rules: each must hold.
    pub authorize: Vec<Rule>,
    /// Approval rules: a call for which one holds needs a person.
    pub approve_when: Vec<Rule>,
    /// Calls an approval rule selects need this many distinct approvers
    /// ([`ApproversWhen`](super::ApproversWhen)).
    pub approvers_when: Vec<super::ApproversWhen>,
    /// Limits across the calls of a run or a tenant ([`Limit`](super::Limit)).
    pub limits: Vec<super::Limit>,
    /// Rules on combinations: a call after an applied call of another tool in the same run
    /// ([`After`](super::After)).
    pub after: Vec<super::After>,
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
    /// Who may make a call, read from the call: functions and rules, all of which must pass.
    pub(crate) authorize: Vec<Authorizer>,
    /// Who may make a call, read from what it acts on: run in order after `authorize`.
    pub(crate) authorize_async: Vec<super::controls::AsyncAuthorizer>,
    /// Which calls need a person's approval besides every irreversible one: any that selects.
    pub(crate) approve_when: Vec<ApprovalSelector>,
    /// How many distinct people approve each call that needs approval (1 unless set).
    pub(crate) approvers: u8,
    /// Calls these select need approval by this many distinct people (rules and functions).
    pub(crate) approvers_when: Vec<(u8, ApprovalSelector)>,
    /// The rules written as data, for exports and operators.
    pub(crate) rules: Arc<ToolRules>,
    /// Whether a precondition guards each attempt (it is composed into the handler).
    pub(crate) has_precondition: bool,
    /// How a completed step of the tool is undone when a later one fails for good.
    pub(crate) compensate: Option<Compensator>,
    /// How an applied call of the tool is undone when its run is undone
    /// ([`ToolBuilder::undo`](crate::ToolBuilder::undo), `dispatch/undo_run.rs`).
    pub(crate) undo: Option<super::Undoer>,
    /// Which of the run's applied calls are undone when a call of the tool fails for good
    /// ([`ToolBuilder::on_failure_undo_run`](crate::ToolBuilder::on_failure_undo_run)).
    pub(crate) on_failure_undo: Option<crate::tool::UndoOptions>,
    /// Which calls that end badly are sent to a person
    /// ([`ToolBuilder::escalate`](crate::ToolBuilder::escalate), `dispatch/escalate.rs`).
    pub(crate) escalate: Option<crate::tool::Escalate>,
    pub(crate) location: Option<Location>,
    /// The handler's version (`#[tool(version = "...")]`, [`ToolBuilder::version`](crate::ToolBuilder::version)).
    pub(crate) version: Cow<'static, str>,
    /// The contract its calls are recorded under, made once for the TTL a dispatcher asks
    /// with (see [`ToolDef::contract`]), shared by clones.
    pub(crate) contract: Arc<std::sync::OnceLock<Arc<idem_core::Contract>>>,
    /// The compiled argument validator, shared by clones; see `ToolDef::arguments_validator`.
    pub(crate) validator: CompiledValidator,
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
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl ToolDef {
    /// Whether the tool has rules across a run's calls: limits, combinations.
    pub fn has_run_rules(&self) -> bool {
        !self.rules.limits.is_empty() || !self.rules.after.is_empty()
    }

    /// The registered name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The side-effect class.
    pub fn class(&self) -> ToolClass {
        self.class
    }

    /// The handler's version (default `"1"`).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The policy an approval of its calls is for: the class, the handler's version and each
    /// control, in words and in a fixed order. A pending request records it, and an approval
    /// decided under another one is refused when the call comes to use it, naming the change.
    ///
    /// ```
    /// use idem::{ToolClass, ToolContext, ToolDef, ToolError};
    /// use serde_json::{Value, json};
    ///
    /// let tool = ToolDef::builder("close_account", ToolClass::Irreversible)
    ///     .description("Close a customer's account for good.")
    ///     .version("3")
    ///     .input_schema(json!({"type": "object", "properties": {}}))
    ///     .handler(|_: ToolContext, _: Value| async { Ok::<_, ToolError>(json!(1)) })
    ///     .build()
    ///     .unwrap();
    /// let policy = tool.approval_policy();
    /// assert_eq!((policy.class.as_str(), policy.version.as_str()), ("irreversible", "3"));
    /// ```
    pub fn approval_policy(&self) -> idem_core::store::approvals::ApprovalPolicy {
        let rules = &self.rules;
        let mut controls = Vec::new();
        controls.extend(rules.authorize.iter().map(|r| format!("authorize: {r}")));
        if self.authorize.len() > rules.authorize.len() {
            let functions = self.authorize.len() - rules.authorize.len();
            controls.push(format!("authorize: {functions} function(s)"));
        }
        if !self.authorize_async.is_empty() {
            let checks = self.authorize_async.len();
            controls.push(format!("authorize_async: {checks} check(s)"));
        }
        controls.extend(
            rules
                .approve_when
                .iter()
                .map(|r| format!("approve_when: {r}")),
        );
        if self.approve_when.len() > rules.approve_when.len() {
            let functions = self.approve_when.len() - rules.approve_when.len();
            controls.push(format!("approve_when: {functions} function(s)"));
        }
        if self.approvers > 1 {
            controls.push(format!("{APPROVERS_CONTROL}{}", self.approvers));
        }
        controls.extend(
            rules
                .approvers_when
                .iter()
                .map(|r| format!("approvers_when: {} if {}", r.approvers, r.when)),
        );
        if self.approvers_when.len() > rules.approvers_when.len() {
            let functions = self.approvers_when.len() - rules.approvers_when.len();
            controls.push(format!("approvers_when: {functions} function(s)"));
        }
        controls.extend(rules.limits.iter().map(|l| format!("limit: {l:?}")));
        controls.extend(rules.after.iter().map(|a| format!("after: {a:?}")));
        controls.extend(self.policy.scopes.iter().map(|s| format!("scope: {s}")));
        controls.extend(self.secrets.iter().map(|s| format!("secret: {s}")));
        let present = [
            (self.has_precondition, "precondition"),
            (self.compensate.is_some(), "compensate"),
            (self.undo.is_some(), "undo"),
        ];
        controls.extend(
            present
                .iter()
                .filter(|(on, _)| *on)
                .map(|(_, c)| (*c).to_owned()),
        );
        if let Some(undo) = &self.on_failure_undo {
            controls.push(format!("on_failure_undo_run: {undo:?}"));
        }
        if let Some(escalate) = self.escalate {
            controls.push(format!("escalate: {escalate:?}"));
        }
        idem_core::store::approvals::ApprovalPolicy::new(
            self.class.as_str(),
            self.version.as_ref(),
            controls,
        )
    }

    /// The policy its calls are recorded under ([`idem_core::contract`]), with `ttl` the TTL
    /// the dispatcher keeps its records for.
    /// Made once per tool (every dispatch hands the same one to the store), and again only
    /// for another TTL.
    pub fn contract(&self, ttl: std::time::Duration) -> Arc<idem_core::Contract> {
        let make = || {
            Arc::new(idem_core::Contract {
                class: self.class,
                version: self.version.to_string(),
                natural_key: self.natural_key.is_some(),
                verify: self.verify.is_some(),
                ttl,
                lease: self.policy.lease,
                compensates: self.compensate.is_some(),
            })
        };
        let cached = self.contract.get_or_init(make);
        match cached.ttl == ttl {
            true => cached.clone(),
            false => make(),
        }
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

    /// The rules it was given as data.
    pub fn rules(&self) -> &ToolRules {
        &self.rules
    }

    /// Whether some calls of it (not only every call of an irreversible tool) may need a
    /// person's approval.
    pub fn may_need_approval(&self) -> bool {
        self.class.requires_approval()
            || !self.approve_when.is_empty()
            || !self.approvers_when.is_empty()
    }

    /// Whether this call needs a person's approval: every call of an irreversible tool, and
    /// the calls its approval rule selects.
    pub fn needs_approval(&self, args: &Value, run: &crate::run::RunContext) -> bool {
        self.class.requires_approval()
            || self.approve_when.iter().any(|f| f(args, run))
            || self.approvers_when.iter().any(|(_, f)| f(args, run))
    }

    /// How many distinct people must approve this call, if it needs approval: the tool's
    /// [`approvers`](crate::ToolBuilder::approvers), or more where an
    /// [`approvers_when`](crate::ToolBuilder::approvers_when) rule selects the call.
    pub fn approvers_for(&self, args: &Value, run: &crate::run::RunContext) -> u8 {
        self.approvers_when
            .iter()
            .filter(|(_, f)| f(args, run))
            .map(|(n, _)| *n)
            .fold(self.approvers.max(1), u8::max)
    }

    /// Whether an authorization check that may read runs before each call is keyed
    /// ([`ToolBuilder::authorize_async`](crate::ToolBuilder::authorize_async)).
    pub fn has_authorize_async(&self) -> bool {
        !self.authorize_async.is_empty()
    }

    /// Whether a precondition is checked before each attempt.
    pub fn has_precondition(&self) -> bool {
        self.has_precondition
    }

    /// Whether the tool undoes its completed steps when a later one fails for good.
    pub fn has_compensation(&self) -> bool {
        self.compensate.is_some()
    }

    /// Whether an applied call of the tool can be undone when its run is undone
    /// ([`Dispatcher::undo_run`](crate::Dispatcher::undo_run)).
    pub fn has_undo(&self) -> bool {
        self.undo.is_some()
    }

    /// Which of its calls that end badly go to a person
    /// ([`ToolBuilder::escalate`](crate::ToolBuilder::escalate)); `None`: none.
    pub fn escalates(&self) -> Option<crate::tool::Escalate> {
        self.escalate
    }
}

/// How an [`ApprovalPolicy`](idem_core::store::approvals::ApprovalPolicy) names the number
/// of approvers every call of the tool needs, when it is more than one.
const APPROVERS_CONTROL: &str = "approvers: ";

/// The number of distinct approvers every call under `policy` needs (a rule that asks more
/// for some calls aside): the tool's own count when the policy was made. What a desk without
/// the tools reads from the policy a call asked under.
pub(crate) fn approvers_of(policy: &idem_core::store::approvals::ApprovalPolicy) -> u8 {
    policy
        .controls
        .iter()
        .find_map(|c| c.strip_prefix(APPROVERS_CONTROL)?.parse().ok())
        .unwrap_or(1)
}
