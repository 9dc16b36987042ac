//! A store's refusal reaches the caller as the store's own error, not as text: an output too
//! large to record, a store full of records it may not evict, a record that cannot be read
//! back. Each leaves the records as ARCHITECTURE.md ("Invariants") says: nothing held, nothing lost.

mod support;

use std::sync::Arc;
use std::time::Duration;

use idem::prelude::*;

use idem::store::ClaimRequest;
use idem::{
    key::Fingerprint, key::KeyMaterial, key::LogicalKey, record::Outcome, record::StateKind,
    store::ListFilter, store::StoreError, tool::OrphanPolicy,
};
use serde_json::json;
use support::claims::acquire;
use support::tally::Tally;

/// Each run of a label's body.
static RUNS: Tally = Tally::new();

fn runs(label: &str) -> usize {
    RUNS.count(label)
}

/// Charges once and answers with a receipt of `bytes` characters.
#[tool(class = "non_idempotent_write")]
fn charge(label: String, bytes: usize) -> Result<String, ToolError> {
    RUNS.note(&label, "");
    Ok("r".repeat(bytes))
}

/// Stores a document and echoes `bytes` characters of it.
#[tool(class = "idempotent_write")]
fn put(label: String, bytes: usize) -> Result<String, ToolError> {
    RUNS.note(&label, "");
    Ok("d".repeat(bytes))
}

/// The store accepts outputs up to this size.
const LIMIT: usize = 256;

fn setup(store: MemoryStore) -> (Dispatcher, Arc<MemoryStore>) {
    let store = Arc::new(store.with_max_outcome_bytes(LIMIT));
    let registry = Registry::builder()
        .tool::<charge>()
        .tool::<put>()
        .build()
        .unwrap();
    (Dispatcher::new(registry, store.clone()).unwrap(), store)
}

fn run() -> RunContext {
    RunContext::new("tenant-store-errors")
}

fn call(tool: &str, label: &str, bytes: usize) -> ToolCall {
    ToolCall::new(tool, json!({ "label": label, "bytes": bytes }))
        .with_call_id(format!("call-{label}"))
}

async fn open_records(store: &MemoryStore) -> Vec<idem::record::Record> {
    store.list(ListFilter::default()).await.unwrap()
}

#[tokio::test]
async fn an_output_too_large_to_record_is_reported_with_its_size_and_the_call_turns_unknown() {
    let (d, store) = setup(MemoryStore::new());
    let big = call("charge", "too-large-charge", 1000);
    match d.dispatch(&big, &run()).await {
        Err(DispatchError::Store {
            tool,
            error: StoreError::TooLarge { bytes, limit },
        }) => {
            assert_eq!(tool, "charge");
            assert_eq!(limit, LIMIT);
            assert!(bytes > 1000, "the encoded output's size, got {bytes}");
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert_eq!(runs("too-large-charge"), 1);
    // The charge happened and nothing recorded what it returned: the call is Unknown, and a
    // duplicate is refused instead of charging again.
    let open = open_records(&store).await;
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].state.kind(), StateKind::Unknown);
    let again = d.dispatch(&big, &run()).await;
    assert!(
        matches!(again, Err(DispatchError::OutcomeUnknown { .. })),
        "got {again:?}"
    );
    assert_eq!(runs("too-large-charge"), 1);
}

#[tokio::test]
async fn an_idempotent_write_whose_output_is_too_large_gives_its_claim_back() {
    let (d, store) = setup(MemoryStore::new());
    let big = call("put", "too-large-put", 1000);
    for attempt in 1..=2 {
        let err = d.dispatch(&big, &run()).await.unwrap_err();
        assert!(
            matches!(
                err,
                DispatchError::Store {
                    error: StoreError::TooLarge { limit: LIMIT, .. },
                    ..
                }
            ),
            "got {err:?}"
        );
        assert_eq!(err.code(), "store_error");
        // Running it again is safe, so nothing stays held and the next call runs it again.
        assert!(open_records(&store).await.is_empty());
        assert_eq!(runs("too-large-put"), attempt);
    }
    // An output the store accepts is recorded and replayed as usual.
    let small = call("put", "small-put", 10);
    assert!(!d.dispatch(&small, &run()).await.unwrap().deduplicated);
    assert!(d.dispatch(&small, &run()).await.unwrap().deduplicated);
}

#[tokio::test]
async fn a_full_store_refuses_a_new_call_before_it_runs() {
    // The smallest store: one record per shard, and records completed a moment ago may not
    // be evicted. Some call among the first shards + 1 finds its shard full.
    let (d, store) = setup(MemoryStore::new().with_capacity(1));
    let mut refused = None;
    for i in 0..=64 {
        let label = format!("fill-{i}");
        match d.dispatch(&call("put", &label, 10), &run()).await {
            Ok(done) => assert!(!done.deduplicated),
            Err(DispatchError::Store {
                tool,
                error: StoreError::CapacityExceeded { capacity },
            }) => {
                assert_eq!(tool, "put");
                assert!(i <= capacity, "{i} records fit in a capacity of {capacity}");
                refused = Some(label);
                break;
            }
            Err(other) => panic!("expected CapacityExceeded, got {other:?}"),
        }
    }
    let refused = refused.expect("a store of one record per shard filled up");
    assert_eq!(runs(&refused), 0, "nothing runs without a claim");
    // The records already there are intact and replay.
    assert!(open_records(&store).await.is_empty(), "nothing left held");
    let first = d
        .dispatch(&call("put", "fill-0", 10), &run())
        .await
        .unwrap();
    assert!(first.deduplicated);
    assert_eq!(runs("fill-0"), 1);
}

#[tokio::test]
async fn a_recorded_output_that_is_not_json_is_reported_corrupt_with_its_key() {
    let (d, store) = setup(MemoryStore::new());
    // A record written by something other than the dispatcher (an older version, a hand
    // edit), holding text that is not JSON under the key a call of `charge` will use.
    let args = json!({ "label": "written-badly", "bytes": 1 });
    let (key, _) = LogicalKey::derive(
        idem::dispatch::DEFAULT_NAMESPACE,
        "tenant-store-errors",
        "charge",
        &KeyMaterial::CallId {
            call_id: "call-written-badly".into(),
            run_id: None,
        },
    );
    let request = ClaimRequest {
        key: key.clone(),
        tool: "charge".into(),
        tenant: "tenant-store-errors".into(),
        fingerprint: Fingerprint::of(&args),
        lease: Duration::from_secs(30),
        orphans: OrphanPolicy::MarkUnknown,
        arguments: None,
        contract: None,
    };
    let fence = acquire(store.as_ref(), &request).await;
    let text = Outcome::Success("receipt 42".into());
    store
        .complete(&key, fence, &text, Duration::from_secs(60))
        .await
        .unwrap();
    match d
        .dispatch(&call("charge", "written-badly", 1), &run())
        .await
    {
        Err(DispatchError::Store {
            error:
                StoreError::Corrupt {
                    key: corrupt,
                    reason,
                },
            ..
        }) => {
            assert_eq!(corrupt, key);
            assert!(reason.contains("not JSON"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert_eq!(runs("written-badly"), 0, "a corrupt record is not run over");
}
