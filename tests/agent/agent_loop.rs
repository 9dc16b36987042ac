//! The agent loop (feature `agent`): a provider's response in, its tool calls dispatched, the
//! provider's result messages out. Every fixture response under `tests/fixtures/providers/`
//! is answered and compared with `tests/golden/agent/<shape>/<fixture>.json` (regenerate with
//! `IDEM_BLESS=1 cargo test -p idem-tests --features agent --test agent agent_loop` and read the diff), which
//! `scripts/check_providers.py` validates with the providers' own SDK types. Then: the
//! calls' order under concurrency, a batch interrupted (an outage, a dropped future) and
//! answered again, numbered call ids across steps, each error the model is shown, the host's
//! errors, and the concurrency bound.
#![cfg(feature = "agent")]

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use idem::agent::{
    AgentError, Answer, Anthropic, Gemini, KeyedBy, OpenAiChat, OpenAiResponses, Responder, Shape,
    Turn,
};
use idem::prelude::*;
use idem::{ToolDef, ToolPolicy, export::Provider, key::RecordKey, store::StoreError};
use serde_json::{Value, json};
use support::dispatcher::dispatcher;
use support::hooked_store::{Hook, Hooked, Op};
use tokio::sync::Notify;

/// What the tools did: one entry per completed execution, `tool:argument`.
#[derive(Default)]
struct Effects(Mutex<Vec<String>>);

impl Effects {
    fn note(&self, entry: String) {
        self.0.lock().unwrap().push(entry);
    }
    fn count(&self, entry: &str) -> usize {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|e| *e == entry)
            .count()
    }
    fn total(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
}

/// The fixtures' tools: a read, an idempotent write with a natural key, a non-idempotent
/// write and an irreversible one.
fn tools(effects: &Arc<Effects>) -> Vec<ToolDef> {
    let (e1, e2, e3) = (effects.clone(), effects.clone(), effects.clone());
    let weather = ToolDef::builder("get_weather", ToolClass::Read)
        .description("Current weather for a city.")
        .input_schema(object(
            json!({"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}}),
            &["city"],
        ))
        .handler(move |_: ToolContext, args: Value| {
            let effects = e1.clone();
            async move {
                effects.note(format!(
                    "get_weather:{}",
                    args["city"].as_str().unwrap_or("")
                ));
                let unit = args.get("unit").cloned().unwrap_or(json!("celsius"));
                Ok::<_, ToolError>(json!({"city": args["city"], "temperature": 18, "unit": unit}))
            }
        })
        .build()
        .unwrap();
    let ticket = ToolDef::builder("create_ticket", ToolClass::IdempotentWrite)
        .description("Open a support ticket.")
        .input_schema(object(
            json!({"title": {"type": "string"}, "priority": {"enum": ["low", "normal", "high"]}}),
            &["title", "priority"],
        ))
        .natural_key(|args| args["title"].as_str().map(str::to_lowercase))
        .handler(move |ctx: ToolContext, args: Value| {
            let effects = e2.clone();
            async move {
                effects.note(format!(
                    "create_ticket:{}",
                    args["title"].as_str().unwrap_or("")
                ));
                let id = ctx.idempotency_key().chars().take(8).collect::<String>();
                Ok::<_, ToolError>(json!({"ticket": format!("T-{id}"), "title": args["title"]}))
            }
        })
        .build()
        .unwrap();
    let email = ToolDef::builder("send_email", ToolClass::NonIdempotentWrite)
        .description("Send an email to a customer.")
        .input_schema(object(
            json!({"to": {"type": "string"}, "subject": {"type": "string"}, "body": {"type": "string"}}),
            &["to", "subject", "body"],
        ))
        .handler(move |ctx: ToolContext, args: Value| {
            let effects = e3.clone();
            async move {
                effects.note(format!("send_email:{}", args["subject"].as_str().unwrap_or("")));
                Ok::<_, ToolError>(json!({"message_id": format!("<{}@mail.example>", ctx.idempotency_key())}))
            }
        })
        .build()
        .unwrap();
    let refund = ToolDef::builder("refund_payment", ToolClass::Irreversible)
        .description("Refund a payment.")
        .input_schema(object(
            json!({"payment_id": {"type": "string"}, "amount_cents": {"type": "integer", "minimum": 1}}),
            &["payment_id", "amount_cents"],
        ))
        .handler(|_: ToolContext, _: Value| async { Ok::<_, ToolError>(json!({"refunded": true})) })
        .build()
        .unwrap();
    vec![weather, ticket, email, refund]
}

fn registry(tools: Vec<ToolDef>) -> Registry {
    tools
        .into_iter()
        .fold(Registry::builder(), |b, t| b.add(t))
        .build()
        .unwrap()
}

fn fixture_dispatcher(effects: &Arc<Effects>, store: Arc<dyn Store>) -> Dispatcher {
    dispatcher(registry(tools(effects)), store)
}

fn run(step: u64) -> RunContext {
    RunContext::new("tenant-42").with_run("run-7", step)
}

/// The repository's root (this suite's package is `tests/`).
fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn fixture(relative: &str) -> Value {
    let path = root().join("tests/fixtures/providers").join(relative);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// Each shape by the name of its fixtures' folder.
fn shapes() -> [(&'static str, &'static dyn Shape); 4] {
    [
        ("openai-chat", &OpenAiChat),
        ("openai-responses", &OpenAiResponses),
        ("anthropic", &Anthropic),
        ("gemini", &Gemini),
    ]
}

/// What a golden file holds: each call, how it was keyed and answered, and the messages.
fn summary(turn: &Turn) -> Value {
    let calls: Vec<Value> = turn
        .calls
        .iter()
        .map(|c| {
            json!({
                "index": c.index,
                "id": c.call.id,
                "name": c.call.name,
                "keyed_by": match c.keyed_by { KeyedBy::CallId => "call_id", KeyedBy::Position => "position" },
                "answer": c.answer.code().unwrap_or("output"),
            })
        })
        .collect();
    json!({"calls": calls, "messages": turn.messages})
}

/// `value` with every object's keys in order, whether or not serde_json's `preserve_order`
/// is on (a dependency may turn it on), so that the golden files do not depend on it.
fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), sorted(&map[k])))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

fn bless() -> bool {
    std::env::var_os("IDEM_BLESS").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Compare `actual` with the golden file, or write it when blessing; a mismatch's message.
fn golden(relative: &Path, actual: &str) -> Option<String> {
    let path = root().join("tests/golden/agent").join(relative);
    if bless() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return None;
    }
    match std::fs::read_to_string(&path) {
        Ok(expected) if expected == actual => None,
        Ok(_) => Some(format!(
            "{} differs from the golden file; rerun with IDEM_BLESS=1 and read the diff",
            relative.display()
        )),
        Err(e) => Some(format!(
            "{}: {e} (rerun with IDEM_BLESS=1)",
            relative.display()
        )),
    }
}

#[tokio::test]
async fn every_fixture_is_answered_as_its_golden_file() {
    let mut mismatches = Vec::new();
    let mut answered = 0;
    for (folder, shape) in shapes() {
        let dir = root().join("tests/fixtures/providers").join(folder);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for (step, file) in files.iter().enumerate() {
            let effects = Arc::new(Effects::default());
            let d = fixture_dispatcher(&effects, Arc::new(MemoryStore::new()));
            let agent = Responder::new(&d);
            let response: Value =
                serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
            let turn = agent
                .answer(shape, &response, &run(step as u64))
                .await
                .unwrap();
            assert!(!turn.is_empty(), "{}", file.display());
            // One answer per call, in the calls' order, with the calls' ids.
            let answers: Vec<(Option<String>, Option<String>)> = match folder {
                "openai-chat" => turn
                    .messages
                    .iter()
                    .map(|m| (m["tool_call_id"].as_str().map(Into::into), None))
                    .collect(),
                "openai-responses" => turn
                    .messages
                    .iter()
                    .map(|m| (m["call_id"].as_str().map(Into::into), None))
                    .collect(),
                "anthropic" => turn.messages[0]["content"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|b| (b["tool_use_id"].as_str().map(Into::into), None))
                    .collect(),
                _ => turn.messages[0]["parts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| {
                        let r = &p["functionResponse"];
                        (
                            r["id"].as_str().map(Into::into),
                            r["name"].as_str().map(Into::into),
                        )
                    })
                    .collect(),
            };
            let expected: Vec<(Option<String>, Option<String>)> = turn
                .calls
                .iter()
                .map(|c| {
                    (
                        c.call.id.clone(),
                        (folder == "gemini").then(|| c.call.name.clone()),
                    )
                })
                .collect();
            assert_eq!(answers, expected, "{}", file.display());
            let name = Path::new(folder).join(file.file_name().unwrap());
            let text = serde_json::to_string_pretty(&sorted(&summary(&turn))).unwrap() + "\n";
            mismatches.extend(golden(&name, &text));
            answered += 1;
        }
    }
    assert_eq!(answered, 9, "every fixture answered");
    // The tools arrays those calls were made with, for the same SDK check.
    let registry = registry(tools(&Arc::new(Effects::default())));
    for provider in [
        Provider::OpenAiChat,
        Provider::OpenAiResponses,
        Provider::Anthropic,
        Provider::AnthropicStrict,
        Provider::Gemini,
        Provider::GeminiOpenApi,
    ] {
        let tools = registry.export(provider).unwrap();
        let text = serde_json::to_string_pretty(&sorted(&tools)).unwrap() + "\n";
        mismatches.extend(golden(
            &Path::new("tools").join(format!("{}.json", provider.as_str())),
            &text,
        ));
    }
    assert!(mismatches.is_empty(), "{mismatches:#?}");
}

#[tokio::test]
async fn the_fixtures_show_each_case_the_issue_names() {
    let effects = Arc::new(Effects::default());
    let d = fixture_dispatcher(&effects, Arc::new(MemoryStore::new()));
    let agent = Responder::new(&d);

    // Parallel calls: three answers, in order, each run once.
    let turn = agent
        .answer(&OpenAiChat, &fixture("openai-chat/parallel.json"), &run(1))
        .await
        .unwrap();
    assert_eq!(turn.messages.len(), 3);
    assert_eq!(
        turn.messages[1]["content"],
        r#"{"city":"Tokyo","temperature":18,"unit":"celsius"}"#
    );
    assert_eq!(
        (
            effects.count("get_weather:Paris"),
            effects.count("get_weather:Tokyo")
        ),
        (1, 1)
    );

    // Invalid JSON text: the model is told where it broke, and nothing ran.
    let turn = agent
        .answer(
            &OpenAiChat,
            &fixture("openai-chat/invalid_arguments.json"),
            &run(2),
        )
        .await
        .unwrap();
    let broken = turn.messages[0]["content"].as_str().unwrap();
    assert!(
        broken.contains("arguments_not_json") && broken.contains("line 1 column 27"),
        "{broken}"
    );
    assert_eq!(effects.count("get_weather:Paris"), 1, "not dispatched");
    let kelvin = turn.messages[1]["content"].as_str().unwrap();
    assert!(
        kelvin.contains("invalid_arguments") && kelvin.contains("`/unit`"),
        "{kelvin}"
    );

    // Anthropic: text beside tool_use is not a call; errors carry is_error.
    let turn = agent
        .answer(
            &Anthropic,
            &fixture("anthropic/parallel_refused.json"),
            &run(3),
        )
        .await
        .unwrap();
    let blocks = turn.messages[0]["content"].as_array().unwrap();
    assert_eq!(blocks.len(), 2);
    assert_eq!(turn.calls[0].answer.code(), Some("approval_required"));
    assert_eq!(turn.calls[1].answer.code(), Some("invalid_arguments"));
    assert!(blocks.iter().all(|b| b["is_error"] == true));
    assert_eq!(turn.messages[0]["role"], "user");

    // Gemini without ids: keyed by position, answered by name in order, without ids.
    let turn = agent
        .answer(
            &Gemini,
            &fixture("gemini/parallel_without_ids.json"),
            &run(4),
        )
        .await
        .unwrap();
    assert!(turn.calls.iter().all(|c| c.keyed_by == KeyedBy::Position));
    let parts = turn.messages[0]["parts"].as_array().unwrap();
    assert_eq!(
        parts[1]["functionResponse"],
        json!({"name": "get_weather", "response": {"output": {"city": "Tokyo", "temperature": 18, "unit": "celsius"}}})
    );
    assert_eq!(effects.count("get_weather:Tokyo"), 2);
}

/// A tool whose calls finish in the reverse of the order they started: `gate` says how many
/// times each yields before finishing.
fn slow_echo(in_flight: Arc<AtomicUsize>, peak: Arc<AtomicUsize>) -> ToolDef {
    ToolDef::builder("echo", ToolClass::Read)
        .description("Echo a number, slowly.")
        .input_schema(object(json!({"n": {"type": "integer"}}), &["n"]))
        .handler(move |_: ToolContext, args: Value| {
            let (in_flight, peak) = (in_flight.clone(), peak.clone());
            async move {
                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                // The first calls wait longest, so they finish last.
                let n = args["n"].as_u64().unwrap_or(0);
                for _ in 0..(10 - n.min(10)) * 5 {
                    tokio::task::yield_now().await;
                }
                in_flight.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, ToolError>(json!({"n": n}))
            }
        })
        .build()
        .unwrap()
}

fn echo_response(calls: u64) -> Value {
    let tool_calls: Vec<Value> = (0..calls)
        .map(|n| json!({"id": format!("call_{n}"), "type": "function", "function": {"name": "echo", "arguments": format!("{{\"n\":{n}}}")}}))
        .collect();
    json!({"role": "assistant", "content": null, "tool_calls": tool_calls})
}

#[tokio::test(flavor = "current_thread")]
async fn answers_keep_the_calls_order_and_the_concurrency_bound() {
    for (bound, expected_peak) in [(1, 1), (2, 2), (3, 3), (100, 6)] {
        let (in_flight, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let d = dispatcher(
            registry(vec![slow_echo(in_flight, peak.clone())]),
            Arc::new(MemoryStore::new()),
        );
        let agent = Responder::new(&d).with_concurrency(bound);
        let turn = agent
            .answer(&OpenAiChat, &echo_response(6), &run(1))
            .await
            .unwrap();
        let order: Vec<&str> = turn
            .messages
            .iter()
            .map(|m| m["content"].as_str().unwrap())
            .collect();
        let expected: Vec<String> = (0..6).map(|n| format!("{{\"n\":{n}}}")).collect();
        assert_eq!(order, expected, "bound {bound}");
        assert_eq!(peak.load(Ordering::SeqCst), expected_peak, "bound {bound}");
    }
    // Zero means one at a time, not none.
    let (in_flight, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let d = dispatcher(
        registry(vec![slow_echo(in_flight, peak.clone())]),
        Arc::new(MemoryStore::new()),
    );
    let turn = Responder::new(&d)
        .with_concurrency(0)
        .answer(&OpenAiChat, &echo_response(3), &run(1))
        .await
        .unwrap();
    assert_eq!((turn.calls.len(), peak.load(Ordering::SeqCst)), (3, 1));
}

/// A store that refuses to claim one key while it is set: an outage that hits one call.
#[derive(Debug, Default)]
struct Outage(Mutex<Option<RecordKey>>);

#[async_trait]
impl Hook for Arc<Outage> {
    async fn before(&self, op: Op, key: Option<&RecordKey>) -> Result<(), StoreError> {
        match (op, key, self.0.lock().unwrap().as_ref()) {
            (Op::Claim, Some(k), Some(down)) if k == down => {
                Err(StoreError::Unavailable("connection refused".into()))
            }
            _ => Ok(()),
        }
    }
}

fn three_emails() -> Value {
    json!({"type": "message", "role": "assistant", "content": [
        {"type": "text", "text": "I'll send the three notices."},
        {"type": "tool_use", "id": "toolu_01Kq3Vd8wZr2YxP5mN7bT4sA", "name": "send_email", "input": {"to": "a@example.com", "subject": "one", "body": "."}},
        {"type": "tool_use", "id": "toolu_01Lr4We9xAs3ZyQ6nO8cU5tB", "name": "send_email", "input": {"to": "b@example.com", "subject": "two", "body": "."}},
        {"type": "tool_use", "id": "toolu_01Ms5Xf0yBt4AzR7oP9dV6uC", "name": "send_email", "input": {"to": "c@example.com", "subject": "three", "body": "."}}
    ]})
}

#[tokio::test]
async fn a_batch_cut_by_an_outage_is_answered_again_running_only_the_missing_call() {
    let effects = Arc::new(Effects::default());
    let outage = Arc::new(Outage::default());
    let store = Arc::new(Hooked::new(Arc::new(MemoryStore::new()), outage.clone()));
    let d = fixture_dispatcher(&effects, store);
    let agent = Responder::new(&d);
    let response = three_emails();
    let third = ToolCall::new(
        "send_email",
        json!({"to": "c@example.com", "subject": "three", "body": "."}),
    )
    .with_call_id("toolu_01Ms5Xf0yBt4AzR7oP9dV6uC");
    *outage.0.lock().unwrap() = d.record_key(&third, &run(5)).unwrap();

    let err = agent
        .answer(&Anthropic, &response, &run(5))
        .await
        .unwrap_err();
    let AgentError::Host { index, error, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!((*index, error.code()), (2, "store_unavailable"), "{err}");
    assert_eq!(
        (
            effects.count("send_email:one"),
            effects.count("send_email:two"),
            effects.count("send_email:three")
        ),
        (1, 1, 0)
    );

    // The store is back; the host answers the same response again.
    *outage.0.lock().unwrap() = None;
    let turn = agent.answer(&Anthropic, &response, &run(5)).await.unwrap();
    let replayed: Vec<bool> = turn
        .calls
        .iter()
        .map(|c| match &c.answer {
            Answer::Output(done) => done.deduplicated,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(replayed, [true, true, false]);
    assert_eq!(
        (
            effects.count("send_email:one"),
            effects.count("send_email:two"),
            effects.count("send_email:three")
        ),
        (1, 1, 1)
    );
    assert_eq!(turn.messages[0]["content"].as_array().unwrap().len(), 3);
}

/// An idempotent write whose call on `held` waits until the gate opens.
fn sync_order(effects: Arc<Effects>, gate: Arc<AtomicBool>, started: Arc<Notify>) -> ToolDef {
    ToolDef::builder("sync_order", ToolClass::IdempotentWrite)
        .description("Push an order to the warehouse.")
        .input_schema(object(json!({"order": {"type": "string"}}), &["order"]))
        .handler(move |_: ToolContext, args: Value| {
            let (effects, gate, started) = (effects.clone(), gate.clone(), started.clone());
            async move {
                let order = args["order"].as_str().unwrap_or("").to_owned();
                if order == "held" && !gate.load(Ordering::SeqCst) {
                    started.notify_one();
                    std::future::pending::<()>().await;
                }
                effects.note(format!("sync_order:{order}"));
                Ok::<_, ToolError>(json!({"synced": order}))
            }
        })
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_batch_dropped_midway_replays_its_finished_calls_and_runs_the_rest() {
    let effects = Arc::new(Effects::default());
    let (gate, started) = (Arc::new(AtomicBool::new(false)), Arc::new(Notify::new()));
    let d = dispatcher(
        registry(vec![sync_order(
            effects.clone(),
            gate.clone(),
            started.clone(),
        )]),
        Arc::new(MemoryStore::new()),
    );
    let agent = Responder::new(&d).with_concurrency(2);
    let items: Vec<Value> = ["a", "held", "b", "c"]
        .iter()
        .enumerate()
        .map(|(i, order)| json!({"type": "function_call", "id": format!("fc_{i}x9"), "call_id": format!("call_Ord{i}Zq8LmN3pR5sT7uV9wX1yA"),
                                 "name": "sync_order", "arguments": json!({"order": order}).to_string(), "status": "completed"}))
        .collect();
    let output = Value::Array(items);

    // The process is stopped while `held` runs: its future is dropped.
    let at = run(6);
    tokio::select! {
        turn = agent.answer(&OpenAiResponses, &output, &at) => panic!("the held call cannot finish: {turn:?}"),
        () = async {
            started.notified().await;
            // Let the siblings that were started beside it finish.
            while effects.total() < 1 { tokio::task::yield_now().await; }
        } => {}
    }
    let before = effects.total();
    assert_eq!(effects.count("sync_order:held"), 0);

    gate.store(true, Ordering::SeqCst);
    let turn = agent
        .answer(&OpenAiResponses, &output, &run(6))
        .await
        .unwrap();
    let dedup: Vec<bool> = turn
        .calls
        .iter()
        .map(|c| matches!(&c.answer, Answer::Output(done) if done.deduplicated))
        .collect();
    // What finished before the drop is replayed; the rest ran now, once each.
    assert_eq!(dedup.iter().filter(|d| **d).count(), before);
    for order in ["a", "held", "b", "c"] {
        assert_eq!(effects.count(&format!("sync_order:{order}")), 1, "{order}");
    }
    assert_eq!(
        turn.messages[1],
        json!({"type": "function_call_output", "call_id": "call_Ord1Zq8LmN3pR5sT7uV9wX1yA", "output": r#"{"synced":"held"}"#})
    );
}

fn numbered(subject: &str) -> Value {
    json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "send_email",
         "arguments": json!({"to": "dana@example.com", "subject": subject, "body": "."}).to_string()}}
    ]}}]})
}

#[tokio::test]
async fn numbered_call_ids_are_keyed_by_step_and_position() {
    let effects = Arc::new(Effects::default());
    let d = fixture_dispatcher(&effects, Arc::new(MemoryStore::new()));
    let agent = Responder::new(&d);

    // `call_0` in two steps of one run: two calls, both sent.
    let first = agent
        .answer(&OpenAiChat, &numbered("first"), &run(1))
        .await
        .unwrap();
    let second = agent
        .answer(&OpenAiChat, &numbered("second"), &run(2))
        .await
        .unwrap();
    assert_eq!(first.calls[0].keyed_by, KeyedBy::Position);
    assert!(!first.calls[0].answer.is_error() && !second.calls[0].answer.is_error());
    assert_eq!(
        (
            effects.count("send_email:first"),
            effects.count("send_email:second")
        ),
        (1, 1)
    );
    // The same response answered again at its step is replayed.
    let again = agent
        .answer(&OpenAiChat, &numbered("second"), &run(2))
        .await
        .unwrap();
    assert!(matches!(&again.calls[0].answer, Answer::Output(done) if done.deduplicated));
    assert_eq!(again.messages, second.messages);
    // A host that forgets to count its steps: the model is told the key was reused.
    let stale = agent
        .answer(&OpenAiChat, &numbered("third"), &run(2))
        .await
        .unwrap();
    assert_eq!(stale.calls[0].answer.code(), Some("key_reused"));
    assert_eq!(effects.count("send_email:third"), 0);

    // What the dispatcher alone does with `call_0` scoped by the run: the second step's call
    // would be refused as a reuse of the first's key.
    let call = |subject: &str| {
        ToolCall::new(
            "send_email",
            json!({"to": "d@example.com", "subject": subject, "body": "."}),
        )
        .with_call_id("call_0")
    };
    d.dispatch(&call("x"), &run(1).with_run("run-8", 1))
        .await
        .unwrap();
    let e = d
        .dispatch(&call("y"), &run(1).with_run("run-8", 2))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "key_reused");
}

#[tokio::test]
async fn a_repeated_call_under_a_new_id_finds_its_natural_key() {
    let effects = Arc::new(Effects::default());
    let d = fixture_dispatcher(&effects, Arc::new(MemoryStore::new()));
    let agent = Responder::new(&d);
    let ticket = |id: &str| {
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function",
        "function": {"name": "create_ticket", "arguments": "{\"title\":\"Printer on fire\",\"priority\":\"high\"}"}}]})
    };
    let first = agent
        .answer(
            &OpenAiChat,
            &ticket("call_u2Vw4Xy6Za8Bc0De2Fg4Hi6J"),
            &run(1),
        )
        .await
        .unwrap();
    let repeat = agent
        .answer(
            &OpenAiChat,
            &ticket("call_k9Lm1No3Pq5Rs7Tu9Vw1Xy3Z"),
            &run(2),
        )
        .await
        .unwrap();
    assert_eq!(first.messages[0]["content"], repeat.messages[0]["content"]);
    assert_eq!(
        repeat.messages[0]["tool_call_id"],
        "call_k9Lm1No3Pq5Rs7Tu9Vw1Xy3Z"
    );
    assert_eq!(effects.count("create_ticket:Printer on fire"), 1);
}

/// A mailer whose every send times out after sending, and whose log never shows it.
struct LostMail;

impl support::providers::Mailer for LostMail {
    fn send(&self, _: &str) -> Result<Value, ToolError> {
        Err(ToolError::ambiguous("timed out after sending"))
    }
    fn verify(&self, _: &str) -> Result<Verified, ToolError> {
        Ok(Verified::NotApplied)
    }
}

#[tokio::test]
async fn the_model_is_told_what_it_can_act_on() {
    let effects = Arc::new(Effects::default());
    let admin = ToolDef::builder("close_account", ToolClass::IdempotentWrite)
        .description("Close a customer's account.")
        .input_schema(object(json!({"account": {"type": "string"}}), &["account"]))
        .policy(ToolPolicy {
            scopes: vec!["accounts:admin".into()],
            ..ToolPolicy::default()
        })
        .handler(|_: ToolContext, _: Value| async { Ok::<_, ToolError>(json!({"closed": true})) })
        .build()
        .unwrap();
    let mail = support::providers::send_mail(Arc::new(LostMail), ToolPolicy::default());
    let mut all = tools(&effects);
    all.extend([admin, mail]);
    let d = dispatcher(registry(all), Arc::new(MemoryStore::new()));
    let agent = Responder::new(&d);
    let call = |id: &str, name: &str, arguments: &str| json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}});
    let response = json!({"role": "assistant", "content": null, "tool_calls": [
        call("call_Aa1Bb2Cc3Dd4Ee5Ff6Gg7Hh8", "get_weather", "{\"city\": \"Paris\",}"),
        call("call_Ii9Jj0Kk1Ll2Mm3Nn4Oo5Pp6", "get_weather", "{\"city\": 7}"),
        call("call_Qq7Rr8Ss9Tt0Uu1Vv2Ww3Xx4", "get_wether", "{\"city\": \"Paris\"}"),
        call("call_Yy5Zz6Aa7Bb8Cc9Dd0Ee1Ff2", "close_account", "{\"account\": \"acme\"}"),
        call("call_Gg3Hh4Ii5Jj6Kk7Ll8Mm9Nn0", "refund_payment", "{\"payment_id\": \"pay_1\", \"amount_cents\": 4200}"),
        call("call_Oo1Pp2Qq3Rr4Ss5Tt6Uu7Vv8", "send_mail", "{\"to\": \"dana@example.com\"}"),
    ]});
    let turn = agent.answer(&OpenAiChat, &response, &run(1)).await.unwrap();
    let seen: Vec<(Option<&str>, Value)> = turn
        .calls
        .iter()
        .zip(&turn.messages)
        .map(|(c, m)| {
            (
                c.answer.code(),
                serde_json::from_str(m["content"].as_str().unwrap()).unwrap(),
            )
        })
        .collect();
    let message = |i: usize| seen[i].1["error"]["message"].as_str().unwrap().to_owned();
    assert_eq!(
        seen.iter().map(|s| s.0).collect::<Vec<_>>(),
        [
            Some("arguments_not_json"),
            Some("invalid_arguments"),
            Some("unknown_tool"),
            Some("permission_denied"),
            Some("approval_required"),
            Some("outcome_unknown"),
        ]
    );
    assert!(
        message(0).contains("trailing comma at line 1 column 18"),
        "{}",
        message(0)
    );
    assert!(
        message(1).contains("`/city`") && message(1).contains("string"),
        "{}",
        message(1)
    );
    assert!(
        message(2).contains("did you mean `get_weather`?"),
        "{}",
        message(2)
    );
    assert!(message(3).contains("accounts:admin"), "{}", message(3));
    assert!(message(4).contains("needs approval"), "{}", message(4));
    assert!(
        seen[5].1["error"]["retry_after"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{:?}",
        seen[5].1
    );
    assert_eq!(effects.total(), 0, "nothing the model must correct ran");

    // The model corrects its arguments: the call runs.
    let fixed = json!({"role": "assistant", "content": null, "tool_calls": [call("call_Wx2Yz4Ab6Cd8Ef0Gh2Ij4Kl6", "get_weather", "{\"city\": \"Paris\"}")]});
    let turn = agent.answer(&OpenAiChat, &fixed, &run(2)).await.unwrap();
    assert!(!turn.calls[0].answer.is_error());
    assert_eq!(effects.count("get_weather:Paris"), 1);
}

#[tokio::test]
async fn what_the_host_must_handle_is_an_err() {
    let effects = Arc::new(Effects::default());
    let d = fixture_dispatcher(&effects, Arc::new(MemoryStore::new()));
    let agent = Responder::new(&d);
    let response = fixture("openai-chat/parallel.json");

    let e = agent
        .answer(&OpenAiChat, &response, &RunContext::new("tenant-42"))
        .await
        .unwrap_err();
    assert!(matches!(e, AgentError::NoRun), "{e:?}");
    let e = agent
        .answer(
            &Gemini,
            &json!({"candidates": [{"content": {"parts": [{"functionCall": {"args": {}}}]}}]}),
            &run(1),
        )
        .await
        .unwrap_err();
    let AgentError::Malformed(shape) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(shape.at, "/candidates/0/content/parts/0/functionCall/name");
    assert_eq!(effects.total(), 0);

    // Answering one provider's response as another's is malformed too, never a panic.
    for (folder, shape) in shapes() {
        for other in [
            "openai-chat/parallel.json",
            "openai-responses/parallel.json",
            "anthropic/text_and_tool_use.json",
            "gemini/with_ids.json",
        ] {
            if other.starts_with(folder) {
                continue;
            }
            match agent.answer(shape, &fixture(other), &run(9)).await {
                Ok(turn) => assert!(turn.is_empty(), "{folder} read calls in {other}"),
                Err(AgentError::Malformed(_)) => {}
                Err(e) => panic!("{folder} on {other}: {e:?}"),
            }
        }
    }
}

#[tokio::test]
async fn the_runs_account_is_a_message_the_model_reads_in_each_providers_shape() {
    let effects = Arc::new(Effects::default());
    let d = fixture_dispatcher(&effects, Arc::new(MemoryStore::new()))
        .with_run_accounts(std::time::Duration::from_secs(3600));
    let agent = Responder::new(&d);
    agent
        .answer(&OpenAiChat, &fixture("openai-chat/parallel.json"), &run(1))
        .await
        .unwrap();
    // The same response answered again (a replay from a checkpoint): replayed, not run.
    agent
        .answer(&OpenAiChat, &fixture("openai-chat/parallel.json"), &run(1))
        .await
        .unwrap();
    let message = agent.account(&OpenAiChat, &run(2)).await.unwrap();
    assert_eq!(message["role"], "user");
    let text = message["content"].as_str().unwrap();
    assert!(text.contains("run `run-7` (3 calls)"), "{text}");
    assert!(text.contains("get_weather"), "{text}");
    let anthropic = agent.account(&Anthropic, &run(2)).await.unwrap();
    assert_eq!(anthropic["content"][0]["type"], "text");
    let gemini = agent.account(&Gemini, &run(2)).await.unwrap();
    assert!(
        gemini["parts"][0]["text"]
            .as_str()
            .unwrap()
            .contains("run `run-7`")
    );

    // Without accounts, the host is told how to keep them.
    let plain = fixture_dispatcher(&effects, Arc::new(MemoryStore::new()));
    let e = Responder::new(&plain)
        .account(&OpenAiChat, &run(2))
        .await
        .unwrap_err();
    assert!(matches!(e, AgentError::NoAccounts), "{e:?}");
}
