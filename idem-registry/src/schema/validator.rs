//! The compiled validator of an argument schema: a model's arguments checked before anything
//! is deserialised, recorded or executed.
//!
//! The validator is compiled by the `jsonschema` crate, built without its HTTP and file
//! resolvers: a schema that refers to another document is refused, nothing is fetched.
//! Errors name the JSON pointer of the offending value and the violated rule in words a model
//! can act on (see [`super::messages`]), and list the next few problems too, so that one
//! correction can fix them all.

use std::fmt::Write as _;

use jsonschema::{Draft, Validator};
use serde_json::Value;

use super::messages::explain;
use crate::error::{ArgumentError, RegistryError};
use crate::pointer;

/// How many problems after the first one an error message lists.
const MORE_PROBLEMS: usize = 3;

/// A schema the validator cannot compile.
///
/// ```
/// use idem::schema::ArgumentValidator;
/// let err = ArgumentValidator::new(&serde_json::json!({"type": "text"})).unwrap_err();
/// assert!(err.to_string().starts_with("the input schema cannot be compiled"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the input schema cannot be compiled: {message}")]
pub struct SchemaError {
    /// What the compiler said.
    pub message: String,
}

impl SchemaError {
    /// The refusal of `tool`, whose input schema this is, at registration.
    pub(crate) fn refuses(&self, tool: &str) -> RegistryError {
        RegistryError::invalid(tool, self.to_string())
    }
}

/// A compiled argument schema.
///
/// ```
/// use idem::schema::ArgumentValidator;
/// use serde_json::json;
///
/// let v = ArgumentValidator::new(&json!({
///     "type": "object",
///     "properties": {"to": {"type": "string", "format": "email"}},
///     "required": ["to"],
///     "additionalProperties": false
/// }))
/// .unwrap();
/// assert!(v.validate(&json!({"to": "dana@example.com"})).is_ok());
///
/// let err = v.validate(&json!({"to": "dana"})).unwrap_err();
/// assert_eq!(err.pointer, "/to");
/// assert!(err.message.contains("not a valid email address"), "{}", err.message);
///
/// let err = v.validate(&json!({"to": "dana@example.com", "cc": "x"})).unwrap_err();
/// assert_eq!(err.pointer, "/cc");
/// assert!(err.message.contains("unknown property `cc`"), "{}", err.message);
/// ```
pub struct ArgumentValidator {
    schema: Value,
    validator: Validator,
}

impl std::fmt::Debug for ArgumentValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArgumentValidator").finish_non_exhaustive()
    }
}

impl ArgumentValidator {
    /// Compile a schema (JSON Schema 2020-12, formats asserted).
    pub fn new(schema: &Value) -> Result<Self, SchemaError> {
        let validator = jsonschema::options()
            .with_draft(Draft::Draft202012)
            .should_validate_formats(true)
            .build(schema)
            .map_err(|e| SchemaError {
                message: e.to_string(),
            })?;
        Ok(ArgumentValidator {
            schema: schema.clone(),
            validator,
        })
    }

    /// Check arguments. The error points at the first problem and lists a few more.
    pub fn validate(&self, arguments: &Value) -> Result<(), ArgumentError> {
        // The common case answers without building an error iterator (no allocation).
        if self.validator.is_valid(arguments) {
            return Ok(());
        }
        let mut errors = self.validator.iter_errors(arguments);
        let Some(first) = errors.next() else {
            return Ok(());
        };
        let (pointer, mut message) = explain(&self.schema, arguments, &first);
        let rest: Vec<_> = errors.take(MORE_PROBLEMS + 1).collect();
        if !rest.is_empty() {
            let shown = rest.len().min(MORE_PROBLEMS);
            message.push_str("; also");
            for (i, e) in rest.iter().take(shown).enumerate() {
                let (p, m) = explain(&self.schema, arguments, e);
                let sep = if i == 0 { "" } else { ";" };
                let at = pointer::quoted(&p, "the arguments");
                let _ = write!(message, "{sep} at {at}: {m}");
            }
            if rest.len() > shown {
                message.push_str("; and more");
            }
        }
        Err(ArgumentError::new(pointer, message))
    }

    /// Whether the arguments are valid.
    pub fn is_valid(&self, arguments: &Value) -> bool {
        self.validator.is_valid(arguments)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(schema: Value, args: Value) -> ArgumentError {
        ArgumentValidator::new(&schema)
            .unwrap()
            .validate(&args)
            .unwrap_err()
    }

    #[test]
    fn messages_name_the_pointer_and_the_rule() {
        let s = json!({
            "type": "object",
            "properties": {
                "n": {"type": "integer", "minimum": 0, "maximum": 10},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                "colour": {"enum": ["red", "green"]},
                "at": {"type": "string", "format": "date-time"}
            },
            "required": ["n"],
            "additionalProperties": false
        });
        let e = check(s.clone(), json!({"n": 11}));
        assert_eq!(
            (e.pointer.as_str(), e.message.as_str()),
            ("/n", "must be at most 10, got 11")
        );
        let e = check(s.clone(), json!({"n": "3"}));
        assert_eq!(e.message, "expected an integer, got a string");
        let e = check(s.clone(), json!({"n": 1, "tags": ["a", 2]}));
        assert_eq!(e.pointer, "/tags/1");
        let e = check(s.clone(), json!({"n": 1, "colour": "blue"}));
        assert_eq!(e.message, r#"expected one of "red", "green", got "blue""#);
        let e = check(s.clone(), json!({"n": 1, "at": "yesterday"}));
        assert!(
            e.message
                .starts_with(r#""yesterday" is not a valid date-time"#),
            "{}",
            e.message
        );
        let e = check(s.clone(), json!({}));
        assert_eq!(
            (e.pointer.as_str(), e.message.as_str()),
            ("", "missing required property `n`")
        );
        let e = check(s.clone(), json!({"n": 1, "extra": 1}));
        assert_eq!(e.pointer, "/extra");
        assert!(
            e.message
                .contains("allowed properties are `at`, `colour`, `n`, `tags`"),
            "{}",
            e.message
        );
        let e = check(s.clone(), json!([1]));
        assert_eq!(
            (e.pointer.as_str(), e.message.as_str()),
            ("", "expected an object of named arguments, got an array")
        );
        let e = check(
            json!({"type": "object", "additionalProperties": false}),
            json!({"x": 1}),
        );
        assert_eq!(
            (e.pointer.as_str(), e.message.as_str()),
            (
                "/x",
                "unknown property `x`; this object takes no properties"
            )
        );
        // Several problems: the first one leads, the next ones follow.
        let e = check(s, json!({"n": -1, "tags": [1, 2, 3]}));
        assert_eq!(e.pointer, "/n");
        assert!(e.message.contains("; also at `/tags"), "{}", e.message);
    }

    #[test]
    fn alternatives_report_the_meant_variant_or_list_the_forms() {
        let s = json!({
            "type": "object",
            "properties": {
                "shape": {"oneOf": [
                    {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}}, "required": ["kind", "r"]},
                    {"type": "object", "properties": {"kind": {"const": "square"}, "side": {"type": "number"}}, "required": ["kind", "side"]}
                ]},
                "limit": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]}
            }
        });
        let e = check(s.clone(), json!({"shape": {"kind": "circle", "r": "big"}}));
        assert_eq!(
            (e.pointer.as_str(), e.message.as_str()),
            ("/shape/r", "expected a number, got a string")
        );
        let e = check(s.clone(), json!({"shape": {"kind": "hexagon"}}));
        assert_eq!(e.pointer, "/shape");
        assert!(
            e.message
                .contains(r#"{"kind": "circle", ...} | {"kind": "square", ...}"#),
            "{}",
            e.message
        );
        let e = check(s, json!({"limit": 0}));
        assert_eq!(
            (e.pointer.as_str(), e.message.as_str()),
            ("/limit", "must be at least 1, got 0")
        );
    }

    #[test]
    fn remote_references_are_refused() {
        assert!(
            ArgumentValidator::new(&json!({"$ref": "https://example.com/schema.json"})).is_err()
        );
    }
}
