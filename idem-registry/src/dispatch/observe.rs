//! Seam: observers of dispatch events (ARCHITECTURE.md, "Seams").
//!
//! A dispatch tells its observers what happened to a call: claimed, executed, replayed,
//! retried, left unknown, unknown, fenced, verified, failed, refused, and how long each of
//! its claim, execute and record stages took. Each event names the tool and its class, a
//! short hash of the record key (never an argument value) and the time since the dispatch
//! began. Metrics, audit logs and OpenTelemetry attach here; the order of checks does not
//! change and an observer cannot change an outcome.
//!
//! Every dispatch is a `tracing` span named for the OpenTelemetry GenAI conventions of a
//! tool's execution: `execute_tool`, whose `otel.name` is `execute_tool {tool}` (the name
//! `tracing-opentelemetry` exports), with `gen_ai.operation.name`, `gen_ai.tool.name`,
//! `gen_ai.tool.call.id` (the provider's call id, when the call has one) and
//! `gen_ai.tool.type` set as it opens. Its stages are child spans: `idem.claim` (with
//! `idem.verify` inside it when a verify hook is asked), `idem.execute` (one per attempt)
//! and `idem.record`. The default observer, [`TracingObserver`], fills in the rest as the
//! call ends: `idem.class`, `idem.outcome`, `idem.attempts`, `idem.deduplicated`,
//! `idem.key_hash` (the record key's first 16 hex digits, never the key material or an
//! argument), and on an error `error.type` (its [`DispatchError::code`]) and
//! `otel.status_code = "error"`; and it logs one line.
//! [`Dispatcher::with_observer`](super::Dispatcher::with_observer) adds an observer beside
//! it; [`Dispatcher::without_tracing`](super::Dispatcher::without_tracing) drops the default.
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use idem::dispatch::{DispatchEvent, EventKind, Observer};
//!
//! /// Counts executions per tool.
//! #[derive(Default)]
//! struct Executions(Mutex<Vec<String>>);
//!
//! impl Observer for Executions {
//!     fn event(&self, event: &DispatchEvent<'_>) {
//!         if let EventKind::Executed { .. } = event.kind {
//!             self.0.lock().unwrap().push(event.tool.to_owned());
//!         }
//!     }
//! }
//!
//! let registry = idem::Registry::builder().build().unwrap();
//! let dispatcher = idem::Dispatcher::new(registry, Arc::new(idem::MemoryStore::new()))
//!     .unwrap()
//!     .with_observer(Arc::new(Executions::default()));
//! # let _ = dispatcher;
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_core::{ErrorKind, RecordKey, ToolClass};

use super::call::{Dispatched, ToolCall};
use super::error::DispatchError;
use super::{KeyedCall, key_hash};
use crate::tool::ToolDef;

/// What happened to a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventKind {
    /// This dispatch now holds the key; `takeover` when it took over an orphan.
    Claimed {
        /// Whether an earlier holder's lease had expired.
        takeover: bool,
    },
    /// The body ran and its output was recorded (or, for a read, returned).
    Executed {
        /// Executions of the body in this dispatch.
        attempts: u32,
    },
    /// A recorded outcome was replayed; nothing ran.
    Replayed,
    /// An attempt failed and the body runs again under the same key.
    Retried {
        /// The attempt that failed.
        attempt: u32,
        /// How it failed.
        error: ErrorKind,
    },
    /// The call's outcome is Unknown (made so now, or found so); the dispatch ends with
    /// [`DispatchError::OutcomeUnknown`](super::DispatchError::OutcomeUnknown).
    Unknown,
    /// This dispatch made the record Unknown: the effect may have happened (the tool's
    /// ambiguous error, or an output the store would not take). Emitted once, where the
    /// record changed, before the dispatch ends (with `Unknown`, or a store error). A
    /// worker that crashed, or a dispatch dropped while its body ran, leaves its record to
    /// become Unknown without this event.
    LeftUnknown,
    /// This worker lost the key before it could record.
    Fenced,
    /// The call was recorded as waiting for a person's approval: the first time it was
    /// held, or again after its earlier request expired. A re-send of a call already
    /// waiting does not emit it (it still ends `Refused` with `approval_required`).
    ApprovalRequested,
    /// A verify hook settled an Unknown record.
    Verified {
        /// Whether the effect had happened.
        applied: bool,
    },
    /// The body ran and failed, or a recorded failure was replayed.
    Failed {
        /// Executions of the body in this dispatch (0 for a replay).
        attempts: u32,
    },
    /// The call was refused or could not be carried out; `code` is
    /// [`DispatchError::code`](super::DispatchError::code).
    Refused {
        /// The error's code.
        code: &'static str,
    },
    /// A stage of the dispatch ended (however it ended), after `took`. Timed and emitted
    /// only on a dispatcher with an observer added by
    /// [`Dispatcher::with_observer`](super::Dispatcher::with_observer): the default one has
    /// no use for it.
    Stage {
        /// Which stage.
        stage: Stage,
        /// How long it took.
        took: Duration,
    },
}

/// A timed stage of a dispatch (see [`EventKind::Stage`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Stage {
    /// From the first claim to holding the key or settling the call without running it:
    /// waiting for a live holder and asking a verify hook included.
    Claim,
    /// One execution of the body (each attempt is one).
    Execute,
    /// Writing the outcome to the store as the holder.
    Record,
}

impl Stage {
    /// A short, stable name: `claim`, `execute`, `record`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Stage::Claim => "claim",
            Stage::Execute => "execute",
            Stage::Record => "record",
        }
    }
}

impl EventKind {
    /// A short, stable name, for logs and metrics labels.
    pub fn as_str(&self) -> &'static str {
        match self {
            EventKind::Claimed { .. } => "claimed",
            EventKind::Executed { .. } => "executed",
            EventKind::Replayed => "replayed",
            EventKind::Retried { .. } => "retried",
            EventKind::Unknown => "unknown",
            EventKind::LeftUnknown => "left_unknown",
            EventKind::Fenced => "fenced",
            EventKind::ApprovalRequested => "approval_requested",
            EventKind::Verified { .. } => "verified",
            EventKind::Failed { .. } => "failed",
            EventKind::Refused { .. } => "refused",
            EventKind::Stage { .. } => "stage",
        }
    }
}

/// One event of one dispatch.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct DispatchEvent<'a> {
    /// What happened.
    pub kind: EventKind,
    /// The tool called (as called, for an unknown tool).
    pub tool: &'a str,
    /// Its class; `None` for an unknown tool.
    pub class: Option<ToolClass>,
    /// The first 16 hex digits of the record key; `None` before a key exists and for a read.
    pub key: Option<&'a str>,
    /// Time since the dispatch began.
    pub elapsed: Duration,
    /// The error a dispatch ends with (`Failed`, `Unknown`, `Fenced`, `Refused`); its text
    /// never holds a secret argument's value.
    pub error: Option<&'a DispatchError>,
}

/// Receives every dispatch's events. Called inline, on the dispatching task: keep it cheap
/// and never block (hand heavy work to a channel).
pub trait Observer: Send + Sync + 'static {
    /// One event.
    fn event(&self, event: &DispatchEvent<'_>);
}

/// The span of one dispatch (see the module docs); the observers' events that end it are
/// emitted inside it, where [`TracingObserver`] fills in its other fields.
pub(crate) fn dispatch_span(call: &ToolCall) -> tracing::Span {
    use tracing::field::Empty;
    let span = tracing::info_span!(
        "execute_tool",
        otel.name = Empty,
        otel.kind = "internal",
        otel.status_code = Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = call.name.as_str(),
        gen_ai.tool.call.id = call.call_id.as_deref(),
        gen_ai.tool.type = "function",
        error.type = Empty,
        idem.class = Empty,
        idem.outcome = Empty,
        idem.attempts = Empty,
        idem.deduplicated = Empty,
        idem.key_hash = Empty,
    );
    // A span's name is static; the convention's name holds the tool. Formatted only for a
    // span someone listens to, so that a dispatch nobody traces allocates nothing here.
    if !span.is_disabled() {
        span.record("otel.name", format!("execute_tool {}", call.name).as_str());
    }
    span
}

/// The default observer: the dispatch span's outcome fields (see the module docs) and one
/// log line per dispatch (`debug` when it succeeded, `info` when it was refused or failed;
/// a refusal of the arguments logs the pointer, never a value).
#[derive(Debug, Clone, Copy, Default)]
pub struct TracingObserver;

impl Observer for TracingObserver {
    fn event(&self, event: &DispatchEvent<'_>) {
        // Only the events that end a dispatch touch the span (emitted inside it). Counts are
        // recorded as `i64`: OpenTelemetry has no unsigned integers, and tracing-opentelemetry
        // would export a `u64` as text.
        let ended = |outcome: &str, attempts: u32, deduplicated: bool| {
            let span = tracing::Span::current();
            if let Some(class) = event.class {
                span.record("idem.class", class.as_str());
            }
            span.record("idem.key_hash", event.key);
            span.record("idem.outcome", outcome);
            span.record("idem.attempts", i64::from(attempts));
            span.record("idem.deduplicated", deduplicated);
        };
        match event.kind {
            EventKind::Executed { attempts } => {
                ended("executed", attempts, false);
                tracing::debug!("dispatched");
            }
            EventKind::Replayed => {
                ended("replayed", 0, true);
                tracing::debug!("dispatched");
            }
            EventKind::Retried { attempt, error } => {
                tracing::debug!(attempt, error = %error, "retrying with the same key");
            }
            EventKind::Verified { applied } => {
                tracing::info!(applied, "verify hook settled an unknown outcome");
            }
            EventKind::LeftUnknown => {
                tracing::debug!("recorded as unknown: the effect may have happened");
            }
            EventKind::ApprovalRequested => {
                tracing::info!("recorded as waiting for a person's approval");
            }
            EventKind::Claimed { .. } | EventKind::Stage { .. } => {}
            EventKind::Failed { .. }
            | EventKind::Unknown
            | EventKind::Fenced
            | EventKind::Refused { .. } => {
                let Some(e) = event.error else { return };
                let span = tracing::Span::current();
                if let Some(class) = event.class {
                    span.record("idem.class", class.as_str());
                }
                span.record("idem.key_hash", event.key);
                span.record("idem.outcome", e.code());
                span.record("error.type", e.code());
                span.record("otel.status_code", "error");
                if let DispatchError::ToolFailed {
                    attempts,
                    deduplicated,
                    ..
                } = e
                {
                    span.record("idem.attempts", i64::from(*attempts));
                    span.record("idem.deduplicated", *deduplicated);
                }
                match e {
                    // A validator's message may quote the offending value: the log names
                    // where and which rule kind, never an argument's value.
                    DispatchError::InvalidArguments { pointer, .. } => {
                        tracing::info!(code = "invalid_arguments", %pointer, "dispatch refused")
                    }
                    e => tracing::info!(code = e.code(), error = %e, "dispatch refused or failed"),
                }
            }
        }
    }
}

/// The observers a dispatcher tells: the default one unless dropped, then the added ones in
/// the order they were added.
#[derive(Clone)]
pub(crate) struct Observers {
    tracing: bool,
    added: Arc<[Arc<dyn Observer>]>,
}

impl Observers {
    pub(crate) fn tracing() -> Self {
        Observers {
            tracing: true,
            added: Arc::new([]),
        }
    }

    pub(crate) fn with(&self, observer: Arc<dyn Observer>) -> Self {
        let mut added = self.added.to_vec();
        added.push(observer);
        Observers {
            tracing: self.tracing,
            added: added.into(),
        }
    }

    pub(crate) fn without_tracing(&self) -> Self {
        Observers {
            tracing: false,
            added: self.added.clone(),
        }
    }

    /// Whether the stages are timed: only an added observer reads their times.
    pub(crate) fn times_stages(&self) -> bool {
        !self.added.is_empty()
    }

    pub(crate) fn emit(&self, event: &DispatchEvent<'_>) {
        if self.tracing {
            TracingObserver.event(event);
        }
        for o in self.added.iter() {
            o.event(event);
        }
    }
}

impl fmt::Debug for Observers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observers")
            .field("tracing", &self.tracing)
            .field("added", &self.added.len())
            .finish()
    }
}

/// One dispatch as its observers see it.
pub(super) struct Watch<'a> {
    pub(super) observers: &'a Observers,
    pub(super) started: Instant,
    pub(super) tool: &'a str,
}

impl Watch<'_> {
    /// Tell the observers of an event in the middle of a dispatch.
    pub(super) fn saw(&self, call: &KeyedCall<'_>, kind: EventKind) {
        self.saw_of(call.tool.class, Some(call.key_hash()), kind);
    }

    /// [`saw`](Self::saw), before the call is a [`KeyedCall`].
    pub(super) fn saw_of(&self, class: ToolClass, key: Option<&str>, kind: EventKind) {
        self.observers.emit(&DispatchEvent {
            kind,
            tool: self.tool,
            class: Some(class),
            key,
            elapsed: self.elapsed(),
            error: None,
        });
    }

    /// When a stage begins, if its time is wanted (see [`EventKind::Stage`]): the clock is
    /// read only for an observer that reads it.
    pub(super) fn begin(&self) -> Option<Instant> {
        self.observers.times_stages().then(Instant::now)
    }

    /// Tell the observers that a stage of a recorded call, begun at `begun`, ended.
    pub(super) fn finished(&self, call: &KeyedCall<'_>, stage: Stage, begun: Option<Instant>) {
        self.finished_stage(call.tool.class, Some(call.key_hash()), stage, begun);
    }

    /// Tell the observers that a stage begun at `begun` ended.
    pub(super) fn finished_stage(
        &self,
        class: ToolClass,
        key: Option<&str>,
        stage: Stage,
        begun: Option<Instant>,
    ) {
        let Some(begun) = begun else { return };
        let now = Instant::now();
        self.observers.emit(&DispatchEvent {
            kind: EventKind::Stage {
                stage,
                took: now.saturating_duration_since(begun),
            },
            tool: self.tool,
            class: Some(class),
            key,
            elapsed: now.saturating_duration_since(self.started),
            error: None,
        });
    }

    /// Tell the observers how the dispatch ended.
    pub(super) fn ended(
        &self,
        tool: Option<&Arc<ToolDef>>,
        key: Option<&RecordKey>,
        result: &Result<Dispatched, DispatchError>,
    ) {
        let (kind, error) = match result {
            Ok(d) if d.deduplicated => (EventKind::Replayed, None),
            Ok(d) => (
                EventKind::Executed {
                    attempts: d.attempts,
                },
                None,
            ),
            Err(e) => (
                match e {
                    DispatchError::ToolFailed { attempts, .. } => EventKind::Failed {
                        attempts: *attempts,
                    },
                    DispatchError::OutcomeUnknown { .. } | DispatchError::Escalated { .. } => {
                        EventKind::Unknown
                    }
                    DispatchError::Fenced { .. } => EventKind::Fenced,
                    e => EventKind::Refused { code: e.code() },
                },
                Some(e),
            ),
        };
        let class = match result {
            Ok(d) => Some(d.class),
            Err(_) => tool.map(|t| t.class),
        };
        self.observers.emit(&DispatchEvent {
            kind,
            tool: self.tool,
            class,
            key: key.map(key_hash),
            elapsed: self.elapsed(),
            error,
        });
    }

    fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}
