//! A parameter named like its tool, like another tool in scope, or like the macro's own
//! hidden names: nothing the expansion generates can collide with a user's binding.

use idem::prelude::*;

/// Look up a city.
#[tool(class = "read")]
async fn city(name: String) -> Result<String, ToolError> {
    Ok(name)
}

/// Search for a query.
#[tool(class = "read")]
async fn query(query: String) -> Result<String, ToolError> {
    Ok(query)
}

/// The weather in a city (a parameter named like the tool above).
#[tool(class = "read")]
fn weather(city: String, __idem_ctx: u32, __idem_e: u32) -> Result<String, ToolError> {
    Ok(format!("{city} {__idem_ctx} {__idem_e}"))
}

/// A context parameter named like the macro's hidden context.
#[tool(class = "read")]
async fn with_context(__idem_ctx: &ToolContext, city: String) -> Result<String, ToolError> {
    Ok(format!("{city} {}", __idem_ctx.tool()))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let dispatcher = Dispatcher::new(Registry::linked().unwrap(), std::sync::Arc::new(MemoryStore::new())).unwrap();
    let run = RunContext::new("names");
    let out = dispatcher
        .dispatch(&ToolCall::new("query", serde_json::json!({ "query": "rust" })), &run)
        .await
        .unwrap();
    assert_eq!(out.output, "rust");
    let out = dispatcher
        .dispatch(
            &ToolCall::new(
                "weather",
                serde_json::json!({ "city": "Oslo", "__idem_ctx": 1, "__idem_e": 2 }),
            ),
            &run,
        )
        .await
        .unwrap();
    assert_eq!(out.output, "Oslo 1 2");
    let out = dispatcher
        .dispatch(&ToolCall::new("with_context", serde_json::json!({ "city": "Rome" })), &run)
        .await
        .unwrap();
    assert_eq!(out.output, "Rome with_context");
}
