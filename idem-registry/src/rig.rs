//! Every registry tool as a tool of a [rig](https://docs.rs/rig-agent) agent (feature `rig`),
//! dispatched through idem: the class's policy, the key, the replay.
//!
//! rig hands a tool its arguments but not the model's call id, which is what keys the call.
//! [`RigTools::hook`] is a rig [`AgentHook`] that notes each call as rig dispatches it, under
//! the id rig gives that dispatch, and the tools from [`RigTools::tools`] read the same id from
//! their dispatch context: each tool finds its own call, never another's (a call a later hook or
//! a bus layer declined is forgotten). Add both to the agent:
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
//! The hook may come anywhere among the agent's hooks: a call is keyed by the arguments its
//! tool receives, after every hook's patch.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use rig_agent::agent::{DispatchAction, DispatchEvent, OutcomeAction, OutcomeEvent};
use rig_agent::bus::Dispatcher as RigBus;
use rig_agent::{AgentHook, HookContext};
use rig_core::effect::{EffectId, EffectKind};
use rig_core::message::{CallId, ToolName};
use rig_core::tool::{
    DynamicTool, ToolContext as RigContext, ToolErrorKind, ToolExecutionError, ToolOutput,
};
use serde_json::Value;

use crate::agent::Answer;
use crate::dispatch::{DispatchError, Dispatcher, RunContext, ToolCall};

/// The registry's tools for a rig agent, acting in one run (see the module docs).
#[derive(Clone)]
pub struct RigTools {
    dispatcher: Arc<Dispatcher>,
    run: RunContext,
    calls: Arc<Calls>,
}

/// What the hook notes of a call for the tool that runs it: what its key is made of, except
/// the arguments (the tool keys those it receives).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Noted {
    /// rig's turn: the one-based model call of the run that made the call.
    turn: usize,
    /// The model's call id, or the one rig gave a call that came without.
    call_id: Option<CallId>,
}

/// What a tool finds noted under its dispatch.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Found {
    /// Its own call.
    Call(Noted),
    /// Nothing: the hook is not on the agent, or the tool runs outside a rig dispatch.
    Nothing,
    /// Calls that differ under the same dispatch id and tool (agents on different rig buses,
    /// each numbering its dispatches, sharing these tools): which is this one is unknown.
    Ambiguous,
}

/// What a tool finds among the calls noted under its dispatch id and tool name (one but for
/// agents on different buses sharing these tools): the rule, a pure function.
fn found(noted: &[Noted]) -> Found {
    match noted {
        [] => Found::Nothing,
        [first, rest @ ..] if rest.iter().all(|other| other == first) => Found::Call(first.clone()),
        _ => Found::Ambiguous,
    }
}

/// Calls the hook saw dispatched, by rig's dispatch id and tool name, until their tool takes
/// them or their outcome comes (a declined call's does, with no tool run).
#[derive(Default)]
struct Calls(Mutex<HashMap<(EffectId, String), Vec<Noted>>>);

impl Calls {
    fn note(&self, dispatch: EffectId, tool: &str, call: Noted) {
        let mut calls = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        calls
            .entry((dispatch, tool.to_owned()))
            .or_default()
            .push(call);
    }

    /// The call of dispatch `dispatch`, taken; an ambiguous one is left for its outcome.
    fn take(&self, dispatch: EffectId, tool: &str) -> Found {
        let mut calls = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = (dispatch, tool.to_owned());
        let noted = calls.get(&entry).map(Vec::as_slice).unwrap_or_default();
        let found = found(noted);
        if let Found::Call(call) = &found {
            Self::remove(&mut calls, entry, call);
        }
        found
    }

    /// Forget `call` of dispatch `dispatch` if its tool did not take it.
    fn forget(&self, dispatch: EffectId, tool: &str, call: &Noted) {
        let mut calls = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        Self::remove(&mut calls, (dispatch, tool.to_owned()), call);
    }

    fn remove(
        calls: &mut HashMap<(EffectId, String), Vec<Noted>>,
        entry: (EffectId, String),
        call: &Noted,
    ) {
        if let Some(noted) = calls.get_mut(&entry) {
            if let Some(at) = noted.iter().position(|other| other == call) {
                noted.swap_remove(at);
            }
            if noted.is_empty() {
                calls.remove(&entry);
            }
        }
    }
}

/// Why a tool could not tell which call it runs: it runs nothing.
#[derive(Debug, thiserror::Error)]
enum Unkeyed {
    #[error("idem has no call id for this call: add `RigTools::hook()` to the agent")]
    NotNoted,
    #[error(
        "idem cannot tell this call from another dispatched under the same rig dispatch id: \
         give each agent's bus its own `RigTools`"
    )]
    Ambiguous,
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
                Some(DynamicTool::new_with_context(
                    name,
                    tool.description(),
                    tool.input_schema().clone(),
                    move |context: &mut RigContext, arguments: Value| {
                        // The bus a tool is served on is in its context, its parent the
                        // dispatch being served: the id the hook saw.
                        let dispatch = context.scope::<RigBus>().and_then(|bus| bus.parent());
                        let this = this.clone();
                        let tool_name = tool_name.clone();
                        Box::pin(async move { this.call(&tool_name, dispatch, arguments).await })
                    },
                ))
            })
            .collect()
    }

    /// The rig hook that notes each call for its tool (see the module docs).
    pub fn hook(&self) -> CallIdHook {
        CallIdHook {
            calls: Arc::clone(&self.calls),
        }
    }

    async fn call(
        &self,
        tool: &str,
        dispatch: Option<EffectId>,
        arguments: Value,
    ) -> Result<ToolOutput, ToolExecutionError> {
        let found = dispatch.map_or(Found::Nothing, |id| self.calls.take(id, tool));
        let noted = match found {
            Found::Call(noted) => noted,
            Found::Nothing => return Err(unkeyed(&Unkeyed::NotNoted)),
            Found::Ambiguous => return Err(unkeyed(&Unkeyed::Ambiguous)),
        };
        let key = key_of(&noted, tool, &arguments);
        let call = ToolCall::new(tool, arguments).with_call_id(key);
        match Answer::of(self.dispatcher.dispatch(&call, &self.run).await) {
            Ok(Answer::Output(done)) => Ok(ToolOutput::json(done.output)),
            Ok(refused) => Err(refusal(&refused)),
            Err(host) => Err(for_host(&host)),
        }
    }
}

/// A call run without its key: nothing is done.
fn unkeyed(why: &Unkeyed) -> ToolExecutionError {
    ToolExecutionError::new(ToolErrorKind::Other, why.to_string())
        .with_model_feedback("this tool could not run; nothing was done")
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

/// The hook of [`RigTools::hook`]: notes each tool call for the tool that runs it, and
/// forgets a call no tool ran (declined by a later hook or a bus layer).
pub struct CallIdHook {
    calls: Arc<Calls>,
}

impl AgentHook for CallIdHook {
    fn name(&self) -> Option<String> {
        Some("idem.call-ids".to_owned())
    }

    async fn on_dispatch(&self, _ctx: &HookContext, event: DispatchEvent<'_>) -> DispatchAction {
        if let EffectKind::ToolCall { name, .. } = event.kind {
            let call = Noted {
                turn: event.turn,
                call_id: event.call_id.cloned(),
            };
            self.calls.note(event.id, name, call);
        }
        DispatchAction::Proceed
    }

    async fn on_outcome(&self, _ctx: &HookContext, event: OutcomeEvent<'_>) -> OutcomeAction {
        if let EffectKind::ToolCall { name, .. } = event.kind {
            let call = Noted {
                turn: event.turn,
                call_id: event.call_id.cloned(),
            };
            self.calls.forget(event.id, name, &call);
        }
        OutcomeAction::Proceed
    }
}

/// The id a call is keyed by within the run (the rule in the module docs), from what the hook
/// noted and the arguments the tool received.
fn key_of(call: &Noted, tool: &str, arguments: &Value) -> String {
    let turn = call.turn;
    match &call.call_id {
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
    use rig_core::message::ProviderCallId;

    fn provider(id: &str) -> Option<CallId> {
        ProviderCallId::new(id).map(CallId::Provider)
    }

    fn noted(turn: usize, id: &str) -> Noted {
        Noted {
            turn,
            call_id: provider(id),
        }
    }

    #[test]
    fn a_tool_finds_its_call_only_when_nothing_else_shares_its_dispatch() {
        let (a, b) = (noted(1, "call_a"), noted(1, "call_b"));
        let table: [(&[Noted], Found); 4] = [
            (&[], Found::Nothing),
            (&[a.clone()], Found::Call(a.clone())),
            (&[a.clone(), a.clone()], Found::Call(a.clone())),
            (&[a.clone(), b.clone()], Found::Ambiguous),
        ];
        for (noted, expected) in table {
            assert_eq!(found(noted), expected, "{noted:?}");
        }
    }

    #[test]
    fn a_call_is_taken_once_and_a_declined_one_is_forgotten() {
        let calls = Calls::default();
        let (first, second) = (EffectId::from_raw(1), EffectId::from_raw(2));
        calls.note(first, "a", noted(1, "call_a"));
        calls.note(second, "a", noted(2, "call_b"));
        // The first call was declined: its outcome forgets it, and the second's tool finds
        // the second call.
        calls.forget(first, "a", &noted(1, "call_a"));
        assert_eq!(calls.take(first, "a"), Found::Nothing);
        assert_eq!(
            calls.take(second, "b"),
            Found::Nothing,
            "another tool's dispatch"
        );
        assert_eq!(calls.take(second, "a"), Found::Call(noted(2, "call_b")));
        assert_eq!(calls.take(second, "a"), Found::Nothing, "taken once");
        // An ambiguous dispatch is left for the outcomes, which forget each call.
        calls.note(first, "a", noted(1, "call_a"));
        calls.note(first, "a", noted(1, "call_c"));
        assert_eq!(calls.take(first, "a"), Found::Ambiguous);
        calls.forget(first, "a", &noted(1, "call_a"));
        calls.forget(first, "a", &noted(1, "call_c"));
        assert!(
            calls.0.lock().unwrap().is_empty(),
            "nothing is kept once taken or forgotten"
        );
    }

    #[test]
    fn keys_follow_the_agent_loops_rule() {
        let args = serde_json::json!({"title": "t"});
        let fingerprint = idem_core::Fingerprint::of(&args).to_hex();
        let local = CallId::from_wire("");
        let table = [
            (
                noted(3, "call_DdmO9pD3xa9XTPNJ32zg2hcA"),
                "call_DdmO9pD3xa9XTPNJ32zg2hcA".to_owned(),
            ),
            (noted(3, "call_0"), "turn-3/call_0".to_owned()),
            (
                Noted {
                    turn: 3,
                    call_id: Some(local),
                },
                format!("turn-3/open_ticket/{fingerprint}"),
            ),
            (
                Noted {
                    turn: 3,
                    call_id: None,
                },
                format!("turn-3/open_ticket/{fingerprint}"),
            ),
        ];
        for (call, expected) in table {
            assert_eq!(key_of(&call, "open_ticket", &args), expected, "{call:?}");
        }
    }
}
