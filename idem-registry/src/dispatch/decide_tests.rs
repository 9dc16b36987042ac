//! The decisions of `decide.rs`, each tested as a table.

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

mod recovery {
    use super::super::*;

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
