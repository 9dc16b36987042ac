//! The JSON Schema keywords that hold subschemas, and walking a schema through them: what
//! every transform of a schema (integer bounds, provider exports) needs to reach each part.

use serde_json::{Map, Value};

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

/// The object's properties, if any.
pub(crate) fn properties(obj: &Map<String, Value>) -> Option<&Map<String, Value>> {
    obj.get("properties").and_then(Value::as_object)
}

/// The target of a local `$ref` (`#` or `#/json/pointer`).
pub(crate) fn resolve<'a>(root: &'a Value, schema: &Value) -> Option<&'a Value> {
    let reference = schema.get("$ref")?.as_str()?;
    let pointer = reference.strip_prefix('#')?;
    root.pointer(pointer)
}
