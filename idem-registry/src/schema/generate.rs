//! Canonical JSON schemas of tool arguments and outputs (JSON Schema 2020-12, subschemas
//! inlined, recursion kept through `$defs`, no `$schema`), generated once per tool by
//! schemars.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::Value;

use super::keywords::for_each_subschema_mut;

fn settings() -> SchemaSettings {
    SchemaSettings::draft2020_12().with(|s| {
        s.inline_subschemas = true;
        s.meta_schema = None;
    })
}

/// The schema of a tool's arguments type: an object schema, without the generated type's
/// name (which is an implementation detail of `#[tool]`).
///
/// 32-bit integers get the bounds their `format` implies (schemars states only `minimum: 0`
/// for a `u32`), so an out-of-range number is refused by the schema, with its rule, before
/// serde sees it.
///
/// ```
/// #[derive(schemars::JsonSchema, serde::Deserialize)]
/// struct Args {
///     /// Recipient address.
///     to: String,
///     cc: Option<String>,
///     retries: u32,
/// }
///
/// let schema = idem::schema::arguments::<Args>();
/// assert_eq!(schema["type"], "object");
/// assert_eq!(schema["required"], serde_json::json!(["to", "retries"]));
/// assert_eq!(schema["properties"]["to"]["description"], "Recipient address.");
/// assert_eq!(schema["properties"]["retries"]["maximum"], 4294967295u64);
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
    bound_integers(&mut value);
    value
}

/// The schema of a tool's output type.
///
/// ```
/// let schema = idem::schema::output::<Vec<String>>();
/// assert_eq!(schema["type"], "array");
/// assert!(schema.get("$schema").is_none());
/// ```
pub fn output<T: JsonSchema>() -> Value {
    let mut value = settings()
        .for_serialize()
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value();
    if let Some(obj) = value.as_object_mut() {
        obj.remove("$schema");
    }
    bound_integers(&mut value);
    value
}

/// Add the bounds a 32-bit integer `format` implies, where the schema does not state them.
fn bound_integers(schema: &mut Value) {
    for_each_subschema_mut(schema, &mut |node| {
        let Some(obj) = node.as_object_mut() else {
            return;
        };
        let (min, max): (i64, i64) = match obj.get("format").and_then(Value::as_str) {
            Some("uint32") => (0, u32::MAX.into()),
            Some("int32") => (i32::MIN.into(), i32::MAX.into()),
            _ => return,
        };
        obj.entry("minimum").or_insert_with(|| min.into());
        obj.entry("maximum").or_insert_with(|| max.into());
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(schemars::JsonSchema, serde::Deserialize)]
    #[allow(dead_code)]
    struct Ints {
        a: u32,
        b: i32,
        c: u8,
        d: u64,
    }

    #[test]
    fn integers_carry_their_bounds() {
        let s = arguments::<Ints>();
        assert_eq!(s["properties"]["a"]["minimum"], 0);
        assert_eq!(s["properties"]["a"]["maximum"], json!(4294967295u64));
        assert_eq!(s["properties"]["b"]["minimum"], json!(-2147483648i64));
        assert_eq!(s["properties"]["b"]["maximum"], json!(2147483647));
        assert_eq!(s["properties"]["c"]["maximum"], 255);
        assert!(s["properties"]["d"].get("maximum").is_none());
    }
}
