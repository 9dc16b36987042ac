//! Settling an Unknown record by asking the tool's verify hook whether the effect happened.

use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use idem_core::{Fence, JournalEntry, Outcome, Timestamp, ToolError};
use serde_json::Value;

use super::body::{scrub_output, scrub_tool_error};
use super::decide::{FAILED_VERIFY_PAUSE, too_deep};
use super::error::DispatchError;
use super::observe::EventKind;
use super::{Dispatcher, KeyedCall, Watch};
use crate::context::ToolContext;
use crate::tool::Verified;

/// What a verify hook's answer did to an Unknown record.
pub(crate) enum Verification {
    /// Completed with this outcome.
    Applied(Outcome),
    /// Deleted: the call may run.
    Released,
    /// Another worker settled it first (or the tool has no hook).
    Raced,
}

/// An Unknown record, as the verify stage reads it.
pub(crate) struct UnknownRecord<'a> {
    /// Its fence: the settlement is conditional on it.
    pub fence: Fence,
    /// Its journal, handed to the hook.
    pub steps: Vec<JournalEntry>,
    /// When it became Unknown.
    pub since: Timestamp,
    /// Why.
    pub last_error: &'a str,
    /// The arguments the record was made with, when they are not the call's (a natural key
    /// standing for both): the hook is asked about the effect the record stands for.
    pub arguments: Option<Value>,
}

impl Dispatcher {
    /// Ask the hook, and settle the record from the answer (fenced: if another worker
    /// settled it first, nothing changes); an outcome is kept for `ttl`.
    pub(super) async fn verify(
        &self,
        call: &KeyedCall<'_>,
        unknown: UnknownRecord<'_>,
        ttl: std::time::Duration,
        watch: &Watch<'_>,
    ) -> Result<Verification, DispatchError> {
        let UnknownRecord {
            fence,
            steps,
            since,
            last_error,
            arguments,
        } = unknown;
        let tool = call.tool;
        let Some(verify) = &tool.verify else {
            return Ok(Verification::Raced);
        };
        let arguments = arguments.unwrap_or_else(|| Value::clone(&call.args));
        let ctx = ToolContext::for_verify(call.parts(), steps, arguments.clone());
        let answer = AssertUnwindSafe(verify(ctx, arguments))
            .catch_unwind()
            .await
            .unwrap_or_else(|_| Err(ToolError::ambiguous("the verify hook panicked")));
        let outcome = match answer {
            Ok(Verified::Applied(value)) => {
                let value = scrub_output(tool, &call.args, value);
                let outcome = Outcome::Success(value.to_string());
                match too_deep(&outcome, Some(&value)) {
                    Some(e) => Err(format!("the hook's answer cannot be recorded: {e}")),
                    None => Ok(Some(outcome)),
                }
            }
            Ok(Verified::NotApplied) => Ok(None),
            Err(e) => Err(scrub_tool_error(tool, &call.args, e).to_string()),
        };
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(why) => {
                // The hook may answer next time (its API was down, say): call again after a
                // pause, so that agents honouring it do not hammer the provider's lookup API.
                let now = self.store.now().await.unwrap_or_else(|_| Timestamp::now());
                return Err(DispatchError::OutcomeUnknown {
                    tool: tool.name.to_string(),
                    key: call.downstream.clone(),
                    since,
                    reason: format!("{last_error}; verification failed: {why}"),
                    retry_after: Some(now.plus(FAILED_VERIFY_PAUSE)),
                });
            }
        };
        watch.saw(
            call,
            EventKind::Verified {
                applied: outcome.is_some(),
            },
        );
        let done = self
            .store
            .settle_unknown(&call.record_key, fence, outcome.as_ref(), ttl)
            .await
            .map_err(|e| call.store_error(e))?;
        Ok(match (done, outcome) {
            (false, _) => Verification::Raced,
            (true, Some(o)) => Verification::Applied(o),
            (true, None) => Verification::Released,
        })
    }
}
