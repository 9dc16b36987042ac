//! Records carry their tenant, and an operator confined to one tenant can neither see nor
//! settle another tenant's calls.

use std::sync::Arc;
use std::time::Duration;

use idem::prelude::*;
use idem::{
    MemoryStore, record::Outcome, record::RecordState, store::ListFilter, store::StoreError,
    store::TenantStore,
};
use serde_json::json;

use crate::support;
use support::dispatcher::with_tool;
use support::providers::timing_out;

async fn two_unknown_calls() -> (Dispatcher, Arc<MemoryStore>) {
    let store = Arc::new(MemoryStore::new());
    let d = with_tool(timing_out("refund"), store.clone());
    for tenant in ["acme", "globex"] {
        let call = ToolCall::new("refund", json!({})).with_call_id("call-1");
        assert!(d.dispatch(&call, &RunContext::new(tenant)).await.is_err());
    }
    (d, store)
}

#[tokio::test]
async fn an_operator_of_one_tenant_sees_and_settles_only_its_records() {
    let (d, store) = two_unknown_calls().await;
    let call = ToolCall::new("refund", json!({})).with_call_id("call-1");
    let acme_key = d
        .record_key(&call, &RunContext::new("acme"))
        .unwrap()
        .unwrap();
    let globex_key = d
        .record_key(&call, &RunContext::new("globex"))
        .unwrap()
        .unwrap();

    let all = store.list(ListFilter::default()).await.unwrap();
    let mut tenants: Vec<_> = all.iter().map(|r| r.tenant.as_str()).collect();
    tenants.sort();
    assert_eq!(tenants, ["acme", "globex"], "records carry their tenant");

    let acme = TenantStore::new(store.clone(), "acme");
    let seen = acme.list(ListFilter::default()).await.unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].key, acme_key);
    assert!(acme.get(&globex_key).await.unwrap().is_none());

    let done = Outcome::success(&json!({"refunded": true}));
    let day = Duration::from_secs(86_400);
    assert!(matches!(
        acme.resolve(&globex_key, &done, day).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        acme.force_release(&globex_key).await,
        Err(StoreError::NotFound(_))
    ));
    let untouched = store.get(&globex_key).await.unwrap().unwrap();
    assert!(matches!(untouched.state, RecordState::Unknown { .. }));

    let resolved = acme.resolve(&acme_key, &done, day).await.unwrap();
    assert!(matches!(resolved.state, RecordState::Completed { .. }));
}
