//! The store layers, each in use: the limits every store ships behind, on a store that has no
//! limits of its own, and the tracing layer seen through a subscriber that captures what it
//! records.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_core::store::layer::{Layer, Limits, Trace};
use idem_core::store::memory::MemoryStore;
use idem_core::store::{Claim, ClaimRequest, ListFilter, Store};
use idem_core::{
    Fingerprint, KeyMaterial, LogicalKey, OrphanPolicy, Outcome, RecordKey, RecordState, StoreError,
};
use serde_json::json;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

const TTL: Duration = Duration::from_secs(60);

/// Arguments and an output no log may show.
const ARGUMENTS: &str = r#"{"card":"4111-secret-card"}"#;
const OUTPUT: &str = r#"{"receipt":"secret-receipt"}"#;

fn key(name: &str) -> RecordKey {
    let material = KeyMaterial::Explicit { key: name.into() };
    LogicalKey::new("idem-layers", "tenant", "charge", material).record_key()
}

fn request(key: &RecordKey) -> ClaimRequest {
    ClaimRequest {
        key: key.clone(),
        tool: "charge".into(),
        tenant: "tenant".into(),
        fingerprint: Fingerprint::of(&json!({"card": "4111-secret-card"})),
        lease: Duration::from_secs(30),
        orphans: OrphanPolicy::MarkUnknown,
        arguments: Some(ARGUMENTS.into()),
        contract: None,
    }
}

async fn acquire(store: &dyn Store, req: &ClaimRequest) -> u64 {
    match store.claim(req).await.expect("claim") {
        Claim::Acquired { fence, .. } => fence,
        other => panic!("expected to acquire, got {other:?}"),
    }
}

#[tokio::test]
async fn limits_refuse_what_a_store_without_them_would_record() {
    // The memory store's backend has no limits of its own: they are the layer's.
    let unlimited = MemoryStore::new().into_inner();
    let long = Outcome::Success(format!("\"{}\"", "x".repeat(64)));
    let k = key("unlimited");
    let fence = acquire(&unlimited, &request(&k)).await;
    unlimited
        .complete(&k, fence, &long, TTL)
        .await
        .expect("without the layer, any outcome is recorded");

    let limited = Limits::new(16).layer(MemoryStore::new().into_inner());
    let k = key("limited");
    let fence = acquire(&limited, &request(&k)).await;
    match limited.complete(&k, fence, &long, TTL).await {
        Err(StoreError::TooLarge { bytes, limit }) => assert_eq!((bytes, limit), (66, 16)),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    let record = limited.get(&k).await.expect("get").expect("still held");
    assert!(
        matches!(record.state, RecordState::InProgress { .. }),
        "a refusal changes nothing"
    );
    // An operator's outcome must also be JSON a replay can read back.
    limited
        .mark_unknown(&k, fence, "timed out")
        .await
        .expect("mark unknown");
    let text = Outcome::Success("receipt 42".into());
    assert!(matches!(
        limited.resolve(&k, &text, TTL).await,
        Err(StoreError::InvalidOutcome { .. })
    ));
    assert!(matches!(
        limited.settle_unknown(&k, fence, Some(&text), TTL).await,
        Err(StoreError::InvalidOutcome { .. })
    ));
    limited
        .settle_unknown(&k, fence, Some(&Outcome::Success("1".into())), TTL)
        .await
        .expect("a small JSON outcome settles it");

    // Arguments are bounded only when asked, and a refused claim claims nothing.
    let bounded = Limits::default()
        .with_max_argument_bytes(8)
        .layer(MemoryStore::new().into_inner());
    let k = key("arguments");
    match bounded.claim(&request(&k)).await {
        Err(StoreError::TooLarge { bytes, limit }) => {
            assert_eq!((bytes, limit), (ARGUMENTS.len(), 8))
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert_eq!(bounded.get(&k).await.expect("get"), None);
}

#[tokio::test]
async fn every_store_idem_ships_is_behind_the_limits() {
    let store = MemoryStore::new().with_max_outcome_bytes(16);
    assert_eq!(store.get_layer().max_outcome_bytes(), 16);
    let k = key("shipped");
    let fence = acquire(&store, &request(&k)).await;
    let long = Outcome::Success(format!("\"{}\"", "x".repeat(64)));
    assert!(matches!(
        store.complete(&k, fence, &long, TTL).await,
        Err(StoreError::TooLarge { limit: 16, .. })
    ));
}

/// What a subscriber saw: for each event, its fields and those of the span it is in.
#[derive(Clone, Default)]
struct Captured {
    spans: Arc<Mutex<HashMap<u64, HashMap<String, String>>>>,
    events: Arc<Mutex<Vec<HashMap<String, String>>>>,
}

#[derive(Default)]
struct Fields(HashMap<String, String>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> tracing_subscriber::Layer<S> for Captured {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        fields
            .0
            .insert("span".into(), attrs.metadata().name().to_owned());
        self.spans.lock().unwrap().insert(id.into_u64(), fields.0);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        let mut fields = Fields::default();
        values.record(&mut fields);
        if let Some(span) = self.spans.lock().unwrap().get_mut(&id.into_u64()) {
            span.extend(fields.0);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        if let Some(span) = ctx.event_span(event) {
            let spans = self.spans.lock().unwrap();
            fields.0.extend(
                spans
                    .get(&span.id().into_u64())
                    .cloned()
                    .unwrap_or_default(),
            );
        }
        self.events.lock().unwrap().push(fields.0);
    }
}

#[test]
fn the_trace_layer_records_each_operation_and_a_short_key_never_a_value() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::registry().with(captured.clone());
    let k = key("traced");
    tracing::subscriber::with_default(subscriber, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let store = Trace.layer(MemoryStore::new());
            let fence = acquire(&store, &request(&k)).await;
            let outcome = Outcome::Success(OUTPUT.into());
            store
                .complete(&k, fence, &outcome, TTL)
                .await
                .expect("complete");
            let stale = store.complete(&k, fence - 1, &outcome, TTL).await;
            assert!(matches!(stale, Err(StoreError::Fenced { .. })));
            store.get(&k).await.expect("get");
            store.list(ListFilter::default()).await.expect("list");
        });
    });

    let events = captured.events.lock().unwrap().clone();
    let seen = |name: &str| -> Vec<Option<&str>> {
        events
            .iter()
            .map(|e| e.get(name).map(String::as_str))
            .collect()
    };
    assert_eq!(
        seen("op"),
        ["claim", "complete", "complete", "get", "list"].map(Some),
        "one event per operation, in its span: {events:#?}"
    );
    assert_eq!(
        seen("outcome"),
        ["ok", "ok", "fenced", "ok", "ok"].map(Some)
    );
    let short = &k.as_str()[..12];
    assert_eq!(
        seen("key"),
        [Some(short), Some(short), Some(short), Some(short), None],
        "the key, as its first twelve digits, for the operations about one"
    );
    assert!(
        events
            .iter()
            .all(|e| e.get("span").map(String::as_str) == Some("idem.store"))
    );
    assert!(events.iter().all(|e| e.contains_key("elapsed_us")));
    for value in events.iter().flat_map(|e| e.values()) {
        for secret in ["secret-card", "secret-receipt", k.as_str()] {
            assert!(!value.contains(secret), "{value:?} shows {secret:?}");
        }
    }
}
