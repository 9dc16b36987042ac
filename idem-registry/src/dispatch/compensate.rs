//! The compensate stage: a call whose later step failed for good has its completed steps
//! undone, in reverse order, each once. The stage is entered after the execute stage's
//! last attempt (the failure is certain: nothing of the failing step happened) for a tool
//! with a compensation, and by whoever takes the call over while a compensation was under
//! way (its journal says so), so that a crash mid-compensation resumes rather than stops.
//!
//! Each undo is a journaled step of its own (`idem:undo:<step>`), with a key of its own
//! handed downstream: a compensation resumed after a crash finds the ones done, and asks
//! again under the same key for the one that was in flight. The failure being compensated is
//! journaled first (`idem:compensating`), so a worker that takes over reports it. All undone:
//! the call is recorded as a failure naming what was undone. An undo that fails, or whose
//! outcome is unknown: the record becomes Unknown, naming the step, for a person.

use idem_core::{ErrorKind, JournalEntry, Timestamp, ToolError};
use serde_json::{Value, json};

use super::body::scrub_tool_error;
use super::call::Dispatched;
use super::decide::GiveBack;
use super::error::DispatchError;
use super::guard::ClaimGuard;
use super::journal::{COMPENSATING_STEP, UNDO_PREFIX, undoable};
use super::{Dispatcher, KeyedCall, Watch};
use crate::context::{Start, ToolContext};
use crate::tool::Undo;

/// A held call to compensate: the claim, how long its outcome is kept, its journal, and the
/// failure it is compensated for.
pub(super) struct Compensation {
    pub hold: ClaimGuard,
    pub ttl: std::time::Duration,
    pub steps: Vec<JournalEntry>,
    pub takeover: bool,
    /// The body's attempts in this dispatch (0 for a resumed compensation).
    pub attempts: u32,
    /// Why the call failed (on a resumed compensation, its journal's word wins).
    pub failure: ToolError,
}

impl Dispatcher {
    /// Undo the completed steps of `call`, which failed for good with `failure` (or, on a
    /// take-over, with the failure its journal holds), and settle the record.
    pub(super) async fn compensate_held(
        &self,
        call: &KeyedCall<'_>,
        compensation: Compensation,
        watch: &Watch<'_>,
    ) -> Result<Dispatched, DispatchError> {
        let Compensation {
            mut hold,
            ttl,
            steps,
            takeover,
            attempts,
            failure,
        } = compensation;
        let tool = call.tool;
        let Some(compensate) = tool.compensate.clone() else {
            unreachable!("the compensate stage runs only for a tool with a compensation")
        };
        let to_undo: Vec<JournalEntry> = undoable(&steps).into_iter().cloned().collect();
        let start = Start {
            attempt: attempts.max(1),
            holder: Some(hold.held().clone()),
            takeover,
            steps,
        };
        let ctx = ToolContext::new(call.parts(), start).with_secrets(&tool.secrets, &call.args);
        hold.running(&ctx);
        let lease = hold.keep_alive(tool.policy.lease);
        let work = {
            let ctx = ctx.clone();
            async move {
                // The failure is journaled before anything is undone; a take-over reads it.
                let failure: ToolError = ctx
                    .journaled_step(COMPENSATING_STEP, || async { Ok(failure) })
                    .await?;
                let mut undone = Vec::new();
                for entry in to_undo.iter().rev() {
                    let output = serde_json::from_str(&entry.value)
                        .unwrap_or_else(|_| Value::String(entry.value.clone()));
                    let undo = Undo::new(&entry.step, output, ctx.step_key(&entry.step));
                    let name = format!("{UNDO_PREFIX}{}", entry.step);
                    let undoing = ctx.journaled_step(&name, || {
                        let undo = compensate(ctx.clone(), undo);
                        async move { undo.await.map(|()| true) }
                    });
                    if let Err(e) = undoing.await {
                        let details = json!({"step": entry.step, "undone": undone});
                        return Err(ToolError::new(e.kind(), e.message()).with_details(details));
                    }
                    undone.push(entry.step.clone());
                }
                Ok(json!({
                    "undone": undone,
                    "failure": failure,
                }))
            }
        };
        let result = super::body::guard(ctx.key().clone(), Box::pin(work), Some(lease)).await;
        match result {
            Ok(done) => {
                let failure: ToolError = serde_json::from_value(done["failure"].clone())
                    .unwrap_or_else(|_| ToolError::terminal("the call failed"));
                let undone: Vec<String> =
                    serde_json::from_value(done["undone"].clone()).unwrap_or_default();
                let error = compensated(&failure, &undone);
                let error = scrub_tool_error(tool, &call.args, error);
                self.record_failure(call, hold, ttl, error, attempts, watch)
                    .await
            }
            Err(e) => {
                let e = scrub_tool_error(tool, &call.args, e);
                let step = e
                    .details()
                    .and_then(|d| d["step"].as_str())
                    .unwrap_or("?")
                    .to_owned();
                let undone: Vec<String> = e
                    .details()
                    .and_then(|d| serde_json::from_value(d["undone"].clone()).ok())
                    .unwrap_or_default();
                // What happened, not who settles it: the error, the account and the CLI each
                // say that once, in their own words.
                let reason = format!(
                    "undoing step `{step}` of a call that failed for good did not succeed ({}: {}); undone before it: {}. Its completed steps may be partly undone",
                    e.kind(),
                    e.message(),
                    listed(&undone)
                );
                let since = self.store.now().await.unwrap_or_else(|_| Timestamp::now());
                hold.give_back(&GiveBack::Unknown(reason.clone()))
                    .await
                    .map_err(|e| call.store_error(e))?;
                watch.saw(call, super::observe::EventKind::LeftUnknown);
                Err(DispatchError::OutcomeUnknown {
                    tool: tool.name.to_string(),
                    key: call.downstream.clone(),
                    since,
                    reason,
                    retry_after: None,
                })
            }
        }
    }
}

/// Whether the execute stage hands a failure to the compensate stage: a certain failure
/// (nothing of the failing step happened) of a tool with a compensation, after it completed
/// some steps.
pub(crate) fn compensates(
    tool: &crate::tool::ToolDef,
    kind: ErrorKind,
    steps: &[JournalEntry],
) -> bool {
    tool.compensate.is_some() && kind != ErrorKind::Ambiguous && !undoable(steps).is_empty()
}

/// The recorded failure of a compensated call.
fn compensated(failure: &ToolError, undone: &[String]) -> ToolError {
    ToolError::terminal(format!(
        "{}; it was compensated: the steps it had completed were undone ({}), so nothing of it remains applied",
        failure.message(),
        listed(undone)
    ))
    .with_details(json!({
        "compensated": undone,
        "failure": {"kind": failure.kind(), "message": failure.message(), "details": failure.details()},
    }))
}

fn listed(steps: &[String]) -> String {
    match steps {
        [] => "none".to_owned(),
        steps => steps
            .iter()
            .map(|s| format!("`{s}`"))
            .collect::<Vec<_>>()
            .join(", "),
    }
}
