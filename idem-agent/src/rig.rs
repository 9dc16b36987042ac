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
//! # async fn run(dispatcher: idem::Dispatcher, model: impl Into<DynModel<Completion>>)
//! # -> Result<(), Box<dyn std::error::Error>> {
//! use idem::RunContext;
//! use idem::agent::rig::RigTools;
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
//! **Keys.** A call is keyed as [`crate`] keys a provider's calls: by the model's call
//! id, scoped by the run ([`RunContext::run_id`]); a call id a server numbers per response
//! (`call_0`) is scoped by the prompt and rig's turn too; a call rig gave an id of its own
//! (the provider sent none: a fresh id on every attempt) is keyed by the prompt, the turn,
//! the tool and its arguments. A tool's natural key comes first, as always. So a model that
//! repeats a call, or a prompt answered again as the same prompt, finds the recorded outcome.
//!
//! **Prompts.** Each prompt is its own run: prompts are numbered from 1 in the order they
//! start with these tools, so a second prompt's `call_0` is not the first's. A prompt is
//! answered again on purpose: by a new `RigTools` in the same run that runs the same prompts
//! again, in order, or by [`RigTools::at_prompt`] for one prompt alone (a run rig resumes
//! from its saved state, `Agent::resume`, included). A new conversation takes a new run id.
//!
//! **What the agent sees.** A tool's output as JSON. A refusal the model can act on (invalid
//! arguments, approval pending, an outcome unknown, a key reused, ...) is a tool error whose
//! feedback is the same `{"error": {"code", "message"}}` text [`crate`] answers with. What
//! the host must handle (the store unreachable, a fenced worker) is a tool error too, as rig
//! has no other way out of a tool: it says the call was not run, and the log has the reason.
//!
//! The hook may come anywhere among the agent's hooks: a call is keyed by the arguments its
//! tool receives, after every hook's patch.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use rig_agent::agent::{
    DispatchAction, DispatchEvent, OutcomeAction, OutcomeEvent, RunId, RunSettled, RunStart,
    RunStartAction,
};
use rig_agent::bus::Dispatcher as RigBus;
use rig_agent::{AgentHook, HookContext};
use rig_core::effect::{EffectId, EffectKind};
use rig_core::message::{CallId, ToolName};
use rig_core::tool::{
    DynamicTool, ToolContext as RigContext, ToolErrorKind, ToolExecutionError, ToolOutput,
};
use serde_json::Value;

use crate::Answer;
use idem_registry::dispatch::{DispatchError, Dispatcher, RunContext, ToolCall};

/// The registry's tools for a rig agent, acting in one run (see the module docs).
#[derive(Clone)]
pub struct RigTools {
    dispatcher: Arc<Dispatcher>,
    run: RunContext,
    calls: Arc<Calls>,
    prompts: Arc<Mutex<Prompts>>,
}

/// The prompts run with one [`RigTools`] (and its clones), numbered from 1 in the order they
/// start: what makes each prompt its own run.
#[derive(Debug)]
struct Prompts {
    /// The number the next prompt gets.
    next: u64,
    /// The number of each prompt under way, by rig's id of its run (in this process only).
    of: HashMap<RunId, u64>,
}

impl Default for Prompts {
    fn default() -> Prompts {
        Prompts {
            next: 1,
            of: HashMap::new(),
        }
    }
}

impl Prompts {
    /// The number of the prompt rig runs as `run`: the one it got, or the next.
    fn number(&mut self, run: RunId) -> u64 {
        if let Some(number) = self.of.get(&run) {
            return *number;
        }
        let number = self.next;
        self.next = number.saturating_add(1);
        self.of.insert(run, number);
        number
    }

    /// `run` ended: its number is not needed any more (and never given again).
    fn settled(&mut self, run: RunId) {
        self.of.remove(&run);
    }
}

/// What the hook notes of a call for the tool that runs it: what its key is made of, except
/// the arguments (the tool keys those it receives).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Noted {
    /// The prompt whose run made the call (see [`Prompts`]).
    prompt: u64,
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
    /// No call noted under the tool's dispatch: no hook, or no rig dispatch.
    #[error(
        "idem has no call id for this call: run it in a rig agent with `RigTools::hook()` added"
    )]
    NotNoted,
    /// Calls that differ noted under the tool's dispatch id and name.
    #[error(
        "idem cannot tell this call from another dispatched under the same rig dispatch id: \
         give each agent's bus its own `RigTools`"
    )]
    Ambiguous,
}

impl RigTools {
    /// The tools of `dispatcher`'s registry, dispatched in `run` (give it a run id: calls
    /// are keyed by their id within the run, and by their prompt: see
    /// [`at_prompt`](RigTools::at_prompt)). Its first prompt is prompt 1.
    pub fn new(dispatcher: impl Into<Arc<Dispatcher>>, run: RunContext) -> RigTools {
        RigTools {
            dispatcher: dispatcher.into(),
            run,
            calls: Arc::default(),
            prompts: Arc::default(),
        }
    }

    /// Number the next prompt run with these tools (and their clones) `prompt`, the one
    /// after it `prompt + 1`, and so on: to answer a prompt of the run again on purpose,
    /// after a crash or from the state rig saved, without answering the earlier ones again.
    ///
    /// Each prompt is its own run: the calls of prompt 2 never find the outcomes of prompt
    /// 1, even where the provider numbers its call ids per response (`call_0`) or sends none
    /// and rig's turns start again at 1. Prompts are numbered from 1 in the order they start
    /// with these tools; so a new `RigTools` in the same [`RunContext`] that runs the same
    /// prompts again, in the same order, finds each one's outcomes (a new conversation takes
    /// a new run id). To answer prompt 3 again alone, number it 3:
    ///
    /// ```no_run
    /// # use rig_agent::core::{DynModel, operation::Completion};
    /// # async fn run(dispatcher: idem::Dispatcher, model: DynModel<Completion>)
    /// # -> Result<(), Box<dyn std::error::Error>> {
    /// use idem::RunContext;
    /// use idem::agent::rig::RigTools;
    ///
    /// // The conversation's third prompt was cut short: its calls are answered again.
    /// let run = RunContext::new("tenant-a").with_run("conversation-42", 0);
    /// let idem = RigTools::new(dispatcher, run).at_prompt(3);
    /// let agent = rig_agent::AgentBuilder::new(model)
    ///     .dynamic_tools(idem.tools())
    ///     .add_hook(idem.hook())
    ///     .build();
    /// let answer = agent.prompt("Close the duplicate ticket.").max_turns(4).run().await?;
    /// // The fourth prompt is prompt 4.
    /// let next = agent.prompt("Thanks; anything else open?").max_turns(4).run().await?;
    /// # let _ = (answer, next); Ok(()) }
    /// ```
    ///
    /// A run rig resumes from its saved state (`Agent::resume`) is numbered as a prompt too:
    /// give it its number the same way. Prompts run at the same time with the same tools are
    /// numbered in the order they start, which a second process may not repeat: give each
    /// its own run instead.
    pub fn at_prompt(self, prompt: u64) -> RigTools {
        self.prompts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .next = prompt;
        self
    }

    /// Each registry tool as a rig tool, in the registry's order, with its description and
    /// input schema. A tool whose name rig refuses (none that the registry accepts) is left out.
    pub fn tools(&self) -> Vec<DynamicTool> {
        self.dispatcher
            .registry()
            .iter()
            .filter_map(|tool| {
                let name = ToolName::new(tool.name().to_string()).ok()?;
                let this = self.clone();
                let tool_name = tool.name().to_string();
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
            prompts: Arc::clone(&self.prompts),
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

/// A refusal the model can act on, in the words [`crate`] uses.
fn refusal(answer: &Answer) -> ToolExecutionError {
    let kind = match answer {
        Answer::Refused(DispatchError::InvalidArguments { .. }) => ToolErrorKind::InvalidArgs,
        Answer::Refused(DispatchError::UnknownTool { .. }) => ToolErrorKind::NotFound,
        Answer::Refused(
            DispatchError::PermissionDenied { .. } | DispatchError::NotAuthorized { .. },
        ) => ToolErrorKind::PermissionDenied,
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
    prompts: Arc<Mutex<Prompts>>,
}

impl CallIdHook {
    /// The number of the prompt `ctx` runs: given as it starts, or at its first tool call
    /// (a run rig resumed past its first model call does not start again).
    fn prompt(&self, ctx: &HookContext) -> u64 {
        self.prompts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .number(ctx.run_id())
    }

    fn noted(&self, ctx: &HookContext, turn: usize, call_id: Option<&CallId>) -> Noted {
        Noted {
            prompt: self.prompt(ctx),
            turn,
            call_id: call_id.cloned(),
        }
    }
}

impl AgentHook for CallIdHook {
    fn name(&self) -> Option<String> {
        Some("idem.call-ids".to_owned())
    }

    async fn on_run_start(&self, ctx: &HookContext, _event: RunStart<'_>) -> RunStartAction {
        self.prompt(ctx);
        RunStartAction::Continue
    }

    async fn on_dispatch(&self, ctx: &HookContext, event: DispatchEvent<'_>) -> DispatchAction {
        if let EffectKind::ToolCall { name, .. } = event.kind {
            let call = self.noted(ctx, event.turn, event.call_id);
            self.calls.note(event.id, name, call);
        }
        DispatchAction::Proceed
    }

    async fn on_outcome(&self, ctx: &HookContext, event: OutcomeEvent<'_>) -> OutcomeAction {
        if let EffectKind::ToolCall { name, .. } = event.kind {
            let call = self.noted(ctx, event.turn, event.call_id);
            self.calls.forget(event.id, name, &call);
        }
        OutcomeAction::Proceed
    }

    async fn on_run_settled(&self, ctx: &HookContext, _event: RunSettled<'_>) {
        // A run dropped before it settles keeps its entry: a few bytes, for the life of the
        // tools.
        self.prompts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .settled(ctx.run_id());
    }
}

/// The id a call is keyed by within the run (the rule in the module docs), from what the hook
/// noted and the arguments the tool received.
fn key_of(call: &Noted, tool: &str, arguments: &Value) -> String {
    let (prompt, turn) = (call.prompt, call.turn);
    match &call.call_id {
        Some(CallId::Provider(id)) if !crate::numbered(id.as_str()) => id.as_str().to_owned(),
        Some(CallId::Provider(id)) => format!("prompt-{prompt}/turn-{turn}/{}", id.as_str()),
        _ => {
            let fingerprint = idem_core::Fingerprint::of(arguments).to_hex();
            format!("prompt-{prompt}/turn-{turn}/{tool}/{fingerprint}")
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
            prompt: 1,
            turn,
            call_id: provider(id),
        }
    }

    #[test]
    fn prompts_are_numbered_in_the_order_they_start_and_never_twice() {
        let ids: Vec<RunId> = (0..4).map(|_| RunId::new()).collect();
        let mut prompts = Prompts::default();
        // (event, the prompt number it sees)
        let table = [
            (("start", 0), 1),
            (("call", 0), 1),
            (("start", 1), 2),
            (("call", 0), 1),
            (("settle", 0), 0),
            (("call", 1), 2),
            (("start", 2), 3),
            (("settle", 1), 0),
            (("settle", 2), 0),
            (("call", 3), 4),
        ];
        for ((event, run), expected) in table {
            let seen = match event {
                "settle" => {
                    prompts.settled(ids[run]);
                    0
                }
                _ => prompts.number(ids[run]),
            };
            assert_eq!(seen, expected, "{event} of run {run}");
        }
        let mut resumed = Prompts {
            next: 3,
            ..Prompts::default()
        };
        assert_eq!(resumed.number(ids[0]), 3, "at_prompt(3)");
        assert_eq!(resumed.number(ids[1]), 4);
    }

    #[test]
    fn a_tool_finds_its_call_only_when_nothing_else_shares_its_dispatch() {
        let (a, b) = (noted(1, "call_a"), noted(1, "call_b"));
        let table = [
            (vec![], Found::Nothing),
            (vec![a.clone()], Found::Call(a.clone())),
            (vec![a.clone(), a.clone()], Found::Call(a.clone())),
            (vec![a.clone(), b], Found::Ambiguous),
        ];
        for (noted, expected) in table {
            assert_eq!(found(&noted), expected, "{noted:?}");
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
    fn keys_follow_the_agent_loops_rule_within_each_prompt() {
        let args = serde_json::json!({"title": "t"});
        let fingerprint = idem_core::Fingerprint::of(&args).to_hex();
        let call = |prompt, call_id| Noted {
            prompt,
            turn: 3,
            call_id,
        };
        let minted = "call_DdmO9pD3xa9XTPNJ32zg2hcA";
        let table = [
            (call(1, provider(minted)), minted.to_owned()),
            (call(2, provider(minted)), minted.to_owned()),
            (
                call(1, provider("call_0")),
                "prompt-1/turn-3/call_0".to_owned(),
            ),
            (
                call(2, provider("call_0")),
                "prompt-2/turn-3/call_0".to_owned(),
            ),
            (
                call(2, Some(CallId::from_wire(""))),
                format!("prompt-2/turn-3/open_ticket/{fingerprint}"),
            ),
            (
                call(2, None),
                format!("prompt-2/turn-3/open_ticket/{fingerprint}"),
            ),
        ];
        for (call, expected) in table {
            assert_eq!(key_of(&call, "open_ticket", &args), expected, "{call:?}");
        }
    }
}
