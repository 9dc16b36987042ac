//! The claim the store tests make: one call of `send_email` to a@example.com, under a key
//! named by the test case, and the fence a claim of it must acquire.
//!
//! Every backend's tests ask the store for the same thing, so that a difference in what they
//! get back is the store's, not the fixture's.

use std::time::Duration;

use idem_core::{
    Claim, ClaimRequest, Fence, Fingerprint, KeyMaterial, LogicalKey, OrphanPolicy, RecordKey,
    Store,
};
use serde_json::json;

/// The tool every claim is for.
pub const TOOL: &str = "send_email";
/// The tenant every claim is made for, unless a test sets another.
pub const TENANT: &str = "tenant";
/// The arguments' JSON text, as the dispatcher keeps it.
pub const ARGUMENTS: &str = r#"{"to":"a@example.com"}"#;
/// A lease no test outlives: a holder keeps its claim for the whole test.
pub const LEASE: Duration = Duration::from_secs(60);
/// How long a completed record is kept: longer than any test.
pub const TTL: Duration = Duration::from_secs(3600);

/// The record key of the call named `case`: the same name gives the same key.
pub fn record_key(case: &str) -> RecordKey {
    LogicalKey::new(
        "idem-store-tests",
        TENANT,
        TOOL,
        KeyMaterial::Explicit { key: case.into() },
    )
    .record_key()
}

/// A claim of `key` for a lease of `lease`, settling an orphan it finds by `orphans`.
pub fn claim_request(key: &RecordKey, lease: Duration, orphans: OrphanPolicy) -> ClaimRequest {
    ClaimRequest {
        key: key.clone(),
        tool: TOOL.into(),
        tenant: TENANT.into(),
        fingerprint: Fingerprint::of(&json!({"to": "a@example.com"})),
        lease,
        orphans,
        arguments: Some(ARGUMENTS.into()),
        contract: None,
    }
}

/// Claim `request`, which must acquire; the holder's fence.
pub async fn acquire<S: Store + ?Sized>(store: &S, request: &ClaimRequest) -> Fence {
    match store.claim(request).await.expect("claim") {
        Claim::Acquired { fence, .. } => fence,
        other => panic!("expected to acquire the key, got {other:?}"),
    }
}
