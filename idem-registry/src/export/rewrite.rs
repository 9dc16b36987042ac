//! Schema rewriting the provider transforms share: the bottom-up walk, what a schema
//! declares, and moving a keyword a provider does not take into the description.

use serde_json::{Map, Value};

use super::Notes;
use crate::pointer;

/// Visit every subschema bottom-up (children before their parent), each with its pointer in
/// the document as it was before the visit: a parent may rename its own keywords or wrap its
/// children without disturbing the pointers already reported below it.
pub(crate) fn walk_post(schema: &mut Value, pointer: &str, f: &mut dyn FnMut(&mut Value, &str)) {
    if let Some(obj) = schema.as_object_mut() {
        for (key, value) in obj.iter_mut() {
            let k = key.as_str();
            let here = pointer::join(pointer, k);
            if crate::schema::SCHEMA_KEYWORDS.contains(&k) {
                walk_post(value, &here, f);
            } else if crate::schema::SCHEMA_ARRAY_KEYWORDS.contains(&k) {
                if let Some(items) = value.as_array_mut() {
                    for (i, item) in items.iter_mut().enumerate() {
                        walk_post(item, &format!("{here}/{i}"), f);
                    }
                }
            } else if crate::schema::SCHEMA_MAP_KEYWORDS.contains(&k)
                && let Some(map) = value.as_object_mut()
            {
                for (name, sub) in map.iter_mut() {
                    walk_post(sub, &pointer::join(&here, name), f);
                }
            }
        }
    }
    f(schema, pointer);
}

/// Whether the schema says what kind of value it takes (a type, a set of values, a
/// reference, alternatives, or object / array structure).
pub(crate) fn is_typed(obj: &Map<String, Value>) -> bool {
    [
        "type",
        "enum",
        "const",
        "$ref",
        "anyOf",
        "oneOf",
        "allOf",
        "properties",
        "items",
        "prefixItems",
    ]
    .iter()
    .any(|k| obj.contains_key(*k))
}

/// Whether the schema is for objects.
pub(crate) fn is_object(obj: &Map<String, Value>) -> bool {
    match obj.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
        _ => obj.contains_key("properties"),
    }
}

/// Whether a `format` names a machine integer or float (schemars writes `uint32`, `int64`,
/// `double`...): the range is in `minimum` / `maximum` where it matters.
pub(crate) fn is_numeric_format(format: &str) -> bool {
    matches!(format, "float" | "double" | "int" | "uint")
        || format
            .strip_prefix("uint")
            .or_else(|| format.strip_prefix("int"))
            .is_some_and(|bits| !bits.is_empty() && bits.bytes().all(|b| b.is_ascii_digit()))
}

/// Leave out a machine-number `format` (`uint32`, `double`...) that the target does not
/// take: adapted when `minimum` and `maximum` carry the range (or the type is a float),
/// dropped when a bound goes unstated (64-bit integers).
pub(crate) fn drop_numeric_format(
    obj: &mut Map<String, Value>,
    format: &str,
    pointer: &str,
    notes: &mut Notes,
) {
    obj.remove("format");
    let bounded = obj.contains_key("minimum") && obj.contains_key("maximum");
    if bounded || matches!(format, "float" | "double") {
        notes.adapted(
            pointer,
            format!("`format: {format}` left out (not a format the target takes; the range is in `minimum`/`maximum`)"),
        );
    } else {
        notes.dropped(
            pointer,
            format!("`format: {format}` left out (not a format the target takes); its bound is not stated, idem checks it"),
        );
    }
}

/// Append a sentence to a schema's description.
pub(crate) fn describe(obj: &mut Map<String, Value>, sentence: &str) {
    let text = match obj.get("description").and_then(Value::as_str) {
        Some(existing) if !existing.trim().is_empty() => {
            let existing = existing.trim_end();
            if existing.ends_with(['.', '!', '?', ':']) {
                format!("{existing} {sentence}")
            } else {
                format!("{existing}. {sentence}")
            }
        }
        _ => sentence.to_owned(),
    };
    obj.insert("description".into(), Value::String(text));
}

/// A keyword and its value as a sentence a model reads.
pub(crate) fn sentence(keyword: &str, value: &Value) -> String {
    let n = value.to_string();
    match keyword {
        "minLength" => format!("At least {n} characters."),
        "maxLength" => format!("At most {n} characters."),
        "pattern" => format!("Must match the regular expression {n}."),
        "minimum" => format!("At least {n}."),
        "maximum" => format!("At most {n}."),
        "exclusiveMinimum" => format!("Greater than {n}."),
        "exclusiveMaximum" => format!("Less than {n}."),
        "multipleOf" => format!("A multiple of {n}."),
        "minItems" => format!("At least {n} items."),
        "maxItems" => format!("At most {n} items."),
        "uniqueItems" => "Items must be unique.".into(),
        "minProperties" => format!("At least {n} properties."),
        "maxProperties" => format!("At most {n} properties."),
        "format" => format!("Format: {}.", value.as_str().unwrap_or(&n)),
        "default" => format!("Default: {n}."),
        "const" => format!("Must be {n}."),
        "enum" => format!(
            "One of: {}.",
            value
                .as_array()
                .map(|v| v
                    .iter()
                    .map(Value::to_string)
                    .collect::<Vec<_>>()
                    .join(", "))
                .unwrap_or(n)
        ),
        other => format!("{other}: {n}."),
    }
}

/// Move a keyword into the description, reporting it.
pub(crate) fn move_to_description(
    obj: &mut Map<String, Value>,
    keyword: &str,
    pointer: &str,
    notes: &mut Notes,
) {
    if let Some(value) = obj.remove(keyword) {
        let s = sentence(keyword, &value);
        describe(obj, &s);
        notes.described(
            pointer,
            format!("`{keyword}` moved into the description: \"{s}\""),
        );
    }
}

/// `send_email` -> `Send email`, for MCP titles.
pub(crate) fn title_of(name: &str) -> String {
    let words = name.replace(['_', '-'], " ");
    let mut chars = words.trim().chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}
