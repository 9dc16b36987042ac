//! Every registry tool as a tool of a [rig](https://docs.rs/rig-agent) agent (feature `rig`),
//! dispatched through idem: the class's policy, the key, the replay.
//!
//! rig hands a tool its arguments but not the model's call id, which is what keys the call.
//! [`RigTools::hook`] is a rig [`AgentHook`] that sees each call's id as rig dispatches it,
//! and the tools from [`RigTools::tools`] take it from there. Add both to the agent:
//!
//! ```no_run
//! # use rig_agent::core::{DynModel, operation::Completion};
//! # async fn run(dispatcher: idem_registry::Dispatcher, model: impl Into<DynModel<Completion>>)
//! # -> Result<(), Box<dyn std::error::Error>> {
//! use idem_registry::RunContext;
//! use idem_registry::rig::RigTools;
//!
//! let idem = RigTools::new(dispatcher, RunContext::new("tenant-a").with_run("run-42", 0));
//! let agent = rig_agent::AgentBuilder::new(model)
//!     .dynamic_tools(idem.tools())
//!     .add_hook(idem.hook())
//!     .build();
//! let answer = agent.prompt("Open a ticket for the broken export.").max_turns(4).run().await?;
//! # let _ = answer; Ok(()) }
//! ```
//!
//! **Keys.** A call is keyed as [`crate::agent`] keys a provider's calls: by the model's call
//! id, scoped by the run ([`RunContext::run_id`]); a call id a server numbers per response
//! (`call_0`) is scoped by rig's turn too; a call rig gave an id of its own (the provider
//! sent none: a fresh id on every attempt) is keyed by the turn, the tool and its
//! arguments. A tool's natural key comes first, as always. So a run resumed from a
//! checkpoint, or a model that repeats a call, finds the recorded outcome.
//!
//! **What the agent sees.** A tool's output as JSON. A refusal the model can act on (invalid
//! arguments, approval pending, an outcome unknown, a key reused, ...) is a tool error whose
//! feedback is the same `{"error": {"code", "message"}}` text [`crate::agent`] answers with. What
//! the host must handle (the store unreachable, a fenced worker) is a tool error too, as rig
//! has no other way out of a tool: it says the call was not run, and the log has the reason.
//!
//! Add the hook after any hook that patches a call's arguments: it keys the arguments the
//! tool receives.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use rig_agent::agent::{DispatchAction, DispatchEvent};
use rig_agent::{AgentHook, HookContext};
use rig_core::effect::EffectKind;
use rig_core::message::{CallId, ToolName};
use rig_core::tool::{DynamicTool, ToolErrorKind, ToolExecutionError, ToolOutput};
use serde_json::Value;

use crate::agent::Answer;
use crate::dispatch::{DispatchError, Dispatcher, RunContext, ToolCall};

/// The registry's tools for a rig agent, acting in one run (see the module docs).
#[derive(Clone)]
pub struct RigTools {
    dispatcher: Arc<Dispatcher>,
    run: RunContext,
    calls: Arc<CallIds>,
}

/// Call ids seen by the hook and not yet taken by a tool, by tool and arguments text.
#[derive(Default)]
struct CallIds(Mutex<HashMap<(String, String), VecDeque<String>>>);

impl CallIds {
    fn put(&self, tool: &str, arguments: &str, id: String) {
        let mut calls = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        calls
            .entry((tool.to_owned(), arguments.to_owned()))
            .or_default()
            .push_back(id);
    }

    fn take(&self, tool: &str, arguments: &str) -> Option<String> {
        let mut calls = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = (tool.to_owned(), arguments.to_owned());
        let queue = calls.get_mut(&entry)?;
        let id = queue.pop_front();
        if queue.is_empty() {
            calls.remove(&entry);
        }
        id
    }
}

impl RigTools {
    /// The tools of `dispatcher`'s registry, dispatched in `run` (give it a run id: calls
    /// are keyed by their id within the run).
    pub fn new(dispatcher: impl Into<Arc<Dispatcher>>, run: RunContext) -> RigTools {
        RigTools {
            dispatcher: dispatcher.into(),
            run,
            calls: Arc::default(),
        }
    }

    /// Each registry tool as a rig tool, in the registry's order, with its description and
    /// input schema. A tool whose name rig refuses (none that the registry accepts) is left out.
    pub fn tools(&self) -> Vec<DynamicTool> {
        self.dispatcher
            .registry()
            .iter()
            .filter_map(|tool| {
                let name = ToolName::new(tool.name.to_string()).ok()?;
                let this = self.clone();
                let tool_name = tool.name.to_string();
                Some(DynamicTool::new(
                    name,
                    tool.description(),
                    tool.input_schema().clone(),
                    move |arguments: Value| {
                        let this = this.clone();
                        let tool_name = tool_name.clone();
                        Box::pin(async move { this.call(&tool_name, arguments).await })
                    },
                ))
            })
            .collect()
    }

    /// The rig hook that hands each call's id to the tools (see the module docs).
    pub fn hook(&self) -> CallIdHook {
        CallIdHook {
            calls: Arc::clone(&self.calls),
        }
    }

    async fn call(&self, tool: &str, arguments: Value) -> Result<ToolOutput, ToolExecutionError> {
        let Some(key) = self.calls.take(tool, &arguments.to_string()) else {
            return Err(ToolExecutionError::new(
                ToolErrorKind::Other,
                "idem has no call id for this call: add `RigTools::hook()` to the agent",
            )
            .with_model_feedback("this tool could not run; nothing was done"));
        };
        let call = ToolCall::new(tool, arguments).with_call_id(key);
        match Answer::of(self.dispatcher.dispatch(&call, &self.run).await) {
            Ok(Answer::Output(done)) => Ok(ToolOutput::json(done.output)),
            Ok(refused) => Err(refusal(&refused)),
            Err(host) => Err(for_host(&host)),
        }
    }
}

/// A refusal the model can act on, in the words [`crate::agent`] uses.
fn refusal(answer: &Answer) -> ToolExecutionError {
    let kind = match answer {
        Answer::Refused(DispatchError::InvalidArguments { .. }) => ToolErrorKind::InvalidArgs,
        Answer::Refused(DispatchError::UnknownTool { .. }) => ToolErrorKind::NotFound,
        Answer::Refused(DispatchError::PermissionDenied { .. }) => ToolErrorKind::PermissionDenied,
        _ => ToolErrorKind::Other,
    };
    let mut error = ToolExecutionError::new(kind, answer.message().unwrap_or_default())
        .with_model_feedback(answer.text());
    if let Some(code) = answer.code() {
        error = error.with_code(code);
    }
    error
}

/// What the host must handle, as the tool error rig lets a tool return: the model is told
/// the call did not run, the log has why.
fn for_host(error: &DispatchError) -> ToolExecutionError {
    tracing::error!(error = %error, code = error.code(), "idem: a rig tool call could not be dispatched");
    ToolExecutionError::new(ToolErrorKind::Other, error.to_string())
        .with_code(error.code())
        .with_model_feedback("this tool is unavailable right now; nothing was done")
}

/// The hook of [`RigTools::hook`]: notes each tool call's id for the tool that runs it.
pub struct CallIdHook {
    calls: Arc<CallIds>,
}

impl AgentHook for CallIdHook {
    fn name(&self) -> Option<String> {
        Some("idem.call-ids".to_owned())
    }

    async fn on_dispatch(&self, _ctx: &HookContext, event: DispatchEvent<'_>) -> DispatchAction {
        if let EffectKind::ToolCall { name, args } = event.kind {
            // The tool reads the arguments parsed from this text; note them in that form.
            let parsed =
                serde_json::from_str::<Value>(args).unwrap_or_else(|_| args.clone().into());
            let key = key_of(event.call_id, event.turn, name, &parsed);
            self.calls.put(name, &parsed.to_string(), key);
        }
        DispatchAction::Proceed
    }
}

/// The id a call is keyed by within the run (the rule in the module docs).
fn key_of(call_id: Option<&CallId>, turn: usize, tool: &str, arguments: &Value) -> String {
    match call_id {
        Some(CallId::Provider(id)) if !crate::agent::numbered(id.as_str()) => {
            id.as_str().to_owned()
        }
        Some(CallId::Provider(id)) => format!("turn-{turn}/{}", id.as_str()),
        _ => {
            let fingerprint = idem_core::Fingerprint::of(arguments).to_hex();
            format!("turn-{turn}/{tool}/{fingerprint}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_wait_per_tool_and_arguments_in_order() {
        let calls = CallIds::default();
        calls.put("a", "{}", "1".into());
        calls.put("a", "{}", "2".into());
        calls.put("b", "{}", "3".into());
        assert_eq!(calls.take("a", "{}").as_deref(), Some("1"));
        assert_eq!(calls.take("b", "{}").as_deref(), Some("3"));
        assert_eq!(calls.take("a", "{}").as_deref(), Some("2"));
        assert_eq!(calls.take("a", "{}"), None);
        assert!(
            calls.0.lock().unwrap().is_empty(),
            "nothing is kept once taken"
        );
    }
}
