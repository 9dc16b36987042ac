//! Permission by argument: an agent acting for one customer is refused on another's order,
//! before anything is recorded or applied; bad rules are refused when the tool is built.

use std::sync::Arc;

use idem::prelude::*;
use idem::tool::ToolSpec;
use serde::Deserialize;
use serde_json::json;

use crate::on_stores;
use crate::support::dispatcher::dispatcher;
use crate::world::{fresh_tenant, world};

/// The arguments the check reads.
#[derive(Deserialize)]
struct OrderOwner {
    customer_id: String,
}

/// Only the orders of the customer the run acts for.
fn own_orders(args: &OrderOwner, run: &RunContext) -> Result<(), String> {
    match run.acting_for.as_deref() == Some(args.customer_id.as_str()) {
        true => Ok(()),
        false => Err("an agent may cancel only the orders of the customer it acts for".into()),
    }
}

/// Cancel one of the customer's orders.
#[tool(class = "idempotent_write", authorize = own_orders)]
async fn cancel_order(
    ctx: &ToolContext,
    customer_id: String,
    order_id: String,
) -> Result<String, ToolError> {
    let mut w = world(ctx.tenant());
    let key = ctx.downstream_key();
    w.apply(&format!("cancel {order_id} of {customer_id}"), key.as_str());
    if let Some(order) = w.orders.get_mut(&order_id) {
        order.1 = true;
    }
    Ok(format!("order {order_id} cancelled"))
}

/// The refund tool as data: the customer must be the one the run acts for, and a refund
/// above the run's limit waits for a person.
pub fn refund_spec() -> ToolSpec {
    serde_json::from_value(json!({
        "name": "refund",
        "class": "non_idempotent_write",
        "description": "Refund part of an order to the customer.",
        "input_schema": {"type": "object", "properties": {
            "customer_id": {"type": "string"},
            "order_id": {"type": "string"},
            "amount": {"type": "integer"}},
            "required": ["customer_id", "order_id", "amount"]},
        "authorize": [{"pointer": "/customer_id", "equals": {"run": "acting_for"}}],
        "approve_when": [{"pointer": "/amount", "above": {"limit": "refund"}}]
    }))
    .expect("the refund spec")
}

/// The refund tool, its body paying through the fake provider.
pub fn refund_tool() -> idem::tool::ToolDef {
    refund_spec()
        .into_def(|ctx: ToolContext, args: serde_json::Value| async move {
            let mut w = world(ctx.tenant());
            let what = format!("refund {} on {}", args["amount"], args["order_id"]);
            w.apply(&what, ctx.downstream_key().as_str());
            Ok(json!({"refunded": args["amount"]}))
        })
        .expect("the refund tool")
}

/// The linked tools and the refund tool.
pub fn shop(store: Arc<dyn idem::Store>) -> Dispatcher {
    let registry = Registry::builder()
        .linked()
        .add(refund_tool())
        .build()
        .expect("registry");
    dispatcher(registry, store)
}

async fn an_agent_for_one_customer_is_refused_on_anothers_order(store: Arc<dyn idem::Store>) {
    let tenant = fresh_tenant("authorize");
    {
        let mut w = world(&tenant);
        w.orders.insert("ord_a".into(), ("cus_a".into(), false));
        w.orders.insert("ord_b".into(), ("cus_b".into(), false));
    }
    let d = shop(store.clone());
    let run = RunContext::new(tenant.as_str())
        .with_run("run-1", 1)
        .acting_for("cus_a");
    let theirs = ToolCall::new(
        "cancel_order",
        json!({"customer_id": "cus_b", "order_id": "ord_b"}),
    )
    .with_call_id("call_1");
    match d.dispatch(&theirs, &run).await {
        Err(DispatchError::NotAuthorized { tool, rule }) => {
            assert_eq!(tool, "cancel_order");
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

    // Their own order goes through.
    let own = ToolCall::new(
        "cancel_order",
        json!({"customer_id": "cus_a", "order_id": "ord_a"}),
    )
    .with_call_id("call_2");
    let done = d.dispatch(&own, &run).await.expect("their own order");
    assert_eq!(done.output, json!("order ord_a cancelled"));
    assert_eq!(world(&tenant).ledger.len(), 1);

    // A run acting for nobody is refused by the data-defined rule, naming it.
    let anyone = RunContext::new(tenant.as_str()).with_run("run-1", 2);
    let refund = ToolCall::new(
        "refund",
        json!({"customer_id": "cus_a", "order_id": "ord_a", "amount": 5}),
    )
    .with_call_id("call_3");
    match d.dispatch(&refund, &anyone).await {
        Err(DispatchError::NotAuthorized { rule, .. }) => {
            assert!(rule.contains("acts for no one"), "{rule}")
        }
        other => panic!("a rule that cannot be judged refuses, got {other:?}"),
    }
    let theirs = ToolCall::new(
        "refund",
        json!({"customer_id": "cus_b", "order_id": "ord_b", "amount": 5}),
    )
    .with_call_id("call_4");
    let refused = d.dispatch(&theirs, &run).await.unwrap_err();
    assert_eq!(refused.code(), "not_authorized");
    assert_eq!(
        refused.to_string(),
        "`refund` may not be called so in this run: `/customer_id` must equal the one the run acts for"
    );
    assert_eq!(world(&tenant).ledger.len(), 1, "nothing refunded");
}

on_stores!(an_agent_for_one_customer_is_refused_on_anothers_order =>
    sqlite_an_agent_for_one_customer_is_refused_on_anothers_order,
    postgres_an_agent_for_one_customer_is_refused_on_anothers_order);

#[test]
fn bad_rules_are_refused_when_the_tool_is_built_naming_the_tool_and_the_rule() {
    let with_rule = |rule: serde_json::Value| {
        let mut spec = serde_json::to_value(json!({
            "name": "refund",
            "class": "non_idempotent_write",
            "description": "Refund part of an order.",
            "input_schema": {"type": "object", "properties": {
                "customer_id": {"type": "string"}, "amount": {"type": "integer"}}},
        }))
        .unwrap();
        spec["authorize"] = json!([rule]);
        let spec: ToolSpec = serde_json::from_value(spec).unwrap();
        spec.into_def(|_, args| async move { Ok(args) })
            .unwrap_err()
            .to_string()
    };
    let missing = with_rule(json!({"pointer": "/customer", "equals": {"run": "acting_for"}}));
    assert!(
        missing.contains("`refund`") && missing.contains("`/customer`"),
        "{missing}"
    );
    let wrong_type = with_rule(json!({"pointer": "/customer_id", "at_most": {"limit": "refund"}}));
    assert!(
        wrong_type.contains("`refund`")
            && wrong_type.contains("`/customer_id` at_most {\"limit\":\"refund\"}")
            && wrong_type.contains("compares numbers"),
        "{wrong_type}"
    );
    let wrong_limit = with_rule(json!({"pointer": "/amount", "at_most": "fifty"}));
    assert!(
        wrong_limit.contains("\"fifty\" is not a number"),
        "{wrong_limit}"
    );
}

#[derive(Deserialize)]
struct CardOwner {
    card: String,
}

/// A careless check that quotes the card in its refusal.
fn own_card(args: &CardOwner, run: &RunContext) -> Result<(), String> {
    match run.acting_for.as_deref() == Some("cus_card") {
        true => Ok(()),
        false => Err(format!("card {} is not the customer's", args.card)),
    }
}

/// Charge the customer's card.
#[tool(class = "non_idempotent_write", authorize = own_card)]
async fn charge_card(#[secret] card: String, cents: u64) -> Result<u64, ToolError> {
    let _ = card;
    Ok(cents)
}

#[tokio::test]
async fn a_refusal_never_echoes_a_secret_argument() {
    let d = shop(Arc::new(MemoryStore::new()))
        .with_secret_key(idem::SecretKey::new(*b"controls-tests-secret-key-32-byt").unwrap());
    let run = RunContext::new("t").acting_for("cus_other");
    let call = ToolCall::new(
        "charge_card",
        json!({"card": "4242424242424242", "cents": 100}),
    )
    .with_call_id("call_card");
    let refused = d.dispatch(&call, &run).await.unwrap_err();
    assert_eq!(refused.code(), "not_authorized");
    let text = refused.to_string();
    assert!(!text.contains("4242424242424242"), "{text}");
    assert!(text.contains("is not the customer's"), "{text}");
}
