//! The runs example, run as a user runs it: limits across a run's calls, the seed's two
//! destructive calls, a run that undoes itself, a failure sent to a person, and the run's
//! account; it checks its account against its providers' counts and fails if they disagree.

#[test]
fn the_runs_example_runs_and_its_account_matches_its_providers() {
    super::example::run_example(
        "runs",
        &[
            "refunds 1-5 of 100 to NL91: applied",
            "refunds 6-20 of 100 to NL91: refused (not_authorized): ",
            "the limit `refunded per destination` (500 of `/amount` per run and `/account`) is used \
         up for this call: 500 used, 0 left, and the call takes 100",
            "after the last one applied, `refunds per run`: 5 used, 5 left",
            "after the last one applied, `refunded per destination`: 500 used, 0 left",
            "drop_database prod: \"drop prod: done\"",
            "delete_backups prod: refused (approval_required)",
            "capture o-1: refused (tool_failed): `capture` failed (terminal): the card was declined; \
         the run's applied calls were undone (reserve)",
            "payout 900 to ACME: refused (escalated)",
            "case: payout [call_25]: the bank's payout service is down",
            "ops@example.com decided: retry",
            "payout, the agent's retry: \"paid 900 to ACME\"",
            "payout, sent again: \"paid 900 to ACME\" (replayed)",
            "22. delete_backups [call_22]: pending_approval: waiting for a person",
            "23. reserve [call_23]: applied (idempotent_write, 1 attempt); its undo: undone",
            "25. reserve.undo [undo:call_23]: applied",
            "decided by the failure of `capture` [call_24]",
            "26. payout [call_25]: applied",
            "decided by ops@example.com: retry",
            "limit `refunds per run`: 5 used, 5 left",
            "limit `refunded per destination`: 500 used, 0 left",
            "in all: 9 applied, 16 refused, 1 pending_approval",
            "providers applied: 5 refund, 1 drop, 0 delete, 1 reserve, 0 capture, 1 release, \
         1 payout, from 9 request(s) received",
        ],
    );
}
