//! Cases of outcomes: what is recorded replays byte for byte with its fingerprint, what a
//! store refuses to record changes nothing, and completed records expire.

use serde_json::json;

use super::fixtures::{LONG, TTL, acquire, fresh_key, request, state_of};
use super::subject::Subject;
use crate::canonical::Fingerprint;
use crate::class::OrphanPolicy;
use crate::error::ToolError;
use crate::record::{Outcome, RecordState};
use crate::store::{Claim, StoreError};

pub(super) async fn fingerprint_is_kept(s: Subject) {
    let key = fresh_key("fingerprint");
    let req = request(&key, LONG, OrphanPolicy::TakeOver);
    let fence = acquire(&s, &req).await;
    s.store
        .complete(&key, fence, &Outcome::success(&json!({"id": 1})), TTL)
        .await
        .expect("complete");
    match s.store.claim(&req).await.expect("claim") {
        Claim::Existing(r) => {
            assert_eq!(
                r.fingerprint, req.fingerprint,
                "identical replay matches the fingerprint"
            );
            assert_eq!(r.tool, "conformance_tool");
            assert_eq!(r.arguments.as_deref(), Some(r#"{"to":"a@example.com"}"#));
        }
        other => panic!("expected the completed record, got {other:?}"),
    }
    let mut other = req.clone();
    other.fingerprint = Fingerprint::of(&json!({"to": "b@example.com"}));
    match s.store.claim(&other).await.expect("claim") {
        Claim::Existing(r) => assert_ne!(
            r.fingerprint, other.fingerprint,
            "other arguments see the original fingerprint"
        ),
        other => panic!("other arguments must not acquire a used key, got {other:?}"),
    }
}

pub(super) async fn outputs_round_trip_exactly(s: Subject) {
    let large = format!("\"{}\"", "x".repeat(512 * 1024));
    let failure = Outcome::Failure(
        ToolError::terminal("insufficient funds").with_details(json!({"balance": 0})),
    );
    let mut outcomes: Vec<Outcome> = [
        "0",
        "false",
        "\"\"",
        "[]",
        "null",
        "{}",
        "-0.5",
        "\"é\\u0000\"",
    ]
    .into_iter()
    .map(|t| Outcome::Success(t.to_owned()))
    .collect();
    outcomes.push(Outcome::Success(large));
    outcomes.push(failure);
    for (i, outcome) in outcomes.into_iter().enumerate() {
        let key = fresh_key(&format!("roundtrip-{i}"));
        let fence = acquire(&s, &request(&key, LONG, OrphanPolicy::TakeOver)).await;
        s.store
            .complete(&key, fence, &outcome, TTL)
            .await
            .expect("complete");
        match state_of(&s, &key).await {
            Some(RecordState::Completed { outcome: got, .. }) => {
                assert!(got == outcome, "outcome {i} changed in the store")
            }
            other => panic!("expected Completed, got {other:?}"),
        }
    }
}

pub(super) async fn oversized_output_is_refused(s: Subject) {
    let key = fresh_key("oversized");
    let fence = acquire(&s, &request(&key, LONG, OrphanPolicy::TakeOver)).await;
    let huge = Outcome::Success(format!(
        "\"{}\"",
        "x".repeat(crate::store::DEFAULT_MAX_OUTCOME_BYTES + 1)
    ));
    let err = s.store.complete(&key, fence, &huge, TTL).await;
    assert!(
        matches!(err, Err(StoreError::TooLarge { .. })),
        "oversized outcome refused, got {err:?}"
    );
    assert!(
        matches!(
            state_of(&s, &key).await,
            Some(RecordState::InProgress { .. })
        ),
        "refusal changes nothing"
    );
    s.store
        .complete(&key, fence, &Outcome::success(&json!("ok")), TTL)
        .await
        .expect("holder can still complete");
}

pub(super) async fn an_outcome_that_is_not_json_is_refused(s: Subject) {
    let key = fresh_key("not-json");
    let fence = acquire(&s, &request(&key, LONG, OrphanPolicy::MarkUnknown)).await;
    s.store
        .mark_unknown(&key, fence, "timeout after sending")
        .await
        .expect("mark unknown");
    // Text, and JSON that a replay could not read back: too deep, out of range, a lone
    // surrogate.
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    for bad in ["receipt 42", &deep, "1e400", r#""\ud800""#] {
        let text = Outcome::Success(bad.to_owned());
        let refused = s.store.resolve(&key, &text, TTL).await;
        assert!(
            matches!(refused, Err(StoreError::InvalidOutcome { .. })),
            "resolve with {bad:.20}: {refused:?}"
        );
        let refused = s.store.settle_unknown(&key, fence, Some(&text), TTL).await;
        assert!(
            matches!(refused, Err(StoreError::InvalidOutcome { .. })),
            "settle_unknown with {bad:.20}: {refused:?}"
        );
    }
    // Nothing changed: the record is still Unknown, and JSON settles it.
    match state_of(&s, &key).await {
        Some(RecordState::Unknown { .. }) => {}
        other => panic!("expected Unknown, got {other:?}"),
    }
    let json_text = Outcome::Success(r#""receipt 42""#.into());
    s.store
        .resolve(&key, &json_text, TTL)
        .await
        .expect("resolve");
    match state_of(&s, &key).await {
        Some(RecordState::Completed { outcome, .. }) => assert_eq!(outcome, json_text),
        other => panic!("expected Completed, got {other:?}"),
    }
}

pub(super) async fn completed_records_expire(s: Subject) {
    let key = fresh_key("expiry");
    let req = request(&key, LONG, OrphanPolicy::TakeOver);
    let fence = acquire(&s, &req).await;
    s.store
        .journal(&key, fence, "first-life", "1")
        .await
        .expect("journal");
    s.store
        .complete(&key, fence, &Outcome::success(&json!(1)), s.short())
        .await
        .expect("complete");
    assert!(state_of(&s, &key).await.is_some());
    s.pass(s.past_short()).await;
    assert_eq!(state_of(&s, &key).await, None, "expired record is absent");
    match s.store.claim(&req).await.expect("claim") {
        Claim::Acquired {
            takeover,
            fence: again,
            steps,
        } => {
            assert!(!takeover, "a fresh call, not a take-over");
            assert!(
                again > fence,
                "the fence keeps increasing ({again} after {fence})"
            );
            assert!(
                steps.is_empty(),
                "a new call does not inherit the old call's steps"
            );
        }
        other => panic!("expired key is claimable again, got {other:?}"),
    }
    let rec = s.store.get(&key).await.expect("get").expect("record");
    assert!(rec.steps.is_empty(), "the stored journal starts empty too");
}
