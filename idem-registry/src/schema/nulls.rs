//! `null` read as "absent": strict provider modes make every property required and send
//! `null` for each one the model leaves out, and the canonical schema may not accept `null`
//! there. Removing such a `null` before validation lets serde apply the parameter's default.

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::keywords::{properties, resolve};

/// Remove every `null` given for a property that is optional and does not accept `null`,
/// at any depth: that is how strict provider modes say "absent", and removing it lets serde
/// apply the default. A `null` that a schema accepts, or one given for a required property,
/// is kept (the validator then reports the latter).
///
/// ```
/// use serde_json::json;
///
/// let schema = json!({
///     "type": "object",
///     "properties": {
///         "limit": {"type": "integer", "default": 10},
///         "cursor": {"type": ["string", "null"]},
///         "query": {"type": "string"}
///     },
///     "required": ["query"]
/// });
/// let mut args = json!({"limit": null, "cursor": null, "query": null});
/// idem::schema::drop_absent_nulls(&schema, &mut args);
/// assert_eq!(args, json!({"cursor": null, "query": null}));
/// ```
pub fn drop_absent_nulls(schema: &Value, arguments: &mut Value) {
    // Only a `null` is ever removed: arguments without one (the common case) are left as they
    // are without walking the schema alongside them, which costs more than the validation.
    if contains_null(arguments, 0) {
        strip_nulls(schema, &[schema], arguments, 0);
    }
}

/// [`drop_absent_nulls`] on arguments that may be borrowed: they are copied only when they
/// hold a `null` (the dispatcher's path, which keeps the call intact).
pub(crate) fn drop_absent_nulls_lent(schema: &Value, arguments: &mut Cow<'_, Value>) {
    if contains_null(arguments, 0) {
        strip_nulls(schema, &[schema], arguments.to_mut(), 0);
    }
}

/// Whether `strip_nulls` could find a `null` in `value`: one inside any object or array it
/// visits (those at most `MAX_DEPTH` deep).
fn contains_null(value: &Value, depth: usize) -> bool {
    match value {
        Value::Null => true,
        _ if depth > MAX_DEPTH => false,
        Value::Object(map) => map.values().any(|v| contains_null(v, depth + 1)),
        Value::Array(items) => items.iter().any(|v| contains_null(v, depth + 1)),
        _ => false,
    }
}

/// Deeper than this, schemas and values are left alone (a bound on hostile input).
const MAX_DEPTH: usize = 128;

fn strip_nulls(root: &Value, schemas: &[&Value], value: &mut Value, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    let mut flat = Vec::new();
    for s in schemas {
        expand(root, s, &mut flat, 0);
    }
    match value {
        Value::Object(map) => {
            let nulls: Vec<String> = map
                .iter()
                .filter(|(_, v)| v.is_null())
                .map(|(k, _)| k.clone())
                .collect();
            for key in nulls {
                let mut declared = false;
                let mut keep = false;
                for obj in flat.iter().filter_map(|s| s.as_object()) {
                    if let Some(p) = properties(obj).and_then(|p| p.get(&key)) {
                        declared = true;
                        keep |= is_required(obj, &key) || accepts_null(root, p, 0);
                    }
                }
                if declared && !keep {
                    map.remove(&key);
                }
            }
            for (key, v) in map.iter_mut() {
                let mut subs: Vec<&Value> = flat
                    .iter()
                    .filter_map(|s| s.get("properties")?.get(key))
                    .collect();
                if subs.is_empty() {
                    subs = flat
                        .iter()
                        .filter_map(|s| s.get("additionalProperties"))
                        .filter(|s| s.is_object())
                        .collect();
                }
                if !subs.is_empty() {
                    strip_nulls(root, &subs, v, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                let subs: Vec<&Value> = flat
                    .iter()
                    .filter_map(|s| {
                        s.get("prefixItems")
                            .and_then(|p| p.get(i))
                            .or_else(|| s.get("items"))
                    })
                    .collect();
                if !subs.is_empty() {
                    strip_nulls(root, &subs, item, depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// The schema and every schema it may also have to satisfy (references resolved,
/// combinator branches flattened).
fn expand<'a>(root: &'a Value, schema: &'a Value, out: &mut Vec<&'a Value>, depth: usize) {
    if depth > 16 {
        return;
    }
    if let Some(target) = resolve(root, schema) {
        expand(root, target, out, depth + 1);
    }
    out.push(schema);
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(branches) = schema.get(key).and_then(Value::as_array) {
            for b in branches {
                expand(root, b, out, depth + 1);
            }
        }
    }
}

fn is_required(obj: &Map<String, Value>, key: &str) -> bool {
    obj.get("required")
        .and_then(Value::as_array)
        .is_some_and(|r| r.iter().any(|k| k == key))
}

/// Whether `null` can satisfy the schema (structurally, without running a validator).
pub(crate) fn accepts_null(root: &Value, schema: &Value, depth: usize) -> bool {
    if depth > 16 {
        return false;
    }
    let obj = match schema {
        Value::Bool(b) => return *b,
        Value::Object(obj) => obj,
        _ => return false,
    };
    if obj.contains_key("$ref") {
        return resolve(root, schema).is_some_and(|t| accepts_null(root, t, depth + 1));
    }
    if let Some(c) = obj.get("const") {
        return c.is_null();
    }
    if let Some(e) = obj.get("enum").and_then(Value::as_array) {
        return e.iter().any(Value::is_null);
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(branches) = obj.get(key).and_then(Value::as_array) {
            return branches.iter().any(|b| accepts_null(root, b, depth + 1));
        }
    }
    match obj.get("type") {
        Some(Value::String(t)) => t == "null",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "null"),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nulls_for_optional_properties_mean_absent() {
        let s = json!({
            "type": "object",
            "properties": {
                "inner": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["b"]},
                "list": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
                "either": {"oneOf": [
                    {"type": "object", "properties": {"x": {"type": "string"}}},
                    {"type": "object", "properties": {"x": {"type": ["string", "null"]}}}
                ]}
            },
            "$defs": {"Item": {"type": "object", "properties": {"c": {"type": "boolean"}}}}
        });
        let mut v = json!({"inner": {"a": null, "b": null}, "list": [{"c": null}], "either": {"x": null}, "undeclared": null});
        drop_absent_nulls(&s, &mut v);
        assert_eq!(
            v,
            json!({"inner": {"b": null}, "list": [{}], "either": {"x": null}, "undeclared": null})
        );
    }
}
