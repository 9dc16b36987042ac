//! The rig door: a rig agent (rig's own scripted completion model, no network) whose model
//! asks to pay; the tools from `RigTools` dispatch through idem. The control is the same agent
//! with a plain rig tool that pays for every call.

use std::path::Path;
use std::sync::Arc;

use idem::agent::rig::RigTools;
use idem::prelude::*;
use idem::testing::Setup;
use rig_agent::AgentBuilder;
use rig_core::message::ToolName;
use rig_core::test_utils::{MockCompletionModel, MockTurn};
use rig_core::tool::{DynamicTool, ToolOutput};
use serde_json::{Value, json};

use crate::{approve_pending, approving, provider::apply};

/// The model's turns for one prompt: a call to pay, then its answer.
fn model() -> MockCompletionModel {
    MockCompletionModel::from_turns([
        MockTurn::tool_call("call_pay", "pay", json!({"order": "o-1", "amount": 100})),
        MockTurn::text("The refund is paid."),
    ])
}

const PROMPT: &str = "Refund order o-1: pay its 100 back.";

/// Through idem: the prompt (the payment waits for a person), a person's yes, the same
/// prompt answered again (a new `RigTools` in the same run, as the docs tell a resumed run).
pub async fn through_rig(setup: Setup) {
    let d = Arc::new(approving(&setup));
    let run = RunContext::new("shop").with_run("run-1", 1);
    let prompt = || async {
        let tools = RigTools::new(Arc::clone(&d), run.clone());
        let agent = AgentBuilder::new(model())
            .dynamic_tools(tools.tools())
            .add_hook(tools.hook())
            .build();
        let _ = agent.prompt(PROMPT).max_turns(4).run().await;
    };
    prompt().await;
    if approve_pending(&d).await > 0 {
        prompt().await;
    }
}

/// Without idem: the same agent, its `pay` a plain rig tool that pays for every call (the
/// person's yes kept in the process). Returns when the prompt is answered.
pub async fn without_idem(dir: &Path) {
    let dir = dir.to_owned();
    let pay = DynamicTool::new(
        ToolName::new("pay").expect("a name"),
        "Pay an order's amount out to the customer.",
        json!({"type": "object", "properties": {
            "order": {"type": "string"}, "amount": {"type": "integer"}}}),
        move |args: Value| {
            let dir = dir.clone();
            Box::pin(async move {
                let what = format!(
                    "pay {} {}",
                    args["order"].as_str().unwrap_or("?"),
                    args["amount"]
                );
                apply(&dir, &what, None);
                Ok(ToolOutput::json(json!("paid")))
            })
        },
    );
    let agent = AgentBuilder::new(model()).dynamic_tools(vec![pay]).build();
    agent
        .prompt(PROMPT)
        .max_turns(4)
        .run()
        .await
        .expect("the prompt is answered");
}
