//! The approve stage: an irreversible call runs only with an approval signed by one of the
//! dispatcher's approval keys for exactly this call, unexpired on the store's clock
//! (ARCHITECTURE.md, "Approvals"; the checks are `crate::approval`'s). The approval is the
//! one the run carries, or the one an operator decided in the store
//! (`idem::store::approvals`); a call with neither is recorded there as pending.
//! The operator's side (listing, approving, denying) is the desk's (`desk.rs`).

use idem_core::store::approvals::{
    self, ApprovalDecision, ApprovalPolicy, PendingApproval, Verdict,
};
use idem_core::{
    Fingerprint, IdempotencyKey, Record, RecordKey, RecordState, Timestamp, canonical_json,
};
use serde_json::Value;

use super::call::{Dispatched, ToolCall};
use super::error::{DispatchError, store_error};
use super::key::Keyed;
use super::keyed::Authority;
use super::keyed::replay;
use super::observe::EventKind;
use super::{Dispatcher, arguments, decide};
use crate::run::RunContext;
use crate::signed::{Approval, ApprovalRefusal, ApprovalRequest, Binding};
use crate::tool::ToolDef;

/// What the approve stage found.
pub(super) enum Approved {
    /// This approval or grant authorises the call.
    By(Box<Authority>),
    /// The call's completed outcome, replayed without an approval (no effect happens).
    Replayed(Dispatched),
}

fn by(approval: Approval) -> Approved {
    Approved::By(Box::new(Authority::Approval(approval)))
}

impl Dispatcher {
    /// The approve stage, for a call that needs an approval (`ToolDef::needs_approval`, which
    /// the caller asked): the approval that authorises it, or its replayed outcome. Otherwise
    /// [`DispatchError::ApprovalRequired`] (recorded as pending), `ApprovalRefused`,
    /// `ApprovalDenied` or `ApprovalEdited`.
    pub(super) async fn approve(
        &self,
        tool: &ToolDef,
        run: &RunContext,
        keyed: &Keyed,
        args: &Value,
        watch: &super::observe::Watch<'_>,
    ) -> Result<Approved, DispatchError> {
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
        // How many distinct people must have approved it (four eyes: 2).
        let needed = tool.approvers_for(args, run);
        // Only approvals naming this call are read: a run may carry approvals of others.
        // The first refusal of one is reported if nothing replays.
        let mut refused = None;
        if run.approvals.iter().any(|a| a.names(&tool.name, key)) {
            // Expiry is the store's clock's to tell, as every other deadline.
            let now = self.store.now().await.map_err(|e| store_error(tool, e))?;
            let mut valid: Vec<&Approval> = Vec::new();
            for approval in &run.approvals {
                if !approval.names(&tool.name, key) {
                    continue;
                }
                let longest = self.max_approval_validity;
                match approval.check(&self.approval_keys, &binding, longest, now) {
                    // One approver needed (every call but four eyes'): the first that holds.
                    Ok(()) if needed <= 1 => return Ok(by(approval.clone())),
                    Ok(()) => valid.push(approval),
                    Err(refusal) => refused = refused.or(Some(refusal)),
                }
            }
            match distinct_approvers(valid.iter().copied()) {
                got if got >= needed => {
                    return Ok(by(valid[0].clone()));
                }
                0 => {}
                got => refused = Some(ApprovalRefusal::TooFewApprovers { needed, got }),
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
                let mut replayed = replay(tool, record_key, downstream, outcome, Vec::new())?;
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
        // A request or an approval under another policy of the tool is not this call's
        // under the tool it has now: asked again, the change named (a denial stays final).
        let policy = tool.approval_policy();
        // Replace `stale` with this call's request under the policy now, of as many
        // approvers as it needs.
        let ask_again = async |stale: &PendingApproval| {
            let pending = PendingApproval {
                approvers: needed,
                ..self.pending_of(tool, keyed, &request, record_key, policy.clone(), now)
            };
            approvals::ask_again(store, stale, &pending)
                .await
                .map_err(|e| store_error(tool, e))
        };
        if let Some(entry) = &entry
            && entry.stands(now)
            && !matches!(&entry.decision, Some(d) if matches!(d.verdict, Verdict::Denied { .. }))
            && let Some(change) = entry.policy.as_ref().and_then(|p| p.change_to(&policy))
        {
            ask_again(entry).await?;
            return Err(refuse(ApprovalRefusal::PolicyChanged { change }));
        }
        // A standing grant lets a call it covers through, unless a person denied this very
        // call; never one that needs several approvers (one person's grant cannot stand
        // for them).
        let denied = entry.as_ref().is_some_and(|e| {
            e.stands(now)
                && matches!(&e.decision, Some(d) if matches!(d.verdict, Verdict::Denied { .. }))
        });
        if needed == 1 && !denied {
            let keys = &self.approval_keys;
            let granted = crate::grant::admitting(store, tool, args, run, now, &policy, keys)
                .await
                .map_err(|e| store_error(tool, e))?;
            if let Some(grant) = granted {
                return Ok(Approved::By(Box::new(Authority::Grant(grant))));
            }
        }
        // Approved for fewer people than the call needs now (an approver's edit moved it
        // into a rule's four eyes): asked again, of as many as it needs.
        if let Some(stale) = &entry
            && stale.stands(now)
            && needed > stale.approvers
            && matches!(&stale.decision, Some(d) if matches!(d.verdict, Verdict::Approved { .. }))
        {
            ask_again(stale).await?;
            return Err(refuse(ApprovalRefusal::TooFewApprovers { needed, got: 0 }));
        }
        match entry {
            Some(entry) if entry.stands(now) => match entry.decision {
                // Four eyes: every approval given must verify for this very call, and be
                // of enough distinct people (the store's word for who approved is not
                // believed, nor its count of how many are needed).
                Some(ApprovalDecision {
                    verdict: Verdict::Approved { fingerprint, .. },
                    ..
                }) if needed > 1 => {
                    let approved = Binding {
                        fingerprint,
                        ..binding
                    };
                    let longest = self.max_approval_validity;
                    let mut valid = Vec::new();
                    for given in &entry.approved_by {
                        let approval: Approval = serde_json::from_str(&given.approval)
                            .map_err(|_| refuse(ApprovalRefusal::BadSignature))?;
                        approval
                            .check(&self.approval_keys, &approved, longest, now)
                            .map_err(refuse)?;
                        valid.push(approval);
                    }
                    let got = distinct_approvers(valid.iter());
                    if fingerprint != keyed.fingerprint {
                        return Err(refuse(ApprovalRefusal::OtherArguments));
                    }
                    match valid.into_iter().next() {
                        Some(first) if got >= needed => Ok(by(first)),
                        _ => Err(refuse(ApprovalRefusal::TooFewApprovers { needed, got })),
                    }
                }
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
                    Ok(by(approval))
                }
            },
            // None, or one that expired: record this call as pending.
            _ => {
                let pending = PendingApproval {
                    approvers: needed,
                    ..self.pending_of(tool, keyed, &request, record_key, policy, now)
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

    /// The pending request recorded for this keyed call at `now`, under `policy`.
    fn pending_of(
        &self,
        tool: &ToolDef,
        keyed: &Keyed,
        request: &ApprovalRequest,
        record_key: &RecordKey,
        policy: ApprovalPolicy,
        now: Timestamp,
    ) -> PendingApproval {
        PendingApproval {
            key: record_key.clone(),
            namespace: request.namespace.clone(),
            tenant: request.tenant.clone(),
            tool: request.tool.clone(),
            downstream_key: request.key.as_str().to_owned(),
            fingerprint: keyed.fingerprint,
            arguments: request.arguments.clone(),
            secret_parameters: !tool.secrets.is_empty(),
            policy: Some(policy),
            approvers: 1,
            approved_by: Vec::new(),
            requested_at: now,
            expires_at: now.plus(self.max_approval_validity),
            decision: None,
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
    /// [`ApprovalDesk::approve`](crate::approval::ApprovalDesk::approve) with what it showed.
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
}

/// Whether arguments an operator approved without the tool (`ApprovalDesk::over`) are, in
/// their normal form, the ones whose fingerprint the call has: the approver wrote them
/// without a default the tool fills in, say. Never for a tool with secrets (their approved
/// arguments are sealed, and were not edited).
fn normalises_to(tool: &ToolDef, approved: &Value, fingerprint: Fingerprint) -> bool {
    tool.secrets.is_empty()
        && arguments::validate(tool, approved)
            .is_ok_and(|normal| fingerprint_of(&normal.arguments) == fingerprint)
}

/// The fingerprint of normalised (sealed) arguments, as the key stage computes it.
pub(crate) fn fingerprint_of(arguments: &Value) -> Fingerprint {
    Fingerprint::of_canonical(&canonical_json(arguments))
}

/// How many distinct people signed `approvals` (one person counts once, however written).
fn distinct_approvers<'a>(approvals: impl Iterator<Item = &'a Approval>) -> u8 {
    let mut people: Vec<&str> = Vec::new();
    for approval in approvals {
        let who = approval.approver();
        if !people.iter().any(|p| approvals::same_person(p, who)) {
            people.push(who);
        }
    }
    u8::try_from(people.len()).unwrap_or(u8::MAX)
}

fn required(request: ApprovalRequest) -> DispatchError {
    DispatchError::ApprovalRequired {
        request: Box::new(request),
    }
}
