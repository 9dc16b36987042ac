//! The execute stage: run the body under the class's retry policy, then record the outcome
//! as the holder, or give the key back as `decide` says.

use std::borrow::Cow;

use idem_core::{IdempotencyKey, Outcome, StoreError, Timestamp, ToolError};
use serde_json::Value;
use tracing::Instrument;

use super::body::{self, scrub_output, scrub_tool_error};
use super::call::Dispatched;
use super::decide::{self, GiveBack, too_deep};
use super::error::DispatchError;
use super::guard::{ClaimGuard, WonClaim};
use super::key::{random_u64, unkeyed};
use super::observe::{EventKind, Stage};
use super::{Dispatcher, KeyedCall, Watch, context_parts};
use crate::context::{Start, ToolContext};
use crate::run::RunContext;
use crate::tool::{ToolDef, TypedArguments};

impl Dispatcher {
    /// A `read`: no record; retried on any error that is not terminal.
    pub(super) async fn execute_unrecorded(
        &self,
        tool: &ToolDef,
        run: &RunContext,
        args: Cow<'_, Value>,
        mut typed: Option<TypedArguments>,
        downstream: Option<IdempotencyKey>,
        watch: &Watch<'_>,
    ) -> Result<Dispatched, DispatchError> {
        let keyed = downstream.is_some();
        let key = downstream.unwrap_or_else(unkeyed);
        let max = tool.policy.attempts_for(tool.class);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let parts = context_parts(tool, run, &key);
            let ctx = ToolContext::new(
                parts,
                Start {
                    attempt,
                    ..Start::default()
                },
            );
            let begun = watch.begin();
            let result = body::run(tool, self.execution(), ctx, &args, typed.take(), None)
                .instrument(tracing::info_span!(
                    "idem.execute",
                    idem.attempt = i64::from(attempt)
                ))
                .await;
            watch.finished_stage(tool.class, None, Stage::Execute, begun);
            let error = match result {
                Ok(output) => {
                    let output = scrub_output(tool, &args, output);
                    let output_json = output.to_string();
                    return Ok(Dispatched {
                        output,
                        output_json,
                        deduplicated: false,
                        differing_arguments: Vec::new(),
                        key: keyed.then_some(key),
                        attempts: attempt,
                        class: tool.class,
                        limits: Vec::new(),
                        granted: None,
                    });
                }
                Err(e) => scrub_tool_error(tool, &args, e),
            };
            if !decide::may_retry(tool.class, error.kind(), attempt, max) {
                return Err(DispatchError::ToolFailed {
                    tool: tool.name.to_string(),
                    error,
                    attempts: attempt,
                    deduplicated: false,
                });
            }
            tracing::debug!(attempt, error = %error, "retrying read");
            tokio::time::sleep(decide::backoff(tool.policy.backoff, attempt, random_u64())).await;
        }
    }

    /// A recorded call this dispatch holds: attempts under the class's policy, then the
    /// outcome recorded or the key given back.
    pub(super) async fn execute_held(
        &self,
        call: &KeyedCall<'_>,
        held: WonClaim,
        mut typed: Option<TypedArguments>,
        watch: &Watch<'_>,
    ) -> Result<Dispatched, DispatchError> {
        let WonClaim {
            mut hold,
            mut steps,
            takeover,
            ttl,
        } = held;
        let tool = call.tool;
        // A compensation was under way when its holder stopped: resume it, never the body.
        if tool.compensate.is_some() && super::journal::compensating(&steps) {
            let compensation = super::compensate::Compensation {
                hold,
                ttl,
                steps,
                takeover,
                attempts: 0,
                failure: ToolError::terminal("the call failed"),
            };
            return Box::pin(self.compensate_held(call, compensation, watch)).await;
        }
        // The record shows which approval authorised the call, before anything runs.
        if let Some(approval) = &call.approval {
            let h = hold.held();
            let (step, text) = approval.step();
            let journaled = h.store.journal(&h.key, h.fence, step, &text).await;
            if let Err(e) = journaled {
                // Nothing ran: give the key back. A store that failed may fail this too; the
                // claim's lease then ends it.
                if let Err(e2) = hold.give_back(&GiveBack::Release).await {
                    tracing::warn!(error = %e2, "could not give the claim back; its lease will expire");
                }
                return Err(call.store_error(e));
            }
        }
        let class = tool.class;
        let max = tool.policy.attempts_for(class);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let start = Start {
                attempt,
                holder: Some(hold.held().clone()),
                takeover,
                steps,
            };
            let ctx = ToolContext::new(call.parts(), start).with_secrets(&tool.secrets, &call.args);
            hold.running(&ctx);
            let lease = hold.keep_alive(tool.policy.lease);
            let begun = watch.begin();
            let result = body::run(
                tool,
                self.execution(),
                ctx.clone(),
                &call.args,
                typed.take(),
                Some(lease),
            )
            .instrument(tracing::info_span!(
                "idem.execute",
                idem.attempt = i64::from(attempt)
            ))
            .await;
            watch.finished(call, Stage::Execute, begun);
            steps = ctx.journal();
            let error = match result {
                Ok(output) => {
                    let output = scrub_output(tool, &call.args, output);
                    let outcome = Outcome::Success(output.to_string());
                    self.record(call, hold, ttl, &outcome, Some(&output), watch)
                        .await?;
                    let Outcome::Success(output_json) = outcome else {
                        unreachable!("a success was recorded just above")
                    };
                    return Ok(Dispatched {
                        output,
                        output_json,
                        deduplicated: false,
                        differing_arguments: Vec::new(),
                        key: Some(call.downstream.clone()),
                        attempts: attempt,
                        class,
                        limits: Vec::new(),
                        granted: None,
                    });
                }
                Err(error) => scrub_tool_error(tool, &call.args, error),
            };
            if decide::may_retry(class, error.kind(), attempt, max) {
                watch.saw(
                    call,
                    EventKind::Retried {
                        attempt,
                        error: error.kind(),
                    },
                );
                tokio::time::sleep(decide::backoff(tool.policy.backoff, attempt, random_u64()))
                    .await;
                match hold.renew(tool.policy.lease).await {
                    Ok(_) => continue,
                    Err(StoreError::Fenced { .. }) => {
                        hold.abandon();
                        return Err(DispatchError::Fenced {
                            tool: tool.name.to_string(),
                            key: call.downstream.clone(),
                        });
                    }
                    Err(e) => {
                        // Unknown whether the key is still held: leave it to the lease.
                        hold.abandon();
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
            if super::compensate::compensates(tool, error.kind(), &steps) {
                let compensation = super::compensate::Compensation {
                    hold,
                    ttl,
                    steps,
                    takeover,
                    attempts: attempt,
                    failure: error,
                };
                return Box::pin(self.compensate_held(call, compensation, watch)).await;
            }
            // Only the tool's own steps are a partial effect (not the dispatcher's entries:
            // an approval, a precondition passed).
            let partial = super::tool_steps(&steps);
            let recorded = decide::records_failure(error.kind(), call.approval.is_some(), partial);
            let how = GiveBack::after(class, error.kind(), partial, error.message());
            // A call that failed for good, or whose outcome is not known, waits for a person
            // if its tool says so.
            if let Some(escalate) = tool.escalate {
                let sent = match &how {
                    GiveBack::Unknown(reason) if !recorded && escalate.unknown() => Some((
                        super::case::EscalationKind::Unknown,
                        ToolError::new(idem_core::ErrorKind::Ambiguous, reason),
                    )),
                    GiveBack::Unknown(_) if !recorded => None,
                    _ if escalate.failures() => {
                        Some((super::case::EscalationKind::Failure, error.clone()))
                    }
                    _ => None,
                };
                if let Some((kind, sent)) = sent {
                    let sent = match error.details() {
                        Some(details) if sent.details().is_none() => {
                            sent.with_details(details.clone())
                        }
                        _ => sent,
                    };
                    return Box::pin(self.escalate(call, hold, kind, sent, attempt, watch)).await;
                }
            }
            if recorded {
                // Boxed: a failure is rarer than a success, whose record stage sets the
                // size of this future (moved whole at each await that starts it).
                let failure = self.record_failure(call, hold, ttl, error, attempt, watch);
                return Box::pin(failure).await;
            }
            let since = self.store.now().await.unwrap_or_else(|_| Timestamp::now());
            hold.give_back(&how)
                .await
                .map_err(|e| call.store_error(e))?;
            return match how {
                GiveBack::Unknown(reason) => {
                    watch.saw(call, EventKind::LeftUnknown);
                    Err(DispatchError::OutcomeUnknown {
                        tool: tool.name.to_string(),
                        key: call.downstream.clone(),
                        since,
                        retry_after: call.verifiable_from(since, &reason, &steps, None),
                        reason,
                    })
                }
                GiveBack::Release | GiveBack::Expire => Err(failed(error)),
            };
        }
    }

    /// Record `error` as the call's outcome, as the holder, and report the call failed after
    /// `attempts` attempts of its body.
    pub(super) async fn record_failure(
        &self,
        call: &KeyedCall<'_>,
        hold: ClaimGuard,
        ttl: std::time::Duration,
        error: ToolError,
        attempts: u32,
        watch: &Watch<'_>,
    ) -> Result<Dispatched, DispatchError> {
        let outcome = Outcome::Failure(error.clone());
        self.record(call, hold, ttl, &outcome, None, watch).await?;
        Err(DispatchError::ToolFailed {
            tool: call.tool.name.to_string(),
            error,
            attempts,
            deduplicated: false,
        })
    }

    /// Record an outcome as the holder. If it cannot be recorded, give the key back so that
    /// nothing stays held: the effect happened, so a write whose re-execution is not safe
    /// becomes Unknown.
    pub(super) async fn record(
        &self,
        call: &KeyedCall<'_>,
        mut hold: ClaimGuard,
        ttl: std::time::Duration,
        outcome: &Outcome,
        output: Option<&Value>,
        watch: &Watch<'_>,
    ) -> Result<(), DispatchError> {
        let begun = watch.begin();
        let result = async {
            match too_deep(outcome, output) {
                Some(e) => Err(e),
                None => hold.complete(outcome, ttl).await,
            }
        }
        .instrument(tracing::info_span!("idem.record"))
        .await;
        watch.finished(call, Stage::Record, begun);
        let e = match result {
            Ok(()) => return Ok(()),
            Err(StoreError::Fenced { .. }) => {
                return Err(DispatchError::Fenced {
                    tool: call.tool.name.to_string(),
                    key: call.downstream.clone(),
                });
            }
            Err(e) => e,
        };
        let note = format!("the effect happened but its outcome could not be recorded: {e}");
        let how = GiveBack::unrecorded(call.tool.class, note);
        match hold.give_back(&how).await {
            Err(e2) => {
                tracing::warn!(error = %e2, "could not settle the claim; its lease will expire")
            }
            Ok(()) if matches!(how, GiveBack::Unknown(_)) => {
                watch.saw(call, EventKind::LeftUnknown);
            }
            Ok(()) => {}
        }
        Err(call.store_error(e))
    }

    fn execution(&self) -> Option<&dyn super::body::Execution> {
        self.execution.as_deref()
    }
}
