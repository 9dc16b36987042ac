//! What a tool body sees of the call: its stable key, its run, and the step journal.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};

use idem_core::{Fence, IdempotencyKey, JournalEntry, RecordKey, Store, ToolClass, ToolError};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::run::RunContext;

/// The prefix of the journal entries the dispatcher writes itself (an approval, a
/// precondition passed, a compensation under way and each undo): a tool's own
/// [`ToolContext::step`] may not begin with it.
pub const RESERVED_STEP_PREFIX: &str = "idem:";

/// The journal entry that says a call's precondition passed: from then on the call is under
/// way, and its precondition is not asked again (by a retry, a take-over or recovery).
pub const PRECONDITION_STEP: &str = "idem:precondition";

tokio::task_local! {
    /// The journaled step running on this task.
    static STEP: RunningStep;
    /// The call whose body is running on this task.
    static CALL: CurrentCall;
}

/// The call whose body runs on this task, for code a body calls without handing it the
/// context (an HTTP middleware, a client library): the key to send downstream now, and which
/// request each key was first sent with, so that one key never goes out with two different
/// requests (an API that keeps idempotency keys refuses that, or answers the second with the
/// first's response). The dispatcher sets it around every execution of a body.
///
/// ```
/// use idem_registry::context::CurrentCall;
///
/// // Outside a tool body there is no current call.
/// assert!(CurrentCall::with(|call| call.downstream_key()).is_none());
/// ```
pub struct CurrentCall {
    key: IdempotencyKey,
    sent: Mutex<HashMap<IdempotencyKey, DownstreamRequest>>,
}

/// A request sent downstream under a key, as an API that keeps idempotency keys compares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DownstreamRequest {
    /// Its method (`POST`).
    pub method: String,
    /// Its target (the URL).
    pub target: String,
    /// A digest of its body; `None` when not known (a streamed body), and then not compared.
    pub body: Option<[u8; 32]>,
}

impl DownstreamRequest {
    /// Whether an API that keeps keys takes `other` for this request again (a retry).
    pub fn same_as(&self, other: &DownstreamRequest) -> bool {
        self.method == other.method
            && self.target == other.target
            && match (self.body, other.body) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    }
}

impl CurrentCall {
    /// Run `f` with the call whose body runs on this task; `None` outside a body.
    pub fn with<R>(f: impl FnOnce(&CurrentCall) -> R) -> Option<R> {
        CALL.try_with(f).ok()
    }

    /// Run `body` as the body of the call keyed `key` (the dispatcher does, for every body).
    pub(crate) fn scope<F: Future>(
        key: IdempotencyKey,
        body: F,
    ) -> impl Future<Output = F::Output> {
        let call = CurrentCall {
            key,
            sent: Mutex::default(),
        };
        CALL.scope(call, body)
    }

    /// The call's key.
    pub fn key(&self) -> &IdempotencyKey {
        &self.key
    }

    /// The journaled step of this call running now (inside `ToolContext::step`), if one is:
    /// its name and its key. A call dispatched inside another call's step is not in it.
    pub fn step(&self) -> Option<(String, IdempotencyKey)> {
        step_of(&self.key)
    }

    /// The key a request made now carries: the running step's, else the call's.
    pub fn downstream_key(&self) -> IdempotencyKey {
        step_of(&self.key).map_or_else(|| self.key.clone(), |(_, key)| key)
    }

    /// Note that `key` goes out with `request`. If this call already sent `key` with another
    /// request, nothing is noted and that first request comes back: the caller must not send.
    pub fn note_sent(
        &self,
        key: &IdempotencyKey,
        request: DownstreamRequest,
    ) -> Result<(), DownstreamRequest> {
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        match sent.get(key) {
            None => {
                sent.insert(key.clone(), request);
                Ok(())
            }
            Some(first) if first.same_as(&request) => Ok(()),
            Some(first) => Err(first.clone()),
        }
    }
}

/// A journaled step while its closure runs: whose it is, its name, and its key.
struct RunningStep {
    call: IdempotencyKey,
    name: String,
    key: IdempotencyKey,
}

/// The journaled step of the call keyed `call` running on this task, if one is: its name and
/// key. A call dispatched inside another call's step is not in that step: this is `None` for
/// it, so it sends its own key.
fn step_of(call: &IdempotencyKey) -> Option<(String, IdempotencyKey)> {
    STEP.try_with(|s| (s.call == *call).then(|| (s.name.clone(), s.key.clone())))
        .ok()
        .flatten()
}

/// Injected into a tool body as `ctx: &ToolContext`; never part of the schema.
///
/// Cheap to clone. The most important thing it carries is
/// [`downstream_key`](ToolContext::downstream_key): pass it to the downstream system
/// (an `Idempotency-Key` header, a Message-ID, a client reference) so that every retry and
/// every take-over asks for the same effect. It is the call's
/// [`idempotency_key`](ToolContext::idempotency_key), or inside a journaled step the step's.
#[derive(Clone)]
pub struct ToolContext {
    inner: Arc<Inner>,
}

struct Inner {
    tool: Cow<'static, str>,
    class: ToolClass,
    key: IdempotencyKey,
    tenant: String,
    run_id: Option<String>,
    step: Option<u64>,
    /// Whom the run acts for, and its limits ([`RunContext`]).
    acting_for: Option<String>,
    limits: BTreeMap<String, Value>,
    attempt: u32,
    takeover: bool,
    holder: Option<FencedKey>,
    steps: Mutex<Vec<JournalEntry>>,
    /// The call's arguments, for a verify hook.
    arguments: Option<serde_json::Value>,
    /// A tool with secret arguments: what a journaled step's value must not hold.
    secrets: Option<Secrets>,
}

/// The secret arguments of a call, whose text a journaled step's value must not carry.
struct Secrets {
    pointers: Vec<String>,
    arguments: serde_json::Value,
}

/// A record key held at a fence, in the store that holds it: what a holder writes with
/// (journal, renewal, outcome, give-back), so that every such write is fenced.
#[derive(Clone)]
pub(crate) struct FencedKey {
    pub store: Arc<dyn Store>,
    pub key: RecordKey,
    pub fence: Fence,
}

impl fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolContext")
            .field("tool", &self.inner.tool)
            .field("class", &self.inner.class)
            .field("key", &self.inner.key)
            .field("tenant", &self.inner.tenant)
            .field("acting_for", &self.inner.acting_for)
            .field("attempt", &self.inner.attempt)
            .finish_non_exhaustive()
    }
}

/// Everything needed to build a context, borrowed from the call; used by the dispatcher.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ContextParts<'a> {
    pub tool: &'a Cow<'static, str>,
    pub class: ToolClass,
    pub key: &'a IdempotencyKey,
    pub tenant: &'a str,
    pub run_id: Option<&'a str>,
    pub step: Option<u64>,
    pub acting_for: Option<&'a str>,
    pub limits: &'a BTreeMap<String, Value>,
}

/// Where a context starts: the attempt it is for, the fenced key its call is held under, whether
/// the call was taken over from a holder that died, and its journal so far. The default is a
/// context before any attempt, of a call not held (an authorization that reads).
#[derive(Default)]
pub(crate) struct Start {
    pub attempt: u32,
    pub holder: Option<FencedKey>,
    pub takeover: bool,
    pub steps: Vec<JournalEntry>,
}

impl ToolContext {
    pub(crate) fn new(parts: ContextParts<'_>, start: Start) -> Self {
        let Start {
            attempt,
            holder,
            takeover,
            steps,
        } = start;
        ToolContext {
            inner: Arc::new(Inner {
                tool: parts.tool.clone(),
                class: parts.class,
                key: parts.key.clone(),
                tenant: parts.tenant.to_owned(),
                run_id: parts.run_id.map(str::to_owned),
                step: parts.step,
                acting_for: parts.acting_for.map(str::to_owned),
                limits: parts.limits.clone(),
                attempt,
                takeover,
                holder,
                steps: Mutex::new(steps),
                arguments: None,
                secrets: None,
            }),
        }
    }

    /// This context for a tool whose arguments at `pointers` are secret: a step whose value
    /// holds one is not journaled.
    pub(crate) fn with_secrets(
        mut self,
        pointers: &[String],
        arguments: &serde_json::Value,
    ) -> Self {
        if !pointers.is_empty()
            && let Some(inner) = Arc::get_mut(&mut self.inner)
        {
            inner.secrets = Some(Secrets {
                pointers: pointers.to_vec(),
                arguments: arguments.clone(),
            });
        }
        self
    }

    /// The context a verify hook gets: the call's, with its arguments.
    pub(crate) fn for_verify(
        parts: ContextParts<'_>,
        steps: Vec<JournalEntry>,
        arguments: serde_json::Value,
    ) -> Self {
        let mut ctx = ToolContext::new(
            parts,
            Start {
                steps,
                ..Start::default()
            },
        );
        if let Some(inner) = Arc::get_mut(&mut ctx.inner) {
            inner.arguments = Some(arguments);
        }
        ctx
    }

    /// The call's arguments (normalised, as the body would read them) in a verify hook, so
    /// that a `#[tool(verify = f)]` hook, which takes only the context, can look the effect
    /// up by them. `None` in a tool's body, which has them as its parameters.
    pub fn arguments(&self) -> Option<&serde_json::Value> {
        self.inner.arguments.as_ref()
    }

    /// A context outside any dispatcher, for unit tests of code that takes a context.
    /// Steps run but are not journaled.
    ///
    /// ```
    /// use idem::{ToolClass, ToolContext};
    ///
    /// let ctx = ToolContext::detached("send_email", ToolClass::NonIdempotentWrite, "idem-test-key");
    /// assert_eq!(ctx.idempotency_key(), "idem-test-key");
    /// ```
    pub fn detached(tool: &str, class: ToolClass, key: &str) -> Self {
        let parts = ContextParts {
            tool: &Cow::Owned(tool.to_owned()),
            class,
            key: &IdempotencyKey::new(key),
            tenant: "",
            run_id: None,
            step: None,
            acting_for: None,
            limits: &BTreeMap::new(),
        };
        ToolContext::new(
            parts,
            Start {
                attempt: 1,
                ..Start::default()
            },
        )
    }

    /// A context outside any dispatcher in `run` (its tenant, run and step, whom it acts for,
    /// its limits), for unit tests of a check, precondition or body that reads them. Steps
    /// run but are not journaled.
    ///
    /// ```
    /// use idem::{RunContext, ToolClass, ToolContext};
    ///
    /// let run = RunContext::new("shop").acting_for("cus_a").with_limit("refund", 50);
    /// let ctx = ToolContext::detached_in(&run, "refund", ToolClass::NonIdempotentWrite, "k");
    /// assert_eq!((ctx.tenant(), ctx.acting_for()), ("shop", Some("cus_a")));
    /// assert_eq!(ctx.limit("refund"), Some(&serde_json::json!(50)));
    /// ```
    pub fn detached_in(run: &RunContext, tool: &str, class: ToolClass, key: &str) -> Self {
        let parts = ContextParts {
            tool: &Cow::Owned(tool.to_owned()),
            class,
            key: &IdempotencyKey::new(key),
            tenant: &run.tenant,
            run_id: run.run_id.as_deref(),
            step: run.step,
            acting_for: run.acting_for.as_deref(),
            limits: &run.limits,
        };
        ToolContext::new(
            parts,
            Start {
                attempt: 1,
                ..Start::default()
            },
        )
    }

    /// The call's stable key: the same on every retry and every take-over. Hand it downstream
    /// outside steps; inside [`step`](Self::step), hand the step's own key instead
    /// ([`downstream_key`](Self::downstream_key) gives whichever applies), since an API that
    /// keeps idempotency keys refuses one key for two different requests.
    pub fn idempotency_key(&self) -> &str {
        self.inner.key.as_str()
    }

    /// The same key, typed.
    pub fn key(&self) -> &IdempotencyKey {
        &self.inner.key
    }

    /// The downstream key of this call's journaled step `name`: each step of a multi-step
    /// tool is its own request downstream, and an API that keeps idempotency keys refuses one
    /// key for two different requests. Derived from the call's key and the name, so it is
    /// the same on every attempt, take-over and restart. Inside [`step`](Self::step) the
    /// HTTP middleware and `KeyedRequest` send it without being told.
    ///
    /// ```
    /// use idem::{ToolClass, ToolContext};
    ///
    /// let ctx = ToolContext::detached("book_trip", ToolClass::IdempotentWrite, "idem-call");
    /// assert_eq!(ctx.step_key("charge"), ctx.step_key("charge"));
    /// assert_ne!(ctx.step_key("charge"), ctx.step_key("reserve"));
    /// ```
    pub fn step_key(&self, name: &str) -> IdempotencyKey {
        self.inner.key.for_step(name)
    }

    /// The key of the journaled step running on this task (inside [`step`](Self::step)'s
    /// closure), if one is.
    pub fn current_step_key() -> Option<IdempotencyKey> {
        STEP.try_with(|s| s.key.clone()).ok()
    }

    /// The key to hand downstream now: inside one of this call's steps, the step's
    /// ([`step_key`](Self::step_key)); otherwise the call's
    /// ([`idempotency_key`](Self::idempotency_key)).
    pub fn downstream_key(&self) -> IdempotencyKey {
        step_of(&self.inner.key).map_or_else(|| self.inner.key.clone(), |(_, key)| key)
    }

    /// The tool's registered name.
    pub fn tool(&self) -> &str {
        &self.inner.tool
    }

    /// The tool's class.
    pub fn class(&self) -> ToolClass {
        self.inner.class
    }

    /// The tenant or principal the call acts for.
    pub fn tenant(&self) -> &str {
        &self.inner.tenant
    }

    /// The run id, if the caller gave one.
    pub fn run_id(&self) -> Option<&str> {
        self.inner.run_id.as_deref()
    }

    /// The step within the run, if the caller gave one.
    pub fn run_step(&self) -> Option<u64> {
        self.inner.step
    }

    /// Whom the run acts for ([`RunContext::acting_for`](crate::RunContext::acting_for)), as
    /// the dispatcher was given it for this call: in an authorization check, a precondition,
    /// the body and a compensation alike. `None` when the run acts for no one in particular,
    /// and in a call settled by recovery, which runs without the caller's run.
    pub fn acting_for(&self) -> Option<&str> {
        self.inner.acting_for.as_deref()
    }

    /// One of the run's limits, by name ([`RunContext::with_limit`]); `None` when the run
    /// carries none of that name (or the call is settled by recovery, as for
    /// [`acting_for`](Self::acting_for)).
    pub fn limit(&self, name: &str) -> Option<&Value> {
        self.inner.limits.get(name)
    }

    /// All of the run's limits, by name.
    pub fn limits(&self) -> &BTreeMap<String, Value> {
        &self.inner.limits
    }

    /// Which attempt this is within the dispatch, from 1.
    pub fn attempt(&self) -> u32 {
        self.inner.attempt
    }

    /// Whether this execution took over an orphaned call (an earlier holder's lease expired).
    pub fn is_takeover(&self) -> bool {
        self.inner.takeover
    }

    /// Whether `name` was journaled by this or an earlier holder of the key.
    pub fn step_done(&self, name: &str) -> bool {
        self.steps().iter().any(|e| e.step == name)
    }

    fn steps(&self) -> std::sync::MutexGuard<'_, Vec<JournalEntry>> {
        self.inner.steps.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run a named step of a multi-step effect at most once per key.
    ///
    /// While `f` runs, the step's own downstream key ([`step_key`](Self::step_key)) is the
    /// one an HTTP request carries (the `reqwest` middleware, `KeyedRequest`,
    /// [`downstream_key`](Self::downstream_key)): give each write its own step.
    ///
    /// If an earlier attempt or an earlier holder (before a crash) journaled this step, its
    /// recorded value is returned and `f` does not run. Otherwise `f` runs and its value is
    /// journaled under the key before this returns. If the journal write is refused (this
    /// holder lost the key), the error is ambiguous: the step ran but is not recorded. So it
    /// is for a tool with secret arguments when the value holds one: a journal keeps no secret
    /// in clear, and a value cut of it would read back as something the step never made.
    ///
    /// ```
    /// # use idem::{ToolContext, ToolError};
    /// # async fn demo(ctx: &ToolContext) -> Result<(), ToolError> {
    /// let reservation: u64 = ctx.step("reserve", || async { Ok(42) }).await?;
    /// let charged: bool = ctx.step("charge", || async { Ok(true) }).await?;
    /// # let _ = (reservation, charged); Ok(()) }
    /// ```
    ///
    /// Step names beginning with `idem:` are the dispatcher's own journal entries (an
    /// approval, a precondition passed, a compensation): a step so named is refused before
    /// `f` runs, with a terminal error naming it.
    pub async fn step<T, F, Fut>(&self, name: &str, f: F) -> Result<T, ToolError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, ToolError>>,
    {
        if name.starts_with(RESERVED_STEP_PREFIX) {
            return Err(ToolError::terminal(format!(
                "step `{name}` was not run: names beginning with `{RESERVED_STEP_PREFIX}` are reserved for idem's own journal entries; name the step without that prefix"
            )));
        }
        self.journaled_step(name, f).await
    }

    /// [`step`](Self::step) without the check of its name: the dispatcher's own entries.
    pub(crate) async fn journaled_step<T, F, Fut>(&self, name: &str, f: F) -> Result<T, ToolError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, ToolError>>,
    {
        let recorded = self
            .steps()
            .iter()
            .find(|e| e.step == name)
            .map(|e| e.value.clone());
        if let Some(text) = recorded {
            return serde_json::from_str(&text).map_err(|e| {
                ToolError::ambiguous(format!(
                    "journaled step `{name}` cannot be read back as this type: {e}"
                ))
            });
        }
        // The step's own key is the downstream key while it runs.
        let running = RunningStep {
            call: self.inner.key.clone(),
            name: name.to_owned(),
            key: self.step_key(name),
        };
        let value = STEP.scope(running, f()).await?;
        let text = self.journaled(name, &value)?;
        if let Some(h) = &self.inner.holder {
            h.store
                .journal(&h.key, h.fence, name, &text)
                .await
                .map_err(|e| {
                    ToolError::ambiguous(format!(
                        "step `{name}` ran but could not be journaled: {e}"
                    ))
                })?;
        }
        self.steps().push(JournalEntry {
            step: name.to_owned(),
            value: text,
        });
        Ok(value)
    }
}

impl ToolContext {
    /// A step's value as journaled: its JSON text. A value holding a secret argument is
    /// refused (a record holds no secret in clear, and a value cut of it would read back as
    /// something the step never made).
    fn journaled<T: Serialize>(&self, name: &str, value: &T) -> Result<String, ToolError> {
        let unjournaled = |why: String| {
            ToolError::ambiguous(format!("step `{name}` ran but is not journaled: {why}"))
        };
        let Some(secrets) = &self.inner.secrets else {
            return serde_json::to_string(value)
                .map_err(|e| unjournaled(format!("its value cannot be written as JSON: {e}")));
        };
        let value = serde_json::to_value(value)
            .map_err(|e| unjournaled(format!("its value cannot be written as JSON: {e}")))?;
        if let Some(pointer) =
            crate::redact::secret_held(&value, &secrets.arguments, &secrets.pointers)
        {
            return Err(unjournaled(format!(
                "its value holds the secret argument `{pointer}`, and a journal keeps no secret in clear. Return what identifies the step's effect (an id, a status), not the secret"
            )));
        }
        Ok(value.to_string())
    }

    /// The steps journaled so far (carried to the next attempt of the same holder).
    pub(crate) fn journal(&self) -> Vec<JournalEntry> {
        self.steps().clone()
    }

    /// Whether this call is under way: its precondition passed on an earlier attempt or
    /// holder, or it journaled a step of the tool's own. A precondition guards the start of
    /// an effect, not its continuation.
    pub(crate) fn under_way(&self) -> bool {
        self.steps()
            .iter()
            .any(|e| e.step == PRECONDITION_STEP || !e.step.starts_with(RESERVED_STEP_PREFIX))
    }

    /// `text` with the text of the call's secret arguments cut out, as a message is.
    pub(crate) fn scrub(&self, text: &str) -> String {
        match &self.inner.secrets {
            Some(s) => crate::redact::scrub(text, &s.arguments, &s.pointers),
            None => text.to_owned(),
        }
    }
}
