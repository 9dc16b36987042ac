//! Calls sent to a person: a call of a tool that escalates
//! ([`ToolBuilder::escalate`](crate::ToolBuilder::escalate)) and ends badly becomes a case.
//!
//! The case is the call's record, turned Unknown with [`ESCALATED`] and the case as JSON
//! ([`Escalation`]: the error, the run, what the run applied before it). So it needs nothing
//! of a store but what every store has: the record's fence keeps a stale holder out, every
//! door that lists Unknown records lists it, a verify hook and a recovery pass leave it
//! alone (`claim.rs`, `recover.rs`), and the call under its key is answered
//! [`DispatchError::Escalated`] from any worker until a person decides (`cases.rs`).

use idem_core::{IdempotencyKey, Timestamp, ToolError};

use super::case::{AppliedBefore, Escalation, EscalationKind, MAX_APPLIED_SHOWN};
use super::decide::GiveBack;
use super::error::DispatchError;
use super::guard::ClaimGuard;
use super::observe::EventKind;
use super::{Dispatched, Dispatcher, KeyedCall, Watch};

impl Dispatcher {
    /// Send a held call that ended badly to a person: its record becomes the case, and the
    /// caller is answered [`DispatchError::Escalated`].
    pub(super) async fn escalate(
        &self,
        call: &KeyedCall<'_>,
        hold: ClaimGuard,
        kind: EscalationKind,
        error: ToolError,
        attempts: u32,
        watch: &Watch<'_>,
    ) -> Result<Dispatched, DispatchError> {
        let run_id = call
            .run
            .run_id
            .as_deref()
            .or(call.run.account_as.as_deref());
        let case = Escalation {
            kind,
            error,
            attempts: Some(attempts),
            run_id: run_id.map(str::to_owned),
            call_id: call.call_id.map(str::to_owned),
            applied_before: self.applied_before(&call.run.tenant, run_id).await,
        };
        hold.give_back(&GiveBack::Unknown(case.recorded()))
            .await
            .map_err(|e| call.store_error(e))?;
        // Since when, as the record says: every later answer reads it from there.
        let since = match self.store.get(&call.record_key).await {
            Ok(Some(idem_core::Record {
                state: idem_core::RecordState::Unknown { since, .. },
                ..
            })) => since,
            _ => self.store.now().await.unwrap_or_else(|_| Timestamp::now()),
        };
        watch.saw(call, EventKind::LeftUnknown);
        let (tool, key) = (call.tool.name.to_string(), call.downstream.clone());
        Err(escalated(tool, key, since, case, false))
    }

    /// The run's applied calls so far, newest [`MAX_APPLIED_SHOWN`], oldest first; none
    /// without run accounts (a store that cannot say is logged: the case stands without it).
    async fn applied_before(&self, tenant: &str, run_id: Option<&str>) -> Vec<AppliedBefore> {
        let (Some(run_id), Some(_)) = (run_id, self.accounts) else {
            return Vec::new();
        };
        let account = match self.run_account(tenant, run_id).await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, run = run_id, "a case was sent without its run's applied calls");
                return Vec::new();
            }
        };
        // Applied (once each, newest first) and still standing: neither an undo nor a call
        // its run undid; then oldest first.
        let mut applied: Vec<AppliedBefore> = super::account::applied_calls(&account.calls)
            .into_iter()
            .filter(|c| c.undo.as_deref() != Some("undone"))
            .filter(|c| !c.tool.ends_with(crate::tool::UNDO_TOOL_SUFFIX))
            .map(|c| AppliedBefore {
                tool: c.tool.clone(),
                call_id: c.call_id.clone(),
                record: c.record.clone(),
            })
            .collect();
        applied.reverse();
        let skip = applied.len().saturating_sub(MAX_APPLIED_SHOWN);
        applied.into_iter().skip(skip).collect()
    }
}

/// The answer to a call that is with a person; `from_record`: read from the case an earlier
/// dispatch recorded (no body ran in this one).
pub(super) fn escalated(
    tool: String,
    key: IdempotencyKey,
    since: Timestamp,
    case: Escalation,
    from_record: bool,
) -> DispatchError {
    DispatchError::Escalated {
        tool,
        key,
        since,
        case: Box::new(case),
        deduplicated: from_record,
    }
}
