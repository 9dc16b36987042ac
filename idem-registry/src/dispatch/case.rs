//! What a case is made of: a call sent to a person (`escalate.rs` sends it, its record keeps
//! it) and what the person decided (`cases.rs` takes the decision, the run's account keeps
//! it). Data only, so that the error, the account and the run's undo can name them without
//! depending on the stages that make them.

use idem_core::{ESCALATED, RecordKey, Timestamp, ToolError, UnknownCause};
use serde::{Deserialize, Serialize};

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

/// Who decided a case, when, and what, as the run's account keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CaseDecided {
    /// The person.
    pub by: String,
    /// When (the store's clock).
    pub at: Timestamp,
    /// What: `retry`, `resolved` or `undo_run`.
    pub decision: String,
    /// What it did, in words.
    pub said: String,
}
