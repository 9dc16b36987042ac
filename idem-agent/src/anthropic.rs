//! Anthropic Messages: `tool_use` content blocks, answered by one user message of
//! `tool_result` blocks.

use serde_json::{Value, json};

use super::call::{Arguments, At, ModelCall, ShapeError};
use super::{CallReport, Shape};

/// Anthropic Messages.
///
/// - Reads a `Message` (its `content`) or an array of content blocks. Each block of `type`
///   `tool_use` is a call: `id`, `name`, `input` (a JSON object). Other blocks (`text`
///   beside the calls, `thinking`, the server's own tools) are not calls.
/// - Answers with one user message holding a `tool_result` block per call, in the calls'
///   order (Anthropic wants all of a turn's results in the one message that follows it, and
///   before any text): `{"type": "tool_result", "tool_use_id", "content"}`, the content
///   being [`Answer::text`](super::Answer::text), and `"is_error": true` on an error. No
///   calls, no message.
///
/// ```
/// use idem::agent::{Anthropic, Shape};
/// use serde_json::json;
///
/// let message = json!({"type": "message", "role": "assistant", "stop_reason": "tool_use", "content": [
///     {"type": "text", "text": "I'll check the weather in Paris."},
///     {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather", "input": {"city": "Paris"}}
/// ]});
/// let calls = Anthropic.calls(&message).unwrap();
/// assert_eq!((calls.len(), calls[0].name.as_str()), (1, "get_weather"));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Anthropic;

impl Shape for Anthropic {
    fn api(&self) -> &'static str {
        "Anthropic Messages"
    }

    fn calls(&self, response: &Value) -> Result<Vec<ModelCall>, ShapeError> {
        let root = At::root(self.api(), response);
        let blocks = if response.is_array() {
            root
        } else {
            root.object()?;
            let content = root.field("content");
            if content.str_or_absent().is_ok() {
                // A message whose content is text alone (or none) calls nothing.
                return Ok(Vec::new());
            }
            content
        };
        let mut calls = Vec::new();
        for block in blocks.items()? {
            block.object()?;
            if block.field("type").str()? != "tool_use" {
                continue;
            }
            calls.push(ModelCall {
                id: Some(block.field("id").str()?.to_owned()),
                name: block.field("name").str()?.to_owned(),
                arguments: Arguments::Json(
                    block.field("input").present("the `input` object")?.clone(),
                ),
            });
        }
        Ok(calls)
    }

    fn messages(&self, answered: &[CallReport]) -> Vec<Value> {
        if answered.is_empty() {
            return Vec::new();
        }
        let results: Vec<Value> = answered
            .iter()
            .map(|r| {
                let mut block = json!({
                    "type": "tool_result",
                    "tool_use_id": r.call.id.as_deref().unwrap_or_default(),
                    "content": r.answer.text(),
                });
                if r.answer.is_error() {
                    block["is_error"] = Value::Bool(true);
                }
                block
            })
            .collect();
        vec![json!({"role": "user", "content": results})]
    }

    fn user_text(&self, text: &str) -> Value {
        json!({"role": "user", "content": [{"type": "text", "text": text}]})
    }
}
