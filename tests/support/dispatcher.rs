//! Dispatcher set-up: a registry of one tool, or of every `#[tool]` the test binary links, on
//! the store the test chose, verifying approvals with the tests' approval key; and a
//! dispatch that approves a call when its tool asks.

use std::sync::Arc;
use std::time::Duration;

use idem::prelude::*;
use idem::{ApprovalKey, Approver, Store, ToolDef, approval::ApprovalKeys};

/// The tests' approval key (every test dispatcher verifies with it).
pub fn approval_key() -> ApprovalKey {
    ApprovalKey::new("tests-1", *b"idem-tests-approval-key-32-bytes").unwrap()
}

/// An approver signing with [`approval_key`].
pub fn approver() -> Approver {
    Approver::new("operator@tests", approval_key())
}

/// A dispatcher over `registry` that verifies approvals with [`approval_key`].
pub fn dispatcher(registry: Registry, store: Arc<dyn Store>) -> Dispatcher {
    Dispatcher::approving(registry, store, ApprovalKeys::new([approval_key()])).unwrap()
}

/// A dispatcher with `tool` alone in its registry.
pub fn with_tool(tool: ToolDef, store: Arc<dyn Store>) -> Dispatcher {
    dispatcher(Registry::builder().add(tool).build().unwrap(), store)
}

/// A dispatcher with every `#[tool]` of this test binary in its registry.
pub fn linked(store: Arc<dyn Store>) -> Dispatcher {
    dispatcher(Registry::linked().expect("registry"), store)
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
            let approval = approver().approve_for(&request, Duration::from_secs(3600));
            d.dispatch(call, &run.clone().approve(approval)).await
        }
        other => other,
    }
}
