//! An agent loop over OpenAI Chat Completions, with no network: a scripted fake model replays
//! realistic responses, and `idem::agent` answers each one's tool calls with the `role: "tool"`
//! messages the next request carries. Along the way: parallel calls, the model repeating a
//! call "to be sure" under a new call id (found by the tool's natural key), a parallel batch
//! interrupted mid-flight and answered again by a restarted dispatcher (the finished calls
//! replayed, the missing one run with the same key), and an invalid argument the model then
//! corrects.
//!
//! Records live in SQLite (a fresh file in the system temp dir, removed at the end).
//!
//! ```text
//! cargo run --example openai_loop --features agent
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use idem::agent::{Answer, OpenAiChat, Responder, Turn};
use idem::prelude::*;
use idem::{SqliteStore, export::Provider};
use serde_json::{Value, json};
use tokio::sync::Notify;

// ---------------------------------------------------------------------------------------
// A fake mail provider that, like real ones, delivers a Message-ID once.

#[derive(Default)]
struct Mailbox {
    requests: usize,
    delivered: BTreeMap<String, String>,
}

static MAIL: Mutex<Option<Mailbox>> = Mutex::new(None);
/// The recipient whose provider accepts the next message and then never answers.
static HANGS_FOR: Mutex<Option<String>> = Mutex::new(None);
static HUNG: Notify = Notify::const_new();

fn mail<T>(f: impl FnOnce(&mut Mailbox) -> T) -> T {
    f(MAIL.lock().unwrap().get_or_insert_with(Mailbox::default))
}

// ---------------------------------------------------------------------------------------
// Tools.

/// Current weather for a city.
#[tool(class = "read")]
async fn get_weather(
    /// The city, e.g. `Paris`.
    city: String,
    /// `celsius` or `fahrenheit`.
    unit: Unit,
) -> Result<Value, ToolError> {
    let celsius = if city == "Paris" { 14 } else { 22 };
    let temperature = match unit {
        Unit::Celsius => celsius,
        Unit::Fahrenheit => celsius * 9 / 5 + 32,
    };
    Ok(json!({"city": city, "conditions": "rain", "temperature": temperature}))
}

#[derive(Debug, Clone, Copy, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Unit {
    Celsius,
    Fahrenheit,
}

fn ticket_title(args: &Value) -> Option<String> {
    args["title"].as_str().map(|t| t.trim().to_lowercase())
}

/// Open a support ticket (one per title: opening it again finds the first).
#[tool(class = "idempotent_write", natural_key = ticket_title)]
async fn create_ticket(ctx: &ToolContext, title: String) -> Result<Value, ToolError> {
    Ok(
        json!({"ticket": format!("T-{}", ctx.idempotency_key().chars().skip(5).take(6).collect::<String>()), "title": title}),
    )
}

/// Email a customer. The provider delivers each Message-ID once, so the class is
/// `idempotent_write`: a retry with the same key cannot send twice.
#[tool(class = "idempotent_write")]
async fn send_email(ctx: &ToolContext, to: String, body: String) -> Result<Value, ToolError> {
    let message_id = format!("<{}@mail.example>", ctx.idempotency_key());
    let first = mail(|m| {
        m.requests += 1;
        let first = !m.delivered.contains_key(&message_id);
        m.delivered
            .entry(message_id.clone())
            .or_insert(format!("{to}: {body}"));
        first
    });
    let hangs = HANGS_FOR.lock().unwrap().as_deref() == Some(to.as_str());
    if hangs {
        // Accepted, and then the connection hangs: this is where the process is killed.
        HUNG.notify_one();
        std::future::pending::<()>().await;
    }
    Ok(json!({"message_id": message_id, "delivered_now": first}))
}

// ---------------------------------------------------------------------------------------
// The scripted model: what gpt-4.1 answered in a recorded session, one response per turn.

fn call(id: &str, name: &str, arguments: Value) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments.to_string()}})
}

fn response(n: u64, content: Option<&str>, tool_calls: Vec<Value>) -> Value {
    let finish = if tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    let mut message =
        json!({"role": "assistant", "content": content, "refusal": null, "annotations": []});
    if !tool_calls.is_empty() {
        message["tool_calls"] = Value::Array(tool_calls);
    }
    json!({
        "id": format!("chatcmpl-BZr{n}q8LmN3pR5sT7uV9wX1yAbC"), "object": "chat.completion",
        "created": 1_747_400_000 + n, "model": "gpt-4.1-2025-04-14",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
        "usage": {"prompt_tokens": 300 + n * 40, "completion_tokens": 40, "total_tokens": 340 + n * 40},
        "system_fingerprint": "fp_b3f1157249"
    })
}

fn script() -> Vec<Value> {
    let customers = ["ana@example.com", "ben@example.com", "chloe@example.com"];
    let notices = customers
        .iter()
        .zip([
            "call_Kq3Vd8wZr2YxP5mN7bT4sAeJ",
            "call_Lr4We9xAs3ZyQ6nO8cU5tBfK",
            "call_Ms5Xf0yBt4AzR7oP9dV6uCgL",
        ])
        .map(|(to, id)| {
            call(
                id,
                "send_email",
                json!({"to": to, "body": "Your order ships Monday."}),
            )
        })
        .collect();
    vec![
        // Two calls at once.
        response(
            1,
            None,
            vec![
                call(
                    "call_DdmO9pD3xa9XTPNJ32zg2hcA",
                    "get_weather",
                    json!({"city": "Paris", "unit": "celsius"}),
                ),
                call(
                    "call_5CgPzXnP3Tz8ZqNS7tBvU3xh",
                    "create_ticket",
                    json!({"title": "Umbrellas out of stock in Paris"}),
                ),
            ],
        ),
        // The same ticket again "to be sure", under a new call id.
        response(
            2,
            Some("Let me make sure the ticket exists."),
            vec![call(
                "call_Qm8rV0bJxE2kTn4Hs6LpWy1c",
                "create_ticket",
                json!({"title": "Umbrellas out of stock in Paris"}),
            )],
        ),
        // Three emails at once: the process is killed while the third is in flight.
        response(3, None, notices),
        // An argument outside the schema; the model reads the error and corrects it.
        response(
            4,
            None,
            vec![call(
                "call_h7Yk2LmQp9RsT3vWx5Za1bCd",
                "get_weather",
                json!({"city": "Lyon", "unit": "kelvin"}),
            )],
        ),
        response(
            5,
            None,
            vec![call(
                "call_N4eF6gH8iJ0kL2mN4oP6qR8s",
                "get_weather",
                json!({"city": "Lyon", "unit": "celsius"}),
            )],
        ),
        response(
            6,
            Some("It rains in Paris (14 °C) and Lyon (22 °C); ticket opened, customers told."),
            vec![],
        ),
    ]
}

// ---------------------------------------------------------------------------------------

fn describe(turn: &Turn) {
    for (report, message) in turn.calls.iter().zip(&turn.messages) {
        let how = match &report.answer {
            Answer::Output(done) if done.deduplicated => "replayed",
            Answer::Output(_) => "ran",
            _ => "refused",
        };
        println!(
            "    {:<13} {:<8} -> tool message {}",
            report.call.name, how, message["content"]
        );
    }
}

fn dispatcher(path: &std::path::Path) -> Result<Dispatcher, Box<dyn std::error::Error>> {
    let store = Arc::new(SqliteStore::open(path)?);
    Ok(Dispatcher::new(Registry::linked()?, store)?)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::temp_dir().join(format!("idem-openai-loop-{}.db", std::process::id()));
    let mut d = dispatcher(&path)?;
    let registry = Registry::linked()?;
    let body = json!({"model": "gpt-4.1", "tools": registry.export(Provider::OpenAiChat)?});
    println!(
        "request tools: {}",
        body["tools"].as_array().map_or(0, Vec::len)
    );

    let mut messages = vec![
        json!({"role": "user", "content": "Paris weather? Open a ticket if umbrellas run out, and tell the three customers their order ships Monday."}),
    ];
    let run = RunContext::new("shop-eu").with_run("run-2025-05-16-0042", 0);
    for (step, response) in (1..).zip(script()) {
        println!("turn {step}:");
        let at = run.clone().at_step(step);
        if step == 3 {
            // The process dies while the third email is in flight.
            *HANGS_FOR.lock().unwrap() = Some("chloe@example.com".into());
            let agent = Responder::new(&d);
            tokio::select! {
                _ = agent.answer(&OpenAiChat, &response, &at) => unreachable!("the third email hangs"),
                () = async {
                    HUNG.notified().await;
                    while mail(|m| m.delivered.len()) < 3 { tokio::task::yield_now().await; }
                } => {}
            }
            // Dropping the batch gives the third call's claim back; after a real crash its
            // lease would lapse first. Either way the restarted process calls the provider
            // again with the same Message-ID.
            println!(
                "    -- interrupted mid-batch ({} messages delivered); restarting on the same database",
                mail(|m| m.delivered.len())
            );
            *HANGS_FOR.lock().unwrap() = None;
            d = dispatcher(&path)?;
        }
        let turn = Responder::new(&d)
            .answer(&OpenAiChat, &response, &at)
            .await?;
        if turn.is_empty() {
            println!(
                "    final answer: {}",
                response["choices"][0]["message"]["content"]
            );
            break;
        }
        describe(&turn);
        messages.push(response["choices"][0]["message"].clone());
        messages.extend(turn.messages);
    }

    let (requests, delivered) = mail(|m| (m.requests, m.delivered.len()));
    println!(
        "mail provider: {requests} requests, {delivered} messages delivered (one per customer)"
    );
    println!(
        "conversation: {} messages, ready for the next request",
        messages.len()
    );
    assert_eq!((requests, delivered), (4, 3));
    drop(d);
    let _ = std::fs::remove_file(&path);
    Ok(())
}
