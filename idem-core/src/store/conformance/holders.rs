//! Cases of holders: one claim wins, orphans are taken over or turned Unknown by the class's
//! policy, a stale holder's writes are refused and change nothing, a live lease is never
//! taken, fences never repeat.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::fixtures::{LONG, TTL, acquire, contract, fresh_key, request, state_of};
use super::subject::Subject;
use crate::canonical::Fingerprint;
use crate::class::{OrphanPolicy, ToolClass};
use crate::contract::Contract;
use crate::record::{Outcome, RecordState, UnknownCause};
use crate::store::{Claim, ClaimRequest, StoreError};

pub(super) async fn claim_race_has_one_winner(s: Subject) {
    let key = fresh_key("race");
    let req = request(&key, LONG, OrphanPolicy::TakeOver);
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let store = s.store.clone();
        let req = req.clone();
        tasks.push(tokio::spawn(async move { store.claim(&req).await }));
    }
    let mut winners = 0;
    for t in tasks {
        match t.await.expect("task").expect("claim") {
            Claim::Acquired { fence, .. } => {
                winners += 1;
                assert!(fence >= 1, "fences start at 1 or above");
            }
            Claim::Existing(r) => assert!(
                matches!(r.state, RecordState::InProgress { .. }),
                "loser sees InProgress, got {:?}",
                r.state
            ),
        }
    }
    assert_eq!(winners, 1, "exactly one of 32 concurrent claims wins");
}

pub(super) async fn takeover_increments_fence(s: Subject) {
    let key = fresh_key("takeover");
    let req = request(&key, s.short(), OrphanPolicy::TakeOver);
    let first = acquire(&s, &req).await;
    assert!(
        matches!(
            s.store.claim(&req).await.expect("claim"),
            Claim::Existing(_)
        ),
        "a live lease is not taken over"
    );
    s.pass(s.past_short()).await;
    match s.store.claim(&req).await.expect("claim") {
        Claim::Acquired {
            fence, takeover, ..
        } => {
            assert_eq!(fence, first + 1, "take-over increments the fence");
            assert!(takeover, "take-over is reported");
        }
        other => panic!("expected a take-over, got {other:?}"),
    }
}

pub(super) async fn orphan_becomes_unknown(s: Subject) {
    let key = fresh_key("orphan");
    let req = request(&key, s.short(), OrphanPolicy::MarkUnknown);
    let fence = acquire(&s, &req).await;
    s.pass(s.past_short()).await;
    match s.store.claim(&req).await.expect("claim") {
        Claim::Existing(r) => match &r.state {
            RecordState::Unknown { last_error, .. } => {
                assert_eq!(
                    last_error,
                    crate::record::ORPHANED,
                    "an orphan's reason is the shared constant, so verify hooks can tell orphans apart"
                );
                // What a verify hook reads: a store that wrote its own wording (a script that
                // retyped the text, say) would leave its orphans looking like ambiguous errors.
                assert_eq!(r.state.unknown_cause(), Some(UnknownCause::Orphaned));
            }
            other => panic!("orphan turns Unknown, got {other:?}"),
        },
        other => panic!("a non-idempotent orphan must not be taken over, got {other:?}"),
    }
    // And it stays Unknown: the old holder cannot complete it, nobody re-acquires it.
    let err = s
        .store
        .complete(&key, fence, &Outcome::success(&json!(1)), TTL)
        .await;
    assert!(
        matches!(err, Err(StoreError::Fenced { .. })),
        "old holder's complete refused, got {err:?}"
    );
    assert!(matches!(
        s.store.claim(&req).await.expect("claim"),
        Claim::Existing(_)
    ));
    assert!(matches!(
        state_of(&s, &key).await,
        Some(RecordState::Unknown { .. })
    ));
}

pub(super) async fn stale_complete_is_refused(s: Subject) {
    let key = fresh_key("stale-complete");
    let req = request(&key, s.short(), OrphanPolicy::TakeOver);
    let old = acquire(&s, &req).await;
    s.pass(s.past_short()).await;
    let new = acquire(&s, &req).await;
    let stale = s
        .store
        .complete(&key, old, &Outcome::success(&json!("stale")), TTL)
        .await;
    assert!(
        matches!(stale, Err(StoreError::Fenced { fence, .. }) if fence == old),
        "stale complete refused, got {stale:?}"
    );
    assert!(
        matches!(
            state_of(&s, &key).await,
            Some(RecordState::InProgress { .. })
        ),
        "stale complete changed nothing"
    );
    s.store
        .complete(&key, new, &Outcome::success(&json!("fresh")), TTL)
        .await
        .expect("current holder completes");
    match state_of(&s, &key).await {
        Some(RecordState::Completed { outcome, .. }) => {
            assert_eq!(outcome, Outcome::Success("\"fresh\"".into()))
        }
        other => panic!("expected Completed, got {other:?}"),
    }
    let again = s
        .store
        .complete(&key, new, &Outcome::success(&json!("twice")), TTL)
        .await;
    assert!(
        matches!(again, Err(StoreError::Fenced { .. })),
        "a completed record cannot be completed again"
    );
}

pub(super) async fn stale_release_changes_nothing(s: Subject) {
    let key = fresh_key("stale-release");
    let req = request(&key, s.short(), OrphanPolicy::TakeOver);
    let old = acquire(&s, &req).await;
    s.pass(s.past_short()).await;
    let new = acquire(&s, &req).await;
    assert!(
        !s.store.release(&key, old).await.expect("release"),
        "stale release reports false"
    );
    let rec = s
        .store
        .get(&key)
        .await
        .expect("get")
        .expect("record still there");
    assert_eq!(rec.fence, new);
    assert!(
        s.store.release(&key, new).await.expect("release"),
        "holder's release succeeds"
    );
    assert_eq!(state_of(&s, &key).await, None, "released key is gone");
    assert!(
        !s.store.release(&key, new).await.expect("release"),
        "second release is a no-op"
    );
}

pub(super) async fn expired_lease_cannot_be_renewed(s: Subject) {
    let key = fresh_key("renew");
    let req = request(&key, s.short(), OrphanPolicy::TakeOver);
    let fence = acquire(&s, &req).await;
    let until = s
        .store
        .renew(&key, fence, LONG)
        .await
        .expect("a live lease renews");
    let now = s.store.now().await.expect("now");
    assert!(
        until.as_millis() >= now.as_millis() + 50_000,
        "renewal extends the lease"
    );
    s.store
        .renew(&key, fence, s.short())
        .await
        .expect("renew short");
    s.pass(s.past_short()).await;
    let late = s.store.renew(&key, fence, LONG).await;
    assert!(
        matches!(late, Err(StoreError::Fenced { .. })),
        "expired lease not renewable, got {late:?}"
    );
    let wrong = s.store.renew(&key, fence + 7, LONG).await;
    assert!(
        matches!(wrong, Err(StoreError::Fenced { .. })),
        "wrong fence not renewable"
    );
}

pub(super) async fn journal_survives_takeover(s: Subject) {
    let key = fresh_key("journal");
    let req = request(&key, s.short(), OrphanPolicy::TakeOver);
    let old = acquire(&s, &req).await;
    s.store
        .journal(&key, old, "reserve", r#"{"id":7}"#)
        .await
        .expect("journal");
    s.store
        .journal(&key, old, "charge", "true")
        .await
        .expect("journal");
    s.pass(s.past_short()).await;
    match s.store.claim(&req).await.expect("claim") {
        Claim::Acquired { steps, fence, .. } => {
            let names: Vec<_> = steps
                .iter()
                .map(|e| (e.step.as_str(), e.value.as_str()))
                .collect();
            assert_eq!(
                names,
                vec![("reserve", r#"{"id":7}"#), ("charge", "true")],
                "steps survive, in order"
            );
            let stale = s.store.journal(&key, old, "ship", "1").await;
            assert!(
                matches!(stale, Err(StoreError::Fenced { .. })),
                "stale journal refused"
            );
            s.store
                .journal(&key, fence, "ship", "1")
                .await
                .expect("new holder journals");
            let rec = s.store.get(&key).await.expect("get").expect("record");
            assert_eq!(rec.steps.len(), 3);
        }
        other => panic!("expected a take-over, got {other:?}"),
    }
}

pub(super) async fn orphan_with_other_arguments_is_not_taken_over(s: Subject) {
    let key = fresh_key("orphan-other-args");
    let req = request(&key, s.short(), OrphanPolicy::TakeOver);
    acquire(&s, &req).await;
    s.pass(s.past_short()).await;
    let mut other = req.clone();
    other.fingerprint = Fingerprint::of(&json!({"to": "someone-else@example.com"}));
    match s.store.claim(&other).await.expect("claim") {
        Claim::Existing(r) => {
            assert_eq!(r.fingerprint, req.fingerprint);
            assert!(
                matches!(r.state, RecordState::InProgress { .. }),
                "left as it was, got {:?}",
                r.state
            );
        }
        other => panic!("a call with other arguments must not take a key over, got {other:?}"),
    }
}

/// A claim whose lease has not ended is live, whatever the policy for orphans and whatever
/// lease the second caller asks for: only the holder's lease decides. (Powertools for AWS
/// Lambda, Python #8386 and TypeScript #5678: an in-progress record without a deadline of its
/// own was treated as expired and run again while its first execution was still going.)
pub(super) async fn a_live_claim_is_never_taken_for_an_orphan(s: Subject) {
    let mut held = Vec::new();
    for orphans in [OrphanPolicy::TakeOver, OrphanPolicy::MarkUnknown] {
        let key = fresh_key(&format!("live-{orphans:?}"));
        let req = request(&key, LONG, orphans);
        let fence = acquire(&s, &req).await;
        let before = s.store.get(&key).await.expect("get").expect("record");
        held.push((req, fence, before));
    }
    // Time passes, more than the second caller's lease, less than the holder's.
    s.pass(s.past_short()).await;
    for (req, fence, before) in &held {
        let orphans = req.orphans;
        let mut impatient = req.clone();
        impatient.lease = Duration::from_millis(1);
        for second in [req, &impatient] {
            match s.store.claim(second).await.expect("claim") {
                Claim::Existing(r) => {
                    assert_eq!(r.fence, *fence, "{orphans:?}: the fence is unchanged");
                    assert_eq!(
                        r.state, before.state,
                        "{orphans:?}: the holder's record is left as it was"
                    );
                }
                other => panic!("{orphans:?}: a live claim was taken for an orphan: {other:?}"),
            }
        }
        assert_eq!(
            s.store.get(&req.key).await.expect("get").map(|r| r.state),
            Some(before.state.clone()),
            "{orphans:?}: still in progress, not Unknown"
        );
        s.store
            .complete(&req.key, *fence, &Outcome::success(&json!("done")), TTL)
            .await
            .unwrap_or_else(|e| panic!("{orphans:?}: the holder still completes: {e}"));
    }
}

pub(super) async fn fence_is_not_reused_after_release(s: Subject) {
    let key = fresh_key("fence-reuse");
    let req = request(&key, LONG, OrphanPolicy::TakeOver);
    let old = acquire(&s, &req).await;
    // An operator frees the key while its holder is still alive; a new holder claims it.
    assert!(s.store.force_release(&key).await.expect("force release"));
    s.pass(Duration::from_millis(5)).await;
    let new = acquire(&s, &req).await;
    assert!(
        new > old,
        "a re-claimed key gets a greater fence ({new} after {old})"
    );
    let stale = s
        .store
        .complete(&key, old, &Outcome::success(&json!("stale")), TTL)
        .await;
    assert!(
        matches!(stale, Err(StoreError::Fenced { .. })),
        "the old holder is fenced out, got {stale:?}"
    );
    assert!(s.store.release(&key, new).await.expect("release"));
    s.pass(Duration::from_millis(5)).await;
    let third = acquire(&s, &req).await;
    assert!(
        third > new,
        "released and claimed again: {third} after {new}"
    );
}

/// A key deleted (released, force-released) and claimed again within the same millisecond of
/// the store's clock still gets a greater fence: a holder the operator freed the key from
/// must not find its fence valid again. On a manual clock no time passes at all; on a real
/// one each round takes well under a millisecond, so most rounds fall within one.
pub(super) async fn fence_moves_on_within_one_millisecond(s: Subject) {
    let key = fresh_key("fence-same-ms");
    let req = request(&key, LONG, OrphanPolicy::TakeOver);
    let mut last = acquire(&s, &req).await;
    for round in 0..20 {
        let freed = match round % 2 {
            0 => s.store.release(&key, last).await,
            _ => s.store.force_release(&key).await,
        };
        assert!(
            freed.expect("free the key"),
            "round {round}: the key was held"
        );
        let next = acquire(&s, &req).await;
        assert!(
            next > last,
            "round {round}: a key freed and claimed again got fence {next} after {last}"
        );
        last = next;
    }
}

/// A record keeps the contract of the claim that made it, through a take-over by a claim
/// made under another one; a new call under an expired key gets the new call's.
pub(super) async fn a_record_keeps_the_contract_it_was_made_under(s: Subject) {
    let key = fresh_key("contract-kept");
    let req = request(&key, s.short(), OrphanPolicy::TakeOver);
    acquire(&s, &req).await;
    let made = req.contract.clone();
    let stored = s.store.get(&key).await.expect("get").expect("a record");
    assert_eq!(
        stored.contract, made,
        "the record keeps the claim's contract"
    );
    s.pass(s.past_short()).await;
    let deployed = with_contract(&req, {
        let mut c = contract(ToolClass::IdempotentWrite);
        c.version = "8".into();
        c
    });
    match s.store.claim(&deployed).await.expect("claim") {
        Claim::Acquired { takeover, .. } => assert!(takeover, "an idempotent orphan is taken over"),
        other => panic!("expected a take-over, got {other:?}"),
    }
    let stored = s.store.get(&key).await.expect("get").expect("a record");
    assert_eq!(
        stored.contract, made,
        "a take-over keeps the contract the record was made under"
    );
}

/// An orphan made under a class that never re-runs is turned Unknown even by a claim whose
/// own class would take it over (a deploy that relaxed the class); one made without a
/// contract follows the claim.
pub(super) async fn an_orphan_made_under_a_stricter_class_is_not_taken_over(s: Subject) {
    for made_as in [ToolClass::NonIdempotentWrite, ToolClass::Irreversible] {
        let key = fresh_key("contract-stricter");
        let mut req = request(&key, s.short(), OrphanPolicy::MarkUnknown);
        req.contract = Some(Arc::new(contract(made_as)));
        acquire(&s, &req).await;
        s.pass(s.past_short()).await;
        let relaxed = with_contract(
            &request(&key, s.short(), OrphanPolicy::TakeOver),
            contract(ToolClass::IdempotentWrite),
        );
        match s.store.claim(&relaxed).await.expect("claim") {
            Claim::Existing(r) => assert_eq!(
                r.state.unknown_cause(),
                Some(UnknownCause::Orphaned),
                "an orphan made as {made_as:?} turns Unknown, got {:?}",
                r.state
            ),
            other => panic!("an orphan made as {made_as:?} was not left alone: {other:?}"),
        }
    }
    let key = fresh_key("contract-none");
    let mut req = request(&key, s.short(), OrphanPolicy::TakeOver);
    req.contract = None;
    acquire(&s, &req).await;
    s.pass(s.past_short()).await;
    match s.store.claim(&req).await.expect("claim") {
        Claim::Acquired { takeover, .. } => assert!(takeover),
        other => panic!("a record without a contract follows the claim's policy: {other:?}"),
    }
    assert_eq!(
        s.store
            .get(&key)
            .await
            .expect("get")
            .expect("record")
            .contract,
        None
    );
}

/// The orphan of a tool that compensates is taken over whatever its class (the dispatcher
/// resumes a compensation its holder left, or turns the orphan Unknown itself); the same
/// class without compensation is turned Unknown.
pub(super) async fn an_orphan_of_a_tool_that_compensates_is_taken_over(s: Subject) {
    for compensates in [true, false] {
        let key = fresh_key("contract-compensates");
        let made = Contract {
            compensates,
            ..contract(ToolClass::NonIdempotentWrite)
        };
        let req = with_contract(&request(&key, s.short(), OrphanPolicy::TakeOver), made);
        let fence = acquire(&s, &req).await;
        s.store
            .journal(&key, fence, "flight", "\"f-1\"")
            .await
            .expect("journal");
        s.pass(s.past_short()).await;
        match (compensates, s.store.claim(&req).await.expect("claim")) {
            (
                true,
                Claim::Acquired {
                    takeover, steps, ..
                },
            ) => {
                assert!(takeover, "a take-over");
                assert_eq!(steps.len(), 1, "with the journal: {steps:?}");
            }
            (false, Claim::Existing(r)) => assert_eq!(
                r.state.unknown_cause(),
                Some(UnknownCause::Orphaned),
                "without compensation the orphan turns Unknown, got {:?}",
                r.state
            ),
            (compensates, other) => {
                panic!("an orphan made with compensates = {compensates}: {other:?}")
            }
        }
    }
}

/// `request` made under `contract`.
fn with_contract(request: &ClaimRequest, contract: Contract) -> ClaimRequest {
    ClaimRequest {
        contract: Some(Arc::new(contract)),
        ..request.clone()
    }
}
