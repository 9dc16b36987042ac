//! Gemini generateContent: `functionCall` parts, answered by one content of
//! `functionResponse` parts.

use serde_json::{Map, Value, json};

use super::call::{Arguments, At, ModelCall, ShapeError};
use super::{CallReport, Shape};

/// Gemini `generateContent` (the REST API's camelCase; the snake_case of the Python SDK's
/// dumps is read too).
///
/// - Reads a `GenerateContentResponse` (its first candidate's `content`; no candidate, as
///   when the prompt was blocked, or a candidate without content calls nothing) or a
///   `Content`. Each part with a `functionCall` is a call: `name`, `args` (a JSON object;
///   absent for a call without arguments) and `id`, which Gemini often leaves out; such
///   calls are keyed by their position ([`KeyedBy::Position`](super::KeyedBy::Position)).
/// - Answers with one content of role `user` holding a `functionResponse` part per call,
///   in the calls' order (which is how Gemini matches calls without ids): `name`, the
///   call's `id` when it had one, and `response`, [`Answer::object`](super::Answer::object)
///   (`{"output": ..}` or `{"error": ..}`). No calls, no content.
///
/// ```
/// use idem::agent::{Gemini, Shape};
/// use serde_json::json;
///
/// let response = json!({"candidates": [{"content": {"role": "model", "parts": [
///     {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
///     {"functionCall": {"name": "get_weather", "args": {"city": "Tokyo"}}}
/// ]}, "finishReason": "STOP"}]});
/// let calls = Gemini.calls(&response).unwrap();
/// assert_eq!((calls.len(), calls[1].id.as_deref()), (2, None));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gemini;

impl Shape for Gemini {
    fn api(&self) -> &'static str {
        "Gemini generateContent"
    }

    fn calls(&self, response: &Value) -> Result<Vec<ModelCall>, ShapeError> {
        let root = At::root(self.api(), response);
        root.object()?;
        let candidates = root.field("candidates");
        let content = if candidates.is_absent() && !root.field("parts").is_absent() {
            root
        } else {
            match candidates.items_or_absent()?.into_iter().next() {
                Some(first) => first.field("content"),
                None => return Ok(Vec::new()),
            }
        };
        if content.is_absent() {
            return Ok(Vec::new());
        }
        content.object()?;
        let mut calls = Vec::new();
        for part in content.field("parts").items_or_absent()? {
            part.object()?;
            let call = part.either(["functionCall", "function_call"]);
            if call.is_absent() {
                continue;
            }
            call.object()?;
            let args = call.field("args");
            let arguments = if args.is_absent() {
                Value::Object(Map::new())
            } else {
                args.present("the `args` object")?.clone()
            };
            calls.push(ModelCall {
                id: call.field("id").str_or_absent()?.map(str::to_owned),
                name: call.field("name").str()?.to_owned(),
                arguments: Arguments::Json(arguments),
            });
        }
        Ok(calls)
    }

    fn messages(&self, answered: &[CallReport]) -> Vec<Value> {
        if answered.is_empty() {
            return Vec::new();
        }
        let parts: Vec<Value> = answered
            .iter()
            .map(|r| {
                let mut response = Map::new();
                response.insert("name".into(), Value::from(r.call.name.as_str()));
                if let Some(id) = &r.call.id {
                    response.insert("id".into(), Value::from(id.as_str()));
                }
                response.insert("response".into(), r.answer.object());
                json!({ "functionResponse": response })
            })
            .collect();
        vec![json!({"role": "user", "parts": parts})]
    }

    fn user_text(&self, text: &str) -> Value {
        json!({"role": "user", "parts": [{"text": text}]})
    }
}
