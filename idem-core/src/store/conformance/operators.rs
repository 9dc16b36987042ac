//! Cases of operator operations: listing, resolving and releasing, settling an Unknown
//! record once, purging within its bounds and never an InProgress record.

use std::time::Duration;

use serde_json::json;

use super::fixtures::{
    LONG, TTL, acquire, fresh_key, fresh_tenant, purged, request, state_of, tenant_request,
};
use super::subject::Subject;
use crate::class::OrphanPolicy;
use crate::error::ToolError;
use crate::key::RecordKey;
use crate::record::{Outcome, Record, RecordState, StateKind};
use crate::store::{Claim, ListFilter, PurgeFilter, StoreError};

pub(super) async fn operator_list_resolve_release(s: Subject) {
    let unknown = fresh_key("op-unknown");
    let f = acquire(&s, &request(&unknown, LONG, OrphanPolicy::MarkUnknown)).await;
    s.store
        .mark_unknown(&unknown, f, "timed out after sending")
        .await
        .expect("mark unknown");
    let stale = s.store.mark_unknown(&unknown, f, "again").await;
    assert!(
        matches!(stale, Err(StoreError::Fenced { .. })),
        "mark_unknown is a holder write"
    );
    let running = fresh_key("op-running");
    let running_fence = acquire(&s, &request(&running, LONG, OrphanPolicy::TakeOver)).await;
    let done = fresh_key("op-done");
    let g = acquire(&s, &request(&done, LONG, OrphanPolicy::TakeOver)).await;
    s.store
        .complete(&done, g, &Outcome::success(&json!(1)), TTL)
        .await
        .expect("complete");

    let listed = s
        .store
        .list(ListFilter {
            limit: 10_000,
            ..ListFilter::default()
        })
        .await
        .expect("list");
    let has = |k: &RecordKey| listed.iter().any(|r| &r.key == k);
    assert!(
        has(&unknown) && has(&running),
        "default listing shows InProgress and Unknown"
    );
    assert!(!has(&done), "default listing leaves Completed out");
    let only_unknown = s
        .store
        .list(ListFilter {
            state: Some(StateKind::Unknown),
            limit: 10_000,
            ..ListFilter::default()
        })
        .await
        .expect("list");
    assert!(
        only_unknown
            .iter()
            .all(|r| r.state.kind() == StateKind::Unknown)
    );
    assert!(only_unknown.iter().any(|r| r.key == unknown));

    let resolved = s
        .store
        .resolve(&unknown, &Outcome::success(&json!({"sent": true})), TTL)
        .await
        .expect("resolve");
    assert!(matches!(resolved.state, RecordState::Completed { .. }));
    match state_of(&s, &unknown).await {
        Some(RecordState::Completed { outcome, .. }) => {
            assert_eq!(outcome, Outcome::Success(r#"{"sent":true}"#.into()))
        }
        other => panic!("expected Completed after resolve, got {other:?}"),
    }
    let twice = s
        .store
        .resolve(&unknown, &Outcome::success(&json!(2)), TTL)
        .await;
    assert!(
        matches!(twice, Err(StoreError::WrongState { .. })),
        "a completed record is not resolved again, got {twice:?}"
    );

    // Resolving a running record fences its holder out.
    s.store
        .resolve(
            &running,
            &Outcome::Failure(ToolError::terminal("cancelled by operator")),
            TTL,
        )
        .await
        .expect("resolve");
    let late = s
        .store
        .complete(&running, running_fence, &Outcome::success(&json!(1)), TTL)
        .await;
    assert!(
        matches!(late, Err(StoreError::Fenced { .. })),
        "the old holder is fenced after resolve"
    );

    let gone = fresh_key("op-release");
    let h = acquire(&s, &request(&gone, LONG, OrphanPolicy::MarkUnknown)).await;
    s.store
        .mark_unknown(&gone, h, "crash")
        .await
        .expect("mark unknown");
    assert!(s.store.force_release(&gone).await.expect("force release"));
    assert_eq!(state_of(&s, &gone).await, None);
    let missing = s
        .store
        .resolve(&gone, &Outcome::success(&json!(1)), TTL)
        .await;
    assert!(
        matches!(missing, Err(StoreError::NotFound(_))),
        "resolve of a missing key, got {missing:?}"
    );
    let completed = s.store.force_release(&done).await;
    assert!(
        matches!(completed, Err(StoreError::WrongState { .. })),
        "completed records are not force-released"
    );
}

pub(super) async fn unknown_is_settled_once(s: Subject) {
    // Verified applied: Completed, with the verified outcome, fence moved on.
    let key = fresh_key("settle-applied");
    let fence = acquire(&s, &request(&key, LONG, OrphanPolicy::MarkUnknown)).await;
    let wrong = s
        .store
        .settle_unknown(&key, fence, Some(&Outcome::success(&json!(1))), TTL)
        .await;
    assert!(
        !wrong.expect("settle"),
        "an InProgress record is not settled"
    );
    s.store
        .mark_unknown(&key, fence, "timeout after sending")
        .await
        .expect("mark unknown");
    let stale = s
        .store
        .settle_unknown(&key, fence + 1, None, TTL)
        .await
        .expect("settle");
    assert!(!stale, "another fence changes nothing");
    let verified = Outcome::success(&json!({"message_id": "m-1"}));
    assert!(
        s.store
            .settle_unknown(&key, fence, Some(&verified), TTL)
            .await
            .expect("settle")
    );
    let rec = s.store.get(&key).await.expect("get").expect("record");
    assert!(rec.fence > fence, "settling moves the fence on");
    match rec.state {
        RecordState::Completed { outcome, .. } => assert_eq!(outcome, verified),
        other => panic!("expected Completed, got {other:?}"),
    }
    assert!(
        !s.store
            .settle_unknown(&key, fence, None, TTL)
            .await
            .expect("settle"),
        "a second settlement at the old fence changes nothing"
    );

    // Verified not applied: deleted, and the key can be claimed again with a greater fence.
    let gone = fresh_key("settle-not-applied");
    let req = request(&gone, LONG, OrphanPolicy::MarkUnknown);
    let f = acquire(&s, &req).await;
    s.store
        .mark_unknown(&gone, f, "crash")
        .await
        .expect("mark unknown");
    assert!(
        s.store
            .settle_unknown(&gone, f, None, TTL)
            .await
            .expect("settle")
    );
    assert_eq!(state_of(&s, &gone).await, None);
    s.pass(Duration::from_millis(5)).await;
    let again = acquire(&s, &req).await;
    assert!(
        again > f,
        "claimed again with a greater fence ({again} after {f})"
    );
}

pub(super) async fn purge_is_bounded(s: Subject) {
    let mut keys = Vec::new();
    for i in 0..5 {
        let key = fresh_key(&format!("purge-{i}"));
        let fence = acquire(&s, &request(&key, LONG, OrphanPolicy::TakeOver)).await;
        s.store
            .complete(&key, fence, &Outcome::success(&json!(i)), s.short())
            .await
            .expect("complete");
        keys.push(key);
    }
    let keep = fresh_key("purge-keep");
    let fence = acquire(&s, &request(&keep, LONG, OrphanPolicy::TakeOver)).await;
    s.store
        .complete(&keep, fence, &Outcome::success(&json!("kept")), TTL)
        .await
        .expect("complete");
    s.pass(s.past_short()).await;
    let first = s
        .store
        .purge_expired(&PurgeFilter::up_to(2))
        .await
        .expect("purge");
    assert!(
        first <= 2,
        "purge deleted {first} records with a limit of 2"
    );
    let mut rounds = 0;
    while s
        .store
        .purge_expired(&PurgeFilter::up_to(2))
        .await
        .expect("purge")
        > 0
    {
        rounds += 1;
        assert!(rounds < 100, "purge never finishes");
    }
    for k in &keys {
        assert_eq!(state_of(&s, k).await, None);
    }
    assert!(
        state_of(&s, &keep).await.is_some(),
        "purge keeps unexpired records"
    );
}

pub(super) async fn unknown_is_purged_only_after_its_retention(s: Subject) {
    let tenant = fresh_tenant("retention");
    let lost = tenant_request(&tenant, "lost", LONG, OrphanPolicy::MarkUnknown);
    let lost_fence = acquire(&s, &lost).await;
    s.store
        .mark_unknown(&lost.key, lost_fence, "timed out after sending")
        .await
        .expect("mark unknown");
    // Turned Unknown later, by a claim that finds it orphaned.
    let orphan = tenant_request(&tenant, "orphan", s.short(), OrphanPolicy::MarkUnknown);
    acquire(&s, &orphan).await;

    assert_eq!(
        purged(&s, Some(&tenant), s.short()).await,
        0,
        "an Unknown record younger than the retention is kept"
    );
    assert!(matches!(
        state_of(&s, &lost.key).await,
        Some(RecordState::Unknown { .. })
    ));
    s.pass(s.past_short()).await;
    assert!(matches!(
        s.store.claim(&orphan).await.expect("claim"),
        Claim::Existing(Record {
            state: RecordState::Unknown { .. },
            ..
        })
    ));
    assert_eq!(
        purged(&s, Some(&tenant), crate::store::DEFAULT_UNKNOWN_RETENTION).await,
        0,
        "the default retention is far longer"
    );
    assert_eq!(
        purged(&s, Some(&tenant), s.short()).await,
        1,
        "past the retention, counted from when it became Unknown"
    );
    assert_eq!(state_of(&s, &lost.key).await, None, "the old one is gone");
    assert!(
        matches!(
            state_of(&s, &orphan.key).await,
            Some(RecordState::Unknown { .. })
        ),
        "the one that became Unknown just now is kept"
    );
    // Forgotten: a retry is a new call, with a greater fence.
    s.pass(Duration::from_millis(5)).await;
    match s.store.claim(&lost).await.expect("claim") {
        Claim::Acquired { fence, .. } => assert!(fence > lost_fence),
        other => panic!("a purged key is claimed afresh, got {other:?}"),
    }
}

pub(super) async fn in_progress_is_never_purged(s: Subject) {
    let tenant = fresh_tenant("running");
    let live = tenant_request(&tenant, "live", LONG, OrphanPolicy::TakeOver);
    let live_fence = acquire(&s, &live).await;
    let orphan = tenant_request(&tenant, "orphan", s.short(), OrphanPolicy::TakeOver);
    let orphan_fence = acquire(&s, &orphan).await;
    s.pass(s.past_short()).await;
    assert_eq!(
        purged(&s, Some(&tenant), Duration::ZERO).await,
        0,
        "neither a live claim nor an orphan is purged"
    );
    purged(&s, None, Duration::ZERO).await;
    for (req, fence) in [(&live, live_fence), (&orphan, orphan_fence)] {
        let r = s.store.get(&req.key).await.expect("get").expect("kept");
        assert_eq!(r.fence, fence);
        assert!(
            matches!(r.state, RecordState::InProgress { .. }),
            "got {:?}",
            r.state
        );
    }
    s.store
        .complete(&live.key, live_fence, &Outcome::success(&json!(1)), TTL)
        .await
        .expect("the live holder completes");
    match s.store.claim(&orphan).await.expect("claim") {
        Claim::Acquired { takeover, .. } => assert!(takeover, "the orphan is taken over"),
        other => panic!("the orphan is still there to take over, got {other:?}"),
    }
}
