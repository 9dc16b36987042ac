//! Limits across the calls of a run, as a new user would declare them, on SQLite,
//! PostgreSQL and Redis: workers of one run racing for the last unit of a budget apply exactly
//! the limit; twenty distinct refunds to one account stop at the per-destination limit; a
//! replay never counts twice and a failed call gives its share back; a model looping on one
//! tool is stopped by the breaker; the seed's two destructive calls need a person; a limit that
//! asks sends the call over it to a person, who lets it run once.

use std::sync::Arc;
use std::time::Duration;

use idem::prelude::*;
use idem::tool::{After, Limit};
use idem::{Store, ToolDef};
use serde_json::{Value, json};

use crate::support::dispatcher::{approver, dispatcher};
use crate::world::{fresh_tenant, world};

/// A refund to an account: applied once per key at the provider, failing when told to.
fn refund(limits: Vec<Limit>) -> ToolDef {
    let mut builder = ToolDef::builder("limited_refund", ToolClass::NonIdempotentWrite)
        .description("Refund an amount to an account.")
        .input_schema(json!({"type": "object", "properties": {
            "account": {"type": "string"}, "amount": {"type": "integer"},
            "fail": {"type": "boolean"}}}));
    for limit in limits {
        builder = builder.limit(limit);
    }
    builder
        .handler(|ctx: ToolContext, args: Value| async move {
            if args["fail"] == json!(true) {
                return Err(ToolError::terminal("the account is closed"));
            }
            let what = format!("refund {} {}", args["account"], args["amount"]);
            world(ctx.tenant()).apply(&what, ctx.downstream_key().as_str());
            Ok(json!("refunded"))
        })
        .build()
        .expect("the refund tool")
}

fn shop(store: Arc<dyn Store>, limits: Vec<Limit>) -> Dispatcher {
    dispatcher(
        Registry::builder().add(refund(limits)).build().unwrap(),
        store,
    )
}

fn refund_call(id: &str, account: &str, amount: u64) -> ToolCall {
    ToolCall::new(
        "limited_refund",
        json!({"account": account, "amount": amount}),
    )
    .with_call_id(id)
}

/// Sixteen workers of one run, each with a dispatcher of its own over the store, race for a
/// budget of five refunds: exactly five are applied, the others refused naming the limit.
pub async fn workers_racing_for_the_last_unit_apply_exactly_the_limit(store: Arc<dyn Store>) {
    let tenant = fresh_tenant("limits_race");
    let run = RunContext::new(tenant.as_str()).with_run("run-race", 1);
    let mut workers = Vec::new();
    for i in 0..16 {
        let d = shop(store.clone(), vec![Limit::calls("refunds per run", 5)]);
        let run = run.clone();
        workers.push(tokio::spawn(async move {
            d.dispatch(
                &refund_call(&format!("call_{i}"), &format!("acct-{i}"), 10),
                &run,
            )
            .await
        }));
    }
    let mut applied = 0;
    for worker in workers {
        match worker.await.unwrap() {
            Ok(_) => applied += 1,
            Err(e) => {
                assert_eq!(e.code(), "not_authorized", "{e}");
                assert!(
                    e.to_string()
                        .contains("the limit `refunds per run` (5 call(s) per run) is used up"),
                    "{e}"
                );
            }
        }
    }
    assert_eq!(applied, 5);
    assert_eq!(world(&tenant).effects("refund").len(), 5);
}

/// Twenty distinct refunds of 100 to one account, against 500 per destination a day: five
/// are applied, the rest refused; another account still has its own 500.
pub async fn twenty_refunds_to_one_account_stop_at_the_destination_limit(store: Arc<dyn Store>) {
    let tenant = fresh_tenant("limits_destination");
    let limit = Limit::sum("refunded per destination", "/amount", 500)
        .per_tenant_within(Duration::from_secs(86_400))
        .by("/account");
    let d = shop(store, vec![limit]);
    let mut refused = Vec::new();
    for i in 0..20 {
        // A run of its own each: a per-tenant limit spans runs.
        let run = RunContext::new(tenant.as_str()).with_run(format!("run-{i}"), 1);
        if let Err(e) = d
            .dispatch(&refund_call(&format!("call_{i}"), "NL91", 100), &run)
            .await
        {
            refused.push(e);
        }
    }
    assert_eq!(world(&tenant).effects("refund \"NL91\"").len(), 5);
    assert_eq!(refused.len(), 15);
    let first = refused[0].to_string();
    assert!(
        first.contains("500 used, 0 left, and the call takes 100"),
        "{first}"
    );
    assert!(
        !first.contains("NL91"),
        "a refusal names no argument's value: {first}"
    );
    let other = RunContext::new(tenant.as_str()).with_run("run-other", 1);
    d.dispatch(&refund_call("call_other", "DE44", 100), &other)
        .await
        .expect("another destination has its own budget");
}

/// The same call again is replayed without taking a second share; a call that fails gives its
/// share back, so the run can still make its three refunds.
pub async fn a_replay_never_counts_twice_and_a_failure_gives_its_share_back(store: Arc<dyn Store>) {
    let tenant = fresh_tenant("limits_replay");
    let d = shop(store, vec![Limit::calls("refunds per run", 3)]);
    let run = RunContext::new(tenant.as_str()).with_run("run-replay", 1);
    let first = refund_call("call_a", "acct-1", 10);
    d.dispatch(&first, &run).await.unwrap();
    for _ in 0..4 {
        assert!(d.dispatch(&first, &run).await.unwrap().deduplicated);
    }
    let failing = ToolCall::new(
        "limited_refund",
        json!({"account": "acct-2", "amount": 10, "fail": true}),
    )
    .with_call_id("call_failing");
    assert_eq!(
        d.dispatch(&failing, &run).await.unwrap_err().code(),
        "tool_failed"
    );
    d.dispatch(&refund_call("call_b", "acct-3", 10), &run)
        .await
        .unwrap();
    d.dispatch(&refund_call("call_c", "acct-4", 10), &run)
        .await
        .unwrap();
    let fourth = d
        .dispatch(&refund_call("call_d", "acct-5", 10), &run)
        .await
        .unwrap_err();
    assert_eq!(fourth.code(), "not_authorized", "{fourth}");
    assert_eq!(world(&tenant).effects("refund").len(), 3);
}

/// Each call says where its limits stand, and the run's account shows what is used and left
/// of each limit, call by call.
pub async fn the_account_shows_each_limit_used_and_left(store: Arc<dyn Store>) {
    let tenant = fresh_tenant("limits_account");
    let d = shop(store, vec![Limit::calls("refunds per run", 3)])
        .with_run_accounts(std::time::Duration::from_secs(3600));
    let run = RunContext::new(tenant.as_str()).with_run("run-account", 1);
    let first = d
        .dispatch(&refund_call("call_a", "acct-1", 10), &run)
        .await
        .unwrap();
    let used: Vec<(&str, u64, u64)> = first
        .limits
        .iter()
        .map(|l| (l.limit.as_str(), l.used, l.left))
        .collect();
    assert_eq!(used, [("refunds per run", 1, 2)]);
    let replay = d
        .dispatch(&refund_call("call_a", "acct-1", 10), &run)
        .await
        .unwrap();
    assert!(
        replay.deduplicated && replay.limits.is_empty(),
        "a replay takes no share"
    );
    d.dispatch(&refund_call("call_b", "acct-2", 10), &run)
        .await
        .unwrap();
    let account = d.run_account(&tenant, "run-account").await.unwrap();
    let stands: Vec<(&str, u64, u64)> = account
        .limits()
        .iter()
        .map(|l| (l.limit.as_str(), l.used, l.left))
        .collect();
    assert_eq!(stands, [("refunds per run", 2, 1)]);
    assert!(
        account
            .to_string()
            .contains("limit `refunds per run`: 2 used, 1 left"),
        "{account}"
    );
}

/// A model re-planning in a loop: the same tool under new call ids and new arguments, stopped
/// by the breaker after five calls in the run.
pub async fn a_model_looping_on_one_tool_is_stopped_by_the_breaker(store: Arc<dyn Store>) {
    let tenant = fresh_tenant("limits_loop");
    let d = shop(store, vec![Limit::calls("loop breaker", 5)]);
    let run = RunContext::new(tenant.as_str()).with_run("run-loop", 1);
    let mut answers = Vec::new();
    for i in 0..8 {
        let call = refund_call(&format!("call_{i}"), &format!("acct-{i}"), 1 + i);
        answers.push(d.dispatch(&call, &run.clone().at_step(i)).await);
    }
    assert_eq!(answers.iter().filter(|a| a.is_ok()).count(), 5);
    let stopped = answers.last().unwrap().as_ref().unwrap_err();
    assert!(stopped.to_string().contains("`loop breaker`"), "{stopped}");
}

/// The seed's two destructive calls: dropping a database, then deleting its backups, in one
/// run. Each alone may run; the second after the first needs a person.
pub async fn the_seeds_two_destructive_calls_need_a_person(store: Arc<dyn Store>) {
    let tenant = fresh_tenant("limits_combination");
    let tool = |name: &'static str| {
        ToolDef::builder(name, ToolClass::NonIdempotentWrite)
            .description("Destroy something.")
            .input_schema(json!({"type": "object", "properties": {"db": {"type": "string"}}}))
            .handler(move |ctx: ToolContext, args: Value| async move {
                world(ctx.tenant()).apply(
                    &format!("{name} {}", args["db"]),
                    ctx.downstream_key().as_str(),
                );
                Ok(json!("done"))
            })
    };
    let registry = Registry::builder()
        .add(tool("drop_database").build().unwrap())
        .add(
            tool("delete_backups")
                .after(After::ask("drop_database"))
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let d = dispatcher(registry, store);
    // Alone in a run, deleting backups runs.
    let other = RunContext::new(tenant.as_str()).with_run("run-cleanup", 1);
    let backups = ToolCall::new("delete_backups", json!({"db": "old"})).with_call_id("call_b0");
    d.dispatch(&backups, &other).await.unwrap();

    let run = RunContext::new(tenant.as_str()).with_run("run-seed", 1);
    let drop = ToolCall::new("drop_database", json!({"db": "prod"})).with_call_id("call_1");
    d.dispatch(&drop, &run).await.unwrap();
    let then = ToolCall::new("delete_backups", json!({"db": "prod"})).with_call_id("call_2");
    let asked = d.dispatch(&then, &run).await.unwrap_err();
    let request = asked
        .approval_request()
        .unwrap_or_else(|| panic!("{asked}"));
    assert!(world(&tenant).effects("delete_backups \"prod\"").is_empty());
    d.approvals()
        .approve(request, &approver(), None, None)
        .await
        .unwrap();
    d.dispatch(&then, &run).await.expect("approved by a person");
    assert_eq!(world(&tenant).effects("delete_backups \"prod\"").len(), 1);
}

/// A limit that asks: the call over it waits for a person; approved, it runs once, over the
/// limit, and counts.
pub async fn a_call_over_a_limit_that_asks_waits_for_a_person(store: Arc<dyn Store>) {
    let tenant = fresh_tenant("limits_ask");
    let limit = Limit::sum("refunded per run", "/amount", 100).ask_when_exceeded();
    let d = shop(store, vec![limit]);
    let run = RunContext::new(tenant.as_str()).with_run("run-ask", 1);
    d.dispatch(&refund_call("call_1", "acct-1", 80), &run)
        .await
        .unwrap();
    let over = refund_call("call_2", "acct-1", 50);
    let asked = d.dispatch(&over, &run).await.unwrap_err();
    assert_eq!(asked.code(), "approval_required", "{asked}");
    let request = asked.approval_request().unwrap();
    d.approvals()
        .approve(request, &approver(), None, None)
        .await
        .unwrap();
    d.dispatch(&over, &run)
        .await
        .expect("approved over the limit");
    assert!(d.dispatch(&over, &run).await.unwrap().deduplicated);
    assert_eq!(world(&tenant).effects("refund").len(), 2);
    // It counted: the next call over the limit asks again.
    let next = d
        .dispatch(&refund_call("call_3", "acct-1", 1), &run)
        .await
        .unwrap_err();
    assert_eq!(next.code(), "approval_required", "{next}");
}

crate::on_every_store!(
    the_account_shows_each_limit_used_and_left,
    workers_racing_for_the_last_unit_apply_exactly_the_limit,
    twenty_refunds_to_one_account_stop_at_the_destination_limit,
    a_replay_never_counts_twice_and_a_failure_gives_its_share_back,
    a_model_looping_on_one_tool_is_stopped_by_the_breaker,
    the_seeds_two_destructive_calls_need_a_person,
    a_call_over_a_limit_that_asks_waits_for_a_person,
);

#[test]
fn bad_limits_and_combinations_are_refused_at_registration_naming_the_tool_and_the_rule() {
    let schema = json!({"type": "object", "properties": {
        "amount": {"type": "number"}, "account": {"type": "string"}}});
    let built = |limit: Limit| {
        ToolDef::builder("pay", ToolClass::NonIdempotentWrite)
            .description("Pay.")
            .input_schema(schema.clone())
            .limit(limit)
            .handler(|_: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
            .build()
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    let wrong_type = built(Limit::sum("paid", "/amount", 5));
    assert!(
        wrong_type.contains("`pay`")
            && wrong_type.contains(
                "limit `paid`: `sum` adds up `/amount`, which the schema says is \"number\""
            ),
        "{wrong_type}"
    );
    let missing = built(Limit::calls("per account", 5).by("/acount"));
    assert!(
        missing.contains("`pay`") && missing.contains("limit `per account`: `by` entry `/acount`"),
        "{missing}"
    );
    let orphan = Registry::builder()
        .add(
            ToolDef::builder("delete_backups", ToolClass::NonIdempotentWrite)
                .description("Delete backups.")
                .input_schema(json!({"type": "object"}))
                .after(After::ask("drop_databse"))
                .handler(|_: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
                .build()
                .unwrap(),
        )
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        orphan.contains("`delete_backups`")
            && orphan
                .contains("`after` names the tool `drop_databse`, which is not in the registry"),
        "{orphan}"
    );
}

/// A limit the dispatcher adds to a tool it did not define counts as the tool's own would.
#[tokio::test]
async fn a_limit_the_dispatcher_adds_counts_like_the_tools_own() {
    let tenant = fresh_tenant("limits_dispatcher");
    let d = shop(Arc::new(idem::MemoryStore::new()), Vec::new())
        .with_limit("limited_refund", Limit::calls("refunds per run", 2))
        .unwrap();
    let run = RunContext::new(tenant.as_str()).with_run("run-added", 1);
    for i in 0..2 {
        d.dispatch(&refund_call(&format!("call_{i}"), "acct", 5), &run)
            .await
            .unwrap();
    }
    let third = d
        .dispatch(&refund_call("call_2", "acct", 5), &run)
        .await
        .unwrap_err();
    assert!(third.to_string().contains("`refunds per run`"), "{third}");
    let wrong = shop(Arc::new(idem::MemoryStore::new()), Vec::new())
        .with_limit("limited_refund", Limit::sum("paid", "/account", 5))
        .unwrap_err()
        .to_string();
    assert!(
        wrong.starts_with(
            "a limit for tool `limited_refund` cannot work: limit `paid`: `sum` adds up `/account`"
        ),
        "{wrong}"
    );
}
