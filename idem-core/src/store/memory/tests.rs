//! The memory store's own tests: its compact form and key filing against the records they
//! stand for, and the sharing of tool names. The contract is the conformance suite's.

use std::collections::HashSet;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::compact::{Compact, origin, split_origin};
use super::keys::{Digest, DigestHashing, KeyRef, SHARDS, decode_digest};
use super::shard::{Entry, lock};
use super::{ManualClock, MemoryStore};
use crate::canonical::Fingerprint;
use crate::class::{OrphanPolicy, ToolClass};
use crate::contract::Contract;
use crate::error::ToolError;
use crate::key::{KeyMaterial, LogicalKey, RecordKey};
use crate::record::{Fence, JournalEntry, Outcome, Record, RecordState, StateKind, Timestamp};
use crate::store::machine;
use crate::store::{Claim, ClaimRequest, ListFilter, PurgeFilter, Store};

#[test]
fn digest_hashes_spread_within_a_shard() {
    use sha2::{Digest as _, Sha256};
    // Keys of one shard share their first byte; the bits that pick a bucket must not.
    let hashing = DigestHashing::default();
    let mut buckets = HashSet::new();
    let mut n = 0u32;
    let mut i = 0u32;
    while n < 4096 {
        let d: [u8; 32] = Sha256::digest(i.to_le_bytes()).into();
        i += 1;
        if KeyRef::Digest(d).shard() != 0 {
            continue;
        }
        n += 1;
        buckets.insert(hashing.hash_one(d) & 0xfff);
    }
    // 4,096 uniform draws from 4,096 buckets fill about 2,590 of them.
    assert!(buckets.len() > 2300, "{} buckets of 4096", buckets.len());
    // Another table draws another seed.
    let other = DigestHashing::default();
    assert_ne!(hashing.hash_one([7u8; 32]), other.hash_one([7u8; 32]));
}

const TTL: Duration = Duration::from_secs(60);
const LEASE: Duration = Duration::from_secs(30);

fn store() -> (MemoryStore, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    (MemoryStore::new().with_clock(clock.clone()), clock)
}

fn derived(call_id: &str) -> RecordKey {
    let material = KeyMaterial::CallId {
        call_id: call_id.into(),
        run_id: None,
    };
    LogicalKey::new("ns", "tenant", "send_email", material).record_key()
}

fn request(key: &RecordKey, tool: &str) -> ClaimRequest {
    ClaimRequest {
        key: key.clone(),
        tool: tool.into(),
        tenant: "tenant".into(),
        fingerprint: Fingerprint::of(&json!({"to": "a@example.com"})),
        lease: LEASE,
        orphans: OrphanPolicy::TakeOver,
        arguments: Some(r#"{"to":"a@example.com"}"#.into()),
        contract: None,
    }
}

async fn acquire(s: &MemoryStore, req: &ClaimRequest) -> Fence {
    match s.claim(req).await.expect("claim") {
        Claim::Acquired { fence, .. } => fence,
        other => panic!("expected to acquire {:?}, got {other:?}", req.key),
    }
}

/// Keys that are not 64 lower-case hex digits, which the store keeps as text.
fn text_keys() -> Vec<RecordKey> {
    let digest = derived("call_1");
    vec![
        RecordKey::from_stored(digest.as_str().to_uppercase()),
        RecordKey::from_stored(&digest.as_str()[..63]),
        RecordKey::from_stored(format!("{}0", digest.as_str())),
        RecordKey::from_stored("g".repeat(64)),
        RecordKey::from_stored("é".repeat(32)),
        RecordKey::from_stored(""),
        RecordKey::from_stored("k"),
    ]
}

/// Interned tool names across the store.
fn interned(s: &MemoryStore) -> usize {
    s.inner.shards.iter().map(|m| lock(m).tools.0.len()).sum()
}

#[test]
fn only_lower_case_hex_digests_are_kept_as_bytes() {
    let key = derived("call_1");
    let Some(d) = decode_digest(key.as_str()) else {
        panic!("a derived key is a digest");
    };
    assert_eq!(KeyRef::Digest(d).to_record_key(), key);
    for k in text_keys() {
        assert_eq!(KeyRef::of(&k), KeyRef::Text(k.as_str()), "{k:?}");
        assert_eq!(KeyRef::of(&k).to_record_key(), k);
    }
}

#[test]
#[cfg(target_pointer_width = "64")]
fn a_completed_entry_is_160_bytes() {
    // The memory-per-record budget (BENCHMARKS.md row 6) rests on this size.
    assert_eq!(std::mem::size_of::<Entry<Digest>>(), 160);
}

fn in_every_state() -> Vec<Record> {
    let steps = vec![JournalEntry {
        step: "charge".into(),
        value: json!({"id": 7}).to_string(),
    }];
    let base = Record {
        key: derived("call_1"),
        tool: "send_email".into(),
        tenant: "tenant: with a colon".into(),
        fingerprint: Fingerprint::of(&json!({"n": 1})),
        fence: 42,
        state: RecordState::InProgress {
            lease_until: Timestamp(5_000),
        },
        steps: Vec::new(),
        arguments: None,
        contract: Some(Arc::new(Contract::new(
            ToolClass::NonIdempotentWrite,
            "3",
            Duration::from_secs(9),
            Duration::from_secs(2),
        ))),
        created_at: Timestamp(1_000),
        updated_at: Timestamp(2_000),
    };
    let with = |state: RecordState, steps: &[JournalEntry], arguments: Option<&str>| Record {
        state,
        steps: steps.to_vec(),
        arguments: arguments.map(str::to_owned),
        ..base.clone()
    };
    let failure = ToolError::terminal("insufficient funds").with_details(json!({"short": 3}));
    vec![
        base.clone(),
        with(base.state.clone(), &steps, Some("{}")),
        with(
            RecordState::Completed {
                outcome: Outcome::Success(String::new()),
                expires_at: Timestamp(9_000),
            },
            &[],
            Some(r#"{"n":1}"#),
        ),
        with(
            RecordState::Completed {
                outcome: Outcome::Success("null".into()),
                expires_at: Timestamp(9_000),
            },
            &steps,
            None,
        ),
        with(
            RecordState::Completed {
                outcome: Outcome::Failure(failure),
                expires_at: Timestamp(9_000),
            },
            &steps,
            Some(""),
        ),
        with(
            RecordState::Unknown {
                since: Timestamp(3_000),
                last_error: "timed out after sending".into(),
            },
            &steps,
            None,
        ),
    ]
}

#[test]
fn every_state_round_trips_through_the_compact_form() {
    for r in in_every_state() {
        let mut name = String::new();
        origin(&mut name, &r.tool, &r.tenant);
        let compact = Compact::new(r.clone(), Arc::from(name.as_str()));
        // A completed record drops its contract (a replay does not read it).
        let mut expected = r.clone();
        if expected.state.kind() == StateKind::Completed {
            expected.contract = None;
        } else {
            assert!(expected.contract.is_some(), "the fixture has a contract");
        }
        assert_eq!(compact.to_record(r.key.clone()), expected);
        assert_eq!(compact.kind(), r.state.kind());
        for now in [0, 4_999, 5_000, 8_999, 9_000, 9_001, u64::MAX] {
            assert_eq!(
                compact.is_live(Timestamp(now)),
                machine::is_live(&r, Timestamp(now)),
                "{r:?} at {now}"
            );
        }
    }
}

#[tokio::test]
async fn keys_of_any_form_live_their_whole_life() {
    let (s, clock) = store();
    let digest = derived("call_1");
    let mut keys = text_keys();
    keys.push(digest.clone());
    for key in &keys {
        let req = request(key, "send_email");
        let f = acquire(&s, &req).await;
        s.journal(key, f, "a", "1").await.expect("journal");
        s.renew(key, f, LEASE).await.expect("renew");
        s.mark_unknown(key, f, "timed out").await.expect("unknown");
        let r = s.get(key).await.expect("get").expect("held");
        assert_eq!(&r.key, key);
        assert_eq!(r.steps.len(), 1);
        assert!(matches!(r.state, RecordState::Unknown { .. }));
    }
    // The upper-case twin of a digest is another record.
    assert_eq!(s.len(), keys.len());
    let listed = s.list(ListFilter::default()).await.expect("list");
    let mut got: Vec<_> = listed.iter().map(|r| r.key.clone()).collect();
    let mut want = keys.clone();
    got.sort();
    want.sort();
    assert_eq!(got, want, "every key comes back as written");

    let failure = Outcome::Failure(ToolError::terminal("no"));
    for key in &keys {
        let r = s.resolve(key, &failure, TTL).await.expect("resolve");
        assert_eq!(&r.key, key);
        let again = s.claim(&request(key, "send_email")).await.expect("claim");
        assert_eq!(again, Claim::Existing(r));
    }
    clock.advance(TTL);
    assert_eq!(
        s.purge_expired(&PurgeFilter::up_to(usize::MAX))
            .await
            .expect("purge"),
        keys.len()
    );
    assert!(s.is_empty());
    assert_eq!(interned(&s), 0);

    // A released key is claimed again with a greater fence, whatever its form.
    for key in &keys {
        let req = request(key, "send_email");
        let f = acquire(&s, &req).await;
        assert!(s.release(key, f).await.expect("release"));
        clock.advance(Duration::from_millis(1));
        assert!(acquire(&s, &req).await > f, "{key:?}");
    }
}

#[tokio::test]
async fn a_call_replays_what_was_stored() {
    let (s, _clock) = store();
    for key in [derived("call_2"), RecordKey::from_stored("call_2")] {
        let req = request(&key, "send_email");
        let f = acquire(&s, &req).await;
        s.journal(&key, f, "a", "1").await.expect("journal");
        s.journal(&key, f, "b", "2").await.expect("journal");
        s.journal(&key, f, "a", "3").await.expect("journal again");
        s.complete(&key, f, &Outcome::Success("0".into()), TTL)
            .await
            .expect("complete");
        let Claim::Existing(r) = s.claim(&req).await.expect("claim") else {
            panic!("a completed call is not claimed again");
        };
        assert_eq!(r.key, key);
        assert_eq!(r.tool, "send_email");
        assert_eq!(r.fence, f);
        assert_eq!(r.arguments, req.arguments);
        assert_eq!(r.fingerprint, req.fingerprint);
        let steps: Vec<_> = r.steps.iter().map(|e| (&*e.step, &*e.value)).collect();
        assert_eq!(steps, [("a", "3"), ("b", "2")]);
        assert!(matches!(
            &r.state,
            RecordState::Completed { outcome: Outcome::Success(o), .. } if o == "0"
        ));
        assert_eq!(s.get(&key).await.expect("get"), Some(r));
    }
}

#[tokio::test]
async fn tool_names_are_shared_and_go_with_their_last_record() {
    let (s, clock) = store();
    // Keys with the same first byte share a shard.
    let key = |i: u64| RecordKey::from_stored(format!("{i:064x}"));
    let mut fences = Vec::new();
    for i in 0..4 {
        let tool = if i < 3 { "send_email" } else { "refund" };
        fences.push(acquire(&s, &request(&key(i), tool)).await);
    }
    {
        let shard = lock(&s.inner.shards[KeyRef::of(&key(0)).shard()]);
        let tool_of = |i| &shard.get(KeyRef::of(&key(i))).expect("held").tool;
        assert!(Arc::ptr_eq(tool_of(0), tool_of(1)), "one name per tool");
        assert!(Arc::ptr_eq(tool_of(0), tool_of(2)));
        assert_eq!(shard.tools.0.len(), 2);
    }

    // Completing keeps the name; releasing the last record of a tool drops it.
    s.complete(&key(0), fences[0], &Outcome::Success("1".into()), TTL)
        .await
        .expect("complete");
    assert_eq!(interned(&s), 2);
    assert!(s.release(&key(3), fences[3]).await.expect("release"));
    assert_eq!(interned(&s), 1);
    assert!(s.force_release(&key(1)).await.expect("force release"));
    s.mark_unknown(&key(2), fences[2], "lost")
        .await
        .expect("unknown");
    assert!(
        s.settle_unknown(&key(2), fences[2], None, TTL)
            .await
            .expect("settle")
    );
    assert_eq!(interned(&s), 1, "the completed record still names it");
    clock.advance(TTL);
    assert_eq!(
        s.purge_expired(&PurgeFilter::up_to(10))
            .await
            .expect("purge"),
        1
    );
    assert_eq!(interned(&s), 0);

    // Evicting an expired record to make room drops its name too.
    let s = MemoryStore::new()
        .with_clock(clock.clone())
        .with_capacity(SHARDS);
    let f = acquire(&s, &request(&key(0), "send_email")).await;
    s.complete(&key(0), f, &Outcome::Success("1".into()), TTL)
        .await
        .expect("complete");
    clock.advance(TTL);
    acquire(&s, &request(&key(1), "refund")).await;
    assert_eq!(s.len(), 1);
    let shard = lock(&s.inner.shards[KeyRef::of(&key(0)).shard()]);
    let names: Vec<_> = shard.tools.0.iter().map(|t| split_origin(t)).collect();
    assert_eq!(names, [("refund", "tenant")]);
}

#[tokio::test]
async fn a_key_taken_over_by_another_tool_changes_its_name() {
    let (s, clock) = store();
    let key = RecordKey::from_stored("shared");
    let f = acquire(&s, &request(&key, "send_email")).await;
    s.complete(&key, f, &Outcome::Success("1".into()), TTL)
        .await
        .expect("complete");
    clock.advance(TTL);
    acquire(&s, &request(&key, "refund")).await;
    let r = s.get(&key).await.expect("get").expect("held");
    assert_eq!(r.tool, "refund");
    assert_eq!(interned(&s), 1);
}
