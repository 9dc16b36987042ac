//! The claim stage: take the key, or find what is recorded under it. A completed record
//! replays; a record of other arguments is a reused key; a live holder is waited for
//! (bounded); an Unknown record is verified once its settle delay passed, else reported.

use std::future::Future;
use std::pin::Pin;

use idem_core::{Claim, ClaimRequest, RecordState, StoreError};
use tracing::Instrument;

use super::call::Dispatched;
use super::decide::{self, GiveBack, Reuse};
use super::error::DispatchError;
use super::guard::{ClaimGuard, WonClaim, give_back};
use super::observe::EventKind;
use super::verify::{UnknownRecord, Verification};
use super::{Dispatcher, KeyedCall, Watch};
use crate::context::FencedKey;
use idem_core::KeySource;

/// What the claim stage ends with, when it does not end the dispatch with an error.
pub(crate) enum Claimed {
    /// This dispatch holds the key: run the body.
    WonClaim(WonClaim),
    /// Settled without running: a replay, or the verify hook's answer.
    Settled(Dispatched),
}

impl Dispatcher {
    /// `canonical`: the canonical JSON of the (sealed) arguments, stored with the claim.
    pub(super) async fn claim(
        &self,
        call: &KeyedCall<'_>,
        canonical: String,
        watch: &Watch<'_>,
    ) -> Result<Claimed, DispatchError> {
        let tool = call.tool;
        let contract = tool.contract(call.ttl);
        let mut request = ClaimRequest {
            key: call.record_key.clone(),
            tool: tool.name.to_string(),
            tenant: call.run.tenant.clone(),
            fingerprint: call.fingerprint,
            lease: tool.policy.lease,
            orphans: orphan_policy(tool),
            arguments: Some(canonical),
            contract: Some(contract.clone()),
        };
        let deadline = tokio::time::Instant::now() + tool.policy.wait;
        let mut poll = decide::FIRST_POLL;
        let mut verifications = 0;
        // Where this call's arguments differ from the record's it stands for (find-or-create),
        // and the record's arguments then: what a verify hook is asked about.
        let mut differ = Vec::new();
        let mut recorded_args = None;
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
                    // A tool with a compensation takes every orphan over, to resume a
                    // compensation its holder left; any other orphan of a class that never
                    // runs again turns Unknown, as the store would have made it.
                    if takeover
                        && !tool.class.reexecution_is_safe()
                        && !super::journal::compensating(&steps)
                    {
                        let marked = self
                            .store
                            .mark_unknown(&request.key, fence, idem_core::ORPHANED)
                            .await;
                        match marked {
                            Ok(()) | Err(StoreError::Fenced { .. }) => continue,
                            Err(e) => return Err(call.store_error(e)),
                        }
                    }
                    watch.saw(call, EventKind::Claimed { takeover });
                    // A record taken over keeps the contract it was made under, and is kept
                    // for the longer of the two TTLs once completed.
                    let ttl = match takeover {
                        true => self
                            .recorded(&request.key, &contract)
                            .await
                            .map_or(call.ttl, |r| r.ttl),
                        false => call.ttl,
                    };
                    let held = FencedKey {
                        store: self.store.clone(),
                        key: request.key,
                        fence,
                    };
                    return Ok(Claimed::WonClaim(WonClaim {
                        hold: ClaimGuard::new(held, tool.class),
                        steps,
                        takeover,
                        ttl,
                    }));
                }
                Claim::Existing(record) => record,
            };
            match decide::reuse(
                record.fingerprint,
                call.fingerprint,
                request.fingerprint,
                tool.policy.replay_on_key_reuse,
                call.source,
            ) {
                Reuse::Same | Reuse::Adopted => {}
                Reuse::Refuse => {
                    return Err(DispatchError::KeyReused {
                        tool: tool.name.to_string(),
                        key: call.downstream.clone(),
                        // Recovery claims under the recorded arguments and never gets here.
                        key_source: call.source.unwrap_or(KeySource::Explicit),
                        differing: differing(&record, &request),
                    });
                }
                Reuse::ClaimAs(recorded) => {
                    differ = differing(&record, &request);
                    recorded_args = asked_about(&record);
                    request.fingerprint = recorded;
                    continue;
                }
            }
            match record.state {
                RecordState::Completed { outcome, .. } => {
                    return super::keyed::replay(
                        call.tool,
                        &call.record_key,
                        &call.downstream,
                        outcome,
                        differ,
                    )
                    .map(Claimed::Settled);
                }
                RecordState::Unknown { since, last_error } => {
                    // A call sent to a person is theirs to settle: no hook is asked.
                    if let Some(case) = super::case::Escalation::of_recorded(&last_error) {
                        let key = call.downstream.clone();
                        let tool = tool.name.to_string();
                        return Err(super::escalate::escalated(tool, key, since, case, true));
                    }
                    // A record the handler of another version made is not settled by this
                    // version's hook: an operator resolves it (`idem_core::contract`).
                    if let Some(made) = &record.contract
                        && !made.reconcile(&contract).may_verify()
                    {
                        return Err(DispatchError::OutcomeUnknown {
                            tool: tool.name.to_string(),
                            key: call.downstream.clone(),
                            since,
                            reason: format!(
                                "{last_error}; made by handler version {:?}, now {:?}: its verify hook is not asked, resolve the record as an operator",
                                made.version, contract.version
                            ),
                            retry_after: None,
                        });
                    }
                    // Downstream may commit after the timeout that made the record Unknown,
                    // and an orphan's holder may still be running: a hook asked before the
                    // settle delay could answer "not applied" about an effect on its way.
                    let made_lease = record.contract.as_ref().map(|c| c.lease);
                    let retry_after =
                        call.verifiable_from(since, &last_error, &record.steps, made_lease);
                    let now = match retry_after {
                        Some(_) => self.store.now().await.ok(),
                        None => None,
                    };
                    if decide::may_verify(retry_after, now, verifications) {
                        verifications += 1;
                        let ttl = record
                            .contract
                            .as_ref()
                            .map_or(call.ttl, |made| made.reconcile(&contract).ttl);
                        // Boxed: an Unknown record is rare, and the claim of every call
                        // would otherwise carry the verify future's size.
                        let verify = self.verify(
                            call,
                            UnknownRecord {
                                fence: record.fence,
                                steps: record.steps,
                                since,
                                last_error: &last_error,
                                arguments: recorded_args.clone(),
                            },
                            ttl,
                            watch,
                        );
                        match Box::pin(verify.instrument(tracing::info_span!("idem.verify")))
                            .await?
                        {
                            Verification::Applied(outcome) => {
                                return super::keyed::replay(
                                    call.tool,
                                    &call.record_key,
                                    &call.downstream,
                                    outcome,
                                    differ,
                                )
                                .map(Claimed::Settled);
                            }
                            // Released, or settled by another worker: claim again.
                            Verification::Released | Verification::Raced => continue,
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
                    poll = decide::next_poll(poll);
                }
            }
        }
    }

    /// The rules for the record under `key`, made under its recorded contract and met under
    /// `current`; `None` if it has no contract or cannot be read (the current policy applies).
    async fn recorded(
        &self,
        key: &idem_core::RecordKey,
        current: &idem_core::Contract,
    ) -> Option<idem_core::Reconciled> {
        let record = self.store.get(key).await.ok()??;
        Some(record.contract?.reconcile(current))
    }

    /// Claim, so that a dispatch dropped while the claim is in flight leaves no claim that
    /// nobody will use: the claim is polled here, in the caller's task (no extra hop to
    /// another task on the common path), and only if the caller goes away before the answer
    /// does the unfinished claim move to a task of its own, which gives the key back.
    ///
    /// The request comes back with the claim, to be claimed again with if need be.
    pub(super) async fn claim_cancel_safe(
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
            let Some(claim) = pending.claim.as_mut() else {
                // Polled again after it answered: nothing is left to claim with.
                return std::task::Poll::Pending;
            };
            let answer = std::task::ready!(claim.as_mut().poll(cx));
            pending.claim = None;
            std::task::Poll::Ready(answer)
        })
        .await
    }
}

/// What the store does with an orphan of this tool: the class's rule, except that a tool
/// with a compensation takes every orphan over (the claim stage then turns one that was not
/// compensating Unknown itself).
pub(super) fn orphan_policy(tool: &crate::tool::ToolDef) -> idem_core::OrphanPolicy {
    match tool.compensate {
        Some(_) => idem_core::OrphanPolicy::TakeOver,
        None => tool.class.orphan_policy(),
    }
}

/// Where the claim's arguments differ from those recorded, as JSON Pointers.
fn differing(record: &idem_core::Record, request: &ClaimRequest) -> Vec<String> {
    differing_texts(record.arguments.as_deref(), request.arguments.as_deref())
}

/// Where a call's arguments (canonical JSON) differ from a record's, as JSON Pointers; empty
/// when either is missing or not JSON (nothing to compare).
pub(super) fn differing_texts(recorded: Option<&str>, call: Option<&str>) -> Vec<String> {
    let parse = |text: Option<&str>| text.and_then(|t| serde_json::from_str(t).ok());
    match (parse(recorded), parse(call)) {
        (Some(recorded), Some(call)) => crate::args::differing(&recorded, &call),
        _ => Vec::new(),
    }
}

/// The arguments a record was made with, for a verify hook asked about it on behalf of a
/// call its natural key stands for: `None` when they are not stored, not JSON, or hold a
/// sealed secret (the hook then gets the call's own, which name the same effect).
fn asked_about(record: &idem_core::Record) -> Option<serde_json::Value> {
    let arguments: serde_json::Value = serde_json::from_str(record.arguments.as_ref()?).ok()?;
    (!crate::redact::holds_seal(&arguments)).then_some(arguments)
}

type ClaimFuture = Pin<Box<dyn Future<Output = Result<(Claim, ClaimRequest), StoreError>> + Send>>;

/// A claim in flight. If the dispatch is dropped before the answer, the claim finishes in a
/// task of its own and is given back ([`GiveBack::abandoned`]). The key is the one in the
/// request the claim hands back.
struct PendingClaim {
    claim: Option<ClaimFuture>,
    store: std::sync::Arc<dyn idem_core::Store>,
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
                let how = GiveBack::abandoned(takeover, !steps.is_empty());
                let held = FencedKey {
                    store,
                    key: request.key,
                    fence,
                };
                if let Err(e) = give_back(&held, &how).await {
                    tracing::warn!(error = %e, key = %held.key, "could not give back an abandoned claim; its lease will expire");
                }
            }
        });
    }
}
