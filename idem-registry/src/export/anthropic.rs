//! Anthropic Messages tools: the plain form, and strict tool use.
//!
//! Strict tool use (`"strict": true` beside `name`, `description` and `input_schema`) takes
//! the structured-outputs subset of JSON Schema: `type`, `enum` of scalars, `const`,
//! `anyOf`, `allOf`, local `$ref`, `properties` / `required` / `additionalProperties:
//! false` (required on every object), `items`, `minItems` of 0 or 1, `default`, `pattern`,
//! and the formats `date-time`, `time`, `date`, `duration`, `email`, `hostname`, `uri`,
//! `ipv4`, `ipv6`, `uuid`. It does not take recursive schemas, numeric bounds, string
//! lengths or other array bounds. Optional properties stay optional. A request may hold at
//! most 20 strict tools, with 24 optional properties and 16 properties that use `anyOf` or
//! a type array among all of them.

use serde_json::{Map, Value, json};

use super::{
    Notes, Strictness, drop_numeric_format, is_numeric_format, is_object, is_typed,
    move_to_description,
};
use crate::tool::ToolDef;

const FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "uri",
    "ipv4",
    "ipv6",
    "uuid",
];

const DESCRIBED: &[&str] = &[
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "maxItems",
    "minProperties",
    "maxProperties",
    "uniqueItems",
    "examples",
];

const NO_STRICT_FORM: &[(&str, &str)] = &[
    ("prefixItems", "a tuple (`prefixItems`) has no strict form"),
    ("not", "`not` is not supported by strict tool use"),
    (
        "if",
        "`if`/`then`/`else` is not supported by strict tool use",
    ),
    (
        "dependentRequired",
        "`dependentRequired` is not supported by strict tool use",
    ),
    (
        "dependentSchemas",
        "`dependentSchemas` is not supported by strict tool use",
    ),
    (
        "patternProperties",
        "`patternProperties` is not supported by strict tool use",
    ),
    (
        "propertyNames",
        "`propertyNames` is not supported by strict tool use",
    ),
    (
        "unevaluatedProperties",
        "`unevaluatedProperties` is not supported by strict tool use",
    ),
    (
        "unevaluatedItems",
        "`unevaluatedItems` is not supported by strict tool use",
    ),
    ("contains", "`contains` is not supported by strict tool use"),
];

const MAX_STRICT_TOOLS: usize = 20;
const MAX_OPTIONAL: usize = 24;
const MAX_UNIONS: usize = 16;

/// The request-wide limits of strict tool use, shared by the tools of one export.
#[derive(Debug, Default)]
pub(crate) struct Budget {
    tools: usize,
    optional: usize,
    unions: usize,
}

impl Budget {
    pub(crate) fn new() -> Self {
        Budget::default()
    }
}

pub(super) fn plain(tool: &ToolDef) -> (Value, Strictness, Notes) {
    let value = json!({
        "name": tool.name(),
        "description": tool.description(),
        "input_schema": tool.input_schema(),
    });
    (value, Strictness::NotApplicable, Notes::default())
}

pub(super) fn strict(tool: &ToolDef, budget: &mut Budget) -> (Value, Strictness, Notes) {
    let mut notes = match transform(tool.input_schema()) {
        Ok((schema, notes, counts)) => {
            let over = [
                (budget.tools + 1, MAX_STRICT_TOOLS, "strict tools"),
                (
                    budget.optional + counts.optional,
                    MAX_OPTIONAL,
                    "optional properties",
                ),
                (
                    budget.unions + counts.unions,
                    MAX_UNIONS,
                    "properties with `anyOf` or a type array",
                ),
            ]
            .into_iter()
            .find(|(n, max, _)| n > max);
            match over {
                None => {
                    budget.tools += 1;
                    budget.optional += counts.optional;
                    budget.unions += counts.unions;
                    let value = json!({
                        "name": tool.name(),
                        "description": tool.description(),
                        "input_schema": schema,
                        "strict": true,
                    });
                    return (value, Strictness::Strict, notes.finish());
                }
                Some((n, max, what)) => {
                    let mut refused = Notes::default();
                    refused.refuse_strict(
                        "",
                        format!(
                            "a request may hold {max} {what} across its strict tools; this tool would bring it to {n}"
                        ),
                    );
                    refused
                }
            }
        }
        Err(notes) => notes,
    };
    notes.changes.clear();
    let value = json!({
        "name": tool.name(),
        "description": tool.description(),
        "input_schema": tool.input_schema(),
        "strict": false,
    });
    let reasons = notes.not_strict.clone();
    (value, Strictness::NotStrict { reasons }, notes)
}

#[derive(Debug, Default)]
struct Counts {
    optional: usize,
    unions: usize,
}

fn transform(canonical: &Value) -> Result<(Value, Notes, Counts), Notes> {
    let mut schema = canonical.clone();
    let mut notes = Notes::default();
    let mut counts = Counts::default();
    super::walk_post(&mut schema, "", &mut |node, pointer| {
        strict_node(node, pointer, &mut notes, &mut counts)
    });
    if let Some(obj) = schema.as_object_mut()
        && obj.remove("$defs").is_some()
        && notes.not_strict.is_empty()
    {
        notes.refuse_strict(
            "/$defs",
            "a recursive type; strict tool use does not support recursive schemas",
        );
    }
    if notes.not_strict.is_empty() {
        Ok((schema, notes, counts))
    } else {
        Err(notes)
    }
}

fn strict_node(node: &mut Value, pointer: &str, notes: &mut Notes, counts: &mut Counts) {
    let obj = match node {
        Value::Object(obj) if is_typed(obj) => obj,
        Value::Object(_) | Value::Bool(true) => {
            notes.refuse_strict(
                pointer,
                "any JSON value is accepted here (an untyped value such as `serde_json::Value`); strict tool use needs a type",
            );
            return;
        }
        _ => return,
    };
    if obj.contains_key("$ref") {
        notes.refuse_strict(
            pointer,
            "a reference to a recursive type; strict tool use does not support recursive schemas",
        );
    }
    for (keyword, why) in NO_STRICT_FORM {
        if obj.contains_key(*keyword) {
            notes.refuse_strict(pointer, why);
        }
    }
    if obj
        .get("enum")
        .and_then(Value::as_array)
        .is_some_and(|e| e.iter().any(|v| v.is_object() || v.is_array()))
    {
        notes.refuse_strict(
            pointer,
            "an `enum` of objects or arrays; strict tool use takes scalars only",
        );
    }
    if let Some(one_of) = obj.remove("oneOf") {
        obj.insert("anyOf".into(), one_of);
        notes.adapted(
            pointer,
            "`oneOf` became `anyOf` (strict tool use has no `oneOf`; the alternatives exclude each other)",
        );
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
    for keyword in DESCRIBED {
        move_to_description(obj, keyword, pointer, notes);
    }
    if obj
        .get("minItems")
        .and_then(Value::as_u64)
        .is_some_and(|n| n > 1)
    {
        move_to_description(obj, "minItems", pointer, notes);
    }
    if obj.contains_key("anyOf") || obj.get("type").is_some_and(Value::is_array) {
        counts.unions += 1;
    }
    if is_object(obj) {
        strict_object(obj, pointer, notes, counts);
    }
}

fn strict_object(
    obj: &mut Map<String, Value>,
    pointer: &str,
    notes: &mut Notes,
    counts: &mut Counts,
) {
    match obj.get("additionalProperties") {
        Some(Value::Bool(false)) => {}
        Some(_) => {
            notes.refuse_strict(
                pointer,
                "a map with free-form keys (`additionalProperties` is a schema); strict tool use needs every key declared",
            );
            return;
        }
        None if !obj.contains_key("properties") => {
            notes.refuse_strict(
                pointer,
                "an object with arbitrary keys; strict tool use needs every key declared",
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
    let required = obj
        .get("required")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let declared = crate::schema::properties(obj).map_or(0, Map::len);
    counts.optional += declared.saturating_sub(required);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_keeps_optional_properties_and_describes_bounds() {
        let (s, notes, counts) = transform(&json!({
            "type": "object",
            "properties": {
                "n": {"type": "integer", "minimum": 1, "format": "uint32"},
                "s": {"type": ["string", "null"], "maxLength": 3}
            },
            "required": ["n"]
        }))
        .unwrap();
        assert_eq!(s["required"], json!(["n"]));
        assert_eq!(s["additionalProperties"], false);
        assert_eq!(
            s["properties"]["n"],
            json!({"type": "integer", "description": "At least 1."})
        );
        assert_eq!(counts.optional, 1);
        assert_eq!(counts.unions, 1);
        assert_eq!(notes.changes.len(), 4);
    }

    #[test]
    fn recursion_and_maps_are_not_strict() {
        let notes = transform(&json!({
            "type": "object",
            "properties": {"n": {"$ref": "#/$defs/N"}},
            "$defs": {"N": {"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#/$defs/N"}, {"type": "null"}]}}}}
        }))
        .unwrap_err();
        assert!(
            notes.not_strict.iter().any(|r| r.contains("recursive")),
            "{:?}",
            notes.not_strict
        );
    }
}
