//! The rules' checks at registration and their judgement of calls.

use super::*;
use serde_json::json;

fn schema() -> Value {
    json!({"type": "object", "properties": {
        "amount": {"type": "integer"}, "customer_id": {"type": "string"}}})
}

#[test]
fn a_rule_on_a_missing_pointer_or_of_the_wrong_type_is_refused() {
    let on = |v: Value| {
        serde_json::from_value::<Rule>(v)
            .unwrap()
            .check("authorize", &schema())
    };
    let err = on(json!({"pointer": "/amout", "at_most": 5})).unwrap_err();
    assert!(err.contains("`/amout`") && err.contains("amount"), "{err}");
    let err = on(json!({"pointer": "/customer_id", "at_most": {"limit": "refund"}})).unwrap_err();
    assert!(
        err.contains("compares numbers") && err.contains("string"),
        "{err}"
    );
    let err = on(json!({"pointer": "/amount", "at_most": "50"})).unwrap_err();
    assert!(err.contains("\"50\" is not a number"), "{err}");
    let err = on(json!({"pointer": "/amount", "equals": "x"})).unwrap_err();
    assert!(err.contains("can never equal"), "{err}");
    let err = on(json!({"pointer": "/amount", "at_most": 5, "above": 1})).unwrap_err();
    assert!(err.contains("2 comparisons"), "{err}");
    let err = on(json!({"pointer": "/amount", "equals": {"run": "customer"}})).unwrap_err();
    assert!(err.contains("acting_for"), "{err}");
    assert!(on(json!({"pointer": "/customer_id", "equals": {"run": "acting_for"}})).is_ok());
}

#[test]
fn rules_fail_safe_when_they_cannot_be_judged() {
    let rule = Rule::equals("/customer_id", json!({"run": "acting_for"}));
    let run = RunContext::new("t");
    let err = rule.holds(&json!({"customer_id": "c1"}), &run).unwrap_err();
    assert!(err.contains("acts for no one"), "{err}");
    let run = run.acting_for("c1");
    assert!(rule.holds(&json!({"customer_id": "c1"}), &run).is_ok());
    let err = rule.holds(&json!({"customer_id": "c2"}), &run).unwrap_err();
    assert_eq!(err, "`/customer_id` must equal the one the run acts for");
    let err = rule.holds(&json!({}), &run).unwrap_err();
    assert!(err.starts_with("`/customer_id` is missing"), "{err}");
    let limit = Rule::at_most("/amount", json!({"limit": "refund"}));
    let err = limit.holds(&json!({"amount": 1}), &run).unwrap_err();
    assert!(err.contains("no limit `refund`"), "{err}");
    let run = run.with_limit("refund", "fifty");
    let err = limit.holds(&json!({"amount": 1}), &run).unwrap_err();
    assert!(err.contains("is not a number"), "{err}");
}
