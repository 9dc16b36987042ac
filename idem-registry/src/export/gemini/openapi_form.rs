//! The `parameters` form: Gemini's OpenAPI 3.0 schema subset, built schema by schema, or
//! the reason a schema has no such form.

use serde_json::{Map, Value, json};

use super::unroll::is_null_schema;
use crate::export::{Notes, describe, drop_numeric_format, is_numeric_format, is_typed, sentence};
use crate::pointer;

/// Keywords of the OpenAPI form copied as they are.
const OPENAPI_KEPT: &[&str] = &[
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "pattern",
    "minProperties",
    "maxProperties",
    "default",
    "example",
];

/// Gemini's upper-case type names.
fn type_name(t: &str) -> Option<&'static str> {
    Some(match t {
        "string" => "STRING",
        "integer" => "INTEGER",
        "number" => "NUMBER",
        "boolean" => "BOOLEAN",
        "array" => "ARRAY",
        "object" => "OBJECT",
        "null" => "NULL",
        _ => return None,
    })
}

/// One schema in the OpenAPI form, or why it has none.
pub(super) fn to_open_api(
    schema: &Value,
    pointer: &str,
    notes: &mut Notes,
) -> Result<Value, String> {
    let untyped = || {
        "any JSON value is accepted there (an untyped value such as `serde_json::Value`)".to_owned()
    };
    let src = match schema {
        Value::Object(obj) if is_typed(obj) => obj,
        _ => return Err(at(pointer, untyped())),
    };
    let mut src = src.clone();
    let mut out = Map::new();
    let mut nullable = false;
    // The schema's own annotations win over those of an alternative merged into it.
    let description = src.remove("description");
    let title = src.remove("title");

    let alternatives = match src.remove("oneOf") {
        Some(v) => {
            notes.adapted(
                pointer,
                "`oneOf` became `anyOf` (the OpenAPI subset has no `oneOf`)",
            );
            Some(v)
        }
        None => src.remove("anyOf"),
    };
    if let Some(Value::Array(branches)) = alternatives {
        let kept: Vec<(usize, &Value)> = branches
            .iter()
            .enumerate()
            .filter(|(_, b)| !is_null_schema(b))
            .collect();
        nullable = kept.len() < branches.len();
        if kept.len() == 1 {
            let (i, only) = kept[0];
            let Value::Object(converted) =
                to_open_api(only, &format!("{pointer}/anyOf/{i}"), notes)?
            else {
                return Err(at(pointer, untyped()));
            };
            out = converted;
        } else {
            let mut converted = Vec::new();
            for (i, b) in kept {
                converted.push(to_open_api(b, &format!("{pointer}/anyOf/{i}"), notes)?);
            }
            out.insert("anyOf".into(), Value::Array(converted));
        }
    }

    if let Some(d) = description {
        out.insert("description".into(), d);
    }
    if let Some(t) = title {
        out.insert("title".into(), t);
    }

    // The type this schema states itself (not one merged from an alternative).
    let mut own_type = None;
    match src.remove("type") {
        Some(Value::String(t)) => {
            if let Some(name) = type_name(&t) {
                out.insert("type".into(), name.into());
                own_type = Some(name);
            }
        }
        Some(Value::Array(types)) => {
            let named: Vec<&'static str> = types
                .iter()
                .filter_map(Value::as_str)
                .filter(|t| *t != "null")
                .filter_map(type_name)
                .collect();
            nullable |= named.len() < types.len();
            match named.as_slice() {
                [one] => {
                    out.insert("type".into(), (*one).into());
                    own_type = Some(*one);
                }
                many => {
                    out.insert(
                        "anyOf".into(),
                        Value::Array(many.iter().map(|t| json!({"type": t})).collect()),
                    );
                    notes.adapted(pointer, "a type array written as `anyOf` of types");
                }
            }
        }
        _ => {}
    }

    if let Some(c) = src.remove("const") {
        match c {
            Value::String(_) => {
                out.insert("enum".into(), json!([c]));
                out.insert("format".into(), "enum".into());
                out.entry("type").or_insert_with(|| "STRING".into());
                notes.adapted(pointer, "`const` written as a one-value string `enum`");
            }
            Value::Null => nullable = true,
            other => {
                let s = sentence("const", &other);
                describe(&mut out, &s);
                notes.described(
                    pointer,
                    format!("`const` moved into the description: \"{s}\""),
                );
            }
        }
    }
    if let Some(Value::Array(values)) = src.remove("enum") {
        nullable |= values.iter().any(Value::is_null);
        let rest: Vec<Value> = values.into_iter().filter(|v| !v.is_null()).collect();
        if rest.iter().all(Value::is_string) {
            out.insert("enum".into(), Value::Array(rest));
            out.insert("format".into(), "enum".into());
            out.entry("type").or_insert_with(|| "STRING".into());
        } else {
            let s = sentence("enum", &Value::Array(rest));
            describe(&mut out, &s);
            notes.described(
                pointer,
                format!("a non-string `enum` moved into the description: \"{s}\""),
            );
        }
    }
    if nullable {
        out.insert("nullable".into(), true.into());
        notes.adapted(pointer, "`null` written as `nullable: true`");
    }

    if let Some(Value::String(format)) = src.remove("format") {
        let ty = out.get("type").and_then(Value::as_str).unwrap_or("");
        let allowed = matches!(
            (ty, format.as_str()),
            ("STRING", "date-time" | "enum")
                | ("INTEGER", "int32" | "int64")
                | ("NUMBER", "float" | "double")
        );
        if allowed {
            out.entry("format").or_insert(Value::String(format));
        } else if is_numeric_format(&format) {
            out.insert("format".into(), Value::String(format.clone()));
            for k in ["minimum", "maximum"] {
                if let Some(v) = src.get(k) {
                    out.insert(k.into(), v.clone());
                }
            }
            drop_numeric_format(&mut out, &format, pointer, notes);
        } else {
            let s = sentence("format", &Value::String(format));
            describe(&mut out, &s);
            notes.described(
                pointer,
                format!("`format` moved into the description: \"{s}\""),
            );
        }
    }

    if own_type == Some("OBJECT") || src.contains_key("properties") {
        out.entry("type").or_insert_with(|| "OBJECT".into());
        match src.remove("additionalProperties") {
            None => {}
            Some(Value::Bool(false)) => notes.dropped(
                pointer,
                "`additionalProperties: false` (the OpenAPI subset has no such keyword; idem refuses unknown properties)",
            ),
            Some(_) => return Err(at(pointer, "a map with free-form keys (`additionalProperties` is a schema)".into())),
        }
        let required: Vec<String> = src
            .remove("required")
            .and_then(|r| serde_json::from_value(r).ok())
            .unwrap_or_default();
        let mut props = Map::new();
        if let Some(Value::Object(declared)) = src.remove("properties") {
            for (name, sub) in &declared {
                let here = format!("{pointer}/properties/{}", pointer::escape(name));
                match to_open_api(sub, &here, notes) {
                    Ok(v) => {
                        props.insert(name.clone(), v);
                    }
                    Err(why) if !required.contains(name) => {
                        notes.dropped(&here, format!("optional parameter `{name}` left out: {why}; the model cannot pass it"));
                    }
                    Err(why) => return Err(format!("required property `{name}`: {why}")),
                }
            }
        }
        if props.is_empty() {
            return Err(at(
                pointer,
                "an object with no declared properties (Gemini needs properties on every OBJECT)"
                    .into(),
            ));
        }
        let required: Vec<String> = required
            .into_iter()
            .filter(|r| props.contains_key(r))
            .collect();
        out.insert("properties".into(), Value::Object(props));
        if !required.is_empty() {
            out.insert("required".into(), json!(required));
        }
    }
    if own_type == Some("ARRAY") || src.contains_key("items") || src.contains_key("prefixItems") {
        out.entry("type").or_insert_with(|| "ARRAY".into());
        if let Some(Value::Array(tuple)) = src.remove("prefixItems") {
            let mut converted = Vec::new();
            for (i, item) in tuple.iter().enumerate() {
                converted.push(to_open_api(
                    item,
                    &format!("{pointer}/prefixItems/{i}"),
                    notes,
                )?);
            }
            src.remove("items");
            out.insert("items".into(), json!({"anyOf": converted}));
            notes.described(
                pointer,
                "a tuple written as an array whose items are any of the tuple's types; the positions are not enforced by Gemini (idem checks them)",
            );
            describe(&mut out, "A tuple: give the items in order.");
        } else if let Some(items) = src.remove("items") {
            out.insert(
                "items".into(),
                to_open_api(&items, &format!("{pointer}/items"), notes)?,
            );
        } else if src.get("maxItems").and_then(Value::as_u64) == Some(0) {
            out.insert("items".into(), json!({"type": "STRING"}));
        } else {
            return Err(at(pointer, "an array of any values (no `items`)".into()));
        }
    }

    for keyword in OPENAPI_KEPT {
        if let Some(v) = src.remove(*keyword) {
            out.insert((*keyword).to_owned(), v);
        }
    }
    src.remove("$defs");
    for (keyword, value) in src {
        let s = sentence(&keyword, &value);
        describe(&mut out, &s);
        notes.described(
            pointer,
            format!("`{keyword}` moved into the description: \"{s}\""),
        );
    }
    Ok(Value::Object(out))
}

fn at(pointer: &str, why: String) -> String {
    if pointer.is_empty() {
        why
    } else {
        format!("`{pointer}`: {why}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_api_form_uses_nullable_and_string_enums() {
        let mut notes = Notes::default();
        let v = to_open_api(
            &json!({
                "type": "object",
                "properties": {
                    "a": {"type": ["string", "null"], "format": "uuid"},
                    "b": {"anyOf": [{"type": "object", "properties": {"x": {"type": "integer", "format": "uint32", "minimum": 0}}, "required": ["x"]}, {"type": "null"}]},
                    "c": {"oneOf": [{"const": "on", "type": "string"}, {"const": "off", "type": "string"}]},
                    "d": {"type": "integer", "exclusiveMinimum": 0}
                },
                "required": ["c"],
                "additionalProperties": false
            }),
            "",
            &mut notes,
        )
        .unwrap();
        assert_eq!(
            v["properties"]["a"],
            json!({"type": "STRING", "nullable": true, "description": "Format: uuid."})
        );
        assert_eq!(v["properties"]["b"]["nullable"], true);
        assert_eq!(
            v["properties"]["b"]["properties"]["x"],
            json!({"type": "INTEGER", "minimum": 0})
        );
        assert_eq!(
            v["properties"]["c"]["anyOf"][0],
            json!({"type": "STRING", "enum": ["on"], "format": "enum"})
        );
        assert_eq!(
            v["properties"]["d"],
            json!({"type": "INTEGER", "description": "Greater than 0."})
        );
        assert!(v.get("additionalProperties").is_none());
    }

    #[test]
    fn open_api_form_refuses_what_it_cannot_express() {
        let mut notes = Notes::default();
        let err = to_open_api(
            &json!({"type": "object", "properties": {"a": true, "m": {"type": "object", "additionalProperties": {"type": "string"}}}, "required": ["m"]}),
            "",
            &mut notes,
        )
        .unwrap_err();
        assert!(err.contains("required property `m`"), "{err}");
        assert!(notes.changes.iter().any(|c| c.pointer == "/properties/a"));
    }
}
