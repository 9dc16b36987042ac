//! Every provider's `tools` array for a few realistic tools, ready for a request body, and
//! what each export changed.
//!
//! ```text
//! cargo run --example schemas                # every provider, with its reports
//! cargo run --example schemas -- openai      # one provider's array only (pipe it to jq)
//! ```
//!
//! Providers: `openai`, `openai-responses`, `anthropic`, `anthropic-strict`, `gemini`,
//! `gemini-openapi`, `mcp`.

use std::collections::BTreeMap;
use std::process::ExitCode;

use idem::export::Provider;
use idem::prelude::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// How urgent a ticket is.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Priority {
    /// Can wait for the next business day.
    Normal,
    /// A customer is blocked.
    Urgent,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Unit {
    Celsius,
    Fahrenheit,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Ticket {
    id: u64,
    subject: String,
}

/// Current weather for a city.
#[tool(class = "read", open_world)]
fn get_weather(
    /// City name, e.g. "Lyon".
    city: String,
    /// Temperature unit; Celsius when left out.
    unit: Option<Unit>,
) -> Result<Value, ToolError> {
    Ok(json!({"city": city, "unit": unit, "temperature": 21}))
}

/// Open a support ticket for a customer.
#[tool(class = "idempotent_write")]
fn create_ticket(
    /// Customer identifier.
    customer_id: u64,
    /// One-line summary of the problem.
    subject: String,
    #[serde(default)] priority: Option<Priority>,
    /// Free-form labels, e.g. {"team": "billing"}.
    #[serde(default)]
    labels: BTreeMap<String, String>,
) -> Result<Ticket, ToolError> {
    let _ = (customer_id, priority, labels);
    Ok(Ticket { id: 1, subject })
}

/// Send an email to a customer.
#[tool(class = "non_idempotent_write", open_world)]
fn send_email(
    /// Recipient address.
    #[schemars(email)]
    to: String,
    subject: String,
    body: String,
) -> Result<String, ToolError> {
    let _ = (subject, body);
    Ok(format!("queued for {to}"))
}

/// Close a customer's account for good.
#[tool(class = "irreversible")]
fn close_account(
    /// Customer identifier.
    customer_id: u64,
) -> Result<bool, ToolError> {
    let _ = customer_id;
    Ok(true)
}

fn main() -> ExitCode {
    let registry = match Registry::linked() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let only = match std::env::args().nth(1).map(|a| a.parse::<Provider>()) {
        None => None,
        Some(Ok(p)) => Some(p),
        Some(Err(e)) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(provider) = only {
        // Just the array on stdout, the reports on stderr.
        let all = registry.export_all(provider);
        for r in &all.reports {
            eprintln!("{r}");
        }
        for e in &all.refused {
            eprintln!("refused: {e}");
        }
        println!("{}", pretty(&all.tools));
        return ExitCode::SUCCESS;
    }
    for provider in Provider::ALL {
        let all = registry.export_all(provider);
        println!("==== {provider} ====");
        println!("{}", pretty(&all.tools));
        for r in &all.reports {
            println!("{r}");
        }
        for e in &all.refused {
            println!("refused: {e}");
        }
        println!();
    }
    ExitCode::SUCCESS
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|e| format!("unprintable: {e}"))
}
