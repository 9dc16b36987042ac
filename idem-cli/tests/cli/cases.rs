//! `idem cases`: a capture that failed for good waits in a SQLite store as a case, and an
//! operator lists it, shows it, and decides it from the command line (run it again, say what
//! happened, have its run undone); the agent's next call under its key is answered by that
//! decision, `idem runs show` keeps who decided what, and `idem runs undo` asks for a run's
//! undo that the agent's dispatcher carries out once.

use std::sync::{LazyLock, Mutex};

use idem::dispatch::AppliedCall;
use idem::tool::{Escalate, ToolDef, ToolPolicy};

use super::*;

/// Tenants whose card the provider declines for now.
static DECLINED: LazyLock<Mutex<BTreeSet<String>>> = LazyLock::new(Mutex::default);
/// Reservations made at the provider, by `tenant/order`.
static RESERVED: Tally = Tally::new();
/// Reservations released at the provider, by `tenant/hold`.
static RELEASED: Tally = Tally::new();
/// Every run of the capture's body, by `tenant/order`.
static CAPTURE_RUNS: Tally = Tally::new();
/// Captures the provider took, by `tenant/order`.
static CAPTURED: Tally = Tally::new();

/// The person deciding.
const OPS: &str = "ops@desk";

fn declined(tenant: &str, on: bool) {
    let mut set = DECLINED.lock().unwrap_or_else(|e| e.into_inner());
    match on {
        true => set.insert(tenant.to_owned()),
        false => set.remove(tenant),
    };
}

fn is_declined(tenant: &str) -> bool {
    DECLINED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(tenant)
}

/// A reservation that can be released, and a capture sent to a person when it fails for
/// good; the dispatcher keeps run accounts.
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
            RESERVED.note(&format!("{}/{order}", ctx.tenant()), ctx.idempotency_key());
            Ok::<_, ToolError>(json!({"hold": format!("hold-{order}")}))
        })
        .undo(|ctx: ToolContext, applied: AppliedCall| async move {
            let hold = applied.output["hold"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            RELEASED.note(&format!("{}/{hold}", ctx.tenant()), ctx.idempotency_key());
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
            let label = format!("{}/{order}", ctx.tenant());
            CAPTURE_RUNS.note(&label, ctx.idempotency_key());
            if is_declined(ctx.tenant()) {
                return Err(ToolError::terminal("the card was declined")
                    .with_details(json!({"code": "card_declined"})));
            }
            CAPTURED.note(&label, ctx.idempotency_key());
            Ok(json!({"captured": order}))
        })
        .escalate(Escalate::Failures)
        .build()
        .expect("capture");
    let registry = Registry::builder()
        .add(reserve)
        .add(capture)
        .build()
        .expect("registry");
    Dispatcher::new(registry, store)
        .expect("dispatcher")
        .with_run_accounts(Duration::from_secs(3600))
}

/// An agent over a SQLite store of its own in `dir`, and the store as `idem` is given it.
fn sqlite_agent(dir: &TempDir) -> (Dispatcher, String) {
    let path = dir.path().join("records.db");
    let store = idem::SqliteStore::open(&path).expect("open SQLite");
    (
        payments(Arc::new(store)),
        format!("sqlite:{}", path.display()),
    )
}

fn reserve(order: &str) -> ToolCall {
    ToolCall::new("reserve", json!({"order": order})).with_call_id("call_reserve")
}

fn capture(order: &str) -> ToolCall {
    ToolCall::new("capture", json!({"order": order})).with_call_id("call_capture")
}

/// A case: in `run_id`, reserve for `order`, then capture with the card declined, which
/// goes to a person. The capture's call, its run at its step, and its record key.
async fn reserve_then_capture_declined(
    agent: &Dispatcher,
    tenant: &str,
    run_id: &str,
    order: &str,
) -> (ToolCall, RunContext, String) {
    let run_ctx = RunContext::new(tenant).with_run(run_id, 1);
    agent
        .dispatch(&reserve(order), &run_ctx)
        .await
        .expect("reserved");
    declined(tenant, true);
    let call = capture(order);
    let run_ctx = run_ctx.at_step(2);
    let sent = agent.dispatch(&call, &run_ctx).await.unwrap_err();
    assert_eq!(sent.code(), "escalated", "{sent}");
    assert!(sent.to_string().contains("the card was declined"), "{sent}");
    let key = key_of(agent, &call, &run_ctx);
    (call, run_ctx, key)
}

/// The cases `idem cases list --json` lists for `tenant`.
fn cases_of(at: &[&str], tenant: &str) -> Vec<Value> {
    let shown = run(&mut on(
        at,
        &["cases", "list", "--tenant", tenant, "--json"],
    ))
    .exited(0)
    .json();
    entries(&shown).to_vec()
}

/// A case waits under `key`, as `idem cases show KEY --json` shows it.
fn still_a_case(at: &[&str], key: &str) {
    let shown = run(&mut on(at, &["cases", "show", key, "--json"]))
        .exited(0)
        .json();
    assert_eq!(shown["key"], json!(key), "{shown:#}");
}

/// The line of `idem runs show`'s table for the call `call_id`.
fn account_row<'a>(shown: &'a Shown, call_id: &str) -> &'a str {
    shown
        .stdout
        .lines()
        .find(|l| l.split_whitespace().any(|c| c == call_id))
        .unwrap_or_else(|| panic!("no row for {call_id}: {shown:#?}"))
}

#[tokio::test]
async fn a_case_is_listed_and_shown_with_what_its_run_applied_before_it() {
    let dir = TempDir::new("idem_cli_cases_list");
    let (agent, store) = sqlite_agent(&dir);
    let at = ["--store", store.as_str()];
    let tenant = unique("cases_list");
    let (_, _, key) = reserve_then_capture_declined(&agent, &tenant, "run-1", "o1").await;

    let listed = run(&mut on(&at, &["cases", "list"]))
        .exited(0)
        .prints(&["KEY", "TOOL", "TENANT", "RUN", "SINCE", "WHAT"]);
    let row = listed
        .stdout
        .lines()
        .find(|l| l.contains(&key))
        .unwrap_or_else(|| panic!("no row for {key}: {listed:#?}"));
    for said in ["capture", tenant.as_str(), "run-1", "the card was declined"] {
        assert!(row.contains(said), "the row does not say {said:?}: {row}");
    }

    let json = run(&mut on(&at, &["cases", "list", "--json"]))
        .exited(0)
        .json();
    let cases = entries(&json);
    assert_eq!(cases.len(), 1, "{json:#}");
    let case = &cases[0];
    assert_eq!(case["key"], json!(key), "{case:#}");
    assert_eq!(case["tool"], "capture", "{case:#}");
    assert_eq!(case["tenant"], json!(tenant), "{case:#}");
    assert_eq!(case["arguments"], json!({"order": "o1"}), "{case:#}");
    assert_eq!(
        case["case"]["applied_before"][0]["tool"], "reserve",
        "{case:#}"
    );
    let downstream = case["downstream_key"]
        .as_str()
        .unwrap_or_else(|| panic!("no downstream key: {case:#}"))
        .to_owned();
    assert_ne!(downstream, key);
    // The filter by tenant finds it too, and another tenant's list is empty.
    assert_eq!(cases_of(&at, &tenant).len(), 1);
    assert!(cases_of(&at, &unique("cases_other")).is_empty());

    // Shown by its downstream key, as the agent's `escalated` answer names it.
    run(&mut on(&at, &["cases", "show", &downstream]))
        .exited(0)
        .prints(&[
            &key,
            "capture",
            &tenant,
            "run-1",
            "call_capture",
            "the card was declined",
            "card_declined",
            "reserve [call_reserve]",
        ]);
    let by_downstream = run(&mut on(&at, &["cases", "show", &downstream, "--json"]))
        .exited(0)
        .json();
    assert_eq!(by_downstream["key"], json!(key), "{by_downstream:#}");
}

#[tokio::test]
async fn a_case_run_again_from_the_command_line_captures_once() {
    let dir = TempDir::new("idem_cli_cases_retry");
    let (agent, store) = sqlite_agent(&dir);
    let at = ["--store", store.as_str()];
    let tenant = unique("cases_retry");
    let (call, run_ctx, key) = reserve_then_capture_declined(&agent, &tenant, "run-1", "o1").await;
    let label = format!("{tenant}/o1");
    assert_eq!(CAPTURE_RUNS.count(&label), 1);

    run(&mut on(&at, &["cases", "retry", &key, "--as", OPS, "-y"]))
        .exited(0)
        .prints(&[&format!("decided {key}"), &format!("by {OPS}")]);
    assert!(cases_of(&at, &tenant).is_empty());

    // A decision lands once. Decided, the case is no longer under its key: `idem` finds
    // none there and exits NotFound (4), not Refused (5), saying it may be decided already.
    run(&mut on(&at, &["cases", "retry", &key, "--as", OPS, "-y"]))
        .exited(4)
        .says(&["no case waits under key", "decided already?"]);

    // The agent's retry runs the capture once; a further call replays it.
    declined(&tenant, false);
    let done = agent.dispatch(&call, &run_ctx).await.expect("captured");
    assert!(!done.deduplicated, "{done:?}");
    assert_eq!(done.output, json!({"captured": "o1"}));
    let replayed = agent.dispatch(&call, &run_ctx).await.expect("a replay");
    assert!(replayed.deduplicated, "{replayed:?}");
    assert_eq!(CAPTURE_RUNS.count(&label), 2);
    assert_eq!(CAPTURED.count(&label), 1);

    let shown = run(&mut on(
        &at,
        &["runs", "show", "run-1", "--tenant", &tenant],
    ))
    .exited(0)
    .prints(&[&format!("decided by {OPS}")]);
    let row = account_row(&shown, "call_capture");
    assert!(
        row.split_whitespace().any(|c| c == "applied"),
        "the capture is not applied: {shown:#?}"
    );
    assert!(row.contains(&format!("decided by {OPS}")), "{shown:#?}");
}

#[tokio::test]
async fn a_case_resolved_as_failed_answers_the_agent_without_running() {
    let dir = TempDir::new("idem_cli_cases_resolve");
    let (agent, store) = sqlite_agent(&dir);
    let at = ["--store", store.as_str()];
    let tenant = unique("cases_resolve");
    let (call, run_ctx, key) = reserve_then_capture_declined(&agent, &tenant, "run-1", "o1").await;
    let label = format!("{tenant}/o1");

    // An output that is not JSON is refused as bad input, and the case still waits.
    run(&mut on(
        &at,
        &[
            "cases",
            "resolve",
            &key,
            "--as",
            OPS,
            "--output",
            "captured by hand",
            "-y",
        ],
    ))
    .exited(2)
    .says(&["--output is not JSON"]);
    still_a_case(&at, &key);
    assert_eq!(cases_of(&at, &tenant).len(), 1);

    run(&mut on(
        &at,
        &[
            "cases",
            "resolve",
            &key,
            "--as",
            OPS,
            "--failed",
            "declined for good",
            "-y",
        ],
    ))
    .exited(0)
    .prints(&[
        &format!("decided {key}"),
        "resolved as failed: declined for good",
    ]);
    assert!(cases_of(&at, &tenant).is_empty());
    // Decided once: another word on it lands nowhere. The record is there, settled: the
    // decision is refused (5), saying it was decided.
    run(&mut on(
        &at,
        &[
            "cases", "resolve", &key, "--as", OPS, "--output", "{}", "-y",
        ],
    ))
    .exited(5)
    .says(&["no case waits under key", "decided already"]);

    // The agent is answered by the person's word; the capture does not run.
    declined(&tenant, false);
    match agent.dispatch(&call, &run_ctx).await {
        Err(DispatchError::ToolFailed {
            error,
            deduplicated,
            ..
        }) => {
            assert_eq!(error.message(), "declined for good");
            assert!(deduplicated, "the person's word is replayed");
        }
        other => panic!("expected the failure the person recorded, got {other:?}"),
    }
    assert_eq!(CAPTURE_RUNS.count(&label), 1);
    assert_eq!(CAPTURED.count(&label), 0);
}

#[tokio::test]
async fn a_run_undone_at_an_operators_word_releases_its_reservation_once() {
    let dir = TempDir::new("idem_cli_cases_undo");
    let (agent, store) = sqlite_agent(&dir);
    let at = ["--store", store.as_str()];
    let tenant = unique("cases_undo");
    let (call, run_ctx, key) = reserve_then_capture_declined(&agent, &tenant, "run-1", "o1").await;
    let hold = format!("{tenant}/hold-o1");

    run(&mut on(
        &at,
        &["cases", "undo-run", &key, "--as", OPS, "-y"],
    ))
    .exited(0)
    .prints(&[
        &format!("decided {key}"),
        "asked for run `run-1` to be undone",
    ]);
    assert!(cases_of(&at, &tenant).is_empty());

    // The agent is answered that its run is undone; nothing is released yet.
    declined(&tenant, false);
    let answered = agent.dispatch(&call, &run_ctx).await.unwrap_err();
    assert_eq!(answered.code(), "tool_failed", "{answered}");
    assert!(answered.to_string().contains("undone"), "{answered}");
    assert_eq!(RELEASED.count(&hold), 0, "not carried out yet");
    assert_eq!(CAPTURED.count(&format!("{tenant}/o1")), 0);

    // The agent's dispatcher carries it out, once.
    let carried = agent.undo_requested().await.expect("the undos asked for");
    assert_eq!(carried.len(), 1, "{carried:?}");
    let undone = carried[0].1.as_ref().expect("the run's undo");
    assert!(undone.is_complete(), "{undone}");
    assert_eq!(RELEASED.count(&hold), 1);
    let again = agent.undo_requested().await.expect("the undos asked for");
    assert!(again.is_empty(), "a request is carried out once: {again:?}");
    assert_eq!(RELEASED.count(&hold), 1);

    let shown = run(&mut on(
        &at,
        &["runs", "show", "run-1", "--tenant", &tenant],
    ))
    .exited(0);
    let row = account_row(&shown, "call_reserve");
    assert!(row.contains("its undo: undone"), "{shown:#?}");
    // The undo's row names who asked for it; the capture's row says its run is undone.
    assert!(
        account_row(&shown, "undo:call_reserve").contains(&format!("decided by {OPS}")),
        "{shown:#?}"
    );
    assert!(
        account_row(&shown, "call_capture").contains("to be undone"),
        "{shown:#?}"
    );
    // The capture's decision is kept in full in the account's JSON (its row's detail is
    // clipped before it).
    let json = run(&mut on(
        &at,
        &["runs", "show", "run-1", "--tenant", &tenant, "--json"],
    ))
    .exited(0)
    .json();
    let capture_entry = entries(&json["calls"])
        .iter()
        .find(|c| c["call_id"] == "call_capture")
        .unwrap_or_else(|| panic!("no entry for the capture: {json:#}"));
    assert_eq!(
        (
            &capture_entry["decided"]["by"],
            &capture_entry["decided"]["decision"]
        ),
        (&json!(OPS), &json!("undo_run")),
        "{json:#}"
    );

    // A run with no case: asked to be undone from `idem runs undo`, released once.
    let run_2 = RunContext::new(tenant.as_str()).with_run("run-2", 1);
    agent
        .dispatch(&reserve("o2"), &run_2)
        .await
        .expect("reserved");
    assert_eq!(RESERVED.count(&format!("{tenant}/o2")), 1);
    let hold_2 = format!("{tenant}/hold-o2");
    run(&mut on(
        &at,
        &[
            "runs", "undo", "run-2", "--tenant", &tenant, "--as", OPS, "-y",
        ],
    ))
    .exited(0)
    .prints(&["asked for run `run-2`", OPS]);
    assert_eq!(RELEASED.count(&hold_2), 0, "not carried out yet");
    let carried = agent.undo_requested().await.expect("the undos asked for");
    assert_eq!(carried.len(), 1, "{carried:?}");
    assert_eq!(carried[0].0.run_id, "run-2");
    assert!(
        carried[0].1.as_ref().expect("the run's undo").is_complete(),
        "{carried:?}"
    );
    assert_eq!(RELEASED.count(&hold_2), 1);
    let again = agent.undo_requested().await.expect("the undos asked for");
    assert!(again.is_empty(), "a request is carried out once: {again:?}");
    assert_eq!(RELEASED.count(&hold_2), 1);
    assert_eq!(
        RELEASED.count(&hold),
        1,
        "run-1's hold is not released again"
    );
    run(&mut on(
        &at,
        &["runs", "show", "run-2", "--tenant", &tenant],
    ))
    .exited(0)
    .prints(&["its undo: undone"]);
}

#[tokio::test]
async fn deciding_a_case_needs_a_name_and_a_key_that_holds_one() {
    let dir = TempDir::new("idem_cli_cases_bad_input");
    let (agent, store) = sqlite_agent(&dir);
    let at = ["--store", store.as_str()];
    let tenant = unique("cases_bad_input");
    let (_, _, key) = reserve_then_capture_declined(&agent, &tenant, "run-1", "o1").await;

    // No one named (and no IDEM_APPROVER: `idem` clears it): refused as bad usage.
    for args in [
        &["cases", "retry", &key, "-y"][..],
        &["cases", "undo-run", &key, "-y"],
        &["cases", "resolve", &key, "--failed", "no", "-y"],
    ] {
        run(&mut on(&at, args)).exited(2).says(&["--as"]);
    }
    still_a_case(&at, &key);

    // A key under which no case waits: not found, for show and for a decision.
    let unknown = "0".repeat(64);
    run(&mut on(&at, &["cases", "show", &unknown]))
        .exited(4)
        .says(&["no case waits under key"]);
    run(&mut on(
        &at,
        &["cases", "retry", &unknown, "--as", OPS, "-y"],
    ))
    .exited(4)
    .says(&["no case waits under key"]);
    assert_eq!(cases_of(&at, &tenant).len(), 1);
}
