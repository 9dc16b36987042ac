//! Canonical JSON schemas of tool arguments and outputs (JSON Schema 2020-12, subschemas
//! inlined, recursion kept through `$defs`, no `$schema`), generated once per tool by
//! schemars, and the check every argument schema passes at registration.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value};

use crate::registry::RegistryError;

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
/// let schema = idem_registry::schema::arguments::<Args>();
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
/// let schema = idem_registry::schema::output::<Vec<String>>();
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

/// Keywords whose value is one subschema.
pub(crate) const SCHEMA_KEYWORDS: &[&str] = &[
    "additionalProperties",
    "items",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contentSchema",
];
/// Keywords whose value is an array of subschemas.
pub(crate) const SCHEMA_ARRAY_KEYWORDS: &[&str] = &["prefixItems", "anyOf", "oneOf", "allOf"];
/// Keywords whose value is a map of subschemas.
pub(crate) const SCHEMA_MAP_KEYWORDS: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "dependentSchemas",
];

/// Visit a schema and every subschema in it (pre-order), mutably.
pub(crate) fn for_each_subschema_mut(schema: &mut Value, f: &mut dyn FnMut(&mut Value)) {
    f(schema);
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    for (key, value) in obj.iter_mut() {
        let key = key.as_str();
        if SCHEMA_KEYWORDS.contains(&key) {
            for_each_subschema_mut(value, f);
        } else if SCHEMA_ARRAY_KEYWORDS.contains(&key) {
            if let Some(items) = value.as_array_mut() {
                for item in items {
                    for_each_subschema_mut(item, f);
                }
            }
        } else if SCHEMA_MAP_KEYWORDS.contains(&key)
            && let Some(map) = value.as_object_mut()
        {
            for sub in map.values_mut() {
                for_each_subschema_mut(sub, f);
            }
        }
    }
}

/// Combinators that would make the arguments something other than one plain object.
const ROOT_COMBINATORS: &[&str] = &["anyOf", "oneOf", "allOf", "not", "if", "then", "else"];

/// Check that an argument schema describes one JSON object of named arguments, as every
/// provider requires: `"type": "object"` at the root, no combinator beside it (a flattened
/// enum parameter puts a `oneOf` there), and a schema the validator can compile. The
/// registry runs this for every tool, so such a tool is refused at registration with an
/// error naming it, never at call time.
///
/// ```
/// use idem_registry::schema::check_arguments;
/// use serde_json::json;
///
/// assert!(check_arguments("ok", &json!({"type": "object", "properties": {}})).is_ok());
/// let err = check_arguments("shapes", &json!({"type": "object", "oneOf": []})).unwrap_err();
/// assert!(err.to_string().contains("`oneOf`"), "{err}");
/// assert!(check_arguments("list", &json!({"type": "array"})).is_err());
/// ```
pub fn check_arguments(tool: &str, schema: &Value) -> Result<(), RegistryError> {
    check_shape(tool, schema)?;
    crate::validate::ArgumentValidator::new(schema)
        .map(|_| ())
        .map_err(|e| RegistryError::Invalid {
            tool: tool.to_owned(),
            reason: e.to_string(),
        })
}

/// [`check_arguments`] without compiling the validator.
pub(crate) fn check_shape(tool: &str, schema: &Value) -> Result<(), RegistryError> {
    let invalid = |reason: String| RegistryError::Invalid {
        tool: tool.to_owned(),
        reason,
    };
    let Some(obj) = schema.as_object() else {
        return Err(invalid(
            "the input schema must be a JSON object with `\"type\": \"object\"`".into(),
        ));
    };
    if obj.get("type").and_then(Value::as_str) != Some("object") {
        return Err(invalid(
            "the input schema's root must have `\"type\": \"object\"`: the arguments are one object of named parameters".into(),
        ));
    }
    if let Some(k) = ROOT_COMBINATORS.iter().find(|k| obj.contains_key(**k)) {
        return Err(invalid(format!(
            "the arguments cannot form one plain object: the root of the input schema has `{k}` \
             (a parameter marked `#[serde(flatten)]` whose type is an enum puts it there); \
             pass the enum as a named parameter instead of flattening it"
        )));
    }
    if obj.contains_key("$schema") {
        return Err(invalid(
            "the input schema must not declare `$schema`: idem's schemas are JSON Schema 2020-12"
                .into(),
        ));
    }
    Ok(())
}

/// The object's properties, if any.
pub(crate) fn properties(obj: &Map<String, Value>) -> Option<&Map<String, Value>> {
    obj.get("properties").and_then(Value::as_object)
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

    #[test]
    fn registration_check_refuses_what_is_not_one_object() {
        assert!(check_arguments("t", &json!(true)).is_err());
        assert!(check_arguments("t", &json!({"properties": {}})).is_err());
        assert!(check_arguments("t", &json!({"type": "object", "anyOf": [{}]})).is_err());
        assert!(
            check_arguments(
                "t",
                &json!({"type": "object", "$schema": "http://json-schema.org/draft-07/schema#"})
            )
            .is_err()
        );
        // A schema the validator cannot compile (an unknown type name) is refused too.
        let err = check_arguments(
            "t",
            &json!({"type": "object", "properties": {"a": {"type": "text"}}}),
        )
        .unwrap_err();
        assert!(err.to_string().contains("tool `t`"), "{err}");
        // A reference to another document is refused: nothing is fetched.
        assert!(
            check_arguments(
                "t",
                &json!({"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}})
            )
            .is_err()
        );
    }
}
