use std::sync::Arc;

use idem::prelude::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How hard to try.
#[derive(Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
struct Plan {
    retries: u32,
}

/// A type that implements none of the traits: the parameter brings its own codec.
#[derive(Debug)]
struct Celsius(i32);

mod celsius {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(c: &super::Celsius, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i32(c.0)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<super::Celsius, D::Error> {
        i32::deserialize(d).map(super::Celsius)
    }
}

/// Set the thermostat.
#[tool(class = "idempotent_write")]
async fn set_thermostat(
    ctx: &ToolContext,
    /// The room.
    #[serde(rename = "roomName")]
    room: String,
    /// The target temperature.
    #[serde(with = "celsius")]
    #[schemars(with = "i32")]
    target: Celsius,
    /// How hard to try.
    #[serde(default)]
    plan: Plan,
    /// A note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    note: Option<String>,
    /// Minutes to reach the target.
    #[serde(default = "ten")]
    minutes: u32,
) -> Result<String, ToolError> {
    let _ = ctx.idempotency_key();
    Ok(format!(
        "{room}:{}:{}:{note:?}:{minutes}",
        target.0, plan.retries
    ))
}

fn ten() -> u32 {
    10
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let registry = Registry::linked().unwrap();
    let schema = registry
        .get("set_thermostat")
        .unwrap()
        .input_schema()
        .clone();
    assert!(schema["properties"].get("roomName").is_some(), "{schema}");
    assert_eq!(
        schema["properties"]["target"]["type"], "integer",
        "{schema}"
    );
    assert_eq!(
        schema["required"],
        serde_json::json!(["roomName", "target"]),
        "{schema}"
    );
    // Defaults are shown to the model.
    assert_eq!(
        schema["properties"]["plan"]["default"],
        serde_json::json!({"retries": 0}),
        "{schema}"
    );
    assert_eq!(schema["properties"]["minutes"]["default"], 10, "{schema}");

    let dispatcher = Dispatcher::new(registry, Arc::new(MemoryStore::new())).unwrap();
    let run = RunContext::new("tenant-a");
    let call = ToolCall::new(
        "set_thermostat",
        serde_json::json!({"roomName": "kitchen", "target": 21}),
    )
    .with_call_id("call_1");
    let done = dispatcher.dispatch(&call, &run).await.unwrap();
    // Renamed, custom-codec, defaulted and optional parameters all reach the body.
    assert_eq!(done.output, serde_json::json!("kitchen:21:0:None:10"));

    let call = ToolCall::new(
        "set_thermostat",
        serde_json::json!({"roomName": "hall", "target": 19, "plan": {"retries": 2}, "note": "hi", "minutes": 5}),
    )
    .with_call_id("call_2");
    let done = dispatcher.dispatch(&call, &run).await.unwrap();
    assert_eq!(done.output, serde_json::json!("hall:19:2:Some(\"hi\"):5"));

    // Unknown arguments are refused before the body runs.
    let call = ToolCall::new(
        "set_thermostat",
        serde_json::json!({"roomName": "hall", "target": 19, "colour": "red"}),
    )
    .with_call_id("call_3");
    assert!(dispatcher.dispatch(&call, &run).await.is_err());
}
