//! The approval desk: the one place a pending approval is decided. A person (through the
//! `idem` command line, the inbox, an MCP client's elicitation, or code) lists what waits,
//! approves it as shown, with or without an edit, or denies it as shown; every decision is a
//! compare-and-swap on the store's entry, so a decision lands once and only on the call the
//! person saw.
//!
//! A desk opened by a dispatcher ([`Dispatcher::approvals`]) has the tools: an edit is
//! normalised and checked against the tool's schema, and an entry of a tool it does not
//! know is refused. A desk over a store alone ([`ApprovalDesk::over`]) serves a process that
//! has the store and an approval key but not the agent's registry (the command line, the
//! inbox): an edit is taken as given, canonicalised, and checked when the agent calls with
//! it (a call that does not fit is refused, and nothing runs).

use idem_core::store::approvals::{
    self, ApprovalFilter, DecisionRefused, PendingApproval, Verdict,
};
use idem_core::store::decisions::{self, Action, Decision, LogError};
use idem_core::{Fingerprint, IdempotencyKey, RecordKey, Store, StoreError};
use serde_json::Value;

use crate::dispatch::{DispatchError, Dispatcher, arguments, fingerprint_of};
use crate::registry::Registry;
use crate::signed::{ApprovalRequest, Approver, PendingCall};

/// The one place a pending approval is decided: it lists what waits, approves a call as the
/// person saw it, with or without an edit, or denies it as they saw it; each decision is a
/// compare-and-swap on the store's entry, so it lands once and only on the call shown.
///
/// Opened by a dispatcher ([`Dispatcher::approvals`]) it has the tools: an edit is
/// normalised and checked against the tool's schema, and an entry of a tool it does not
/// know is refused. Over a store alone ([`ApprovalDesk::over`]) it serves a process that has
/// the store and an approval key but not the agent's registry (the command line, the inbox):
/// an edit is taken as given, canonicalised, and checked when the agent calls with it.
///
/// A decision names its call by what the person deciding holds ([`PendingCall`]): the
/// request the agent's `ApprovalRequired` refusal handed back, an entry [`pending`] listed,
/// or either of the call's keys.
///
/// [`pending`]: ApprovalDesk::pending
///
/// ```
/// use std::sync::Arc;
/// use idem::approval::ApprovalDesk;
/// use idem::store::approvals::ApprovalFilter;
/// use idem::store::memory::MemoryStore;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let store = MemoryStore::new();
/// let desk = ApprovalDesk::over(&store);
/// assert!(desk.pending(&ApprovalFilter::default()).await.unwrap().is_empty());
/// # }
/// ```
#[derive(Clone, Copy)]
pub struct ApprovalDesk<'a> {
    pub(super) store: &'a dyn Store,
    /// The tools, for a desk a dispatcher opened.
    pub(super) registry: Option<&'a Registry>,
    /// The door the decisions come through, as the decision log names it.
    pub(super) door: &'a str,
}

impl Dispatcher {
    /// The approval desk over this dispatcher's store, with its tools: edits are checked
    /// against the tool's schema.
    pub fn approvals(&self) -> ApprovalDesk<'_> {
        ApprovalDesk {
            store: &**self.store(),
            registry: Some(self.registry()),
            door: decisions::DEFAULT_DOOR,
        }
    }
}

impl<'a> ApprovalDesk<'a> {
    /// A desk over `store` alone, without the agent's tools.
    pub fn over(store: &'a dyn Store) -> Self {
        ApprovalDesk {
            store,
            registry: None,
            door: decisions::DEFAULT_DOOR,
        }
    }

    /// The desk with its decisions logged as made through `door` (`inbox`, `cli`, `mcp`,
    /// ...; [`decisions::DEFAULT_DOOR`] otherwise). Every decision is appended to the store's decision
    /// log ([`idem_core::store::decisions`]): who, what, when, through which door, and the
    /// fingerprint of the arguments shown.
    pub fn through(mut self, door: &'a str) -> Self {
        self.door = door;
        self
    }

    /// The pending approvals `filter` admits (by default every tenant's calls still
    /// awaiting a decision), oldest first. A call that ran meanwhile with an approval its run
    /// carried has a record with its arguments: it awaits nothing, and is not listed as
    /// pending.
    pub async fn pending(
        &self,
        filter: &ApprovalFilter,
    ) -> Result<Vec<PendingApproval>, StoreError> {
        let listed = approvals::list(self.store, filter).await?;
        if filter.pending_only {
            return self.awaiting(listed).await;
        }
        Ok(listed)
    }

    /// Of `entries`, those whose call has not run meanwhile with an approval its run carried
    /// (a record with their arguments): the ones still awaiting a decision.
    pub async fn awaiting(
        &self,
        entries: Vec<PendingApproval>,
    ) -> Result<Vec<PendingApproval>, StoreError> {
        let mut awaiting = Vec::with_capacity(entries.len());
        for entry in entries {
            let ran = self.store.get(&entry.key).await?;
            if ran.is_none_or(|r| r.fingerprint != entry.fingerprint) {
                awaiting.push(entry);
            }
        }
        Ok(awaiting)
    }

    /// Whether an approver may edit the arguments of `entry`: not those of a tool with
    /// secret parameters, nor any holding a secret's seal (an entry from before entries
    /// said so).
    pub fn editable(entry: &PendingApproval) -> bool {
        !entry.secret_parameters && !crate::redact::holds_seal(&entry.arguments)
    }

    /// The entry of the call `call` names (a refusal's request, a listed entry, the record
    /// key or the downstream key), decided or not, expired or not; `None` if no approval was
    /// requested for it. Its arguments are not compared: a decision compares them.
    pub async fn find<'k>(
        &self,
        call: impl Into<PendingCall<'k>>,
    ) -> Result<Option<PendingApproval>, StoreError> {
        let call = call.into();
        // The store keeps entries by record key, which a downstream key cannot be turned
        // back into: the entries are searched, and only the one holding the key is read
        // whole (another's text cannot stop the search).
        let (downstream, tenant, tool) = match call {
            PendingCall::Record(key) => return approvals::get(self.store, key).await,
            PendingCall::Listed(entry) => return approvals::get(self.store, &entry.key).await,
            PendingCall::Downstream(key) => (key, None, None),
            PendingCall::Refused(request) => (
                &request.key,
                Some(request.tenant.clone()),
                Some(request.tool.clone()),
            ),
        };
        let everything = ApprovalFilter {
            tenant,
            tool,
            pending_only: false,
            limit: usize::MAX,
        };
        for (key, text) in self.store.approval_texts(&everything).await? {
            if !text.contains(downstream.as_str()) {
                continue;
            }
            if let Some(entry) = approvals::get(self.store, &key).await?
                && call.names(&entry)
            {
                return Ok(Some(entry));
            }
        }
        Ok(None)
    }

    /// The record key of the call `call` names, and the fingerprint of the arguments the
    /// decision binds: `call`'s own (a refusal's or a listed entry's) and `shown` must agree.
    async fn decided_on(
        &self,
        call: PendingCall<'_>,
        shown: Option<Fingerprint>,
    ) -> Result<(RecordKey, Option<Fingerprint>), DecisionError> {
        let key = match call {
            PendingCall::Record(key) => key.clone(),
            PendingCall::Listed(entry) => entry.key.clone(),
            PendingCall::Downstream(downstream)
            | PendingCall::Refused(ApprovalRequest {
                key: downstream, ..
            }) => match self.find(call).await? {
                Some(entry) => entry.key,
                None => return Err(DecisionError::NoRequest(downstream.clone())),
            },
        };
        match (call.shown(), shown) {
            (Some(theirs), Some(yours)) if theirs != yours => Err(DecisionError::NotShown(key)),
            (theirs, yours) => Ok((key, theirs.or(yours))),
        }
    }

    /// Approve the call `call` names, signed by `approver`, valid until the request expires.
    /// A call that needs several approvers (four eyes, [`ToolBuilder::approvers`]) is
    /// decided by the last one needed: the entry returned awaits more
    /// ([`PendingApproval::awaiting`]) until then, and a person who approved it already is
    /// refused (`ApprovedAlready`), whatever door they came through.
    ///
    /// [`ToolBuilder::approvers`]: crate::ToolBuilder::approvers
    ///
    /// `call` is what the person deciding holds: the request of the agent's
    /// [`ApprovalRequired`](DispatchError::ApprovalRequired) refusal (`&request`), which
    /// approves exactly that call with the arguments it was refused with; an entry
    /// [`pending`](Self::pending) listed, with the arguments listed; or either key of the
    /// call (its [`RecordKey`], or the downstream key a refusal names), whatever its
    /// arguments. A request or key no approval was requested for is
    /// [`DecisionError::NoRequest`] (a downstream key) or `NotRequested` (a record key).
    ///
    /// With `edited` arguments the approval binds those instead: the agent's call with the
    /// original arguments is then refused with `ApprovalEdited`, which carries them, and runs
    /// once called with them. The arguments of a tool with secret parameters cannot be edited
    /// ([`DecisionError::SecretsNotEditable`]: the approver sees only their seals). With
    /// `shown`, only the call whose arguments have that fingerprint (the one the approver
    /// was shown) is approved, as [`DecisionError::NotShown`] tells otherwise; a request or
    /// listed entry binds its own.
    ///
    /// ```
    /// use idem::{Approver, DispatchError, Dispatcher, RunContext, ToolCall};
    ///
    /// # async fn demo(agent: &Dispatcher, approver: &Approver, call: &ToolCall, run: &RunContext)
    /// # -> Result<(), Box<dyn std::error::Error>> {
    /// if let Err(DispatchError::ApprovalRequired { request }) = agent.dispatch(call, run).await {
    ///     // A person looked at `request.arguments` and said yes to this call alone.
    ///     agent.approvals().approve(&request, approver, None, None).await?;
    ///     agent.dispatch(call, run).await?; // runs it once
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn approve<'k>(
        &self,
        call: impl Into<PendingCall<'k>>,
        approver: &Approver,
        edited: Option<&Value>,
        shown: Option<Fingerprint>,
    ) -> Result<PendingApproval, DecisionError> {
        let (key, shown) = self.decided_on(call.into(), shown).await?;
        let registry = self.registry;
        let tool = |name: &str| {
            registry
                .map(|r| {
                    r.get(name)
                        .ok_or_else(|| DecisionError::UnknownTool(name.to_owned()))
                })
                .transpose()
        };
        let edit = |entry: &PendingApproval, edited: &Value| match tool(&entry.tool)? {
            Some(tool) => {
                if !tool.secrets.is_empty() {
                    return Err(DecisionError::SecretsNotEditable(entry.tool.clone()));
                }
                Ok(arguments::validate(tool, edited)
                    .map_err(|e| DecisionError::InvalidArguments(Box::new(e)))?
                    .arguments
                    .into_owned())
            }
            None => {
                if !Self::editable(entry) || crate::redact::holds_seal(edited) {
                    return Err(DecisionError::SecretsNotEditable(entry.tool.clone()));
                }
                Ok(edited.clone())
            }
        };
        let decided = decide_approval(
            self.store,
            &key,
            approver,
            edited,
            shown,
            |entry| {
                let Some(tool) = tool(&entry.tool)? else {
                    return Ok(());
                };
                let now = tool.approval_policy();
                match entry
                    .policy
                    .as_ref()
                    .and_then(|asked| asked.change_to(&now))
                {
                    Some(change) => Err(DecisionError::PolicyChanged {
                        key: entry.key.clone(),
                        change,
                    }),
                    None => Ok(()),
                }
            },
            edit,
        )
        .await?;
        self.log(&decided, approver.identity(), Action::Approve)
            .await
    }

    /// Deny the call `call` names (as [`approve`](Self::approve) takes it: a refusal's
    /// request, a listed entry, or either key): the agent's calls with its key are refused
    /// with `ApprovalDenied` and `reason` until the request expires. With `shown`, or a
    /// request or listed entry, only the call whose arguments have that fingerprint is
    /// denied, checked in the same swap as the decision: a person who declined one call never
    /// denies another made under its key since.
    pub async fn deny<'k>(
        &self,
        call: impl Into<PendingCall<'k>>,
        by: &str,
        reason: &str,
        shown: Option<Fingerprint>,
    ) -> Result<PendingApproval, DecisionError> {
        let (key, shown) = self.decided_on(call.into(), shown).await?;
        let verdict = Verdict::Denied {
            reason: reason.to_owned(),
        };
        let decided = approvals::decide_as_shown(self.store, &key, by, &verdict, shown).await??;
        self.log(&decided, by, Action::Deny).await
    }

    /// Append the decision on `entry` to the decision log; `entry` once it is there.
    async fn log(
        &self,
        entry: &PendingApproval,
        by: &str,
        action: Action,
    ) -> Result<PendingApproval, DecisionError> {
        let mut decision = Decision::new(by, action, self.door, &entry.tenant)
            .about(&entry.tool, entry.key.as_str())
            .shown(entry.fingerprint);
        match entry.decision.as_ref().map(|d| &d.verdict) {
            Some(Verdict::Denied { reason }) => decision = decision.detail(reason.as_str()),
            Some(Verdict::Approved { fingerprint, .. }) if *fingerprint != entry.fingerprint => {
                decision = decision.detail(format!(
                    "approved with edited arguments, fingerprint {}",
                    fingerprint.to_hex()
                ));
            }
            None if action == Action::Approve => {
                decision = decision.detail(format!(
                    "approval {} of {}: awaiting {} more",
                    entry.approved_by.len(),
                    entry.approvers,
                    entry.awaiting()
                ));
            }
            _ => {}
        }
        match decisions::append(self.store, &decision).await {
            Ok(_) => Ok(entry.clone()),
            Err(error) => Err(DecisionError::NotLogged {
                key: entry.key.clone(),
                error,
            }),
        }
    }
}

/// Approve the entry under `key`: `known` checks the entry's tool may be decided here,
/// `edit` turns edited arguments into the ones approved.
async fn decide_approval(
    store: &dyn Store,
    key: &RecordKey,
    approver: &Approver,
    edited: Option<&Value>,
    shown: Option<Fingerprint>,
    known: impl FnOnce(&PendingApproval) -> Result<(), DecisionError>,
    edit: impl FnOnce(&PendingApproval, &Value) -> Result<Value, DecisionError>,
) -> Result<PendingApproval, DecisionError> {
    let entry = approvals::get(store, key)
        .await?
        .ok_or_else(|| DecisionError::Refused(DecisionRefused::NotRequested(key.clone())))?;
    if shown.is_some_and(|shown| shown != entry.fingerprint) {
        return Err(DecisionError::NotShown(key.clone()));
    }
    known(&entry)?;
    // The approver approves what they are shown: arguments whose fingerprint is not the
    // entry's were put there by someone else.
    if fingerprint_of(&entry.arguments) != entry.fingerprint {
        return Err(DecisionError::Tampered(key.clone()));
    }
    let (arguments, fingerprint) = match edited {
        None => (entry.arguments.clone(), entry.fingerprint),
        Some(edited) => {
            let normal = edit(&entry, edited)?;
            let fingerprint = fingerprint_of(&normal);
            (normal, fingerprint)
        }
    };
    let request = ApprovalRequest {
        namespace: entry.namespace.clone(),
        tenant: entry.tenant.clone(),
        tool: entry.tool.clone(),
        key: IdempotencyKey::new(&entry.downstream_key),
        fingerprint,
        arguments: arguments.clone(),
    };
    let approval = approver.approve_until(&request, entry.expires_at);
    let verdict = Verdict::Approved {
        approval: serde_json::to_string(&approval).unwrap_or_default(),
        arguments,
        fingerprint,
    };
    // Decided on the entry as read: one asked again since (another policy) is not approved.
    Ok(approvals::decide_as_read(store, &entry, approver.identity(), &verdict).await??)
}

/// Why an operator's decision was not recorded.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum DecisionError {
    /// The store refused the decision (not requested, already decided, expired).
    #[error(transparent)]
    Refused(#[from] DecisionRefused),
    /// No approval was requested for the call with this downstream key (for a refusal's
    /// request: in its namespace, tenant and tool): it was never refused for want of one,
    /// or its entry was purged.
    #[error(
        "no approval was requested for the call with downstream key {0}: it was never refused for want of one here, or its request was purged"
    )]
    NoRequest(IdempotencyKey),
    /// The store could not be reached or answered an error.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The pending call's tool is not in this dispatcher's registry.
    #[error("tool `{0}` of the pending call is not registered with this dispatcher")]
    UnknownTool(String),
    /// The edited arguments do not fit the tool.
    #[error("the edited arguments are refused: {0}")]
    InvalidArguments(Box<DispatchError>),
    /// The stored entry's arguments are not the ones its fingerprint covers: it was altered
    /// in the store, and approving it would approve arguments the approver never saw.
    #[error(
        "the pending approval under key {0} was altered in the store: its arguments do not match its fingerprint; deny it and investigate"
    )]
    Tampered(RecordKey),
    /// The call pending under the key has other arguments than the approver was shown.
    #[error(
        "the call pending approval under key {0} has other arguments than the ones shown to the approver: nothing was approved"
    )]
    NotShown(RecordKey),
    /// The decision was recorded, and the decision log could not take it: the call is
    /// decided, and the log lacks the entry (`idem audit verify` still holds; the operator
    /// must know).
    #[error(
        "the decision on key {key} was recorded, and the decision log could not take it: {error}"
    )]
    NotLogged {
        /// The key.
        key: RecordKey,
        /// Why the log refused.
        error: LogError,
    },
    /// The call was asked under another policy of its tool than the one it has now: an
    /// approval would be refused when the call comes to use it.
    #[error(
        "the call pending approval under key {key} was asked under another policy of its tool: {change}; nothing was approved: the agent's next call asks again under the policy it has now"
    )]
    PolicyChanged {
        /// The key.
        key: RecordKey,
        /// What changed, in words.
        change: String,
    },
    /// The tool has secret parameters: its arguments cannot be edited by an approver.
    #[error(
        "`{0}` has secret parameters, which an approver sees only as seals: approve or deny the call as made"
    )]
    SecretsNotEditable(String),
}
