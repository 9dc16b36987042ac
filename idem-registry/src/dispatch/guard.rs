//! A claim this dispatch holds, from the claim to the outcome: every write it makes is
//! fenced, and however the dispatch ends (an outcome, a give-back, a lost key, or the caller
//! dropping the future mid-body), the key is settled once.

use std::time::Duration;

use idem_core::{ErrorKind, JournalEntry, Outcome, StoreError, Timestamp, ToolClass};

use super::decide::GiveBack;
use crate::context::{FencedKey, ToolContext};
use crate::heartbeat::{self, Registration};

/// A held claim. Dropped while still armed (the dispatch future was dropped mid-body), it
/// gives the key back in a task of its own as a cancelled call: a write that is safe to
/// re-run is released (or, with journaled steps, left to be taken over), any other becomes
/// Unknown. Every method that settles the key consumes the hold; only the one write that
/// settles it disarms it, after that write answered.
pub(crate) struct ClaimGuard {
    held: FencedKey,
    class: ToolClass,
    /// The running attempt's context, to see whether steps were journaled.
    attempt: Option<ToolContext>,
    armed: bool,
}

impl ClaimGuard {
    pub(crate) fn new(held: FencedKey, class: ToolClass) -> Self {
        ClaimGuard {
            held,
            class,
            attempt: None,
            armed: true,
        }
    }

    /// The key, store and fence, for the body's context.
    pub(crate) fn held(&self) -> &FencedKey {
        &self.held
    }

    /// Watch this attempt's journal: a cancellation settles by what it journaled.
    pub(crate) fn running(&mut self, ctx: &ToolContext) {
        self.attempt = Some(ctx.clone());
    }

    /// Keep the lease renewed (from the heartbeat thread) while the body runs.
    pub(crate) fn keep_alive(&self, lease: Duration) -> Registration {
        heartbeat::keep(&self.held, lease)
    }

    /// Renew the lease before another attempt: during a backoff it may have lapsed and
    /// another worker moved on.
    pub(crate) async fn renew(&self, lease: Duration) -> Result<Timestamp, StoreError> {
        self.held
            .store
            .renew(&self.held.key, self.held.fence, lease)
            .await
    }

    /// Record the outcome. Armed until the store answered (a dispatch dropped during the
    /// write still settles the claim), and still armed after an error other than `Fenced`:
    /// the key is then this worker's to give back.
    pub(crate) async fn complete(
        &mut self,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let h = &self.held;
        let result = h.store.complete(&h.key, h.fence, outcome, ttl).await;
        if matches!(result, Ok(()) | Err(StoreError::Fenced { .. })) {
            self.disarm();
        }
        result
    }

    /// Give the key back as `how` says. A key another worker holds or settled already has
    /// nothing of ours to give back: that is not an error.
    pub(crate) async fn give_back(mut self, how: &GiveBack) -> Result<(), StoreError> {
        let result = give_back(&self.held, how).await;
        self.disarm();
        result
    }

    /// Leave the key to its lease: whether this worker still holds it is not known (the
    /// store did not answer), or it is known that it does not (fenced).
    pub(crate) fn abandon(mut self) {
        self.disarm();
    }

    fn disarm(&mut self) {
        self.armed = false;
    }
}

/// Carry out a give-back on a held key (see [`ClaimGuard::give_back`]).
pub(crate) async fn give_back(h: &FencedKey, how: &GiveBack) -> Result<(), StoreError> {
    let result = match how {
        GiveBack::Release => h.store.release(&h.key, h.fence).await.map(|_| ()),
        GiveBack::Expire => h
            .store
            .renew(&h.key, h.fence, Duration::ZERO)
            .await
            .map(|_| ()),
        GiveBack::Unknown(why) => h.store.mark_unknown(&h.key, h.fence, why).await,
    };
    match result {
        Err(StoreError::Fenced { .. }) => Ok(()),
        other => other,
    }
}

/// Settle `held` as `how` says in a task of its own (the dispatch that held it is gone).
pub(crate) fn give_back_later(held: FencedKey, how: GiveBack, what: &'static str) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(key = %held.key, "{what} outside a runtime; the claim's lease will expire");
        return;
    };
    runtime.spawn(async move {
        if let Err(e) = give_back(&held, &how).await {
            tracing::warn!(error = %e, key = %held.key, "{what}: could not give the key back; its lease will expire");
        }
    });
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let journal = self
            .attempt
            .as_ref()
            .map(|c| c.journal())
            .unwrap_or_default();
        let has_steps = !journal.is_empty();
        // A compensation under way is left to be taken over and resumed.
        let how = if super::journal::compensating(&journal) {
            GiveBack::Expire
        } else {
            GiveBack::after(
                self.class,
                ErrorKind::Ambiguous,
                has_steps,
                "the dispatch was cancelled while the tool was running",
            )
        };
        give_back_later(self.held.clone(), how, "a call was cancelled");
    }
}

/// A claim this dispatch won.
pub(crate) struct WonClaim {
    pub hold: ClaimGuard,
    /// Steps an earlier holder journaled.
    pub steps: Vec<JournalEntry>,
    /// Whether an earlier holder's lease expired.
    pub takeover: bool,
    /// How long the outcome is kept once recorded (the longer of the call's TTL and the one
    /// the record was made under, after a take-over).
    pub ttl: std::time::Duration,
}
