//! Multi-step tools against an API that keeps Stripe's idempotency rules: each journaled step
//! sends its own stable key, so every intended effect happens exactly once even when the
//! first answer of every write is lost or comes back as a 502; and a body that sends a second,
//! different request under a key it already used is stopped before it leaves.
#![cfg(feature = "reqwest")]

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use idem::agent::http::IdempotencyKeyMiddleware;
use idem::prelude::*;
use idem::{MemoryStore, ToolDef, ToolPolicy};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use serde_json::{Value, json};
use support::dispatcher::with_tool;
use support::stripe::{self, Api, Fault};

/// A client as the README advises: the middleware puts the key on every request. It stops
/// waiting after a short while, as a tool must.
fn client() -> ClientWithMiddleware {
    let inner = reqwest::Client::builder()
        .timeout(Duration::from_millis(400))
        .build()
        .unwrap();
    ClientBuilder::new(inner)
        .with(IdempotencyKeyMiddleware::new())
        .build()
}

/// POST `body` to `url`: the answer, or how it failed (a lost or 5xx answer may have been
/// applied; a 4xx is the API's word).
async fn post(client: &ClientWithMiddleware, url: String, body: Value) -> Result<Value, ToolError> {
    let response = client
        .post(url)
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| ToolError::ambiguous(format!("no answer: {e}")))?;
    let status = response.status();
    let answer: Value = response
        .json()
        .await
        .map_err(|e| ToolError::ambiguous(format!("no answer: {e}")))?;
    match status.as_u16() {
        200..=299 => Ok(answer),
        500..=599 => Err(ToolError::ambiguous(format!("{status}: {answer}"))),
        _ => Err(ToolError::terminal(format!("{status}: {answer}"))),
    }
}

/// Book a trip: reserve a seat, then charge for it, each a journaled step, as a new user
/// writes it from the README.
fn book_trip(base: String) -> ToolDef {
    ToolDef::builder("book_trip", ToolClass::IdempotentWrite)
        .description("Reserve a seat and charge for it.")
        .input_schema(json!({"type": "object", "properties": {"trip": {"type": "string"}}}))
        .policy(ToolPolicy {
            max_attempts: 3,
            backoff: Duration::from_millis(10),
            ..ToolPolicy::default()
        })
        .handler(move |ctx: ToolContext, args: Value| {
            let base = base.clone();
            async move {
                let client = client();
                let trip = args["trip"].clone();
                let seat: Value = ctx
                    .step("reserve", || {
                        post(
                            &client,
                            format!("{base}/v1/reservations"),
                            json!({"trip": trip}),
                        )
                    })
                    .await?;
                let charge: Value = ctx
                    .step("charge", || {
                        post(
                            &client,
                            format!("{base}/v1/charges"),
                            json!({"amount": 4200}),
                        )
                    })
                    .await?;
                Ok(json!({"seat": seat["id"], "charge": charge["id"]}))
            }
        })
        .build()
        .unwrap()
}

async fn booked(fault: Fault) -> (Arc<Api>, Result<Dispatched, DispatchError>) {
    let (api, base) = stripe::start(fault).await;
    let d = with_tool(book_trip(base), Arc::new(MemoryStore::new()));
    let call = ToolCall::new("book_trip", json!({"trip": "LIS-OPO"})).with_call_id("call_1");
    let first = d.dispatch(&call, &RunContext::new("t")).await;
    (api, first)
}

#[tokio::test]
async fn every_step_happens_once_when_the_first_answers_are_lost() {
    let (api, booked) = booked(Fault::LoseFirstAnswer).await;
    let done = booked.expect("both steps done, through the lost answers");
    assert_eq!(api.applied("/v1/reservations").len(), 1, "one seat");
    assert_eq!(api.applied("/v1/charges").len(), 1, "one charge");
    assert_eq!(api.refusals(), 0, "no key was used for two requests");
    assert!(done.output["charge"].is_string(), "{}", done.output);
}

#[tokio::test]
async fn every_step_happens_once_through_502s_after_commit() {
    let (api, booked) = booked(Fault::BadGatewayFirst).await;
    booked.expect("both steps done, through the 502s");
    assert_eq!(api.applied("/v1/reservations").len(), 1);
    assert_eq!(api.applied("/v1/charges").len(), 1);
    assert_eq!(api.refusals(), 0);
}

#[tokio::test]
async fn each_step_has_its_own_stable_key_and_the_context_names_it() {
    let ctx = ToolContext::detached("book_trip", ToolClass::IdempotentWrite, "idem-call-key");
    let reserve = ctx.step_key("reserve");
    assert_eq!(
        reserve,
        ctx.step_key("reserve"),
        "the same on every attempt"
    );
    assert_ne!(reserve, ctx.step_key("charge"));
    assert_ne!(reserve.as_str(), ctx.idempotency_key());
    // Inside a step, the current downstream key is the step's.
    let inside = ctx
        .step("reserve", || async { Ok(idem::agent::http::current_key()) })
        .await
        .unwrap();
    assert_eq!(inside, None, "no call runs here: the task has no call key");
    let seen = ctx
        .step("charge", || async { Ok(ToolContext::current_step_key()) })
        .await
        .unwrap();
    assert_eq!(seen, Some(ctx.step_key("charge")));
}

#[tokio::test]
async fn a_second_different_request_under_one_key_is_stopped_before_it_leaves() {
    let (api, base) = stripe::start(Fault::None).await;
    // Two writes outside any step: the second would reuse the call's key.
    let tool = ToolDef::builder("two_writes", ToolClass::IdempotentWrite)
        .description("Two writes, no steps.")
        .input_schema(json!({"type": "object"}))
        .handler(move |_: ToolContext, _: Value| {
            let base = base.clone();
            async move {
                let client = client();
                post(&client, format!("{base}/v1/reservations"), json!({"n": 1})).await?;
                // The same request again is a retry, and goes.
                post(&client, format!("{base}/v1/reservations"), json!({"n": 1})).await?;
                post(&client, format!("{base}/v1/charges"), json!({"n": 2})).await
            }
        })
        .build()
        .unwrap();
    let d = with_tool(tool, Arc::new(MemoryStore::new()));
    let call = ToolCall::new("two_writes", json!({})).with_call_id("call_2");
    let err = d.dispatch(&call, &RunContext::new("t")).await.unwrap_err();
    let text = err.to_string();
    assert!(text.contains("ctx.step"), "the error names the fix: {text}");
    assert_eq!(api.applied("/v1/reservations").len(), 1);
    assert_eq!(api.applied("/v1/charges").len(), 0, "never sent");
    assert_eq!(api.refusals(), 0, "stopped before the API saw it");
}

/// GET `url` through the same client: a read.
async fn get(client: &ClientWithMiddleware, url: String) -> Result<Value, ToolError> {
    let response = client
        .get(url)
        .send()
        .await
        .map_err(|e| ToolError::retryable(format!("no answer: {e}")))?;
    response
        .json()
        .await
        .map_err(|e| ToolError::retryable(format!("no answer: {e}")))
}

#[tokio::test]
async fn reads_before_a_write_outside_steps_go_and_carry_no_key() {
    let (api, base) = stripe::start(Fault::None).await;
    // Look the customer and the price up, then charge: the common shape of a write tool.
    let tool = ToolDef::builder("charge_customer", ToolClass::IdempotentWrite)
        .description("Charge a customer the price of a plan.")
        .input_schema(json!({"type": "object"}))
        .handler(move |_: ToolContext, _: Value| {
            let base = base.clone();
            async move {
                let client = client();
                get(&client, format!("{base}/v1/customers/cus_1")).await?;
                get(&client, format!("{base}/v1/prices/price_1")).await?;
                post(
                    &client,
                    format!("{base}/v1/charges"),
                    json!({"amount": 900}),
                )
                .await
            }
        })
        .build()
        .unwrap();
    let d = with_tool(tool, Arc::new(MemoryStore::new()));
    let call = ToolCall::new("charge_customer", json!({})).with_call_id("call_3");
    let done = d
        .dispatch(&call, &RunContext::new("t"))
        .await
        .expect("reads are not second requests under the key");
    assert_eq!(api.applied("/v1/charges").len(), 1);
    assert_eq!(api.keys_sent("GET", "/v1/customers/cus_1"), vec![None]);
    assert_eq!(api.keys_sent("GET", "/v1/prices/price_1"), vec![None]);
    let key = done.key.expect("a write has a key").as_str().to_owned();
    assert_eq!(api.keys_sent("POST", "/v1/charges"), vec![Some(key)]);
}

#[tokio::test]
async fn a_call_dispatched_inside_a_step_sends_its_own_key() {
    let (api, base) = stripe::start(Fault::None).await;
    let store: Arc<dyn idem::Store> = Arc::new(MemoryStore::new());
    let charge = ToolDef::builder("charge", ToolClass::IdempotentWrite)
        .description("Charge.")
        .input_schema(json!({"type": "object"}))
        .handler(move |_: ToolContext, _: Value| {
            let base = base.clone();
            async move {
                post(
                    &client(),
                    format!("{base}/v1/charges"),
                    json!({"amount": 1}),
                )
                .await
            }
        })
        .build()
        .unwrap();
    let inner = with_tool(charge, store.clone());
    let checkout = ToolDef::builder("checkout", ToolClass::IdempotentWrite)
        .description("Check out through another tool.")
        .input_schema(json!({"type": "object"}))
        .handler(move |ctx: ToolContext, _: Value| {
            let inner = inner.clone();
            async move {
                let key: String = ctx
                    .step("pay", || async {
                        let call = ToolCall::new("charge", json!({})).with_call_id("inner_1");
                        let done = inner
                            .dispatch(&call, &RunContext::new("t"))
                            .await
                            .map_err(|e| ToolError::terminal(e.to_string()))?;
                        Ok(done.key.expect("keyed").as_str().to_owned())
                    })
                    .await?;
                Ok(json!({"inner_key": key, "outer_step": ctx.step_key("pay").as_str()}))
            }
        })
        .build()
        .unwrap();
    let d = with_tool(checkout, store);
    let call = ToolCall::new("checkout", json!({})).with_call_id("outer_1");
    let done = d.dispatch(&call, &RunContext::new("t")).await.unwrap();
    let inner_key = done.output["inner_key"].as_str().unwrap().to_owned();
    assert_ne!(done.output["outer_step"], done.output["inner_key"]);
    assert_eq!(
        api.keys_sent("POST", "/v1/charges"),
        vec![Some(inner_key)],
        "the inner call's request carries the inner call's key, not the outer step's"
    );
}

#[tokio::test]
async fn two_different_requests_inside_one_step_are_stopped_naming_the_step() {
    let (api, base) = stripe::start(Fault::None).await;
    let tool = ToolDef::builder("two_in_a_step", ToolClass::IdempotentWrite)
        .description("Two writes in one step.")
        .input_schema(json!({"type": "object"}))
        .handler(move |ctx: ToolContext, _: Value| {
            let base = base.clone();
            async move {
                let client = client();
                ctx.step("pay", || async {
                    post(&client, format!("{base}/v1/charges"), json!({"n": 1})).await?;
                    post(&client, format!("{base}/v1/transfers"), json!({"n": 2})).await
                })
                .await
            }
        })
        .build()
        .unwrap();
    let d = with_tool(tool, Arc::new(MemoryStore::new()));
    let call = ToolCall::new("two_in_a_step", json!({})).with_call_id("call_4");
    let text = d
        .dispatch(&call, &RunContext::new("t"))
        .await
        .unwrap_err()
        .to_string();
    assert!(text.contains("step"), "{text}");
    assert!(text.contains("a step of its own"), "the fix: {text}");
    assert_eq!(api.applied("/v1/charges").len(), 1);
    assert_eq!(api.applied("/v1/transfers").len(), 0, "never sent");
}
