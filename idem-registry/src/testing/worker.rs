//! The worker's side of a crash test: where it may be killed.
//!
//! A worker counts every point where a crash changes what happens, in the order it reaches
//! them: around each claim, after each journaled step (an approval consumed, a precondition
//! passed, a step of the tool's, an undo's), before and after each body (after the effect,
//! before its record), after each record. The store's side is a [`Layer`]; the body's an
//! [`Execution`]. At the point it was told to stop at, the worker kills itself with SIGKILL:
//! no destructor runs, no buffer is flushed, as when a machine dies.

use std::sync::Mutex;

use idem_core::store::layer::{Layer, Operation, StoreFuture};

use crate::dispatch::{Attempt, BodyFuture, Execution};

/// The points a worker reached, and the one it stops at.
#[derive(Debug)]
pub(super) struct Points {
    /// Kill the process on reaching this point (counted from 0), after writing its label to
    /// this file (so the test can tell that it is the survey's point of that number).
    kill_at: Option<(usize, std::path::PathBuf)>,
    /// Every point reached, in order: one lock for the count and the label, so that
    /// concurrent dispatches cannot give a label another's number.
    labels: Mutex<Vec<String>>,
}

impl Points {
    pub(super) fn new(kill_at: Option<(usize, std::path::PathBuf)>) -> Self {
        Points {
            kill_at,
            labels: Mutex::new(Vec::new()),
        }
    }

    /// Reach a point: noted, and the end of the process if it is the one to stop at.
    fn reach(&self, label: String) {
        let mut labels = self.labels.lock().unwrap_or_else(|e| e.into_inner());
        let n = labels.len();
        if let Some((at, file)) = &self.kill_at
            && *at == n
        {
            let _ = std::fs::write(file, &label);
            kill_self();
        }
        labels.push(label);
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
            Operation::Claim { request } => (
                Some(format!("before the claim of `{}`", request.tool)),
                Some(format!("after the claim of `{}`", request.tool)),
            ),
            // A step's effect is done before its entry is written: a crash between the two
            // runs the step again.
            Operation::Journal { step, .. } => (
                Some(format!("step `{step}` done, before it is journaled")),
                Some(format!("after step `{step}` was journaled")),
            ),
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
