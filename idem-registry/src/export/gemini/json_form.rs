//! The `parametersJsonSchema` form: a JSON Schema subset, rewritten node by node.

use serde_json::{Value, json};

use crate::export::{
    Notes, describe, drop_numeric_format, is_numeric_format, move_to_description, sentence,
};

/// Keywords `parametersJsonSchema` takes.
const JSON_KEYWORDS: &[&str] = &[
    "$id",
    "$defs",
    "$ref",
    "$anchor",
    "type",
    "format",
    "title",
    "description",
    "enum",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "anyOf",
    "properties",
    "additionalProperties",
    "required",
    "propertyOrdering",
];

/// One node of the `parametersJsonSchema` form.
pub(super) fn json_node(node: &mut Value, pointer: &str, notes: &mut Notes) {
    if *node == Value::Bool(true) {
        *node = json!({});
        notes.adapted(pointer, "`true` (any value) written as `{}`");
        return;
    }
    let Some(obj) = node.as_object_mut() else {
        return;
    };
    if let Some(one_of) = obj.remove("oneOf") {
        obj.insert("anyOf".into(), one_of);
        notes.adapted(
            pointer,
            "`oneOf` became `anyOf` (Gemini reads them the same)",
        );
    }
    if let Some(c) = obj.remove("const") {
        if c.is_string() || c.is_number() {
            obj.insert("enum".into(), json!([c]));
            notes.adapted(pointer, "`const` written as a one-value `enum`");
        } else {
            let s = sentence("const", &c);
            describe(obj, &s);
            notes.described(
                pointer,
                format!("`const` moved into the description: \"{s}\""),
            );
        }
    }
    if let Some(Value::Array(values)) = obj.get("enum").cloned() {
        let scalar = |v: &Value| v.is_string() || v.is_number();
        if values.iter().any(Value::is_null) && values.iter().filter(|v| !v.is_null()).all(scalar) {
            let mut inner = std::mem::take(obj);
            let rest: Vec<Value> = values.into_iter().filter(|v| !v.is_null()).collect();
            inner.insert("enum".into(), Value::Array(rest));
            if let Some(Value::Array(types)) = inner.get_mut("type") {
                types.retain(|t| t != "null");
                if types.len() == 1 {
                    let t = types[0].clone();
                    inner.insert("type".into(), t);
                }
            }
            if let Some(d) = inner.remove("description") {
                obj.insert("description".into(), d);
            }
            obj.insert(
                "anyOf".into(),
                json!([Value::Object(inner), {"type": "null"}]),
            );
            notes.adapted(pointer, "nullable `enum` written as `anyOf` with `null` (enums take strings and numbers only)");
            return;
        }
        if !values.iter().all(scalar) {
            move_to_description(obj, "enum", pointer, notes);
        }
    }
    if let Some(format) = obj.get("format").and_then(Value::as_str).map(str::to_owned)
        && is_numeric_format(&format)
        && !matches!(format.as_str(), "int32" | "int64" | "float" | "double")
    {
        drop_numeric_format(obj, &format, pointer, notes);
    }
    let unsupported: Vec<String> = obj
        .keys()
        .filter(|k| !JSON_KEYWORDS.contains(&k.as_str()))
        .cloned()
        .collect();
    for keyword in unsupported {
        move_to_description(obj, &keyword, pointer, notes);
    }
}
