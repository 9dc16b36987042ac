//! Failures that go to a person: a capture that fails for good (or whose outcome is not
//! known) waits in the store as a case, with its error and what its run applied before it;
//! every call under its key is answered `escalated` until a person decides; the decision
//! (run it again, say what happened, undo the run) is recorded in the run's account and binds
//! what the agent is answered next, on SQLite, PostgreSQL and Redis.

use std::collections::BTreeSet;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use idem::Store;
use idem::dispatch::{
    AppliedCall, CallOutcome, CaseDecision, CaseDesk, CaseError, EscalationKind, UndoOptions,
};
use idem::prelude::*;
use idem::record::Outcome;
use idem::tool::{Escalate, ToolDef, ToolPolicy};
use serde_json::{Value, json};

use crate::support::dispatcher::dispatcher;
use crate::world::{fresh_tenant, world};

/// Tenants whose card the provider declines for now.
static DECLINED: LazyLock<Mutex<BTreeSet<String>>> = LazyLock::new(Mutex::default);
/// Tenants whose provider times out after taking the capture.
static TIMES_OUT: LazyLock<Mutex<BTreeSet<String>>> = LazyLock::new(Mutex::default);

fn set(flags: &Mutex<BTreeSet<String>>, tenant: &str, on: bool) {
    let mut flags = flags.lock().unwrap_or_else(|e| e.into_inner());
    match on {
        true => flags.insert(tenant.to_owned()),
        false => flags.remove(tenant),
    };
}

fn is_set(flags: &Mutex<BTreeSet<String>>, tenant: &str) -> bool {
    flags
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(tenant)
}

/// The person deciding.
const OPS: &str = "ops@example.com";

/// A reservation that can be released, and a capture sent to a person when it fails for
/// good or its outcome is not known.
fn payments(store: Arc<dyn Store>) -> Dispatcher {
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
        .undo(|ctx: ToolContext, applied: AppliedCall| async move {
            let hold = applied.output["hold"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            world(ctx.tenant()).apply(&format!("release {hold}"), ctx.downstream_key().as_str());
            Ok::<_, ToolError>(())
        })
        .build()
        .expect("reserve");
    let capture = ToolDef::builder("capture", ToolClass::NonIdempotentWrite)
        .description("Capture the reserved amount.")
        .input_schema(json!({"type": "object", "properties": {"order": {"type": "string"}}}))
        .policy(policy)
        .handler(|ctx: ToolContext, args: Value| async move {
            let order = args["order"].as_str().unwrap_or_default().to_owned();
            world(ctx.tenant()).apply(
                &format!("capture attempt {}", ctx.attempt()),
                &format!("{}-{}", ctx.downstream_key(), random()),
            );
            if is_set(&DECLINED, ctx.tenant()) {
                return Err(ToolError::terminal("the card was declined")
                    .with_details(json!({"code": "card_declined"})));
            }
            world(ctx.tenant()).apply(&format!("capture {order}"), ctx.downstream_key().as_str());
            if is_set(&TIMES_OUT, ctx.tenant()) {
                return Err(ToolError::ambiguous(
                    "the provider timed out after taking the capture",
                ));
            }
            Ok(json!({"captured": order}))
        })
        .escalate(Escalate::FailuresAndUnknown)
        .build()
        .expect("capture");
    let registry = Registry::builder()
        .add(reserve)
        .add(capture)
        .build()
        .expect("registry");
    dispatcher(registry, store).with_run_accounts(Duration::from_secs(3600))
}

/// A unique suffix, so that every body run of the capture is its own ledger line.
fn random() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// Reserve, then capture with the card declined: the capture goes to a person.
async fn reserve_then_capture_declined(
    d: &Dispatcher,
    tenant: &str,
) -> (RunContext, ToolCall, idem::record::Timestamp) {
    let run = RunContext::new(tenant).with_run("run-1", 1);
    let reserve = ToolCall::new("reserve", json!({"order": "o1"})).with_call_id("call_reserve");
    d.dispatch(&reserve, &run).await.expect("reserved");
    set(&DECLINED, tenant, true);
    let capture = ToolCall::new("capture", json!({"order": "o1"})).with_call_id("call_capture");
    let sent = d
        .dispatch(&capture, &run.clone().at_step(2))
        .await
        .unwrap_err();
    assert_eq!(sent.code(), "escalated", "{sent}");
    assert!(sent.to_string().contains("the card was declined"), "{sent}");
    let idem::DispatchError::Escalated { since, .. } = sent else {
        unreachable!()
    };
    (run.at_step(2), capture, since)
}

fn capture_attempts(tenant: &str) -> usize {
    world(tenant).effects("capture attempt").len()
}

async fn a_failed_capture_waits_for_a_person_and_runs_again_at_their_word(store: Arc<dyn Store>) {
    let tenant = fresh_tenant("escalate_retry");
    let d = payments(store.clone());
    let (run, capture, first_since) = reserve_then_capture_declined(&d, &tenant).await;
    assert_eq!(capture_attempts(&tenant), 1);

    // The agent calls again: answered from the case, the body does not run; the case says
    // the same "since" as the first answer.
    set(&DECLINED, &tenant, false);
    let again = d.dispatch(&capture, &run).await.unwrap_err();
    assert_eq!(again.code(), "escalated", "{again}");
    let idem::DispatchError::Escalated { since, .. } = &again else {
        unreachable!()
    };
    assert_eq!(*since, first_since);
    assert_eq!(
        capture_attempts(&tenant),
        1,
        "nothing runs until a person decides"
    );
    // Nor does a recovery pass settle it.
    let recovered = d
        .recover(&idem::dispatch::RecoveryOptions::default())
        .await
        .unwrap();
    assert!(
        recovered.reported().any(|(r, why)| r.tool == "capture"
            && matches!(why, idem::dispatch::Unrecoverable::Escalated))
    );

    // The case, as an operator without the tools sees it.
    let desk = CaseDesk::over(&*store);
    let cases = desk.pending(Some(&tenant), 10).await.unwrap();
    assert_eq!(cases.len(), 1, "{cases:?}");
    let case = &cases[0];
    assert_eq!(case.tool, "capture");
    assert_eq!(case.escalation.kind, EscalationKind::Failure);
    assert_eq!(case.escalation.error.message(), "the card was declined");
    assert_eq!(
        case.escalation.error.details(),
        Some(&json!({"code": "card_declined"}))
    );
    assert_eq!(case.escalation.run_id.as_deref(), Some("run-1"));
    assert_eq!(case.escalation.call_id.as_deref(), Some("call_capture"));
    let before: Vec<&str> = case
        .escalation
        .applied_before
        .iter()
        .map(|a| a.tool.as_str())
        .collect();
    assert_eq!(before, ["reserve"], "what the run applied before it");
    assert_eq!(case.arguments, Some(json!({"order": "o1"})));

    // The account lists it for a person.
    let account = d.run_account(&tenant, "run-1").await.unwrap();
    let waiting: Vec<&str> = account
        .needing_a_person()
        .map(|c| c.tool.as_str())
        .collect();
    assert_eq!(waiting, ["capture"]);
    assert_eq!(account.calls[1].outcome.name(), "escalated");

    // The person lets it run again; a second decision on the same case lands nowhere.
    let decided = desk.decide(case, OPS, CaseDecision::Retry).await.unwrap();
    assert_eq!(decided.decision, "retry");
    let twice = desk
        .decide(case, "someone-else", CaseDecision::Retry)
        .await
        .unwrap_err();
    assert!(matches!(twice, CaseError::NotPending(_)), "{twice}");
    assert!(desk.pending(Some(&tenant), 10).await.unwrap().is_empty());

    // The agent's retry runs the capture once, under the same downstream key.
    let done = d.dispatch(&capture, &run).await.unwrap();
    assert_eq!(done.output, json!({"captured": "o1"}));
    let replayed = d.dispatch(&capture, &run).await.unwrap();
    assert!(replayed.deduplicated);
    assert_eq!(capture_attempts(&tenant), 2);
    assert_eq!(world(&tenant).effects("capture o1").len(), 1);

    // The account: applied, and who decided what.
    let account = d.run_account(&tenant, "run-1").await.unwrap();
    let capture_entry = &account.calls[1];
    assert_eq!(capture_entry.outcome, CallOutcome::Applied);
    assert_eq!(
        capture_entry.attempts,
        Some(2),
        "the declined run and the run at the person's word"
    );
    let by = capture_entry
        .decided
        .as_ref()
        .expect("the decision is kept");
    assert_eq!((by.by.as_str(), by.decision.as_str()), (OPS, "retry"));
    assert_eq!(account.needing_a_person().count(), 0);
    assert!(
        account
            .to_string()
            .contains("decided by ops@example.com: retry"),
        "{account}"
    );
}

async fn a_person_says_what_happened_and_the_agent_is_answered_by_it(store: Arc<dyn Store>) {
    let tenant = fresh_tenant("escalate_resolve");
    let d = payments(store.clone());
    let (run, capture, _) = reserve_then_capture_declined(&d, &tenant).await;
    let desk = d.cases();
    let case = desk.pending(Some(&tenant), 10).await.unwrap().remove(0);

    // A success that is not JSON is refused, and nothing changes.
    let bad = desk
        .decide(
            &case,
            OPS,
            CaseDecision::Resolve(Outcome::Success("captured".into())),
        )
        .await
        .unwrap_err();
    assert!(matches!(bad, CaseError::InvalidOutcome { .. }), "{bad}");
    // Captured by hand at the provider: the person says so.
    let said = Outcome::Success(json!({"captured": "o1", "by_hand": true}).to_string());
    desk.decide(&case, OPS, CaseDecision::Resolve(said))
        .await
        .unwrap();
    set(&DECLINED, &tenant, false);
    let answered = d.dispatch(&capture, &run).await.unwrap();
    assert!(
        answered.deduplicated,
        "the person's word is replayed, nothing runs"
    );
    assert_eq!(answered.output, json!({"captured": "o1", "by_hand": true}));
    assert_eq!(capture_attempts(&tenant), 1);
    let account = d.run_account(&tenant, "run-1").await.unwrap();
    assert_eq!(account.calls[1].outcome, CallOutcome::Applied);
    assert_eq!(
        account.calls[1].decided.as_ref().unwrap().decision,
        "resolved"
    );
}

async fn a_person_has_the_run_undone_from_the_command_lines_side(store: Arc<dyn Store>) {
    let tenant = fresh_tenant("escalate_undo");
    let d = payments(store.clone());
    let (run, capture, _) = reserve_then_capture_declined(&d, &tenant).await;

    // Decided where the tools are not: the undo is asked for, the call answered by it.
    let desk = CaseDesk::over(&*store);
    let case = desk.pending(Some(&tenant), 10).await.unwrap().remove(0);
    let decided = desk
        .decide(&case, OPS, CaseDecision::UndoRun)
        .await
        .unwrap();
    assert!(
        decided.said.contains("asked for run `run-1` to be undone"),
        "{}",
        decided.said
    );
    let answered = d.dispatch(&capture, &run).await.unwrap_err();
    assert_eq!(answered.code(), "tool_failed", "{answered}");
    assert!(answered.to_string().contains("to be undone"), "{answered}");
    assert!(
        world(&tenant).effects("release").is_empty(),
        "not yet carried out"
    );

    // The agent's dispatcher carries it out once.
    let carried = d.undo_requested().await.unwrap();
    let ours: Vec<_> = carried.iter().filter(|(r, _)| r.tenant == tenant).collect();
    assert_eq!(ours.len(), 1);
    let undone = ours[0].1.as_ref().unwrap();
    assert!(undone.is_complete(), "{undone}");
    assert_eq!(world(&tenant).effects("release hold-o1").len(), 1);
    let carried = d.undo_requested().await.unwrap();
    assert!(
        carried.iter().all(|(r, _)| r.tenant != tenant),
        "a request is carried out once"
    );
    assert_eq!(world(&tenant).effects("release").len(), 1);

    // The account marks the reservation undone, and the capture decided.
    let account = d.run_account(&tenant, "run-1").await.unwrap();
    assert_eq!(
        account.calls[0].undo.as_deref(),
        Some("undone"),
        "{account}"
    );
    assert_eq!(
        account.calls[1].decided.as_ref().unwrap().decision,
        "undo_run"
    );
    assert_eq!(account.needing_a_person().count(), 0, "{account}");
}

async fn a_person_with_the_tools_undoes_the_run_at_once(store: Arc<dyn Store>) {
    let tenant = fresh_tenant("escalate_undo_now");
    let d = payments(store.clone());
    let (run, capture, _) = reserve_then_capture_declined(&d, &tenant).await;
    let case = d
        .cases()
        .pending(Some(&tenant), 10)
        .await
        .unwrap()
        .remove(0);
    let decided = d
        .cases()
        .decide(&case, OPS, CaseDecision::UndoRun)
        .await
        .unwrap();
    assert!(
        decided.said.contains("had run `run-1` undone"),
        "{}",
        decided.said
    );
    assert_eq!(world(&tenant).effects("release hold-o1").len(), 1);
    let answered = d.dispatch(&capture, &run).await.unwrap_err();
    assert!(answered.to_string().contains("undone"), "{answered}");
    // The undo's entry of the account names who asked for it.
    let account = d.run_account(&tenant, "run-1").await.unwrap();
    let undo = account
        .calls
        .iter()
        .find(|c| c.tool == "reserve.undo")
        .expect("the undo");
    assert_eq!(undo.decided.as_ref().map(|d| d.by.as_str()), Some(OPS));
    // Undoing again changes nothing at the provider.
    let again = d
        .undo_run(&tenant, "run-1", &UndoOptions::all())
        .await
        .unwrap();
    assert!(again.is_complete());
    assert_eq!(world(&tenant).effects("release").len(), 1);
}

async fn an_unknown_capture_waits_for_a_person(store: Arc<dyn Store>) {
    let tenant = fresh_tenant("escalate_unknown");
    let d = payments(store.clone());
    set(&TIMES_OUT, &tenant, true);
    let run = RunContext::new(tenant.as_str()).with_run("run-1", 1);
    let capture = ToolCall::new("capture", json!({"order": "o2"})).with_call_id("call_capture");
    let sent = d.dispatch(&capture, &run).await.unwrap_err();
    assert_eq!(sent.code(), "escalated", "{sent}");
    let case = d
        .cases()
        .pending(Some(&tenant), 10)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(case.escalation.kind, EscalationKind::Unknown);
    assert!(case.escalation.error.message().contains("timed out"));
    // It applied at the provider; the person says so, and the agent never captures twice.
    set(&TIMES_OUT, &tenant, false);
    let said = Outcome::Success(json!({"captured": "o2"}).to_string());
    d.cases()
        .decide(&case, OPS, CaseDecision::Resolve(said))
        .await
        .unwrap();
    let answered = d.dispatch(&capture, &run).await.unwrap();
    assert!(answered.deduplicated);
    assert_eq!(world(&tenant).effects("capture o2").len(), 1);
}

crate::on_every_store!(
    a_failed_capture_waits_for_a_person_and_runs_again_at_their_word,
    a_person_says_what_happened_and_the_agent_is_answered_by_it,
    a_person_has_the_run_undone_from_the_command_lines_side,
    a_person_with_the_tools_undoes_the_run_at_once,
    an_unknown_capture_waits_for_a_person,
);
