//! Cases of pending approvals: a request is kept while it stands, a decision is made once
//! (one winner among racing deciders), and listing filters by tenant, tool and state.

use std::time::Duration;

use super::fixtures::fresh_tenant;
use super::subject::Subject;
use crate::canonical::Fingerprint;
use crate::key::RecordKey;
use crate::record::Timestamp;
use crate::store::approvals::{self, ApprovalFilter, DecisionRefused, PendingApproval, Verdict};

fn pending(tenant: &str, tool: &str, key: &str, now: Timestamp, ttl: Duration) -> PendingApproval {
    PendingApproval {
        key: RecordKey::from_stored(format!("{tenant}:{key}")),
        namespace: "conformance".into(),
        tenant: tenant.into(),
        tool: tool.into(),
        downstream_key: format!("idem-{key}"),
        fingerprint: Fingerprint::of(&serde_json::json!({ "key": key })),
        arguments: serde_json::json!({ "key": key, "card": "[secret hmac-sha256:00]" }),
        secret_parameters: true,
        policy: None,
        approvers: 1,
        approved_by: Vec::new(),
        requested_at: now,
        expires_at: now.plus(ttl),
        decision: None,
    }
}

fn denial(by: &str) -> Verdict {
    Verdict::Denied {
        reason: format!("{by} says no"),
    }
}

pub(super) async fn a_request_is_kept_while_it_stands(s: Subject) {
    let tenant = fresh_tenant("approval-kept");
    let now = s.store.now().await.expect("now");
    let first = pending(&tenant, "wire", "a", now, Duration::from_secs(2));
    let stored = approvals::request(&*s.store, &first)
        .await
        .expect("request");
    assert_eq!(stored, first, "the first request is recorded as given");
    let again = PendingApproval {
        requested_at: now.plus(Duration::from_millis(1)),
        ..first.clone()
    };
    let kept = approvals::request(&*s.store, &again)
        .await
        .expect("request");
    assert_eq!(kept, first, "a standing request is kept, not replaced");
    assert_eq!(
        approvals::get(&*s.store, &first.key).await.expect("get"),
        Some(first.clone())
    );
    // Once it expired, a new request replaces it.
    s.pass(Duration::from_millis(2_100)).await;
    let later = s.store.now().await.expect("now");
    let renewed = pending(&tenant, "wire", "a", later, Duration::from_secs(60));
    let stored = approvals::request(&*s.store, &renewed)
        .await
        .expect("request");
    assert_eq!(stored, renewed, "an expired request is replaced");
}

pub(super) async fn a_decision_is_made_once(s: Subject) {
    let tenant = fresh_tenant("approval-once");
    let now = s.store.now().await.expect("now");
    let entry = pending(&tenant, "wire", "b", now, Duration::from_secs(60));
    approvals::request(&*s.store, &entry)
        .await
        .expect("request");
    // Eight deciders race: exactly one decision is recorded.
    let mut tasks = Vec::new();
    for n in 0..8 {
        let store = s.store.clone();
        let key = entry.key.clone();
        tasks.push(tokio::spawn(async move {
            let by = format!("op-{n}");
            approvals::decide(&*store, &key, &by, &denial(&by)).await
        }));
    }
    let mut winners = Vec::new();
    for task in tasks {
        match task.await.expect("task").expect("store") {
            Ok(decided) => winners.push(decided),
            Err(DecisionRefused::AlreadyDecided { .. }) => {}
            Err(other) => panic!("unexpected refusal: {other}"),
        }
    }
    assert_eq!(winners.len(), 1, "one decision wins");
    let stored = approvals::get(&*s.store, &entry.key)
        .await
        .expect("get")
        .expect("entry");
    assert_eq!(
        Some(&stored),
        winners.first(),
        "the winner's decision is the stored one"
    );
    let decision = stored.decision.expect("decided");
    assert!(decision.at >= now, "decided on the store's clock");
    // Deciding again is refused, naming who decided.
    let again = approvals::decide(&*s.store, &entry.key, "late", &denial("late"))
        .await
        .expect("store");
    assert!(
        matches!(&again, Err(DecisionRefused::AlreadyDecided { by, .. }) if *by == decision.by),
        "{again:?}"
    );
    // So is a decision on a request never made, and one after expiry.
    let missing = RecordKey::from_stored(format!("{tenant}:missing"));
    assert!(matches!(
        approvals::decide(&*s.store, &missing, "x", &denial("x"))
            .await
            .expect("store"),
        Err(DecisionRefused::NotRequested(_))
    ));
    let short = pending(&tenant, "wire", "c", now, Duration::from_secs(1));
    approvals::request(&*s.store, &short)
        .await
        .expect("request");
    s.pass(Duration::from_millis(1_100)).await;
    assert!(matches!(
        approvals::decide(&*s.store, &short.key, "x", &denial("x"))
            .await
            .expect("store"),
        Err(DecisionRefused::Expired { .. })
    ));
}

pub(super) async fn pending_approvals_are_listed_by_tenant_and_tool(s: Subject) {
    let (mine, theirs) = (
        fresh_tenant("approval-mine"),
        fresh_tenant("approval-theirs"),
    );
    let now = s.store.now().await.expect("now");
    let hour = Duration::from_secs(3600);
    for entry in [
        pending(&mine, "wire", "1", now, hour),
        pending(&mine, "close", "2", now, hour),
        pending(&mine, "wire", "3", now, hour),
        pending(&theirs, "wire", "4", now, hour),
    ] {
        approvals::request(&*s.store, &entry)
            .await
            .expect("request");
    }
    let decided = RecordKey::from_stored(format!("{mine}:3"));
    approvals::decide(&*s.store, &decided, "op", &denial("op"))
        .await
        .expect("store")
        .expect("decided");
    let keys = |filter: ApprovalFilter| {
        let store = s.store.clone();
        async move {
            approvals::list(&*store, &filter)
                .await
                .expect("list")
                .into_iter()
                .map(|e| {
                    e.key
                        .as_str()
                        .rsplit(':')
                        .next()
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect::<Vec<_>>()
        }
    };
    let of = |tenant: &str| ApprovalFilter {
        tenant: Some(tenant.to_owned()),
        ..ApprovalFilter::default()
    };
    assert_eq!(
        keys(of(&mine)).await,
        ["1", "2"],
        "pending only, this tenant's"
    );
    assert_eq!(
        keys(ApprovalFilter {
            tool: Some("wire".into()),
            ..of(&mine)
        })
        .await,
        ["1"]
    );
    assert_eq!(
        keys(ApprovalFilter {
            pending_only: false,
            ..of(&mine)
        })
        .await,
        ["1", "2", "3"],
        "decided ones too"
    );
    assert_eq!(keys(of(&theirs)).await, ["4"]);
    assert_eq!(
        keys(ApprovalFilter {
            limit: 1,
            ..of(&mine)
        })
        .await
        .len(),
        1
    );
}

pub(super) async fn expired_approvals_are_purged_after_their_retention(s: Subject) {
    let tenant = fresh_tenant("approval-purge");
    let now = s.store.now().await.expect("now");
    let short = pending(&tenant, "wire", "old", now, Duration::from_secs(1));
    let long = pending(&tenant, "wire", "new", now, Duration::from_secs(3600));
    for entry in [&short, &long] {
        approvals::request(&*s.store, entry).await.expect("request");
    }
    // A removal with a stale text changes nothing.
    assert!(
        !s.store
            .remove_approval(&short.key, "{\"not\":\"the text\"}")
            .await
            .expect("remove"),
    );
    s.pass(Duration::from_millis(1_600)).await;
    let retention = Duration::from_millis(500);
    let purged = approvals::purge(&*s.store, retention, usize::MAX)
        .await
        .expect("purge");
    assert!(purged >= 1, "the expired entry is purged");
    assert_eq!(
        approvals::get(&*s.store, &short.key).await.expect("get"),
        None
    );
    assert_eq!(
        approvals::get(&*s.store, &long.key).await.expect("get"),
        Some(long.clone()),
        "a standing entry is kept"
    );
    let listed = approvals::list(
        &*s.store,
        &ApprovalFilter {
            tenant: Some(tenant.clone()),
            pending_only: false,
            ..ApprovalFilter::default()
        },
    )
    .await
    .expect("list");
    assert_eq!(listed, [long], "the purged entry is no longer listed");
}
