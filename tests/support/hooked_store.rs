//! A store that forwards every operation to a real one and calls a test's hook around them:
//! how a test puts a crash, an outage or a slow answer at one point of a dispatch without
//! writing out the whole `Store` trait again.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use idem::store::approvals::{ApprovalFilter, PendingApproval};
use idem::store::{Claim, ClaimRequest, ListFilter, PurgeFilter};
use idem::{
    Store, key::RecordKey, record::Fence, record::Outcome, record::Record, record::Timestamp,
    store::StoreError,
};

/// The operation of the `Store` trait a hook is called before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Claim,
    Complete,
    Release,
    Renew,
    Journal,
    MarkUnknown,
    Get,
    List,
    Resolve,
    SettleUnknown,
    ForceRelease,
    PurgeExpired,
    Now,
    /// Any of the pending approvals' three operations.
    Approvals,
    /// Either of the budgets' two operations.
    Budgets,
}

/// What a test does around the operations of a [`Hooked`] store. Every method does nothing
/// unless the test says otherwise.
#[async_trait]
pub trait Hook: fmt::Debug + Send + Sync + 'static {
    /// Before `op` (on `key`, for the operations on one record). An error is the store's
    /// answer instead, and the real store never sees the operation.
    async fn before(&self, op: Op, key: Option<&RecordKey>) -> Result<(), StoreError> {
        let _ = (op, key);
        Ok(())
    }

    /// After the real store answered `request` with `claim`.
    async fn claimed(&self, request: &ClaimRequest, claim: &Result<Claim, StoreError>) {
        let _ = (request, claim);
    }

    /// After the real store answered `op` (on `key`). An error is the caller's answer
    /// instead, while what the store did stands: a reply lost after the store committed.
    async fn after(&self, op: Op, key: Option<&RecordKey>) -> Result<(), StoreError> {
        let _ = (op, key);
        Ok(())
    }

    /// The claim the caller gets for `request`, given the real store's answer (unless
    /// [`Hook::after`] replaced it): a test may plant a defect here.
    async fn answer_claim(&self, request: &ClaimRequest, claim: Claim) -> Claim {
        let _ = request;
        claim
    }

    /// After the real store answered a `complete` of `key` with `done`, which the caller then
    /// gets.
    async fn completed(&self, key: &RecordKey, done: &Result<(), StoreError>) {
        let _ = (key, done);
    }
}

/// `inner`, with `hook` called around its operations.
#[derive(Debug)]
pub struct Hooked<H> {
    pub inner: Arc<dyn Store>,
    pub hook: H,
}

impl<H: Hook> Hooked<H> {
    pub fn new(inner: Arc<dyn Store>, hook: H) -> Hooked<H> {
        Hooked { inner, hook }
    }

    /// `run` (an operation of the real store, not started yet) between the hook's `before`
    /// and `after` for `op` on `key`.
    async fn around<T>(
        &self,
        op: Op,
        key: Option<&RecordKey>,
        run: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.hook.before(op, key).await?;
        let answer = run.await;
        self.hook.after(op, key).await?;
        answer
    }
}

#[async_trait]
impl<H: Hook> Store for Hooked<H> {
    async fn claim(&self, r: &ClaimRequest) -> Result<Claim, StoreError> {
        let claim = self
            .around(Op::Claim, Some(&r.key), async {
                let claim = self.inner.claim(r).await;
                self.hook.claimed(r, &claim).await;
                claim
            })
            .await?;
        Ok(self.hook.answer_claim(r, claim).await)
    }
    async fn complete(
        &self,
        k: &RecordKey,
        f: Fence,
        o: &Outcome,
        t: Duration,
    ) -> Result<(), StoreError> {
        self.around(Op::Complete, Some(k), async {
            let done = self.inner.complete(k, f, o, t).await;
            self.hook.completed(k, &done).await;
            done
        })
        .await
    }
    async fn release(&self, k: &RecordKey, f: Fence) -> Result<bool, StoreError> {
        self.around(Op::Release, Some(k), self.inner.release(k, f))
            .await
    }
    async fn renew(&self, k: &RecordKey, f: Fence, l: Duration) -> Result<Timestamp, StoreError> {
        self.around(Op::Renew, Some(k), self.inner.renew(k, f, l))
            .await
    }
    async fn journal(&self, k: &RecordKey, f: Fence, s: &str, v: &str) -> Result<(), StoreError> {
        self.around(Op::Journal, Some(k), self.inner.journal(k, f, s, v))
            .await
    }
    async fn mark_unknown(&self, k: &RecordKey, f: Fence, e: &str) -> Result<(), StoreError> {
        self.around(Op::MarkUnknown, Some(k), self.inner.mark_unknown(k, f, e))
            .await
    }
    async fn get(&self, k: &RecordKey) -> Result<Option<Record>, StoreError> {
        self.around(Op::Get, Some(k), self.inner.get(k)).await
    }
    async fn list(&self, f: ListFilter) -> Result<Vec<Record>, StoreError> {
        self.around(Op::List, None, self.inner.list(f)).await
    }
    async fn resolve(&self, k: &RecordKey, o: &Outcome, t: Duration) -> Result<Record, StoreError> {
        self.around(Op::Resolve, Some(k), self.inner.resolve(k, o, t))
            .await
    }
    async fn settle_unknown(
        &self,
        k: &RecordKey,
        f: Fence,
        o: Option<&Outcome>,
        t: Duration,
    ) -> Result<bool, StoreError> {
        self.around(
            Op::SettleUnknown,
            Some(k),
            self.inner.settle_unknown(k, f, o, t),
        )
        .await
    }
    async fn force_release(&self, k: &RecordKey) -> Result<bool, StoreError> {
        self.around(Op::ForceRelease, Some(k), self.inner.force_release(k))
            .await
    }
    async fn purge_expired(&self, l: &PurgeFilter) -> Result<usize, StoreError> {
        self.around(Op::PurgeExpired, None, self.inner.purge_expired(l))
            .await
    }
    async fn now(&self) -> Result<Timestamp, StoreError> {
        self.around(Op::Now, None, self.inner.now()).await
    }
    async fn approval_text(&self, k: &RecordKey) -> Result<Option<String>, StoreError> {
        self.around(Op::Approvals, Some(k), self.inner.approval_text(k))
            .await
    }
    async fn swap_approval(
        &self,
        k: &RecordKey,
        expected: Option<&str>,
        entry: &PendingApproval,
        text: &str,
    ) -> Result<bool, StoreError> {
        self.around(
            Op::Approvals,
            Some(k),
            self.inner.swap_approval(k, expected, entry, text),
        )
        .await
    }
    async fn remove_approval(&self, k: &RecordKey, expected: &str) -> Result<bool, StoreError> {
        self.around(
            Op::Approvals,
            Some(k),
            self.inner.remove_approval(k, expected),
        )
        .await
    }
    async fn approval_texts(
        &self,
        f: &ApprovalFilter,
    ) -> Result<Vec<(RecordKey, String)>, StoreError> {
        self.around(Op::Approvals, None, self.inner.approval_texts(f))
            .await
    }
    async fn append_run_entry(
        &self,
        tenant: &str,
        run_id: &str,
        text: &str,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        self.inner.append_run_entry(tenant, run_id, text, ttl).await
    }
    async fn run_entries(&self, tenant: &str, run_id: &str) -> Result<Vec<String>, StoreError> {
        self.inner.run_entries(tenant, run_id).await
    }
    async fn budget_text(&self, scope: &str) -> Result<Option<String>, StoreError> {
        self.around(Op::Budgets, None, self.inner.budget_text(scope))
            .await
    }
    async fn swap_budget(
        &self,
        scope: &str,
        expected: Option<&str>,
        text: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        self.around(
            Op::Budgets,
            None,
            self.inner.swap_budget(scope, expected, text, ttl),
        )
        .await
    }
}
