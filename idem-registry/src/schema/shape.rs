//! The shape every argument schema must have: one JSON object of named arguments, which
//! every provider requires, and pointers into it that name arguments it has. Checked at
//! registration, so that a tool that breaks it is refused with an error naming it, never at
//! call time.

use serde_json::Value;

use super::validator::ArgumentValidator;
use crate::error::RegistryError;
use crate::pointer;

/// Combinators that would make the arguments something other than one plain object.
const ROOT_COMBINATORS: &[&str] = &["anyOf", "oneOf", "allOf", "not", "if", "then", "else"];

/// Check that an argument schema describes one JSON object of named arguments, as every
/// provider requires: `"type": "object"` at the root, no combinator beside it (a flattened
/// enum parameter puts a `oneOf` there), and a schema the validator can compile. The
/// registry runs this for every tool, so such a tool is refused at registration with an
/// error naming it, never at call time.
///
/// ```
/// use idem::schema::check_argument_schema;
/// use serde_json::json;
///
/// assert!(check_argument_schema("ok", &json!({"type": "object", "properties": {}})).is_ok());
/// let err = check_argument_schema("shapes", &json!({"type": "object", "oneOf": []})).unwrap_err();
/// assert!(err.to_string().contains("`oneOf`"), "{err}");
/// assert!(check_argument_schema("list", &json!({"type": "array"})).is_err());
/// ```
pub fn check_argument_schema(tool: &str, schema: &Value) -> Result<(), RegistryError> {
    check_shape(tool, schema)?;
    ArgumentValidator::new(schema)
        .map(|_| ())
        .map_err(|e| e.refuses(tool))
}

/// [`check_argument_schema`] without compiling the validator.
pub(crate) fn check_shape(tool: &str, schema: &Value) -> Result<(), RegistryError> {
    let invalid = |reason: String| RegistryError::invalid(tool, reason);
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

/// Refuse an entry of `field` (a secret or natural-key pointer into the arguments) that is
/// not a JSON Pointer, or that names an argument the schema does not list (when it lists
/// them all): a typo would otherwise never match, and the entry would quietly do nothing.
/// The reason is returned for the caller to attach to its tool.
pub(crate) fn check_argument_pointer(
    field: &str,
    entry: &str,
    schema: &Value,
) -> Result<(), String> {
    if entry.is_empty() {
        return Ok(());
    }
    let Some(first) = pointer::first_key(entry) else {
        let fix = entry.trim_start_matches('#').trim_start_matches('/');
        let fix = if fix.is_empty() {
            "`\"\"` for the whole arguments".to_owned()
        } else {
            format!("`/{fix}`")
        };
        return Err(format!(
            "`{field}` entry `{entry}` is not a JSON Pointer, which starts with `/`: \
             write {fix}"
        ));
    };
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Ok(());
    };
    // Arguments the schema admits without listing them: the pointer may name one of those.
    let closed = |keyword: &str| schema.get(keyword).is_none_or(|v| *v == Value::Bool(false));
    let unlisted_admitted = !closed("additionalProperties")
        || !closed("unevaluatedProperties")
        || ["patternProperties", "$ref", "dependentSchemas"]
            .iter()
            .any(|k| schema.get(*k).is_some());
    if unlisted_admitted || properties.contains_key(first.as_ref()) {
        return Ok(());
    }
    // Sorted: a map's order depends on serde_json's features (`preserve_order`).
    let mut known: Vec<&str> = properties.keys().map(String::as_str).collect();
    known.sort_unstable();
    let known = if known.is_empty() {
        "it lists none".to_owned()
    } else {
        format!("it lists: {}", known.join(", "))
    };
    Err(format!(
        "`{field}` entry `{entry}` names the argument `{first}`, which the input schema \
         does not list ({known}; `\"\"` stands for the whole arguments)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn registration_check_refuses_what_is_not_one_object() {
        assert!(check_argument_schema("t", &json!(true)).is_err());
        assert!(check_argument_schema("t", &json!({"properties": {}})).is_err());
        assert!(check_argument_schema("t", &json!({"type": "object", "anyOf": [{}]})).is_err());
        assert!(
            check_argument_schema(
                "t",
                &json!({"type": "object", "$schema": "http://json-schema.org/draft-07/schema#"})
            )
            .is_err()
        );
        // A schema the validator cannot compile (an unknown type name) is refused too.
        let err = check_argument_schema(
            "t",
            &json!({"type": "object", "properties": {"a": {"type": "text"}}}),
        )
        .unwrap_err();
        assert!(err.to_string().contains("tool `t`"), "{err}");
        // A reference to another document is refused: nothing is fetched.
        assert!(
            check_argument_schema(
                "t",
                &json!({"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}})
            )
            .is_err()
        );
    }
}
