//! Seam: observers of dispatch events (ARCHITECTURE.md, "Seams").
//!
//! A dispatch tells its observers what happened to a call: claimed, executed, replayed,
//! retried, unknown, fenced, verified, failed, refused. Each event names the tool and its
//! class, a short hash of the record key (never an argument value) and the time since the
//! dispatch began. Metrics, audit logs and OpenTelemetry attach here; the order of checks
//! does not change and an observer cannot change an outcome.
//!
//! The default observer, [`TracingObserver`], is the dispatch span idem always had
//! (`idem.dispatch`, with `class`, `outcome`, `attempts` and `deduplicated` recorded as the
//! call ends) and its one log line. [`Dispatcher::with_observer`](super::Dispatcher::with_observer)
//! adds an observer beside it; [`Dispatcher::without_tracing`](super::Dispatcher::without_tracing)
//! drops the default.
//!
//! ```
//! # mod idem { pub use idem_core::*; pub use idem_registry::*; pub use idem_core::store::memory::MemoryStore; }
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
use std::time::Duration;

use idem_core::{ErrorKind, ToolClass};

use super::error::DispatchError;

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
    /// The call's outcome is Unknown (made so now, or found so).
    Unknown,
    /// This worker lost the key before it could record.
    Fenced,
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
            EventKind::Fenced => "fenced",
            EventKind::Verified { .. } => "verified",
            EventKind::Failed { .. } => "failed",
            EventKind::Refused { .. } => "refused",
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

/// The default observer: the `idem.dispatch` span's fields and one log line per dispatch
/// (`debug` when it succeeded, `info` when it was refused or failed; a refusal of the
/// arguments logs the pointer, never a value).
#[derive(Debug, Clone, Copy, Default)]
pub struct TracingObserver;

impl Observer for TracingObserver {
    fn event(&self, event: &DispatchEvent<'_>) {
        // Only the events that end a dispatch touch the span (emitted inside it).
        let ended = |outcome: &str, attempts: u32, deduplicated: bool| {
            let span = tracing::Span::current();
            if let Some(class) = event.class {
                span.record("class", class.as_str());
            }
            span.record("outcome", outcome);
            span.record("attempts", attempts);
            span.record("deduplicated", deduplicated);
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
            EventKind::Claimed { .. } => {}
            EventKind::Failed { .. }
            | EventKind::Unknown
            | EventKind::Fenced
            | EventKind::Refused { .. } => {
                let Some(e) = event.error else { return };
                let span = tracing::Span::current();
                if let Some(class) = event.class {
                    span.record("class", class.as_str());
                }
                span.record("outcome", e.code());
                if let DispatchError::ToolFailed {
                    attempts,
                    deduplicated,
                    ..
                } = e
                {
                    span.record("attempts", *attempts);
                    span.record("deduplicated", *deduplicated);
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
