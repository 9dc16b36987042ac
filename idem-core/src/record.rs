//! Records: what a store keeps under a key, and the state machine between them.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::canonical::Fingerprint;
use crate::contract::Contract;
use crate::error::ToolError;
use crate::key::RecordKey;

/// The `last_error` of a record a store turned Unknown because its holder's lease expired
/// (the holder may still be running, which matters to a verify hook): how
/// [`UnknownCause::Orphaned`] is recorded. Every store writes this one constant (the Redis
/// script and the PostgreSQL statement receive it as an argument), so its wording can change
/// without any store's orphans losing their cause.
pub const ORPHANED: &str = "the holder's lease expired before it recorded an outcome";

/// What the `last_error` of a call sent to a person starts with: the rest is the case, as
/// JSON (the call's error, its run, what the run applied before it), which only a person's
/// decision settles (see [`UnknownCause::Escalated`]).
pub const ESCALATED: &str = "idem:escalated ";

/// Why a record is Unknown, read from its recorded `last_error`.
///
/// A record keeps the cause as text (stores written by any version read back the same), and
/// this type tells the kinds apart: a store turns an orphan Unknown with [`ORPHANED`]; a
/// dispatcher sends a call to a person with [`ESCALATED`] and the case; anything else is the
/// error a holder reported.
///
/// ```
/// use idem::record::{ORPHANED, UnknownCause};
///
/// assert_eq!(UnknownCause::of(ORPHANED), UnknownCause::Orphaned);
/// let timeout = UnknownCause::of("mail provider timed out (ambiguous)");
/// assert_eq!(timeout, UnknownCause::Ambiguous("mail provider timed out (ambiguous)"));
/// assert_eq!(UnknownCause::Orphaned.recorded(), ORPHANED);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnknownCause<'a> {
    /// The holder's lease expired before it recorded an outcome, and a claim under
    /// [`OrphanPolicy::MarkUnknown`](crate::OrphanPolicy::MarkUnknown) found it so. The holder
    /// may still be running: a verify hook asked now may not see an effect that is on its way.
    Orphaned,
    /// The holder reported an error after which the effect may or may not have happened (a
    /// timeout after sending, a panic, a cancelled call): its message, as recorded.
    Ambiguous(&'a str),
    /// The call failed for good, or its outcome became unknown, and its tool sends such a
    /// call to a person: the recorded text ([`ESCALATED`], then the case as JSON, which
    /// [`UnknownCause::case`] gives). No verify hook and no recovery pass settles it; a
    /// person's decision does.
    Escalated(&'a str),
}

impl<'a> UnknownCause<'a> {
    /// The cause a recorded `last_error` says. A holder's message that happens to spell
    /// [`ORPHANED`] reads as an orphan: the dispatcher's messages never do.
    pub fn of(last_error: &'a str) -> Self {
        if last_error == ORPHANED {
            UnknownCause::Orphaned
        } else if last_error.starts_with(ESCALATED) {
            UnknownCause::Escalated(last_error)
        } else {
            UnknownCause::Ambiguous(last_error)
        }
    }

    /// The `last_error` a store records for this cause.
    pub fn recorded(self) -> &'a str {
        match self {
            UnknownCause::Orphaned => ORPHANED,
            UnknownCause::Ambiguous(text) | UnknownCause::Escalated(text) => text,
        }
    }

    /// The case of a call sent to a person, as JSON; `None` for the other causes.
    ///
    /// ```
    /// use idem::record::{ESCALATED, UnknownCause};
    ///
    /// let recorded = format!("{ESCALATED}{{\"kind\":\"failure\"}}");
    /// assert_eq!(UnknownCause::of(&recorded).case(), Some("{\"kind\":\"failure\"}"));
    /// assert_eq!(UnknownCause::of("timed out").case(), None);
    /// ```
    pub fn case(self) -> Option<&'a str> {
        match self {
            UnknownCause::Escalated(text) => text.strip_prefix(ESCALATED),
            _ => None,
        }
    }
}

/// A per-key counter incremented on every claim and take-over. Every holder write is
/// conditional on it, so a stale holder can never overwrite a newer one.
pub type Fence = u64;

/// Milliseconds since the Unix epoch, on the store's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The system clock (stores without a clock of their own use it).
    pub fn now() -> Self {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        Timestamp(u64::try_from(ms).unwrap_or(u64::MAX))
    }

    /// Milliseconds since the epoch.
    pub fn as_millis(self) -> u64 {
        self.0
    }

    /// The instant in RFC 3339, UTC, to the millisecond (`2026-12-01T10:11:39.000Z`), for
    /// messages people read.
    ///
    /// ```
    /// use idem::record::Timestamp;
    /// assert_eq!(Timestamp(0).to_rfc3339(), "1970-01-01T00:00:00.000Z");
    /// assert_eq!(Timestamp(1_796_119_899_123).to_rfc3339(), "2026-12-01T10:11:39.123Z");
    /// ```
    pub fn to_rfc3339(self) -> String {
        let (secs, millis) = (self.0 / 1000, self.0 % 1000);
        let (days, rem) = (secs / 86_400, secs % 86_400);
        // Days since the epoch to a civil date (the proleptic Gregorian calendar), by eras of
        // 400 years, which repeat exactly.
        let z = days + 719_468;
        let era = z / 146_097;
        let doe = z % 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + u64::from(month <= 2);
        format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
            rem / 3600,
            rem % 3600 / 60,
            rem % 60
        )
    }

    /// This instant plus a duration, saturating.
    pub fn plus(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_add(saturating_millis(d)))
    }
}

/// A duration in whole milliseconds, `u64::MAX` for one longer than that (a "forever").
pub(crate) fn saturating_millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What a completed call produced: its output, or a terminal tool error. Both replay exactly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The output, as the JSON text first recorded (replayed byte for byte).
    Success(String),
    /// A terminal error the tool returned.
    Failure(ToolError),
}

impl Outcome {
    /// A success from a JSON value.
    pub fn success(value: &serde_json::Value) -> Self {
        Outcome::Success(value.to_string())
    }

    /// Size in bytes as stored, for the store's output limit.
    pub fn stored_len(&self) -> usize {
        match self {
            Outcome::Success(s) => s.len(),
            Outcome::Failure(e) => {
                e.message().len() + e.details().map(|d| d.to_string().len()).unwrap_or(0)
            }
        }
    }
}

/// One named step of a multi-step effect, journaled under the key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// The step's name, unique within the call.
    pub step: String,
    /// The step's result as JSON text.
    pub value: String,
}

/// The state of a record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum RecordState {
    /// A holder is executing the call.
    InProgress {
        /// When the holder's lease ends unless renewed.
        lease_until: Timestamp,
    },
    /// The call finished with a recorded outcome.
    Completed {
        /// The outcome to replay.
        outcome: Outcome,
        /// When the record may be forgotten.
        expires_at: Timestamp,
    },
    /// The effect may or may not have happened; never re-executed automatically.
    Unknown {
        /// When the outcome became unknown.
        since: Timestamp,
        /// Why.
        last_error: String,
    },
}

/// A coarse state filter for operator listings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StateKind {
    /// In progress (live or orphaned).
    InProgress,
    /// Completed.
    Completed,
    /// Unknown.
    Unknown,
}

impl StateKind {
    /// Every state, in the order operators are shown them.
    pub const ALL: [StateKind; 3] = [
        StateKind::InProgress,
        StateKind::Unknown,
        StateKind::Completed,
    ];

    /// The state's one spelling, as stores write it, serde reads it and operators see it:
    /// `in_progress`, `completed`, `unknown`.
    ///
    /// ```
    /// use idem::record::StateKind;
    ///
    /// assert_eq!(StateKind::InProgress.as_str(), "in_progress");
    /// assert_eq!(serde_json::to_value(StateKind::Unknown).unwrap(), "unknown");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            StateKind::InProgress => "in_progress",
            StateKind::Completed => "completed",
            StateKind::Unknown => "unknown",
        }
    }
}

impl RecordState {
    /// The coarse kind.
    pub fn kind(&self) -> StateKind {
        match self {
            RecordState::InProgress { .. } => StateKind::InProgress,
            RecordState::Completed { .. } => StateKind::Completed,
            RecordState::Unknown { .. } => StateKind::Unknown,
        }
    }

    /// Why an Unknown record is Unknown; `None` for the other states.
    ///
    /// ```
    /// use idem::record::{ORPHANED, RecordState, Timestamp, UnknownCause};
    ///
    /// let orphan = RecordState::Unknown { since: Timestamp(0), last_error: ORPHANED.into() };
    /// assert_eq!(orphan.unknown_cause(), Some(UnknownCause::Orphaned));
    /// let held = RecordState::InProgress { lease_until: Timestamp(0) };
    /// assert_eq!(held.unknown_cause(), None);
    /// ```
    pub fn unknown_cause(&self) -> Option<UnknownCause<'_>> {
        match self {
            RecordState::Unknown { last_error, .. } => Some(UnknownCause::of(last_error)),
            _ => None,
        }
    }
}

/// Everything a store keeps under one key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The stored key.
    pub key: RecordKey,
    /// The tool's registered name (lets a worker settle the call after a restart).
    pub tool: String,
    /// The tenant or principal the call acted for (operators scope their work by it). A
    /// record key is derived from its tenant, so a key's tenant never changes.
    #[serde(default)]
    pub tenant: String,
    /// Fingerprint of the typed arguments.
    pub fingerprint: Fingerprint,
    /// Current fence.
    pub fence: Fence,
    /// The state.
    pub state: RecordState,
    /// Steps journaled so far, in order.
    pub steps: Vec<JournalEntry>,
    /// Canonical JSON of the arguments, for recovery and for operators.
    pub arguments: Option<String>,
    /// The policy the record was made under (`None` for a record from before contracts were
    /// kept, or claimed without one); a take-over keeps it. See [`crate::contract`].
    #[serde(default)]
    pub contract: Option<Arc<Contract>>,
    /// When the key was first claimed.
    pub created_at: Timestamp,
    /// When the record last changed.
    pub updated_at: Timestamp,
}
