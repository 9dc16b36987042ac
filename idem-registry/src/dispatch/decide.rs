//! Every policy decision of a dispatch, as plain functions of plain values: no store, no
//! clock, no sleeping. The stages ask these and carry out the answer, the way the stores
//! carry out `idem::store::machine`'s transitions. Tested below as tables.

use idem_core::KeySource;
use std::time::Duration;

use idem_core::{ErrorKind, Fingerprint, Outcome, StoreError, Timestamp, ToolClass};
use serde_json::Value;

/// Whether a failed attempt runs again under the same key: never after a terminal error or
/// the last allowed attempt; `read` and `idempotent_write` on any other error;
/// `non_idempotent_write` only when the tool says nothing was applied; `irreversible` never.
pub(crate) fn may_retry(class: ToolClass, kind: ErrorKind, attempt: u32, max: u32) -> bool {
    attempt < max
        && match (class, kind) {
            (_, ErrorKind::Terminal) => false,
            (ToolClass::Read | ToolClass::IdempotentWrite, _) => true,
            (ToolClass::NonIdempotentWrite, ErrorKind::NotApplied) => true,
            _ => false,
        }
}

/// Whether a failure that will not be retried is recorded (and replayed to every later call
/// with the key) rather than given back: a terminal error always; and, since an approval
/// authorises one execution, any certain failure of a call that ran under one, unless it
/// journaled steps (then it is partly applied: Unknown). A new attempt at an approved call
/// is a new call to approve.
pub(crate) fn records_failure(kind: ErrorKind, approved: bool, has_steps: bool) -> bool {
    match kind {
        ErrorKind::Terminal => true,
        ErrorKind::Retryable | ErrorKind::NotApplied => approved && !has_steps,
        _ => false,
    }
}

/// How a holder gives its claim back when it will not record an outcome.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum GiveBack {
    /// Delete the claim: nothing happened that a later call must know about.
    Release,
    /// End the lease but keep the record, so the next claim takes it over and inherits the
    /// journaled steps (re-running is safe, and finished steps must not run again).
    Expire,
    /// The effect may have happened: the record becomes Unknown, for this reason.
    Unknown(String),
}

impl GiveBack {
    /// After the body failed with `kind` (or was cancelled: `Ambiguous`), with or without
    /// journaled steps.
    pub(crate) fn after(class: ToolClass, kind: ErrorKind, has_steps: bool, why: &str) -> Self {
        let certain = matches!(kind, ErrorKind::Retryable | ErrorKind::NotApplied);
        match (class.reexecution_is_safe(), has_steps) {
            (_, false) if certain => GiveBack::Release,
            (true, false) => GiveBack::Release,
            (true, true) => GiveBack::Expire,
            // A journaled step happened even if the last one did not: partly applied.
            (false, true) if certain => GiveBack::Unknown(format!(
                "{why} (after journaled steps: the effect is partly applied)"
            )),
            (false, _) => GiveBack::Unknown(why.to_owned()),
        }
    }

    /// After the body ran but its outcome could not be recorded: the effect happened, so
    /// only a class whose re-execution is safe may give the key back.
    pub(crate) fn unrecorded(class: ToolClass, why: String) -> Self {
        if class.reexecution_is_safe() {
            GiveBack::Release
        } else {
            GiveBack::Unknown(why)
        }
    }

    /// For a claim acquired by a dispatch that went away before it saw the answer: the body
    /// never ran, so releasing is safe; a take-over (or a claim with an inherited journal)
    /// is only expired again, keeping the journal for the next holder.
    pub(crate) fn abandoned(takeover: bool, has_steps: bool) -> Self {
        if takeover || has_steps {
            GiveBack::Expire
        } else {
            GiveBack::Release
        }
    }
}

/// What a claim that found a record under another fingerprint means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reuse {
    /// Same arguments: the record is this call's.
    Same,
    /// Another call's record under a natural key the tool lets stand for it: claim again
    /// under the recorded fingerprint, so an orphan is taken over as for identical calls.
    ClaimAs(Fingerprint),
    /// Already claiming under the recorded fingerprint: treat the record as this call's.
    Adopted,
    /// A reused key: the caller's mistake.
    Refuse,
}

/// Compare a found record's fingerprint with the call's (`call`) and with the one the claim
/// was made under (`claimed`). Only a natural key may stand for calls whose other arguments
/// differ (find-or-create), unless the tool opted out (`on_key_reuse = "reject"`).
pub(crate) fn reuse(
    recorded: Fingerprint,
    call: Fingerprint,
    claimed: Fingerprint,
    replay_on_key_reuse: bool,
    source: Option<KeySource>,
) -> Reuse {
    if recorded == call {
        Reuse::Same
    } else if !(replay_on_key_reuse && source == Some(KeySource::Natural)) {
        Reuse::Refuse
    } else if claimed != recorded {
        Reuse::ClaimAs(recorded)
    } else {
        Reuse::Adopted
    }
}

/// The lease an orphan's settle delay counts: the longer of the tool's and the one the
/// record was made under (`made`), since a holder granted that one may still be running.
pub(crate) fn settle_lease(tool: Duration, made: Option<Duration>) -> Duration {
    made.map_or(tool, |made| made.max(tool))
}

/// When a record Unknown since `since` has settled: the settle delay (`verify_after`) later,
/// for downstream to commit what it accepted. For an orphan (`orphaned`: its holder's lease
/// lapsed), at least a lease later too, since that holder may still be running until it
/// notices (within a third of a lease) and stops. An Unknown made by the tool's own
/// ambiguous error was marked by its holder, which has finished: the settle delay alone.
/// ARCHITECTURE.md, "Unknown outcomes".
pub(crate) fn settled_from(
    since: Timestamp,
    orphaned: bool,
    verify_after: Duration,
    lease: Duration,
) -> Timestamp {
    match orphaned {
        true => since.plus(verify_after.max(lease)),
        false => since.plus(verify_after),
    }
}

/// When a verify hook may first be asked about a record Unknown since `since`: once it has
/// settled ([`settled_from`]). `None` when no hook can settle it: the tool has none, or
/// journaled steps make the effect partial.
pub(crate) fn verifiable_from(
    since: Timestamp,
    orphaned: bool,
    has_hook: bool,
    has_steps: bool,
    verify_after: Duration,
    lease: Duration,
) -> Option<Timestamp> {
    (has_hook && !has_steps).then(|| settled_from(since, orphaned, verify_after, lease))
}

/// What recovery knows of one record when it decides: its state, read at `now` on the
/// store's clock, and the rules it is met under.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecoveryFacts {
    pub state: Found,
    pub now: Timestamp,
    /// Whether the class lets the call run again (an idempotent write).
    pub may_rerun: bool,
    /// Whether the handler's version changed since the record was made.
    pub version_changed: bool,
    pub has_hook: bool,
    /// Whether the record holds journaled steps of the tool (a partial effect).
    pub has_steps: bool,
    pub verify_after: Duration,
    /// The lease the settle delay counts ([`settle_lease`]).
    pub lease: Duration,
}

/// A record's state as recovery reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    Completed,
    InProgress { lease_until: Timestamp },
    Unknown { since: Timestamp, orphaned: bool },
}

/// What a recovery pass does with one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recovery {
    /// Nothing: it is completed, or its holder's lease is live.
    Leave,
    /// Take the orphan over and run it again, under the same downstream key.
    Rerun,
    /// Turn the orphan Unknown, as a caller's duplicate would.
    MarkUnknown,
    /// Ask the tool's verify hook.
    Verify,
    /// Give the Unknown record back (fenced) and run it again.
    ReleaseAndRerun,
    /// Nothing may be done before `retry_after`.
    NotYet { retry_after: Timestamp },
    /// Only a person can settle it: no hook, or journaled steps make the effect partial.
    NoVerifyHook,
    /// A hook of another handler version must not judge it.
    VersionChanged,
}

/// Recovery's rule for one record (ARCHITECTURE.md, "Recovery"): an orphan of a class that
/// may run again is taken over, any other orphan turns Unknown; an Unknown record is asked
/// of the verify hook once settled, released and run again once settled when its class
/// allows it and no step was journaled, and otherwise left to a person.
pub(crate) fn recovery(f: &RecoveryFacts) -> Recovery {
    let (since, orphaned) = match f.state {
        Found::Completed => return Recovery::Leave,
        Found::InProgress { lease_until } if lease_until > f.now => return Recovery::Leave,
        Found::InProgress { .. } if f.may_rerun => return Recovery::Rerun,
        Found::InProgress { .. } => return Recovery::MarkUnknown,
        Found::Unknown { since, orphaned } => (since, orphaned),
    };
    let settled_at = settled_from(since, orphaned, f.verify_after, f.lease);
    let hook_from = verifiable_from(
        since,
        orphaned,
        f.has_hook,
        f.has_steps,
        f.verify_after,
        f.lease,
    );
    match hook_from {
        Some(_) if f.version_changed => Recovery::VersionChanged,
        Some(at) if at > f.now => Recovery::NotYet { retry_after: at },
        Some(_) => Recovery::Verify,
        None if !f.may_rerun || f.has_steps => Recovery::NoVerifyHook,
        None if settled_at > f.now => Recovery::NotYet {
            retry_after: settled_at,
        },
        None => Recovery::ReleaseAndRerun,
    }
}

/// How many times one dispatch asks a verify hook before giving up on an Unknown record.
pub(crate) const MAX_VERIFICATIONS: u32 = 2;

/// Whether this dispatch asks the hook now: the settle delay has passed on the store's clock
/// (`now`; `None` when the clock could not be read), and it has not asked too often.
pub(crate) fn may_verify(
    retry_after: Option<Timestamp>,
    now: Option<Timestamp>,
    verifications: u32,
) -> bool {
    verifications < MAX_VERIFICATIONS
        && matches!((retry_after, now), (Some(at), Some(now)) if at <= now)
}

/// The least a caller waiting for an Unknown outcome pauses before calling again, so that a
/// `retry_after` already past (a clock read late) never makes it spin.
pub(crate) const MIN_UNKNOWN_WAIT: Duration = Duration::from_millis(50);

/// How long a caller waiting for an Unknown outcome sleeps before calling again: until
/// `retry_after` (on the store's clock, read as `now`), at least [`MIN_UNKNOWN_WAIT`];
/// `None` when that is more than the `left` of its bound.
pub(crate) fn unknown_wait(
    retry_after: Timestamp,
    now: Timestamp,
    left: Duration,
) -> Option<Duration> {
    let wait = Duration::from_millis(retry_after.0.saturating_sub(now.0)).max(MIN_UNKNOWN_WAIT);
    (wait <= left).then_some(wait)
}

/// How long after a verify hook failed `OutcomeUnknown::retry_after` points: the hook's
/// lookup API was down or slow, and asking it again at once would only add load.
pub(crate) const FAILED_VERIFY_PAUSE: Duration = Duration::from_secs(5);

/// The first pause of a duplicate waiting for a holder, and the longest.
pub(crate) const FIRST_POLL: Duration = Duration::from_millis(2);
const LAST_POLL: Duration = Duration::from_millis(50);

/// The next pause of a duplicate waiting for a holder: doubling, at most 50 ms.
pub(crate) fn next_poll(poll: Duration) -> Duration {
    (poll * 2).min(LAST_POLL)
}

/// The longest pause between attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Exponential backoff with jitter: between half and all of `base * 2^(attempt-1)`, at most
/// 5 s; `random` picks the point in that range.
pub(crate) fn backoff(base: Duration, attempt: u32, random: u64) -> Duration {
    let exp = base
        .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
        .min(MAX_BACKOFF);
    let half = exp / 2;
    let jitter = if half.is_zero() {
        0
    } else {
        random % (half.as_micros() as u64 + 1)
    };
    half + Duration::from_micros(jitter)
}

/// The refusal of an outcome nested deeper than a replay can read back: its output, or its
/// terminal error's details. Recorded, every replay of it would fail.
pub(crate) fn too_deep(outcome: &Outcome, output: Option<&Value>) -> Option<StoreError> {
    let limit = idem_core::store::MAX_OUTCOME_DEPTH;
    let value = match (outcome, output) {
        (Outcome::Success(_), Some(v)) => v,
        (Outcome::Failure(e), _) => e.details()?,
        (Outcome::Success(_), None) => return None,
    };
    let depth = idem_core::store::nesting(value, limit);
    (depth > limit).then_some(StoreError::TooDeep { depth, limit })
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
