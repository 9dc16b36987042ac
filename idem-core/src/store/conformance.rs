//! The store conformance suite: the contract of [`Store`](crate::Store), as executable cases.
//!
//! Every store idem ships runs it; a user's own store can too:
//!
//! ```no_run
//! use std::sync::Arc;
//! use idem_core::store::conformance::{self, Subject};
//! use idem_core::store::memory::MemoryStore;
//!
//! # async fn run() {
//! conformance::run_all("memory", || async { Subject::real_time(Arc::new(MemoryStore::new())) }).await;
//! # }
//! ```
//!
//! Cases that need time to pass call [`Subject::pass`]: a store on a controllable clock
//! advances it, a store on a server's clock sleeps for real (the leases used are short).
//!
//! Cases that need a second instance of the store on the same data (two processes racing for
//! one key, a worker starting cold) open one through the subject: build it with
//! [`Subject::reopenable`] to say how. A store that cannot be opened twice (the memory store)
//! runs those cases on its one instance, and skips their cold starts.

use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::json;

use crate::Fingerprint;
use crate::class::OrphanPolicy;
use crate::error::ToolError;
use crate::key::{KeyMaterial, LogicalKey, RecordKey};
use crate::record::{Outcome, Record, RecordState, StateKind, Timestamp};
use crate::store::memory::ManualClock;
use crate::store::{Claim, ClaimRequest, ListFilter, PurgeFilter, Store, StoreError};

/// Opens another instance of a subject's store on the same data.
type Reopen = Arc<
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<Arc<dyn Store>, StoreError>> + Send>>
        + Send
        + Sync,
>;

/// A store under test, how time passes for it, and (if it can) how to open it again.
#[derive(Clone)]
pub struct Subject {
    /// The store.
    pub store: Arc<dyn Store>,
    clock: Option<Arc<ManualClock>>,
    reopen: Option<Reopen>,
}

impl fmt::Debug for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subject")
            .field("store", &self.store)
            .field("clock", &self.clock)
            .field("reopenable", &self.reopen.is_some())
            .finish()
    }
}

impl Subject {
    /// A store whose clock is real (a server's, or the system's): time passes by sleeping.
    pub fn real_time(store: Arc<dyn Store>) -> Self {
        Subject {
            store,
            clock: None,
            reopen: None,
        }
    }

    /// A store on a manual clock: time passes by advancing it.
    pub fn manual(store: Arc<dyn Store>, clock: Arc<ManualClock>) -> Self {
        Subject {
            store,
            clock: Some(clock),
            reopen: None,
        }
    }

    /// A store on a real clock that can be opened again on the same data: `open(place)` opens
    /// the subject's store now, and another instance whenever a case needs one (a second
    /// process racing the first, a worker starting cold). `place` names the data: a file, a
    /// database and schema, a server and key prefix.
    ///
    /// ```no_run
    /// use idem_core::store::conformance::{self, Subject};
    /// use idem_core::store::sqlite::SqliteStore;
    ///
    /// # async fn run() {
    /// conformance::run_all("sqlite", || async {
    ///     let path = std::env::temp_dir().join("idem-conformance.db");
    ///     Subject::reopenable(path, |path| async move { SqliteStore::open(path) })
    ///         .await
    ///         .expect("open")
    /// })
    /// .await;
    /// # }
    /// ```
    pub async fn reopenable<P, S, F, Fut>(place: P, open: F) -> Result<Self, StoreError>
    where
        P: Clone + Send + Sync + 'static,
        S: Store + 'static,
        F: Fn(P) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<S, StoreError>> + Send + 'static,
    {
        let reopen: Reopen = Arc::new(move || {
            let opening = open(place.clone());
            Box::pin(async move { Ok(Arc::new(opening.await?) as Arc<dyn Store>) })
        });
        let store = reopen().await?;
        Ok(Subject {
            store,
            clock: None,
            reopen: Some(reopen),
        })
    }

    /// Let `d` pass on the store's clock.
    pub async fn pass(&self, d: Duration) {
        match &self.clock {
            Some(c) => c.advance(d),
            None => tokio::time::sleep(d).await,
        }
    }

    /// Another instance of the store on the same data, or `None` if the subject cannot open
    /// one.
    async fn second_instance(&self) -> Option<Arc<dyn Store>> {
        let reopen = self.reopen.as_ref()?;
        Some(reopen().await.expect("open a second instance of the store"))
    }

    /// The subject after a cold start: this instance closed, a new one opened on the same
    /// data. `None` if the subject cannot open another instance.
    async fn cold_start(self) -> Option<Subject> {
        let Subject {
            store,
            clock,
            reopen,
        } = self;
        let reopen = reopen?;
        drop(store);
        let store = reopen()
            .await
            .expect("open the store again after a cold start");
        Some(Subject {
            store,
            clock,
            reopen: Some(reopen),
        })
    }
}

type CaseFn = fn(Subject) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// Every case, by name.
pub const CASES: &[(&str, CaseFn)] = &[
    ("claim_race_has_one_winner", |s| {
        Box::pin(claim_race_has_one_winner(s))
    }),
    ("takeover_increments_fence", |s| {
        Box::pin(takeover_increments_fence(s))
    }),
    ("orphan_becomes_unknown", |s| {
        Box::pin(orphan_becomes_unknown(s))
    }),
    ("stale_complete_is_refused", |s| {
        Box::pin(stale_complete_is_refused(s))
    }),
    ("stale_release_changes_nothing", |s| {
        Box::pin(stale_release_changes_nothing(s))
    }),
    ("expired_lease_cannot_be_renewed", |s| {
        Box::pin(expired_lease_cannot_be_renewed(s))
    }),
    ("journal_survives_takeover", |s| {
        Box::pin(journal_survives_takeover(s))
    }),
    ("fingerprint_is_kept", |s| Box::pin(fingerprint_is_kept(s))),
    ("outputs_round_trip_exactly", |s| {
        Box::pin(outputs_round_trip_exactly(s))
    }),
    ("oversized_output_is_refused", |s| {
        Box::pin(oversized_output_is_refused(s))
    }),
    ("completed_records_expire", |s| {
        Box::pin(completed_records_expire(s))
    }),
    ("purge_is_bounded", |s| Box::pin(purge_is_bounded(s))),
    ("operator_list_resolve_release", |s| {
        Box::pin(operator_list_resolve_release(s))
    }),
    ("fence_is_not_reused_after_release", |s| {
        Box::pin(fence_is_not_reused_after_release(s))
    }),
    ("unknown_is_settled_once", |s| {
        Box::pin(unknown_is_settled_once(s))
    }),
    ("an_outcome_that_is_not_json_is_refused", |s| {
        Box::pin(an_outcome_that_is_not_json_is_refused(s))
    }),
    ("orphan_with_other_arguments_is_not_taken_over", |s| {
        Box::pin(orphan_with_other_arguments_is_not_taken_over(s))
    }),
    ("tenant_is_kept_and_read_back", |s| {
        Box::pin(tenant_is_kept_and_read_back(s))
    }),
    ("list_by_tenant_returns_only_that_tenant", |s| {
        Box::pin(list_by_tenant_returns_only_that_tenant(s))
    }),
    ("purge_by_tenant_leaves_other_tenants", |s| {
        Box::pin(purge_by_tenant_leaves_other_tenants(s))
    }),
    ("unknown_is_purged_only_after_its_retention", |s| {
        Box::pin(unknown_is_purged_only_after_its_retention(s))
    }),
    ("in_progress_is_never_purged", |s| {
        Box::pin(in_progress_is_never_purged(s))
    }),
    ("a_live_claim_is_never_taken_for_an_orphan", |s| {
        Box::pin(a_live_claim_is_never_taken_for_an_orphan(s))
    }),
    ("two_instances_race_and_one_claim_wins", |s| {
        Box::pin(two_instances_race_and_one_claim_wins(s))
    }),
    (
        "a_completed_record_keeps_its_fingerprint_across_a_cold_start",
        |s| Box::pin(a_completed_record_keeps_its_fingerprint_across_a_cold_start(s)),
    ),
];

/// Run every case, each on a fresh subject from `make`. Panics naming every failing case and
/// why it failed.
pub async fn run_all<F, Fut>(store_name: &str, make: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Subject>,
{
    let mut failures = Vec::new();
    for (name, case) in CASES {
        let subject = make().await;
        let handle = tokio::spawn(case(subject));
        if let Err(e) = handle.await {
            let why = e
                .try_into_panic()
                .ok()
                .and_then(|p| {
                    p.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                })
                .unwrap_or_else(|| "cancelled".into());
            failures.push(format!("`{name}`: {why}"));
        }
    }
    if !failures.is_empty() {
        panic!(
            "store `{store_name}` failed {} of {} conformance cases:\n{}",
            failures.len(),
            CASES.len(),
            failures.join("\n")
        );
    }
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A key no other case or run uses.
fn fresh_key(case: &str) -> RecordKey {
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
const TENANT: &str = "idem-conformance";

/// A tenant no other case or run uses.
fn fresh_tenant(name: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "{name}-{}-{}-{n}",
        std::process::id(),
        Timestamp::now().as_millis()
    )
}

/// A claim of a new key of `tenant`, derived from it as the dispatcher derives keys.
fn tenant_request(
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

fn request(key: &RecordKey, lease: Duration, orphans: OrphanPolicy) -> ClaimRequest {
    ClaimRequest {
        key: key.clone(),
        tool: "conformance_tool".into(),
        tenant: TENANT.into(),
        fingerprint: Fingerprint::of(&json!({"to": "a@example.com"})),
        lease,
        orphans,
        arguments: Some(r#"{"to":"a@example.com"}"#.into()),
    }
}

const LONG: Duration = Duration::from_secs(60);
const SHORT: Duration = Duration::from_millis(300);
const PAST_SHORT: Duration = Duration::from_millis(700);
const TTL: Duration = Duration::from_secs(3600);

async fn acquire(s: &Subject, req: &ClaimRequest) -> u64 {
    match s.store.claim(req).await.expect("claim") {
        Claim::Acquired { fence, .. } => fence,
        other => panic!("expected to acquire the key, got {other:?}"),
    }
}

async fn state_of(s: &Subject, key: &RecordKey) -> Option<RecordState> {
    s.store.get(key).await.expect("get").map(|r| r.state)
}

async fn claim_race_has_one_winner(s: Subject) {
    let key = fresh_key("race");
    let req = request(&key, LONG, OrphanPolicy::TakeOver);
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let store = s.store.clone();
        let req = req.clone();
        tasks.push(tokio::spawn(async move { store.claim(&req).await }));
    }
    let mut winners = 0;
    for t in tasks {
        match t.await.expect("task").expect("claim") {
            Claim::Acquired { fence, .. } => {
                winners += 1;
                assert!(fence >= 1, "fences start at 1 or above");
            }
            Claim::Existing(r) => assert!(
                matches!(r.state, RecordState::InProgress { .. }),
                "loser sees InProgress, got {:?}",
                r.state
            ),
        }
    }
    assert_eq!(winners, 1, "exactly one of 32 concurrent claims wins");
}

async fn takeover_increments_fence(s: Subject) {
    let key = fresh_key("takeover");
    let req = request(&key, SHORT, OrphanPolicy::TakeOver);
    let first = acquire(&s, &req).await;
    assert!(
        matches!(
            s.store.claim(&req).await.expect("claim"),
            Claim::Existing(_)
        ),
        "a live lease is not taken over"
    );
    s.pass(PAST_SHORT).await;
    match s.store.claim(&req).await.expect("claim") {
        Claim::Acquired {
            fence, takeover, ..
        } => {
            assert_eq!(fence, first + 1, "take-over increments the fence");
            assert!(takeover, "take-over is reported");
        }
        other => panic!("expected a take-over, got {other:?}"),
    }
}

async fn orphan_becomes_unknown(s: Subject) {
    let key = fresh_key("orphan");
    let req = request(&key, SHORT, OrphanPolicy::MarkUnknown);
    let fence = acquire(&s, &req).await;
    s.pass(PAST_SHORT).await;
    match s.store.claim(&req).await.expect("claim") {
        Claim::Existing(r) => match &r.state {
            RecordState::Unknown { last_error, .. } => assert_eq!(
                last_error,
                crate::record::ORPHANED,
                "an orphan's reason is the shared constant, so verify hooks can tell orphans apart"
            ),
            other => panic!("orphan turns Unknown, got {other:?}"),
        },
        other => panic!("a non-idempotent orphan must not be taken over, got {other:?}"),
    }
    // And it stays Unknown: the old holder cannot complete it, nobody re-acquires it.
    let err = s
        .store
        .complete(&key, fence, &Outcome::success(&json!(1)), TTL)
        .await;
    assert!(
        matches!(err, Err(StoreError::Fenced { .. })),
        "old holder's complete refused, got {err:?}"
    );
    assert!(matches!(
        s.store.claim(&req).await.expect("claim"),
        Claim::Existing(_)
    ));
    assert!(matches!(
        state_of(&s, &key).await,
        Some(RecordState::Unknown { .. })
    ));
}

async fn stale_complete_is_refused(s: Subject) {
    let key = fresh_key("stale-complete");
    let req = request(&key, SHORT, OrphanPolicy::TakeOver);
    let old = acquire(&s, &req).await;
    s.pass(PAST_SHORT).await;
    let new = acquire(&s, &req).await;
    let stale = s
        .store
        .complete(&key, old, &Outcome::success(&json!("stale")), TTL)
        .await;
    assert!(
        matches!(stale, Err(StoreError::Fenced { fence, .. }) if fence == old),
        "stale complete refused, got {stale:?}"
    );
    assert!(
        matches!(
            state_of(&s, &key).await,
            Some(RecordState::InProgress { .. })
        ),
        "stale complete changed nothing"
    );
    s.store
        .complete(&key, new, &Outcome::success(&json!("fresh")), TTL)
        .await
        .expect("current holder completes");
    match state_of(&s, &key).await {
        Some(RecordState::Completed { outcome, .. }) => {
            assert_eq!(outcome, Outcome::Success("\"fresh\"".into()))
        }
        other => panic!("expected Completed, got {other:?}"),
    }
    let again = s
        .store
        .complete(&key, new, &Outcome::success(&json!("twice")), TTL)
        .await;
    assert!(
        matches!(again, Err(StoreError::Fenced { .. })),
        "a completed record cannot be completed again"
    );
}

async fn stale_release_changes_nothing(s: Subject) {
    let key = fresh_key("stale-release");
    let req = request(&key, SHORT, OrphanPolicy::TakeOver);
    let old = acquire(&s, &req).await;
    s.pass(PAST_SHORT).await;
    let new = acquire(&s, &req).await;
    assert!(
        !s.store.release(&key, old).await.expect("release"),
        "stale release reports false"
    );
    let rec = s
        .store
        .get(&key)
        .await
        .expect("get")
        .expect("record still there");
    assert_eq!(rec.fence, new);
    assert!(
        s.store.release(&key, new).await.expect("release"),
        "holder's release succeeds"
    );
    assert_eq!(state_of(&s, &key).await, None, "released key is gone");
    assert!(
        !s.store.release(&key, new).await.expect("release"),
        "second release is a no-op"
    );
}

async fn expired_lease_cannot_be_renewed(s: Subject) {
    let key = fresh_key("renew");
    let req = request(&key, SHORT, OrphanPolicy::TakeOver);
    let fence = acquire(&s, &req).await;
    let until = s
        .store
        .renew(&key, fence, LONG)
        .await
        .expect("a live lease renews");
    let now = s.store.now().await.expect("now");
    assert!(
        until.as_millis() >= now.as_millis() + 50_000,
        "renewal extends the lease"
    );
    s.store
        .renew(&key, fence, SHORT)
        .await
        .expect("renew short");
    s.pass(PAST_SHORT).await;
    let late = s.store.renew(&key, fence, LONG).await;
    assert!(
        matches!(late, Err(StoreError::Fenced { .. })),
        "expired lease not renewable, got {late:?}"
    );
    let wrong = s.store.renew(&key, fence + 7, LONG).await;
    assert!(
        matches!(wrong, Err(StoreError::Fenced { .. })),
        "wrong fence not renewable"
    );
}

async fn journal_survives_takeover(s: Subject) {
    let key = fresh_key("journal");
    let req = request(&key, SHORT, OrphanPolicy::TakeOver);
    let old = acquire(&s, &req).await;
    s.store
        .journal(&key, old, "reserve", r#"{"id":7}"#)
        .await
        .expect("journal");
    s.store
        .journal(&key, old, "charge", "true")
        .await
        .expect("journal");
    s.pass(PAST_SHORT).await;
    match s.store.claim(&req).await.expect("claim") {
        Claim::Acquired { steps, fence, .. } => {
            let names: Vec<_> = steps
                .iter()
                .map(|e| (e.step.as_str(), e.value.as_str()))
                .collect();
            assert_eq!(
                names,
                vec![("reserve", r#"{"id":7}"#), ("charge", "true")],
                "steps survive, in order"
            );
            let stale = s.store.journal(&key, old, "ship", "1").await;
            assert!(
                matches!(stale, Err(StoreError::Fenced { .. })),
                "stale journal refused"
            );
            s.store
                .journal(&key, fence, "ship", "1")
                .await
                .expect("new holder journals");
            let rec = s.store.get(&key).await.expect("get").expect("record");
            assert_eq!(rec.steps.len(), 3);
        }
        other => panic!("expected a take-over, got {other:?}"),
    }
}

async fn fingerprint_is_kept(s: Subject) {
    let key = fresh_key("fingerprint");
    let req = request(&key, LONG, OrphanPolicy::TakeOver);
    let fence = acquire(&s, &req).await;
    s.store
        .complete(&key, fence, &Outcome::success(&json!({"id": 1})), TTL)
        .await
        .expect("complete");
    match s.store.claim(&req).await.expect("claim") {
        Claim::Existing(r) => {
            assert_eq!(
                r.fingerprint, req.fingerprint,
                "identical replay matches the fingerprint"
            );
            assert_eq!(r.tool, "conformance_tool");
            assert_eq!(r.arguments.as_deref(), Some(r#"{"to":"a@example.com"}"#));
        }
        other => panic!("expected the completed record, got {other:?}"),
    }
    let mut other = req.clone();
    other.fingerprint = Fingerprint::of(&json!({"to": "b@example.com"}));
    match s.store.claim(&other).await.expect("claim") {
        Claim::Existing(r) => assert_ne!(
            r.fingerprint, other.fingerprint,
            "other arguments see the original fingerprint"
        ),
        other => panic!("other arguments must not acquire a used key, got {other:?}"),
    }
}

async fn outputs_round_trip_exactly(s: Subject) {
    let large = format!("\"{}\"", "x".repeat(512 * 1024));
    let failure = Outcome::Failure(
        ToolError::terminal("insufficient funds").with_details(json!({"balance": 0})),
    );
    let mut outcomes: Vec<Outcome> = [
        "0",
        "false",
        "\"\"",
        "[]",
        "null",
        "{}",
        "-0.5",
        "\"é\\u0000\"",
    ]
    .into_iter()
    .map(|t| Outcome::Success(t.to_owned()))
    .collect();
    outcomes.push(Outcome::Success(large));
    outcomes.push(failure);
    for (i, outcome) in outcomes.into_iter().enumerate() {
        let key = fresh_key(&format!("roundtrip-{i}"));
        let fence = acquire(&s, &request(&key, LONG, OrphanPolicy::TakeOver)).await;
        s.store
            .complete(&key, fence, &outcome, TTL)
            .await
            .expect("complete");
        match state_of(&s, &key).await {
            Some(RecordState::Completed { outcome: got, .. }) => {
                assert!(got == outcome, "outcome {i} changed in the store")
            }
            other => panic!("expected Completed, got {other:?}"),
        }
    }
}

async fn oversized_output_is_refused(s: Subject) {
    let key = fresh_key("oversized");
    let fence = acquire(&s, &request(&key, LONG, OrphanPolicy::TakeOver)).await;
    let huge = Outcome::Success(format!(
        "\"{}\"",
        "x".repeat(crate::store::DEFAULT_MAX_OUTCOME_BYTES + 1)
    ));
    let err = s.store.complete(&key, fence, &huge, TTL).await;
    assert!(
        matches!(err, Err(StoreError::TooLarge { .. })),
        "oversized outcome refused, got {err:?}"
    );
    assert!(
        matches!(
            state_of(&s, &key).await,
            Some(RecordState::InProgress { .. })
        ),
        "refusal changes nothing"
    );
    s.store
        .complete(&key, fence, &Outcome::success(&json!("ok")), TTL)
        .await
        .expect("holder can still complete");
}

async fn completed_records_expire(s: Subject) {
    let key = fresh_key("expiry");
    let req = request(&key, LONG, OrphanPolicy::TakeOver);
    let fence = acquire(&s, &req).await;
    s.store
        .journal(&key, fence, "first-life", "1")
        .await
        .expect("journal");
    s.store
        .complete(&key, fence, &Outcome::success(&json!(1)), SHORT)
        .await
        .expect("complete");
    assert!(state_of(&s, &key).await.is_some());
    s.pass(PAST_SHORT).await;
    assert_eq!(state_of(&s, &key).await, None, "expired record is absent");
    match s.store.claim(&req).await.expect("claim") {
        Claim::Acquired {
            takeover,
            fence: again,
            steps,
        } => {
            assert!(!takeover, "a fresh call, not a take-over");
            assert!(
                again > fence,
                "the fence keeps increasing ({again} after {fence})"
            );
            assert!(
                steps.is_empty(),
                "a new call does not inherit the old call's steps"
            );
        }
        other => panic!("expired key is claimable again, got {other:?}"),
    }
    let rec = s.store.get(&key).await.expect("get").expect("record");
    assert!(rec.steps.is_empty(), "the stored journal starts empty too");
}

async fn orphan_with_other_arguments_is_not_taken_over(s: Subject) {
    let key = fresh_key("orphan-other-args");
    let req = request(&key, SHORT, OrphanPolicy::TakeOver);
    acquire(&s, &req).await;
    s.pass(PAST_SHORT).await;
    let mut other = req.clone();
    other.fingerprint = Fingerprint::of(&json!({"to": "someone-else@example.com"}));
    match s.store.claim(&other).await.expect("claim") {
        Claim::Existing(r) => {
            assert_eq!(r.fingerprint, req.fingerprint);
            assert!(
                matches!(r.state, RecordState::InProgress { .. }),
                "left as it was, got {:?}",
                r.state
            );
        }
        other => panic!("a call with other arguments must not take a key over, got {other:?}"),
    }
}

async fn purge_is_bounded(s: Subject) {
    let mut keys = Vec::new();
    for i in 0..5 {
        let key = fresh_key(&format!("purge-{i}"));
        let fence = acquire(&s, &request(&key, LONG, OrphanPolicy::TakeOver)).await;
        s.store
            .complete(&key, fence, &Outcome::success(&json!(i)), SHORT)
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
    s.pass(PAST_SHORT).await;
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

async fn operator_list_resolve_release(s: Subject) {
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

async fn fence_is_not_reused_after_release(s: Subject) {
    let key = fresh_key("fence-reuse");
    let req = request(&key, LONG, OrphanPolicy::TakeOver);
    let old = acquire(&s, &req).await;
    // An operator frees the key while its holder is still alive; a new holder claims it.
    assert!(s.store.force_release(&key).await.expect("force release"));
    s.pass(Duration::from_millis(5)).await;
    let new = acquire(&s, &req).await;
    assert!(
        new > old,
        "a re-claimed key gets a greater fence ({new} after {old})"
    );
    let stale = s
        .store
        .complete(&key, old, &Outcome::success(&json!("stale")), TTL)
        .await;
    assert!(
        matches!(stale, Err(StoreError::Fenced { .. })),
        "the old holder is fenced out, got {stale:?}"
    );
    assert!(s.store.release(&key, new).await.expect("release"));
    s.pass(Duration::from_millis(5)).await;
    let third = acquire(&s, &req).await;
    assert!(
        third > new,
        "released and claimed again: {third} after {new}"
    );
}

async fn an_outcome_that_is_not_json_is_refused(s: Subject) {
    let key = fresh_key("not-json");
    let fence = acquire(&s, &request(&key, LONG, OrphanPolicy::MarkUnknown)).await;
    s.store
        .mark_unknown(&key, fence, "timeout after sending")
        .await
        .expect("mark unknown");
    // Text, and JSON that a replay could not read back: too deep, out of range, a lone
    // surrogate.
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    for bad in ["receipt 42", &deep, "1e400", r#""\ud800""#] {
        let text = Outcome::Success(bad.to_owned());
        let refused = s.store.resolve(&key, &text, TTL).await;
        assert!(
            matches!(refused, Err(StoreError::InvalidOutcome { .. })),
            "resolve with {bad:.20}: {refused:?}"
        );
        let refused = s.store.settle_unknown(&key, fence, Some(&text), TTL).await;
        assert!(
            matches!(refused, Err(StoreError::InvalidOutcome { .. })),
            "settle_unknown with {bad:.20}: {refused:?}"
        );
    }
    // Nothing changed: the record is still Unknown, and JSON settles it.
    match state_of(&s, &key).await {
        Some(RecordState::Unknown { .. }) => {}
        other => panic!("expected Unknown, got {other:?}"),
    }
    let json_text = Outcome::Success(r#""receipt 42""#.into());
    s.store
        .resolve(&key, &json_text, TTL)
        .await
        .expect("resolve");
    match state_of(&s, &key).await {
        Some(RecordState::Completed { outcome, .. }) => assert_eq!(outcome, json_text),
        other => panic!("expected Completed, got {other:?}"),
    }
}

async fn unknown_is_settled_once(s: Subject) {
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

/// The keys of some records, to compare listings without caring for their order.
fn keys_of(records: &[Record]) -> BTreeSet<&str> {
    records.iter().map(|r| r.key.as_str()).collect()
}

async fn listed(s: &Subject, tenant: &str, state: Option<StateKind>) -> Vec<Record> {
    s.store
        .list(ListFilter {
            state,
            tenant: Some(tenant.to_owned()),
            limit: 10_000,
        })
        .await
        .expect("list")
}

async fn purged(s: &Subject, tenant: Option<&str>, unknown_retention: Duration) -> usize {
    s.store
        .purge_expired(&PurgeFilter {
            limit: 10_000,
            tenant: tenant.map(str::to_owned),
            unknown_retention,
        })
        .await
        .expect("purge")
}

async fn tenant_is_kept_and_read_back(s: Subject) {
    let tenant = fresh_tenant("kept");
    let req = tenant_request(&tenant, "kept", SHORT, OrphanPolicy::TakeOver);
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
    s.pass(PAST_SHORT).await;
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

async fn list_by_tenant_returns_only_that_tenant(s: Subject) {
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

async fn purge_by_tenant_leaves_other_tenants(s: Subject) {
    let (a, b) = (fresh_tenant("purge-a"), fresh_tenant("purge-b"));
    for (tenant, n) in [(&a, 3), (&b, 2)] {
        for i in 0..n {
            let req = tenant_request(tenant, &format!("short-{i}"), LONG, OrphanPolicy::TakeOver);
            let f = acquire(&s, &req).await;
            s.store
                .complete(&req.key, f, &Outcome::success(&json!(i)), SHORT)
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
    s.pass(PAST_SHORT).await;

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

async fn unknown_is_purged_only_after_its_retention(s: Subject) {
    let tenant = fresh_tenant("retention");
    let lost = tenant_request(&tenant, "lost", LONG, OrphanPolicy::MarkUnknown);
    let lost_fence = acquire(&s, &lost).await;
    s.store
        .mark_unknown(&lost.key, lost_fence, "timed out after sending")
        .await
        .expect("mark unknown");
    // Turned Unknown later, by a claim that finds it orphaned.
    let orphan = tenant_request(&tenant, "orphan", SHORT, OrphanPolicy::MarkUnknown);
    acquire(&s, &orphan).await;

    assert_eq!(
        purged(&s, Some(&tenant), SHORT).await,
        0,
        "an Unknown record younger than the retention is kept"
    );
    assert!(matches!(
        state_of(&s, &lost.key).await,
        Some(RecordState::Unknown { .. })
    ));
    s.pass(PAST_SHORT).await;
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
        purged(&s, Some(&tenant), SHORT).await,
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

async fn in_progress_is_never_purged(s: Subject) {
    let tenant = fresh_tenant("running");
    let live = tenant_request(&tenant, "live", LONG, OrphanPolicy::TakeOver);
    let live_fence = acquire(&s, &live).await;
    let orphan = tenant_request(&tenant, "orphan", SHORT, OrphanPolicy::TakeOver);
    let orphan_fence = acquire(&s, &orphan).await;
    s.pass(PAST_SHORT).await;
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

/// A claim whose lease has not ended is live, whatever the policy for orphans and whatever
/// lease the second caller asks for: only the holder's lease decides. (Powertools for AWS
/// Lambda, Python #8386 and TypeScript #5678: an in-progress record without a deadline of its
/// own was treated as expired and run again while its first execution was still going.)
async fn a_live_claim_is_never_taken_for_an_orphan(s: Subject) {
    let mut held = Vec::new();
    for orphans in [OrphanPolicy::TakeOver, OrphanPolicy::MarkUnknown] {
        let key = fresh_key(&format!("live-{orphans:?}"));
        let req = request(&key, LONG, orphans);
        let fence = acquire(&s, &req).await;
        let before = s.store.get(&key).await.expect("get").expect("record");
        held.push((req, fence, before));
    }
    // Time passes, more than the second caller's lease, less than the holder's.
    s.pass(PAST_SHORT).await;
    for (req, fence, before) in &held {
        let orphans = req.orphans;
        let mut impatient = req.clone();
        impatient.lease = Duration::from_millis(1);
        for second in [req, &impatient] {
            match s.store.claim(second).await.expect("claim") {
                Claim::Existing(r) => {
                    assert_eq!(r.fence, *fence, "{orphans:?}: the fence is unchanged");
                    assert_eq!(
                        r.state, before.state,
                        "{orphans:?}: the holder's record is left as it was"
                    );
                }
                other => panic!("{orphans:?}: a live claim was taken for an orphan: {other:?}"),
            }
        }
        assert_eq!(
            s.store.get(&req.key).await.expect("get").map(|r| r.state),
            Some(before.state.clone()),
            "{orphans:?}: still in progress, not Unknown"
        );
        s.store
            .complete(&req.key, *fence, &Outcome::success(&json!("done")), TTL)
            .await
            .unwrap_or_else(|e| panic!("{orphans:?}: the holder still completes: {e}"));
    }
}

/// Two instances of the store on the same data (two processes on one SQLite file, two
/// connections to one database or server) race for one key: exactly one claim wins, and each
/// instance sees what the other recorded.
async fn two_instances_race_and_one_claim_wins(s: Subject) {
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
async fn replays_by_fingerprint(
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

async fn a_completed_record_keeps_its_fingerprint_across_a_cold_start(s: Subject) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn memory_store_conforms_on_a_manual_clock() {
        run_all("memory", || async {
            let clock = Arc::new(ManualClock::new());
            Subject::manual(
                Arc::new(MemoryStore::new().with_clock(clock.clone())),
                clock,
            )
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn memory_store_conforms_in_real_time() {
        run_all("memory", || async {
            Subject::real_time(Arc::new(MemoryStore::new()))
        })
        .await;
    }
}
