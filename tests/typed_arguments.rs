//! A `#[tool]`'s arguments are deserialised once per execution: the value the dispatcher
//! read to check and normalise them is the one the body gets, unless they had to be
//! normalised (defaults applied), and a retry reads them again from the normal JSON.

mod support;

use std::sync::Arc;

use idem::prelude::*;
use idem::{record::StateKind, store::ListFilter};
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::json;
use support::dispatcher::linked;
use support::tally::Tally;

/// Each deserialisation of a label.
static READS: Tally = Tally::new();
/// Each run of a label's body.
static RUNS: Tally = Tally::new();

fn reads(label: &str) -> usize {
    READS.count(label)
}

/// A label that counts its deserialisations.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(transparent)]
struct Label(String);

impl<'de> Deserialize<'de> for Label {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let label = String::deserialize(d)?;
        READS.note(&label, "");
        Ok(Label(label))
    }
}

/// Fails `fail_first` times with a retryable error, then echoes what it was given.
#[tool(class = "idempotent_write", backoff_ms = 1)]
async fn counted_write(
    label: Label,
    #[serde(default)] fail_first: u32,
    #[serde(default = "default_note")] note: String,
) -> Result<serde_json::Value, ToolError> {
    let run = RUNS.note(&label.0, "");
    if run <= fail_first as usize {
        return Err(ToolError::retryable("not yet"));
    }
    Ok(json!({ "label": label.0, "note": note, "run": run }))
}

fn default_note() -> String {
    "none".into()
}

/// Echoes its label.
#[tool(class = "read")]
fn counted_read(label: Label) -> Result<String, ToolError> {
    Ok(label.0)
}

fn run() -> RunContext {
    RunContext::new("tenant-typed")
}

#[tokio::test]
async fn a_first_execution_reads_its_arguments_once_and_a_replay_once() {
    let d = linked(Arc::new(MemoryStore::new()));
    let args = json!({ "label": "typed-once", "fail_first": 0, "note": "hi" });
    let call = ToolCall::new("counted_write", args).with_call_id("call-typed-once");
    let first = d.dispatch(&call, &run()).await.unwrap();
    assert!(!first.deduplicated);
    assert_eq!(first.output["note"], "hi");
    assert_eq!(reads("typed-once"), 1, "checked and run from one read");
    let again = d.dispatch(&call, &run()).await.unwrap();
    assert!(again.deduplicated);
    assert_eq!(again.output, first.output);
    assert_eq!(
        reads("typed-once"),
        2,
        "a replay reads them to check them only"
    );
}

#[tokio::test]
async fn a_read_tool_runs_from_the_value_it_checked() {
    let d = linked(Arc::new(MemoryStore::new()));
    let call = ToolCall::new("counted_read", json!({ "label": "typed-read" }));
    let out = d.dispatch(&call, &run()).await.unwrap();
    assert_eq!(out.output, json!("typed-read"));
    assert_eq!(reads("typed-read"), 1);
}

#[tokio::test]
async fn a_retry_reads_the_arguments_again() {
    let d = linked(Arc::new(MemoryStore::new()));
    let args = json!({ "label": "typed-retry", "fail_first": 2, "note": "again" });
    let call = ToolCall::new("counted_write", args).with_call_id("call-typed-retry");
    let out = d.dispatch(&call, &run()).await.unwrap();
    assert_eq!(out.attempts, 3);
    assert_eq!(
        out.output,
        json!({ "label": "typed-retry", "note": "again", "run": 3 }),
        "every attempt had the arguments"
    );
    assert_eq!(
        reads("typed-retry"),
        3,
        "the first attempt's value, then one read per retry"
    );
}

#[tokio::test]
async fn arguments_that_needed_defaults_reach_the_body_normalised() {
    let d = linked(Arc::new(MemoryStore::new()));
    let call = ToolCall::new("counted_write", json!({ "label": "typed-defaults" }))
        .with_call_id("call-typed-defaults");
    let out = d.dispatch(&call, &run()).await.unwrap();
    assert_eq!(out.output["note"], "none");
    // Read once to normalise, and once more from the normal JSON, as every attempt after a
    // takeover would read it.
    assert_eq!(reads("typed-defaults"), 2);
    let same = ToolCall::new(
        "counted_write",
        json!({ "label": "typed-defaults", "fail_first": 0, "note": "none" }),
    )
    .with_call_id("call-typed-defaults");
    assert!(
        d.dispatch(&same, &run()).await.unwrap().deduplicated,
        "the defaults spelled out are the same call"
    );
}

/// Parameters that serialise as their types do: the normal form is written from the fields.
#[tool(class = "idempotent_write")]
fn plain_fields(
    n: f64,
    note: Option<String>,
    tags: Vec<String>,
    #[serde(default)] count: u8,
    r#type: String,
) -> Result<(), ToolError> {
    let _ = (n, note, tags, count, r#type);
    Ok(())
}

/// The same parameters, one renamed to its own name: the normal form is the arguments
/// struct's derived `Serialize`.
#[tool(class = "idempotent_write")]
fn derived_fields(
    #[serde(rename = "n")] n: f64,
    note: Option<String>,
    tags: Vec<String>,
    #[serde(default)] count: u8,
    r#type: String,
) -> Result<(), ToolError> {
    let _ = (n, note, tags, count, r#type);
    Ok(())
}

#[tokio::test]
async fn both_ways_of_normalising_give_every_call_the_same_record() {
    // Record keys are computed from the normal form, so a tool's keys must not depend on
    // which way its expansion normalises: the same arguments, each shape below, must be
    // recorded with the same canonical arguments and fingerprint by both tools.
    let store = Arc::new(MemoryStore::new());
    let d = linked(store.clone());
    let shapes = [
        json!({ "n": 1.5, "note": "x", "tags": ["a"], "count": 2, "type": "t" }),
        json!({ "type": "t", "count": 2, "tags": ["a"], "note": "x", "n": 1.5 }),
        json!({ "n": 1, "tags": [], "type": "" }),
        json!({ "n": -0.0, "note": null, "tags": ["é", "\u{1F600}"], "count": 255, "type": "t" }),
    ];
    let run = RunContext::new("tenant-normal-forms");
    for (i, args) in shapes.iter().enumerate() {
        for tool in ["plain_fields", "derived_fields"] {
            let call = ToolCall::new(tool, args.clone()).with_call_id(format!("shape-{i}"));
            d.dispatch(&call, &run).await.unwrap();
        }
    }
    let records = store
        .list(ListFilter {
            state: Some(StateKind::Completed),
            tenant: Some("tenant-normal-forms".into()),
            ..ListFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(records.len(), 2 * shapes.len());
    let of = |tool: &str| {
        let mut mine: Vec<_> = records
            .iter()
            .filter(|r| r.tool == tool)
            .map(|r| (r.fingerprint, r.arguments.clone().expect("arguments kept")))
            .collect();
        mine.sort_by(|a, b| a.1.cmp(&b.1));
        mine
    };
    let (plain, derived) = (of("plain_fields"), of("derived_fields"));
    assert_eq!(plain, derived);
    // The first two shapes differ only in the order of their entries, which is not part of
    // a call: one fingerprint.
    assert_eq!(plain.len(), shapes.len());
    let distinct: std::collections::HashSet<_> = plain.iter().map(|(f, _)| *f).collect();
    assert_eq!(distinct.len(), 3, "{plain:?}");
    assert!(
        plain
            .iter()
            .any(|(_, a)| a.contains(r#""count":0"#) && a.contains(r#""note":null"#)),
        "the defaults are part of the normal form: {plain:?}"
    );
}
