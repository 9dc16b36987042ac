//! A return type spelled through an alias: what the type checker accepts, `#[tool]` accepts.

use idem::prelude::*;

type ToolResult<T> = Result<T, ToolError>;
type CountResult = Result<u32, ToolError>;

/// Count the tickets in a queue.
#[tool(class = "read")]
async fn count_tickets(queue: String) -> ToolResult<u32> {
    Ok(queue.len() as u32)
}

/// Count the words in a text.
#[tool(class = "read")]
fn count_words(text: String) -> CountResult {
    Ok(text.split_whitespace().count() as u32)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let dispatcher = Dispatcher::new(Registry::linked().unwrap(), std::sync::Arc::new(MemoryStore::new())).unwrap();
    let run = RunContext::new("alias");
    for (tool, args, out) in [
        ("count_tickets", serde_json::json!({ "queue": "abc" }), 3),
        ("count_words", serde_json::json!({ "text": "a b c d" }), 4),
    ] {
        let got = dispatcher.dispatch(&ToolCall::new(tool, args), &run).await.unwrap();
        assert_eq!(got.output, out);
        let def = dispatcher.registry().get(tool).unwrap();
        assert_eq!(def.output_schema().unwrap()["type"], "integer");
    }
}
