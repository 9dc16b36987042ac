//! The dispatch spans as OpenTelemetry sees them: tracing-opentelemetry over the SDK's
//! in-memory exporter, installed for the test's thread only. Each dispatch is one
//! `execute_tool {tool}` span of the GenAI conventions, with idem's attributes and a child
//! span per stage; nothing in them is an argument's value or the record key.

mod support;

use std::sync::Arc;

use idem::ToolDef;
use idem::prelude::*;
use opentelemetry::trace::{SpanKind, Status, TracerProvider as _};
use opentelemetry::{KeyValue, Value as Attribute};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::{Value, json};
use tracing_subscriber::layer::SubscriberExt;

const ADDRESS: &str = "ada@example.com";

/// Spans exported in memory while the guard lives (this thread only).
struct Exported {
    exporter: InMemorySpanExporter,
    _provider: SdkTracerProvider,
    _guard: tracing::subscriber::DefaultGuard,
}

impl Exported {
    fn start() -> Self {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("idem-tests"));
        let guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));
        Exported {
            exporter,
            _provider: provider,
            _guard: guard,
        }
    }

    /// The spans finished so far, forgetting them.
    fn take(&self) -> Vec<SpanData> {
        let spans = self.exporter.get_finished_spans().unwrap();
        self.exporter.reset();
        spans
    }
}

/// A `send_email` that sends (inside a span of its own, as a client library would open).
fn dispatcher() -> Dispatcher {
    let send = ToolDef::builder("send_email", ToolClass::NonIdempotentWrite)
        .description("Send an email.")
        .input_schema(json!({"type": "object"}))
        .handler(|_ctx: ToolContext, _args: Value| async {
            let _smtp = tracing::info_span!("smtp.send").entered();
            Ok::<_, ToolError>(json!({"sent": true}))
        })
        .build()
        .unwrap();
    support::dispatcher::with_tool(send, Arc::new(MemoryStore::new()))
}

fn email() -> ToolCall {
    ToolCall::new("send_email", json!({"to": ADDRESS, "body": "Hello"}))
}

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Attribute> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

/// The one dispatch span, and the others in the order they ended.
fn dispatch_span(spans: &[SpanData]) -> (&SpanData, Vec<&SpanData>) {
    let (dispatch, others): (Vec<_>, Vec<_>) = spans
        .iter()
        .partition(|s| s.name.starts_with("execute_tool"));
    assert_eq!(dispatch.len(), 1, "{spans:#?}");
    (dispatch[0], others)
}

/// The attributes every dispatch span of `send_email` carries, by the GenAI conventions.
fn assert_gen_ai(span: &SpanData, call_id: Option<&str>) {
    assert_eq!(span.name, "execute_tool send_email");
    assert_eq!(span.span_kind, SpanKind::Internal);
    let text = |s: &str| Some(Attribute::from(s.to_owned()));
    assert_eq!(
        attribute(span, "gen_ai.operation.name").cloned(),
        text("execute_tool")
    );
    assert_eq!(
        attribute(span, "gen_ai.tool.name").cloned(),
        text("send_email")
    );
    assert_eq!(
        attribute(span, "gen_ai.tool.type").cloned(),
        text("function")
    );
    assert_eq!(
        attribute(span, "gen_ai.tool.call.id").cloned(),
        call_id.and_then(text)
    );
    // The reserved fields steer the exporter; they are not attributes.
    assert!(
        span.attributes
            .iter()
            .all(|kv| !kv.key.as_str().starts_with("otel.")),
        "{:?}",
        span.attributes
    );
}

/// No attribute of any span or of its events (the log lines) holds an argument's value or
/// the record key.
fn assert_nothing_secret(spans: &[SpanData], record_key: Option<&str>) {
    for span in spans {
        let events = span.events.iter().flat_map(|e| &e.attributes);
        for KeyValue { key, value, .. } in span.attributes.iter().chain(events) {
            let value = value.as_str();
            assert!(!value.contains(ADDRESS), "{}: {key} = {value}", span.name);
            if let Some(record_key) = record_key {
                assert!(
                    !value.contains(record_key),
                    "{}: {key} = {value}",
                    span.name
                );
            }
        }
    }
}

#[tokio::test]
async fn an_execution_is_an_execute_tool_span_with_a_child_per_stage() {
    let spans = Exported::start();
    let d = dispatcher();
    let call = email().with_call_id("call_1");
    let run = RunContext::new("tenant-a");
    d.dispatch(&call, &run).await.unwrap();
    let record_key = d.record_key(&call, &run).unwrap().unwrap();

    let all = spans.take();
    let (dispatch, children) = dispatch_span(&all);
    assert_gen_ai(dispatch, Some("call_1"));
    let has = |key: &str, value: Attribute| {
        assert_eq!(attribute(dispatch, key), Some(&value), "{key}");
    };
    has("idem.class", "non_idempotent_write".into());
    has("idem.outcome", "executed".into());
    has("idem.deduplicated", false.into());
    has("idem.attempts", 1_i64.into());
    has("idem.key_hash", record_key.as_str()[..16].to_owned().into());
    assert_eq!(attribute(dispatch, "error.type"), None);
    assert_eq!(dispatch.status, Status::Unset);

    // The stages, in order, each a child of the dispatch in its trace; the body's own span is
    // a child of the execution.
    let names: Vec<_> = children.iter().map(|s| s.name.as_ref()).collect();
    assert_eq!(
        names,
        ["idem.claim", "smtp.send", "idem.execute", "idem.record"]
    );
    let trace = dispatch.span_context.trace_id();
    let id = dispatch.span_context.span_id();
    for child in &children {
        assert_eq!(child.span_context.trace_id(), trace, "{}", child.name);
    }
    let named = |name: &str| children.iter().find(|s| s.name == name).unwrap();
    for stage in ["idem.claim", "idem.execute", "idem.record"] {
        assert_eq!(named(stage).parent_span_id, id, "{stage}");
    }
    assert_eq!(
        named("smtp.send").parent_span_id,
        named("idem.execute").span_context.span_id()
    );
    assert_eq!(
        attribute(named("idem.execute"), "idem.attempt"),
        Some(&1_i64.into())
    );
    assert_nothing_secret(&all, Some(record_key.as_str()));
}

#[tokio::test]
async fn a_replay_is_deduplicated_and_has_only_a_claim() {
    let spans = Exported::start();
    let d = dispatcher();
    let call = email().with_call_id("call_1");
    let run = RunContext::new("tenant-a");
    d.dispatch(&call, &run).await.unwrap();
    spans.take();
    assert!(d.dispatch(&call, &run).await.unwrap().deduplicated);

    let all = spans.take();
    let (dispatch, children) = dispatch_span(&all);
    assert_gen_ai(dispatch, Some("call_1"));
    assert_eq!(attribute(dispatch, "idem.deduplicated"), Some(&true.into()));
    assert_eq!(
        attribute(dispatch, "idem.outcome"),
        Some(&"replayed".into())
    );
    assert_eq!(attribute(dispatch, "idem.attempts"), Some(&0_i64.into()));
    assert_eq!(dispatch.status, Status::Unset);
    let names: Vec<_> = children.iter().map(|s| s.name.as_ref()).collect();
    assert_eq!(names, ["idem.claim"], "nothing ran, nothing was recorded");
    assert_eq!(children[0].parent_span_id, dispatch.span_context.span_id());
    let record_key = d.record_key(&call, &run).unwrap().unwrap();
    assert_nothing_secret(&all, Some(record_key.as_str()));
}

#[tokio::test]
async fn a_refusal_is_an_error_span_with_its_error_type() {
    let spans = Exported::start();
    let d = dispatcher();
    // No call id, no run: a write without key material is refused before anything else.
    let err = d
        .dispatch(&email(), &RunContext::new("tenant-a"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "missing_key");

    let all = spans.take();
    let (dispatch, children) = dispatch_span(&all);
    assert_gen_ai(dispatch, None);
    assert_eq!(
        attribute(dispatch, "error.type"),
        Some(&"missing_key".into())
    );
    assert_eq!(
        attribute(dispatch, "idem.outcome"),
        Some(&"missing_key".into())
    );
    assert_eq!(
        attribute(dispatch, "idem.class"),
        Some(&"non_idempotent_write".into())
    );
    assert_eq!(attribute(dispatch, "idem.key_hash"), None, "no key exists");
    assert!(
        matches!(dispatch.status, Status::Error { .. }),
        "{:?}",
        dispatch.status
    );
    assert!(
        children.is_empty(),
        "refused before the claim: {children:#?}"
    );
    assert_nothing_secret(&all, None);
}
