//! OpenAI's two APIs: Chat Completions (`tool_calls` in the assistant message, answered by
//! `role: "tool"` messages) and Responses (`function_call` output items, answered by
//! `function_call_output` items).

use serde_json::{Value, json};

use super::call::{At, ModelCall, ShapeError};
use super::{CallReport, Shape};

/// OpenAI Chat Completions, and the servers that speak it (vLLM, llama.cpp, Ollama,
/// LM Studio, ...).
///
/// - Reads a `ChatCompletion` (its first choice: the others are alternatives the request
///   asked for with `n`) or its `message`. Each of `message.tool_calls` is a call: `id`,
///   `function.name`, `function.arguments` (JSON text, which the model may get wrong; an
///   object, as some servers send, is taken as it is). A tool call of another `type`
///   (`custom`) is a [`ShapeError`]: idem exports function tools only.
/// - Answers with one message per call, in the calls' order, to append after the assistant
///   message: `{"role": "tool", "tool_call_id", "content"}`, the content being
///   [`Answer::text`](super::Answer::text). A call without an id (some local servers) is
///   answered with an empty `tool_call_id`.
///
/// ```
/// use idem::agent::{OpenAiChat, Shape};
/// use serde_json::json;
///
/// let response = json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
///     "role": "assistant", "content": null,
///     "tool_calls": [{"id": "call_DdmO9pD3xa9XTPNJ32zg2hcA", "type": "function",
///                     "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]
/// }}]});
/// assert_eq!(OpenAiChat.calls(&response).unwrap()[0].name, "get_weather");
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenAiChat;

impl Shape for OpenAiChat {
    fn api(&self) -> &'static str {
        "OpenAI Chat Completions"
    }

    fn calls(&self, response: &Value) -> Result<Vec<ModelCall>, ShapeError> {
        let root = At::root(self.api(), response);
        root.object()?;
        let choices = root.field("choices");
        let message = if choices.is_absent() {
            root
        } else {
            match choices.items()?.into_iter().next() {
                Some(first) => first.field("message"),
                None => return Ok(Vec::new()),
            }
        };
        message.object()?;
        let mut calls = Vec::new();
        for call in message.field("tool_calls").items_or_absent()? {
            call.object()?;
            let kind = call.field("type");
            if !matches!(kind.str_or_absent()?, None | Some("function")) {
                return Err(kind.error("`function` (idem answers function tools only)"));
            }
            let function = call.field("function");
            function.object()?;
            calls.push(ModelCall {
                id: call.field("id").str_or_absent()?.map(str::to_owned),
                name: function.field("name").str()?.to_owned(),
                arguments: function.field("arguments").text_arguments()?,
            });
        }
        Ok(calls)
    }

    fn messages(&self, answered: &[CallReport]) -> Vec<Value> {
        answered
            .iter()
            .map(|r| {
                json!({
                    "role": "tool",
                    "tool_call_id": r.call.id.as_deref().unwrap_or_default(),
                    "content": r.answer.text(),
                })
            })
            .collect()
    }
}

/// OpenAI Responses.
///
/// - Reads a `Response` (its `output`) or an array of output items. Each item of `type`
///   `function_call` is a call: `call_id`, `name`, `arguments` (JSON text). Other items
///   (`message`, `reasoning`, the calls of tools the server runs itself) are not calls.
/// - Answers with one `{"type": "function_call_output", "call_id", "output"}` item per
///   call, in the calls' order, the output being [`Answer::text`](super::Answer::text):
///   the next request's `input` (with `previous_response_id`), or appended to the items
///   sent before.
///
/// ```
/// use idem::agent::{OpenAiResponses, Shape};
/// use serde_json::json;
///
/// let output = json!([
///     {"type": "reasoning", "id": "rs_1", "summary": []},
///     {"type": "function_call", "id": "fc_1", "call_id": "call_XN2pT6yAJcFQ1ybqE7grB3Rb",
///      "name": "get_weather", "arguments": "{\"city\":\"Paris\"}", "status": "completed"}
/// ]);
/// let calls = OpenAiResponses.calls(&output).unwrap();
/// assert_eq!(calls[0].id.as_deref(), Some("call_XN2pT6yAJcFQ1ybqE7grB3Rb"));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenAiResponses;

impl Shape for OpenAiResponses {
    fn api(&self) -> &'static str {
        "OpenAI Responses"
    }

    fn calls(&self, response: &Value) -> Result<Vec<ModelCall>, ShapeError> {
        let root = At::root(self.api(), response);
        let items = if response.is_array() {
            root
        } else {
            root.object()?;
            root.field("output")
        };
        let mut calls = Vec::new();
        for item in items.items_or_absent()? {
            item.object()?;
            if item.field("type").str_or_absent()? != Some("function_call") {
                continue;
            }
            calls.push(ModelCall {
                id: Some(item.field("call_id").str()?.to_owned()),
                name: item.field("name").str()?.to_owned(),
                arguments: item.field("arguments").text_arguments()?,
            });
        }
        Ok(calls)
    }

    fn messages(&self, answered: &[CallReport]) -> Vec<Value> {
        answered
            .iter()
            .map(|r| {
                json!({
                    "type": "function_call_output",
                    "call_id": r.call.id.as_deref().unwrap_or_default(),
                    "output": r.answer.text(),
                })
            })
            .collect()
    }
}
