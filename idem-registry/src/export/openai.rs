//! OpenAI function tools: Chat Completions and Responses, with the strict transform.
//!
//! Strict mode (OpenAI's "Structured Outputs" subset) takes: `type`, `enum`, `const`,
//! `anyOf`, `$ref` / `$defs` (recursion included), `properties` / `required` /
//! `additionalProperties: false`, `items`, and the constraints `pattern`, `format`
//! (`date-time`, `time`, `date`, `duration`, `email`, `hostname`, `ipv4`, `ipv6`, `uuid`),
//! `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`, `multipleOf`, `minItems`,
//! `maxItems`. Every object must list all its properties in `required` and set
//! `additionalProperties: false`. Limits: 5000 object properties in total, 10 levels of
//! nesting, 1000 enum values, 120,000 characters of names and enum / const values, and
//! 15,000 characters for an enum of more than 250 values.

use serde_json::{Map, Value, json};

use super::{
    Notes, Provider, Strictness, drop_numeric_format, is_numeric_format, is_object, is_typed,
    move_to_description,
};
use crate::pointer;
use crate::tool::ToolDef;

/// String formats strict mode takes.
const FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// Constraints strict mode does not take: moved into the description.
const DESCRIBED: &[&str] = &[
    "minLength",
    "maxLength",
    "minProperties",
    "maxProperties",
    "uniqueItems",
    "default",
    "examples",
];

/// Keywords with no strict equivalent: the tool is exported with `strict: false`.
const NO_STRICT_FORM: &[(&str, &str)] = &[
    ("prefixItems", "a tuple (`prefixItems`) has no strict form"),
    ("allOf", "`allOf` is not supported in strict mode"),
    ("not", "`not` is not supported in strict mode"),
    ("if", "`if`/`then`/`else` is not supported in strict mode"),
    (
        "dependentRequired",
        "`dependentRequired` is not supported in strict mode",
    ),
    (
        "dependentSchemas",
        "`dependentSchemas` is not supported in strict mode",
    ),
    (
        "patternProperties",
        "`patternProperties` is not supported in strict mode",
    ),
    (
        "propertyNames",
        "`propertyNames` is not supported in strict mode",
    ),
    (
        "unevaluatedProperties",
        "`unevaluatedProperties` is not supported in strict mode",
    ),
    (
        "unevaluatedItems",
        "`unevaluatedItems` is not supported in strict mode",
    ),
    ("contains", "`contains` is not supported in strict mode"),
];

/// OpenAI's documented limits for strict schemas.
const MAX_PROPERTIES: usize = 5000;
const MAX_NESTING: usize = 10;
const MAX_ENUM_VALUES: usize = 1000;
const MAX_STRING_LENGTH: usize = 120_000;
const LARGE_ENUM: usize = 250;
const MAX_LARGE_ENUM_LENGTH: usize = 15_000;

pub(super) fn export(tool: &ToolDef, provider: Provider) -> (Value, Strictness, Notes) {
    let (parameters, strictness, notes) = match strict(tool.input_schema()) {
        Ok((schema, notes)) => (schema, Strictness::Strict, notes),
        Err(notes) => (
            tool.input_schema().clone(),
            Strictness::NotStrict {
                reasons: notes.not_strict.clone(),
            },
            Notes {
                changes: Vec::new(),
                not_strict: notes.not_strict,
            },
        ),
    };
    let is_strict = strictness == Strictness::Strict;
    let value = match provider {
        Provider::OpenAiResponses => json!({
            "type": "function",
            "name": tool.name(),
            "description": tool.description(),
            "parameters": parameters,
            "strict": is_strict,
        }),
        _ => json!({
            "type": "function",
            "function": {
                "name": tool.name(),
                "description": tool.description(),
                "parameters": parameters,
                "strict": is_strict,
            }
        }),
    };
    (value, strictness, notes.finish())
}

/// The strict form of a canonical schema, or the reasons it has none.
pub(super) fn strict(canonical: &Value) -> Result<(Value, Notes), Notes> {
    let mut schema = canonical.clone();
    let mut notes = Notes::default();
    super::walk_post(&mut schema, "", &mut |node, pointer| {
        strict_node(node, pointer, &mut notes)
    });
    check_limits(&schema, &mut notes);
    if notes.not_strict.is_empty() {
        Ok((schema, notes))
    } else {
        Err(notes)
    }
}

fn strict_node(node: &mut Value, pointer: &str, notes: &mut Notes) {
    let obj = match node {
        Value::Bool(true) => {
            notes.refuse_strict(
                pointer,
                "any JSON value is accepted here (an untyped value such as `serde_json::Value`); strict mode needs a type",
            );
            return;
        }
        Value::Object(obj) => obj,
        _ => return,
    };
    if !is_typed(obj) {
        notes.refuse_strict(
            pointer,
            "any JSON value is accepted here (an untyped value such as `serde_json::Value`); strict mode needs a type",
        );
        return;
    }
    for (keyword, why) in NO_STRICT_FORM {
        if obj.contains_key(*keyword) {
            notes.refuse_strict(pointer, why);
        }
    }
    if let Some(one_of) = obj.remove("oneOf") {
        obj.insert("anyOf".into(), one_of);
        notes.adapted(
            pointer,
            "`oneOf` became `anyOf` (strict mode has no `oneOf`; the alternatives exclude each other)",
        );
    }
    for keyword in DESCRIBED {
        move_to_description(obj, keyword, pointer, notes);
    }
    if let Some(format) = obj.get("format").and_then(Value::as_str).map(str::to_owned)
        && !FORMATS.contains(&format.as_str())
    {
        if is_numeric_format(&format) {
            drop_numeric_format(obj, &format, pointer, notes);
        } else {
            move_to_description(obj, "format", pointer, notes);
        }
    }
    if obj
        .get("enum")
        .and_then(Value::as_array)
        .is_some_and(|e| e.iter().any(Value::is_null))
    {
        nullable_enum_as_any_of(obj);
        notes.adapted(
            pointer,
            "nullable `enum` written as `anyOf` of the enum and `null`",
        );
        return;
    }
    if obj.contains_key("$ref") && obj.len() > 1 {
        let siblings: Vec<String> = obj.keys().filter(|k| *k != "$ref").cloned().collect();
        obj.retain(|k, _| k == "$ref");
        notes.dropped(
            pointer,
            format!(
                "{} beside `$ref` (strict mode takes nothing next to a reference)",
                siblings
                    .iter()
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
    }
    if is_object(obj) {
        strict_object(obj, pointer, notes);
    }
}

fn strict_object(obj: &mut Map<String, Value>, pointer: &str, notes: &mut Notes) {
    match obj.get("additionalProperties") {
        Some(Value::Bool(false)) => {}
        Some(_) => {
            notes.refuse_strict(
                pointer,
                "a map with free-form keys (`additionalProperties` is a schema); strict mode needs every key declared",
            );
            return;
        }
        None if !obj.contains_key("properties") => {
            notes.refuse_strict(
                pointer,
                "an object with arbitrary keys; strict mode needs every key declared",
            );
            return;
        }
        None => {
            obj.insert("additionalProperties".into(), Value::Bool(false));
            notes.adapted(
                pointer,
                "`additionalProperties: false` added (unknown keys, ignored before, cannot be sent)",
            );
        }
    }
    // A nullable object is written as `anyOf` with `null` rather than a type array.
    if let Some(Value::Array(types)) = obj.get("type")
        && types.len() == 2
        && types.iter().any(|t| t == "null")
    {
        let mut inner = std::mem::take(obj);
        inner.insert("type".into(), "object".into());
        let description = inner.remove("description");
        let title = inner.remove("title");
        strict_required(&mut inner, pointer, notes);
        obj.insert(
            "anyOf".into(),
            json!([Value::Object(inner), {"type": "null"}]),
        );
        if let Some(d) = description {
            obj.insert("description".into(), d);
        }
        if let Some(t) = title {
            obj.insert("title".into(), t);
        }
        notes.adapted(
            pointer,
            "nullable object written as `anyOf` of the object and `null`",
        );
        return;
    }
    strict_required(obj, pointer, notes);
}

/// Every property required; the optional ones made nullable ("null means absent").
fn strict_required(obj: &mut Map<String, Value>, pointer: &str, notes: &mut Notes) {
    let mut required: Vec<Value> = obj
        .get("required")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let props = obj
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(props) = props.as_object_mut() else {
        return;
    };
    // The optional ones are appended by name, the same whatever order the schema's maps
    // iterate in (serde_json's `preserve_order`).
    let mut props: Vec<_> = props.iter_mut().collect();
    props.sort_unstable_by(|a, b| a.0.cmp(b.0));
    for (name, schema) in props {
        if required.iter().any(|r| r == name) {
            continue;
        }
        required.push(Value::String(name.clone()));
        let at = format!("{pointer}/properties/{}", pointer::escape(name));
        if crate::schema::accepts_null(&Value::Null, schema, 0) {
            notes.adapted(
                &at,
                "optional: now required; it already accepts null, which means absent",
            );
        } else {
            make_nullable(schema);
            notes.adapted(
                &at,
                "optional: now required and nullable; null means absent (idem drops it before validation, so the default applies)",
            );
        }
    }
    obj.insert("required".into(), Value::Array(required));
}

/// `{"type": ["string", "null"], "enum": ["a", null]}` as
/// `{"anyOf": [{"type": "string", "enum": ["a"]}, {"type": "null"}]}`.
fn nullable_enum_as_any_of(obj: &mut Map<String, Value>) {
    let mut inner = std::mem::take(obj);
    if let Some(Value::Array(values)) = inner.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    if let Some(Value::Array(types)) = inner.get_mut("type") {
        types.retain(|t| t != "null");
        if let [only] = types.as_slice() {
            let only = only.clone();
            inner.insert("type".into(), only);
        }
    }
    for k in ["description", "title"] {
        if let Some(v) = inner.remove(k) {
            obj.insert(k.into(), v);
        }
    }
    obj.insert(
        "anyOf".into(),
        json!([Value::Object(inner), {"type": "null"}]),
    );
}

/// Let a schema also accept `null`: a type array for plain scalar and array types,
/// `anyOf` with `null` for everything else.
pub(super) fn make_nullable(schema: &mut Value) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    let scalar = matches!(
        obj.get("type").and_then(Value::as_str),
        Some("string" | "integer" | "number" | "boolean" | "array")
    );
    if scalar && !obj.contains_key("enum") && !obj.contains_key("const") {
        if let Some(t) = obj.remove("type") {
            obj.insert("type".into(), json!([t, "null"]));
        }
        return;
    }
    if let Some(Value::Array(branches)) = obj.get_mut("anyOf") {
        branches.push(json!({"type": "null"}));
        return;
    }
    let mut inner = std::mem::take(obj);
    if let Some(d) = inner.remove("description") {
        obj.insert("description".into(), d);
    }
    if let Some(t) = inner.remove("title") {
        obj.insert("title".into(), t);
    }
    obj.insert(
        "anyOf".into(),
        json!([Value::Object(inner), {"type": "null"}]),
    );
}

fn check_limits(schema: &Value, notes: &mut Notes) {
    let mut stats = Stats::default();
    stats.visit(schema, 0);
    if stats.properties > MAX_PROPERTIES {
        notes.refuse_strict(
            "",
            format!(
                "{} object properties in total; strict mode allows {MAX_PROPERTIES}",
                stats.properties
            ),
        );
    }
    if stats.depth > MAX_NESTING {
        notes.refuse_strict(
            "",
            format!(
                "{} levels of object nesting; strict mode allows {MAX_NESTING}",
                stats.depth
            ),
        );
    }
    if stats.enum_values > MAX_ENUM_VALUES {
        notes.refuse_strict(
            "",
            format!(
                "{} enum values in total; strict mode allows {MAX_ENUM_VALUES}",
                stats.enum_values
            ),
        );
    }
    if stats.string_length > MAX_STRING_LENGTH {
        notes.refuse_strict(
            "",
            format!(
                "{} characters of property names, definition names and enum / const values; strict mode allows {MAX_STRING_LENGTH}",
                stats.string_length
            ),
        );
    }
    if let Some(len) = stats
        .large_enum_length
        .filter(|l| *l > MAX_LARGE_ENUM_LENGTH)
    {
        notes.refuse_strict(
            "",
            format!(
                "an enum of more than {LARGE_ENUM} values has {len} characters; strict mode allows {MAX_LARGE_ENUM_LENGTH}"
            ),
        );
    }
}

#[derive(Default)]
struct Stats {
    properties: usize,
    depth: usize,
    enum_values: usize,
    string_length: usize,
    large_enum_length: Option<usize>,
}

impl Stats {
    /// `level` counts the objects enclosing this schema.
    fn visit(&mut self, schema: &Value, level: usize) {
        let Some(obj) = schema.as_object() else {
            return;
        };
        let level = if is_object(obj) { level + 1 } else { level };
        self.depth = self.depth.max(level);
        let str_len = |v: &Value| v.as_str().map_or(0, |s| s.chars().count());
        if let Some(props) = obj.get("properties").and_then(Value::as_object) {
            self.properties += props.len();
            self.string_length += props.keys().map(|k| k.chars().count()).sum::<usize>();
        }
        if let Some(defs) = obj.get("$defs").and_then(Value::as_object) {
            self.string_length += defs.keys().map(|k| k.chars().count()).sum::<usize>();
        }
        if let Some(values) = obj.get("enum").and_then(Value::as_array) {
            self.enum_values += values.len();
            let len: usize = values.iter().map(str_len).sum();
            self.string_length += len;
            if values.len() > LARGE_ENUM {
                self.large_enum_length = Some(self.large_enum_length.unwrap_or(0).max(len));
            }
        }
        if let Some(c) = obj.get("const") {
            self.string_length += str_len(c);
        }
        for (key, value) in obj {
            let k = key.as_str();
            if k == "$defs" {
                // Definitions start their own nesting count where they are used; counting
                // them from the root is the conservative choice.
                if let Some(defs) = value.as_object() {
                    for d in defs.values() {
                        self.visit(d, level);
                    }
                }
            } else if crate::schema::SCHEMA_KEYWORDS.contains(&k) {
                self.visit(value, level);
            } else if crate::schema::SCHEMA_ARRAY_KEYWORDS.contains(&k) {
                for v in value.as_array().into_iter().flatten() {
                    self.visit(v, level);
                }
            } else if crate::schema::SCHEMA_MAP_KEYWORDS.contains(&k) {
                for v in value.as_object().into_iter().flat_map(|m| m.values()) {
                    self.visit(v, level);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optional_properties_become_required_and_nullable() {
        let (s, notes) = strict(&json!({
            "type": "object",
            "properties": {
                "a": {"type": "string"},
                "b": {"type": "integer", "default": 3, "format": "uint32", "minimum": 0},
                "c": {"type": ["string", "null"]},
                "d": {"enum": ["x", "y"]},
                "e": {"type": "object", "properties": {"f": {"type": "boolean"}}}
            },
            "required": ["a"]
        }))
        .unwrap();
        assert_eq!(s["required"], json!(["a", "b", "c", "d", "e"]));
        assert_eq!(s["additionalProperties"], false);
        assert_eq!(s["properties"]["b"]["type"], json!(["integer", "null"]));
        assert_eq!(s["properties"]["b"]["description"], "Default: 3.");
        assert!(s["properties"]["b"].get("format").is_none());
        assert_eq!(s["properties"]["c"]["type"], json!(["string", "null"]));
        assert_eq!(
            s["properties"]["d"]["anyOf"],
            json!([{"enum": ["x", "y"]}, {"type": "null"}])
        );
        let e = &s["properties"]["e"]["anyOf"][0];
        assert_eq!(e["required"], json!(["f"]));
        assert_eq!(e["additionalProperties"], false);
        assert!(notes.changes.iter().any(|c| c.pointer == "/properties/b"));
    }

    #[test]
    fn what_cannot_be_strict_says_where() {
        for (schema, needle) in [
            (
                json!({"type": "object", "properties": {"m": {"type": "object", "additionalProperties": {"type": "integer"}}}}),
                "/properties/m: a map",
            ),
            (
                json!({"type": "object", "properties": {"v": true}}),
                "/properties/v: any JSON value",
            ),
            (
                json!({"type": "object", "properties": {"t": {"type": "array", "prefixItems": [{"type": "string"}]}}}),
                "/properties/t: a tuple",
            ),
        ] {
            let notes = strict(&schema).unwrap_err();
            assert!(
                notes.not_strict.iter().any(|r| r.contains(needle)),
                "{:?}",
                notes.not_strict
            );
        }
    }

    #[test]
    fn limits_are_checked() {
        let many: Map<String, Value> = (0..5001)
            .map(|i| (format!("p{i}"), json!({"type": "integer"})))
            .collect();
        let notes = strict(&json!({"type": "object", "properties": many})).unwrap_err();
        assert!(
            notes.not_strict[0].contains("5001 object properties"),
            "{:?}",
            notes.not_strict
        );

        let mut deep = json!({"type": "string"});
        for _ in 0..11 {
            deep = json!({"type": "object", "properties": {"x": deep}, "required": ["x"]});
        }
        let notes = strict(&deep).unwrap_err();
        assert!(
            notes.not_strict[0].contains("11 levels"),
            "{:?}",
            notes.not_strict
        );

        let values: Vec<String> = (0..1001).map(|i| format!("v{i}")).collect();
        let notes = strict(
            &json!({"type": "object", "properties": {"e": {"enum": values}}, "required": ["e"]}),
        )
        .unwrap_err();
        assert!(
            notes
                .not_strict
                .iter()
                .any(|r| r.contains("1001 enum values")),
            "{:?}",
            notes.not_strict
        );
    }
}
