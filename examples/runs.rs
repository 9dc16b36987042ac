//! The run is the unit: controls over a run's calls taken together, in one scripted session
//! of an operations agent: no LLM, no network, fake providers that count every request they
//! receive and what they applied, records in SQLite.
//!
//! - **Limits across a run's calls**: twenty distinct refunds of 100 to one account stop at
//!   500 per destination; the calls over it are refused, naming the limit, what is used and
//!   what is left.
//! - **The seed's two destructive calls**: dropping a database may run, but deleting its
//!   backups afterwards in the same run waits for a person.
//! - **A run that undoes itself**: a capture that fails for good releases the run's
//!   reservation before it answers, once at the provider.
//! - **A failure that goes to a person**: a payout that fails is sent to a person; the
//!   operator lets it run again, and the agent's retry pays out once.
//! - **The run's account**: every call, the decisions, the undos and what each limit has
//!   left, checked against the providers' own counts: a request idem sent twice, or an
//!   account that disagrees with the providers, fails the example.
//!
//! ```text
//! cargo run --example runs
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem::dispatch::{AppliedCall, CallOutcome, CaseDecision, UndoOptions};
use idem::prelude::*;
use idem::tool::{After, Limit};
use idem::{ApprovalKey, SqliteStore, ToolDef, approval::ApprovalKeys};
use serde_json::{Value, json};

/// The providers: every request they received and what each applied, by key. A repeated key
/// applies nothing (as their idempotency keys promise) but is still a request received.
struct Providers {
    received: Vec<(String, String)>,
    applied: Vec<(String, String)>,
}

static PROVIDERS: Mutex<Providers> = Mutex::new(Providers {
    received: Vec::new(),
    applied: Vec::new(),
});

/// A request for `what` under `key`: counted whatever it is, applied once per key.
fn request(what: String, key: &str) {
    let mut p = PROVIDERS.lock().unwrap_or_else(|e| e.into_inner());
    p.received.push((what.clone(), key.to_owned()));
    if !p.applied.iter().any(|(_, k)| k == key) {
        p.applied.push((what, key.to_owned()));
    }
}

/// How many requests for `prefix` the providers received, and how many they applied.
fn counts(prefix: &str) -> (usize, usize) {
    let p = PROVIDERS.lock().unwrap_or_else(|e| e.into_inner());
    let n = |r: &[(String, String)]| r.iter().filter(|(w, _)| w.starts_with(prefix)).count();
    (n(&p.received), n(&p.applied))
}

// ---- Refunds: limits across the run's calls.

/// A loop breaker, and at most 500 to any one account, per run.
fn refund_limits() -> Vec<Limit> {
    vec![
        Limit::calls("refunds per run", 10),
        Limit::sum("refunded per destination", "/amount", 500).by("/account"),
    ]
}

/// Refund an amount to an account.
#[tool(class = "non_idempotent_write", limits = refund_limits)]
async fn refund(ctx: &ToolContext, account: String, amount: u64) -> Result<String, ToolError> {
    request(
        format!("refund {amount} to {account}"),
        ctx.downstream_key().as_str(),
    );
    Ok(format!("refunded {amount} to {account}"))
}

// ---- Payouts: a failure goes to a person.

/// The bank's payout service is down for the first request.
static BANK_DOWN: AtomicBool = AtomicBool::new(true);

/// Pay a supplier.
#[tool(class = "non_idempotent_write", escalate = "failures")]
async fn payout(ctx: &ToolContext, supplier: String, amount: u64) -> Result<String, ToolError> {
    if BANK_DOWN.swap(false, Ordering::SeqCst) {
        return Err(ToolError::terminal("the bank's payout service is down"));
    }
    request(
        format!("payout {amount} to {supplier}"),
        ctx.downstream_key().as_str(),
    );
    Ok(format!("paid {amount} to {supplier}"))
}

/// A write built by hand (the rules below have no `#[tool]` key): it asks its provider for
/// `verb` and the call's `what` argument under the call's key.
fn write(name: &'static str, class: ToolClass, verb: &'static str) -> idem::tool::ToolBuilder {
    ToolDef::builder(name, class)
        .description(format!("{verb} something."))
        .input_schema(json!({"type": "object", "properties": {"what": {"type": "string"}}}))
        .handler(move |ctx: ToolContext, args: Value| async move {
            let what = args["what"].as_str().unwrap_or_default().to_owned();
            request(format!("{verb} {what}"), ctx.downstream_key().as_str());
            Ok::<_, ToolError>(json!(format!("{verb} {what}: done")))
        })
}

fn registry() -> Result<Registry, Box<dyn std::error::Error>> {
    // The seed's two destructive calls: each may run alone; the second after the first, in
    // the same run, needs a person.
    let drop_database = write("drop_database", ToolClass::NonIdempotentWrite, "drop").build()?;
    let delete_backups = write("delete_backups", ToolClass::NonIdempotentWrite, "delete")
        .after(After::ask("drop_database"))
        .build()?;
    // A reservation that can be undone: the provider releases the hold under the undo's own
    // key, the same on every attempt, so it releases once.
    let reserve = write("reserve", ToolClass::IdempotentWrite, "reserve")
        .undo(|ctx: ToolContext, applied: AppliedCall| async move {
            // The arguments as recorded: what was reserved.
            let what = applied.arguments["what"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            request(format!("release {what}"), ctx.downstream_key().as_str());
            Ok::<_, ToolError>(())
        })
        .build()?;
    // A capture that fails for good, and then releases the run's reservations.
    let capture = ToolDef::builder("capture", ToolClass::NonIdempotentWrite)
        .description("Capture a reserved amount.")
        .input_schema(json!({"type": "object", "properties": {"what": {"type": "string"}}}))
        .handler(|_: ToolContext, _: Value| async move {
            Err::<Value, _>(ToolError::terminal("the card was declined"))
        })
        .on_failure_undo_run(UndoOptions::only(["reserve"]))
        .build()?;
    Ok(Registry::builder()
        .tool::<refund>()
        .tool::<payout>()
        .add(drop_database)
        .add(delete_backups)
        .add(reserve)
        .add(capture)
        .build()?)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::temp_dir().join(format!("idem-runs-{}.db", std::process::id()));
    let store = Arc::new(SqliteStore::open(&path)?);
    // The approvals desk's key: a call that waits for a person is approved under it.
    let key = ApprovalKey::new("ops-2026-12", *b"example-approval-key-not-secret!")?;
    let agent = Dispatcher::approving(registry()?, store, ApprovalKeys::new([key]))?
        .with_run_accounts(Duration::from_secs(24 * 3600));
    let run = RunContext::new("ops").with_run("incident-7", 0);
    let mut step = 0;
    let mut next = |tool: &str, args: Value| {
        step += 1;
        let call = ToolCall::new(tool, args).with_call_id(format!("call_{step}"));
        (call, run.clone().at_step(step))
    };
    let say = |what: &str, result: &Result<Dispatched, DispatchError>| match result {
        Ok(done) if done.deduplicated => println!("{what}: {} (replayed)", done.output),
        Ok(done) => println!("{what}: {}", done.output),
        Err(e) => println!("{what}: refused ({}): {e}", e.code()),
    };

    // 1. Twenty distinct refunds of 100 to one account: outcomes printed as runs of equals.
    println!("-- limits across a run's calls");
    let mut outcomes: Vec<(usize, usize, String)> = Vec::new();
    let mut last_applied = None;
    for i in 1..=20 {
        let (call, at) = next("refund", json!({"account": "NL91", "amount": 100}));
        let said = match agent.dispatch(&call, &at).await {
            Ok(done) => {
                last_applied = Some(done);
                "applied".to_owned()
            }
            Err(e) => format!("refused ({}): {e}", e.code()),
        };
        match outcomes.last_mut() {
            Some((_, to, was)) if *was == said => *to = i,
            _ => outcomes.push((i, i, said)),
        }
    }
    for (from, to, said) in &outcomes {
        println!("refunds {from}-{to} of 100 to NL91: {said}");
    }
    let last = last_applied.expect("some refunds are applied");
    for l in &last.limits {
        println!(
            "after the last one applied, `{}`: {} used, {} left",
            l.limit, l.used, l.left
        );
    }

    // 2. Drop the database, then delete its backups, in the same run.
    println!("\n-- the seed's two destructive calls");
    let (call, at) = next("drop_database", json!({"what": "prod"}));
    say("drop_database prod", &agent.dispatch(&call, &at).await);
    let (call, at) = next("delete_backups", json!({"what": "prod"}));
    say("delete_backups prod", &agent.dispatch(&call, &at).await);

    // 3. Reserve, then a capture that fails for good: the reservation is released first.
    println!("\n-- a run that undoes itself");
    let (call, at) = next("reserve", json!({"what": "o-1"}));
    say("reserve o-1", &agent.dispatch(&call, &at).await);
    let (call, at) = next("capture", json!({"what": "o-1"}));
    say("capture o-1", &agent.dispatch(&call, &at).await);

    // 4. A payout that fails goes to a person; the agent is answered `escalated` until then.
    println!("\n-- a failure that goes to a person");
    let (pay, pay_at) = next("payout", json!({"supplier": "ACME", "amount": 900}));
    say("payout 900 to ACME", &agent.dispatch(&pay, &pay_at).await);
    say("payout, sent again", &agent.dispatch(&pay, &pay_at).await);
    // The operator, at the desk (`idem cases`, the inbox), sees the case and has it run again.
    let cases = agent.cases().pending(Some("ops"), 10).await?;
    for case in &cases {
        let mut before: Vec<(&str, usize)> = Vec::new();
        for a in &case.escalation.applied_before {
            match before.last_mut() {
                Some((tool, n)) if *tool == a.tool => *n += 1,
                _ => before.push((&a.tool, 1)),
            }
        }
        let before: Vec<String> = before.iter().map(|(t, n)| format!("{n} {t}")).collect();
        println!(
            "case: {} [{}]: {}; the run applied before it: {}",
            case.tool,
            case.escalation.call_id.as_deref().unwrap_or("-"),
            case.escalation.error.message(),
            before.join(", "),
        );
    }
    let case = cases
        .iter()
        .find(|c| c.tool == "payout")
        .expect("the payout waits for a person");
    let decided = agent
        .cases()
        .decide(case, "ops@example.com", CaseDecision::Retry)
        .await?;
    println!(
        "ops@example.com decided: {} ({})",
        decided.decision, decided.said
    );
    say(
        "payout, the agent's retry",
        &agent.dispatch(&pay, &pay_at).await,
    );
    say("payout, sent again", &agent.dispatch(&pay, &pay_at).await);

    // 5. The run's account, from the store, checked against the providers.
    let account = agent.run_account("ops", "incident-7").await?;
    println!("\n{account}");
    let effects = [
        // The account's tool, the providers' request, and how many should be applied.
        ("refund", "refund", 5),
        ("drop_database", "drop", 1),
        ("delete_backups", "delete", 0),
        ("reserve", "reserve", 1),
        ("capture", "capture", 0),
        ("reserve.undo", "release", 1),
        ("payout", "payout", 1),
    ];
    let line: Vec<String> = effects
        .iter()
        .map(|(_, what, _)| format!("{} {what}", counts(what).1))
        .collect();
    println!(
        "\nproviders applied: {}, from {} request(s) received",
        line.join(", "),
        counts("").0
    );

    // Each effect applied as expected, asked for once, and the account says so.
    let mut wrong = Vec::new();
    for (tool, what, n) in effects {
        let (received, applied) = counts(what);
        let accounted = account
            .calls
            .iter()
            .filter(|c| c.tool == tool && c.outcome == CallOutcome::Applied)
            .count();
        if (received, applied, accounted) != (n, n, n) {
            wrong.push(format!(
                "{what}: {received} request(s), {applied} applied, {accounted} `{tool}` \
                 applied in the account; expected {n}"
            ));
        }
    }
    let entry = |tool: &str| account.calls.iter().find(|c| c.tool == tool);
    let applied_in_account = |tool: &str| {
        account
            .calls
            .iter()
            .filter(|c| c.tool == tool && c.outcome == CallOutcome::Applied)
            .count()
    };
    for (tool, what) in [
        ("refund", "refund"),
        ("drop_database", "drop"),
        ("reserve", "reserve"),
        ("reserve.undo", "release"),
        ("payout", "payout"),
    ] {
        if applied_in_account(tool) != counts(what).1 {
            wrong.push(format!(
                "the account has {} `{tool}` applied, the providers {}",
                applied_in_account(tool),
                counts(what).1
            ));
        }
    }
    if entry("delete_backups").map(|c| &c.outcome) != Some(&CallOutcome::PendingApproval) {
        wrong.push("delete_backups is not waiting for a person".into());
    }
    if entry("reserve").and_then(|c| c.undo.as_deref()) != Some("undone") {
        wrong.push("the reservation is not marked undone".into());
    }
    if entry("payout")
        .and_then(|c| c.decided.as_ref())
        .map(|d| d.by.as_str())
        != Some("ops@example.com")
    {
        wrong.push("the payout's decision is not kept".into());
    }
    let stands: Vec<(&str, u64, u64)> = account
        .limits()
        .iter()
        .map(|l| (l.limit.as_str(), l.used, l.left))
        .collect();
    if stands
        != [
            ("refunds per run", 5, 5),
            ("refunded per destination", 500, 0),
        ]
    {
        wrong.push(format!("the limits stand at {stands:?}"));
    }
    drop(agent);
    let _ = std::fs::remove_file(&path);
    if !wrong.is_empty() {
        eprintln!(
            "the account and the providers disagree:\n{}",
            wrong.join("\n")
        );
        std::process::exit(1);
    }
    Ok(())
}
