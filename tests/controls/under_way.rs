//! A precondition guards the start of a call's effect, never its continuation: a two-step
//! transfer (debit, then credit) whose precondition is "the source holds the amount" is
//! failed by its own debit once that step ran. A retry, a take-over of a stopped worker's
//! call and recovery's rerun carry the transfer on to its credit; none of them reports
//! "precondition failed, nothing was applied" while the debit stands.
//!
//! Beside it: a refused precondition stops all of the body's work (a handler that works when
//! called, before its future is polled, is not called), its details keep no secret its
//! message had cut, and a step may not take a name of the dispatcher's own.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use idem::dispatch::RecoveryOptions;
use idem::prelude::*;
use idem::{SecretKey, ToolDef};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::on_stores;
use crate::support::dispatcher::{dispatcher, with_tool};
use crate::world::{fresh_tenant, world};

/// Balances by tenant and account.
static BALANCES: LazyLock<Mutex<BTreeMap<(String, String), u64>>> = LazyLock::new(Mutex::default);

/// How the next credit of a tenant behaves.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Credit {
    Answers,
    /// Fails once, retryably, applying nothing.
    FailsOnce,
    /// Never answers, once (a worker stopping there).
    HangsOnce,
}

static CREDITS: LazyLock<Mutex<BTreeMap<String, Credit>>> = LazyLock::new(Mutex::default);

fn balance(tenant: &str, account: &str) -> u64 {
    let balances = BALANCES.lock().unwrap();
    balances
        .get(&(tenant.to_owned(), account.to_owned()))
        .copied()
        .unwrap_or(0)
}

fn set_balance(tenant: &str, account: &str, amount: u64) {
    let mut balances = BALANCES.lock().unwrap();
    balances.insert((tenant.to_owned(), account.to_owned()), amount);
}

/// The bank: moves `amount` in or out of `account` once per key (a repeated key changes
/// nothing, as a real API's idempotency keys do), and books it in the tenant's ledger.
fn book(tenant: &str, what: &str, account: &str, amount: i64, key: &str) {
    if world(tenant).apply(&format!("{what} {account} {}", amount.abs()), key) {
        let now = balance(tenant, account) as i64;
        set_balance(tenant, account, (now + amount) as u64);
    }
}

#[derive(Deserialize)]
struct Transfer {
    from: String,
    amount: u64,
}

/// The source still holds the amount.
async fn funded(ctx: ToolContext, args: Transfer) -> Result<(), ToolError> {
    let held = balance(ctx.tenant(), &args.from);
    if held < args.amount {
        return Err(ToolError::terminal(format!(
            "account {} holds {held}, less than {}",
            args.from, args.amount
        )));
    }
    Ok(())
}

/// Move money between two accounts: the debit, then the credit, each a step of its own.
#[tool(class = "idempotent_write", precondition = funded, lease_secs = 1)]
async fn move_money(
    ctx: &ToolContext,
    from: String,
    to: String,
    amount: u64,
) -> Result<String, ToolError> {
    let tenant = ctx.tenant().to_owned();
    let _: bool = ctx
        .step("debit", || async {
            book(
                &tenant,
                "debit",
                &from,
                -(amount as i64),
                ctx.downstream_key().as_str(),
            );
            Ok(true)
        })
        .await?;
    let credit = std::mem::replace(
        CREDITS
            .lock()
            .unwrap()
            .entry(tenant.clone())
            .or_insert(Credit::Answers),
        Credit::Answers,
    );
    match credit {
        Credit::FailsOnce => return Err(ToolError::retryable("the bank is busy, try again")),
        Credit::HangsOnce => std::future::pending::<()>().await,
        Credit::Answers => {}
    }
    let _: bool = ctx
        .step("credit", || async {
            book(
                &tenant,
                "credit",
                &to,
                amount as i64,
                ctx.downstream_key().as_str(),
            );
            Ok(true)
        })
        .await?;
    Ok(format!("moved {amount} from {from} to {to}"))
}

/// A tenant whose `a` holds 100 and `b` nothing, and whose next credit behaves as `credit`.
fn bank(tag: &str, credit: Credit) -> String {
    let tenant = fresh_tenant(tag);
    set_balance(&tenant, "a", 100);
    set_balance(&tenant, "b", 0);
    CREDITS.lock().unwrap().insert(tenant.clone(), credit);
    tenant
}

fn transfer_call(id: &str) -> ToolCall {
    ToolCall::new("move_money", json!({"from": "a", "to": "b", "amount": 80})).with_call_id(id)
}

fn shop(store: Arc<dyn idem::Store>) -> Dispatcher {
    let registry = Registry::builder()
        .tool::<move_money>()
        .build()
        .expect("registry");
    dispatcher(registry, store).with_run_accounts(Duration::from_secs(3600))
}

/// The money moved once, whole: the debit and the credit each applied once.
fn moved_once(tenant: &str) {
    assert_eq!(world(tenant).applied(), ["debit a 80", "credit b 80"]);
    assert_eq!((balance(tenant, "a"), balance(tenant, "b")), (20, 80));
}

async fn a_retry_after_the_debit_carries_the_transfer_on(store: Arc<dyn idem::Store>) {
    let tenant = bank("under_way_retry", Credit::FailsOnce);
    let d = shop(store);
    let run = RunContext::new(tenant.as_str()).with_run("run-retry", 1);
    let done = d
        .dispatch(&transfer_call("call_t1"), &run)
        .await
        .expect("the second attempt credits, without asking the precondition again");
    assert_eq!(done.output, json!("moved 80 from a to b"));
    assert_eq!(done.attempts, 2);
    moved_once(&tenant);
    // A duplicate replays the success.
    let again = d.dispatch(&transfer_call("call_t1"), &run).await.unwrap();
    assert!(again.deduplicated);
    moved_once(&tenant);
    let account = d.run_account(&tenant, "run-retry").await.unwrap();
    assert_eq!(account.counts(), vec![("applied", 1)]);
}

on_stores!(a_retry_after_the_debit_carries_the_transfer_on =>
    sqlite_a_retry_after_the_debit_carries_the_transfer_on,
    postgres_a_retry_after_the_debit_carries_the_transfer_on);

/// A dispatch stopped while its credit hangs (as a worker that died would leave the call):
/// its record is kept with the debit journaled, for the next holder.
async fn stopped_after_the_debit(d: &Dispatcher, run: &RunContext, tenant: &str) {
    let stopped = tokio::time::timeout(
        Duration::from_millis(500),
        d.dispatch(&transfer_call("call_t2"), run),
    )
    .await;
    assert!(stopped.is_err(), "the credit hangs: {stopped:?}");
    assert_eq!(world(tenant).applied(), ["debit a 80"]);
    // The stopped dispatch gives its claim back on another task; its lease ends then.
    tokio::time::sleep(Duration::from_millis(1500)).await;
}

async fn a_take_over_after_the_debit_carries_the_transfer_on(store: Arc<dyn idem::Store>) {
    let tenant = bank("under_way_takeover", Credit::HangsOnce);
    let d = shop(store);
    let run = RunContext::new(tenant.as_str()).with_run("run-takeover", 1);
    stopped_after_the_debit(&d, &run, &tenant).await;
    let done = d
        .dispatch(&transfer_call("call_t2"), &run)
        .await
        .expect("the take-over credits");
    assert_eq!(done.output, json!("moved 80 from a to b"));
    moved_once(&tenant);
}

on_stores!(a_take_over_after_the_debit_carries_the_transfer_on =>
    sqlite_a_take_over_after_the_debit_carries_the_transfer_on,
    postgres_a_take_over_after_the_debit_carries_the_transfer_on);

async fn recovery_after_the_debit_carries_the_transfer_on(store: Arc<dyn idem::Store>) {
    let tenant = bank("under_way_recover", Credit::HangsOnce);
    let d = shop(store);
    let run = RunContext::new(tenant.as_str()).with_run("run-recover", 1);
    stopped_after_the_debit(&d, &run, &tenant).await;
    let options = RecoveryOptions {
        tenant: Some(tenant.clone()),
        ..RecoveryOptions::default()
    };
    let report = d.recover(&options).await.expect("a recovery pass");
    assert_eq!(report.records.len(), 1, "{report:?}");
    moved_once(&tenant);
    // The call's record holds the transfer's success, replayed to the agent's next call.
    let replayed = d.dispatch(&transfer_call("call_t2"), &run).await.unwrap();
    assert!(replayed.deduplicated);
    assert_eq!(replayed.output, json!("moved 80 from a to b"));
}

on_stores!(recovery_after_the_debit_carries_the_transfer_on =>
    sqlite_recovery_after_the_debit_carries_the_transfer_on,
    postgres_recovery_after_the_debit_carries_the_transfer_on);

/// A tool whose handler does its work when called, before its future is polled, guarded by
/// a precondition that always refuses.
fn eager(effects: Arc<AtomicUsize>) -> ToolDef {
    ToolDef::builder("eager_write", ToolClass::NonIdempotentWrite)
        .description("Writes as soon as it is called.")
        .input_schema(json!({"type": "object", "properties": {"pin": {"type": "string"}}}))
        .secret("/pin")
        .precondition(|_ctx, args: Value| async move {
            let pin = args["pin"].as_str().unwrap_or_default().to_owned();
            Err(ToolError::not_applied(format!("pin {pin} is locked")))
        })
        .handler(move |_ctx: ToolContext, _args: Value| {
            effects.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, ToolError>(json!("written")) }
        })
        .build()
        .expect("the tool")
}

fn sealing_key() -> SecretKey {
    SecretKey::new(*b"idem-tests-secret-key-of-32bytes").unwrap()
}

/// A refused call of the eager tool, on `store`: neither its replay nor its record holds
/// the secret.
async fn refused_eager(store: Arc<idem::MemoryStore>, effects: Arc<AtomicUsize>) -> ToolError {
    let d = with_tool(eager(effects), store.clone()).with_secret_key(sealing_key());
    let call = ToolCall::new("eager_write", json!({"pin": "4821"})).with_call_id("call_e");
    let run = RunContext::new("eager");
    let refused = d.dispatch(&call, &run).await.unwrap_err();
    let replayed = d.dispatch(&call, &run).await.unwrap_err();
    assert!(!replayed.to_string().contains("4821"), "{replayed}");
    let key = d.record_key(&call, &run).unwrap().expect("a recorded call");
    let record = store
        .get(&key)
        .await
        .unwrap()
        .expect("the refusal is recorded");
    assert!(!format!("{record:?}").contains("4821"), "{record:?}");
    match refused {
        DispatchError::ToolFailed { error, .. } => error,
        other => panic!("a failed precondition is the call's refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn a_refused_precondition_stops_all_of_the_body() {
    let effects = Arc::new(AtomicUsize::new(0));
    let error = refused_eager(Arc::new(idem::MemoryStore::new()), effects.clone()).await;
    assert!(
        error
            .message()
            .starts_with("precondition failed, nothing was applied")
    );
    assert_eq!(
        effects.load(Ordering::SeqCst),
        0,
        "the handler did its work"
    );
}

#[tokio::test]
async fn a_failed_preconditions_details_keep_no_secret_its_message_cut() {
    let error = refused_eager(
        Arc::new(idem::MemoryStore::new()),
        Arc::new(AtomicUsize::new(0)),
    )
    .await;
    assert_eq!(
        error.message(),
        "precondition failed, nothing was applied: pin [redacted] is locked"
    );
    assert_eq!(
        error.details(),
        Some(&json!({"precondition": "pin [redacted] is locked"}))
    );
}

/// An execution wrapper that answers in the body's place without polling it.
struct Refuses;

impl idem::dispatch::Execution for Refuses {
    fn execute<'a>(
        &'a self,
        _attempt: idem::dispatch::Attempt<'a>,
        _body: idem::dispatch::BodyFuture<'a>,
    ) -> idem::dispatch::BodyFuture<'a> {
        Box::pin(async { Err(ToolError::terminal("refused by the execution wrapper")) })
    }
}

#[tokio::test]
async fn an_execution_that_answers_in_the_bodys_place_leaves_the_handler_uncalled() {
    let effects = Arc::new(AtomicUsize::new(0));
    let tool = ToolDef::builder("eager_unguarded", ToolClass::NonIdempotentWrite)
        .description("Writes as soon as it is called.")
        .input_schema(json!({"type": "object"}))
        .handler({
            let effects = effects.clone();
            move |_ctx: ToolContext, _args: Value| {
                effects.fetch_add(1, Ordering::SeqCst);
                async { Ok::<_, ToolError>(json!("written")) }
            }
        })
        .build()
        .unwrap();
    let d = with_tool(tool, Arc::new(idem::MemoryStore::new())).with_execution(Arc::new(Refuses));
    let call = ToolCall::new("eager_unguarded", json!({})).with_call_id("call_x");
    let refused = d
        .dispatch(&call, &RunContext::new("eager"))
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("refused by the execution wrapper"),
        "{refused}"
    );
    assert_eq!(
        effects.load(Ordering::SeqCst),
        0,
        "the handler did its work"
    );
}

/// A tool that names a step as the dispatcher names its own.
#[tool(class = "idempotent_write")]
async fn reserved_step(ctx: &ToolContext, name: String) -> Result<String, ToolError> {
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = ran.clone();
    let _: bool = ctx
        .step(&name, || async move {
            counted.fetch_add(1, Ordering::SeqCst);
            Ok(true)
        })
        .await?;
    Ok(format!("ran {}", ran.load(Ordering::SeqCst)))
}

#[tokio::test]
async fn a_step_named_as_the_dispatchers_own_is_refused_naming_it() {
    let registry = Registry::builder().tool::<reserved_step>().build().unwrap();
    let d = dispatcher(registry, Arc::new(idem::MemoryStore::new()));
    let run = RunContext::new("reserved");
    for (i, name) in ["idem:compensating", "idem:precondition", "idem:mine"]
        .into_iter()
        .enumerate()
    {
        let call = ToolCall::new("reserved_step", json!({"name": name}))
            .with_call_id(format!("call_r{i}"));
        let refused = d.dispatch(&call, &run).await.unwrap_err();
        assert_eq!(refused.code(), "tool_failed", "{refused}");
        assert!(
            refused.to_string().contains(&format!(
                "step `{name}` was not run: names beginning with `idem:` are reserved"
            )),
            "{refused}"
        );
    }
    let fine = ToolCall::new("reserved_step", json!({"name": "mine"})).with_call_id("call_ok");
    assert_eq!(
        d.dispatch(&fine, &run).await.unwrap().output,
        json!("ran 1")
    );
}
