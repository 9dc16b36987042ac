//! The wire: the `_meta` names idem reads and writes, and the MCP result of a dispatch (what
//! the model reads, what the client must fix, what the host must handle).

use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock, MetaObject};
use serde_json::{Value, json};

use idem_registry::dispatch::{DispatchError, Dispatched};

/// `_meta` key of a call's idempotency key: the same on every re-send of the call.
pub const META_KEY: &str = "io.idem/idempotency-key";
/// `_meta` key under which third-party MCP code sends a call's idempotency key, in the
/// protocol's reverse-domain namespace; read after [`META_KEY`] (see [`META_KEY_NAMES`]).
pub const META_MCP_KEY: &str = "io.modelcontextprotocol/idempotencyKey";
/// The bare `_meta` key some MCP clients send a call's idempotency key under; read last.
pub const META_BARE_KEY: &str = "idempotencyKey";
/// Every `_meta` name a call's idempotency key is read from, in the order they are read:
/// idem's own, the protocol's namespace, the bare name. A request that gives two of them
/// different keys is refused (`invalid_params`, naming both): which one the client meant
/// cannot be told, and guessing could run a call twice or replay another's result.
pub const META_KEY_NAMES: [&str; 3] = [META_KEY, META_MCP_KEY, META_BARE_KEY];
/// `_meta` key of the agent's run id (with [`META_STEP`], a key for the call).
pub const META_RUN: &str = "io.idem/run-id";
/// `_meta` key of the step within the run (an integer).
pub const META_STEP: &str = "io.idem/step";
/// Result `_meta` key: whether the result is a replay of a recorded one (on the results of
/// recorded classes: a `read` is never a replay).
pub const META_DEDUPLICATED: &str = "io.idem/deduplicated";
/// `_meta` of a find-or-create replay: the JSON Pointers of the call's arguments that differ
/// from those of the call that made the record (see `Dispatched::differing_arguments`).
pub const META_DIFFERING_ARGUMENTS: &str = "io.idem/differing-arguments";
/// Result `_meta` key: the downstream key the tool was given.
pub const META_DOWNSTREAM_KEY: &str = "io.idem/key";
/// Result `_meta` key of an unknown outcome that a verify hook can settle: when to call
/// again (RFC 3339, on the store's clock).
pub const META_RETRY_AFTER: &str = "io.idem/retry-after";
/// Result `_meta` key of an error result: the error's code (`missing_key`,
/// `approval_required`, `outcome_unknown`, ...; [`DispatchError::code`]).
pub const META_ERROR: &str = "io.idem/error";

/// The input a call held for approval asks the client for (see [`crate::approval`]).
pub const APPROVAL_INPUT: &str = "io.idem/approval";

/// A string in `_meta`, if there: anything else there is the client's mistake.
pub(crate) fn meta_str<'m>(meta: &'m MetaObject, key: &str) -> Result<Option<&'m str>, ErrorData> {
    match meta.get(key) {
        None => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s)),
        Some(other) => Err(ErrorData::invalid_params(
            format!("`_meta` \"{key}\" must be a non-empty string, got {other}"),
            None,
        )),
    }
}

/// The call's idempotency key from a request's `_meta`, under the first of
/// [`META_KEY_NAMES`] that holds one; two names holding different keys are refused.
pub(crate) fn meta_key(meta: &MetaObject) -> Result<Option<&str>, ErrorData> {
    let mut found: Option<(&str, &str)> = None;
    for name in META_KEY_NAMES {
        let Some(key) = meta_str(meta, name)? else {
            continue;
        };
        match found {
            None => found = Some((name, key)),
            Some((first, earlier)) if earlier != key => {
                return Err(ErrorData::invalid_params(
                    format!(
                        "`_meta` gives two idempotency keys: \"{first}\" and \"{name}\" differ; send one key, under one name"
                    ),
                    None,
                ));
            }
            Some(_) => {}
        }
    }
    Ok(found.map(|(_, key)| key))
}

/// The MCP result of a dispatch, or the protocol error of what the host must handle.
pub(crate) fn result_of(
    dispatched: Result<Dispatched, DispatchError>,
) -> Result<CallToolResult, ErrorData> {
    match dispatched {
        Ok(done) => {
            let note = done.replay_note();
            let structured = match done.output {
                Value::Object(_) => done.output.clone(),
                other => json!({ "result": other }),
            };
            let mut meta = MetaObject::new();
            // A read is never recorded, so never a replay: saying so would be noise every
            // client parses on every call.
            if done.class.records() {
                meta.insert(META_DEDUPLICATED.into(), Value::Bool(done.deduplicated));
            }
            if let Some(key) = &done.key {
                meta.insert(META_DOWNSTREAM_KEY.into(), Value::from(key.as_str()));
            }
            if note.is_some() {
                meta.insert(
                    META_DIFFERING_ARGUMENTS.into(),
                    Value::from(done.differing_arguments.clone()),
                );
            }
            let mut result = CallToolResult::structured(structured);
            result.content = vec![ContentBlock::text(done.output_json)];
            // A find-or-create replay of other arguments: the model reads that its wording
            // made nothing new.
            result.content.extend(note.map(ContentBlock::text));
            Ok(result.with_meta((!meta.is_empty()).then_some(meta)))
        }
        Err(e) if e.is_for_host() => Err(ErrorData::internal_error(e.to_string(), None)),
        Err(e) => {
            let text = match &e {
                DispatchError::MissingKey { .. } => format!(
                    "{e}. Over MCP, pass one in the request's `_meta`: \"{META_KEY}\": \"<a key you keep across re-sends>\", or \"{META_RUN}\" with \"{META_STEP}\"; or let the server key calls of this tool without one: {}",
                    crate::keys::KeySettings::HOW
                ),
                _ => e.to_string(),
            };
            let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
            let mut meta = MetaObject::new();
            meta.insert(META_ERROR.into(), Value::from(e.code()));
            match &e {
                // A recorded terminal failure, replayed.
                DispatchError::ToolFailed { deduplicated, .. } => {
                    meta.insert(META_DEDUPLICATED.into(), Value::Bool(*deduplicated));
                }
                DispatchError::OutcomeUnknown {
                    retry_after: Some(at),
                    ..
                } => {
                    meta.insert(META_RETRY_AFTER.into(), Value::from(at.to_rfc3339()));
                }
                _ => {}
            }
            result = result.with_meta(Some(meta));
            Ok(result)
        }
    }
}
