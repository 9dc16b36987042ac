//! The registry: linked tools, duplicate names, tools built at runtime and from data.

mod support;

use idem::prelude::*;
use idem::{ToolDef, ToolSpec, registry::RegistryError, tool::StaticTool};
use serde_json::{Value, json};
use support::dispatcher::with_tool;

/// Look up a customer.
#[tool(class = "read")]
fn lookup_customer(
    /// Customer identifier.
    id: String,
    /// Include closed accounts.
    include_closed: Option<bool>,
) -> Result<Value, ToolError> {
    Ok(json!({"id": id, "closed": include_closed.unwrap_or(false)}))
}

mod billing {
    use super::*;

    /// Refund a payment.
    #[tool(class = "non_idempotent_write", name = "refund")]
    pub fn refund_v1(payment: String) -> Result<String, ToolError> {
        Ok(payment)
    }
}

mod payments {
    use super::*;

    /// Refund a payment (new implementation).
    #[tool(class = "non_idempotent_write", name = "refund")]
    pub fn refund_v2(payment: String) -> Result<String, ToolError> {
        Ok(payment)
    }
}

#[test]
fn two_tools_with_one_name_are_an_error_naming_both_definitions() {
    match Registry::linked() {
        Err(RegistryError::DuplicateName {
            name,
            first,
            second,
        }) => {
            assert_eq!(name, "refund");
            assert!(
                first.contains("registry.rs:") && second.contains("registry.rs:"),
                "{first} / {second}"
            );
            assert_ne!(first, second);
            let message = RegistryError::DuplicateName {
                name,
                first: first.clone(),
                second: second.clone(),
            }
            .to_string();
            assert!(
                message.contains(&first) && message.contains(&second),
                "{message}"
            );
        }
        other => panic!("expected a duplicate-name error, got {other:?}"),
    }
}

#[test]
fn linked_tools_carry_their_class_schema_and_docs() {
    let registry = Registry::builder()
        .tool::<lookup_customer>()
        .tool::<billing::refund_v1>()
        .build()
        .unwrap();
    let t = registry.get("lookup_customer").unwrap();
    assert_eq!(t.class(), ToolClass::Read);
    assert_eq!(<lookup_customer as StaticTool>::CLASS, ToolClass::Read);
    assert_eq!(t.description(), "Look up a customer.");
    let schema = t.input_schema();
    assert_eq!(schema["type"], "object");
    assert_eq!(
        schema["required"],
        json!(["id"]),
        "Option parameters are optional"
    );
    assert_eq!(
        schema["properties"]["id"]["description"],
        "Customer identifier."
    );
    assert_eq!(schema["additionalProperties"], json!(false));
    assert!(
        registry.get("refund").is_some(),
        "the name attribute renames the tool"
    );
    assert_eq!(
        registry.get("refund").unwrap().class(),
        ToolClass::NonIdempotentWrite
    );
}

#[test]
fn a_runtime_tool_needs_a_description_and_an_object_schema() {
    let handler = |_: ToolContext, v: Value| async move { Ok::<_, ToolError>(v) };
    let no_description = ToolDef::builder("t", ToolClass::Read)
        .input_schema(json!({"type": "object"}))
        .handler(handler)
        .build();
    assert!(
        matches!(no_description, Err(RegistryError::Invalid { .. })),
        "{no_description:?}"
    );
    let not_object = ToolDef::builder("t", ToolClass::Read)
        .description("d")
        .input_schema(json!({"type": "string"}))
        .handler(handler)
        .build();
    assert!(matches!(not_object, Err(RegistryError::Invalid { .. })));
    let bad_name = ToolDef::builder("has space", ToolClass::Read)
        .description("d")
        .input_schema(json!({"type": "object"}))
        .handler(handler)
        .build();
    assert!(matches!(bad_name, Err(RegistryError::InvalidName { .. })));
}

#[test]
fn a_definition_from_data_without_a_class_is_refused_naming_the_tool() {
    let spec: ToolSpec = serde_json::from_value(json!({
        "name": "close_account",
        "description": "Close an account.",
        "inputSchema": {"type": "object", "properties": {"id": {"type": "string"}}}
    }))
    .unwrap();
    let err = Registry::builder()
        .try_add(spec.into_def(|_, v| async move { Ok(v) }))
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        RegistryError::MissingClass {
            tool: "close_account".into()
        }
    );
    assert!(err.to_string().contains("close_account") && err.to_string().contains("irreversible"));

    let unknown: Result<ToolSpec, _> = serde_json::from_value(json!({
        "name": "x", "class": "idempotent", "description": "d", "input_schema": {"type": "object"}
    }));
    assert!(unknown.is_err(), "an unknown class in data is refused");
}

#[tokio::test]
async fn a_tool_from_data_with_a_class_is_dispatched_under_its_policy() {
    let spec: ToolSpec = serde_json::from_value(json!({
        "name": "tag_ticket",
        "class": "idempotent_write",
        "description": "Tag a ticket.",
        "input_schema": {"type": "object"}
    }))
    .unwrap();
    let def = spec
        .into_def(|_, args| async move { Ok(json!({"tagged": args["tag"]})) })
        .unwrap();
    let d = with_tool(def, std::sync::Arc::new(MemoryStore::new()));
    let call = ToolCall::new("tag_ticket", json!({"tag": "vip"})).with_call_id("c1");
    let run = RunContext::new("t");
    assert!(!d.dispatch(&call, &run).await.unwrap().deduplicated);
    assert!(d.dispatch(&call, &run).await.unwrap().deduplicated);
    let no_key = ToolCall::new("tag_ticket", json!({"tag": "vip"}));
    assert!(matches!(
        d.dispatch(&no_key, &run).await,
        Err(DispatchError::MissingKey { .. })
    ));
}
