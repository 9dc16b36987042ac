//! Every policy decision of a dispatch, as plain functions of plain values: no store, no
//! clock, no sleeping. The stages ask these and carry out the answer, the way the stores
//! carry out `idem_core::store::machine`'s transitions. Tested below as tables.

use std::time::Duration;

use idem_core::{ErrorKind, Fingerprint, Outcome, StoreError, Timestamp, ToolClass};
use serde_json::Value;

use super::key::KeySource;

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
mod recovery_tests {
    use super::*;

    #[test]
    fn recovery_decides_each_record_by_the_table() {
        let t = |ms| Timestamp(ms);
        let s = Duration::from_secs;
        let base = RecoveryFacts {
            state: Found::Completed,
            now: t(1_000_000),
            may_rerun: true,
            version_changed: false,
            has_hook: false,
            has_steps: false,
            verify_after: s(300),
            lease: s(30),
        };
        let unknown = |since: u64, orphaned| Found::Unknown {
            since: t(since),
            orphaned,
        };
        let live = Found::InProgress {
            lease_until: t(1_000_001),
        };
        let lapsed = Found::InProgress {
            lease_until: t(999_999),
        };
        let settled = 1_000_000 - 300_000; // exactly the settle delay ago
        let fresh = 1_000_000 - 1_000;
        // (state, may_rerun, hook, steps, version changed) → what recovery does
        #[rustfmt::skip]
        let table = [
            (Found::Completed,       true,  false, false, false, Recovery::Leave),
            (live,                   false, false, false, false, Recovery::Leave),
            (lapsed,                 true,  false, false, false, Recovery::Rerun),
            (lapsed,                 false, true,  false, false, Recovery::MarkUnknown),
            (unknown(settled, false), false, true,  false, false, Recovery::Verify),
            (unknown(fresh, false),   false, true,  false, false, Recovery::NotYet { retry_after: t(fresh + 300_000) }),
            (unknown(settled, false), false, true,  false, true,  Recovery::VersionChanged),
            (unknown(settled, false), false, false, false, false, Recovery::NoVerifyHook),
            (unknown(settled, false), true,  true,  true,  false, Recovery::NoVerifyHook),
            (unknown(settled, false), true,  false, false, false, Recovery::ReleaseAndRerun),
            (unknown(fresh, false),   true,  false, false, false, Recovery::NotYet { retry_after: t(fresh + 300_000) }),
            // An orphan settles a lease later at least: here the settle delay is the longer.
            (unknown(settled, true),  true,  false, false, false, Recovery::ReleaseAndRerun),
        ];
        for (state, may_rerun, has_hook, has_steps, version_changed, expected) in table {
            let facts = RecoveryFacts {
                state,
                may_rerun,
                has_hook,
                has_steps,
                version_changed,
                ..base
            };
            assert_eq!(recovery(&facts), expected, "{facts:?}");
        }
        // With a lease longer than the settle delay, an orphan waits for the lease.
        let long = RecoveryFacts {
            state: unknown(settled, true),
            lease: s(600),
            ..base
        };
        assert_eq!(
            recovery(&long),
            Recovery::NotYet {
                retry_after: t(settled + 600_000)
            }
        );
        assert_eq!(settle_lease(s(30), Some(s(90))), s(90));
        assert_eq!(settle_lease(s(30), None), s(30));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ErrorKind::*;
    use ToolClass::*;

    const CLASSES: [ToolClass; 4] = [Read, IdempotentWrite, NonIdempotentWrite, Irreversible];
    const KINDS: [ErrorKind; 4] = [Retryable, NotApplied, Ambiguous, Terminal];

    #[test]
    fn the_retry_table() {
        // Rows: class; columns: Retryable, NotApplied, Ambiguous, Terminal.
        let table = [
            (Read, [true, true, true, false]),
            (IdempotentWrite, [true, true, true, false]),
            (NonIdempotentWrite, [false, true, false, false]),
            (Irreversible, [false, false, false, false]),
        ];
        for (class, row) in table {
            for (kind, expected) in KINDS.into_iter().zip(row) {
                assert_eq!(may_retry(class, kind, 1, 3), expected, "{class} {kind}");
                // The last allowed attempt is never retried.
                assert!(
                    !may_retry(class, kind, 3, 3),
                    "{class} {kind} at the last attempt"
                );
            }
        }
    }

    #[test]
    fn the_recorded_failure_table() {
        // Columns: (approved, has steps) = (no, no), (no, yes), (yes, no), (yes, yes).
        let table = [
            (ErrorKind::Retryable, [false, false, true, false]),
            (ErrorKind::NotApplied, [false, false, true, false]),
            (ErrorKind::Ambiguous, [false, false, false, false]),
            (ErrorKind::Terminal, [true, true, true, true]),
        ];
        let columns = [(false, false), (false, true), (true, false), (true, true)];
        for (kind, row) in table {
            for ((approved, has_steps), expected) in columns.into_iter().zip(row) {
                assert_eq!(
                    records_failure(kind, approved, has_steps),
                    expected,
                    "{kind:?} approved={approved} steps={has_steps}"
                );
            }
        }
    }

    #[test]
    fn the_give_back_table() {
        let unknown = |s: &str| GiveBack::Unknown(s.to_owned());
        let partly = || unknown("why (after journaled steps: the effect is partly applied)");
        // Rows: class, steps; columns: Retryable, NotApplied, Ambiguous, Terminal.
        let table: [(ToolClass, bool, [GiveBack; 4]); 8] = [
            (
                Read,
                false,
                [
                    GiveBack::Release,
                    GiveBack::Release,
                    GiveBack::Release,
                    GiveBack::Release,
                ],
            ),
            (
                Read,
                true,
                [
                    GiveBack::Expire,
                    GiveBack::Expire,
                    GiveBack::Expire,
                    GiveBack::Expire,
                ],
            ),
            (
                IdempotentWrite,
                false,
                [
                    GiveBack::Release,
                    GiveBack::Release,
                    GiveBack::Release,
                    GiveBack::Release,
                ],
            ),
            (
                IdempotentWrite,
                true,
                [
                    GiveBack::Expire,
                    GiveBack::Expire,
                    GiveBack::Expire,
                    GiveBack::Expire,
                ],
            ),
            (
                NonIdempotentWrite,
                false,
                [
                    GiveBack::Release,
                    GiveBack::Release,
                    unknown("why"),
                    unknown("why"),
                ],
            ),
            (
                NonIdempotentWrite,
                true,
                [partly(), partly(), unknown("why"), unknown("why")],
            ),
            (
                Irreversible,
                false,
                [
                    GiveBack::Release,
                    GiveBack::Release,
                    unknown("why"),
                    unknown("why"),
                ],
            ),
            (
                Irreversible,
                true,
                [partly(), partly(), unknown("why"), unknown("why")],
            ),
        ];
        for (class, steps, row) in table {
            for (kind, expected) in KINDS.into_iter().zip(row) {
                assert_eq!(
                    GiveBack::after(class, kind, steps, "why"),
                    expected,
                    "{class} {kind} steps={steps}"
                );
            }
        }
    }

    #[test]
    fn an_unrecorded_effect_is_given_back_only_when_it_may_run_again() {
        for class in CLASSES {
            let expected = if class.reexecution_is_safe() {
                GiveBack::Release
            } else {
                GiveBack::Unknown("lost".into())
            };
            assert_eq!(
                GiveBack::unrecorded(class, "lost".into()),
                expected,
                "{class}"
            );
        }
    }

    #[test]
    fn an_abandoned_claim_keeps_a_journal() {
        let table = [
            (false, false, GiveBack::Release),
            (true, false, GiveBack::Expire),
            (false, true, GiveBack::Expire),
            (true, true, GiveBack::Expire),
        ];
        for (takeover, steps, expected) in table {
            assert_eq!(GiveBack::abandoned(takeover, steps), expected);
        }
    }

    #[test]
    fn the_key_reuse_table() {
        let a = Fingerprint::from_bytes([1; 32]);
        let b = Fingerprint::from_bytes([2; 32]);
        let natural = Some(KeySource::Natural);
        // (recorded, call, claimed, replays, source) -> decision
        let table = [
            (a, a, a, false, Some(KeySource::CallId), Reuse::Same),
            (a, a, b, true, natural, Reuse::Same),
            (a, a, a, true, None, Reuse::Same),
            (a, b, b, false, natural, Reuse::Refuse),
            (a, b, b, true, Some(KeySource::Explicit), Reuse::Refuse),
            (a, b, b, true, Some(KeySource::CallId), Reuse::Refuse),
            (a, b, b, true, Some(KeySource::RunStep), Reuse::Refuse),
            (a, b, b, true, None, Reuse::Refuse),
            (a, b, b, true, natural, Reuse::ClaimAs(a)),
            (a, b, a, true, natural, Reuse::Adopted),
        ];
        for (recorded, call, claimed, replays, source, expected) in table {
            assert_eq!(reuse(recorded, call, claimed, replays, source), expected);
        }
    }

    #[test]
    fn the_settle_delay_of_an_orphan_is_at_least_a_lease() {
        let since = Timestamp(1_000);
        let s = Duration::from_secs;
        // (orphaned, hook, steps, verify_after, lease) -> verifiable from
        let table = [
            (true, true, false, s(300), s(30), Some(since.plus(s(300)))),
            (true, true, false, s(0), s(30), Some(since.plus(s(30)))),
            (true, true, false, s(10), s(60), Some(since.plus(s(60)))),
            (true, false, false, s(300), s(30), None),
            (true, true, true, s(300), s(30), None),
            // The tool's own ambiguous error: its holder has finished.
            (false, true, false, s(300), s(30), Some(since.plus(s(300)))),
            (false, true, false, s(0), s(30), Some(since)),
            (false, true, false, s(10), s(60), Some(since.plus(s(10)))),
            (false, false, false, s(10), s(60), None),
            (false, true, true, s(10), s(60), None),
        ];
        for (orphaned, hook, steps, after, lease, expected) in table {
            assert_eq!(
                verifiable_from(since, orphaned, hook, steps, after, lease),
                expected
            );
        }
    }

    #[test]
    fn a_caller_waits_for_an_unknown_only_within_its_bound() {
        let ms = Duration::from_millis;
        let now = Timestamp(10_000);
        // (retry_after, left) -> wait
        let table = [
            (Timestamp(12_000), ms(5_000), Some(ms(2_000))),
            (Timestamp(12_000), ms(2_000), Some(ms(2_000))),
            (Timestamp(12_000), ms(1_999), None),
            // Already due: a short pause, never a spin.
            (Timestamp(9_000), ms(5_000), Some(MIN_UNKNOWN_WAIT)),
            (Timestamp(10_000), ms(10), None),
        ];
        for (at, left, expected) in table {
            assert_eq!(unknown_wait(at, now, left), expected, "{at:?} {left:?}");
        }
    }

    #[test]
    fn the_hook_is_asked_only_after_the_delay_and_not_too_often() {
        let at = Timestamp(5_000);
        let before = Timestamp(4_999);
        let table = [
            (Some(at), Some(at), 0, true),
            (Some(at), Some(before), 0, false),
            (Some(at), None, 0, false),
            (None, Some(at), 0, false),
            (Some(at), Some(at), MAX_VERIFICATIONS - 1, true),
            (Some(at), Some(at), MAX_VERIFICATIONS, false),
        ];
        for (retry_after, now, asked, expected) in table {
            assert_eq!(may_verify(retry_after, now, asked), expected);
        }
    }

    #[test]
    fn polling_doubles_up_to_a_bound() {
        let mut poll = FIRST_POLL;
        let mut seen = vec![poll];
        for _ in 0..6 {
            poll = next_poll(poll);
            seen.push(poll);
        }
        let ms: Vec<u64> = seen.iter().map(|d| d.as_millis() as u64).collect();
        assert_eq!(ms, [2, 4, 8, 16, 32, 50, 50]);
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let base = Duration::from_millis(100);
        for attempt in 1..20 {
            let full = base
                .saturating_mul(1 << (attempt - 1).min(16))
                .min(MAX_BACKOFF);
            for random in [0, 1, 12_345, u64::MAX] {
                let d = backoff(base, attempt, random);
                assert!(
                    d >= full / 2 && d <= full,
                    "attempt {attempt}: {d:?} outside [{:?}, {full:?}]",
                    full / 2
                );
            }
        }
        assert_eq!(backoff(Duration::ZERO, 3, 7), Duration::ZERO);
    }
}
