//! The crash harness (`idem::testing`) on a user's two-step tool: a transfer that debits and
//! credits in journaled steps, and a receipt sent once, over a fake provider that applies
//! each request key once (as real idempotency keys do) and writes every effect it applied to
//! a ledger file. Every point held; and two planted defects are caught and named: an effect
//! sent before its step is journaled, and a write that is not idempotent declared as one.

#[path = "support/provider_file.rs"]
mod provider;

use std::path::Path;

use idem::prelude::*;
use idem::testing::{CrashTest, Setup, Verdict};
use idem::tool::ToolDef;
use provider::{apply, ledger};
use serde_json::{Value, json};

/// How the transfer tool sends its effects.
#[derive(Clone, Copy)]
enum Transfer {
    /// Each effect inside its journaled step, under a key derived from the call's.
    Right,
    /// The debit sent before its step, with no key: a crash between the two sends it again.
    DebitBeforeItsStep,
    /// The debit sent inside its step, with no key: a crash after it and before the step is
    /// journaled sends it again.
    KeylessDebitInItsStep,
}

fn transfer(dir: &Path, how: Transfer) -> ToolDef {
    let dir = dir.to_owned();
    ToolDef::builder("transfer", ToolClass::IdempotentWrite)
        .description("Move an amount between two accounts.")
        .input_schema(json!({"type": "object", "properties": {"amount": {"type": "integer"}}}))
        .handler(move |ctx: ToolContext, args: Value| {
            let dir = dir.clone();
            async move {
                let amount = args["amount"].as_u64().unwrap_or(0);
                let key = ctx.downstream_key().as_str().to_owned();
                if let Transfer::DebitBeforeItsStep = how {
                    apply(&dir, &format!("debit {amount}"), None);
                }
                let debit_key = format!("{key}-debit");
                ctx.step("debit", || async {
                    match how {
                        Transfer::Right => {
                            apply(&dir, &format!("debit {amount}"), Some(&debit_key))
                        }
                        Transfer::KeylessDebitInItsStep => {
                            apply(&dir, &format!("debit {amount}"), None)
                        }
                        Transfer::DebitBeforeItsStep => {}
                    }
                    Ok::<_, ToolError>(())
                })
                .await?;
                let credit_key = format!("{key}-credit");
                ctx.step("credit", || async {
                    apply(&dir, &format!("credit {amount}"), Some(&credit_key));
                    Ok::<_, ToolError>(())
                })
                .await?;
                Ok::<_, ToolError>(json!({"moved": amount}))
            }
        })
        .build()
        .expect("transfer")
}

/// A receipt: sent with the call's key (`keyed`), or with none, as a mail API without
/// idempotency keys; declared `class`.
fn receipt(dir: &Path, class: ToolClass, keyed: bool) -> ToolDef {
    let dir = dir.to_owned();
    ToolDef::builder("send_receipt", class)
        .description("Mail the customer a receipt.")
        .input_schema(json!({"type": "object"}))
        .handler(move |ctx: ToolContext, _: Value| {
            let dir = dir.clone();
            async move {
                let key = ctx.downstream_key().as_str().to_owned();
                apply(&dir, "receipt", keyed.then_some(key.as_str()));
                Ok::<_, ToolError>(json!("sent"))
            }
        })
        .build()
        .expect("receipt")
}

/// The agent's script: a transfer, then its receipt, in one run.
async fn script(setup: Setup, tools: Vec<ToolDef>) {
    let mut registry = Registry::builder();
    for tool in tools {
        registry = registry.add(tool);
    }
    let registry = registry.build().expect("registry");
    let dispatcher =
        setup.instrument(Dispatcher::new(registry, setup.store()).expect("dispatcher"));
    let run = RunContext::new("shop").with_run("run-1", 1);
    let calls = [
        ToolCall::new("transfer", json!({"amount": 100})).with_call_id("call_1"),
        ToolCall::new("send_receipt", json!({})).with_call_id("call_2"),
    ];
    for call in &calls {
        // An answer, whatever it is: a resumed call may be answered Unknown.
        let _ = dispatcher.dispatch(call, &run).await;
    }
}

async fn right(setup: Setup) {
    let dir = setup.dir().to_owned();
    let tools = vec![
        transfer(&dir, Transfer::Right),
        receipt(&dir, ToolClass::NonIdempotentWrite, false),
    ];
    script(setup, tools).await
}

async fn debit_before_its_step(setup: Setup) {
    let dir = setup.dir().to_owned();
    let tools = vec![
        transfer(&dir, Transfer::DebitBeforeItsStep),
        receipt(&dir, ToolClass::NonIdempotentWrite, false),
    ];
    script(setup, tools).await
}

async fn keyless_debit_in_its_step(setup: Setup) {
    let dir = setup.dir().to_owned();
    let tools = vec![
        transfer(&dir, Transfer::KeylessDebitInItsStep),
        receipt(&dir, ToolClass::NonIdempotentWrite, false),
    ];
    script(setup, tools).await
}

async fn receipt_declared_idempotent(setup: Setup) {
    let dir = setup.dir().to_owned();
    let tools = vec![
        transfer(&dir, Transfer::Right),
        receipt(&dir, ToolClass::IdempotentWrite, false),
    ];
    script(setup, tools).await
}

#[test]
fn a_transfer_and_its_receipt_hold_at_every_point() {
    let report = CrashTest::new(right).effects(ledger).run();
    println!("{report}");
    report.assert_held();
    assert_eq!(report.baseline, ["debit 100", "credit 100", "receipt"]);
    assert!(report.verdicts.len() >= 10, "{report}");
    // A receipt killed after it was sent and before its record is left for a person, not
    // sent again.
    let after_the_receipt = report
        .verdicts
        .iter()
        .find(|v| v.point.contains("after the body of `send_receipt`"))
        .expect("the point after the receipt's effect");
    assert_eq!(
        after_the_receipt.verdict,
        Verdict::Held {
            effects: 3,
            left_for_a_person: 1
        },
        "{report}"
    );
}

#[test]
fn an_effect_sent_before_its_step_is_journaled_is_caught() {
    let report = CrashTest::new(debit_before_its_step).effects(ledger).run();
    println!("{report}");
    assert!(!report.held(), "{report}");
    let caught: Vec<_> = report.broken().collect();
    assert!(
        caught
            .iter()
            .all(|v| matches!(&v.verdict, Verdict::Twice(t) if t[0].0 == "debit 100")),
        "{report}"
    );
    assert!(
        report.to_string().contains("TWICE: `debit 100` 2 times"),
        "{report}"
    );
}

#[test]
fn a_write_declared_idempotent_that_is_not_is_caught() {
    let report = CrashTest::new(receipt_declared_idempotent)
        .effects(ledger)
        .run();
    println!("{report}");
    assert!(!report.held(), "{report}");
    let caught: Vec<_> = report.broken().map(|v| v.point.as_str()).collect();
    assert!(
        caught
            .iter()
            .any(|p| p.contains("after the body of `send_receipt`")),
        "{report}"
    );
    assert!(
        report.to_string().contains("TWICE: `receipt` 2 times"),
        "{report}"
    );
}

/// A wire that needs a person's approval, and a reservation undone when its capture fails
/// for good: the points where an approval is consumed and where an undo runs are crashed at
/// too, and hold.
async fn approved_wire_and_an_undone_reservation(setup: Setup) {
    use idem::dispatch::UndoOptions;
    let dir = setup.dir().to_owned();
    let at = dir.clone();
    let wire = ToolDef::builder("wire", ToolClass::Irreversible)
        .description("Wire money out.")
        .input_schema(json!({"type": "object"}))
        .handler(move |ctx: ToolContext, _: Value| {
            let dir = at.clone();
            async move {
                apply(&dir, "wire 500", Some(ctx.downstream_key().as_str()));
                Ok::<_, ToolError>(json!("wired"))
            }
        })
        .build()
        .expect("wire");
    let at = dir.clone();
    let reserve = ToolDef::builder("reserve", ToolClass::IdempotentWrite)
        .description("Reserve stock.")
        .input_schema(json!({"type": "object"}))
        .handler(move |ctx: ToolContext, _: Value| {
            let dir = at.clone();
            async move {
                apply(&dir, "reserve", Some(ctx.downstream_key().as_str()));
                Ok::<_, ToolError>(json!({"hold": "h-1"}))
            }
        })
        .undo({
            let dir = dir.clone();
            move |ctx: ToolContext, _| {
                let dir = dir.clone();
                async move {
                    apply(&dir, "release", Some(ctx.downstream_key().as_str()));
                    Ok::<_, ToolError>(())
                }
            }
        })
        .build()
        .expect("reserve");
    let capture = ToolDef::builder("capture", ToolClass::NonIdempotentWrite)
        .description("Capture, declined for good.")
        .input_schema(json!({"type": "object"}))
        .handler(|_: ToolContext, _: Value| async move {
            Err::<Value, _>(ToolError::terminal("declined"))
        })
        .on_failure_undo_run(UndoOptions::only(["reserve"]))
        .build()
        .expect("capture");
    let registry = Registry::builder()
        .add(wire)
        .add(reserve)
        .add(capture)
        .build()
        .expect("registry");
    let keys = idem::approval::ApprovalKeys::new([approval_key()]);
    let dispatcher = Dispatcher::approving(registry, setup.store(), keys)
        .expect("dispatcher")
        .with_run_accounts(std::time::Duration::from_secs(3600));
    let dispatcher = setup.instrument(dispatcher);
    let run = RunContext::new("shop").with_run("run-1", 1);
    let wire_call = ToolCall::new("wire", json!({})).with_call_id("call_wire");
    // The person approves exactly the call refused, as the inbox would; the agent sends it
    // again with the approval.
    if let Err(idem::DispatchError::ApprovalRequired { request }) =
        dispatcher.dispatch(&wire_call, &run).await
    {
        let approver = idem::Approver::new("ops@example.com", approval_key());
        let approval = approver.approve_for(&request, std::time::Duration::from_secs(3600));
        let _ = dispatcher
            .dispatch(&wire_call, &run.clone().approve(approval))
            .await;
    }
    for (id, tool) in [("call_reserve", "reserve"), ("call_capture", "capture")] {
        let _ = dispatcher
            .dispatch(&ToolCall::new(tool, json!({})).with_call_id(id), &run)
            .await;
    }
}

fn approval_key() -> idem::ApprovalKey {
    idem::ApprovalKey::new("crash-1", *b"idem-crash-test-approval-key-32b").expect("a key")
}

#[test]
fn an_approval_consumed_and_an_undo_hold_at_every_point() {
    let report = CrashTest::new(approved_wire_and_an_undone_reservation)
        .effects(ledger)
        .run();
    println!("{report}");
    report.assert_held();
    assert_eq!(report.baseline, ["wire 500", "reserve", "release"]);
    for point in [
        "after step `idem:approval` was journaled",
        "before the body of `reserve.undo` (attempt 1)",
        "after the body of `reserve.undo` (attempt 1) returned, before its outcome is recorded",
    ] {
        assert!(
            report.points.iter().any(|p| p == point),
            "{point} in {report}"
        );
    }
}

/// A step's effect sent without a key is caught at the point between the effect and its
/// journal entry: the resumed call runs the step again.
#[test]
fn a_keyless_effect_inside_its_step_is_caught_before_its_journal_entry() {
    let report = CrashTest::new(keyless_debit_in_its_step)
        .effects(ledger)
        .run();
    println!("{report}");
    let caught: Vec<&str> = report.broken().map(|v| v.point.as_str()).collect();
    assert!(
        caught.contains(&"step `debit` done, before it is journaled"),
        "{report}"
    );
    assert!(
        report.to_string().contains("TWICE: `debit 100` 2 times"),
        "{report}"
    );
}

/// A point number to replay that the scenario does not have is refused, not "held".
#[test]
fn replaying_a_point_the_scenario_lacks_is_refused() {
    let report = CrashTest::new(right).effects(ledger).replay(999).run();
    assert!(!report.held(), "{report}");
    assert!(report.to_string().contains("no point 999"), "{report}");
}

/// Run inside an async runtime, a crash test says how it must be run instead of failing in
/// its workers.
#[tokio::test]
async fn a_crash_test_inside_a_runtime_says_to_run_it_from_a_plain_test() {
    let report = CrashTest::new(right).effects(ledger).run();
    assert!(!report.held());
    assert!(report.to_string().contains("plain `#[test]`"), "{report}");
}
