//! The worker's side of a crash test: where it may be killed, and the clock of the process
//! that resumes.
//!
//! A worker counts every point where a crash changes what happens, in the order it reaches
//! them: around each claim, after each journaled step (an approval consumed, a precondition
//! passed, a step of the tool's, an undo's), before and after each body (after the effect,
//! before its record), after each record. The store's side is a [`Layer`]; the body's an
//! [`Execution`]. At the point it was told to stop at, the worker kills itself with SIGKILL:
//! no destructor runs, no buffer is flushed, as when a machine dies.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem_core::Timestamp;
use idem_core::store::layer::{Layer, Operation, StoreFuture};
use idem_core::store::memory::Clock;

use crate::dispatch::{Attempt, BodyFuture, Execution};

/// The points a worker reached, and the one it stops at.
#[derive(Debug)]
pub(super) struct Points {
    /// Kill the process on reaching this point (counted from 0).
    kill_at: Option<usize>,
    reached: AtomicUsize,
    labels: Mutex<Vec<String>>,
}

impl Points {
    pub(super) fn new(kill_at: Option<usize>) -> Self {
        Points {
            kill_at,
            reached: AtomicUsize::new(0),
            labels: Mutex::new(Vec::new()),
        }
    }

    /// Reach a point: noted, and the end of the process if it is the one to stop at.
    fn reach(&self, label: String) {
        let n = self.reached.fetch_add(1, Ordering::SeqCst);
        self.labels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(label);
        if self.kill_at == Some(n) {
            kill_self();
        }
    }

    /// Every point reached, in order.
    pub(super) fn labels(&self) -> Vec<String> {
        self.labels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// SIGKILL to this process: nothing after it runs.
fn kill_self() -> ! {
    // SAFETY: `kill` and `getpid` have no preconditions; SIGKILL cannot be caught.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    // SIGKILL is delivered before `kill` returns to a process signalling itself; if it were
    // not, nothing else may run either.
    std::process::abort()
}

/// The store's points, as a layer.
#[derive(Debug)]
pub(super) struct StorePoints(pub(super) std::sync::Arc<Points>);

impl Layer for StorePoints {
    fn around<'a, T: Send + 'static>(
        &'a self,
        operation: &Operation<'_>,
        next: impl FnOnce() -> StoreFuture<'a, T>,
    ) -> StoreFuture<'a, T> {
        let (before, after) = match operation {
            Operation::Claim(request) => (
                Some(format!("before the claim of `{}`", request.tool)),
                Some(format!("after the claim of `{}`", request.tool)),
            ),
            Operation::Journal { step, .. } => {
                (None, Some(format!("after step `{step}` was journaled")))
            }
            Operation::Complete { .. } => (None, Some("after an outcome was recorded".to_owned())),
            Operation::MarkUnknown { .. } => {
                (None, Some("after a call was left unknown".to_owned()))
            }
            Operation::Release { .. } => (None, Some("after a claim was given back".to_owned())),
            _ => (None, None),
        };
        if let Some(label) = before {
            self.0.reach(label);
        }
        let Some(label) = after else {
            return next();
        };
        let run = next();
        Box::pin(async move {
            let done = run.await;
            if done.is_ok() {
                self.0.reach(label);
            }
            done
        })
    }
}

/// The body's points, as an execution around every attempt.
#[derive(Debug)]
pub(super) struct BodyPoints(pub(super) std::sync::Arc<Points>);

impl Execution for BodyPoints {
    fn execute<'a>(&'a self, attempt: Attempt<'a>, body: BodyFuture<'a>) -> BodyFuture<'a> {
        let tool = attempt.tool.to_owned();
        let n = attempt.attempt;
        Box::pin(async move {
            self.0
                .reach(format!("before the body of `{tool}` (attempt {n})"));
            let done = body.await;
            self.0.reach(format!(
                "after the body of `{tool}` (attempt {n}) returned, before its outcome is recorded"
            ));
            done
        })
    }
}

/// The clock of a process that resumes after the crash: the system's, moved on by as long
/// as the longest lease of the scenario's tools (and a second), so that the dead worker's
/// lease has run out as it would have by the time someone restarts the agent.
#[derive(Debug, Default)]
pub(super) struct Later {
    ahead_ms: std::sync::atomic::AtomicU64,
}

impl Later {
    /// Move on by `ahead` from now on.
    pub(super) fn set(&self, ahead: Duration) {
        let ms = u64::try_from(ahead.as_millis()).unwrap_or(u64::MAX);
        self.ahead_ms.store(ms, Ordering::SeqCst);
    }
}

impl Clock for Later {
    fn now(&self) -> Timestamp {
        let ahead = self.ahead_ms.load(Ordering::SeqCst);
        Timestamp(Timestamp::now().as_millis().saturating_add(ahead))
    }
}
