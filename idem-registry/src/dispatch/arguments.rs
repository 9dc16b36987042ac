//! The validate stage: the body only ever sees arguments that fit the published schema.

use std::borrow::Cow;

use serde_json::Value;

use super::error::DispatchError;
use crate::tool::{PreparedArguments, ToolDef};

/// Check the call's arguments against the tool's schema before serde sees anything
/// (ARCHITECTURE.md, "Arguments"), normalise them through the typed round trip, and check
/// the normal form again when the round trip changed it. A refusal's message has the
/// tool's secrets cut out.
pub(crate) fn validate<'a>(
    tool: &ToolDef,
    arguments: &'a Value,
) -> Result<PreparedArguments<'a>, DispatchError> {
    prepare(tool, arguments).map_err(|e| scrub_refusal(tool, arguments, e))
}

fn prepare<'a>(
    tool: &ToolDef,
    arguments: &'a Value,
) -> Result<PreparedArguments<'a>, DispatchError> {
    let invalid = |e: crate::args::ArgumentError| DispatchError::InvalidArguments {
        tool: tool.name.to_string(),
        pointer: e.pointer,
        message: e.message,
    };
    let prepared = match tool
        .validate_call_arguments(Cow::Borrowed(arguments))
        .map_err(invalid)?
    {
        Cow::Borrowed(valid) => (tool.prepare)(valid).map_err(invalid)?,
        Cow::Owned(valid) => (tool.prepare)(&valid)
            .map(|normal| PreparedArguments {
                arguments: Cow::Owned(normal.arguments.into_owned()),
                typed: normal.typed,
            })
            .map_err(invalid)?,
    };
    // The typed round trip may have changed them (a serde alias renamed a field, a default
    // filled one in, a flattened or untagged type read them its own way): the body reads
    // this form, so this form must fit the schema too. Arguments already normal come back
    // borrowed and were checked above.
    if let Cow::Owned(normal) = &prepared.arguments {
        tool.validate_call_arguments(Cow::Borrowed(normal))
            .map_err(invalid)?;
    }
    Ok(prepared)
}

/// A refusal of a tool's arguments with its secrets' text cut out of the message.
fn scrub_refusal(tool: &ToolDef, arguments: &Value, e: DispatchError) -> DispatchError {
    match e {
        DispatchError::InvalidArguments {
            tool: name,
            pointer,
            message,
        } if !tool.secrets.is_empty() => {
            let message = crate::redact::refusal(&pointer, &message, arguments, &tool.secrets);
            DispatchError::InvalidArguments {
                tool: name,
                pointer,
                message,
            }
        }
        other => other,
    }
}
