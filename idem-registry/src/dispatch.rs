//! The dispatcher: takes calls as a model emits them and applies the class's policy.
//!
//! Order of checks (ARCHITECTURE §8): unknown tool → arguments → permissions → key →
//! approval → claim → execute → record. Every refusal happens before any record is written
//! and before any effect.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::FutureExt;
use idem_core::{
    Claim, ClaimRequest, Fence, Fingerprint, IdempotencyKey, JournalEntry, KeyMaterial, LogicalKey,
    Outcome, Record, RecordKey, RecordState, Store, StoreError, Timestamp, ToolClass, ToolError,
    canonical_json,
};
use serde_json::Value;
use tracing::Instrument;

use crate::approval::{Approval, ApprovalRequest};
use crate::context::{ContextParts, ToolContext};
use crate::heartbeat::{self, Registration};
use crate::redact::SecretKey;
use crate::registry::Registry;
use crate::tool::{PreparedArguments, ToolDef, TypedArguments, Verified};

/// A tool call as the model emitted it.
///
/// ```
/// # use idem_registry as idem;
/// use idem::ToolCall;
/// use serde_json::json;
///
/// let call = ToolCall::new("send_email", json!({"to": "a@example.com"})).with_call_id("call_abc");
/// assert_eq!(call.name, "send_email");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The tool's name.
    pub name: String,
    /// The arguments, as JSON.
    pub arguments: Value,
    /// The provider's tool call id, if any.
    pub call_id: Option<String>,
    /// A key the caller supplies explicitly; it wins over everything else.
    pub key: Option<String>,
    /// The call's position among the calls the model made in one step (parallel tool
    /// calls). Part of the run/step key, so two calls of one step never share a record.
    pub index: u32,
}

impl ToolCall {
    /// A call without a call id or explicit key.
    pub fn new(name: impl Into<String>, arguments: Value) -> Self {
        ToolCall {
            name: name.into(),
            arguments,
            call_id: None,
            index: 0,
            key: None,
        }
    }

    /// Attach the provider's call id.
    pub fn with_call_id(mut self, id: impl Into<String>) -> Self {
        self.call_id = Some(id.into());
        self
    }

    /// Set the call's position among the parallel calls of its step.
    pub fn with_index(mut self, index: u32) -> Self {
        self.index = index;
        self
    }

    /// Attach an explicit key.
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }
}

/// The run a call belongs to: who it acts for, what they may do, what was approved.
///
/// ```
/// # use idem_registry as idem;
/// use idem::RunContext;
///
/// let run = RunContext::new("tenant-42").with_run("run-7", 3).grant("tickets:write");
/// assert_eq!(run.tenant, "tenant-42");
/// ```
// No `Default`: a forgotten tenant would silently put every caller's records in one scope.
#[derive(Debug, Clone, PartialEq)]
pub struct RunContext {
    /// The run id.
    pub run_id: Option<String>,
    /// The step within the run.
    pub step: Option<u64>,
    /// The tenant or principal. Two tenants never share a record.
    pub tenant: String,
    /// Scopes granted to the principal.
    pub scopes: BTreeSet<String>,
    /// Approvals for irreversible calls.
    pub approvals: Vec<Approval>,
}

impl RunContext {
    /// A context for a tenant.
    pub fn new(tenant: impl Into<String>) -> Self {
        RunContext {
            run_id: None,
            step: None,
            tenant: tenant.into(),
            scopes: BTreeSet::new(),
            approvals: Vec::new(),
        }
    }

    /// Set the run id and step.
    pub fn with_run(mut self, run_id: impl Into<String>, step: u64) -> Self {
        self.run_id = Some(run_id.into());
        self.step = Some(step);
        self
    }

    /// Move to another step of the same run.
    pub fn at_step(mut self, step: u64) -> Self {
        self.step = Some(step);
        self
    }

    /// Grant a scope.
    pub fn grant(mut self, scope: impl Into<String>) -> Self {
        self.scopes.insert(scope.into());
        self
    }

    /// Add an approval.
    pub fn approve(mut self, approval: Approval) -> Self {
        self.approvals.push(approval);
        self
    }
}

/// A dispatched call's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Dispatched {
    /// The tool's output.
    pub output: Value,
    /// The output as the JSON text recorded (identical on every replay).
    pub output_json: String,
    /// Whether this is a replay of a recorded outcome rather than a new execution.
    pub deduplicated: bool,
    /// The key handed downstream (`None` for a read without key material).
    pub key: Option<IdempotencyKey>,
    /// Executions of the body in this dispatch (0 for a replay).
    pub attempts: u32,
    /// The tool's class.
    pub class: ToolClass,
}

/// Why a call was refused or did not succeed. Every variant names the tool.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum DispatchError {
    /// No tool by that name.
    #[error("unknown tool `{name}`{}", suggestion.as_ref().map(|s| format!("; did you mean `{s}`?")).unwrap_or_default())]
    UnknownTool {
        /// The name called.
        name: String,
        /// The nearest registered name.
        suggestion: Option<String>,
    },
    /// The arguments do not fit the schema; nothing was recorded or executed.
    #[error("invalid arguments for `{tool}` at `{pointer}`: {message}")]
    InvalidArguments {
        /// The tool.
        tool: String,
        /// JSON pointer to the offending value.
        pointer: String,
        /// The violated rule.
        message: String,
    },
    /// The tool has secret arguments and the dispatcher no key to seal them with
    /// ([`Dispatcher::with_secret_key`]); nothing was recorded or run.
    #[error(
        "`{tool}` has secret arguments and this dispatcher has no key to seal them with: configure one with `Dispatcher::with_secret_key`"
    )]
    SecretKeyMissing {
        /// The tool.
        tool: String,
    },
    /// The principal lacks scopes the tool requires.
    #[error("permission denied for `{tool}`: missing scope(s) {}", missing.join(", "))]
    PermissionDenied {
        /// The tool.
        tool: String,
        /// The scopes not granted.
        missing: Vec<String>,
    },
    /// A write call came with no key material (no explicit key, call id, run/step or
    /// natural key); it was not executed.
    #[error(
        "`{tool}` is a {class} tool and the call has no key: pass the provider's call id, an explicit key, or a run id and step"
    )]
    MissingKey {
        /// The tool.
        tool: String,
        /// Its class.
        class: ToolClass,
    },
    /// An irreversible call without an approval for this key and these arguments.
    #[error("`{}` is irreversible and needs approval for key {} with these exact arguments", request.tool, request.key)]
    ApprovalRequired {
        /// What to approve.
        request: Box<ApprovalRequest>,
    },
    /// The key was used before with other arguments.
    #[error(
        "key {key} of `{tool}` was already used with other arguments; use a new key for a new call"
    )]
    KeyReused {
        /// The tool.
        tool: String,
        /// The key.
        key: IdempotencyKey,
    },
    /// Another worker holds the key and did not finish within the wait bound.
    #[error("`{tool}` with key {key} is still running elsewhere; try again later")]
    InProgress {
        /// The tool.
        tool: String,
        /// The key.
        key: IdempotencyKey,
    },
    /// The effect may or may not have happened; it will not be re-executed automatically.
    /// With a verify hook, a call under this key after `retry_after` asks downstream and
    /// settles it; without one, an operator must.
    #[error("outcome of `{tool}` with key {key} is unknown since {}: {reason}; {}", since.to_rfc3339(), next_for_unknown(*retry_after))]
    OutcomeUnknown {
        /// The tool.
        tool: String,
        /// The key.
        key: IdempotencyKey,
        /// When it became unknown (store clock).
        since: Timestamp,
        /// Why.
        reason: String,
        /// When a call under this key will ask the tool's verify hook (store clock): wait
        /// until then and call again. `None` when no hook can settle it (the tool has none,
        /// or journaled steps make the effect partial): an operator must.
        retry_after: Option<Timestamp>,
    },
    /// This worker lost the key (its lease expired and another took over) before recording.
    #[error("`{tool}` with key {key}: this worker lost the key before recording its outcome")]
    Fenced {
        /// The tool.
        tool: String,
        /// The key.
        key: IdempotencyKey,
    },
    /// The store could not be reached (or, with Redis's `wait_for_replicas`, a write was not
    /// confirmed by the replicas). Before the claim this means nothing was executed (writes
    /// fail closed); while recording an outcome the body had already run, so treat it as
    /// ambiguous: the record is Unknown or its claim given back as the class says, or its
    /// lease will lapse.
    #[error("store unavailable for `{tool}`: {message}")]
    StoreUnavailable {
        /// The tool.
        tool: String,
        /// The store's message.
        message: String,
    },
    /// Any other store error, as the store reported it. Among them: a full store
    /// ([`StoreError::CapacityExceeded`]: nothing ran), an output larger than the store
    /// accepts ([`StoreError::TooLarge`]: the body ran, so its effect happened; the claim was
    /// given back if running the tool again is safe, otherwise the record is Unknown), an
    /// output nested deeper than a replay reads ([`StoreError::TooDeep`]: handled as
    /// `TooLarge`), a record that cannot be read back ([`StoreError::Corrupt`]). `StoreError` is
    /// non-exhaustive: match the cases you handle and keep a wildcard arm.
    #[error("store error for `{tool}`: {error}")]
    Store {
        /// The tool.
        tool: String,
        /// What the store reported.
        error: StoreError,
    },
    /// The tool returned an error. Terminal errors are recorded and replayed
    /// (`deduplicated: true` on a replay).
    #[error("`{tool}` failed ({}): {}", error.kind(), error.message())]
    ToolFailed {
        /// The tool.
        tool: String,
        /// The tool's error.
        error: ToolError,
        /// Executions in this dispatch.
        attempts: u32,
        /// Whether this is a replay of a recorded terminal error.
        deduplicated: bool,
    },
}

/// What a person reading an `OutcomeUnknown` should do next.
fn next_for_unknown(retry_after: Option<Timestamp>) -> String {
    match retry_after {
        Some(at) => format!(
            "its verify hook will be asked from {} on: call again then",
            at.to_rfc3339()
        ),
        None => "no verify hook can settle it: an operator must verify and resolve it".into(),
    }
}

impl DispatchError {
    /// A short, stable name of the variant, for logs and tables.
    pub fn code(&self) -> &'static str {
        match self {
            DispatchError::UnknownTool { .. } => "unknown_tool",
            DispatchError::InvalidArguments { .. } => "invalid_arguments",
            DispatchError::PermissionDenied { .. } => "permission_denied",
            DispatchError::SecretKeyMissing { .. } => "secret_key_missing",
            DispatchError::MissingKey { .. } => "missing_key",
            DispatchError::ApprovalRequired { .. } => "approval_required",
            DispatchError::KeyReused { .. } => "key_reused",
            DispatchError::InProgress { .. } => "in_progress",
            DispatchError::OutcomeUnknown { .. } => "outcome_unknown",
            DispatchError::Fenced { .. } => "fenced",
            DispatchError::StoreUnavailable { .. } => "store_unavailable",
            DispatchError::Store { .. } => "store_error",
            DispatchError::ToolFailed { .. } => "tool_failed",
        }
    }
}

/// Applies each tool's class policy to calls; see the module docs for the order of checks.
///
/// ```
/// # mod idem { pub use idem_core::*; pub use idem_registry::*; pub use idem_core::store::memory::MemoryStore; }
/// use std::sync::Arc;
/// use idem::{Dispatcher, MemoryStore, Registry, RunContext, ToolCall};
/// use idem::{ToolClass, ToolContext, ToolDef, ToolError};
/// use serde_json::{json, Value};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let set_status = ToolDef::builder("set_status", ToolClass::IdempotentWrite)
///     .description("Set a ticket's status.")
///     .input_schema(json!({"type": "object"}))
///     .handler(|ctx: ToolContext, args: Value| async move { Ok::<_, ToolError>(json!({"ok": true})) })
///     .build()
///     .unwrap();
/// let registry = Registry::builder().add(set_status).build().unwrap();
/// let dispatcher = Dispatcher::new(registry, Arc::new(MemoryStore::new()));
/// let call = ToolCall::new("set_status", json!({"status": "open"})).with_call_id("call_1");
/// let run = RunContext::new("tenant-a");
/// let first = dispatcher.dispatch(&call, &run).await.unwrap();
/// let again = dispatcher.dispatch(&call, &run).await.unwrap();
/// assert!(!first.deduplicated && again.deduplicated);
/// assert_eq!(first.output_json, again.output_json);
/// # }
/// ```
#[derive(Clone)]
pub struct Dispatcher {
    registry: Arc<Registry>,
    store: Arc<dyn Store>,
    namespace: String,
    max_argument_bytes: usize,
    secret_key: Option<SecretKey>,
}

/// The largest arguments a recorded call may have unless
/// [`Dispatcher::with_max_argument_bytes`] says otherwise: 1 MiB, as the stores' default
/// limit on an outcome.
pub const DEFAULT_MAX_ARGUMENT_BYTES: usize = 1024 * 1024;

impl fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dispatcher")
            .field("namespace", &self.namespace)
            .field("tools", &self.registry.len())
            .field("store", &self.store)
            .finish()
    }
}

/// The namespace used unless [`Dispatcher::with_namespace`] says otherwise.
pub const DEFAULT_NAMESPACE: &str = "default";

impl Dispatcher {
    /// A dispatcher over a registry and a store.
    pub fn new(registry: Registry, store: Arc<dyn Store>) -> Self {
        Dispatcher {
            registry: Arc::new(registry),
            store,
            namespace: DEFAULT_NAMESPACE.to_owned(),
            max_argument_bytes: DEFAULT_MAX_ARGUMENT_BYTES,
            secret_key: None,
        }
    }

    /// The key that seals secret arguments (see [`crate::redact`]); a tool with secret
    /// arguments is refused ([`DispatchError::SecretKeyMissing`]) on a dispatcher without
    /// one. Read it from a secret manager or the environment, the same on every worker.
    pub fn with_secret_key(mut self, key: SecretKey) -> Self {
        self.secret_key = Some(key);
        self
    }

    /// Refuse a call to a tool that records (every class but `read`) whose arguments, as
    /// canonical JSON, are longer than `bytes`, with [`DispatchError::InvalidArguments`]
    /// naming the size and the limit, before anything is recorded or run. Default
    /// [`DEFAULT_MAX_ARGUMENT_BYTES`]. A read records nothing and is not bounded here.
    pub fn with_max_argument_bytes(mut self, bytes: usize) -> Self {
        self.max_argument_bytes = bytes;
        self
    }

    /// Scope every key by a stable application name (not a Rust path: refactors must not
    /// orphan records).
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// The registry.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The record key a call would use, for operators and tests. `None` when the call has
    /// no key material.
    pub fn record_key(
        &self,
        call: &ToolCall,
        run: &RunContext,
    ) -> Result<Option<RecordKey>, DispatchError> {
        let tool = self.lookup(&call.name)?;
        let args = prepare(tool, &call.arguments)
            .map_err(|e| scrub_refusal(tool, &call.arguments, e))?
            .arguments;
        let sealed = self.seal(tool, &args)?;
        Ok(self
            .key_material(tool, call, run, sealed.as_ref().unwrap_or(&args))
            .map(|m| self.keys(tool, run, &m).0))
    }

    /// The arguments with their secrets sealed (see [`crate::redact`]): what is
    /// fingerprinted, keyed, stored and shown to approvers. `None` for a tool without secrets.
    fn seal(&self, tool: &ToolDef, args: &Value) -> Result<Option<Value>, DispatchError> {
        if tool.secrets.is_empty() {
            return Ok(None);
        }
        let Some(key) = &self.secret_key else {
            return Err(DispatchError::SecretKeyMissing {
                tool: tool.name.to_string(),
            });
        };
        Ok(Some(crate::redact::seal(args, &tool.secrets, key)))
    }

    /// Dispatch one call under its class's policy.
    pub async fn dispatch(
        &self,
        call: &ToolCall,
        run: &RunContext,
    ) -> Result<Dispatched, DispatchError> {
        let span = tracing::info_span!(
            "idem.dispatch",
            tool = %call.name,
            class = tracing::field::Empty,
            outcome = tracing::field::Empty,
            attempts = tracing::field::Empty,
            deduplicated = tracing::field::Empty,
        );
        let result = self
            .dispatch_inner(call, run)
            .instrument(span.clone())
            .await;
        match &result {
            Ok(d) => {
                span.record("class", d.class.as_str());
                span.record(
                    "outcome",
                    if d.deduplicated {
                        "replayed"
                    } else {
                        "executed"
                    },
                );
                span.record("attempts", d.attempts);
                span.record("deduplicated", d.deduplicated);
            }
            Err(e) => {
                if let Some(t) = self.registry.get(&call.name) {
                    span.record("class", t.class.as_str());
                }
                span.record("outcome", e.code());
                if let DispatchError::ToolFailed {
                    attempts,
                    deduplicated,
                    ..
                } = e
                {
                    span.record("attempts", *attempts);
                    span.record("deduplicated", *deduplicated);
                }
            }
        }
        span.in_scope(|| match &result {
            Ok(_) => tracing::debug!("dispatched"),
            // A validator's message may quote the offending value: the log names where and
            // which rule kind, never an argument's value.
            Err(DispatchError::InvalidArguments { pointer, .. }) => {
                tracing::info!(code = "invalid_arguments", %pointer, "dispatch refused")
            }
            Err(e) => tracing::info!(code = e.code(), error = %e, "dispatch refused or failed"),
        });
        result
    }

    fn lookup(&self, name: &str) -> Result<&Arc<ToolDef>, DispatchError> {
        self.registry
            .get(name)
            .ok_or_else(|| DispatchError::UnknownTool {
                name: name.to_owned(),
                suggestion: self.registry.nearest(name).map(str::to_owned),
            })
    }

    fn key_material(
        &self,
        tool: &ToolDef,
        call: &ToolCall,
        run: &RunContext,
        args: &Value,
    ) -> Option<KeyMaterial> {
        // An explicit key wins. A tool that declares a natural key says its effect's identity
        // lives in its arguments (find-or-create), so the natural key comes before ids that
        // change on every re-call; then the provider's call id; then the run and step.
        let material = if let Some(key) = &call.key {
            KeyMaterial::Explicit { key: key.clone() }
        } else if let Some(key) = tool.natural_key.as_ref().and_then(|f| f(args)) {
            KeyMaterial::Natural { key }
        } else if let Some(call_id) = &call.call_id {
            KeyMaterial::CallId {
                call_id: call_id.clone(),
                run_id: run.run_id.clone(),
            }
        } else if let (Some(run_id), Some(step)) = (&run.run_id, run.step) {
            KeyMaterial::RunStep {
                run_id: run_id.clone(),
                step,
                index: call.index,
            }
        } else {
            return None;
        };
        Some(material)
    }

    /// The record key and the downstream key of a call (ARCHITECTURE §4: scoped by
    /// namespace, tenant and tool).
    fn keys(
        &self,
        tool: &ToolDef,
        run: &RunContext,
        material: &KeyMaterial,
    ) -> (RecordKey, IdempotencyKey) {
        LogicalKey::derive(&self.namespace, &run.tenant, &tool.name, material)
    }

    async fn dispatch_inner(
        &self,
        call: &ToolCall,
        run: &RunContext,
    ) -> Result<Dispatched, DispatchError> {
        let tool = self.lookup(&call.name)?;
        let PreparedArguments {
            arguments: args,
            typed,
        } = prepare(tool, &call.arguments).map_err(|e| scrub_refusal(tool, &call.arguments, e))?;

        if !tool.policy.scopes.iter().all(|s| run.scopes.contains(s)) {
            let missing = tool
                .policy
                .scopes
                .iter()
                .filter(|s| !run.scopes.contains(*s))
                .cloned()
                .collect();
            return Err(DispatchError::PermissionDenied {
                tool: tool.name.to_string(),
                missing,
            });
        }

        let sealed = self.seal(tool, &args)?;
        // A natural key over a secret is computed from its seal: a key derived from the
        // secret itself could be recovered from the record key by hashing guesses.
        let material = self.key_material(tool, call, run, sealed.as_ref().unwrap_or(&args));
        if material.is_none() && tool.class.records() {
            return Err(DispatchError::MissingKey {
                tool: tool.name.to_string(),
                class: tool.class,
            });
        }
        let (canonical, fingerprint) = if tool.class.records() || tool.class.requires_approval() {
            let canonical = canonical_json(sealed.as_ref().unwrap_or(&args));
            if canonical.len() > self.max_argument_bytes {
                return Err(DispatchError::InvalidArguments {
                    tool: tool.name.to_string(),
                    pointer: String::new(),
                    message: format!(
                        "the arguments are {} bytes as canonical JSON, over the limit of {} \
                         bytes: pass large content by reference (a URL, an id) instead",
                        canonical.len(),
                        self.max_argument_bytes
                    ),
                });
            }
            let fingerprint = Fingerprint::of_canonical(&canonical);
            (canonical, fingerprint)
        } else {
            // A read neither records nor asks for approval: nothing reads its fingerprint.
            (String::new(), Fingerprint::from_bytes([0; 32]))
        };
        let keys = material.as_ref().map(|m| self.keys(tool, run, m));
        let downstream = keys.as_ref().map(|(_, d)| d);

        if tool.class.requires_approval() {
            let key = downstream.map_or("", IdempotencyKey::as_str);
            // Compared in the order that rejects a foreign approval soonest; nothing is copied
            // unless a request has to be built.
            let approved = run.approvals.iter().any(|a| {
                a.fingerprint == fingerprint && a.key.as_str() == key && a.tool == tool.name
            });
            if !approved {
                // A recorded outcome replays without an effect: a run replayed from a
                // checkpoint without its approvals gets it. Only a completed record with
                // these very arguments is replayed; anything that could execute needs the
                // approval.
                if let Some((record_key, downstream)) = &keys {
                    // A store that cannot answer leaves the approval required.
                    let recorded = self.store.get(record_key).await.ok().flatten();
                    if let Some(Record {
                        fingerprint: recorded_fingerprint,
                        state: RecordState::Completed { outcome, .. },
                        ..
                    }) = recorded
                        && recorded_fingerprint == fingerprint
                    {
                        return replay(tool, record_key, downstream, outcome);
                    }
                }
                let request = ApprovalRequest {
                    tool: tool.name.to_string(),
                    key: IdempotencyKey::new(key),
                    fingerprint,
                    arguments: sealed.unwrap_or_else(|| args.into_owned()),
                };
                return Err(DispatchError::ApprovalRequired {
                    request: Box::new(request),
                });
            }
        }

        let (record_key, downstream) = match keys {
            Some(keys) if tool.class.records() => keys,
            keys => {
                let keyed = keys.is_some();
                let key = keys.map_or_else(unkeyed, |(_, downstream)| downstream);
                return self
                    .execute_unrecorded(tool, run, &key, args, typed, keyed)
                    .await;
            }
        };
        let call = Recorded {
            tool,
            run,
            args,
            record_key,
            downstream,
            fingerprint,
            natural: matches!(material, Some(KeyMaterial::Natural { .. })),
        };
        self.execute_recorded(&call, canonical, typed).await
    }

    /// `read`: no record; retried on any error that is not terminal.
    async fn execute_unrecorded(
        &self,
        tool: &ToolDef,
        run: &RunContext,
        key: &IdempotencyKey,
        args: Cow<'_, Value>,
        mut typed: Option<TypedArguments>,
        keyed: bool,
    ) -> Result<Dispatched, DispatchError> {
        let max = tool.policy.attempts_for(tool.class);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let ctx = ToolContext::new(parts(tool, run, key), attempt, None, false, Vec::new());
            match run_body(tool, ctx, &args, typed.take(), None).await {
                Ok(output) => {
                    let output_json = output.to_string();
                    return Ok(Dispatched {
                        output,
                        output_json,
                        deduplicated: false,
                        key: keyed.then(|| key.clone()),
                        attempts: attempt,
                        class: tool.class,
                    });
                }
                Err(e) if e.kind() != idem_core::ErrorKind::Terminal && attempt < max => {
                    let e = scrub_tool_error(tool, &args, e);
                    tracing::debug!(attempt, error = %e, "retrying read");
                    tokio::time::sleep(backoff(tool.policy.backoff, attempt)).await;
                }
                Err(error) => {
                    return Err(DispatchError::ToolFailed {
                        tool: tool.name.to_string(),
                        error: scrub_tool_error(tool, &args, error),
                        attempts: attempt,
                        deduplicated: false,
                    });
                }
            }
        }
    }

    async fn execute_recorded(
        &self,
        call: &Recorded<'_>,
        canonical: String,
        typed: Option<TypedArguments>,
    ) -> Result<Dispatched, DispatchError> {
        let tool = call.tool;
        let mut request = ClaimRequest {
            key: call.record_key.clone(),
            tool: tool.name.to_string(),
            tenant: call.run.tenant.clone(),
            fingerprint: call.fingerprint,
            lease: tool.policy.lease,
            orphans: tool.class.orphan_policy(),
            arguments: Some(canonical),
        };
        let deadline = tokio::time::Instant::now() + tool.policy.wait;
        let mut poll = Duration::from_millis(2);
        let mut verifications = 0;
        loop {
            let claim;
            (claim, request) = self
                .claim_cancel_safe(request)
                .await
                .map_err(|e| call.store_error(e))?;
            let record = match claim {
                Claim::Acquired {
                    fence,
                    steps,
                    takeover,
                } => {
                    return self.execute_held(call, fence, steps, takeover, typed).await;
                }
                Claim::Existing(record) => record,
            };
            if record.fingerprint != call.fingerprint {
                // Only a natural key may stand for calls whose other arguments differ, and
                // only if the tool opted in; any other reused key is a caller's mistake.
                if !(tool.policy.replay_on_key_reuse && call.natural) {
                    return Err(DispatchError::KeyReused {
                        tool: tool.name.to_string(),
                        key: call.downstream.clone(),
                    });
                }
                if request.fingerprint != record.fingerprint {
                    // Claim under the recorded fingerprint from now on, so that an orphan
                    // under this key is taken over (or settled) as for identical calls.
                    request.fingerprint = record.fingerprint;
                    continue;
                }
            }
            match record.state {
                RecordState::Completed { outcome, .. } => return call.replay(outcome),
                RecordState::Unknown { since, last_error } => {
                    // Downstream may commit after the timeout that made the record Unknown,
                    // and an orphan's holder may still be running: a hook asked before the
                    // settle delay could answer "not applied" about an effect on its way.
                    let retry_after = call.verifiable_from(since, &record.steps);
                    let settled_in_time = match retry_after {
                        Some(at) => self.store.now().await.is_ok_and(|now| at <= now),
                        None => false,
                    };
                    if verifications < MAX_VERIFICATIONS && settled_in_time {
                        verifications += 1;
                        match self
                            .verify_unknown(call, record.fence, record.steps, since, &last_error)
                            .await?
                        {
                            Settled::Applied(outcome) => return call.replay(outcome),
                            // Released, or settled by another worker: claim again.
                            Settled::Released | Settled::Raced => continue,
                        }
                    }
                    return Err(DispatchError::OutcomeUnknown {
                        tool: tool.name.to_string(),
                        key: call.downstream.clone(),
                        since,
                        reason: last_error,
                        retry_after,
                    });
                }
                RecordState::InProgress { .. } => {
                    // A concurrent duplicate: wait (bounded) for the holder, claiming again so
                    // that an orphan is taken over or settled as soon as its lease ends.
                    if tokio::time::Instant::now() >= deadline {
                        return Err(DispatchError::InProgress {
                            tool: tool.name.to_string(),
                            key: call.downstream.clone(),
                        });
                    }
                    tokio::time::sleep(poll).await;
                    poll = (poll * 2).min(Duration::from_millis(50));
                }
            }
        }
    }

    async fn execute_held(
        &self,
        call: &Recorded<'_>,
        fence: Fence,
        mut steps: Vec<JournalEntry>,
        takeover: bool,
        mut typed: Option<TypedArguments>,
    ) -> Result<Dispatched, DispatchError> {
        let tool = call.tool;
        let class = tool.class;
        let mut guard = ClaimGuard {
            store: self.store.clone(),
            key: call.record_key.clone(),
            fence,
            class,
            ctx: None,
            armed: true,
        };
        let max = tool.policy.attempts_for(class);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let holder = Some((self.store.clone(), call.record_key.clone(), fence));
            let ctx = ToolContext::new(call.parts(), attempt, holder, takeover, steps.clone());
            guard.ctx = Some(ctx.clone());
            let result = run_body(
                tool,
                ctx.clone(),
                &call.args,
                typed.take(),
                Some(heartbeat::keep(
                    &self.store,
                    &call.record_key,
                    fence,
                    tool.policy.lease,
                )),
            )
            .await;
            steps = ctx.journal();
            let error = match result {
                Ok(output) => {
                    let outcome = Outcome::Success(output.to_string());
                    self.record(call, &mut guard, &outcome, Some(&output))
                        .await?;
                    let Outcome::Success(output_json) = outcome else {
                        unreachable!("a success was recorded just above")
                    };
                    return Ok(Dispatched {
                        output,
                        output_json,
                        deduplicated: false,
                        key: Some(call.downstream.clone()),
                        attempts: attempt,
                        class,
                    });
                }
                Err(error) => scrub_tool_error(tool, &call.args, error),
            };
            use idem_core::ErrorKind::*;
            let may_retry = attempt < max
                && match (class, error.kind()) {
                    (_, Terminal) => false,
                    (ToolClass::Read | ToolClass::IdempotentWrite, _) => true,
                    (ToolClass::NonIdempotentWrite, NotApplied) => true,
                    _ => false,
                };
            if may_retry {
                tracing::debug!(attempt, error = %error, "retrying with the same key");
                tokio::time::sleep(backoff(tool.policy.backoff, attempt)).await;
                // Make sure this worker still holds the key before running the body again:
                // during the backoff its lease may have lapsed and another worker moved on.
                match self
                    .store
                    .renew(&call.record_key, fence, tool.policy.lease)
                    .await
                {
                    Ok(_) => continue,
                    Err(StoreError::Fenced { .. }) => {
                        guard.armed = false;
                        return Err(DispatchError::Fenced {
                            tool: tool.name.to_string(),
                            key: call.downstream.clone(),
                        });
                    }
                    Err(e) => {
                        // Unknown whether the key is still held: leave it to the lease.
                        guard.armed = false;
                        return Err(call.store_error(e));
                    }
                }
            }
            let failed = |error: ToolError| DispatchError::ToolFailed {
                tool: tool.name.to_string(),
                error,
                attempts: attempt,
                deduplicated: false,
            };
            if error.kind() == Terminal {
                self.record(call, &mut guard, &Outcome::Failure(error.clone()), None)
                    .await?;
                return Err(failed(error));
            }
            let give_back =
                GiveBack::after(class, error.kind(), !steps.is_empty(), error.message());
            let since = self.store.now().await.unwrap_or_else(|_| Timestamp::now());
            match give_back.apply(&*self.store, &call.record_key, fence).await {
                Ok(()) => guard.armed = false,
                Err(e) => {
                    guard.armed = false;
                    return Err(call.store_error(e));
                }
            }
            return match give_back {
                GiveBack::Unknown(reason) => Err(DispatchError::OutcomeUnknown {
                    tool: tool.name.to_string(),
                    key: call.downstream.clone(),
                    since,
                    reason,
                    retry_after: call.verifiable_from(since, &steps),
                }),
                GiveBack::Release | GiveBack::Expire => Err(failed(error)),
            };
        }
    }

    /// Claim, so that a dispatch dropped while the claim is in flight leaves no claim that
    /// nobody will use: the claim is polled here, in the caller's task (no extra hop to
    /// another task on the common path), and only if the caller goes away before the answer
    /// does the unfinished claim move to a task of its own, which gives the key back.
    ///
    /// The request comes back with the claim, to be claimed again with if need be.
    async fn claim_cancel_safe(
        &self,
        request: ClaimRequest,
    ) -> Result<(Claim, ClaimRequest), StoreError> {
        let store = self.store.clone();
        let mut pending = PendingClaim {
            claim: Some(Box::pin(async move {
                let claim = store.claim(&request).await?;
                Ok((claim, request))
            })),
            store: self.store.clone(),
        };
        std::future::poll_fn(|cx| {
            let claim = pending
                .claim
                .as_mut()
                .expect("polled only until it answers");
            let answer = std::task::ready!(claim.as_mut().poll(cx));
            pending.claim = None;
            std::task::Poll::Ready(answer)
        })
        .await
    }

    /// Ask the tool's verify hook whether an Unknown call's effect happened, and settle the
    /// record from the answer (fenced: if another worker settled it first, nothing changes).
    async fn verify_unknown(
        &self,
        call: &Recorded<'_>,
        fence: Fence,
        steps: Vec<JournalEntry>,
        since: Timestamp,
        last_error: &str,
    ) -> Result<Settled, DispatchError> {
        let tool = call.tool;
        let Some(verify) = &tool.verify else {
            return Ok(Settled::Raced);
        };
        let ctx = ToolContext::for_verify(call.parts(), steps, Value::clone(&call.args));
        let answer = AssertUnwindSafe(verify(ctx, Value::clone(&call.args)))
            .catch_unwind()
            .await
            .unwrap_or_else(|_| Err(ToolError::ambiguous("the verify hook panicked")));
        let unknown = |why: String, now: Timestamp| DispatchError::OutcomeUnknown {
            tool: tool.name.to_string(),
            key: call.downstream.clone(),
            since,
            reason: format!("{last_error}; verification failed: {why}"),
            // The hook may answer next time (its API was down, say): call again after a pause,
            // so that agents honouring it do not hammer the provider's lookup API.
            retry_after: Some(now.plus(FAILED_VERIFY_PAUSE)),
        };
        let outcome = match answer {
            Ok(Verified::Applied(value)) => {
                let outcome = Outcome::Success(value.to_string());
                if let Some(e) = too_deep(&outcome, Some(&value)) {
                    let now = self.store.now().await.unwrap_or_else(|_| Timestamp::now());
                    return Err(unknown(
                        format!("the hook's answer cannot be recorded: {e}"),
                        now,
                    ));
                }
                Some(outcome)
            }
            Ok(Verified::NotApplied) => None,
            Err(e) => {
                let now = self.store.now().await.unwrap_or_else(|_| Timestamp::now());
                let why = scrub_tool_error(tool, &call.args, e).to_string();
                return Err(unknown(why, now));
            }
        };
        tracing::info!(
            applied = outcome.is_some(),
            "verify hook settled an unknown outcome"
        );
        let done = self
            .store
            .settle_unknown(&call.record_key, fence, outcome.as_ref(), tool.policy.ttl)
            .await
            .map_err(|e| call.store_error(e))?;
        Ok(match (done, outcome) {
            (false, _) => Settled::Raced,
            (true, Some(o)) => Settled::Applied(o),
            (true, None) => Settled::Released,
        })
    }

    /// Record an outcome as the holder. If it cannot be recorded, settle the claim so that
    /// nothing stays held: the effect happened, so a write whose re-execution is not safe
    /// becomes Unknown.
    async fn record(
        &self,
        call: &Recorded<'_>,
        guard: &mut ClaimGuard,
        outcome: &Outcome,
        output: Option<&Value>,
    ) -> Result<(), DispatchError> {
        let result = match too_deep(outcome, output) {
            Some(e) => Err(e),
            None => {
                self.store
                    .complete(&call.record_key, guard.fence, outcome, call.tool.policy.ttl)
                    .await
            }
        };
        // Disarmed only now: a dispatch dropped during the write still settles the claim.
        guard.armed = false;
        match result {
            Ok(()) => Ok(()),
            Err(StoreError::Fenced { .. }) => Err(DispatchError::Fenced {
                tool: call.tool.name.to_string(),
                key: call.downstream.clone(),
            }),
            Err(e) => {
                let note =
                    format!("the effect happened but its outcome could not be recorded: {e}");
                let settled = if call.tool.class.reexecution_is_safe() {
                    self.store
                        .release(&call.record_key, guard.fence)
                        .await
                        .map(|_| ())
                } else {
                    self.store
                        .mark_unknown(&call.record_key, guard.fence, &note)
                        .await
                };
                if let Err(e2) = settled {
                    tracing::warn!(error = %e2, "could not settle the claim; its lease will expire");
                }
                Err(call.store_error(e))
            }
        }
    }
}

/// The refusal of an outcome nested deeper than a replay can read back: its output, or its
/// terminal error's details. Recorded, every replay of it would fail.
fn too_deep(outcome: &Outcome, output: Option<&Value>) -> Option<StoreError> {
    let limit = idem_core::store::MAX_OUTCOME_DEPTH;
    let value = match (outcome, output) {
        (Outcome::Success(_), Some(v)) => v,
        (Outcome::Failure(e), _) => e.details()?,
        (Outcome::Success(_), None) => return None,
    };
    let depth = idem_core::store::nesting(value, limit);
    (depth > limit).then_some(StoreError::TooDeep { depth, limit })
}

/// How long after a verify hook failed `OutcomeUnknown::retry_after` points: the hook's
/// lookup API was down or slow, and asking it again at once would only add load.
const FAILED_VERIFY_PAUSE: Duration = Duration::from_secs(5);

/// How many times one dispatch asks a verify hook before giving up on an Unknown record.
const MAX_VERIFICATIONS: u32 = 2;

/// What a verify hook's answer did to an Unknown record.
enum Settled {
    /// Completed with this outcome.
    Applied(Outcome),
    /// Deleted: the call may run.
    Released,
    /// Another worker settled it first.
    Raced,
}

/// A recorded call, resolved and keyed.
struct Recorded<'a> {
    tool: &'a ToolDef,
    run: &'a RunContext,
    args: Cow<'a, Value>,
    record_key: RecordKey,
    downstream: IdempotencyKey,
    fingerprint: Fingerprint,
    /// Whether the key is the tool's natural key.
    natural: bool,
}

impl Recorded<'_> {
    /// When the verify hook may first be asked about a record Unknown since `since`: the
    /// settle delay later, and at least a lease later (a holder whose lease lapsed notices
    /// within a third of a lease and stops). `None` when no hook
    /// can settle it: the tool has none, or journaled steps make the effect partial.
    fn verifiable_from(&self, since: Timestamp, steps: &[JournalEntry]) -> Option<Timestamp> {
        let policy = &self.tool.policy;
        (self.tool.verify.is_some() && steps.is_empty())
            .then(|| since.plus(policy.verify_after.max(policy.lease)))
    }

    fn parts(&self) -> ContextParts<'_> {
        parts(self.tool, self.run, &self.downstream)
    }

    fn store_error(&self, e: StoreError) -> DispatchError {
        store_error(self.tool, e)
    }

    fn replay(&self, outcome: Outcome) -> Result<Dispatched, DispatchError> {
        replay(self.tool, &self.record_key, &self.downstream, outcome)
    }
}

/// A store's error as the dispatcher reports it.
fn store_error(tool: &ToolDef, e: StoreError) -> DispatchError {
    let tool = tool.name.to_string();
    if e.is_unavailable() {
        DispatchError::StoreUnavailable {
            tool,
            message: e.to_string(),
        }
    } else {
        DispatchError::Store { tool, error: e }
    }
}

/// Replay a recorded outcome.
fn replay(
    tool: &ToolDef,
    record_key: &RecordKey,
    downstream: &IdempotencyKey,
    outcome: Outcome,
) -> Result<Dispatched, DispatchError> {
    match outcome {
        Outcome::Success(output_json) => {
            let output = serde_json::from_str(&output_json).map_err(|e| DispatchError::Store {
                tool: tool.name.to_string(),
                error: StoreError::Corrupt {
                    key: record_key.clone(),
                    reason: format!("its recorded output is not JSON: {e}"),
                },
            })?;
            Ok(Dispatched {
                output,
                output_json,
                deduplicated: true,
                key: Some(downstream.clone()),
                attempts: 0,
                class: tool.class,
            })
        }
        Outcome::Failure(error) => Err(DispatchError::ToolFailed {
            tool: tool.name.to_string(),
            error,
            attempts: 0,
            deduplicated: true,
        }),
    }
}

/// How a holder gives its claim back when it will not record an outcome.
#[derive(Debug, Clone, PartialEq)]
enum GiveBack {
    /// Delete the claim: nothing happened that a later call must know about.
    Release,
    /// End the lease but keep the record, so the next claim takes it over and inherits the
    /// journaled steps (re-running is safe, and finished steps must not run again).
    Expire,
    /// The effect may have happened: the record becomes Unknown.
    Unknown(String),
}

impl GiveBack {
    fn after(class: ToolClass, kind: idem_core::ErrorKind, has_steps: bool, why: &str) -> Self {
        use idem_core::ErrorKind::*;
        let certain = matches!(kind, Retryable | NotApplied);
        match (class.reexecution_is_safe(), has_steps) {
            (_, false) if certain => GiveBack::Release,
            (true, false) => GiveBack::Release,
            (true, true) => GiveBack::Expire,
            // A journaled step happened even if the last one did not: partly applied.
            (false, true) if certain => GiveBack::Unknown(format!(
                "{why} (after journaled steps: the effect is partly applied)"
            )),
            (false, _) => GiveBack::Unknown(why.to_owned()),
        }
    }

    async fn apply(
        &self,
        store: &dyn Store,
        key: &RecordKey,
        fence: Fence,
    ) -> Result<(), StoreError> {
        let result = match self {
            GiveBack::Release => store.release(key, fence).await.map(|_| ()),
            GiveBack::Expire => store.renew(key, fence, Duration::ZERO).await.map(|_| ()),
            GiveBack::Unknown(why) => store.mark_unknown(key, fence, why).await,
        };
        match result {
            // Someone else holds or settled the key already: nothing of ours to give back.
            Err(StoreError::Fenced { .. }) => Ok(()),
            other => other,
        }
    }
}

/// Settles a claim whose dispatch future was dropped mid-body, so no live claim is left that
/// nobody will finish: a write that is safe to re-run is released (or, with journaled
/// steps, left to be taken over), any other becomes Unknown.
struct ClaimGuard {
    store: Arc<dyn Store>,
    key: RecordKey,
    fence: Fence,
    class: ToolClass,
    /// The running attempt's context, to see whether steps were journaled.
    ctx: Option<ToolContext>,
    armed: bool,
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let has_steps = self.ctx.as_ref().is_some_and(|c| !c.journal().is_empty());
        let give_back = GiveBack::after(
            self.class,
            idem_core::ErrorKind::Ambiguous,
            has_steps,
            "the dispatch was cancelled while the tool was running",
        );
        let (store, key, fence) = (self.store.clone(), self.key.clone(), self.fence);
        let settle = async move {
            if let Err(e) = give_back.apply(&*store, &key, fence).await {
                tracing::warn!(error = %e, key = %key, "could not settle a cancelled call; its lease will expire");
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(settle);
            }
            Err(_) => {
                tracing::warn!(key = %self.key, "cancelled outside a runtime; the claim's lease will expire")
            }
        }
    }
}

type ClaimFuture = Pin<Box<dyn Future<Output = Result<(Claim, ClaimRequest), StoreError>> + Send>>;

/// A claim in flight. If the dispatch is dropped before the answer, the claim finishes in a
/// task of its own and is given back (the body never ran, so releasing is safe; a take-over
/// is only expired again, keeping its journal). The key is the one in the request the claim
/// hands back.
struct PendingClaim {
    claim: Option<ClaimFuture>,
    store: Arc<dyn Store>,
}

impl Drop for PendingClaim {
    fn drop(&mut self) {
        let Some(claim) = self.claim.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!("a claim was abandoned outside a runtime; its lease will expire");
            return;
        };
        let store = self.store.clone();
        runtime.spawn(async move {
            if let Ok((Claim::Acquired { fence, takeover, steps }, request)) = claim.await {
                let key = &request.key;
                let give_back = if takeover || !steps.is_empty() { GiveBack::Expire } else { GiveBack::Release };
                if let Err(e) = give_back.apply(&*store, key, fence).await {
                    tracing::warn!(error = %e, key = %key, "could not give back an abandoned claim; its lease will expire");
                }
            }
        });
    }
}

fn prepare<'a>(
    tool: &ToolDef,
    arguments: &'a Value,
) -> Result<PreparedArguments<'a>, DispatchError> {
    // Validated against the published schema before serde sees anything (ARCHITECTURE §7).
    let invalid = |e: crate::args::ArgumentError| DispatchError::InvalidArguments {
        tool: tool.name.to_string(),
        pointer: e.pointer,
        message: e.message,
    };
    let prepared = match tool
        .validate_call_arguments(Cow::Borrowed(arguments))
        .map_err(invalid)?
    {
        Cow::Borrowed(valid) => (tool.prepare)(valid).map_err(invalid)?,
        Cow::Owned(valid) => (tool.prepare)(&valid)
            .map(|normal| PreparedArguments {
                arguments: Cow::Owned(normal.arguments.into_owned()),
                typed: normal.typed,
            })
            .map_err(invalid)?,
    };
    // The typed round trip may have changed them (a serde alias renamed a field, a default
    // filled one in, a flattened or untagged type read them its own way): the body reads
    // this form, so this form must fit the schema too. Arguments already normal come back
    // borrowed and were checked above.
    if let Cow::Owned(normal) = &prepared.arguments {
        tool.validate_call_arguments(Cow::Borrowed(normal))
            .map_err(invalid)?;
    }
    Ok(prepared)
}

/// A refusal of a tool's arguments with its secrets' text cut out of the message.
fn scrub_refusal(tool: &ToolDef, arguments: &Value, e: DispatchError) -> DispatchError {
    match e {
        DispatchError::InvalidArguments {
            tool: name,
            pointer,
            message,
        } if !tool.secrets.is_empty() => {
            let message = crate::redact::refusal(&pointer, &message, arguments, &tool.secrets);
            DispatchError::InvalidArguments {
                tool: name,
                pointer,
                message,
            }
        }
        other => other,
    }
}

/// A tool's error with its secrets' text cut out of the message and details, before it is
/// recorded or returned.
fn scrub_tool_error(tool: &ToolDef, arguments: &Value, error: ToolError) -> ToolError {
    if tool.secrets.is_empty() {
        return error;
    }
    let scrubbed = ToolError::new(
        error.kind(),
        crate::redact::scrub(error.message(), arguments, &tool.secrets),
    );
    match error.details() {
        Some(details) => {
            let mut details = details.clone();
            crate::redact::scrub_value(&mut details, arguments, &tool.secrets);
            scrubbed.with_details(details)
        }
        None => scrubbed,
    }
}

/// What a body's context is made of, borrowed from the call.
fn parts<'a>(tool: &'a ToolDef, run: &'a RunContext, key: &'a IdempotencyKey) -> ContextParts<'a> {
    ContextParts {
        tool: &tool.name,
        class: tool.class,
        key,
        tenant: &run.tenant,
        run_id: run.run_id.as_deref(),
        step: run.step,
    }
}

fn unkeyed() -> IdempotencyKey {
    IdempotencyKey::new(format!("idem-unkeyed-{:016x}", random_u64()))
}

/// Run the body, catching panics (a panic is ambiguous: the effect may have happened) and,
/// for a holder, keeping its lease renewed by the heartbeat while it runs.
async fn run_body(
    tool: &ToolDef,
    ctx: ToolContext,
    args: &Value,
    typed: Option<TypedArguments>,
    lease: Option<Registration>,
) -> Result<Value, ToolError> {
    let body = AssertUnwindSafe((tool.handler)(ctx, args, typed)).catch_unwind();
    let flatten = |r: std::thread::Result<Result<Value, ToolError>>| {
        r.unwrap_or_else(|panic| {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".into());
            Err(ToolError::ambiguous(format!("the tool panicked: {msg}")))
        })
    };
    let Some(lease) = lease else {
        return flatten(body.await);
    };
    tokio::select! {
        biased;
        r = body => flatten(r),
        // Another worker owns the call now (a take-over, an Unknown settled by a verify
        // hook): stop, rather than apply an effect it may also apply.
        () = lease.lost() => Err(ToolError::ambiguous(
            "this worker lost the key while the tool was running",
        )),
    }
}

/// Exponential backoff with jitter: between half and all of `base * 2^(attempt-1)`, at most 5 s.
fn backoff(base: Duration, attempt: u32) -> Duration {
    let exp = base
        .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
        .min(Duration::from_secs(5));
    let half = exp / 2;
    let jitter = if half.is_zero() {
        0
    } else {
        random_u64() % (half.as_micros() as u64 + 1)
    };
    half + Duration::from_micros(jitter)
}

/// A cheap non-cryptographic random number (splitmix64 over a counter and the clock):
/// jitter and unkeyed read ids need spread, not secrecy.
fn random_u64() -> u64 {
    static STATE: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut z = STATE.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed) ^ nanos;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let base = Duration::from_millis(100);
        for attempt in 1..20 {
            let d = backoff(base, attempt);
            let full = base
                .saturating_mul(1 << (attempt - 1).min(16))
                .min(Duration::from_secs(5));
            assert!(
                d >= full / 2 && d <= full,
                "attempt {attempt}: {d:?} outside [{:?}, {full:?}]",
                full / 2
            );
        }
    }
}
