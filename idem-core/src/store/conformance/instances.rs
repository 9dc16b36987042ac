//! Cases of two instances on the same data (two processes on one SQLite file, two
//! connections to one database or server) and of a worker starting cold.

use std::sync::Arc;

use serde_json::json;

use super::fixtures::{LONG, TTL, acquire, fresh_key, request};
use super::subject::Subject;
use crate::canonical::Fingerprint;
use crate::class::OrphanPolicy;
use crate::record::{Outcome, RecordState, StateKind};
use crate::store::{Claim, ClaimRequest, Store};

/// Two instances of the store on the same data (two processes on one SQLite file, two
/// connections to one database or server) race for one key: exactly one claim wins, and each
/// instance sees what the other recorded.
pub(super) async fn two_instances_race_and_one_claim_wins(s: Subject) {
    let other = s.second_instance().await.unwrap_or_else(|| s.store.clone());
    let stores = [s.store.clone(), other];
    let key = fresh_key("two-instances");
    let req = request(&key, LONG, OrphanPolicy::TakeOver);
    let start = Arc::new(tokio::sync::Barrier::new(32));
    let mut tasks = Vec::new();
    for i in 0..32 {
        let (store, req, start) = (stores[i % 2].clone(), req.clone(), start.clone());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            (i % 2, store.claim(&req).await)
        }));
    }
    let mut winners = Vec::new();
    let mut seen = Vec::new();
    for t in tasks {
        let (instance, claim) = t.await.expect("task");
        match claim.expect("no claim fails under contention") {
            Claim::Acquired { fence, .. } => winners.push((instance, fence)),
            Claim::Existing(r) => {
                assert!(
                    matches!(r.state, RecordState::InProgress { .. }),
                    "losers see the winner's claim, got {:?}",
                    r.state
                );
                seen.push(r.fence);
            }
        }
    }
    let [(instance, fence)] = winners[..] else {
        panic!("exactly one of 32 claims over two instances wins: {winners:?}");
    };
    assert!(
        seen.iter().all(|f| *f == fence),
        "every loser saw the winner's fence {fence}: {seen:?}"
    );
    let outcome = Outcome::success(&json!({"sent": true}));
    stores[instance]
        .complete(&key, fence, &outcome, TTL)
        .await
        .expect("the winner completes");
    match stores[1 - instance].claim(&req).await.expect("claim") {
        Claim::Existing(r) => assert_eq!(
            r.state.kind(),
            StateKind::Completed,
            "the other instance replays the winner's outcome"
        ),
        other => panic!("the other instance must not run it again, got {other:?}"),
    }
}

/// A retry of a completed call replays it only with the same arguments; other arguments get
/// the record with its own fingerprint back, for the dispatcher to refuse as `KeyReused`.
pub(super) async fn replays_by_fingerprint(
    store: &dyn Store,
    same: &ClaimRequest,
    fence: u64,
    outcome: &Outcome,
    when: &str,
) {
    let mut other = same.clone();
    other.fingerprint = Fingerprint::of(&json!({"to": "b@example.com"}));
    other.arguments = Some(r#"{"to":"b@example.com"}"#.into());
    for (req, what) in [
        (same, "an identical retry"),
        (&other, "other arguments"),
        (same, "an identical retry after them"),
    ] {
        match store.claim(req).await.expect("claim") {
            Claim::Existing(r) => {
                assert_eq!(
                    r.fingerprint, same.fingerprint,
                    "{when}, {what}: the record keeps the first call's fingerprint"
                );
                assert_eq!(r.fence, fence, "{when}, {what}: the record is unchanged");
                assert_eq!(r.arguments, same.arguments, "{when}, {what}");
                match r.state {
                    RecordState::Completed { outcome: got, .. } => {
                        assert_eq!(&got, outcome, "{when}, {what}: the outcome replays")
                    }
                    other => panic!("{when}, {what}: expected Completed, got {other:?}"),
                }
            }
            got => panic!("{when}, {what}: a completed key was acquired again: {got:?}"),
        }
    }
}

pub(super) async fn a_completed_record_keeps_its_fingerprint_across_a_cold_start(s: Subject) {
    let key = fresh_key("fingerprint-cold");
    let req = request(&key, LONG, OrphanPolicy::MarkUnknown);
    let fence = acquire(&s, &req).await;
    let outcome = Outcome::success(&json!({"id": 42}));
    s.store
        .complete(&key, fence, &outcome, TTL)
        .await
        .expect("complete");
    replays_by_fingerprint(&*s.store, &req, fence, &outcome, "on the same instance").await;
    if let Some(restarted) = s.cold_start().await {
        replays_by_fingerprint(
            &*restarted.store,
            &req,
            fence,
            &outcome,
            "after a cold start",
        )
        .await;
    }
}
