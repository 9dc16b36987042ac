//! Cases of run accounts: entries come back in the order they were appended, each run's
//! apart from every other's, all of them when appended at once, none once expired.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::fixtures::{LONG, fresh_tenant};
use super::subject::Subject;

pub(super) async fn run_entries_come_back_in_order_and_apart(s: Subject) {
    let tenant = fresh_tenant("runs");
    for i in 0..5 {
        s.store
            .append_run_entry(&tenant, "run-1", &format!("{{\"n\":{i}}}"), LONG)
            .await
            .expect("append");
    }
    s.store
        .append_run_entry(&tenant, "run-2", "other run", LONG)
        .await
        .expect("append");
    let entries = s.store.run_entries(&tenant, "run-1").await.expect("read");
    let expected: Vec<String> = (0..5).map(|i| format!("{{\"n\":{i}}}")).collect();
    assert_eq!(entries, expected, "in append order, this run's only");
    assert_eq!(
        s.store.run_entries(&tenant, "run-2").await.expect("read"),
        vec!["other run".to_owned()]
    );
    assert!(
        s.store
            .run_entries(&tenant, "never-run")
            .await
            .expect("read")
            .is_empty(),
        "a run nobody appended to has no entries"
    );
    // Ids that would meet if joined naively stay apart.
    let a = format!("{tenant}:a");
    s.store
        .append_run_entry(&a, "b", "tenant a, run b", LONG)
        .await
        .expect("append");
    s.store
        .append_run_entry(&tenant, "a:b", "tenant, run a:b", LONG)
        .await
        .expect("append");
    assert_eq!(
        s.store.run_entries(&a, "b").await.expect("read"),
        vec!["tenant a, run b".to_owned()]
    );
    assert_eq!(
        s.store.run_entries(&tenant, "a:b").await.expect("read"),
        vec!["tenant, run a:b".to_owned()]
    );
    let other = fresh_tenant("runs-other");
    assert!(
        s.store
            .run_entries(&other, "run-1")
            .await
            .expect("read")
            .is_empty(),
        "another tenant's run of the same id has none of these"
    );
}

pub(super) async fn concurrent_run_entries_all_land(s: Subject) {
    let tenant = Arc::new(fresh_tenant("runs-race"));
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let store = s.store.clone();
            let tenant = tenant.clone();
            tokio::spawn(async move {
                store
                    .append_run_entry(&tenant, "run", &format!("e{i}"), LONG)
                    .await
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task").expect("append");
    }
    let entries = s.store.run_entries(&tenant, "run").await.expect("read");
    assert_eq!(entries.len(), 50, "every append landed once");
    let distinct: BTreeSet<&String> = entries.iter().collect();
    assert_eq!(distinct.len(), 50, "none twice");
}

pub(super) async fn expired_run_entries_are_not_returned(s: Subject) {
    let tenant = fresh_tenant("runs-expiry");
    s.store
        .append_run_entry(&tenant, "run", "soon gone", s.short())
        .await
        .expect("append");
    assert_eq!(
        s.store
            .run_entries(&tenant, "run")
            .await
            .expect("read")
            .len(),
        1
    );
    s.pass(s.past_short()).await;
    assert!(
        s.store
            .run_entries(&tenant, "run")
            .await
            .expect("read")
            .is_empty(),
        "an expired account is not returned"
    );
}
