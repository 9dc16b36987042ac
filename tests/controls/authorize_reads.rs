//! Authorization that reads: "the order belongs to the customer this run acts for" needs a
//! read of the order book, made before anything is recorded. Another customer's order is
//! refused `not_authorized` with no record and no effect, even as a duplicate of a completed
//! call; a check that cannot read refuses; a precondition reads whom the run acts for and
//! its limits.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, LazyLock, Mutex};

use idem::prelude::*;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::authorize::shop;
use crate::on_stores;
use crate::world::{fresh_tenant, world};

/// The tenants whose order service does not answer.
static ORDER_SERVICE_DOWN: LazyLock<Mutex<BTreeSet<String>>> = LazyLock::new(Mutex::default);

/// Each order's total, by tenant and order, as the order service keeps it.
static TOTALS: LazyLock<Mutex<BTreeMap<(String, String), u64>>> = LazyLock::new(Mutex::default);

/// What a precondition read of its context: the tenant, whom the run acts for, a limit.
type Asked = (String, Option<String>, Option<Value>);

/// What each precondition read, in order.
static PRECONDITIONS: LazyLock<Mutex<Vec<Asked>>> = LazyLock::new(Mutex::default);

/// An order as the order service answers: its owner, whether it is cancelled, its total.
struct Order {
    owner: String,
    cancelled: bool,
    total: u64,
}

/// Read an order from the tenant's order service (a network call in a real shop).
async fn read_order(tenant: &str, order_id: &str) -> Result<Option<Order>, String> {
    tokio::task::yield_now().await;
    if ORDER_SERVICE_DOWN.lock().unwrap().contains(tenant) {
        return Err("the order service did not answer".into());
    }
    let total = TOTALS
        .lock()
        .unwrap()
        .get(&(tenant.to_owned(), order_id.to_owned()))
        .copied()
        .unwrap_or(0);
    Ok(world(tenant)
        .orders
        .get(order_id)
        .map(|(owner, cancelled)| Order {
            owner: owner.clone(),
            cancelled: *cancelled,
            total,
        }))
}

/// What the checks read of the call.
#[derive(Deserialize)]
struct OrderId {
    order_id: String,
}

/// The order belongs to the customer the run acts for, as the order book says.
async fn owns_the_order(ctx: ToolContext, args: OrderId) -> Result<(), String> {
    let order = read_order(ctx.tenant(), &args.order_id)
        .await
        .map_err(|e| format!("the order's owner could not be checked ({e}); try again"))?;
    match (order, ctx.acting_for()) {
        (Some(order), Some(me)) if order.owner == me => Ok(()),
        _ => Err("an agent may cancel only the orders of the customer it acts for".into()),
    }
}

/// The order is still open, still the customer's, and within what the run may cancel.
async fn still_cancellable(ctx: ToolContext, args: OrderId) -> Result<(), ToolError> {
    let limit = ctx.limit("cancel_up_to").cloned();
    PRECONDITIONS.lock().unwrap().push((
        ctx.tenant().to_owned(),
        ctx.acting_for().map(str::to_owned),
        limit.clone(),
    ));
    let order = read_order(ctx.tenant(), &args.order_id)
        .await
        .map_err(ToolError::retryable)?
        .ok_or_else(|| ToolError::terminal(format!("order {} does not exist", args.order_id)))?;
    if order.cancelled {
        return Err(ToolError::terminal(format!(
            "order {} is already cancelled",
            args.order_id
        )));
    }
    if Some(order.owner.as_str()) != ctx.acting_for() {
        return Err(ToolError::terminal(format!(
            "order {} changed hands since the call was authorized",
            args.order_id
        )));
    }
    match limit.as_ref().and_then(Value::as_u64) {
        Some(up_to) if order.total <= up_to => Ok(()),
        Some(up_to) => Err(ToolError::terminal(format!(
            "order {} is now {}, above the run's limit `cancel_up_to` ({up_to})",
            args.order_id, order.total
        ))),
        None => Err(ToolError::terminal(
            "the run carries no limit `cancel_up_to`",
        )),
    }
}

/// Cancel one of the customer's orders, by its id alone: whose it is, the order book says.
#[tool(
    class = "idempotent_write",
    authorize_async = owns_the_order,
    precondition = still_cancellable
)]
async fn cancel_order_by_id(ctx: &ToolContext, order_id: String) -> Result<String, ToolError> {
    let mut w = world(ctx.tenant());
    let key = ctx.downstream_key();
    w.apply(&format!("cancel {order_id}"), key.as_str());
    if let Some(order) = w.orders.get_mut(&order_id) {
        order.1 = true;
    }
    Ok(format!("order {order_id} cancelled"))
}

/// A tenant with two orders: `ord_a` of `cus_a` (total 30), `ord_b` of `cus_b`.
fn shop_of_two_customers(tag: &str) -> String {
    let tenant = fresh_tenant(tag);
    let mut w = world(&tenant);
    w.orders.insert("ord_a".into(), ("cus_a".into(), false));
    w.orders.insert("ord_b".into(), ("cus_b".into(), false));
    TOTALS
        .lock()
        .unwrap()
        .insert((tenant.clone(), "ord_a".into()), 30);
    tenant
}

fn cancel(order_id: &str, call_id: &str) -> ToolCall {
    ToolCall::new("cancel_order_by_id", json!({"order_id": order_id})).with_call_id(call_id)
}

fn preconditions_asked(tenant: &str) -> Vec<(Option<String>, Option<Value>)> {
    PRECONDITIONS
        .lock()
        .unwrap()
        .iter()
        .filter(|(t, ..)| t == tenant)
        .map(|(_, who, limit)| (who.clone(), limit.clone()))
        .collect()
}

async fn an_agent_is_refused_an_order_the_order_book_gives_another_customer(
    store: Arc<dyn idem::Store>,
) {
    let tenant = shop_of_two_customers("authorize-reads");
    let d = shop(store.clone());
    let run = RunContext::new(tenant.as_str())
        .with_run("run-1", 1)
        .acting_for("cus_a")
        .with_limit("cancel_up_to", 50);

    let theirs = cancel("ord_b", "call_1");
    let refused = d.dispatch(&theirs, &run).await.unwrap_err();
    assert_eq!(refused.code(), "not_authorized");
    match &refused {
        DispatchError::NotAuthorized { tool, rule } => {
            assert_eq!(tool, "cancel_order_by_id");
            assert_eq!(
                rule,
                "an agent may cancel only the orders of the customer it acts for"
            );
        }
        other => panic!("another customer's order must be refused, got {other:?}"),
    }
    let key = d.record_key(&theirs, &run).unwrap().expect("a keyed call");
    assert!(
        store.get(&key).await.unwrap().is_none(),
        "a refused call leaves no record"
    );
    assert!(world(&tenant).ledger.is_empty(), "and no effect");
    assert!(!world(&tenant).orders["ord_b"].1);
    assert!(
        preconditions_asked(&tenant).is_empty(),
        "nor is its precondition asked"
    );

    // Their own order goes through; its precondition saw whom the run acts for and its limit.
    let own = cancel("ord_a", "call_2");
    let done = d.dispatch(&own, &run).await.expect("their own order");
    assert_eq!(done.output, json!("order ord_a cancelled"));
    assert_eq!(world(&tenant).applied(), ["cancel ord_a"]);
    assert_eq!(
        preconditions_asked(&tenant),
        [(Some("cus_a".to_owned()), Some(json!(50)))]
    );

    // The same call again replays to the run it was made for, and is refused to a run acting
    // for another customer: the check is asked on every dispatch, before the replay.
    let again = d.dispatch(&own, &run).await.expect("a replay");
    assert!(again.deduplicated);
    let other_run = RunContext::new(tenant.as_str())
        .with_run("run-1", 1)
        .acting_for("cus_b");
    let stolen = d.dispatch(&own, &other_run).await.unwrap_err();
    assert_eq!(stolen.code(), "not_authorized");
    assert_eq!(world(&tenant).ledger.len(), 1, "one effect in all");
}

on_stores!(an_agent_is_refused_an_order_the_order_book_gives_another_customer =>
    sqlite_an_agent_is_refused_an_order_the_order_book_gives_another_customer,
    postgres_an_agent_is_refused_an_order_the_order_book_gives_another_customer);

async fn a_check_that_cannot_read_refuses_and_the_call_may_be_made_again(
    store: Arc<dyn idem::Store>,
) {
    let tenant = shop_of_two_customers("authorize-reads-down");
    let d = shop(store.clone());
    let run = RunContext::new(tenant.as_str())
        .with_run("run-1", 1)
        .acting_for("cus_a")
        .with_limit("cancel_up_to", 50);
    let own = cancel("ord_a", "call_1");

    ORDER_SERVICE_DOWN.lock().unwrap().insert(tenant.clone());
    let refused = d.dispatch(&own, &run).await.unwrap_err();
    assert_eq!(refused.code(), "not_authorized");
    assert_eq!(
        refused.to_string(),
        "`cancel_order_by_id` may not be called so in this run: the order's owner could not be checked (the order service did not answer); try again"
    );
    let key = d.record_key(&own, &run).unwrap().expect("a keyed call");
    assert!(store.get(&key).await.unwrap().is_none(), "no record");
    assert!(world(&tenant).ledger.is_empty(), "no effect");

    // Nothing was recorded: once the service answers, the same call goes through.
    ORDER_SERVICE_DOWN.lock().unwrap().remove(&tenant);
    let done = d.dispatch(&own, &run).await.expect("the same call, later");
    assert!(!done.deduplicated);
    assert_eq!(world(&tenant).applied(), ["cancel ord_a"]);
}

on_stores!(a_check_that_cannot_read_refuses_and_the_call_may_be_made_again =>
    sqlite_a_check_that_cannot_read_refuses_and_the_call_may_be_made_again,
    postgres_a_check_that_cannot_read_refuses_and_the_call_may_be_made_again);

async fn a_precondition_reads_whom_the_run_acts_for_and_its_limits(store: Arc<dyn idem::Store>) {
    let tenant = shop_of_two_customers("authorize-reads-limit");
    TOTALS
        .lock()
        .unwrap()
        .insert((tenant.clone(), "ord_a".into()), 80);
    let d = shop(store.clone());
    let run = RunContext::new(tenant.as_str())
        .with_run("run-1", 1)
        .acting_for("cus_a")
        .with_limit("cancel_up_to", 50);

    // Authorized (the order is theirs), but above the run's limit as the order stands now:
    // a recorded refusal of the precondition, nothing applied.
    let own = cancel("ord_a", "call_1");
    let failed = d.dispatch(&own, &run).await.unwrap_err();
    match &failed {
        DispatchError::ToolFailed { error, .. } => {
            assert_eq!(error.kind(), ErrorKind::Terminal);
            assert_eq!(
                error.message(),
                "precondition failed, nothing was applied: order ord_a is now 80, above the run's limit `cancel_up_to` (50)"
            );
        }
        other => panic!("the precondition must refuse, got {other:?}"),
    }
    let key = d.record_key(&own, &run).unwrap().expect("a keyed call");
    assert!(
        store.get(&key).await.unwrap().is_some(),
        "a failed precondition is the call's recorded outcome"
    );
    assert!(world(&tenant).ledger.is_empty());
    assert_eq!(
        preconditions_asked(&tenant),
        [(Some("cus_a".to_owned()), Some(json!(50)))]
    );

    // A run with a higher limit, in a call of its own, cancels it.
    let wider = run.clone().with_limit("cancel_up_to", 100);
    let done = d
        .dispatch(&cancel("ord_a", "call_2"), &wider)
        .await
        .expect("within the limit");
    assert_eq!(done.output, json!("order ord_a cancelled"));
    assert_eq!(
        preconditions_asked(&tenant).last(),
        Some(&(Some("cus_a".to_owned()), Some(json!(100))))
    );
}

on_stores!(a_precondition_reads_whom_the_run_acts_for_and_its_limits =>
    sqlite_a_precondition_reads_whom_the_run_acts_for_and_its_limits,
    postgres_a_precondition_reads_whom_the_run_acts_for_and_its_limits);

/// A tool built in code whose check panics, or quotes a secret argument.
fn careless_tool() -> idem::ToolDef {
    idem::ToolDef::builder("charge_saved_card", ToolClass::NonIdempotentWrite)
        .description("Charge the customer's saved card.")
        .input_schema(json!({"type": "object", "properties": {
            "card": {"type": "string"}, "cents": {"type": "integer"}}}))
        .secret("/card")
        .authorize_async(|ctx: ToolContext, args: Value| async move {
            if args["cents"] == json!(0) {
                panic!("the card service's client panicked");
            }
            match ctx.acting_for() {
                Some("cus_card") => Ok(()),
                _ => Err(format!("card {} is not the customer's", args["card"])),
            }
        })
        .handler(|ctx: ToolContext, args: Value| async move {
            world(ctx.tenant()).apply("charge", ctx.downstream_key().as_str());
            Ok(args["cents"].clone())
        })
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_check_that_panics_refuses_and_a_refusal_never_echoes_a_secret() {
    let tenant = fresh_tenant("authorize-reads-careless");
    let store: Arc<dyn idem::Store> = Arc::new(MemoryStore::new());
    let d = crate::support::dispatcher::with_tool(careless_tool(), store.clone())
        .with_secret_key(idem::SecretKey::new(*b"controls-tests-secret-key-32-byt").unwrap());
    let run = RunContext::new(tenant.as_str()).acting_for("cus_other");

    let call = ToolCall::new(
        "charge_saved_card",
        json!({"card": "4242424242424242", "cents": 100}),
    )
    .with_call_id("call_card");
    let refused = d.dispatch(&call, &run).await.unwrap_err();
    assert_eq!(refused.code(), "not_authorized");
    let text = refused.to_string();
    assert!(!text.contains("4242424242424242"), "{text}");
    assert!(text.contains("is not the customer's"), "{text}");

    let panics = ToolCall::new(
        "charge_saved_card",
        json!({"card": "4242424242424242", "cents": 0}),
    )
    .with_call_id("call_panics");
    let customer = RunContext::new(tenant.as_str()).acting_for("cus_card");
    let refused = d.dispatch(&panics, &customer).await.unwrap_err();
    assert_eq!(refused.code(), "not_authorized");
    assert!(refused.to_string().contains("panicked"), "{refused}");
    let key = d.record_key(&panics, &customer).unwrap().expect("keyed");
    assert!(store.get(&key).await.unwrap().is_none());
    assert!(world(&tenant).ledger.is_empty(), "nothing charged");
}
