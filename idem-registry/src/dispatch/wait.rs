//! A dispatch that waits for an Unknown outcome to settle, within the caller's bound: the
//! wait-and-call-again loop every caller of an `OutcomeUnknown` with `retry_after` would
//! otherwise write for itself.

use std::time::Duration;

use super::Dispatcher;
use super::call::{Dispatched, ToolCall};
use super::decide;
use super::error::DispatchError;
use crate::run::RunContext;

impl Dispatcher {
    /// Dispatch `call`; while its outcome is Unknown and a verify hook will be asked at a
    /// time `within` allows (the error's `retry_after`, on the store's clock), wait until
    /// then and dispatch it again, so that the hook settles it: the result is the recorded
    /// outcome (`deduplicated: true`) if the effect happened, or the call run now if it did
    /// not. Any other result, and an Unknown no hook can settle or that would settle only
    /// after the bound, is returned at once, as [`dispatch`](Self::dispatch) returns it.
    ///
    /// The bound is the longest this waits in all; a verify hook whose lookup fails moves
    /// `retry_after` on, and the wait with it, inside the bound.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use std::time::Duration;
    /// # use idem::{Dispatcher, Registry, RunContext, ToolCall};
    /// # async fn demo(dispatcher: Dispatcher) -> Result<(), idem::DispatchError> {
    /// let call = ToolCall::new("send_email", serde_json::json!({"to": "a@example.com"}))
    ///     .with_call_id("call_7");
    /// // Wait up to a minute for a timed-out send to be looked up, rather than failing.
    /// let sent = dispatcher
    ///     .dispatch_until_settled(&call, &RunContext::new("tenant-1"), Duration::from_secs(60))
    ///     .await?;
    /// # let _ = sent; Ok(()) }
    /// ```
    pub async fn dispatch_until_settled(
        &self,
        call: &ToolCall,
        run: &RunContext,
        within: Duration,
    ) -> Result<Dispatched, DispatchError> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let result = self.dispatch(call, run).await;
            let Err(DispatchError::OutcomeUnknown {
                retry_after: Some(at),
                ..
            }) = &result
            else {
                return result;
            };
            // The store's clock says how far `retry_after` is; the runtime's, how much of the
            // bound is left.
            let Ok(now) = self.store.now().await else {
                return result;
            };
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match decide::unknown_wait(*at, now, left) {
                Some(wait) => tokio::time::sleep(wait).await,
                None => return result,
            }
        }
    }
}
