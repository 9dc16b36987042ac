//! Why a dispatch was refused or did not succeed.

use idem_core::KeySource;
use idem_core::{IdempotencyKey, StoreError, Timestamp, ToolClass, ToolError};

use crate::signed::{ApprovalRefusal, ApprovalRequest};
use crate::tool::ToolDef;

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
    /// ([`Dispatcher::with_secret_key`](super::Dispatcher::with_secret_key)); nothing was recorded or run.
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
    /// The call fails one of the tool's authorization checks or rules, which read its
    /// arguments and the run (whom it acts for, its limits); nothing was recorded or run.
    #[error("`{tool}` may not be called so in this run: {rule}")]
    NotAuthorized {
        /// The tool.
        tool: String,
        /// The rule that failed, in words (never an argument's value).
        rule: String,
    },
    /// A write call came with no key material (no explicit key, call id, run/step or
    /// natural key); it was not executed.
    #[error(
        "`{tool}` is {} tool and the call has no key: pass the provider's call id, an explicit key, or a run id and step", with_article(*class)
    )]
    MissingKey {
        /// The tool.
        tool: String,
        /// Its class.
        class: ToolClass,
    },
    /// A call that needs a person's approval (every irreversible call, and those a tool's
    /// approval rule selects) without one for this key and these arguments; it is pending
    /// in the store. The request names the call by its downstream key, and is what the
    /// approval desk takes to decide exactly this call with these arguments
    /// (`desk.approve(&request, ..)`; `idem approvals approve` takes its key).
    #[error("`{}` needs approval from a person for key {} with these exact arguments; nothing ran", request.tool, request.key)]
    ApprovalRequired {
        /// What to approve.
        request: Box<ApprovalRequest>,
    },
    /// An approval presented for this call was refused; nothing was recorded or run.
    #[error("the approval for `{tool}` with key {key} was refused: {refusal}")]
    ApprovalRefused {
        /// The tool.
        tool: String,
        /// The call's downstream key.
        key: IdempotencyKey,
        /// The check that failed.
        refusal: ApprovalRefusal,
    },
    /// An operator denied this call (in the store); it is refused until the request
    /// expires. Tell the model: "denied: {reason}".
    #[error("`{tool}` with key {key} was denied by {by}: {reason}")]
    ApprovalDenied {
        /// The tool.
        tool: String,
        /// The call's downstream key.
        key: IdempotencyKey,
        /// Who denied it.
        by: String,
        /// Why.
        reason: String,
    },
    /// An operator approved this call with edited arguments: it runs when called again with
    /// `arguments` (same call id), never with the original ones.
    #[error(
        "`{tool}` with key {key} was approved with edited arguments; call it again with them: {arguments}"
    )]
    ApprovalEdited {
        /// The tool.
        tool: String,
        /// The call's downstream key.
        key: IdempotencyKey,
        /// The approved arguments (secrets sealed). Boxed: the error stays small whatever
        /// serde_json's features make a `Value`.
        arguments: Box<serde_json::Value>,
    },
    /// The key was used before with other arguments; nothing ran. What to do depends on
    /// where the key came from (`key_source`): an explicit key is the caller's to change; a call
    /// id or a run and step reused for another call is the host's mistake; a natural key
    /// (with `on_key_reuse = "reject"`) means the entity exists already.
    #[error("{}", key_reused(tool, key, *key_source, differing))]
    KeyReused {
        /// The tool.
        tool: String,
        /// The key.
        key: IdempotencyKey,
        /// Where the key came from.
        key_source: KeySource,
        /// The JSON Pointers of the arguments that differ from the recorded call's, sorted
        /// (empty when the record kept no arguments to compare).
        differing: Vec<String>,
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
    /// The call ended badly and its tool sends such a call to a person
    /// ([`ToolBuilder::escalate`](crate::ToolBuilder::escalate)): it waits in the store as a
    /// case, and every call under this key gets this answer until the person decides (to run
    /// it again under this key, to say what happened, or to undo the run). Tell the model a
    /// person has it; calling again changes nothing until then.
    #[error("`{tool}` with key {key} was sent to a person ({}) since {}; nothing more runs until they decide", case.summary(), since.to_rfc3339())]
    Escalated {
        /// The tool.
        tool: String,
        /// The key.
        key: IdempotencyKey,
        /// When it was sent (store clock).
        since: Timestamp,
        /// What the person is shown. Boxed: the error stays small.
        case: Box<super::case::Escalation>,
        /// Whether this answer was read from the case an earlier dispatch recorded (no body
        /// ran in this one), as a replay is.
        deduplicated: bool,
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

/// A class's name with its article: "an `idempotent_write`", "a `read`".
fn with_article(class: ToolClass) -> String {
    let name = class.as_str();
    let article = match name.starts_with(['a', 'e', 'i', 'o', 'u']) {
        true => "an",
        false => "a",
    };
    format!("{article} `{name}`")
}

/// A `KeyReused` message: what happened, and what its reader can do about it.
fn key_reused(tool: &str, key: &IdempotencyKey, source: KeySource, differing: &[String]) -> String {
    let differ = match differing {
        [] => String::new(),
        some => format!(" (they differ at {})", some.join(", ")),
    };
    let what = format!(
        "the {source} of this `{tool}` call (key {key}) was already used for a call with other arguments{differ}; nothing ran"
    );
    let next = match source {
        KeySource::Explicit => {
            "choose a new key for a new call, or send the recorded call's arguments to get its result"
        }
        KeySource::Natural => {
            "the entity these arguments identify already exists (the tool refuses to stand in for it with other arguments): use the existing one, or change the arguments that identify it"
        }
        KeySource::CallId => {
            "the host gave two different calls one call id: each tool call needs its own id (when the provider numbers calls `call_0`, `call_1` in every response, give each response's calls a run id)"
        }
        KeySource::RunStep => {
            "the host gave two different calls one run, step and index: number the steps of a run so that each call has its own"
        }
        KeySource::Resend => {
            "a call keyed by its arguments met a record of other arguments (the dispatcher's secret key changed?): give the call a key of its own"
        }
        _ => "give the call a key of its own, or send the recorded call's arguments",
    };
    format!("{what}: {next}")
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
            DispatchError::NotAuthorized { .. } => "not_authorized",
            DispatchError::SecretKeyMissing { .. } => "secret_key_missing",
            DispatchError::MissingKey { .. } => "missing_key",
            DispatchError::ApprovalRequired { .. } => "approval_required",
            DispatchError::ApprovalRefused { .. } => "approval_refused",
            DispatchError::ApprovalDenied { .. } => "approval_denied",
            DispatchError::ApprovalEdited { .. } => "approval_edited",
            DispatchError::KeyReused { .. } => "key_reused",
            DispatchError::InProgress { .. } => "in_progress",
            DispatchError::OutcomeUnknown { .. } => "outcome_unknown",
            DispatchError::Escalated { .. } => "escalated",
            DispatchError::Fenced { .. } => "fenced",
            DispatchError::StoreUnavailable { .. } => "store_unavailable",
            DispatchError::Store { .. } => "store_error",
            DispatchError::ToolFailed { .. } => "tool_failed",
        }
    }

    /// The request of an [`ApprovalRequired`](DispatchError::ApprovalRequired) refusal:
    /// what [`ApprovalDesk::approve`](crate::approval::ApprovalDesk::approve) and
    /// [`deny`](crate::approval::ApprovalDesk::deny) take to decide exactly the call refused, with the
    /// arguments it was refused with. `None` for every other error.
    ///
    /// ```
    /// use idem::DispatchError;
    ///
    /// let unknown = DispatchError::UnknownTool { name: "send_emial".into(), suggestion: None };
    /// assert!(unknown.approval_request().is_none());
    /// ```
    pub fn approval_request(&self) -> Option<&ApprovalRequest> {
        match self {
            DispatchError::ApprovalRequired { request } => Some(request),
            _ => None,
        }
    }

    /// Whether the program running the agent must handle this error, rather than the model.
    ///
    /// The model can act on every other refusal (fix its arguments, pick another tool, wait,
    /// ask for approval), so a front end answers it with a result the model reads. These
    /// three say nothing about the call and everything about the host: the store is down
    /// (`StoreUnavailable`), failed otherwise (`Store`), or this worker lost the key
    /// (`Fenced`); showing them to the model would invite it to retry a call whose outcome
    /// the host has not settled. Every front end (MCP, the agent loop) asks this one
    /// question.
    ///
    /// ```
    /// use idem::DispatchError;
    ///
    /// let down = DispatchError::StoreUnavailable { tool: "send_email".into(), message: "timed out".into() };
    /// let unknown = DispatchError::UnknownTool { name: "send_emial".into(), suggestion: Some("send_email".into()) };
    /// assert!(down.is_for_host());
    /// assert!(!unknown.is_for_host());
    /// ```
    pub fn is_for_host(&self) -> bool {
        matches!(
            self,
            DispatchError::StoreUnavailable { .. }
                | DispatchError::Store { .. }
                | DispatchError::Fenced { .. }
        )
    }
}

/// A store's error as the dispatcher reports it: unreachable, or what the store said.
pub(crate) fn store_error(tool: &ToolDef, e: StoreError) -> DispatchError {
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

/// A dispatcher that cannot be made as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SetupError {
    /// A tool whose calls may need approval (every irreversible one, and one with an
    /// approval rule), and no key to verify its approvals with: those calls would be refused.
    #[error(
        "tool `{tool}` has calls that need approval and this dispatcher has no approval key to verify its approvals with: build it with `Dispatcher::approving(registry, store, ApprovalKeys::new([key]))` (see `idem::approval`)"
    )]
    NoApprovalKeys {
        /// The first tool of the registry that may need approval.
        tool: String,
    },
    /// A limit given to the dispatcher ([`Dispatcher::with_limit`](super::Dispatcher::with_limit))
    /// that cannot work: its tool is not in the registry, or the limit does not fit the tool.
    #[error("a limit for tool `{tool}` cannot work: {reason}")]
    InvalidLimit {
        /// The tool named.
        tool: String,
        /// What is wrong, and the fix.
        reason: String,
    },
}
