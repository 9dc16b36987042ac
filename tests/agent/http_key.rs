//! The downstream key over HTTP (feature `reqwest`): a local payment API that dedupes on
//! `Idempotency-Key`, and tools that call it with reqwest. A timeout after the API applied
//! the charge, retried under `idempotent_write`'s policy, charges once; a worker that takes
//! over a crashed one's call sends the same key.
#![cfg(feature = "reqwest")]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use idem::agent::http::{IdempotencyKeyMiddleware, KeyedRequest, current_key};
use idem::prelude::*;
use idem::{Store, ToolDef, ToolPolicy, store::ManualClock};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use serde_json::{Value, json};

/// A payment API: a charge per new `Idempotency-Key`, the same charge for a key it has seen.
/// The first request it ever gets is answered late (after `slow_first`), as a provider
/// that applied the charge but whose answer the client stopped waiting for.
#[derive(Default)]
struct Payments {
    charges: AtomicUsize,
    /// The header of every request, in order (`None`: sent without one).
    seen: Mutex<Vec<Option<String>>>,
    by_key: Mutex<HashMap<String, usize>>,
    slow_first: Mutex<Option<Duration>>,
}

async fn charge(State(api): State<Arc<Payments>>, headers: HeaderMap) -> axum::Json<Value> {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    api.seen.lock().unwrap().push(key.clone());
    let id = match &key {
        Some(key) => *api
            .by_key
            .lock()
            .unwrap()
            .entry(key.clone())
            .or_insert_with(|| api.charges.fetch_add(1, Ordering::SeqCst) + 1),
        None => api.charges.fetch_add(1, Ordering::SeqCst) + 1,
    };
    let late = api.slow_first.lock().unwrap().take();
    if let Some(late) = late {
        tokio::time::sleep(late).await;
    }
    axum::Json(json!({ "charge": id }))
}

/// The API on a free port, and its base URL.
async fn start(api: Arc<Payments>) -> String {
    let router = axum::Router::new()
        .route("/charges", axum::routing::post(charge))
        .with_state(api);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{addr}")
}

fn client() -> ClientWithMiddleware {
    ClientBuilder::new(reqwest::Client::new())
        .with(IdempotencyKeyMiddleware::new())
        .build()
}

/// `charge_card`: an idempotent write that posts a charge, giving up after 200 ms (an
/// ambiguous outcome: the charge may have been applied).
fn charge_card(base: &str, lease_secs: u64) -> ToolDef {
    let url = format!("{base}/charges");
    let http = client();
    ToolDef::builder("charge_card", ToolClass::IdempotentWrite)
        .description("Charge a card.")
        .input_schema(json!({"type": "object", "properties": {"cents": {"type": "integer"}}}))
        .policy(ToolPolicy {
            lease: Duration::from_secs(lease_secs),
            backoff: Duration::from_millis(10),
            ..ToolPolicy::default()
        })
        .handler(move |_: ToolContext, args: Value| {
            let (http, url) = (http.clone(), url.clone());
            async move {
                let response = http
                    .post(&url)
                    .timeout(Duration::from_millis(200))
                    .json(&args)
                    .send()
                    .await
                    .map_err(|e| ToolError::ambiguous(format!("the payment API: {e}")))?;
                response
                    .json::<Value>()
                    .await
                    .map_err(|e| ToolError::ambiguous(format!("the payment API's answer: {e}")))
            }
        })
        .build()
        .unwrap()
}

fn dispatcher(tool: ToolDef, store: Arc<dyn Store>) -> Dispatcher {
    Dispatcher::new(Registry::builder().add(tool).build().unwrap(), store).unwrap()
}

#[tokio::test]
async fn a_timeout_after_the_charge_is_retried_with_the_same_key_and_charges_once() {
    let api = Arc::new(Payments::default());
    *api.slow_first.lock().unwrap() = Some(Duration::from_secs(2));
    let base = start(api.clone()).await;
    let d = dispatcher(charge_card(&base, 30), Arc::new(MemoryStore::new()));
    let call = ToolCall::new("charge_card", json!({"cents": 1250})).with_call_id("call_pay");
    let done = d.dispatch(&call, &RunContext::new("tenant")).await.unwrap();
    assert_eq!(done.output, json!({"charge": 1}));
    assert!(done.attempts >= 2, "the first attempt timed out: {done:?}");
    assert_eq!(api.charges.load(Ordering::SeqCst), 1, "charged once");
    let seen = api.seen.lock().unwrap().clone();
    let key = done.key.as_ref().map(|k| k.as_str().to_owned());
    assert_eq!(seen.len(), done.attempts as usize, "{seen:?}");
    assert!(
        seen.iter().all(|k| *k == key),
        "every attempt sent the call's key: {seen:?}"
    );
}

#[tokio::test]
async fn a_worker_taking_over_sends_the_crashed_workers_key() {
    let api = Arc::new(Payments::default());
    // The first worker's request is applied, then its worker dies waiting for the answer.
    *api.slow_first.lock().unwrap() = Some(Duration::from_secs(3600));
    let base = start(api.clone()).await;
    let clock = Arc::new(ManualClock::new());
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new().with_clock(clock.clone()));
    let first = dispatcher(charge_card(&base, 1), store.clone());
    let call = ToolCall::new("charge_card", json!({"cents": 990})).with_call_id("call_crash");
    let run = RunContext::new("tenant");
    {
        // Abandoned as a crash would abandon it, once the API has applied the charge (its
        // answer would come an hour later).
        let mut crashed = Box::pin(first.dispatch(&call, &run));
        tokio::select! {
            res = &mut crashed => panic!("the first worker should hang, got {res:?}"),
            () = async {
                while api.seen.lock().unwrap().is_empty() {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            } => {}
        }
        std::mem::forget(crashed);
    }
    clock.advance(Duration::from_secs(5)); // the first worker's lease has lapsed
    let second = dispatcher(charge_card(&base, 1), store);
    let done = second.dispatch(&call, &run).await.unwrap();
    assert_eq!(
        done.output,
        json!({"charge": 1}),
        "the API's answer for the key it had"
    );
    assert_eq!(api.charges.load(Ordering::SeqCst), 1, "charged once");
    let seen = api.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0], seen[1], "the take-over sent the same key");
    assert_eq!(seen[1], done.key.map(|k| k.as_str().to_owned()));
}

#[tokio::test]
async fn the_key_is_sent_only_from_a_body_and_never_replaces_a_header_set_by_hand() {
    let api = Arc::new(Payments::default());
    let base = start(api.clone()).await;
    let url = format!("{base}/charges");
    // Outside a tool body there is no call, so no key.
    assert!(current_key().is_none());
    client().post(&url).send().await.unwrap();
    // A header set by hand stays; the extension sends the context's key under any name.
    client()
        .post(&url)
        .header("Idempotency-Key", "chosen-by-hand")
        .send()
        .await
        .unwrap();
    let ctx = ToolContext::detached("charge_card", ToolClass::IdempotentWrite, "idem-k1");
    reqwest::Client::new()
        .post(&url)
        .idempotency_key(&ctx)
        .send()
        .await
        .unwrap();
    let seen = api.seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![None, Some("chosen-by-hand".into()), Some("idem-k1".into())]
    );
    assert!(IdempotencyKeyMiddleware::with_header("X-Idempotency-Key").is_ok());
    let bad = IdempotencyKeyMiddleware::with_header("no spaces").unwrap_err();
    assert!(bad.to_string().contains("`no spaces`"), "{bad}");
}
