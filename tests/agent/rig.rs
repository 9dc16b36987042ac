//! idem's tools in a rig agent (feature `rig`), driven by rig's own scripted completion model
//! (no network): a write, the model calling it again, and an irreversible call, each
//! dispatched through idem with the key from rig's call id.
#![cfg(feature = "rig")]

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use idem::MemoryStore;
use idem::agent::rig::RigTools;
use idem::prelude::*;
use rig_agent::agent::{DispatchAction, DispatchEvent};
use rig_agent::{Agent, AgentBuilder, AgentHook, HookContext};
use rig_core::effect::EffectKind;
use rig_core::error::{ErrorKind, ErrorReport};
use rig_core::test_utils::{MockCompletionModel, MockTurn};
use serde_json::json;
use support::dispatcher::linked;

static OPENED: AtomicUsize = AtomicUsize::new(0);
static COMMENTED: AtomicUsize = AtomicUsize::new(0);
static DELETED: AtomicUsize = AtomicUsize::new(0);
/// The tests share the counters: each holds this lock.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn ticket_key(args: &serde_json::Value) -> Option<String> {
    args.get("title")?.as_str().map(str::to_owned)
}

/// Open a support ticket.
#[tool(class = "non_idempotent_write", natural_key = ticket_key)]
async fn open_ticket(title: String) -> Result<String, ToolError> {
    let n = OPENED.fetch_add(1, Ordering::SeqCst) + 1;
    Ok(format!("TICKET-{n}: {title}"))
}

/// Add a comment to a ticket (no natural key: only the call's key tells a re-send).
#[tool(class = "non_idempotent_write")]
async fn add_comment(ticket: String, text: String) -> Result<String, ToolError> {
    let n = COMMENTED.fetch_add(1, Ordering::SeqCst) + 1;
    Ok(format!("comment {n} on {ticket}: {text}"))
}

/// Delete a customer's account for good.
#[tool(class = "irreversible")]
async fn delete_account(account: String) -> Result<String, ToolError> {
    DELETED.fetch_add(1, Ordering::SeqCst);
    Ok(format!("deleted {account}"))
}

/// The model of the issue: opens a ticket, opens it again "to be sure" under a new call id
/// (the tool's natural key finds the ticket), comments on it, re-sends that call with its id
/// (the call id finds the comment), asks to delete an account, then answers.
fn script() -> MockCompletionModel {
    let ticket = json!({"title": "Export button does nothing"});
    let comment = json!({"ticket": "TICKET-1", "text": "Reproduced on Safari 17."});
    MockCompletionModel::from_turns([
        MockTurn::tool_call("call_Hx7Qm2Lw9Pz4", "open_ticket", ticket.clone()),
        MockTurn::tool_call("call_Rt5Vb8Nk3Jy6", "open_ticket", ticket),
        MockTurn::tool_call("call_Cm4Ts9Qe2Wd7", "add_comment", comment.clone()),
        MockTurn::tool_call("call_Cm4Ts9Qe2Wd7", "add_comment", comment),
        MockTurn::tool_call(
            "call_Dk2Wq7Ps4Mx1",
            "delete_account",
            json!({"account": "acme"}),
        ),
        MockTurn::text("Ticket opened; deleting the account needs an approval."),
    ])
}

/// What the model was sent back, as JSON text, for each of its requests.
fn sent(model: &MockCompletionModel) -> Vec<String> {
    model
        .requests()
        .iter()
        .map(|r| serde_json::to_string(r).unwrap())
        .collect()
}

async fn run_agent(tools: &RigTools, model: &MockCompletionModel) -> String {
    let agent = AgentBuilder::new(model.clone())
        .dynamic_tools(tools.tools())
        .add_hook(tools.hook())
        .build();
    agent
        .prompt("The export button is broken; also delete acme's account.")
        .max_turns(8)
        .run()
        .await
        .expect("the run ends")
        .to_string()
}

#[tokio::test]
async fn one_effect_and_one_refusal_the_agent_sees() {
    let _serial = SERIAL.lock().await;
    let (opened, commented, deleted) = (
        OPENED.load(Ordering::SeqCst),
        COMMENTED.load(Ordering::SeqCst),
        DELETED.load(Ordering::SeqCst),
    );
    let dispatcher = linked(Arc::new(MemoryStore::new()));
    let tools = RigTools::new(dispatcher, RunContext::new("t").with_run("run-rig-1", 0));
    let model = script();
    let answer = run_agent(&tools, &model).await;
    assert!(answer.contains("approval"), "{answer}");
    assert_eq!(
        OPENED.load(Ordering::SeqCst) - opened,
        1,
        "one ticket for two calls"
    );
    assert_eq!(
        COMMENTED.load(Ordering::SeqCst) - commented,
        1,
        "one comment, re-sent once"
    );
    assert_eq!(
        DELETED.load(Ordering::SeqCst) - deleted,
        0,
        "nothing deleted unapproved"
    );

    let requests = sent(&model);
    assert_eq!(requests.len(), 6, "one request per scripted turn");
    // The second `open_ticket` is answered with the first one's ticket, the re-sent comment
    // with the first comment.
    let ticket = format!("TICKET-{}: Export button does nothing", opened + 1);
    assert_eq!(requests[2].matches(&ticket).count(), 2, "{}", requests[2]);
    let comment = format!("comment {} on TICKET-1", commented + 1);
    assert_eq!(requests[4].matches(&comment).count(), 2, "{}", requests[4]);
    // The irreversible call is refused, in words the model can act on.
    let last = requests.last().unwrap();
    assert!(last.contains("approval_required"), "{last}");
}

#[tokio::test]
async fn a_resumed_run_replays_instead_of_running_again() {
    let _serial = SERIAL.lock().await;
    let (opened, commented) = (
        OPENED.load(Ordering::SeqCst),
        COMMENTED.load(Ordering::SeqCst),
    );
    let dispatcher = Arc::new(linked(Arc::new(MemoryStore::new())));
    let run = RunContext::new("t").with_run("run-rig-2", 0);
    // The run, then the same run again from the start (a crash before its answer was kept).
    for _ in 0..2 {
        let tools = RigTools::new(Arc::clone(&dispatcher), run.clone());
        run_agent(&tools, &script()).await;
    }
    assert_eq!(
        OPENED.load(Ordering::SeqCst) - opened,
        1,
        "one ticket for both runs"
    );
    assert_eq!(
        COMMENTED.load(Ordering::SeqCst) - commented,
        1,
        "one comment for both runs"
    );
}

#[tokio::test]
async fn without_the_hook_a_tool_refuses_to_guess_a_key() {
    let _serial = SERIAL.lock().await;
    let opened = OPENED.load(Ordering::SeqCst);
    let tools = RigTools::new(
        linked(Arc::new(MemoryStore::new())),
        RunContext::new("t").with_run("run-rig-3", 0),
    );
    let model = MockCompletionModel::from_turns([
        MockTurn::tool_call("call_Hx7Qm2Lw9Pz4", "open_ticket", json!({"title": "t"})),
        MockTurn::text("done"),
    ]);
    let agent = AgentBuilder::new(model.clone())
        .dynamic_tools(tools.tools())
        .build();
    agent
        .prompt("go")
        .max_turns(4)
        .run()
        .await
        .expect("the run ends");
    assert_eq!(OPENED.load(Ordering::SeqCst), opened, "nothing ran");
    let last = sent(&model).pop().unwrap();
    assert!(last.contains("nothing was done"), "{last}");
}

/// A policy hook added after idem's: declines the call with this id (as a rig bus layer or
/// any later hook may), so the tool never runs for it.
struct Decline(&'static str);

impl AgentHook for Decline {
    async fn on_dispatch(&self, _ctx: &HookContext, event: DispatchEvent<'_>) -> DispatchAction {
        match event.call_id {
            Some(id) if id.wire() == self.0 => {
                DispatchAction::Deny(ErrorReport::new(ErrorKind::Denied, "not now"))
            }
            _ => DispatchAction::Proceed,
        }
    }
}

/// An agent with idem's tools and hook, then `Decline(declined)`.
fn agent_declining(tools: &RigTools, model: &MockCompletionModel, declined: &'static str) -> Agent {
    AgentBuilder::new(model.clone())
        .dynamic_tools(tools.tools())
        .add_hook(tools.hook())
        .add_hook(Decline(declined))
        .build()
}

async fn answer(agent: &Agent, prompt: &str) -> String {
    agent
        .prompt(prompt)
        .max_turns(4)
        .run()
        .await
        .expect("the run ends")
        .to_string()
}

#[tokio::test]
async fn a_declined_call_never_lends_its_id_to_the_retry() {
    let _serial = SERIAL.lock().await;
    let commented = COMMENTED.load(Ordering::SeqCst);
    let dispatcher = Arc::new(linked(Arc::new(MemoryStore::new())));
    let run = RigTools::new(
        Arc::clone(&dispatcher),
        RunContext::new("t").with_run("run-rig-4", 0),
    );
    let comment = json!({"ticket": "TICKET-9", "text": "Still broken."});
    // The first call is declined; the model retries it under a new id.
    let model = MockCompletionModel::from_turns([
        MockTurn::tool_call("call_Dn8Kq2Vx5Rb1", "add_comment", comment.clone()),
        MockTurn::tool_call("call_Rx3Lp7Wm9Tc4", "add_comment", comment.clone()),
        MockTurn::text("Commented."),
    ]);
    answer(
        &agent_declining(&run, &model, "call_Dn8Kq2Vx5Rb1"),
        "comment",
    )
    .await;
    let first = sent(&model);
    let made = format!("comment {} on TICKET-9", commented + 1);
    assert!(first[2].contains(&made), "{}", first[2]);

    // The retry's response answered again, as after a crash before its answer was kept.
    let again = RigTools::new(dispatcher, RunContext::new("t").with_run("run-rig-4", 0));
    let model = MockCompletionModel::from_turns([
        MockTurn::tool_call("call_Rx3Lp7Wm9Tc4", "add_comment", comment),
        MockTurn::text("Commented."),
    ]);
    answer(
        &agent_declining(&again, &model, "call_Dn8Kq2Vx5Rb1"),
        "comment",
    )
    .await;
    assert_eq!(
        COMMENTED.load(Ordering::SeqCst) - commented,
        1,
        "the retry answered again replays its comment"
    );
    let replayed = sent(&model);
    assert!(replayed[1].contains(&made), "{}", replayed[1]);
}

/// One scripted model for two prompts, each making one call with `id` (a server-numbered id,
/// or none: rig gives it one of its own), then answering.
fn two_prompts(
    id: &str,
    first: serde_json::Value,
    second: serde_json::Value,
) -> MockCompletionModel {
    MockCompletionModel::from_turns([
        MockTurn::tool_call(id, "add_comment", first),
        MockTurn::text("First done."),
        MockTurn::tool_call(id, "add_comment", second),
        MockTurn::text("Second done."),
    ])
}

fn plain_agent(tools: &RigTools, model: &MockCompletionModel) -> Agent {
    AgentBuilder::new(model.clone())
        .dynamic_tools(tools.tools())
        .add_hook(tools.hook())
        .build()
}

#[tokio::test]
async fn a_second_prompt_is_its_own_run() {
    let _serial = SERIAL.lock().await;
    let comment = json!({"ticket": "TICKET-7", "text": "Seen again."});
    for (n, id) in ["call_0", ""].into_iter().enumerate() {
        let commented = COMMENTED.load(Ordering::SeqCst);
        let tools = RigTools::new(
            linked(Arc::new(MemoryStore::new())),
            RunContext::new("t").with_run(format!("run-rig-5-{n}"), 0),
        );
        let model = two_prompts(id, comment.clone(), comment.clone());
        let agent = plain_agent(&tools, &model);
        answer(&agent, "comment").await;
        answer(&agent, "comment once more").await;
        assert_eq!(
            COMMENTED.load(Ordering::SeqCst) - commented,
            2,
            "id {id:?}: each prompt comments"
        );
        let second = &sent(&model)[3];
        let own = format!("comment {} on TICKET-7", commented + 2);
        assert!(second.contains(&own), "id {id:?}: {second}");
    }
}

#[tokio::test]
async fn a_second_prompt_with_other_arguments_is_not_a_reused_key() {
    let _serial = SERIAL.lock().await;
    for (n, id) in ["call_0", ""].into_iter().enumerate() {
        let commented = COMMENTED.load(Ordering::SeqCst);
        let tools = RigTools::new(
            linked(Arc::new(MemoryStore::new())),
            RunContext::new("t").with_run(format!("run-rig-6-{n}"), 0),
        );
        let model = two_prompts(
            id,
            json!({"ticket": "TICKET-7", "text": "First."}),
            json!({"ticket": "TICKET-8", "text": "Second."}),
        );
        let agent = plain_agent(&tools, &model);
        answer(&agent, "comment").await;
        answer(&agent, "comment on the other one").await;
        let second = &sent(&model)[3];
        assert!(!second.contains("key_reused"), "id {id:?}: {second}");
        assert_eq!(
            COMMENTED.load(Ordering::SeqCst) - commented,
            2,
            "id {id:?}: {second}"
        );
    }
}

#[tokio::test]
async fn prompts_answered_again_in_order_replay_their_own_outcomes() {
    let _serial = SERIAL.lock().await;
    let commented = COMMENTED.load(Ordering::SeqCst);
    let dispatcher = Arc::new(linked(Arc::new(MemoryStore::new())));
    let run = RunContext::new("t").with_run("run-rig-7", 0);
    let (first, second) = (
        json!({"ticket": "TICKET-7", "text": "First."}),
        json!({"ticket": "TICKET-7", "text": "Second."}),
    );
    let mut answers = Vec::new();
    // The conversation, then the same conversation again from its start (a new process).
    for _ in 0..2 {
        let tools = RigTools::new(Arc::clone(&dispatcher), run.clone());
        let model = two_prompts("call_0", first.clone(), second.clone());
        let agent = plain_agent(&tools, &model);
        answer(&agent, "comment").await;
        answer(&agent, "comment again").await;
        let sent = sent(&model);
        answers.push((sent[1].clone(), sent[3].clone()));
    }
    assert_eq!(
        COMMENTED.load(Ordering::SeqCst) - commented,
        2,
        "two prompts, two comments, each replayed once"
    );
    for (prompt, text) in [(0, "First."), (1, "Second.")] {
        let made = [&answers[0], &answers[1]].map(|(a, b)| if prompt == 0 { a } else { b });
        let own = format!("comment {} on TICKET-7: {text}", commented + 1 + prompt);
        assert!(made[0].contains(&own), "{}", made[0]);
        assert!(made[1].contains(&own), "replayed: {}", made[1]);
    }
}

/// A hook added after idem's that edits every comment's text before the tool runs.
struct Edit;

impl AgentHook for Edit {
    async fn on_dispatch(&self, _ctx: &HookContext, event: DispatchEvent<'_>) -> DispatchAction {
        match event.kind {
            EffectKind::ToolCall { name, args } if name == "add_comment" => {
                let mut args: serde_json::Value = serde_json::from_str(args).unwrap();
                args["text"] = json!("Edited by policy.");
                DispatchAction::Patch(EffectKind::ToolCall {
                    name: name.clone(),
                    args: args.to_string(),
                })
            }
            _ => DispatchAction::Proceed,
        }
    }
}

#[tokio::test]
async fn a_hook_after_idems_may_patch_the_arguments() {
    let _serial = SERIAL.lock().await;
    let commented = COMMENTED.load(Ordering::SeqCst);
    let dispatcher = Arc::new(linked(Arc::new(MemoryStore::new())));
    let run = RunContext::new("t").with_run("run-rig-8", 0);
    // The run, then the same run again: the edited call is keyed as the tool received it.
    for _ in 0..2 {
        let tools = RigTools::new(Arc::clone(&dispatcher), run.clone());
        let model = MockCompletionModel::from_turns([
            MockTurn::tool_call("", "add_comment", json!({"ticket": "T-1", "text": "raw"})),
            MockTurn::text("Commented."),
        ]);
        let agent = AgentBuilder::new(model.clone())
            .dynamic_tools(tools.tools())
            .add_hook(tools.hook())
            .add_hook(Edit)
            .build();
        answer(&agent, "comment").await;
        let made = format!("comment {} on T-1: Edited by policy.", commented + 1);
        let sent = sent(&model);
        assert!(sent[1].contains(&made), "{}", sent[1]);
    }
    assert_eq!(COMMENTED.load(Ordering::SeqCst) - commented, 1);
}

#[tokio::test]
async fn a_prompt_answered_again_alone_is_found_by_its_number() {
    let _serial = SERIAL.lock().await;
    let commented = COMMENTED.load(Ordering::SeqCst);
    let dispatcher = Arc::new(linked(Arc::new(MemoryStore::new())));
    let run = RunContext::new("t").with_run("run-rig-9", 0);
    let second = json!({"ticket": "TICKET-7", "text": "Second."});
    let tools = RigTools::new(Arc::clone(&dispatcher), run.clone());
    let model = two_prompts(
        "call_0",
        json!({"ticket": "TICKET-7", "text": "First."}),
        second.clone(),
    );
    let agent = plain_agent(&tools, &model);
    answer(&agent, "comment").await;
    answer(&agent, "comment again").await;

    // A new process answers the second prompt again, alone.
    let tools = RigTools::new(dispatcher, run).at_prompt(2);
    let model = MockCompletionModel::from_turns([
        MockTurn::tool_call("call_0", "add_comment", second),
        MockTurn::text("Second done."),
    ]);
    answer(&plain_agent(&tools, &model), "comment again").await;
    assert_eq!(COMMENTED.load(Ordering::SeqCst) - commented, 2);
    let own = format!("comment {} on TICKET-7: Second.", commented + 2);
    let replayed = &sent(&model)[1];
    assert!(replayed.contains(&own), "{replayed}");
}
