//! The dispatcher: takes calls as a model emits them and applies the class's policy.
//!
//! One stage per file, in the order [`Dispatcher::dispatch`] runs them (ARCHITECTURE.md,
//! "The path of one call"); every refusal happens before any record is written and before
//! any effect:
//!
//! | stage | file | what it decides |
//! |---|---|---|
//! | resolve | `mod.rs` | the tool, by name |
//! | validate | `arguments.rs` | the arguments fit the published schema, before and after serde |
//! | authorize | `authorize.rs` | the run holds the tool's scopes, the call passes its checks (those that read, in `dispatch` alone) |
//! | key | `key.rs` | secrets sealed, key material, record and downstream keys, fingerprint |
//! | approve | `approve.rs` | an irreversible call carries its approval (a completed one replays) |
//! | claim | `claim.rs` | take the key, replay, wait for a holder, or verify an Unknown (`verify.rs`) |
//! | execute | `execute.rs` | run the body under a hold (`hold.rs`) with retries, then record |
//!
//! Beside the stages, `recover.rs` settles records nobody will call again (a dead holder's,
//! an Unknown one) by their class, through the claim, verify and execute stages.
//!
//! Policy decisions (retry, give-back, key reuse, settle delay, backoff) are plain functions in
//! `decide.rs`; the stages carry them out. The order of checks is closed. What attaches from
//! outside does so at three seams: [`Observer`]s of dispatch events, [`Execution`] around the
//! body, and store layers (`idem::store::layer`) around the store.

mod account;
mod account_text;
mod approve;
pub(crate) mod arguments;
mod authorize;
mod body;
mod call;
mod case;
mod cases;
mod claim;
mod compensate;
mod decide;
mod error;
mod escalate;
mod execute;
mod guard;
mod journal;
mod key;
mod keyed;
mod limits;
#[cfg(feature = "metrics")]
mod metrics;
mod observe;
mod recover;
mod undo_requests;
mod undo_run;
mod verify;
mod wait;

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_core::{KeySource, RecordKey, Store};
use serde_json::Value;
use tracing::Instrument;

#[cfg(feature = "metrics")]
pub use self::metrics::MetricsObserver;
pub use crate::run::RunContext;
pub use crate::tool::{AppliedCall, UNDO_TOOL_SUFFIX, UndoOptions, Undoer};
pub use account::{AccountEntry, CallOutcome, DEFAULT_ACCOUNT_RETENTION, RunAccount, run_account};
pub(crate) use approve::fingerprint_of;
pub use body::{Attempt, BodyFuture, Execution};
pub use call::{Dispatched, LimitUse, ResendWindow, ToolCall};
pub use case::{AppliedBefore, CaseDecided, Escalation, EscalationKind, MAX_APPLIED_SHOWN};
pub use cases::{Case, CaseDecision, CaseDesk, CaseError};
pub use error::{DispatchError, SetupError};
pub use journal::{COMPENSATING_STEP, UNDO_PREFIX, undone_steps};
pub use observe::{DispatchEvent, EventKind, Observer, Stage, TracingObserver};
pub use recover::{Recovered, RecoveryAction, RecoveryOptions, RecoveryReport, Unrecoverable};
pub use undo_requests::{UndoRequest, request as request_undo, undo_requests};
pub use undo_run::{RunUndo, UndoOutcome, UndoRunError, UndoneCall};

use crate::redact::SecretKey;
use crate::registry::Registry;
use crate::signed::{ApprovalKeys, DEFAULT_MAX_APPROVAL_VALIDITY};
use crate::tool::{PreparedArguments, ToolDef};
use keyed::{KeyedCall, context_parts, key_hash, tool_steps};
use observe::{Observers, Watch};

/// Applies each tool's class policy to calls; see the module docs for the order of checks.
///
/// ```
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
/// let dispatcher = Dispatcher::new(registry, Arc::new(MemoryStore::new())).unwrap();
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
    approval_keys: ApprovalKeys,
    max_approval_validity: Duration,
    observers: Observers,
    execution: Option<Arc<dyn Execution>>,
    /// How long run accounts are kept, if they are (`account.rs`).
    accounts: Option<Duration>,
    /// Limits the dispatcher adds to tools, by tool name (`limits.rs`).
    limits: Arc<std::collections::BTreeMap<String, Vec<crate::tool::Limit>>>,
}

/// The largest arguments a recorded call may have unless
/// [`Dispatcher::with_max_argument_bytes`] says otherwise: 1 MiB, as the stores' default
/// limit on an outcome.
pub const DEFAULT_MAX_ARGUMENT_BYTES: usize = 1024 * 1024;

/// The namespace used unless [`Dispatcher::with_namespace`] says otherwise.
pub const DEFAULT_NAMESPACE: &str = "default";

impl fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dispatcher")
            .field("namespace", &self.namespace)
            .field("tools", &self.registry.len())
            .field("store", &self.store)
            .field("observers", &self.observers)
            .field("execution", &self.execution.is_some())
            .finish()
    }
}

impl Dispatcher {
    /// A dispatcher over a registry and a store, with no key to verify approvals with. A
    /// registry with a tool whose calls may need a person's approval is refused here, at
    /// start-up, with [`SetupError::NoApprovalKeys`] naming the tool and
    /// [`Dispatcher::approving`]: build that one instead. Such a tool is every
    /// `irreversible` one, and a write that selects calls for approval, even if it would
    /// select none of the calls made: `#[tool(approve_when = f)]`,
    /// [`ToolBuilder::approve_when`] or [`ToolBuilder::approve_rule`], a [`ToolSpec`]'s
    /// `approve_when` rules. The facade's guide (`idem::guide::controls`) shows the refusal.
    ///
    /// [`ToolBuilder::approve_when`]: crate::tool::ToolBuilder::approve_when
    /// [`ToolBuilder::approve_rule`]: crate::tool::ToolBuilder::approve_rule
    /// [`ToolSpec`]: crate::ToolSpec
    pub fn new(registry: Registry, store: Arc<dyn Store>) -> Result<Self, SetupError> {
        Dispatcher::approving(registry, store, ApprovalKeys::default())
    }

    /// A dispatcher that runs a call needing approval (every call of an `irreversible`
    /// tool, and the calls a tool's `approve_when` selects) only with an [`Approval`] signed
    /// by one of `keys` (several during a rotation) for exactly that call. Empty `keys` and a
    /// tool in the registry whose calls may need approval (an irreversible one, or a write
    /// with `approve_when`, whether or not it would select any call) is
    /// [`SetupError::NoApprovalKeys`], as with [`Dispatcher::new`].
    ///
    /// [`Approval`]: crate::Approval
    pub fn approving(
        registry: Registry,
        store: Arc<dyn Store>,
        keys: ApprovalKeys,
    ) -> Result<Self, SetupError> {
        if keys.is_empty()
            && let Some(tool) = registry.iter().find(|t| t.may_need_approval())
        {
            return Err(SetupError::NoApprovalKeys {
                tool: tool.name.to_string(),
            });
        }
        Ok(Dispatcher {
            registry: Arc::new(registry),
            store,
            namespace: DEFAULT_NAMESPACE.to_owned(),
            max_argument_bytes: DEFAULT_MAX_ARGUMENT_BYTES,
            secret_key: None,
            approval_keys: keys,
            max_approval_validity: DEFAULT_MAX_APPROVAL_VALIDITY,
            observers: Observers::tracing(),
            execution: None,
            accounts: None,
            limits: Arc::default(),
        })
    }

    /// The key that seals secret arguments (see [`crate::redact`]); a tool with secret
    /// arguments is refused ([`DispatchError::SecretKeyMissing`]) on a dispatcher without
    /// one. Read it from a secret manager or the environment, the same on every worker.
    pub fn with_secret_key(mut self, key: SecretKey) -> Self {
        self.secret_key = Some(key);
        self
    }

    /// Refuse an approval that would stay valid for longer than `validity` from the moment
    /// it is presented ([`ApprovalRefusal::TooLong`](crate::ApprovalRefusal::TooLong)).
    /// Records of calls that need approval are kept at least that long, so that an approval
    /// used once always finds its call's record. Default [`DEFAULT_MAX_APPROVAL_VALIDITY`].
    pub fn with_max_approval_validity(mut self, validity: Duration) -> Self {
        self.max_approval_validity = validity;
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

    /// Tell `observer` every dispatch's events, after the observers added before it (see
    /// [`Observer`]).
    pub fn with_observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observers = self.observers.with(observer);
        self
    }

    /// Drop the default [`TracingObserver`] (the `execute_tool` span keeps its name and the
    /// call's fields, but gets no outcome fields, and the per-dispatch log line goes).
    pub fn without_tracing(mut self) -> Self {
        self.observers = self.observers.without_tracing();
        self
    }

    /// Run every execution of a body through `execution` (see [`Execution`]); one per
    /// dispatcher: compose them inside it.
    pub fn with_execution(mut self, execution: Arc<dyn Execution>) -> Self {
        self.execution = Some(execution);
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
        // The key does not depend on the run's scopes: an operator looks a call's record up
        // without the agent's permissions.
        match self.check(call, run, Scopes::Ignored) {
            Ok(checked) => Ok(checked.keyed.keys.map(|(record, _)| record)),
            Err(DispatchError::MissingKey { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Dispatch one call under its class's policy.
    pub async fn dispatch(
        &self,
        call: &ToolCall,
        run: &RunContext,
    ) -> Result<Dispatched, DispatchError> {
        let span = observe::dispatch_span(call);
        let watch = Watch {
            observers: &self.observers,
            started: Instant::now(),
            tool: &call.name,
        };
        // The record key, once the call has one, for the event that ends the dispatch.
        let mut key = None;
        // The standing grant that let the call through, if one did: kept in its account
        // whatever became of the call.
        let mut granted = None;
        let mut result = self
            .stages(call, run, &watch, &mut key, &mut granted)
            .instrument(span.clone())
            .await;
        if let Ok(dispatched) = &mut result
            && !dispatched.deduplicated
        {
            dispatched.granted.clone_from(&granted);
        }
        // An error does not carry the class: look the tool up again only then.
        let tool = match &result {
            Ok(_) => None,
            Err(_) => self.registry.get(&call.name),
        };
        span.in_scope(|| watch.ended(tool, key.as_ref(), &result));
        if self.accounts.is_some() {
            self.account(call, run, key.as_ref(), &result, granted)
                .await;
        }
        // A failure policy may undo the run's applied calls (`undo_run.rs`); boxed, and
        // only for a failure, so that other calls pay nothing for it.
        match result {
            Err(DispatchError::ToolFailed { .. }) => {
                Box::pin(self.undo_after_failure(call, run, result)).await
            }
            result => result,
        }
    }

    /// The order of checks, top to bottom (see the module docs).
    async fn stages(
        &self,
        call: &ToolCall,
        run: &RunContext,
        watch: &Watch<'_>,
        key: &mut Option<RecordKey>,
        granted: &mut Option<String>,
    ) -> Result<Dispatched, DispatchError> {
        let (tool, prepared) = self.authorized(call, run, Scopes::Checked)?;
        // The checks that may read run only for a call about to act, never for `record_key`.
        authorize::authorize_async(tool, run, &prepared.arguments).await?;
        let Checked {
            tool,
            args,
            typed,
            keyed,
        } = self.keyed(call, run, tool, prepared)?;
        // Limits across calls (`limits.rs`): refused here, or sent to a person.
        let (shares, asked) = match self.has_run_rules(tool) {
            false => (Vec::new(), false),
            true => Box::pin(self.limits_before(tool, run, &args, &keyed)).await?,
        };
        // The approval path is boxed: its future is large and most calls never take it, so the
        // future of every dispatch stays small (it is moved at each await that starts it).
        let approval = match asked || tool.needs_approval(&args, run) {
            false => None,
            true => match Box::pin(self.approve(tool, run, &keyed, &args, watch)).await? {
                approve::Approved::Replayed(replayed) => return Ok(replayed),
                approve::Approved::By(approval) => Some(approval),
            },
        };
        *granted = approval.as_ref().and_then(|a| a.granted());
        let (record_key, downstream) = match keyed.keys {
            Some(keys) if tool.class.records() => keys,
            // A read (the key stage refuses a recording call without key material).
            keys => {
                let downstream = keys.map(|(_, downstream)| downstream);
                // Boxed, and only for a read with limits: its future would set the size of
                // every dispatch's.
                let uses = match shares.is_empty() {
                    true => Vec::new(),
                    false => Box::pin(self.take_read_shares(tool, &shares)).await?,
                };
                let mut answered = self
                    .execute_unrecorded(tool, run, args, typed, downstream, watch)
                    .await?;
                answered.limits = uses;
                return Ok(answered);
            }
        };
        *key = Some(record_key.clone());
        let call = KeyedCall {
            tool,
            run,
            call_id: call.call_id.as_deref(),
            args,
            record_key,
            downstream,
            fingerprint: keyed.fingerprint,
            source: keyed.source,
            ttl: self.record_ttl(
                tool,
                call.resend
                    .as_ref()
                    .filter(|_| keyed.source == Some(KeySource::Resend))
                    .map(|r| r.window),
            ),
            approval,
        };
        let begun = watch.begin();
        let claimed = self
            .claim(&call, keyed.canonical, watch)
            .instrument(tracing::info_span!("idem.claim"))
            .await;
        watch.finished(&call, Stage::Claim, begun);
        match claimed? {
            claim::Claimed::WonClaim(held) if !shares.is_empty() => {
                Box::pin(self.execute_with_shares(&call, held, typed, &shares, watch)).await
            }
            claim::Claimed::WonClaim(held) => self.execute_held(&call, held, typed, watch).await,
            claim::Claimed::Settled(dispatched) => Ok(dispatched),
        }
    }

    /// How long a tool's outcome is kept: its TTL, and for a tool that needs approval at
    /// least as long as any approval this dispatcher accepts stays valid. So the record of
    /// a call outlives every approval that could have run it, and an approval used once finds
    /// the record (and replays) for as long as it could be presented again: an approval
    /// authorises at most one effect.
    ///
    /// A call keyed by its re-send window (`window`) is kept for the window, at most the TTL.
    fn record_ttl(&self, tool: &ToolDef, window: Option<Duration>) -> Duration {
        let ttl = window.map_or(tool.policy.ttl, |w| w.min(tool.policy.ttl));
        if tool.may_need_approval() {
            ttl.max(self.max_approval_validity)
        } else {
            ttl
        }
    }

    fn lookup(&self, name: &str) -> Result<&Arc<ToolDef>, DispatchError> {
        self.registry
            .get(name)
            .ok_or_else(|| DispatchError::UnknownTool {
                name: name.to_owned(),
                suggestion: self.registry.nearest(name).map(str::to_owned),
            })
    }
}

/// What the checks before any effect found: the tool, the call's arguments normalised (and
/// typed, for a `#[tool]`), and its keys.
struct Checked<'a> {
    tool: &'a ToolDef,
    args: Cow<'a, Value>,
    typed: Option<crate::tool::TypedArguments>,
    keyed: key::Keyed,
}

/// Whether [`Dispatcher::check`] holds the run to the tool's scopes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scopes {
    /// A call about to run, or to be shown for approval.
    Checked,
    /// Only the call's key is wanted (`record_key`): it does not depend on the scopes.
    Ignored,
}

impl Dispatcher {
    /// The checks before any record or effect, in their one order: resolve the tool,
    /// validate its arguments, authorize the run (unless `scopes` says the key alone is
    /// wanted), derive the keys. Every path that acts on a call starts here (`dispatch` with
    /// the checks that may read between its halves).
    fn check<'a>(
        &'a self,
        call: &'a ToolCall,
        run: &RunContext,
        scopes: Scopes,
    ) -> Result<Checked<'a>, DispatchError> {
        let (tool, prepared) = self.authorized(call, run, scopes)?;
        self.keyed(call, run, tool, prepared)
    }

    /// Derive the keys of an authorized call.
    fn keyed<'a>(
        &'a self,
        call: &'a ToolCall,
        run: &RunContext,
        tool: &'a ToolDef,
        prepared: PreparedArguments<'a>,
    ) -> Result<Checked<'a>, DispatchError> {
        let keyed = self.key(tool, call, run, &prepared.arguments)?;
        Ok(Checked {
            tool,
            args: prepared.arguments,
            typed: prepared.typed,
            keyed,
        })
    }
}
