//! The words of a validation error: the JSON pointer of the offending value and the violated
//! rule, as a model can act on them ("must be at most 10, got 11", "unknown property `cc`;
//! the allowed properties are ...", "expected one of: ...").

use jsonschema::ValidationError;
use jsonschema::error::{TypeKind, ValidationErrorKind};
use serde_json::Value;

use super::keywords::{properties, resolve};
use crate::args::{kind, not_an_object};
use crate::pointer;

/// The pointer and the words for one validation error.
pub(super) fn explain(
    schema: &Value,
    arguments: &Value,
    error: &ValidationError<'_>,
) -> (String, String) {
    let path = error.instance_path().as_str().to_owned();
    let instance = error.instance();
    let got = describe_value(instance);
    let message = match error.kind() {
        ValidationErrorKind::Type { kind: expected } => {
            let expected = match expected {
                TypeKind::Single(t) => article(t.as_str()).to_owned(),
                TypeKind::Multiple(set) => set
                    .iter()
                    .map(|t| article(t.as_str()))
                    .collect::<Vec<_>>()
                    .join(" or "),
            };
            if path.is_empty() && expected == "an object" {
                not_an_object(instance)
            } else {
                format!("expected {expected}, got {}", kind(instance))
            }
        }
        ValidationErrorKind::Required { property } => {
            let name = property
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| property.to_string());
            format!("missing required property `{name}`")
        }
        ValidationErrorKind::FalseSchema
            if error
                .schema_path()
                .as_str()
                .ends_with("/additionalProperties") =>
        {
            // `additionalProperties: false` on an object that declares no properties is
            // reported as a false schema, at the object: name the keys it got.
            let unexpected: Vec<String> = arguments
                .pointer(&path)
                .and_then(Value::as_object)
                .map(|o| o.keys().cloned().collect())
                .unwrap_or_default();
            return unknown_properties(schema, error, &path, &unexpected);
        }
        ValidationErrorKind::AdditionalProperties { unexpected }
        | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
            return unknown_properties(schema, error, &path, unexpected);
        }
        ValidationErrorKind::Enum { options } => {
            let options = options
                .as_array()
                .map(|o| {
                    o.iter()
                        .map(Value::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_else(|| options.to_string());
            format!("expected one of {options}, got {got}")
        }
        ValidationErrorKind::Constant { expected_value } => {
            format!("expected {expected_value}, got {got}")
        }
        ValidationErrorKind::Minimum { limit } => format!("must be at least {limit}, got {got}"),
        ValidationErrorKind::Maximum { limit } => format!("must be at most {limit}, got {got}"),
        ValidationErrorKind::ExclusiveMinimum { limit } => {
            format!("must be greater than {limit}, got {got}")
        }
        ValidationErrorKind::ExclusiveMaximum { limit } => {
            format!("must be less than {limit}, got {got}")
        }
        ValidationErrorKind::MultipleOf { multiple_of } => {
            format!("must be a multiple of {multiple_of}, got {got}")
        }
        ValidationErrorKind::MinLength { limit } => format!(
            "must be at least {limit} character{} long, got {}",
            plural(*limit),
            chars(instance)
        ),
        ValidationErrorKind::MaxLength { limit } => format!(
            "must be at most {limit} character{} long, got {}",
            plural(*limit),
            chars(instance)
        ),
        ValidationErrorKind::MinItems { limit } => format!(
            "must have at least {limit} item{}, got {}",
            plural(*limit),
            instance.as_array().map_or(0, Vec::len)
        ),
        ValidationErrorKind::MaxItems { limit } => format!(
            "must have at most {limit} item{}, got {}",
            plural(*limit),
            instance.as_array().map_or(0, Vec::len)
        ),
        ValidationErrorKind::MinProperties { limit } => format!(
            "must have at least {limit} propert{}",
            if *limit == 1 { "y" } else { "ies" }
        ),
        ValidationErrorKind::MaxProperties { limit } => format!(
            "must have at most {limit} propert{}",
            if *limit == 1 { "y" } else { "ies" }
        ),
        ValidationErrorKind::UniqueItems => "items must be unique; remove the duplicates".into(),
        ValidationErrorKind::Pattern { pattern } => {
            format!("{got} does not match the pattern `{pattern}`")
        }
        ValidationErrorKind::Format { format } => {
            format!("{got} is not a valid {}", format_name(format))
        }
        ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context } => {
            return explain_alternatives(schema, arguments, error, &path, context);
        }
        ValidationErrorKind::OneOfMultipleValid { .. } => {
            "matches more than one of the allowed forms; give a value that matches exactly one"
                .into()
        }
        ValidationErrorKind::FalseSchema => "no value is allowed here; remove it".into(),
        ValidationErrorKind::Not { .. } => format!("{got} is not allowed here"),
        ValidationErrorKind::PropertyNames { error: inner } => {
            let (_, m) = explain(schema, arguments, inner);
            format!("property name {got} is invalid: {m}")
        }
        ValidationErrorKind::Contains => {
            "must contain at least one item that matches the item schema".into()
        }
        _ => error.to_string(),
    };
    (path, message)
}

/// "unknown property `x`; the allowed properties are ...", pointing at the first one.
fn unknown_properties(
    schema: &Value,
    error: &ValidationError<'_>,
    path: &str,
    unexpected: &[String],
) -> (String, String) {
    // Sorted: a map's order depends on serde_json's features (`preserve_order`).
    let mut allowed = parent_schema(schema, error)
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
        .map(|p| p.keys().map(|k| format!("`{k}`")).collect::<Vec<_>>())
        .unwrap_or_default();
    allowed.sort_unstable();
    let names = unexpected
        .iter()
        .map(|u| format!("`{u}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let noun = if unexpected.len() == 1 {
        "unknown property"
    } else {
        "unknown properties"
    };
    let hint = if allowed.is_empty() {
        "; this object takes no properties".to_owned()
    } else {
        format!("; the allowed properties are {}", allowed.join(", "))
    };
    let pointer = match unexpected.first() {
        Some(first) => pointer::join(path, first),
        None => path.to_owned(),
    };
    (pointer, format!("{noun} {names}{hint}"))
}

/// `anyOf` / `oneOf` with no matching branch: report the closest branch's problem when one
/// branch is clearly meant (nullable values, a variant whose tag matched), else list the
/// allowed forms.
fn explain_alternatives(
    schema: &Value,
    arguments: &Value,
    error: &ValidationError<'_>,
    path: &str,
    branches: &[Vec<ValidationError<'static>>],
) -> (String, String) {
    let depth = |e: &ValidationError<'_>| e.instance_path().segments().count();
    let here = error.instance_path().segments().count();
    // A branch that fails on the value's own type or on a tag (a `const` or `enum` one
    // level down) is not the one the caller meant.
    let score = |errors: &Vec<ValidationError<'static>>| -> usize {
        let mismatch = errors.iter().any(|e| match e.kind() {
            ValidationErrorKind::Type { .. } => depth(e) == here,
            ValidationErrorKind::Constant { .. } => depth(e) <= here + 1,
            ValidationErrorKind::Enum { options } => {
                depth(e) == here
                    || (depth(e) == here + 1 && options.as_array().is_some_and(|o| o.len() == 1))
            }
            ValidationErrorKind::Required { .. }
            | ValidationErrorKind::AdditionalProperties { .. } => {
                // A missing or unknown tag for externally tagged variants.
                depth(e) == here
                    && parent_schema(schema, e)
                        .and_then(|s| s.get("properties"))
                        .and_then(Value::as_object)
                        .is_some_and(|p| p.len() == 1)
            }
            _ => false,
        });
        usize::from(mismatch) * 1000 + errors.len()
    };
    let best = branches
        .iter()
        .enumerate()
        .min_by_key(|(_, errors)| score(errors))
        .filter(|(_, errors)| score(errors) < 1000 && !errors.is_empty());
    if let Some((_, errors)) = best
        && let Some(first) = errors.first()
    {
        return explain(schema, arguments, first);
    }
    let forms: Vec<String> = parent_schema(schema, error)
        .and_then(|s| s.get("anyOf").or_else(|| s.get("oneOf")))
        .and_then(Value::as_array)
        .map(|bs| bs.iter().map(|b| summarise(schema, b)).collect())
        .unwrap_or_default();
    let got = describe_value(error.instance());
    let message = if forms.is_empty() {
        format!("{got} matches none of the allowed forms")
    } else {
        format!("expected one of: {}; got {got}", forms.join(" | "))
    };
    (path.to_owned(), message)
}

/// A short description of what a schema accepts, for "expected one of" messages.
fn summarise(root: &Value, schema: &Value) -> String {
    let schema = resolve(root, schema).unwrap_or(schema);
    let Some(obj) = schema.as_object() else {
        return "any value".into();
    };
    if let Some(c) = obj.get("const") {
        return c.to_string();
    }
    if let Some(e) = obj.get("enum").and_then(Value::as_array) {
        return e
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join(" | ");
    }
    if let Some(props) = properties(obj) {
        // A tag: a property with a single allowed value.
        if let Some((k, v)) = props.iter().find_map(|(k, p)| {
            p.get("const")
                .or_else(|| {
                    p.get("enum")
                        .and_then(|e| e.as_array().filter(|e| e.len() == 1)?.first())
                })
                .map(|v| (k, v))
        }) {
            return format!("{{\"{k}\": {v}, ...}}");
        }
        let required: Vec<&str> = obj
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if props.len() == 1 && required.len() == 1 {
            return format!("{{\"{}\": ...}}", required[0]);
        }
        let keys: Vec<String> = props.keys().map(|k| format!("\"{k}\"")).collect();
        return format!("an object with {}", keys.join(", "));
    }
    match obj.get("type") {
        Some(Value::String(t)) => article(t).to_owned(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .map(article)
            .collect::<Vec<_>>()
            .join(" or "),
        _ => "a value".into(),
    }
}

/// The schema object that holds the failing keyword.
fn parent_schema<'a>(root: &'a Value, error: &ValidationError<'_>) -> Option<&'a Value> {
    let keyword = error.schema_path().as_str();
    let parent = &keyword[..keyword.rfind('/')?];
    root.pointer(parent)
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn chars(v: &Value) -> usize {
    v.as_str().map_or(0, |s| s.chars().count())
}

fn article(t: &str) -> &'static str {
    match t {
        "null" => "null",
        "boolean" => "a boolean",
        "integer" => "an integer",
        "number" => "a number",
        "string" => "a string",
        "array" => "an array",
        "object" => "an object",
        _ => "a value",
    }
}

/// A value, quoted and shortened for a message.
fn describe_value(v: &Value) -> String {
    let text = v.to_string();
    if text.chars().count() <= 60 {
        text
    } else {
        let cut: String = text.chars().take(57).collect();
        format!("{cut}...")
    }
}

fn format_name(format: &str) -> String {
    match format {
        "date-time" => "date-time (RFC 3339, e.g. \"2025-01-31T09:30:00Z\")".into(),
        "date" => "date (e.g. \"2025-01-31\")".into(),
        "time" => "time (e.g. \"09:30:00Z\")".into(),
        "uuid" => "UUID (e.g. \"123e4567-e89b-12d3-a456-426614174000\")".into(),
        "email" => "email address".into(),
        "uri" => "absolute URI (e.g. \"https://example.com/x\")".into(),
        "ipv4" => "IPv4 address".into(),
        "ipv6" => "IPv6 address".into(),
        "hostname" => "hostname".into(),
        "duration" => "ISO 8601 duration (e.g. \"P1DT2H\")".into(),
        other => other.to_owned(),
    }
}
