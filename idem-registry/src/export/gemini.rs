//! Gemini function declarations, in both of Gemini's schema forms.
//!
//! - `parametersJsonSchema` takes a JSON Schema subset: `$id`, `$defs`, `$ref`, `$anchor`,
//!   `type`, `format`, `title`, `description`, `enum` (strings and numbers), `items`,
//!   `prefixItems`, `minItems`, `maxItems`, `minimum`, `maximum`, `anyOf`, `oneOf` (read as
//!   `anyOf`), `properties`, `additionalProperties`, `required`, `propertyOrdering`.
//!   Recursion is only unrolled by Gemini "to a limited degree" and only through optional
//!   properties, so idem unrolls it itself (three levels) and says what it cut.
//! - `parameters` takes an OpenAPI 3.0 schema subset: upper-case `type`s, `nullable`
//!   instead of type arrays, string-only `enum`s (with `format: enum`), no `$ref`,
//!   `additionalProperties`, `const` or `exclusive*` bounds; `format` is `date-time` or
//!   `enum` for strings, `int32` / `int64` and `float` / `double` for numbers; every
//!   `OBJECT` needs properties and every `ARRAY` needs `items`.
//!
//! In both forms, parameter names must match `^[A-Za-z_][A-Za-z0-9_]{0,63}$`, and a tool
//! without parameters leaves the field out.

use serde_json::{Map, Value, json};

use super::{
    ExportError, Notes, Provider, Strictness, describe, drop_numeric_format, is_numeric_format,
    is_typed, move_to_description, sentence,
};
use crate::pointer;
use crate::tool::ToolDef;

/// How many times a recursive type may nest before idem cuts it.
const UNROLL_DEPTH: usize = 3;

/// Marks a reference past [`UNROLL_DEPTH`] until [`prune`] removes it.
const CUT: &str = "$idem-cut";

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

pub(super) fn json_schema(tool: &ToolDef) -> Result<(Value, Strictness, Notes), ExportError> {
    check_names(tool, Provider::Gemini)?;
    let mut notes = Notes::default();
    let mut entry = json!({"name": tool.name(), "description": tool.description()});
    if has_parameters(tool.input_schema()) {
        let mut schema = unroll(tool.input_schema(), &mut notes);
        super::walk_post(&mut schema, "", &mut |node, pointer| {
            json_node(node, pointer, &mut notes)
        });
        entry["parametersJsonSchema"] = schema;
    } else {
        notes.adapted("", "no parameters: `parametersJsonSchema` is left out");
    }
    Ok((entry, Strictness::NotApplicable, notes.finish()))
}

pub(super) fn open_api(tool: &ToolDef) -> Result<(Value, Strictness, Notes), ExportError> {
    check_names(tool, Provider::GeminiOpenApi)?;
    let mut notes = Notes::default();
    let mut entry = json!({"name": tool.name(), "description": tool.description()});
    if has_parameters(tool.input_schema()) {
        let unrolled = unroll(tool.input_schema(), &mut notes);
        let parameters = to_open_api(&unrolled, "", &mut notes).map_err(|why| ExportError {
            tool: tool.name().to_owned(),
            provider: Provider::GeminiOpenApi,
            reason: format!(
                "{why}; Gemini's OpenAPI `parameters` cannot express it: export with `Provider::Gemini` (`parametersJsonSchema`), or give the parameter a declared shape"
            ),
        })?;
        entry["parameters"] = parameters;
    } else {
        notes.adapted("", "no parameters: `parameters` is left out");
    }
    Ok((entry, Strictness::NotApplicable, notes.finish()))
}

fn has_parameters(schema: &Value) -> bool {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .is_some_and(|p| !p.is_empty())
}

/// Parameter names must match `^[A-Za-z_][A-Za-z0-9_]{0,63}$`.
fn check_names(tool: &ToolDef, provider: Provider) -> Result<(), ExportError> {
    let valid = |name: &str| {
        let mut chars = name.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.len() <= 64
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let names = tool
        .input_schema()
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect::<Vec<_>>())
        .unwrap_or_default();
    match names.into_iter().find(|n| !valid(n)) {
        None => Ok(()),
        Some(bad) => Err(ExportError {
            tool: tool.name().to_owned(),
            provider,
            reason: format!(
                "parameter name `{bad}` does not match `^[A-Za-z_][A-Za-z0-9_]{{0,63}}$`; rename it (`#[serde(rename = \"...\")]`)"
            ),
        }),
    }
}

/// Replace every `$ref` into `$defs` by the definition itself, up to [`UNROLL_DEPTH`]
/// levels of the same definition, then remove what lies deeper.
fn unroll(canonical: &Value, notes: &mut Notes) -> Value {
    let mut root = canonical.clone();
    let Some(defs) = root.as_object_mut().and_then(|o| o.remove("$defs")) else {
        return root;
    };
    let mut out = expand(&root, &defs, &mut Vec::new());
    let names: Vec<&String> = defs
        .as_object()
        .map(|d| d.keys().collect())
        .unwrap_or_default();
    notes.adapted(
        "/$defs",
        format!(
            "recursive {} unrolled {UNROLL_DEPTH} levels deep (Gemini does not follow references reliably)",
            names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    if prune(&mut out, "", notes) {
        // Only a root that is itself a cut reference could end here; the root is an object.
        return json!({"type": "object", "properties": {}});
    }
    out
}

fn expand(node: &Value, defs: &Value, stack: &mut Vec<String>) -> Value {
    let Some(obj) = node.as_object() else {
        return node.clone();
    };
    if let Some(name) = obj
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/$defs/"))
        .map(|n| pointer::unescape(n).into_owned())
        && let Some(def) = defs.get(&name)
    {
        if stack.iter().filter(|s| **s == name).count() >= UNROLL_DEPTH {
            return json!({ CUT: name });
        }
        stack.push(name);
        let mut expanded = expand(def, defs, stack);
        stack.pop();
        if let Some(e) = expanded.as_object_mut() {
            for (k, v) in obj {
                if k != "$ref" {
                    e.insert(k.clone(), v.clone());
                }
            }
        }
        return expanded;
    }
    let mut out = Map::new();
    for (key, value) in obj {
        let k = key.as_str();
        let v = if crate::schema::SCHEMA_KEYWORDS.contains(&k) {
            expand(value, defs, stack)
        } else if crate::schema::SCHEMA_ARRAY_KEYWORDS.contains(&k) {
            match value.as_array() {
                Some(items) => Value::Array(items.iter().map(|i| expand(i, defs, stack)).collect()),
                None => value.clone(),
            }
        } else if crate::schema::SCHEMA_MAP_KEYWORDS.contains(&k) {
            match value.as_object() {
                Some(map) => Value::Object(
                    map.iter()
                        .map(|(n, s)| (n.clone(), expand(s, defs, stack)))
                        .collect(),
                ),
                None => value.clone(),
            }
        } else {
            value.clone()
        };
        out.insert(key.clone(), v);
    }
    Value::Object(out)
}

fn is_cut(v: &Value) -> bool {
    v.get(CUT).is_some()
}

fn is_null_schema(v: &Value) -> bool {
    v.get("type").is_some_and(|t| t == "null") || v.get("const").is_some_and(Value::is_null)
}

/// Remove cut references; `true` when this schema cannot stay and its parent must remove it.
fn prune(node: &mut Value, pointer: &str, notes: &mut Notes) -> bool {
    if is_cut(node) {
        return true;
    }
    let Some(obj) = node.as_object_mut() else {
        return false;
    };
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = obj.get_mut(key) {
            let before = branches.len();
            let mut i = 0;
            branches.retain_mut(|b| {
                let here = format!("{pointer}/{key}/{i}");
                i += 1;
                !prune(b, &here, notes)
            });
            if branches.len() < before {
                if branches.iter().all(is_null_schema) {
                    return true;
                }
                notes.dropped(
                    &format!("{pointer}/{key}"),
                    format!(
                        "an alternative past {UNROLL_DEPTH} levels of recursion is not offered"
                    ),
                );
            }
        }
    }
    if let Some(props) = obj.get_mut("properties").and_then(Value::as_object_mut) {
        let names: Vec<String> = props.keys().cloned().collect();
        let mut removed = Vec::new();
        for name in names {
            let here = format!("{pointer}/properties/{}", pointer::escape(&name));
            if props.get_mut(&name).is_some_and(|p| prune(p, &here, notes)) {
                props.remove(&name);
                removed.push((name, here));
            }
        }
        for (name, here) in removed {
            let was_required = match obj.get_mut("required") {
                Some(Value::Array(required)) => {
                    let n = required.len();
                    required.retain(|r| r != &name);
                    required.len() < n
                }
                _ => false,
            };
            notes.dropped(
                &here,
                format!(
                    "`{name}` is not offered past {UNROLL_DEPTH} levels of recursion{}",
                    if was_required {
                        " (it is required: a call that nests deeper fails idem's validation)"
                    } else {
                        ""
                    }
                ),
            );
        }
    }
    if obj.get_mut("items").is_some_and(|items| {
        let here = format!("{pointer}/items");
        prune(items, &here, notes)
    }) {
        obj.remove("items");
        obj.remove("minItems");
        obj.insert("maxItems".into(), 0.into());
        notes.dropped(
            pointer,
            format!("items past {UNROLL_DEPTH} levels of recursion are not offered: the array must be empty there"),
        );
    }
    let mut doomed = false;
    for key in [
        "additionalProperties",
        "prefixItems",
        "not",
        "if",
        "then",
        "else",
        "allOf",
    ] {
        if let Some(child) = obj.get_mut(key) {
            let here = format!("{pointer}/{key}");
            doomed |= match child {
                Value::Array(items) => {
                    let mut any = false;
                    for (i, item) in items.iter_mut().enumerate() {
                        any |= prune(item, &format!("{here}/{i}"), notes);
                    }
                    any
                }
                other => prune(other, &here, notes),
            };
        }
    }
    doomed
}

/// One node of the `parametersJsonSchema` form.
fn json_node(node: &mut Value, pointer: &str, notes: &mut Notes) {
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
fn to_open_api(schema: &Value, pointer: &str, notes: &mut Notes) -> Result<Value, String> {
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

    #[test]
    fn recursion_is_unrolled_and_cut() {
        let mut notes = Notes::default();
        let v = unroll(
            &json!({
                "type": "object",
                "properties": {"root": {"$ref": "#/$defs/Node"}},
                "required": ["root"],
                "$defs": {"Node": {"type": "object", "properties": {
                    "name": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                    "parent": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]}
                }, "required": ["name", "children"]}}
            }),
            &mut notes,
        );
        let level3 = &v["properties"]["root"]["properties"]["children"]["items"]["properties"]["children"]
            ["items"];
        assert_eq!(
            level3["properties"]["children"],
            json!({"type": "array", "maxItems": 0})
        );
        assert!(level3["properties"].get("parent").is_none());
        assert!(v.get("$defs").is_none());
        assert!(!v.to_string().contains("$ref"));
    }
}
