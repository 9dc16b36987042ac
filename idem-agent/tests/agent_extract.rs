//! The agent loop's extractors read what a provider (or whoever stands between it and us)
//! sent: no JSON makes them panic. Property tests over arbitrary JSON built from the
//! providers' own field names, over the fixture responses of `tests/fixtures/providers/`
//! (at the workspace root) with parts replaced or removed, and over arbitrary argument text;
//! whatever is extracted is answered again in every shape, and mutated responses go through
//! a dispatcher.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use idem_agent::{
    AgentError, Answer, Anthropic, Arguments, CallReport, Gemini, KeyedBy, OpenAiChat,
    OpenAiResponses, Responder, Shape,
};
use idem_core::store::memory::MemoryStore;
use idem_core::{ToolClass, ToolError};
use idem_registry::{DispatchError, Dispatcher, Registry, RunContext, ToolContext, ToolDef};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// The four shapes.
fn shapes() -> [&'static dyn Shape; 4] {
    [&OpenAiChat, &OpenAiResponses, &Anthropic, &Gemini]
}

/// The names the providers' responses use, so that arbitrary JSON often looks like one.
const WORDS: &[&str] = &[
    "choices",
    "message",
    "tool_calls",
    "function",
    "name",
    "arguments",
    "id",
    "type",
    "output",
    "call_id",
    "content",
    "input",
    "candidates",
    "parts",
    "functionCall",
    "function_call",
    "args",
    "tool_use",
    "text",
    "role",
    "assistant",
    "custom",
    "get_weather",
    "call_0",
    "{}",
    "{\"city\":",
    "",
];

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(WORDS).prop_map(str::to_owned),
        1 => "\\PC{0,12}",
    ]
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        word().prop_map(Value::from),
    ];
    leaf.prop_recursive(5, 96, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            proptest::collection::vec((word(), inner), 0..6)
                .prop_map(|members| Value::Object(members.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn fixtures() -> &'static [Value] {
    static FIXTURES: OnceLock<Vec<Value>> = OnceLock::new();
    FIXTURES.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/providers");
        let mut all = Vec::new();
        for shape in std::fs::read_dir(&root).expect("the fixtures at the workspace root") {
            for file in std::fs::read_dir(shape.unwrap().path()).unwrap() {
                let text = std::fs::read_to_string(file.unwrap().path()).unwrap();
                all.push(serde_json::from_str(&text).unwrap());
            }
        }
        assert!(all.len() >= 9, "{} fixtures", all.len());
        all
    })
}

/// A change at one place of a response.
#[derive(Debug, Clone)]
enum Mutation {
    Replace(Value),
    Remove,
}

fn mutation() -> impl Strategy<Value = (Vec<usize>, Mutation)> {
    (
        proptest::collection::vec(any::<usize>(), 0..8),
        prop_oneof![json().prop_map(Mutation::Replace), Just(Mutation::Remove)],
    )
}

/// Follow `path` (each step picks a child, modulo their number) and change what is there.
fn mutate(value: &mut Value, path: &[usize], change: &Mutation) {
    let children = match value {
        Value::Array(a) => a.len(),
        Value::Object(o) => o.len(),
        _ => 0,
    };
    match path.split_first() {
        Some((step, rest)) if children > 0 => {
            let i = step % children;
            if rest.is_empty() && matches!(change, Mutation::Remove) {
                match value {
                    Value::Array(a) => {
                        a.remove(i);
                    }
                    Value::Object(o) => {
                        let key = o.keys().nth(i).cloned().unwrap_or_default();
                        o.remove(&key);
                    }
                    _ => {}
                }
                return;
            }
            let child = match value {
                Value::Array(a) => &mut a[i],
                Value::Object(o) => o.values_mut().nth(i).expect("i < len"),
                _ => unreachable!("only containers have children"),
            };
            mutate(child, rest, change);
        }
        _ => {
            if let Mutation::Replace(v) = change {
                *value = v.clone();
            }
        }
    }
}

/// Every shape reads `response` and answers what it found, without panicking; an answer has
/// one message per call (Chat, Responses) or one message for them all (Anthropic, Gemini).
fn read_and_answer(response: &Value) {
    for (i, shape) in shapes().into_iter().enumerate() {
        let Ok(calls) = shape.calls(response) else {
            continue;
        };
        let keyed = KeyedBy::of(&calls);
        assert_eq!(keyed.len(), calls.len());
        let reports: Vec<CallReport> = calls
            .into_iter()
            .zip(keyed)
            .enumerate()
            .map(|(index, (call, keyed_by))| CallReport {
                index: index as u32,
                answer: match &call.arguments {
                    Arguments::NotJson { error, .. } => Answer::NotJson {
                        tool: call.name.clone(),
                        error: error.clone(),
                    },
                    Arguments::Json(_) => Answer::Refused(DispatchError::UnknownTool {
                        name: call.name.clone(),
                        suggestion: None,
                    }),
                },
                call,
                keyed_by,
            })
            .collect();
        let messages = shape.messages(&reports);
        let expected = match (i, reports.len()) {
            (0 | 1, n) => n,
            (_, 0) => 0,
            _ => 1,
        };
        assert_eq!(messages.len(), expected, "{}", shape.api());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_json_never_panics(response in json()) {
        read_and_answer(&response);
        read_and_answer(&Value::Array(vec![response.clone()]));
        read_and_answer(&json!({"choices": [{"message": response.clone()}], "output": [response.clone()],
                                "content": [response.clone()], "candidates": [{"content": {"parts": [response]}}]}));
    }

    #[test]
    fn mutated_fixtures_never_panic(
        which in any::<usize>(),
        changes in proptest::collection::vec(mutation(), 1..4),
    ) {
        let mut response = fixtures()[which % fixtures().len()].clone();
        for (path, change) in &changes {
            mutate(&mut response, path, change);
        }
        read_and_answer(&response);
    }

    #[test]
    fn arbitrary_argument_text_never_panics(text in "\\PC{0,40}", call_id in "\\PC{0,12}") {
        let call = json!({"role": "assistant", "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "t", "arguments": text}}
        ]});
        let calls = OpenAiChat.calls(&call).unwrap();
        prop_assert_eq!(calls.len(), 1);
        // JSON text is read as serde reads it, anything else kept as sent, with the error.
        let expected = match serde_json::from_str::<Value>(&text) {
            _ if text.trim().is_empty() => Arguments::Json(json!({})),
            Ok(value) => Arguments::Json(value),
            Err(e) => Arguments::NotJson { text: text.clone(), error: e.to_string() },
        };
        prop_assert_eq!(&calls[0].arguments, &expected);
    }
}

fn dispatcher() -> Dispatcher {
    let echo = |name: &'static str, class| {
        ToolDef::builder(name, class)
            .description("Echo the arguments.")
            .input_schema(json!({"type": "object"}))
            .handler(|_: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
            .build()
            .unwrap()
    };
    let registry = Registry::builder()
        .add(echo("get_weather", ToolClass::Read))
        .add(echo("create_ticket", ToolClass::IdempotentWrite))
        .add(echo("send_email", ToolClass::NonIdempotentWrite))
        .build()
        .unwrap();
    Dispatcher::new(registry, Arc::new(MemoryStore::new())).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn mutated_fixtures_answered_through_a_dispatcher_never_panic(
        which in any::<usize>(),
        changes in proptest::collection::vec(mutation(), 1..3),
    ) {
        let mut response = fixtures()[which % fixtures().len()].clone();
        for (path, change) in &changes {
            mutate(&mut response, path, change);
        }
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let d = dispatcher();
        let agent = Responder::new(&d);
        let run = RunContext::new("t").with_run("r", 1);
        for shape in shapes() {
            let answered = runtime.block_on(async {
                match shape.calls(&response) {
                    Ok(_) => Some(agent.answer(shape, &response, &run).await),
                    Err(_) => None,
                }
            });
            match answered {
                None | Some(Ok(_)) | Some(Err(AgentError::Malformed(_))) => {}
                Some(Err(e)) => prop_assert!(false, "{}: {e}", shape.api()),
            }
        }
    }
}
