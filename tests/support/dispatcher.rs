//! Dispatcher set-up: a registry of one tool, or of every `#[tool]` the test binary links, on
//! the store the test chose; and a dispatch that approves a call when its tool asks.

use std::sync::Arc;

use idem::prelude::*;
use idem::{Store, ToolDef};

/// A dispatcher with `tool` alone in its registry.
pub fn with_tool(tool: ToolDef, store: Arc<dyn Store>) -> Dispatcher {
    Dispatcher::new(Registry::builder().add(tool).build().unwrap(), store)
}

/// A dispatcher with every `#[tool]` of this test binary in its registry.
pub fn linked(store: Arc<dyn Store>) -> Dispatcher {
    Dispatcher::new(Registry::linked().expect("registry"), store)
}

/// Dispatch `call`, approving it first if its tool is irreversible. The approval is bound to
/// the key and the arguments, so a restarted process approves the very same call.
pub async fn dispatch_approving(
    d: &Dispatcher,
    call: &ToolCall,
    run: &RunContext,
) -> Result<Dispatched, DispatchError> {
    match d.dispatch(call, run).await {
        Err(DispatchError::ApprovalRequired { request }) => {
            d.dispatch(call, &run.clone().approve(request.approve()))
                .await
        }
        other => other,
    }
}
