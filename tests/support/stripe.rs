//! A local HTTP API that keeps Stripe's idempotency rules, and can lose answers: what a
//! multi-step tool meets in production. A write under a new `Idempotency-Key` is applied (a
//! line in the ledger) and its answer kept; the same key with the same request gets that
//! answer again, applied once; the same key with another method, path or body is refused
//! (`400`, `idempotency_key_in_use`) and applies nothing. A write without a key is applied
//! every time. A `GET` is a read: it applies nothing, and the API ignores a key on it (as
//! Stripe does). Faults, after the write is applied: the first answer of each key lost (the
//! connection hangs until the client gives up), or answered `502` (a gateway in front).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use serde_json::{Value, json};

/// What goes wrong after a write is applied, the first time each key is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Answer at once.
    None,
    /// Never answer the first request of each key (the client times out).
    LoseFirstAnswer,
    /// Answer the first request of each key with 502 Bad Gateway.
    BadGatewayFirst,
}

/// The API's state: the ledger of applied writes and the kept answers.
pub struct Api {
    fault: Fault,
    /// Every applied write: (path, body).
    ledger: Mutex<Vec<(String, String)>>,
    /// Per key: the request it was first used with, and the answer kept.
    keys: Mutex<HashMap<String, (String, Value)>>,
    /// Every refusal for a key used with another request.
    refused: Mutex<usize>,
    /// Every request seen: method, path and the key it carried.
    seen: Mutex<Vec<(String, String, Option<String>)>>,
}

impl Api {
    /// The writes applied to `path`.
    pub fn applied(&self, path: &str) -> Vec<String> {
        let ledger = self.ledger.lock().unwrap();
        ledger
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, body)| body.clone())
            .collect()
    }

    /// How many requests were refused for reusing a key.
    pub fn refusals(&self) -> usize {
        *self.refused.lock().unwrap()
    }

    /// The key each request to `path` carried, in order (`None`: no key).
    pub fn keys_sent(&self, method: &str, path: &str) -> Vec<Option<String>> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter(|(m, p, _)| m == method && p == path)
            .map(|(_, _, key)| key.clone())
            .collect()
    }
}

/// Start the API on a free loopback port: its state and base URL.
pub async fn start(fault: Fault) -> (Arc<Api>, String) {
    let api = Arc::new(Api {
        fault,
        ledger: Mutex::default(),
        keys: Mutex::default(),
        refused: Mutex::default(),
        seen: Mutex::default(),
    });
    let router = axum::Router::new().fallback(write).with_state(api.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    (api, format!("http://{addr}"))
}

async fn write(
    State(api): State<Arc<Api>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, axum::Json<Value>) {
    let path = uri.path().to_owned();
    let body = String::from_utf8_lossy(&body).into_owned();
    let request = format!("{method} {path} {body}");
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    api.seen
        .lock()
        .unwrap()
        .push((method.to_string(), path.clone(), key.clone()));
    if method == Method::GET {
        return (
            StatusCode::OK,
            axum::Json(json!({"id": path, "read": true})),
        );
    }
    let apply = |api: &Api| {
        let mut ledger = api.ledger.lock().unwrap();
        ledger.push((path.clone(), body.clone()));
        json!({"id": format!("{}_{}", path.trim_start_matches('/').replace('/', "_"), ledger.len())})
    };
    let Some(key) = key else {
        return (StatusCode::OK, axum::Json(apply(&api)));
    };
    let first = {
        let mut keys = api.keys.lock().unwrap();
        match keys.get(&key) {
            Some((seen, answer)) if *seen == request => {
                return (StatusCode::OK, axum::Json(answer.clone()));
            }
            Some(_) => {
                *api.refused.lock().unwrap() += 1;
                return (
                    StatusCode::BAD_REQUEST,
                    axum::Json(json!({"error": {
                        "type": "idempotency_error",
                        "code": "idempotency_key_in_use",
                        "message": "Keys for idempotent requests can only be used with the same parameters they were first used with."
                    }})),
                );
            }
            None => {
                let answer = apply(&api);
                keys.insert(key, (request, answer.clone()));
                answer
            }
        }
    };
    match api.fault {
        Fault::None => (StatusCode::OK, axum::Json(first)),
        Fault::LoseFirstAnswer => std::future::pending().await,
        Fault::BadGatewayFirst => (
            StatusCode::BAD_GATEWAY,
            axum::Json(json!({"error": "bad gateway"})),
        ),
    }
}
