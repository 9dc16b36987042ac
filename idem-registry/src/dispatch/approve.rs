//! The approve stage: an irreversible call runs only with an approval signed by one of the
//! dispatcher's approval keys for exactly this call, unexpired on the store's clock
//! (ARCHITECTURE.md, "Approvals"; the checks are `crate::approval`'s). The approval is the
//! one the run carries, or the one an operator decided in the store
//! (`idem_core::store::approvals`); a call with neither is recorded there as pending.
//!
//! The operator's side (listing, approving, denying) is here too, since it reads arguments
//! and signs approvals the way the dispatcher checks them.

use idem_core::store::approvals::{
    self, ApprovalDecision, ApprovalFilter, DecisionRefused, PendingApproval, Verdict,
};
use idem_core::{
    Fingerprint, IdempotencyKey, Record, RecordKey, RecordState, Store, StoreError, canonical_json,
};
use serde_json::Value;

use super::call::{Dispatched, RunContext, ToolCall};
use super::error::{DispatchError, store_error};
use super::key::Keyed;
use super::observe::EventKind;
use super::{Dispatcher, arguments, decide, replay};
use crate::approval::{Approval, ApprovalRefusal, ApprovalRequest, Approver, Binding};
use crate::tool::ToolDef;

/// The journal step under which the record of an approved call keeps its approval (the
/// audit of which approval authorised it). Tools should not name a step so.
pub const APPROVAL_STEP: &str = "idem:approval";

/// What the approve stage found.
pub(super) enum Approved {
    /// The class needs no approval.
    NotNeeded,
    /// This approval authorises the call.
    By(Box<Approval>),
    /// The call's completed outcome, replayed without an approval (no effect happens).
    Replayed(Dispatched),
}

impl Dispatcher {
    /// The approve stage. Otherwise [`DispatchError::ApprovalRequired`] (recorded as
    /// pending), `ApprovalRefused`, `ApprovalDenied` or `ApprovalEdited`.
    pub(super) async fn approve(
        &self,
        tool: &ToolDef,
        run: &RunContext,
        keyed: &Keyed,
        args: &Value,
        watch: &super::observe::Watch<'_>,
    ) -> Result<Approved, DispatchError> {
        if !tool.class.requires_approval() {
            return Ok(Approved::NotNeeded);
        }
        let key = keyed
            .keys
            .as_ref()
            .map_or("", |(_, downstream)| downstream.as_str());
        let binding = Binding {
            namespace: &self.namespace,
            tenant: &run.tenant,
            tool: &tool.name,
            key,
            fingerprint: keyed.fingerprint,
        };
        // Only approvals naming this call are read: a run may carry approvals of others.
        // The first refusal of one is reported if nothing replays.
        let mut refused = None;
        if run.approvals.iter().any(|a| a.names(&tool.name, key)) {
            // Expiry is the store's clock's to tell, as every other deadline.
            let now = self.store.now().await.map_err(|e| store_error(tool, e))?;
            for approval in &run.approvals {
                if !approval.names(&tool.name, key) {
                    continue;
                }
                let longest = self.max_approval_validity;
                match approval.check(&self.approval_keys, &binding, longest, now) {
                    Ok(()) => return Ok(Approved::By(Box::new(approval.clone()))),
                    Err(refusal) => refused = refused.or(Some(refusal)),
                }
            }
        }
        // A run replayed from a checkpoint without its approvals (or with expired ones) gets
        // the recorded outcome. Only a completed record the claim stage would replay to this
        // call is replayed (these very arguments, or a natural key standing for them, with
        // the arguments that differ named); anything that could execute needs the approval.
        // A store that cannot answer leaves it required.
        if let Some((record_key, downstream)) = &keyed.keys {
            let recorded = self.store.get(record_key).await.ok().flatten();
            if let Some(Record {
                fingerprint,
                state: RecordState::Completed { outcome, .. },
                arguments,
                ..
            }) = recorded
                && decide::reuse(
                    fingerprint,
                    keyed.fingerprint,
                    keyed.fingerprint,
                    tool.policy.replay_on_key_reuse,
                    keyed.source,
                ) != decide::Reuse::Refuse
            {
                let mut replayed = replay(tool, record_key, downstream, outcome)?;
                if fingerprint != keyed.fingerprint {
                    replayed.differing_arguments =
                        super::claim::differing_texts(arguments.as_deref(), Some(&keyed.canonical));
                }
                return Ok(Approved::Replayed(replayed));
            }
        }
        let refuse = |refusal| DispatchError::ApprovalRefused {
            tool: tool.name.to_string(),
            key: IdempotencyKey::new(key),
            refusal,
        };
        if let Some(refusal) = refused {
            return Err(refuse(refusal));
        }
        let request = self.request_of(tool, run, keyed, args);
        let Some((record_key, _)) = &keyed.keys else {
            return Err(required(request));
        };
        // The decision an operator made in the store, if one stands.
        let store = &*self.store;
        let entry = approvals::get(store, record_key)
            .await
            .map_err(|e| store_error(tool, e))?;
        let now = self.store.now().await.map_err(|e| store_error(tool, e))?;
        match entry {
            Some(entry) if entry.stands(now) => match entry.decision {
                None => Err(required(request)),
                Some(ApprovalDecision {
                    by,
                    verdict: Verdict::Denied { reason },
                    ..
                }) => Err(DispatchError::ApprovalDenied {
                    tool: tool.name.to_string(),
                    key: IdempotencyKey::new(key),
                    by,
                    reason,
                }),
                Some(ApprovalDecision {
                    verdict:
                        Verdict::Approved {
                            approval,
                            arguments,
                            fingerprint,
                        },
                    ..
                }) => {
                    // The store's word is not believed: the approval must verify as one the
                    // run carried would, for the arguments it says it approved, before
                    // anything of it is acted on or shown.
                    let approval: Approval = serde_json::from_str(&approval)
                        .map_err(|_| refuse(ApprovalRefusal::BadSignature))?;
                    if fingerprint_of(&arguments) != fingerprint {
                        return Err(refuse(ApprovalRefusal::OtherArguments));
                    }
                    let approved = Binding {
                        fingerprint,
                        ..binding
                    };
                    let longest = self.max_approval_validity;
                    approval
                        .check(&self.approval_keys, &approved, longest, now)
                        .map_err(refuse)?;
                    if fingerprint != keyed.fingerprint
                        && !normalises_to(tool, &arguments, keyed.fingerprint)
                    {
                        // Edits to a tool with secrets are never handed to the model: an
                        // approver without the tools may have typed a secret the call
                        // left out into them.
                        if !tool.secrets.is_empty() {
                            return Err(refuse(ApprovalRefusal::OtherArguments));
                        }
                        return Err(DispatchError::ApprovalEdited {
                            tool: tool.name.to_string(),
                            key: IdempotencyKey::new(key),
                            arguments: Box::new(arguments),
                        });
                    }
                    Ok(Approved::By(Box::new(approval)))
                }
            },
            // None, or one that expired: record this call as pending.
            _ => {
                let ttl = self.max_approval_validity;
                let pending = PendingApproval {
                    key: record_key.clone(),
                    namespace: request.namespace.clone(),
                    tenant: request.tenant.clone(),
                    tool: request.tool.clone(),
                    downstream_key: key.to_owned(),
                    fingerprint: keyed.fingerprint,
                    arguments: request.arguments.clone(),
                    secret_parameters: !tool.secrets.is_empty(),
                    requested_at: now,
                    expires_at: now.plus(ttl),
                    decision: None,
                };
                let stored = approvals::request(store, &pending)
                    .await
                    .map_err(|e| store_error(tool, e))?;
                // A request already waiting stands and comes back instead of this one; only
                // a new one is news.
                if stored == pending {
                    let hash = super::key_hash(&pending.key);
                    watch.saw_of(tool.class, Some(hash), EventKind::ApprovalRequested);
                }
                Err(required(request))
            }
        }
    }

    /// What an approver is asked for this keyed call.
    fn request_of(
        &self,
        tool: &ToolDef,
        run: &RunContext,
        keyed: &Keyed,
        args: &Value,
    ) -> ApprovalRequest {
        let key = keyed
            .keys
            .as_ref()
            .map_or("", |(_, downstream)| downstream.as_str());
        let arguments = match &keyed.sealed {
            Some(sealed) => sealed.clone(),
            None => Value::clone(args),
        };
        ApprovalRequest {
            namespace: self.namespace.clone(),
            tenant: run.tenant.clone(),
            tool: tool.name.to_string(),
            key: IdempotencyKey::new(key),
            fingerprint: keyed.fingerprint,
            arguments,
        }
    }

    /// What an approver would be asked for `call`, and its record key, without reading or
    /// writing the store: the checks a dispatch makes before its approve stage (the tool,
    /// its arguments, scopes, key material) and their errors. A door that asks a person
    /// before the call runs (MCP elicitation) shows this, and decides it with
    /// [`approve_pending_as_shown`](Self::approve_pending_as_shown).
    pub fn approval_request(
        &self,
        call: &ToolCall,
        run: &RunContext,
    ) -> Result<(RecordKey, ApprovalRequest), DispatchError> {
        let checked = self.check(call, run, super::Scopes::Checked)?;
        let request = self.request_of(checked.tool, run, &checked.keyed, &checked.args);
        let keyed = checked.keyed;
        match keyed.keys {
            Some((record_key, _)) => Ok((record_key, request)),
            None => Err(required(request)),
        }
    }

    /// Operator: the pending approvals `filter` admits (by default every tenant's calls
    /// still awaiting a decision), oldest first. A call that ran meanwhile with an approval
    /// its run carried has a record with its arguments: it awaits nothing, and is not listed
    /// as pending.
    pub async fn pending_approvals(
        &self,
        filter: &ApprovalFilter,
    ) -> Result<Vec<PendingApproval>, StoreError> {
        pending_stored(&*self.store, filter).await
    }

    /// Operator: approve the pending call under `key`, signed by `approver`, valid until the
    /// request expires. With `edited` arguments the approval binds those instead (normalised
    /// and checked against the tool's schema as a call's are): the agent's call with the
    /// original arguments is then refused with `ApprovalEdited`, which carries them, and
    /// runs once called with them. A tool with secret parameters cannot be approved with
    /// edits (the approver sees only their seals).
    pub async fn approve_pending(
        &self,
        key: &RecordKey,
        approver: &Approver,
        edited: Option<&Value>,
    ) -> Result<PendingApproval, DecisionError> {
        self.approve_pending_as_shown(key, approver, edited, None)
            .await
    }

    /// [`approve_pending`](Self::approve_pending), only if the pending call's arguments are
    /// the ones `shown` (their fingerprint) to the approver: another call pending under the
    /// key is refused with [`DecisionError::NotShown`].
    pub async fn approve_pending_as_shown(
        &self,
        key: &RecordKey,
        approver: &Approver,
        edited: Option<&Value>,
        shown: Option<Fingerprint>,
    ) -> Result<PendingApproval, DecisionError> {
        let tool = |name: &str| {
            self.registry
                .get(name)
                .ok_or_else(|| DecisionError::UnknownTool(name.to_owned()))
        };
        let edit = |entry: &PendingApproval, edited: &Value| {
            let tool = tool(&entry.tool)?;
            if !tool.secrets.is_empty() {
                return Err(DecisionError::SecretsNotEditable(entry.tool.clone()));
            }
            Ok(arguments::validate(tool, edited)
                .map_err(|e| DecisionError::InvalidArguments(Box::new(e)))?
                .arguments
                .into_owned())
        };
        decide_approval(
            &*self.store,
            key,
            approver,
            edited,
            shown,
            |entry| tool(&entry.tool).map(|_| ()),
            edit,
        )
        .await
    }

    /// Operator: deny the pending call under `key`: the agent's calls with its key are
    /// refused with `ApprovalDenied` and `reason` until the request expires.
    pub async fn deny_pending(
        &self,
        key: &RecordKey,
        by: &str,
        reason: &str,
    ) -> Result<PendingApproval, DecisionError> {
        deny_stored(&*self.store, key, by, reason, None).await
    }

    /// [`deny_pending`](Self::deny_pending), only if the request under `key` still has the
    /// arguments whose fingerprint was `shown` (checked in the same swap as the decision): a
    /// person who declined one call never denies another made under its key since.
    pub async fn deny_pending_as_shown(
        &self,
        key: &RecordKey,
        by: &str,
        reason: &str,
        shown: Fingerprint,
    ) -> Result<PendingApproval, DecisionError> {
        deny_stored(&*self.store, key, by, reason, Some(shown)).await
    }
}

/// Operator, without the tools: the pending approvals in `store` that `filter` admits, as
/// [`Dispatcher::pending_approvals`] lists them.
pub async fn pending_stored(
    store: &dyn Store,
    filter: &ApprovalFilter,
) -> Result<Vec<PendingApproval>, StoreError> {
    let listed = approvals::list(store, filter).await?;
    if filter.pending_only {
        return not_yet_run(store, listed).await;
    }
    Ok(listed)
}

/// Of `entries`, those whose call has not run meanwhile with an approval its run carried
/// (a record with their arguments): the ones still awaiting a decision.
pub async fn not_yet_run(
    store: &dyn Store,
    entries: Vec<PendingApproval>,
) -> Result<Vec<PendingApproval>, StoreError> {
    let mut awaiting = Vec::with_capacity(entries.len());
    for entry in entries {
        let ran = store.get(&entry.key).await?;
        if ran.is_none_or(|r| r.fingerprint != entry.fingerprint) {
            awaiting.push(entry);
        }
    }
    Ok(awaiting)
}

/// Whether an approver may edit the arguments of `entry`: not those of a tool with secret
/// parameters, nor any holding a secret's seal (an entry from before entries said so).
pub fn editable(entry: &PendingApproval) -> bool {
    !entry.secret_parameters && !crate::redact::holds_seal(&entry.arguments)
}

/// Operator, without the tools: approve the call pending under `key` in `store`, as
/// [`Dispatcher::approve_pending`] does, for a process that has the store and an approval
/// key but not the agent's registry (the `idem` command line, the approval inbox).
///
/// Edited arguments are taken as given, canonicalised: their schema is checked when the
/// agent calls with them (a call that does not fit is refused, and nothing runs), and a
/// dispatcher accepts them if they are the call's arguments in their normal form (a default
/// the approver left out is filled in the same way for both). The arguments of a tool with
/// secret parameters, or holding a secret's seal, cannot be edited
/// ([`DecisionError::SecretsNotEditable`]). With `shown`, only the
/// call whose arguments have that fingerprint is approved (the one the approver was shown),
/// as [`DecisionError::NotShown`] tells otherwise.
pub async fn approve_stored(
    store: &dyn Store,
    key: &RecordKey,
    approver: &Approver,
    edited: Option<&Value>,
    shown: Option<Fingerprint>,
) -> Result<PendingApproval, DecisionError> {
    let edit = |entry: &PendingApproval, edited: &Value| {
        if !editable(entry) || crate::redact::holds_seal(edited) {
            return Err(DecisionError::SecretsNotEditable(entry.tool.clone()));
        }
        Ok(edited.clone())
    };
    decide_approval(store, key, approver, edited, shown, |_| Ok(()), edit).await
}

/// Operator, without the tools: deny the call pending under `key` in `store`, as
/// [`Dispatcher::deny_pending`] does.
/// With `shown`, only the call whose arguments have that fingerprint is denied, checked in
/// the same swap as the decision (`DecisionRefused::NotShown` otherwise).
pub async fn deny_stored(
    store: &dyn Store,
    key: &RecordKey,
    by: &str,
    reason: &str,
    shown: Option<Fingerprint>,
) -> Result<PendingApproval, DecisionError> {
    let verdict = Verdict::Denied {
        reason: reason.to_owned(),
    };
    Ok(approvals::decide_as_shown(store, key, by, &verdict, shown).await??)
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
    Ok(approvals::decide_as_shown(store, key, approver.identity(), &verdict, shown).await??)
}

/// Whether arguments an operator approved without the tool ([`approve_stored`]) are, in
/// their normal form, the ones whose fingerprint the call has: the approver wrote them
/// without a default the tool fills in, say. Never for a tool with secrets (their approved
/// arguments are sealed, and were not edited).
fn normalises_to(tool: &ToolDef, approved: &Value, fingerprint: Fingerprint) -> bool {
    tool.secrets.is_empty()
        && arguments::validate(tool, approved)
            .is_ok_and(|normal| fingerprint_of(&normal.arguments) == fingerprint)
}

/// The fingerprint of normalised (sealed) arguments, as the key stage computes it.
fn fingerprint_of(arguments: &Value) -> Fingerprint {
    Fingerprint::of_canonical(&canonical_json(arguments))
}

fn required(request: ApprovalRequest) -> DispatchError {
    DispatchError::ApprovalRequired {
        request: Box::new(request),
    }
}

/// Why an operator's decision was not recorded.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum DecisionError {
    /// The store refused the decision (not requested, already decided, expired).
    #[error(transparent)]
    Refused(#[from] DecisionRefused),
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
    /// The tool has secret parameters: its arguments cannot be edited by an approver.
    #[error(
        "`{0}` has secret parameters, which an approver sees only as seals: approve or deny the call as made"
    )]
    SecretsNotEditable(String),
}
