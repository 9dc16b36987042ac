//! Compensation: a three-step booking whose third step fails for good has its two completed
//! steps undone in reverse, each once, and is recorded as compensated naming what was undone;
//! a compensation that fails leaves the record Unknown for a person, listed and in the run's
//! account, never silent.

use std::sync::Arc;

use idem::prelude::*;
use idem::record::{RecordState, StateKind};
use idem::store::ListFilter;
use idem::tool::Undo;
use serde_json::{Value, json};

use crate::authorize::shop;
use crate::on_stores;
use crate::world::{fresh_tenant, world};

/// Book one step of a trip with the agency, under the step's own key.
pub fn book(tenant: &str, what: &str, trip: &str, key: &str) -> String {
    world(tenant).apply(&format!("book {what} {trip}"), key);
    format!("{what}-{trip}")
}

/// Undo a booked step: cancel it with the agency, under the compensation's own key.
pub async fn cancel_step(ctx: ToolContext, undo: Undo) -> Result<(), ToolError> {
    let booking: String = undo.output_as()?;
    let mut w = world(ctx.tenant());
    if w.refuse_cancel.contains(&booking) {
        return Err(ToolError::terminal(format!(
            "the agency refuses to cancel {booking}"
        )));
    }
    w.apply(&format!("cancel {booking}"), ctx.downstream_key().as_str());
    Ok(())
}

/// Book a flight, a hotel and a car for a trip, or none of them.
#[tool(class = "idempotent_write", compensate = cancel_step, backoff_ms = 1)]
async fn book_trip(ctx: &ToolContext, trip: String, with_car: bool) -> Result<Value, ToolError> {
    let tenant = ctx.tenant().to_owned();
    let flight: String = ctx
        .step("flight", || async {
            Ok(book(
                &tenant,
                "flight",
                &trip,
                ctx.downstream_key().as_str(),
            ))
        })
        .await?;
    let hotel: String = ctx
        .step("hotel", || async {
            Ok(book(&tenant, "hotel", &trip, ctx.downstream_key().as_str()))
        })
        .await?;
    let car: String = ctx
        .step("car", || async {
            match with_car {
                true => Err(ToolError::not_applied("no car is available on those dates")),
                false => Ok("no car".to_owned()),
            }
        })
        .await?;
    Ok(json!({"flight": flight, "hotel": hotel, "car": car}))
}

async fn a_booking_whose_third_step_fails_is_undone_in_reverse_once(store: Arc<dyn idem::Store>) {
    let tenant = fresh_tenant("compensate");
    let d = shop(store.clone()).with_run_accounts(std::time::Duration::from_secs(3600));
    let run = RunContext::new(tenant.as_str()).with_run("run-trip", 1);
    let call = ToolCall::new("book_trip", json!({"trip": "lisbon", "with_car": true}))
        .with_call_id("call_trip");
    let failed = d.dispatch(&call, &run).await.unwrap_err();
    let DispatchError::ToolFailed {
        error,
        deduplicated: false,
        ..
    } = &failed
    else {
        panic!("a compensated call fails, got {failed:?}");
    };
    assert_eq!(
        error.message(),
        "no car is available on those dates; it was compensated: the steps it had completed were undone (`hotel`, `flight`), so nothing of it remains applied"
    );
    let ledger = world(&tenant).applied();
    assert_eq!(
        ledger,
        [
            "book flight lisbon",
            "book hotel lisbon",
            "cancel hotel-lisbon",
            "cancel flight-lisbon"
        ],
        "undone in reverse, each once"
    );

    // Recorded: the same call replays the compensated failure, undoing nothing again.
    let again = d.dispatch(&call, &run).await.unwrap_err();
    assert!(matches!(
        again,
        DispatchError::ToolFailed {
            deduplicated: true,
            ..
        }
    ));
    assert_eq!(world(&tenant).ledger.len(), 4);
    let key = d.record_key(&call, &run).unwrap().unwrap();
    let record = store.get(&key).await.unwrap().unwrap();
    assert!(matches!(record.state, RecordState::Completed { .. }));
    assert_eq!(
        idem::dispatch::undone_steps(&record.steps),
        ["hotel", "flight"]
    );

    let account = d.run_account(&tenant, "run-trip").await.unwrap();
    assert_eq!(account.calls.len(), 1);
    match &account.calls[0].outcome {
        idem::dispatch::CallOutcome::Compensated { undone, .. } => {
            assert_eq!(undone, &["hotel", "flight"])
        }
        other => panic!("the account says compensated, got {other:?}"),
    }

    // A trip without a car books all three, and nothing is undone.
    let whole = ToolCall::new("book_trip", json!({"trip": "porto", "with_car": false}))
        .with_call_id("call_trip2");
    d.dispatch(&whole, &run).await.expect("booked");
    assert!(world(&tenant).effects("cancel").len() == 2);
}

on_stores!(a_booking_whose_third_step_fails_is_undone_in_reverse_once =>
    sqlite_a_booking_whose_third_step_fails_is_undone_in_reverse_once,
    postgres_a_booking_whose_third_step_fails_is_undone_in_reverse_once);

async fn a_failed_compensation_is_left_unknown_for_a_person(store: Arc<dyn idem::Store>) {
    let tenant = fresh_tenant("compensate_fails");
    world(&tenant).refuse_cancel.push("flight-oslo".into());
    let d = shop(store.clone()).with_run_accounts(std::time::Duration::from_secs(3600));
    let run = RunContext::new(tenant.as_str()).with_run("run-stuck", 1);
    let call = ToolCall::new("book_trip", json!({"trip": "oslo", "with_car": true}))
        .with_call_id("call_stuck");
    let DispatchError::OutcomeUnknown {
        reason,
        retry_after: None,
        ..
    } = d.dispatch(&call, &run).await.unwrap_err()
    else {
        panic!("a failed compensation leaves the call Unknown, for a person");
    };
    assert!(
        reason.starts_with("undoing step `flight` of a call that failed for good did not succeed (terminal: the agency refuses to cancel flight-oslo); undone before it: `hotel`."),
        "{reason}"
    );
    let ledger = world(&tenant).applied();
    assert_eq!(
        ledger,
        ["book flight oslo", "book hotel oslo", "cancel hotel-oslo"]
    );

    // Listed for a person, and a later call does not run anything again.
    let unknown = store
        .list(ListFilter {
            state: Some(StateKind::Unknown),
            tenant: Some(tenant.clone()),
            ..ListFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(unknown.len(), 1);
    assert_eq!(unknown[0].tool, "book_trip");
    let again = d.dispatch(&call, &run).await.unwrap_err();
    assert_eq!(again.code(), "outcome_unknown");
    assert_eq!(world(&tenant).ledger.len(), 3);

    let account = d.run_account(&tenant, "run-stuck").await.unwrap();
    let needing: Vec<_> = account.needing_a_person().collect();
    assert_eq!(needing.len(), 1, "{account}");
    assert_eq!(needing[0].tool, "book_trip");
}

on_stores!(a_failed_compensation_is_left_unknown_for_a_person =>
    sqlite_a_failed_compensation_is_left_unknown_for_a_person,
    postgres_a_failed_compensation_is_left_unknown_for_a_person);

/// Cancel a booked step; while the tenant's world says so, never answer after it (once).
async fn cancel_or_hang(ctx: ToolContext, undo: Undo) -> Result<(), ToolError> {
    let hang = std::mem::take(&mut world(ctx.tenant()).hang_after_cancel);
    cancel_step(ctx, undo).await?;
    if hang {
        std::future::pending::<()>().await;
    }
    Ok(())
}

/// Book a flight and a hotel, then a car, once (no step runs twice).
#[tool(class = "non_idempotent_write", compensate = cancel_or_hang, lease_secs = 1)]
async fn once_trip(ctx: &ToolContext, trip: String, with_car: bool) -> Result<Value, ToolError> {
    let tenant = ctx.tenant().to_owned();
    for what in ["flight", "hotel"] {
        let _: String = ctx
            .step(what, || async {
                Ok(book(&tenant, what, &trip, ctx.downstream_key().as_str()))
            })
            .await?;
    }
    match with_car {
        true => Err(ToolError::not_applied("no car is available on those dates")),
        false => Ok(json!("booked")),
    }
}

async fn a_non_idempotent_booking_stopped_mid_compensation_is_resumed_by_the_next_call(
    store: Arc<dyn idem::Store>,
) {
    let tenant = fresh_tenant("compensate_resume");
    let d = shop(store.clone());
    let run = RunContext::new(tenant.as_str());
    let call = ToolCall::new("once_trip", json!({"trip": "nice", "with_car": true}))
        .with_call_id("call_resume");
    // The worker stops while undoing the hotel, after the agency cancelled it: the dispatch
    // is dropped (as a worker that died would leave it), its record held under a lease.
    world(&tenant).hang_after_cancel = true;
    let stopped = tokio::time::timeout(
        std::time::Duration::from_millis(500),
        d.dispatch(&call, &run),
    )
    .await;
    assert!(stopped.is_err(), "the compensation hangs: {stopped:?}");
    assert_eq!(world(&tenant).effects("cancel hotel-nice").len(), 1);
    assert_eq!(world(&tenant).effects("cancel flight-nice").len(), 0);

    // The next call, once the lease lapsed, resumes it: never the body, each undo once.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let resumed = d.dispatch(&call, &run).await.unwrap_err();
    assert!(
        resumed
            .to_string()
            .contains("the steps it had completed were undone (`hotel`, `flight`)"),
        "{resumed}"
    );
    let ledger = world(&tenant).applied();
    assert_eq!(
        ledger,
        [
            "book flight nice",
            "book hotel nice",
            "cancel hotel-nice",
            "cancel flight-nice"
        ]
    );

    // An orphan of the same tool that was not compensating (its worker died in the body)
    // is not run again: it turns Unknown, as any non-idempotent orphan.
    let held = ToolCall::new("once_trip", json!({"trip": "lyon", "with_car": false}))
        .with_call_id("call_orphan");
    let key = d.record_key(&held, &run).unwrap().unwrap();
    let request = idem::store::ClaimRequest {
        key: key.clone(),
        tool: "once_trip".into(),
        tenant: tenant.clone(),
        fingerprint: store.get(&key).await.unwrap().map_or_else(
            || {
                let canonical =
                    idem::key::canonical_json(&json!({"trip": "lyon", "with_car": false}));
                idem::key::Fingerprint::of_canonical(&canonical)
            },
            |r| r.fingerprint,
        ),
        lease: std::time::Duration::from_millis(200),
        orphans: idem::tool::OrphanPolicy::TakeOver,
        arguments: Some(idem::key::canonical_json(
            &json!({"trip": "lyon", "with_car": false}),
        )),
        contract: None,
    };
    assert!(matches!(
        store.claim(&request).await.unwrap(),
        idem::store::Claim::Acquired { .. }
    ));
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let unknown = d.dispatch(&held, &run).await.unwrap_err();
    assert_eq!(unknown.code(), "outcome_unknown", "{unknown}");
    assert_eq!(
        world(&tenant).effects("book flight lyon").len(),
        0,
        "not run"
    );
}

on_stores!(a_non_idempotent_booking_stopped_mid_compensation_is_resumed_by_the_next_call =>
    sqlite_a_non_idempotent_booking_stopped_mid_compensation_is_resumed_by_the_next_call,
    postgres_a_non_idempotent_booking_stopped_mid_compensation_is_resumed_by_the_next_call);

#[test]
fn exports_tell_the_model_of_the_controls() {
    use idem::export::Provider;
    let d = shop(Arc::new(MemoryStore::new()));
    let mcp = d.registry().export(Provider::Mcp).unwrap();
    let by_name = |name: &str| {
        mcp.as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .cloned()
            .unwrap()
    };
    let trip = by_name("book_trip");
    assert_eq!(
        trip["_meta"]["io.idem/controls"],
        json!({"compensates": true})
    );
    assert!(
        trip["description"]
            .as_str()
            .unwrap()
            .ends_with("If one of its steps fails for good, the steps it completed are undone, and the answer says so."),
        "{trip}"
    );
    let refund = by_name("refund");
    assert_eq!(
        refund["_meta"]["io.idem/controls"],
        json!({"approval": "by_rule"})
    );
    let ticket = by_name("set_ticket_status");
    assert_eq!(
        ticket["_meta"]["io.idem/controls"],
        json!({"precondition": true})
    );
    // A tool with no control beyond its class is exported as before.
    assert!(by_name("cancel_order").get("_meta").is_none());
    let chat = d.registry().export(Provider::OpenAiChat).unwrap();
    let trip = chat
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "book_trip")
        .unwrap();
    assert!(
        trip["function"]["description"]
            .as_str()
            .unwrap()
            .contains("the steps it completed are undone")
    );
}
