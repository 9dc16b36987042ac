//! Cases of tenants: a record keeps its tenant, and listing and purging by tenant see only
//! that tenant's records.

use std::collections::BTreeSet;

use serde_json::json;

use super::fixtures::{LONG, TTL, acquire, fresh_tenant, keys_of, listed, purged, tenant_request};
use super::subject::Subject;
use crate::class::OrphanPolicy;
use crate::record::{Outcome, StateKind};
use crate::store::{Claim, ListCursor, ListFilter, PurgeFilter};

pub(super) async fn tenant_is_kept_and_read_back(s: Subject) {
    let tenant = fresh_tenant("kept");
    let req = tenant_request(&tenant, "kept", s.short(), OrphanPolicy::TakeOver);
    let key = req.key.clone();
    let fence = acquire(&s, &req).await;
    let held = s.store.get(&key).await.expect("get").expect("record");
    assert_eq!(held.tenant, tenant, "get reads the tenant back");
    let listed_now = listed(&s, &tenant, Some(StateKind::InProgress)).await;
    assert_eq!(keys_of(&listed_now), BTreeSet::from([key.as_str()]));
    assert_eq!(listed_now[0].tenant, tenant, "list reads the tenant back");
    s.store
        .journal(&key, fence, "reserve", "1")
        .await
        .expect("journal");
    match s.store.claim(&req).await.expect("claim") {
        Claim::Existing(r) => assert_eq!(r.tenant, tenant, "a duplicate sees the tenant"),
        other => panic!("a live claim is not acquired again, got {other:?}"),
    }

    // A take-over keeps it, and so do completion and an Unknown outcome.
    s.pass(s.past_short()).await;
    let Claim::Acquired { fence, .. } = s.store.claim(&req).await.expect("claim") else {
        panic!("the orphan is taken over");
    };
    let taken = s.store.get(&key).await.expect("get").expect("record");
    assert_eq!(taken.tenant, tenant, "a take-over keeps the tenant");
    s.store
        .complete(&key, fence, &Outcome::success(&json!(1)), TTL)
        .await
        .expect("complete");
    let done = s.store.get(&key).await.expect("get").expect("record");
    assert_eq!(done.tenant, tenant, "completion keeps the tenant");
    let completed = listed(&s, &tenant, Some(StateKind::Completed)).await;
    assert_eq!(completed.len(), 1);
    assert_eq!(completed[0].tenant, tenant);

    let lost = tenant_request(&tenant, "lost", LONG, OrphanPolicy::MarkUnknown);
    let f = acquire(&s, &lost).await;
    s.store
        .mark_unknown(&lost.key, f, "timed out after sending")
        .await
        .expect("mark unknown");
    let unknown = listed(&s, &tenant, None).await;
    assert_eq!(keys_of(&unknown), BTreeSet::from([lost.key.as_str()]));
    assert_eq!(
        unknown[0].tenant, tenant,
        "an Unknown record keeps the tenant"
    );
    let resolved = s
        .store
        .resolve(&lost.key, &Outcome::success(&json!(2)), TTL)
        .await
        .expect("resolve");
    assert_eq!(resolved.tenant, tenant, "resolve returns the tenant");
}

pub(super) async fn list_by_tenant_returns_only_that_tenant(s: Subject) {
    let (a, b) = (fresh_tenant("list-a"), fresh_tenant("list-b"));
    // Each tenant: one record of each state.
    let mut made = Vec::new();
    for tenant in [&a, &b] {
        let running = tenant_request(tenant, "running", LONG, OrphanPolicy::TakeOver);
        acquire(&s, &running).await;
        let lost = tenant_request(tenant, "lost", LONG, OrphanPolicy::MarkUnknown);
        let f = acquire(&s, &lost).await;
        s.store
            .mark_unknown(&lost.key, f, "timed out after sending")
            .await
            .expect("mark unknown");
        let done = tenant_request(tenant, "done", LONG, OrphanPolicy::TakeOver);
        let f = acquire(&s, &done).await;
        s.store
            .complete(&done.key, f, &Outcome::success(&json!(3)), TTL)
            .await
            .expect("complete");
        made.push((running.key, lost.key, done.key));
    }
    let (a_running, a_lost, a_done) = &made[0];
    let (b_running, b_lost, b_done) = &made[1];

    let attention = listed(&s, &a, None).await;
    assert_eq!(
        keys_of(&attention),
        BTreeSet::from([a_running.as_str(), a_lost.as_str()]),
        "the default listing of a tenant: its InProgress and Unknown records, no one else's"
    );
    assert!(attention.iter().all(|r| r.tenant == a));
    let completed = listed(&s, &a, Some(StateKind::Completed)).await;
    assert_eq!(keys_of(&completed), BTreeSet::from([a_done.as_str()]));
    let unknown = listed(&s, &b, Some(StateKind::Unknown)).await;
    assert_eq!(keys_of(&unknown), BTreeSet::from([b_lost.as_str()]));
    let running = listed(&s, &b, Some(StateKind::InProgress)).await;
    assert_eq!(keys_of(&running), BTreeSet::from([b_running.as_str()]));
    assert!(
        listed(&s, &fresh_tenant("nobody"), None).await.is_empty(),
        "a tenant without records lists nothing"
    );
    let first = s
        .store
        .list(ListFilter {
            state: None,
            tenant: Some(a.clone()),
            limit: 1,
            after: None,
        })
        .await
        .expect("list");
    assert_eq!(first.len(), 1, "the limit holds within a tenant");
    assert_eq!(first[0].tenant, a);

    let everyone = s
        .store
        .list(ListFilter {
            limit: 10_000,
            ..ListFilter::default()
        })
        .await
        .expect("list");
    let everyone = keys_of(&everyone);
    for k in [a_running, a_lost, b_running, b_lost] {
        assert!(everyone.contains(k.as_str()), "no tenant: every tenant's");
    }
    assert!(!everyone.contains(b_done.as_str()));
}

pub(super) async fn purge_by_tenant_leaves_other_tenants(s: Subject) {
    let (a, b) = (fresh_tenant("purge-a"), fresh_tenant("purge-b"));
    for (tenant, n) in [(&a, 3), (&b, 2)] {
        for i in 0..n {
            let req = tenant_request(tenant, &format!("short-{i}"), LONG, OrphanPolicy::TakeOver);
            let f = acquire(&s, &req).await;
            s.store
                .complete(&req.key, f, &Outcome::success(&json!(i)), s.short())
                .await
                .expect("complete");
        }
    }
    let kept = tenant_request(&a, "kept", LONG, OrphanPolicy::TakeOver);
    let f = acquire(&s, &kept).await;
    s.store
        .complete(&kept.key, f, &Outcome::success(&json!("kept")), TTL)
        .await
        .expect("complete");
    s.pass(s.past_short()).await;

    let retention = crate::store::DEFAULT_UNKNOWN_RETENTION;
    assert_eq!(
        purged(&s, Some(&a), retention).await,
        3,
        "the tenant's three expired records"
    );
    assert_eq!(purged(&s, Some(&a), retention).await, 0, "and nothing more");
    let one = s
        .store
        .purge_expired(&PurgeFilter {
            tenant: Some(b.clone()),
            ..PurgeFilter::up_to(1)
        })
        .await
        .expect("purge");
    assert_eq!(
        one, 1,
        "the other tenant's records were left, and the limit holds"
    );
    assert_eq!(purged(&s, Some(&b), retention).await, 1);
    assert!(
        s.store.get(&kept.key).await.expect("get").is_some(),
        "a record that has not expired is kept"
    );
}

/// A listing read a page at a time, each after the last record of the one before, returns
/// every record once, in the order of one long listing, whatever the state filter; records
/// created in the same millisecond are told apart by their key.
pub(super) async fn a_listing_pages_by_its_cursor(s: Subject) {
    let tenant = fresh_tenant("pages");
    for i in 0..7 {
        let running = tenant_request(&tenant, &format!("page-{i}"), LONG, OrphanPolicy::TakeOver);
        acquire(&s, &running).await;
    }
    let lost = tenant_request(&tenant, "page-lost", LONG, OrphanPolicy::MarkUnknown);
    let f = acquire(&s, &lost).await;
    s.store
        .mark_unknown(&lost.key, f, "timed out after sending")
        .await
        .expect("mark unknown");
    for state in [None, Some(StateKind::InProgress), Some(StateKind::Unknown)] {
        let whole = s
            .store
            .list(ListFilter {
                state,
                tenant: Some(tenant.clone()),
                limit: 100,
                after: None,
            })
            .await
            .expect("list");
        let mut paged = Vec::new();
        let mut filter = ListFilter {
            state,
            tenant: Some(tenant.clone()),
            limit: 3,
            after: None,
        };
        for _ in 0..10 {
            let page = s.store.list(filter.clone()).await.expect("a page");
            assert!(page.len() <= 3, "a page holds at most the limit");
            let Some(last) = page.last() else { break };
            filter.after = Some(ListCursor::after(last));
            paged.extend(page);
        }
        let keys = |records: &[crate::record::Record]| {
            records.iter().map(|r| r.key.clone()).collect::<Vec<_>>()
        };
        assert_eq!(
            keys(&paged),
            keys(&whole),
            "pages of {state:?} are the whole listing, in order"
        );
        let expected = match state {
            None => 8,
            Some(StateKind::InProgress) => 7,
            _ => 1,
        };
        assert_eq!(whole.len(), expected, "{state:?}");
    }
}
