//! Canonical JSON schemas of tool arguments and outputs (JSON Schema 2020-12, subschemas
//! inlined, no `$schema`), generated once per tool by schemars.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::Value;

fn settings() -> SchemaSettings {
    SchemaSettings::draft2020_12().with(|s| {
        s.inline_subschemas = true;
        s.meta_schema = None;
    })
}

/// The schema of a tool's arguments type: an object schema, without the generated type's
/// name (which is an implementation detail of `#[tool]`).
///
/// ```
/// #[derive(schemars::JsonSchema, serde::Deserialize)]
/// struct Args {
///     /// Recipient address.
///     to: String,
///     cc: Option<String>,
/// }
///
/// let schema = idem_registry::schema::arguments::<Args>();
/// assert_eq!(schema["type"], "object");
/// assert_eq!(schema["required"], serde_json::json!(["to"]));
/// assert_eq!(schema["properties"]["to"]["description"], "Recipient address.");
/// assert!(schema.get("$schema").is_none() && schema.get("title").is_none());
/// ```
pub fn arguments<T: JsonSchema>() -> Value {
    let mut value = settings()
        .for_deserialize()
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value();
    if let Some(obj) = value.as_object_mut() {
        obj.remove("title");
        obj.remove("$schema");
    }
    value
}

/// The schema of a tool's output type.
pub fn output<T: JsonSchema>() -> Value {
    let mut value = settings()
        .for_serialize()
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value();
    if let Some(obj) = value.as_object_mut() {
        obj.remove("$schema");
    }
    value
}
