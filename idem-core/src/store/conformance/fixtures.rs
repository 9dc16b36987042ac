//! What the cases share: keys and tenants no other case or run uses, claim requests, the
//! leases and TTLs the cases run with, and short ways to read a subject's records.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::json;

use super::subject::Subject;
use crate::canonical::Fingerprint;
use crate::class::{OrphanPolicy, ToolClass};
use crate::contract::Contract;
use crate::key::{KeyMaterial, LogicalKey, RecordKey};
use crate::record::{Record, RecordState, StateKind, Timestamp};
use crate::store::{Claim, ClaimRequest, ListFilter, PurgeFilter};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A key no other case or run uses.
pub(super) fn fresh_key(case: &str) -> RecordKey {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let run = format!(
        "{}-{}-{n}",
        std::process::id(),
        Timestamp::now().as_millis()
    );
    LogicalKey::new(
        "idem-conformance",
        run,
        case,
        KeyMaterial::Explicit { key: "k".into() },
    )
    .record_key()
}

/// The tenant of the cases that do not choose one.
pub(super) const TENANT: &str = "idem-conformance";

/// A tenant no other case or run uses.
pub(super) fn fresh_tenant(name: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "{name}-{}-{}-{n}",
        std::process::id(),
        Timestamp::now().as_millis()
    )
}

/// A claim of a new key of `tenant`, derived from it as the dispatcher derives keys.
pub(super) fn tenant_request(
    tenant: &str,
    name: &str,
    lease: Duration,
    orphans: OrphanPolicy,
) -> ClaimRequest {
    let key = LogicalKey::new(
        "idem-conformance",
        tenant,
        "conformance_tool",
        KeyMaterial::Explicit { key: name.into() },
    )
    .record_key();
    ClaimRequest {
        tenant: tenant.to_owned(),
        ..request(&key, lease, orphans)
    }
}

pub(super) fn request(key: &RecordKey, lease: Duration, orphans: OrphanPolicy) -> ClaimRequest {
    ClaimRequest {
        key: key.clone(),
        tool: "conformance_tool".into(),
        tenant: TENANT.into(),
        fingerprint: Fingerprint::of(&json!({"to": "a@example.com"})),
        lease,
        orphans,
        arguments: Some(r#"{"to":"a@example.com"}"#.into()),
        contract: Some(std::sync::Arc::new(contract(match orphans {
            OrphanPolicy::TakeOver => ToolClass::IdempotentWrite,
            OrphanPolicy::MarkUnknown => ToolClass::NonIdempotentWrite,
        }))),
    }
}

/// The contract the fixtures' claims are made under, of `class`.
pub(super) fn contract(class: ToolClass) -> Contract {
    Contract::new(class, "7", TTL, Duration::from_secs(30))
}

pub(super) const LONG: Duration = Duration::from_secs(60);
pub(super) const TTL: Duration = Duration::from_secs(3600);

pub(super) async fn acquire(s: &Subject, req: &ClaimRequest) -> u64 {
    match s.store.claim(req).await.expect("claim") {
        Claim::Acquired { fence, .. } => fence,
        other => panic!("expected to acquire the key, got {other:?}"),
    }
}

pub(super) async fn state_of(s: &Subject, key: &RecordKey) -> Option<RecordState> {
    s.store.get(key).await.expect("get").map(|r| r.state)
}

/// The keys of some records, to compare listings without caring for their order.
pub(super) fn keys_of(records: &[Record]) -> BTreeSet<&str> {
    records.iter().map(|r| r.key.as_str()).collect()
}

pub(super) async fn listed(s: &Subject, tenant: &str, state: Option<StateKind>) -> Vec<Record> {
    s.store
        .list(ListFilter {
            state,
            tenant: Some(tenant.to_owned()),
            limit: 10_000,
            after: None,
        })
        .await
        .expect("list")
}

pub(super) async fn purged(
    s: &Subject,
    tenant: Option<&str>,
    unknown_retention: Duration,
) -> usize {
    s.store
        .purge_expired(&PurgeFilter {
            limit: 10_000,
            tenant: tenant.map(str::to_owned),
            unknown_retention,
        })
        .await
        .expect("purge")
}
