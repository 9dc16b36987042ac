//! The dispatch metrics (feature `metrics`): `MetricsObserver` counts and times dispatches
//! through the `metrics` facade, read here by metrics-util's `DebuggingRecorder`, installed
//! for the test's thread only so that tests running side by side never share counts.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use idem::dispatch::MetricsObserver;
use idem::prelude::*;
use idem::{ToolDef, ToolPolicy, Verified, store::ManualClock};
use metrics::Unit;
use metrics_util::MetricKind;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use serde_json::{Value, json};

/// Every metric of a snapshot, named `name{label=value,...}` with the labels sorted.
struct Seen {
    counters: BTreeMap<String, u64>,
    histograms: BTreeMap<String, usize>,
    units: BTreeMap<String, Unit>,
}

fn seen(snapshotter: &Snapshotter) -> Seen {
    let mut seen = Seen {
        counters: BTreeMap::new(),
        histograms: BTreeMap::new(),
        units: BTreeMap::new(),
    };
    for (key, unit, _, value) in snapshotter.snapshot().into_vec() {
        let (kind, key) = key.into_parts();
        let mut labels: Vec<_> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        if let Some(unit) = unit {
            seen.units.insert(key.name().to_owned(), unit);
        }
        match (kind, value) {
            (MetricKind::Counter, DebugValue::Counter(n)) => {
                seen.counters.insert(name, n);
            }
            (MetricKind::Histogram, DebugValue::Histogram(values)) => {
                assert!(values.iter().all(|v| v.0 >= 0.0), "{name}: {values:?}");
                seen.histograms.insert(name, values.len());
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    seen
}

fn tool(name: &'static str, class: ToolClass) -> idem::tool::ToolBuilder {
    ToolDef::builder(name, class)
        .description("A tool of the metrics test.")
        .input_schema(json!({"type": "object"}))
}

/// The tools of the test, on a store whose clock the test moves:
/// - `send` succeeds;
/// - `charge` times out after charging the first time, and its verify hook finds the charge;
/// - `jumper`'s first attempt outlives its lease (the clock jumps) and fails ambiguously, so
///   its retry finds the key lost;
/// - `wire` is irreversible and needs an approval;
/// - `deep` sends, then answers an output nested too deep to record.
fn dispatcher(clock: Arc<ManualClock>) -> Dispatcher {
    let charges = Arc::new(AtomicU32::new(0));
    let send = tool("send", ToolClass::NonIdempotentWrite)
        .handler(|_ctx: ToolContext, _args: Value| async { Ok::<_, ToolError>(json!("sent")) });
    let charge = tool("charge", ToolClass::NonIdempotentWrite)
        .handler(move |_ctx: ToolContext, _args: Value| {
            let charges = charges.clone();
            async move {
                charges.fetch_add(1, Ordering::SeqCst);
                Err::<Value, _>(ToolError::ambiguous("timed out after charging"))
            }
        })
        .verify(|_ctx: ToolContext, _args: Value| async {
            Ok(Verified::Applied(json!("charged")))
        });
    let jumped = clock.clone();
    let jumper = tool("jumper", ToolClass::IdempotentWrite)
        .policy(ToolPolicy {
            lease: Duration::from_secs(1),
            backoff: Duration::from_millis(1),
            ..ToolPolicy::default()
        })
        .handler(move |ctx: ToolContext, _args: Value| {
            let jumped = jumped.clone();
            async move {
                if ctx.attempt() == 1 {
                    jumped.advance(Duration::from_secs(10));
                    return Err(ToolError::ambiguous("timed out"));
                }
                Ok(json!("done"))
            }
        });
    let wire = tool("wire", ToolClass::Irreversible)
        .handler(|_ctx: ToolContext, _args: Value| async { Ok::<_, ToolError>(json!("wired")) });
    let deep = tool("deep", ToolClass::NonIdempotentWrite).handler(
        |_ctx: ToolContext, _args: Value| async {
            let mut output = json!(0);
            for _ in 0..=idem::store::MAX_OUTCOME_DEPTH {
                output = json!([output]);
            }
            Ok::<_, ToolError>(output)
        },
    );
    let mut registry = Registry::builder();
    for t in [send, charge, jumper, wire, deep] {
        registry = registry.add(t.build().unwrap());
    }
    let store = MemoryStore::new().with_clock(clock);
    support::dispatcher::dispatcher(registry.build().unwrap(), Arc::new(store))
        .with_observer(Arc::new(MetricsObserver))
}

#[tokio::test]
async fn dispatches_replays_unknowns_verifications_fences_and_approvals_are_counted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    MetricsObserver::describe();
    let clock = Arc::new(ManualClock::new());
    let d = dispatcher(clock.clone());
    let run = RunContext::new("tenant-a");
    let call = |name: &str, id: &str| ToolCall::new(name, json!({})).with_call_id(id);

    // Executed, then replayed.
    d.dispatch(&call("send", "s1"), &run).await.unwrap();
    assert!(
        d.dispatch(&call("send", "s1"), &run)
            .await
            .unwrap()
            .deduplicated
    );
    // Left Unknown; past the settle delay, verified as applied and replayed.
    let charge = call("charge", "c1");
    let unknown = d.dispatch(&charge, &run).await.unwrap_err();
    assert!(
        matches!(unknown, DispatchError::OutcomeUnknown { .. }),
        "{unknown:?}"
    );
    clock.advance(ToolPolicy::default().verify_after + Duration::from_secs(1));
    assert!(d.dispatch(&charge, &run).await.unwrap().deduplicated);
    // The retry after the lease ran out is fenced.
    let fenced = d.dispatch(&call("jumper", "j1"), &run).await.unwrap_err();
    assert!(matches!(fenced, DispatchError::Fenced { .. }), "{fenced:?}");
    // Held for approval.
    let held = d.dispatch(&call("wire", "w1"), &run).await.unwrap_err();
    assert!(
        matches!(held, DispatchError::ApprovalRequired { .. }),
        "{held:?}"
    );
    // The agent re-sends it: held again, still one request for an approver.
    let again = d.dispatch(&call("wire", "w1"), &run).await.unwrap_err();
    assert_eq!(again.code(), "approval_required", "{again:?}");
    // The effect happened and its outcome could not be recorded: Unknown.
    let unrecorded = d.dispatch(&call("deep", "d1"), &run).await.unwrap_err();
    assert_eq!(unrecorded.code(), "store_error", "{unrecorded:?}");
    // A tool the model made up: its name is not a label.
    d.dispatch(&call("made_up_tool", "m1"), &run)
        .await
        .unwrap_err();

    let seen = seen(&snapshotter);
    let expected: BTreeMap<String, u64> = [
        (
            "idem_dispatches_total{class=non_idempotent_write,outcome=executed,tool=send}",
            1,
        ),
        (
            "idem_dispatches_total{class=non_idempotent_write,outcome=replayed,tool=send}",
            1,
        ),
        (
            "idem_dispatches_total{class=non_idempotent_write,outcome=outcome_unknown,tool=charge}",
            1,
        ),
        (
            "idem_dispatches_total{class=non_idempotent_write,outcome=replayed,tool=charge}",
            1,
        ),
        (
            "idem_dispatches_total{class=idempotent_write,outcome=fenced,tool=jumper}",
            1,
        ),
        (
            "idem_dispatches_total{class=irreversible,outcome=approval_required,tool=wire}",
            2,
        ),
        (
            "idem_dispatches_total{class=non_idempotent_write,outcome=store_error,tool=deep}",
            1,
        ),
        (
            "idem_dispatches_total{class=(unknown),outcome=unknown_tool,tool=(unknown)}",
            1,
        ),
        ("idem_replays_total{tool=send}", 1),
        ("idem_replays_total{tool=charge}", 1),
        ("idem_unknown_total{tool=charge}", 1),
        ("idem_unknown_total{tool=deep}", 1),
        ("idem_verified_total{applied=true,tool=charge}", 1),
        ("idem_fenced_total{tool=jumper}", 1),
        ("idem_approvals_requested_total{tool=wire}", 1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(seen.counters, expected);

    // How many times each stage was timed: every claim, every execution, every record.
    let send = |metric: &str| {
        seen.histograms
            .get(&format!("{metric}{{tool=send}}"))
            .copied()
    };
    assert_eq!(send("idem_claim_duration_seconds"), Some(2));
    assert_eq!(send("idem_execution_duration_seconds"), Some(1));
    assert_eq!(send("idem_record_duration_seconds"), Some(1));
    let jumper = |metric: &str| {
        seen.histograms
            .get(&format!("{metric}{{tool=jumper}}"))
            .copied()
    };
    assert_eq!(jumper("idem_execution_duration_seconds"), Some(1));
    assert_eq!(
        jumper("idem_record_duration_seconds"),
        None,
        "nothing was recorded"
    );
    assert_eq!(
        seen.histograms
            .get("idem_record_duration_seconds{tool=deep}"),
        Some(&1)
    );
    assert_eq!(
        seen.histograms
            .get("idem_claim_duration_seconds{tool=wire}"),
        None,
        "a call held for approval is refused before the claim"
    );
    assert_eq!(
        seen.units.get("idem_claim_duration_seconds"),
        Some(&Unit::Seconds)
    );
    assert_eq!(seen.units.get("idem_dispatches_total"), Some(&Unit::Count));
}

#[tokio::test]
async fn a_dispatcher_without_the_observer_records_nothing() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let store = Arc::new(MemoryStore::new());
    let send = tool("send", ToolClass::NonIdempotentWrite)
        .handler(|_ctx: ToolContext, _args: Value| async { Ok::<_, ToolError>(json!("sent")) })
        .build()
        .unwrap();
    let d = support::dispatcher::with_tool(send, store);
    let call = ToolCall::new("send", json!({})).with_call_id("s1");
    d.dispatch(&call, &RunContext::new("t")).await.unwrap();
    assert!(snapshotter.snapshot().into_vec().is_empty());
}
