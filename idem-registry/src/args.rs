//! Turning a model's JSON arguments into a tool's typed arguments, or a precise error.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Arguments that do not fit the tool's parameters, with where and why, in words a model
/// can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid arguments at `{pointer}`: {message}")]
pub struct ArgumentError {
    /// JSON pointer to the offending value (`""` is the whole arguments object).
    pub pointer: String,
    /// The rule that was violated.
    pub message: String,
}

impl ArgumentError {
    /// An error at a JSON pointer.
    pub fn new(pointer: impl Into<String>, message: impl Into<String>) -> Self {
        ArgumentError {
            pointer: pointer.into(),
            message: message.into(),
        }
    }
}

/// Deserialise typed arguments, then serialise them back: the result is what the
/// fingerprint covers (defaults applied, aliases resolved, unknown fields refused).
///
/// ```
/// #[derive(serde::Deserialize, serde::Serialize)]
/// #[serde(deny_unknown_fields)]
/// struct Args { to: String, #[serde(default)] cc: Vec<String> }
///
/// let typed = idem_registry::args::normalise::<Args>(&serde_json::json!({"to": "a@b.c"})).unwrap();
/// assert_eq!(typed, serde_json::json!({"to": "a@b.c", "cc": []}));
///
/// let err = idem_registry::args::normalise::<Args>(&serde_json::json!({"to": 5})).unwrap_err();
/// assert_eq!(err.pointer, "/to");
/// ```
pub fn normalise<T: DeserializeOwned + Serialize>(
    arguments: &Value,
) -> Result<Value, ArgumentError> {
    let typed: T = parse_ref(arguments)?;
    serde_json::to_value(&typed)
        .map_err(|e| ArgumentError::new("", format!("arguments could not be re-encoded: {e}")))
}

/// Deserialise typed arguments with the JSON pointer of the first error.
pub fn parse<T: DeserializeOwned>(arguments: Value) -> Result<T, ArgumentError> {
    parse_ref(&arguments)
}

/// [`parse`] from a borrow: the arguments stay with the caller.
pub fn parse_ref<T: DeserializeOwned>(arguments: &Value) -> Result<T, ArgumentError> {
    if !arguments.is_object() {
        return Err(ArgumentError::new(
            "",
            format!(
                "expected an object of named arguments, got {}",
                kind(&arguments)
            ),
        ));
    }
    // Valid arguments, the common case, need no path: deserialise from a borrow, and track
    // the path only to explain a failure (serde_json's `&Value` deserialiser accepts exactly
    // what its owned one accepts, so the typed value is the same).
    if let Ok(typed) = T::deserialize(arguments) {
        return Ok(typed);
    }
    serde_path_to_error::deserialize(arguments).map_err(|e| {
        let pointer = pointer_of(e.path());
        ArgumentError::new(pointer, e.into_inner().to_string())
    })
}

fn pointer_of(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for seg in path.iter() {
        match seg {
            Segment::Seq { index } => {
                out.push('/');
                out.push_str(&index.to_string());
            }
            Segment::Map { key } | Segment::Enum { variant: key } => {
                out.push('/');
                out.push_str(&key.replace('~', "~0").replace('/', "~1"));
            }
            Segment::Unknown => out.push_str("/?"),
        }
    }
    out
}

/// A short name of a JSON value's type, for messages.
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize, Serialize)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        n: u32,
    }

    #[derive(Debug, Deserialize, Serialize)]
    #[serde(deny_unknown_fields)]
    struct Args {
        items: Vec<Inner>,
        note: Option<String>,
    }

    #[test]
    fn errors_name_the_pointer_and_rule() {
        let e = parse::<Args>(json!({"items": [{"n": 1}, {"n": -1}]})).unwrap_err();
        assert_eq!(e.pointer, "/items/1/n");
        assert!(e.message.contains("invalid value"), "{}", e.message);
        let e = parse::<Args>(json!({"items": [], "extra": 1})).unwrap_err();
        assert!(e.message.contains("unknown field `extra`"), "{}", e.message);
        let e = parse::<Args>(json!({})).unwrap_err();
        assert!(e.message.contains("missing field `items`"), "{}", e.message);
        let e = parse::<Args>(json!([1])).unwrap_err();
        assert_eq!(e.pointer, "");
        assert!(e.message.contains("expected an object"));
    }

    #[test]
    fn normalise_fills_options() {
        assert_eq!(
            normalise::<Args>(&json!({"items": []})).unwrap(),
            json!({"items": [], "note": null})
        );
    }
}
