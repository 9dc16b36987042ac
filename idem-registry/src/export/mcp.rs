//! MCP `tools/list` entries.
//!
//! `inputSchema` is the canonical schema (MCP reads a schema without `$schema` as JSON
//! Schema 2020-12). `outputSchema` must describe an object: an output that is not one is
//! wrapped as `{"result": ...}`, and a server must wrap its `structuredContent` the same
//! way. `annotations` state all four hints, because MCP's defaults are the pessimistic ones:
//! `readOnlyHint`, `destructiveHint` and `idempotentHint` from the class, `openWorldHint`
//! from the tool's `open_world` flag.

use serde_json::{Map, Value, json};

use super::{Notes, Strictness, title_of};
use crate::tool::ToolDef;

pub(super) fn export(tool: &ToolDef) -> (Value, Strictness, Notes) {
    let mut notes = Notes::default();
    let hints = tool.class().hints();
    let mut entry = json!({
        "name": tool.name(),
        "title": title_of(tool.name()),
        "description": tool.description(),
        "inputSchema": tool.input_schema(),
        "annotations": {
            "readOnlyHint": hints.read_only,
            "destructiveHint": hints.destructive,
            "idempotentHint": hints.idempotent,
            "openWorldHint": tool.policy().open_world,
        },
    });
    if let Some(output) = tool.output_schema() {
        entry["outputSchema"] = output_schema(output, &mut notes);
    }
    (entry, Strictness::NotApplicable, notes.finish())
}

/// The output schema as MCP wants it: an object at the root, with no combinator there.
fn output_schema(output: &Value, notes: &mut Notes) -> Value {
    let is_plain_object = output.as_object().is_some_and(|o| {
        o.get("type").and_then(Value::as_str) == Some("object")
            && !["anyOf", "oneOf", "allOf", "not", "if"]
                .iter()
                .any(|k| o.contains_key(*k))
    });
    if is_plain_object {
        return output.clone();
    }
    let mut inner = output.clone();
    let mut wrapper = Map::new();
    if let Some(obj) = inner.as_object_mut() {
        // References point at the document root: the definitions move up with them.
        if let Some(defs) = obj.remove("$defs") {
            wrapper.insert("$defs".into(), defs);
        }
    }
    wrapper.insert("type".into(), "object".into());
    wrapper.insert("properties".into(), json!({ "result": inner }));
    wrapper.insert("required".into(), json!(["result"]));
    notes.adapted(
        "/outputSchema",
        "the output is not an object: wrapped as `{\"result\": ...}` (send `structuredContent` wrapped the same way)",
    );
    Value::Object(wrapper)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_that_are_not_objects_are_wrapped_with_their_definitions() {
        let mut notes = Notes::default();
        let wrapped = output_schema(
            &json!({"type": "array", "items": {"$ref": "#/$defs/N"}, "$defs": {"N": {"type": "object"}}}),
            &mut notes,
        );
        assert_eq!(wrapped["type"], "object");
        assert_eq!(wrapped["required"], json!(["result"]));
        assert_eq!(wrapped["$defs"]["N"], json!({"type": "object"}));
        assert!(wrapped["properties"]["result"].get("$defs").is_none());
        let plain = json!({"type": "object", "properties": {"id": {"type": "integer"}}});
        assert_eq!(output_schema(&plain, &mut notes), plain);
    }
}
