//! A call that records, once resolved and keyed: what the claim, execute, verify and
//! compensate stages read, and the one place a recorded outcome becomes an answer.

use std::borrow::Cow;
use std::time::Duration;

use idem_core::{Fingerprint, IdempotencyKey, KeySource, Outcome, RecordKey, StoreError};
use serde_json::Value;

use super::call::Dispatched;
use super::error::{self, DispatchError};
use super::{RunContext, decide};
use crate::tool::ToolDef;

/// A call that records, resolved and keyed: what the claim, execute and verify stages read.
pub(super) struct KeyedCall<'a> {
    pub(super) tool: &'a ToolDef,
    pub(super) run: &'a RunContext,
    /// The provider's call id, if the call has one (a case sent to a person names it).
    pub(super) call_id: Option<&'a str>,
    pub(super) args: Cow<'a, Value>,
    pub(super) record_key: RecordKey,
    pub(super) downstream: IdempotencyKey,
    pub(super) fingerprint: Fingerprint,
    /// Where the key came from (`None` for a call settled from its record by recovery,
    /// which claims under the recorded arguments and so never meets a reused key).
    pub(super) source: Option<KeySource>,
    /// How long its outcome is kept once recorded (see [`Dispatcher::record_ttl`](super::Dispatcher::record_ttl)).
    pub(super) ttl: Duration,
    /// The approval or grant that authorises it, kept in its record's journal.
    pub(super) approval: Option<Box<Authority>>,
}

/// What authorises a call that needs approval, kept in its record's journal.
#[derive(Debug)]
pub(crate) enum Authority {
    /// An approval signed for exactly this call.
    Approval(crate::signed::Approval),
    /// A person's standing grant covering it.
    Grant(crate::grant::Grant),
}

impl Authority {
    /// The journal step and text the record keeps it under.
    pub(super) fn step(&self) -> (&'static str, String) {
        match self {
            Authority::Approval(a) => (
                crate::signed::APPROVAL_STEP,
                serde_json::to_string(a).unwrap_or_default(),
            ),
            Authority::Grant(g) => (
                crate::grant::GRANT_STEP,
                serde_json::to_string(g).unwrap_or_default(),
            ),
        }
    }

    /// The grant, in a few words, if a grant it is.
    pub(super) fn granted(&self) -> Option<String> {
        match self {
            Authority::Grant(g) => Some(g.summary()),
            Authority::Approval(_) => None,
        }
    }
}

impl KeyedCall<'_> {
    pub(super) fn parts(&self) -> crate::context::ContextParts<'_> {
        context_parts(self.tool, self.run, &self.downstream)
    }

    pub(super) fn store_error(&self, e: StoreError) -> DispatchError {
        error::store_error(self.tool, e)
    }

    /// When a verify hook may first settle a record Unknown since `since` for `last_error`
    /// (`decide`); for an orphan, the lease counted is the longer of the tool's and
    /// `made_lease`, the one the record was made under (a holder granted it may still be
    /// running).
    pub(super) fn verifiable_from(
        &self,
        since: idem_core::Timestamp,
        last_error: &str,
        steps: &[idem_core::JournalEntry],
        made_lease: Option<Duration>,
    ) -> Option<idem_core::Timestamp> {
        let policy = &self.tool.policy;
        decide::verifiable_from(
            since,
            idem_core::UnknownCause::of(last_error) == idem_core::UnknownCause::Orphaned,
            self.tool.verify.is_some(),
            tool_steps(steps),
            policy.verify_after,
            decide::settle_lease(policy.lease, made_lease),
        )
    }

    /// The first 16 hex digits of the record key, for observers.
    pub(super) fn key_hash(&self) -> &str {
        key_hash(&self.record_key)
    }
}

pub(super) fn key_hash(key: &RecordKey) -> &str {
    let s = key.as_str();
    s.get(..16).unwrap_or(s)
}

/// What a body's context is made of, borrowed from the call.
pub(super) fn context_parts<'a>(
    tool: &'a ToolDef,
    run: &'a RunContext,
    key: &'a IdempotencyKey,
) -> crate::context::ContextParts<'a> {
    crate::context::ContextParts {
        tool: &tool.name,
        class: tool.class,
        key,
        tenant: &run.tenant,
        run_id: run.run_id.as_deref(),
        step: run.step,
        acting_for: run.acting_for.as_deref(),
        limits: &run.limits,
    }
}

/// Whether a journal holds steps of the tool's own (the approval a record journals, and a
/// compensation's entries, are the dispatcher's: `idem:`).
pub(super) fn tool_steps(steps: &[idem_core::JournalEntry]) -> bool {
    steps
        .iter()
        .any(|s| !s.step.starts_with(crate::context::RESERVED_STEP_PREFIX))
}

/// Replay a recorded outcome to a call of `tool` under these keys, whose arguments differ
/// from the recorded call's at `differing` (a natural key standing for both; none for the
/// same call). The one place a recorded outcome becomes an answer.
pub(super) fn replay(
    tool: &ToolDef,
    record_key: &RecordKey,
    downstream: &IdempotencyKey,
    outcome: Outcome,
    differing: Vec<String>,
) -> Result<Dispatched, DispatchError> {
    match outcome {
        Outcome::Success(output_json) => {
            let output = serde_json::from_str(&output_json).map_err(|e| DispatchError::Store {
                tool: tool.name.to_string(),
                error: StoreError::Corrupt {
                    key: record_key.clone(),
                    reason: format!("its recorded output is not JSON: {e}"),
                },
            })?;
            Ok(Dispatched {
                output,
                output_json,
                deduplicated: true,
                differing_arguments: differing,
                key: Some(downstream.clone()),
                attempts: 0,
                class: tool.class,
                limits: Vec::new(),
                granted: None,
            })
        }
        Outcome::Failure(error) => Err(DispatchError::ToolFailed {
            tool: tool.name.to_string(),
            error,
            attempts: 0,
            deduplicated: true,
        }),
    }
}
