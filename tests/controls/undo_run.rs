//! A run that undoes itself: an agent reserved stock in one call and the capture failed for
//! good in the next; undoing the run releases the reservation once at the provider, also
//! when it is undone twice and when the worker undoing it dies mid-undo; an undo that fails
//! is reported and left for a person, never silent.

use std::sync::Arc;
use std::time::Duration;

use idem::dispatch::{AppliedCall, UndoOptions, UndoOutcome, UndoRunError};
use idem::prelude::*;
use idem::tool::{ToolDef, ToolPolicy};
use serde_json::{Value, json};

use crate::on_stores;
use crate::support::dispatcher::dispatcher;
use crate::world::{fresh_tenant, world};

/// Release a reservation at the provider under the undo's own key. While the tenant's world
/// says so, refuse (`refuse_cancel` names the hold), or never answer once it released.
async fn release(ctx: ToolContext, applied: AppliedCall) -> Result<(), ToolError> {
    let hold: String = applied.output["hold"]
        .as_str()
        .ok_or_else(|| ToolError::terminal("the reservation recorded no hold"))?
        .to_owned();
    let hang = {
        let mut w = world(ctx.tenant());
        if w.refuse_cancel.contains(&hold) {
            return Err(ToolError::terminal(format!(
                "the provider refuses to release {hold}"
            )));
        }
        w.apply(&format!("release {hold}"), ctx.downstream_key().as_str());
        std::mem::take(&mut w.hang_after_cancel)
    };
    if hang {
        std::future::pending::<()>().await;
    }
    Ok(())
}

/// A reservation that can be released, a capture that always fails for good, and a note
/// that declares no undo.
fn payments(store: Arc<dyn idem::Store>) -> Dispatcher {
    let policy = ToolPolicy {
        lease: Duration::from_secs(1),
        backoff: Duration::from_millis(1),
        ..ToolPolicy::default()
    };
    let reserve = ToolDef::builder("reserve", ToolClass::IdempotentWrite)
        .description("Reserve an amount on the customer's card.")
        .input_schema(json!({"type": "object", "properties": {"order": {"type": "string"}}}))
        .policy(policy.clone())
        .handler(|ctx: ToolContext, args: Value| async move {
            let order = args["order"].as_str().unwrap_or_default().to_owned();
            world(ctx.tenant()).apply(&format!("reserve {order}"), ctx.downstream_key().as_str());
            Ok::<_, ToolError>(json!({"hold": format!("hold-{order}")}))
        })
        .undo(release)
        .build()
        .expect("reserve");
    let capture = ToolDef::builder("capture", ToolClass::NonIdempotentWrite)
        .description("Capture a reserved amount.")
        .input_schema(json!({"type": "object"}))
        .policy(policy.clone())
        .handler(|_: ToolContext, _: Value| async move {
            Err::<Value, _>(ToolError::terminal("the card was declined"))
        })
        .build()
        .expect("capture");
    let settle = ToolDef::builder("settle", ToolClass::NonIdempotentWrite)
        .description("Capture a reserved amount, or release the run's reservations.")
        .input_schema(json!({"type": "object"}))
        .policy(policy.clone())
        .handler(|_: ToolContext, _: Value| async move {
            Err::<Value, _>(ToolError::terminal("the card was declined"))
        })
        .on_failure_undo_run(UndoOptions::only(["reserve"]))
        .build()
        .expect("settle");
    let note = ToolDef::builder("note", ToolClass::IdempotentWrite)
        .description("Note something on the order.")
        .input_schema(json!({"type": "object"}))
        .policy(policy)
        .handler(|_: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
        .build()
        .expect("note");
    let registry = Registry::builder()
        .add(reserve)
        .add(capture)
        .add(settle)
        .add(note)
        .build()
        .expect("registry");
    dispatcher(registry, store).with_run_accounts(Duration::from_secs(3600))
}

/// Reserve for `order` and note it (applied), then fail to capture (for good).
async fn reserve_then_fail_to_capture(d: &Dispatcher, tenant: &str, order: &str) -> RunContext {
    let run = RunContext::new(tenant).with_run(format!("run-{order}"), 1);
    let reserve = ToolCall::new("reserve", json!({"order": order})).with_call_id("call_reserve");
    d.dispatch(&reserve, &run).await.expect("reserved");
    let note = ToolCall::new("note", json!({"text": "reserved"})).with_call_id("call_note");
    d.dispatch(&note, &run.clone().at_step(2))
        .await
        .expect("noted");
    let capture = ToolCall::new("capture", json!({})).with_call_id("call_capture");
    let failed = d
        .dispatch(&capture, &run.clone().at_step(3))
        .await
        .unwrap_err();
    assert_eq!(failed.code(), "tool_failed", "{failed}");
    run
}

async fn a_failed_capture_has_its_reservation_released_once(store: Arc<dyn idem::Store>) {
    let tenant = fresh_tenant("undo_run");
    let d = payments(store.clone());
    let run = reserve_then_fail_to_capture(&d, &tenant, "o1").await;
    let run_id = run.run_id.as_deref().unwrap();

    let undone = d
        .undo_run(&tenant, run_id, &UndoOptions::all())
        .await
        .unwrap();
    assert!(undone.is_complete(), "{undone}");
    assert_eq!(undone.calls.len(), 1, "{undone:?}");
    assert_eq!(undone.calls[0].tool, "reserve");
    assert_eq!(
        undone.calls[0].outcome,
        UndoOutcome::Undone { replayed: false }
    );
    let skipped: Vec<&str> = undone.skipped.iter().map(|s| s.tool.as_str()).collect();
    assert_eq!(
        skipped,
        ["note"],
        "a write without an undo is kept, and said"
    );
    assert_eq!(world(&tenant).effects("release hold-o1").len(), 1);

    // Undone again: replayed, not released a second time.
    let again = d
        .undo_run(&tenant, run_id, &UndoOptions::all())
        .await
        .unwrap();
    assert_eq!(
        again.calls[0].outcome,
        UndoOutcome::Undone { replayed: true }
    );
    assert_eq!(world(&tenant).effects("release hold-o1").len(), 1);
    assert_eq!(
        world(&tenant).applied(),
        ["reserve o1", "release hold-o1"],
        "the provider's ledger"
    );

    // The undo is a call of the run's account.
    let account = d.run_account(&tenant, run_id).await.unwrap();
    let tools: Vec<(&str, &str)> = account
        .calls
        .iter()
        .map(|c| (c.tool.as_str(), c.outcome.name()))
        .collect();
    assert_eq!(
        tools,
        [
            ("reserve", "applied"),
            ("note", "applied"),
            ("capture", "refused"),
            ("reserve.undo", "applied"),
        ]
    );

    // Only a named group: the note's tool has no undo, so nothing is undone or skipped
    // besides it.
    let only_note = d
        .undo_run(&tenant, run_id, &UndoOptions::only(["note"]))
        .await
        .unwrap();
    assert!(only_note.calls.is_empty());
    assert_eq!(only_note.skipped.len(), 1);
}

on_stores!(a_failed_capture_has_its_reservation_released_once =>
    sqlite_a_failed_capture_has_its_reservation_released_once,
    postgres_a_failed_capture_has_its_reservation_released_once);

async fn a_worker_killed_mid_undo_is_taken_over_and_releases_once(store: Arc<dyn idem::Store>) {
    let tenant = fresh_tenant("undo_run_kill");
    let d = payments(store.clone());
    let run = reserve_then_fail_to_capture(&d, &tenant, "o2").await;
    let run_id = run.run_id.as_deref().unwrap();

    // The worker stops right after the provider released the hold: its undo is dropped
    // before it recorded anything (a dropped dispatch gives an idempotent claim back; a
    // process killed outright leaves it held until its lease of one second lapses).
    world(&tenant).hang_after_cancel = true;
    let stopped = tokio::time::timeout(
        Duration::from_millis(500),
        d.undo_run(&tenant, run_id, &UndoOptions::all()),
    )
    .await;
    assert!(stopped.is_err(), "the undo hangs: {stopped:?}");
    assert_eq!(world(&tenant).effects("release hold-o2").len(), 1);

    // After the lease, the next undo runs it again under the same downstream key: released
    // once at the provider.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let resumed = d
        .undo_run(&tenant, run_id, &UndoOptions::all())
        .await
        .unwrap();
    assert!(resumed.is_complete(), "{resumed}");
    assert_eq!(world(&tenant).effects("release hold-o2").len(), 1);
    let again = d
        .undo_run(&tenant, run_id, &UndoOptions::all())
        .await
        .unwrap();
    assert_eq!(
        again.calls[0].outcome,
        UndoOutcome::Undone { replayed: true }
    );
    assert_eq!(world(&tenant).effects("release").len(), 1);
}

on_stores!(a_worker_killed_mid_undo_is_taken_over_and_releases_once =>
    sqlite_a_worker_killed_mid_undo_is_taken_over_and_releases_once,
    postgres_a_worker_killed_mid_undo_is_taken_over_and_releases_once);

async fn an_undo_that_fails_is_reported_for_a_person(store: Arc<dyn idem::Store>) {
    let tenant = fresh_tenant("undo_run_fails");
    let d = payments(store.clone());
    let run = RunContext::new(tenant.as_str()).with_run("run-two", 1);
    for (step, order) in [(1, "o3"), (2, "o4")] {
        let call =
            ToolCall::new("reserve", json!({"order": order})).with_call_id(format!("call_{order}"));
        d.dispatch(&call, &run.clone().at_step(step)).await.unwrap();
    }
    world(&tenant).refuse_cancel.push("hold-o4".into());

    let report = d
        .undo_run(&tenant, "run-two", &UndoOptions::all())
        .await
        .unwrap();
    assert!(!report.is_complete());
    let outcomes: Vec<(&str, &str)> = report
        .calls
        .iter()
        .map(|c| (c.call_id.as_deref().unwrap(), c.outcome.name()))
        .collect();
    // Newest first; the older reservation is not released past a failed undo.
    assert_eq!(
        outcomes,
        [("call_o4", "failed"), ("call_o3", "not_reached")]
    );
    let UndoOutcome::Failed { why } = &report.calls[0].outcome else {
        unreachable!()
    };
    assert!(why.contains("refuses to release hold-o4"), "{why}");
    assert!(
        report.to_string().contains("a person must settle it"),
        "{report}"
    );
    assert!(world(&tenant).effects("release").is_empty());

    // Never silent, never retried behind a person's back: the failure is recorded and
    // replayed to the next undo.
    world(&tenant).refuse_cancel.clear();
    let again = d
        .undo_run(&tenant, "run-two", &UndoOptions::all())
        .await
        .unwrap();
    assert_eq!(again.calls[0].outcome.name(), "failed");
    assert!(world(&tenant).effects("release").is_empty());

    // The failed undo waits for a person as a case of its own, with its error; once they let
    // it run again, the next undo of the run releases both reservations, once each.
    let cases = d.cases().pending(Some(&tenant), 10).await.unwrap();
    assert_eq!(cases.len(), 1, "{cases:?}");
    assert_eq!(cases[0].tool, "reserve.undo");
    assert!(
        cases[0]
            .escalation
            .error
            .message()
            .contains("refuses to release hold-o4")
    );
    d.cases()
        .decide(
            &cases[0],
            "ops@example.com",
            idem::dispatch::CaseDecision::Retry,
        )
        .await
        .unwrap();
    let resumed = d
        .undo_run(&tenant, "run-two", &UndoOptions::all())
        .await
        .unwrap();
    assert!(resumed.is_complete(), "{resumed}");
    assert_eq!(world(&tenant).effects("release hold-o4").len(), 1);
    assert_eq!(world(&tenant).effects("release hold-o3").len(), 1);
    let account = d.run_account(&tenant, "run-two").await.unwrap();
    let undo: Vec<Option<&str>> = account
        .calls
        .iter()
        .filter(|c| c.tool == "reserve")
        .map(|c| c.undo.as_deref())
        .collect();
    assert_eq!(undo, [Some("undone"), Some("undone")], "{account}");
}

on_stores!(an_undo_that_fails_is_reported_for_a_person =>
    sqlite_an_undo_that_fails_is_reported_for_a_person,
    postgres_an_undo_that_fails_is_reported_for_a_person);

#[tokio::test]
async fn undo_needs_run_accounts_and_a_write() {
    let d = dispatcher(
        Registry::builder().build().unwrap(),
        Arc::new(MemoryStore::new()),
    );
    let err = d
        .undo_run("acme", "run-1", &UndoOptions::all())
        .await
        .unwrap_err();
    assert!(matches!(err, UndoRunError::NoAccounts { .. }), "{err}");
    assert!(err.to_string().contains("with_run_accounts"), "{err}");

    let read = ToolDef::builder("look", ToolClass::Read)
        .description("Look something up.")
        .input_schema(json!({"type": "object"}))
        .handler(|_: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
        .undo(release)
        .build()
        .unwrap_err();
    assert!(read.to_string().contains("look"), "{read}");
    assert!(
        read.to_string()
            .contains("`undo` has no effect on a `read` tool"),
        "{read}"
    );
}

async fn a_capture_that_fails_for_good_undoes_its_run_before_answering(
    store: Arc<dyn idem::Store>,
) {
    let tenant = fresh_tenant("undo_run_policy");
    let d = payments(store.clone());
    let run = RunContext::new(tenant.as_str()).with_run("run-settle", 1);
    let reserve = ToolCall::new("reserve", json!({"order": "o5"})).with_call_id("call_reserve");
    d.dispatch(&reserve, &run).await.unwrap();
    let settle = ToolCall::new("settle", json!({})).with_call_id("call_settle");
    let failed = d
        .dispatch(&settle, &run.clone().at_step(2))
        .await
        .unwrap_err();
    let DispatchError::ToolFailed { error, .. } = &failed else {
        panic!("the capture fails, got {failed:?}");
    };
    assert!(
        error
            .message()
            .contains("the card was declined; the run's applied calls were undone (reserve)"),
        "{error:?}"
    );
    assert_eq!(
        error.details().unwrap()["run_undo"]["complete"],
        json!(true)
    );
    assert_eq!(world(&tenant).effects("release hold-o5").len(), 1);

    // Asked again, the failure replays and so does the undo: released once.
    let again = d
        .dispatch(&settle, &run.clone().at_step(2))
        .await
        .unwrap_err();
    assert_eq!(again.code(), "tool_failed");
    assert_eq!(world(&tenant).effects("release").len(), 1);

    // The account names the call whose failure undid the run.
    let account = d.run_account(&tenant, "run-settle").await.unwrap();
    let undo = account
        .calls
        .iter()
        .find(|c| c.tool == "reserve.undo")
        .expect("the undo's entry");
    assert_eq!(
        undo.decided.as_ref().map(|d| d.by.as_str()),
        Some("the failure of `settle` [call_settle]")
    );
    assert_eq!(account.calls[0].undo.as_deref(), Some("undone"));
}

on_stores!(a_capture_that_fails_for_good_undoes_its_run_before_answering =>
    sqlite_a_capture_that_fails_for_good_undoes_its_run_before_answering,
    postgres_a_capture_that_fails_for_good_undoes_its_run_before_answering);
