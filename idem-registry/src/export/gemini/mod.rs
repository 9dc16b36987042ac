//! Gemini function declarations, in both of Gemini's schema forms.
//!
//! - `parametersJsonSchema` takes a JSON Schema subset: `$id`, `$defs`, `$ref`, `$anchor`,
//!   `type`, `format`, `title`, `description`, `enum` (strings and numbers), `items`,
//!   `prefixItems`, `minItems`, `maxItems`, `minimum`, `maximum`, `anyOf`, `oneOf` (read as
//!   `anyOf`), `properties`, `additionalProperties`, `required`, `propertyOrdering`.
//!   Recursion is only unrolled by Gemini "to a limited degree" and only through optional
//!   properties, so idem unrolls it itself (three levels) and says what it cut.
//! - `parameters` takes an OpenAPI 3.0 schema subset: upper-case `type`s, `nullable`
//!   instead of type arrays, string-only `enum`s (with `format: enum`), no `$ref`,
//!   `additionalProperties`, `const` or `exclusive*` bounds; `format` is `date-time` or
//!   `enum` for strings, `int32` / `int64` and `float` / `double` for numbers; every
//!   `OBJECT` needs properties and every `ARRAY` needs `items`.
//!
//! In both forms, parameter names must match `^[A-Za-z_][A-Za-z0-9_]{0,63}$`, and a tool
//! without parameters leaves the field out.

use serde_json::{Value, json};

use super::{ExportError, Notes, Provider, Strictness};
use crate::tool::ToolDef;

mod json_form;
mod openapi_form;
mod unroll;

pub(super) fn json_schema(tool: &ToolDef) -> Result<(Value, Strictness, Notes), ExportError> {
    check_names(tool, Provider::Gemini)?;
    let mut notes = Notes::default();
    let mut entry = json!({"name": tool.name(), "description": tool.description()});
    if has_parameters(tool.input_schema()) {
        let mut schema = unroll::unroll(tool.input_schema(), &mut notes);
        super::walk_post(&mut schema, "", &mut |node, pointer| {
            json_form::json_node(node, pointer, &mut notes)
        });
        entry["parametersJsonSchema"] = schema;
    } else {
        notes.adapted("", "no parameters: `parametersJsonSchema` is left out");
    }
    Ok((entry, Strictness::NotApplicable, notes.finish()))
}

pub(super) fn open_api(tool: &ToolDef) -> Result<(Value, Strictness, Notes), ExportError> {
    check_names(tool, Provider::GeminiOpenApi)?;
    let mut notes = Notes::default();
    let mut entry = json!({"name": tool.name(), "description": tool.description()});
    if has_parameters(tool.input_schema()) {
        let unrolled = unroll::unroll(tool.input_schema(), &mut notes);
        let parameters = openapi_form::to_open_api(&unrolled, "", &mut notes).map_err(|why| ExportError {
            tool: tool.name().to_owned(),
            provider: Provider::GeminiOpenApi,
            reason: format!(
                "{why}; Gemini's OpenAPI `parameters` cannot express it: export with `Provider::Gemini` (`parametersJsonSchema`), or give the parameter a declared shape"
            ),
        })?;
        entry["parameters"] = parameters;
    } else {
        notes.adapted("", "no parameters: `parameters` is left out");
    }
    Ok((entry, Strictness::NotApplicable, notes.finish()))
}

fn has_parameters(schema: &Value) -> bool {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .is_some_and(|p| !p.is_empty())
}

/// Parameter names must match `^[A-Za-z_][A-Za-z0-9_]{0,63}$`.
fn check_names(tool: &ToolDef, provider: Provider) -> Result<(), ExportError> {
    let valid = |name: &str| {
        let mut chars = name.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.len() <= 64
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let names = tool
        .input_schema()
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect::<Vec<_>>())
        .unwrap_or_default();
    match names.into_iter().find(|n| !valid(n)) {
        None => Ok(()),
        Some(bad) => Err(ExportError {
            tool: tool.name().to_owned(),
            provider,
            reason: format!(
                "parameter name `{bad}` does not match `^[A-Za-z_][A-Za-z0-9_]{{0,63}}$`; rename it (`#[serde(rename = \"...\")]`)"
            ),
        }),
    }
}
