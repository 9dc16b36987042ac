//! A crash test as a program of its own, the way `idem crashtest` runs one: a payment agent's
//! tools (reserve an amount in two journaled steps, capture it, mail a receipt) over fake
//! providers that apply each request key once and write what they applied to a ledger. The
//! agent is killed (SIGKILL) at every point where a crash changes what happens, resumed in
//! another process, and the ledger judged point by point.
//!
//! ```text
//! cargo run --example crashtest --features testing                     # every point holds
//! cargo run --example crashtest --features testing -- --plant-defect   # a hold placed twice
//! idem crashtest target/debug/examples/crashtest                      # the same, by the CLI
//! ```
//!
//! `--plant-defect` places the hold before the step that journals it, with no key: a crash
//! after it places it again, and the report names the points where it did.

use std::io::Write as _;
use std::path::Path;

use idem::prelude::*;
use idem::testing::{CrashTest, Setup};
use idem::tool::ToolDef;
use serde_json::{Value, json};

/// The providers: `what` applied once per `key` (`None`: applied every time), one ledger
/// line per effect applied.
fn apply(dir: &Path, what: &str, key: Option<&str>) {
    if let Some(key) = key {
        let seen = std::fs::read_to_string(dir.join("keys")).unwrap_or_default();
        if seen.lines().any(|k| k == key) {
            return;
        }
        append(&dir.join("keys"), key);
    }
    append(&dir.join("ledger"), what);
}

fn append(path: &Path, line: &str) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("a provider's file");
    writeln!(file, "{line}").expect("written");
    file.sync_all().expect("synced");
}

fn ledger(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("ledger"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Whether the reservation is written wrong (`--plant-defect`).
fn planted() -> bool {
    std::env::args().any(|a| a == "--plant-defect")
}

fn tools(dir: &Path) -> Vec<ToolDef> {
    let at = dir.to_owned();
    let reserve = ToolDef::builder("reserve", ToolClass::IdempotentWrite)
        .description("Reserve an amount: a hold at the bank, then the order marked reserved.")
        .input_schema(json!({"type": "object", "properties": {"order": {"type": "string"}}}))
        .handler(move |ctx: ToolContext, args: Value| {
            let dir = at.clone();
            async move {
                let order = args["order"].as_str().unwrap_or_default().to_owned();
                let key = ctx.downstream_key().as_str().to_owned();
                let hold = format!("hold {order}");
                if planted() {
                    apply(&dir, &hold, None);
                }
                let hold_key = format!("{key}-hold");
                ctx.step("hold", || async {
                    if !planted() {
                        apply(&dir, &hold, Some(&hold_key));
                    }
                    Ok::<_, ToolError>(())
                })
                .await?;
                let mark_key = format!("{key}-mark");
                ctx.step("mark", || async {
                    apply(&dir, &format!("mark {order} reserved"), Some(&mark_key));
                    Ok::<_, ToolError>(())
                })
                .await?;
                Ok::<_, ToolError>(json!({"hold": format!("hold-{order}")}))
            }
        })
        .build()
        .expect("reserve");
    let at = dir.to_owned();
    let capture = ToolDef::builder("capture", ToolClass::IdempotentWrite)
        .description("Capture a reserved amount, under the call's key.")
        .input_schema(json!({"type": "object", "properties": {"order": {"type": "string"}}}))
        .handler(move |ctx: ToolContext, args: Value| {
            let dir = at.clone();
            async move {
                let order = args["order"].as_str().unwrap_or_default();
                apply(
                    &dir,
                    &format!("capture {order}"),
                    Some(ctx.downstream_key().as_str()),
                );
                Ok::<_, ToolError>(json!("captured"))
            }
        })
        .build()
        .expect("capture");
    let at = dir.to_owned();
    let receipt = ToolDef::builder("send_receipt", ToolClass::NonIdempotentWrite)
        .description("Mail a receipt (the mail API takes no key).")
        .input_schema(json!({"type": "object", "properties": {"order": {"type": "string"}}}))
        .handler(move |_: ToolContext, args: Value| {
            let dir = at.clone();
            async move {
                apply(
                    &dir,
                    &format!("receipt {}", args["order"].as_str().unwrap_or_default()),
                    None,
                );
                Ok::<_, ToolError>(json!("sent"))
            }
        })
        .build()
        .expect("receipt");
    vec![reserve, capture, receipt]
}

/// The agent's run: reserve, capture, mail the receipt.
async fn payment(setup: Setup) {
    let mut registry = Registry::builder();
    for tool in tools(setup.dir()) {
        registry = registry.add(tool);
    }
    let registry = registry.build().expect("registry");
    let dispatcher =
        setup.instrument(Dispatcher::new(registry, setup.store()).expect("dispatcher"));
    let run = RunContext::new("shop").with_run("order-o-1", 0);
    for (i, tool) in ["reserve", "capture", "send_receipt"]
        .into_iter()
        .enumerate()
    {
        let call = ToolCall::new(tool, json!({"order": "o-1"})).with_call_id(format!("call_{i}"));
        // An answer, whatever it is: a resumed receipt may be answered Unknown.
        let _ = dispatcher.dispatch(&call, &run).await;
    }
}

fn main() {
    let report = CrashTest::new(payment).effects(ledger).run();
    println!("{report}");
    if !report.held() {
        std::process::exit(1);
    }
}
