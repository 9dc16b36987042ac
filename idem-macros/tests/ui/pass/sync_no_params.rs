use idem::prelude::*;

#[tool(class = "read", description = "Tell the time of the server.")]
fn server_time() -> Result<u64, ToolError> {
    Ok(42)
}

fn main() {
    let registry = Registry::linked().unwrap();
    let def = registry
        .get("server_time")
        .expect("server_time is registered");
    assert_eq!(def.class(), ToolClass::Read);
    assert_eq!(def.description(), "Tell the time of the server.");
    // No parameters: the arguments schema is an object without properties to fill.
    let schema = def.input_schema();
    assert_eq!(schema["type"], "object");
    let required = schema.get("required").and_then(|r| r.as_array());
    assert!(required.is_none_or(|r| r.is_empty()), "{schema}");
}
