//! Calls sent to a person: a call of a tool that escalates
//! ([`ToolBuilder::escalate`](crate::ToolBuilder::escalate)) and ends badly becomes a case.
//!
//! The case is the call's record, turned Unknown with [`ESCALATED`] and the case as JSON
//! ([`Escalation`]: the error, the run, what the run applied before it). So it needs nothing
//! of a store but what every store has: the record's fence keeps a stale holder out, every
//! door that lists Unknown records lists it, a verify hook and a recovery pass leave it
//! alone (`claim.rs`, `recover.rs`), and the call under its key is answered
//! [`DispatchError::Escalated`] from any worker until a person decides (`cases.rs`).

use idem_core::{ESCALATED, IdempotencyKey, RecordKey, Timestamp, ToolError, UnknownCause};
use serde::{Deserialize, Serialize};

use super::decide::GiveBack;
use super::error::DispatchError;
use super::guard::ClaimGuard;
use super::observe::EventKind;
use super::{Dispatched, Dispatcher, KeyedCall, Watch};

/// How a call that was sent to a person ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EscalationKind {
    /// Its body failed for good: nothing says it applied.
    Failure,
    /// Its outcome is not known: it may have applied.
    Unknown,
}

/// A call sent to a person: what they are shown to decide on, kept in the call's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Escalation {
    /// How the call ended.
    pub kind: EscalationKind,
    /// Its error, as the caller was told (secrets cut).
    pub error: ToolError,
    /// How many times its body ran in the dispatch that sent it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// Its run, if it had one (the run a person may undo).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The provider's call id, if the call had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// What the run applied before it and did not undo, oldest first (needs a dispatcher
    /// that keeps run accounts; at most [`MAX_APPLIED_SHOWN`]: the newest).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied_before: Vec<AppliedBefore>,
}

/// The most calls a case lists as applied before it: the run's newest.
pub const MAX_APPLIED_SHOWN: usize = 50;

/// An applied call of the run, before the call sent to a person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AppliedBefore {
    /// The tool.
    pub tool: String,
    /// Its call id, if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// Its record key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<RecordKey>,
}

impl Escalation {
    /// The case a record's `last_error` holds, if it is one. A case that cannot be read
    /// (written by a newer idem) is still a case: its error says so.
    ///
    /// ```
    /// # use idem_registry as idem;
    /// use idem::dispatch::Escalation;
    /// assert!(Escalation::of_recorded("timed out after sending").is_none());
    /// ```
    pub fn of_recorded(last_error: &str) -> Option<Escalation> {
        let case = UnknownCause::of(last_error).case()?;
        Some(serde_json::from_str(case).unwrap_or_else(|e| Escalation {
            kind: EscalationKind::Unknown,
            error: ToolError::ambiguous(format!(
                "sent to a person; the case cannot be read by this version of idem ({e})"
            )),
            attempts: None,
            run_id: None,
            call_id: None,
            applied_before: Vec::new(),
        }))
    }

    /// The `last_error` a record keeps for this case.
    pub fn recorded(&self) -> String {
        let case = serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned());
        format!("{ESCALATED}{case}")
    }

    /// What a person reads first: how the call ended and why.
    pub fn summary(&self) -> String {
        let how = match self.kind {
            EscalationKind::Failure => "failed",
            EscalationKind::Unknown => "outcome unknown",
        };
        format!("{how}: {}", self.error.message())
    }
}

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
        let mut applied: Vec<AppliedBefore> = super::undo_run::applied_calls(&account.calls)
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
