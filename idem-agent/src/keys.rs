//! Which key each call of a response gets: its provider's id, or its position in the run
//! (the rule is on [`KeyedBy`]; [`keyed_by`] applies it, a pure function of the response's
//! calls, tested as a table below).

use idem_registry::dispatch::ToolCall;

use super::call::ModelCall;

/// How the agent loop keyed a call. The rule:
///
/// - A call whose id the provider **minted** is keyed by that id, scoped by the run
///   ([`KeyMaterial::CallId`](idem_core::KeyMaterial::CallId) with the run id): OpenAI's
///   `call_DdmO9pD3xa9XTPNJ32zg2hcA`, Anthropic's `toolu_01A09q90qw90lq917835lq9`. The step
///   is not part of it, so the same response answered again (after a crash before its
///   results were sent, or from a checkpoint) finds its records even if the host numbers
///   its steps differently the second time.
/// - Every other call is keyed by **position**: the run id, the step, and the call's index
///   among the response's calls ([`KeyMaterial::RunStep`](idem_core::KeyMaterial::RunStep)).
///   That is a call without an id (Gemini often sends none), with an empty one, with an id
///   another call of the same response also has, or with an id a server **numbers** per
///   response: local and OpenAI-compatible servers send `call_0`, `call_1` in every
///   response, so `call_0` of step 3 is not `call_0` of step 2, and scoping it by the run
///   alone would replay step 2's outcome for it (or refuse it as a reused key). A numbered
///   id is ASCII letters (maybe none), then at most one `_` or `-`, then ASCII digits only:
///   `call_0`, `tool-12`, `7`.
///
/// Why detect numbered ids rather than always add the step: a minted id is found again
/// whatever step the host gives it, and a numbered one cannot be told apart across steps
/// without the step. A minted id that happened to look numbered (random text that is all
/// digits after its prefix: for OpenAI's 24 characters, odds below 10⁻¹⁸) is keyed by
/// position, which is as safe: a response answered again has its step and its order. The
/// host must give each response its own step: one that answers a later response under the
/// step of an earlier one has its numbered calls refused as `key_reused` (or, with the very
/// same arguments, replayed).
///
/// A tool's natural key still comes first (the dispatcher's order): the model calling
/// `create_ticket` again "to be sure", under a new id, finds the ticket it made.
///
/// ```
/// use idem::agent::{KeyedBy, OpenAiChat, Shape};
/// use serde_json::json;
///
/// let numbered = json!({"role": "assistant", "tool_calls": [
///     {"id": "call_0", "type": "function", "function": {"name": "a", "arguments": "{}"}},
///     {"id": "call_5CgPzXnP3Tz8ZqNS7tBvU3xh", "type": "function", "function": {"name": "b", "arguments": "{}"}}
/// ]});
/// let calls = OpenAiChat.calls(&numbered).unwrap();
/// assert_eq!(KeyedBy::of(&calls), [KeyedBy::Position, KeyedBy::CallId]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyedBy {
    /// The provider's id, scoped by the run.
    CallId,
    /// The run id, step and index among the response's calls.
    Position,
}

impl KeyedBy {
    /// How each of a response's calls is keyed, by the rule above.
    pub fn of(calls: &[ModelCall]) -> Vec<KeyedBy> {
        keyed_by(calls)
    }
}

/// How each of a response's calls is keyed.
pub(super) fn keyed_by(calls: &[ModelCall]) -> Vec<KeyedBy> {
    calls
        .iter()
        .map(|call| match call.id.as_deref() {
            Some(id)
                if !id.is_empty()
                    && !numbered(id)
                    && calls.iter().filter(|c| c.id.as_deref() == Some(id)).count() == 1 =>
            {
                KeyedBy::CallId
            }
            _ => KeyedBy::Position,
        })
        .collect()
}

/// Whether `id` is the kind a server numbers per response: ASCII letters (maybe none), one
/// optional `_` or `-`, then ASCII digits only.
pub(crate) fn numbered(id: &str) -> bool {
    let rest = id.trim_start_matches(|c: char| c.is_ascii_alphabetic());
    let digits = rest.strip_prefix(['_', '-']).unwrap_or(rest);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// The call the dispatcher gets: the arguments, the position, and the id only when the call
/// is keyed by it.
pub(super) fn tool_call(
    call: &ModelCall,
    arguments: serde_json::Value,
    index: u32,
    by: KeyedBy,
) -> ToolCall {
    let dispatched = ToolCall::new(call.name.clone(), arguments).with_index(index);
    match (by, &call.id) {
        (KeyedBy::CallId, Some(id)) => dispatched.with_call_id(id.clone()),
        _ => dispatched,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Arguments;

    fn call(id: Option<&str>) -> ModelCall {
        ModelCall {
            id: id.map(str::to_owned),
            name: "t".into(),
            arguments: Arguments::Json(serde_json::json!({})),
        }
    }

    #[test]
    fn numbered_ids_are_letters_a_separator_and_digits() {
        let table = [
            ("call_0", true),
            ("call_12", true),
            ("tool-3", true),
            ("call7", true),
            ("7", true),
            ("_7", true),
            ("call_DdmO9pD3xa9XTPNJ32zg2hcA", false),
            ("toolu_01A09q90qw90lq917835lq9", false),
            ("fc_67ca09c5efe0819096d0511c92b8c890096610f474011cc0", false),
            ("call_0a", false),
            ("call__0", false),
            ("call_", false),
            ("", false),
            ("chatcmpl-tool-4f1b2c", false),
            ("0_call", false),
            ("call_٣", false),
        ];
        for (id, expected) in table {
            assert_eq!(numbered(id), expected, "{id:?}");
        }
    }

    #[test]
    fn minted_unique_ids_key_by_id_and_everything_else_by_position() {
        use KeyedBy::{CallId, Position};
        let table: [(&[Option<&str>], &[KeyedBy]); 6] = [
            (&[Some("call_abcDEF123ghi")], &[CallId]),
            (&[Some("call_0"), Some("call_1")], &[Position, Position]),
            (&[None, None], &[Position, Position]),
            (&[Some(""), Some("toolu_01X")], &[Position, CallId]),
            (
                &[Some("call_same"), Some("call_same"), Some("call_other")],
                &[Position, Position, CallId],
            ),
            (&[], &[]),
        ];
        for (ids, expected) in table {
            let calls: Vec<_> = ids.iter().map(|id| call(*id)).collect();
            assert_eq!(keyed_by(&calls), expected, "{ids:?}");
        }
    }

    #[test]
    fn a_call_keyed_by_position_is_dispatched_without_its_id() {
        let numbered = call(Some("call_0"));
        let by_position = tool_call(&numbered, serde_json::json!({}), 2, KeyedBy::Position);
        assert_eq!((by_position.call_id, by_position.index), (None, 2));
        let minted = call(Some("call_abcDEF123ghi"));
        let by_id = tool_call(&minted, serde_json::json!({}), 0, KeyedBy::CallId);
        assert_eq!(by_id.call_id.as_deref(), Some("call_abcDEF123ghi"));
    }
}
