//! A tool call as a provider's response holds it, and the reading of that response: every
//! value is looked at before it is trusted, and a shape the provider's API does not document
//! is a [`ShapeError`] naming where it is, never a panic.

use serde_json::{Map, Value};

use idem_registry::pointer;

/// One tool call the model made, as extracted from the provider's response.
///
/// ```
/// use idem::agent::{Arguments, ModelCall, OpenAiChat, Shape};
/// use serde_json::json;
///
/// let message = json!({"role": "assistant", "content": null, "tool_calls": [{
///     "id": "call_DdmO9pD3xa9XTPNJ32zg2hcA", "type": "function",
///     "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}
/// }]});
/// let calls = OpenAiChat.calls(&message).unwrap();
/// assert_eq!(calls, [ModelCall {
///     id: Some("call_DdmO9pD3xa9XTPNJ32zg2hcA".into()),
///     name: "get_weather".into(),
///     arguments: Arguments::Json(json!({"city": "Paris"})),
/// }]);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ModelCall {
    /// The provider's id of the call: Chat's `tool_calls[].id`, Responses' `call_id`,
    /// Anthropic's `tool_use` `id`, Gemini's `functionCall.id` (often absent).
    pub id: Option<String>,
    /// The tool's name as the model wrote it.
    pub name: String,
    /// The arguments as the model sent them.
    pub arguments: Arguments,
}

/// A call's arguments as the model sent them.
///
/// ```
/// use idem::agent::Arguments;
/// use serde_json::json;
///
/// assert_eq!(Arguments::from_text("{\"city\": \"Paris\"}"), Arguments::Json(json!({"city": "Paris"})));
/// assert_eq!(Arguments::from_text(""), Arguments::Json(json!({})));
/// let Arguments::NotJson { error, .. } = Arguments::from_text("{\"city\": \"Par") else { panic!() };
/// assert!(error.contains("line 1 column 13"), "{error}");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum Arguments {
    /// JSON: parsed from the text OpenAI sends, or the object Anthropic and Gemini send.
    Json(Value),
    /// Text that is not JSON. Nothing is dispatched; the model is told where it broke.
    NotJson {
        /// The text as the model sent it.
        text: String,
        /// serde_json's error, with its line and column.
        error: String,
    },
}

impl Arguments {
    /// The arguments of a provider that sends them as JSON text (OpenAI). Empty text (or
    /// only whitespace) is `{}`: OpenAI-compatible servers send it for a call without
    /// arguments.
    pub fn from_text(text: &str) -> Arguments {
        if text.trim().is_empty() {
            return Arguments::Json(Value::Object(Map::new()));
        }
        match serde_json::from_str(text) {
            Ok(value) => Arguments::Json(value),
            Err(e) => Arguments::NotJson {
                text: text.to_owned(),
                error: e.to_string(),
            },
        }
    }
}

/// A provider's response that does not have the shape its API documents: the host's to
/// handle (nothing was dispatched).
///
/// ```
/// use idem::agent::{OpenAiChat, Shape};
/// use serde_json::json;
///
/// let e = OpenAiChat.calls(&json!({"choices": [{"message": {"tool_calls": [{"function": {}}]}}]})).unwrap_err();
/// assert_eq!(e.at, "/choices/0/message/tool_calls/0/function/name");
/// assert_eq!(e.to_string(), "malformed OpenAI Chat Completions response at `/choices/0/message/tool_calls/0/function/name`: expected a string, found nothing");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "malformed {api} response at {}: expected {expected}, found {found}",
    pointer::quoted(at, "the top level")
)]
pub struct ShapeError {
    /// The provider's API, as [`Shape::api`](super::Shape::api) names it.
    pub api: &'static str,
    /// Where, as a JSON Pointer into what was given (empty for the whole of it).
    pub at: String,
    /// What the API documents there.
    pub expected: &'static str,
    /// What was there instead: `nothing`, `null`, `a number`, ...
    pub found: &'static str,
}

/// A place in a response being read: the value there, if any, and its JSON Pointer.
#[derive(Debug, Clone)]
pub(super) struct At<'v> {
    api: &'static str,
    value: Option<&'v Value>,
    pointer: String,
}

impl<'v> At<'v> {
    /// The whole of what was given.
    pub(super) fn root(api: &'static str, value: &'v Value) -> At<'v> {
        At {
            api,
            value: Some(value),
            pointer: String::new(),
        }
    }

    /// The member `key` of an object (absent when this is not an object).
    pub(super) fn field(&self, key: &str) -> At<'v> {
        let mut pointer = self.pointer.clone();
        pointer::push(&mut pointer, key);
        At {
            api: self.api,
            value: self.value.and_then(|v| v.get(key)),
            pointer,
        }
    }

    /// The first of `keys` that is present (REST spells Gemini's fields in camelCase, the
    /// Python SDK's dumps in snake_case).
    pub(super) fn either(&self, keys: [&str; 2]) -> At<'v> {
        let first = self.field(keys[0]);
        if first.is_absent() {
            self.field(keys[1])
        } else {
            first
        }
    }

    /// Missing, or `null`.
    pub(super) fn is_absent(&self) -> bool {
        matches!(self.value, None | Some(Value::Null))
    }

    /// The value, which must be there (any JSON but `null`).
    pub(super) fn present(&self, expected: &'static str) -> Result<&'v Value, ShapeError> {
        match self.value {
            Some(v) if !v.is_null() => Ok(v),
            _ => Err(self.error(expected)),
        }
    }

    /// The object here.
    pub(super) fn object(&self) -> Result<&'v Map<String, Value>, ShapeError> {
        self.value
            .and_then(Value::as_object)
            .ok_or_else(|| self.error("an object"))
    }

    /// The string here.
    pub(super) fn str(&self) -> Result<&'v str, ShapeError> {
        self.value
            .and_then(Value::as_str)
            .ok_or_else(|| self.error("a string"))
    }

    /// The string here, if there is one: missing and `null` are `None`.
    pub(super) fn str_or_absent(&self) -> Result<Option<&'v str>, ShapeError> {
        if self.is_absent() {
            Ok(None)
        } else {
            self.str().map(Some)
        }
    }

    /// The elements of the array here; missing and `null` are an empty array.
    pub(super) fn items_or_absent(&self) -> Result<Vec<At<'v>>, ShapeError> {
        if self.is_absent() {
            return Ok(Vec::new());
        }
        self.items()
    }

    /// The elements of the array here.
    pub(super) fn items(&self) -> Result<Vec<At<'v>>, ShapeError> {
        let array = self
            .value
            .and_then(Value::as_array)
            .ok_or_else(|| self.error("an array"))?;
        Ok(array
            .iter()
            .enumerate()
            .map(|(i, value)| {
                let mut pointer = self.pointer.clone();
                pointer::push_index(&mut pointer, i);
                At {
                    api: self.api,
                    value: Some(value),
                    pointer,
                }
            })
            .collect())
    }

    /// Arguments sent as JSON text (OpenAI), or, as some compatible servers send them, as
    /// a JSON object.
    pub(super) fn text_arguments(&self) -> Result<Arguments, ShapeError> {
        match self.value {
            Some(Value::String(text)) => Ok(Arguments::from_text(text)),
            Some(object @ Value::Object(_)) => Ok(Arguments::Json(object.clone())),
            _ => Err(self.error("the arguments as JSON text")),
        }
    }

    /// That the API documents `expected` here.
    pub(super) fn error(&self, expected: &'static str) -> ShapeError {
        ShapeError {
            api: self.api,
            at: self.pointer.clone(),
            expected,
            found: kind(self.value),
        }
    }
}

/// What a value is, as a message says it.
fn kind(value: Option<&Value>) -> &'static str {
    match value {
        None => "nothing",
        Some(Value::Null) => "null",
        Some(Value::Bool(_)) => "a boolean",
        Some(Value::Number(_)) => "a number",
        Some(Value::String(_)) => "a string",
        Some(Value::Array(_)) => "an array",
        Some(Value::Object(_)) => "an object",
    }
}
