//! Dispatch metrics through the [`metrics`](::metrics) facade (feature `metrics`): an
//! [`Observer`], so nothing in the stages knows of it.
//!
//! The facade rather than OpenTelemetry's metrics API: a library records through it and the
//! application picks the exporter (Prometheus, OpenTelemetry, StatsD, ... as
//! `metrics-exporter-*` crates) by installing a recorder, so idem forces no SDK, runtime or
//! exporter on anyone; with no recorder installed every call is a no-op.

use super::error::DispatchError;
use super::observe::{DispatchEvent, EventKind, Observer, Stage};

/// The `tool` label of a call to a tool the registry does not have. Not the name as called:
/// that comes from a model and would let it create any number of series; no tool name can
/// be spelled with parentheses, so this one is never a real tool's.
const UNKNOWN_TOOL: &str = "(unknown)";

/// Counts and times every dispatch through the [`metrics`](::metrics) facade, into whatever
/// recorder the application installed (feature `metrics`).
///
/// | metric | kind | labels | counts |
/// |---|---|---|---|
/// | `idem_dispatches_total` | counter | `tool`, `class`, `outcome` | every dispatch, by how it ended: `executed`, `replayed`, or the error's [`code`](DispatchError::code) (`tool_failed`, `outcome_unknown`, `approval_required`, ...) |
/// | `idem_replays_total` | counter | `tool` | dispatches answered from the record, nothing run (a recorded failure replayed included) |
/// | `idem_unknown_total` | counter | `tool` | records this process made Unknown ([`EventKind::LeftUnknown`]) |
/// | `idem_verified_total` | counter | `tool`, `applied` | Unknown records a verify hook settled, `applied` `true` or `false` |
/// | `idem_fenced_total` | counter | `tool` | outcomes refused because this worker had lost the key |
/// | `idem_approvals_requested_total` | counter | `tool` | calls recorded as waiting for an approval ([`EventKind::ApprovalRequested`]: a re-send of a call already waiting is not counted again; it is an `approval_required` dispatch) |
/// | `idem_claim_duration_seconds` | histogram | `tool` | the claim stage ([`Stage::Claim`]) |
/// | `idem_execution_duration_seconds` | histogram | `tool` | each execution of a body |
/// | `idem_record_duration_seconds` | histogram | `tool` | each write of an outcome |
///
/// `class` is the tool's class (`read`, `idempotent_write`, ...). A call to a tool the
/// registry does not have is labelled `tool="(unknown)"`, `class="(unknown)"`: the name a
/// model made up is not a label, so a model cannot create series. No label holds a key or an
/// argument. Unknown records made by a worker that crashed are not counted by
/// `idem_unknown_total` (no live process made them); the dispatches that find them are
/// counted with `outcome="outcome_unknown"`.
///
/// ```
/// use std::sync::Arc;
/// use idem::dispatch::MetricsObserver;
///
/// // Install a recorder first (metrics-exporter-prometheus, say), then:
/// MetricsObserver::describe();
/// let registry = idem::Registry::builder().build().unwrap();
/// let dispatcher = idem::Dispatcher::new(registry, Arc::new(idem::MemoryStore::new()))
///     .unwrap()
///     .with_observer(Arc::new(MetricsObserver));
/// # let _ = dispatcher;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct MetricsObserver;

impl MetricsObserver {
    /// Describe every metric (help text and unit) to the recorder installed now, for
    /// exporters that show them (Prometheus' `# HELP`). Optional; call it once, after
    /// installing the recorder.
    pub fn describe() {
        use ::metrics::{Unit, describe_counter, describe_histogram};
        describe_counter!(
            "idem_dispatches_total",
            Unit::Count,
            "Tool call dispatches, by tool, class and how each ended."
        );
        describe_counter!(
            "idem_replays_total",
            Unit::Count,
            "Dispatches answered from a recorded outcome without running the tool."
        );
        describe_counter!(
            "idem_unknown_total",
            Unit::Count,
            "Records this process made Unknown: the effect may have happened."
        );
        describe_counter!(
            "idem_verified_total",
            Unit::Count,
            "Unknown records settled by a verify hook, by whether the effect had happened."
        );
        describe_counter!(
            "idem_fenced_total",
            Unit::Count,
            "Outcomes refused because this worker had lost the key."
        );
        describe_counter!(
            "idem_approvals_requested_total",
            Unit::Count,
            "Calls recorded as waiting for a person's approval (re-sends not counted)."
        );
        describe_histogram!(
            "idem_claim_duration_seconds",
            Unit::Seconds,
            "Time to claim a call's key or settle it without running (waits and verify hooks included)."
        );
        describe_histogram!(
            "idem_execution_duration_seconds",
            Unit::Seconds,
            "Time of one execution of a tool's body."
        );
        describe_histogram!(
            "idem_record_duration_seconds",
            Unit::Seconds,
            "Time to record a call's outcome in the store."
        );
    }
}

impl Observer for MetricsObserver {
    fn event(&self, event: &DispatchEvent<'_>) {
        let Some(class) = event.class else {
            // Only the end of a call to a tool the registry does not have.
            let outcome = event.error.map_or("refused", DispatchError::code);
            ::metrics::counter!(
                "idem_dispatches_total",
                "tool" => UNKNOWN_TOOL,
                "class" => UNKNOWN_TOOL,
                "outcome" => outcome,
            )
            .increment(1);
            return;
        };
        let tool = event.tool.to_owned();
        let outcome = match event.kind {
            EventKind::Stage { stage, took } => {
                let name = match stage {
                    Stage::Claim => "idem_claim_duration_seconds",
                    Stage::Execute => "idem_execution_duration_seconds",
                    Stage::Record => "idem_record_duration_seconds",
                };
                ::metrics::histogram!(name, "tool" => tool).record(took);
                return;
            }
            EventKind::LeftUnknown => {
                ::metrics::counter!("idem_unknown_total", "tool" => tool).increment(1);
                return;
            }
            EventKind::Verified { applied } => {
                let applied = if applied { "true" } else { "false" };
                ::metrics::counter!("idem_verified_total", "tool" => tool, "applied" => applied)
                    .increment(1);
                return;
            }
            EventKind::ApprovalRequested => {
                ::metrics::counter!("idem_approvals_requested_total", "tool" => tool).increment(1);
                return;
            }
            EventKind::Claimed { .. } | EventKind::Retried { .. } => return,
            EventKind::Executed { .. } => "executed",
            EventKind::Replayed => {
                ::metrics::counter!("idem_replays_total", "tool" => tool.clone()).increment(1);
                "replayed"
            }
            EventKind::Failed { .. }
            | EventKind::Unknown
            | EventKind::Fenced
            | EventKind::Refused { .. } => {
                let Some(error) = event.error else { return };
                match error {
                    DispatchError::ToolFailed {
                        deduplicated: true, ..
                    } => {
                        ::metrics::counter!("idem_replays_total", "tool" => tool.clone())
                            .increment(1);
                    }
                    DispatchError::Fenced { .. } => {
                        ::metrics::counter!("idem_fenced_total", "tool" => tool.clone())
                            .increment(1);
                    }
                    _ => {}
                }
                error.code()
            }
        };
        ::metrics::counter!(
            "idem_dispatches_total",
            "tool" => tool,
            "class" => class.as_str(),
            "outcome" => outcome,
        )
        .increment(1);
    }
}
