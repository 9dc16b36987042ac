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
    Store, key::RecordKey, store::Fence, store::Outcome, store::Record, store::StoreError,
    store::Timestamp,
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

    /// After the real store answered `request` with `claim`, which the caller then gets.
    async fn claimed(&self, request: &ClaimRequest, claim: &Result<Claim, StoreError>) {
        let _ = (request, claim);
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
}

#[async_trait]
impl<H: Hook> Store for Hooked<H> {
    async fn claim(&self, r: &ClaimRequest) -> Result<Claim, StoreError> {
        self.hook.before(Op::Claim, Some(&r.key)).await?;
        let claim = self.inner.claim(r).await;
        self.hook.claimed(r, &claim).await;
        claim
    }
    async fn complete(
        &self,
        k: &RecordKey,
        f: Fence,
        o: &Outcome,
        t: Duration,
    ) -> Result<(), StoreError> {
        self.hook.before(Op::Complete, Some(k)).await?;
        let done = self.inner.complete(k, f, o, t).await;
        self.hook.completed(k, &done).await;
        done
    }
    async fn release(&self, k: &RecordKey, f: Fence) -> Result<bool, StoreError> {
        self.hook.before(Op::Release, Some(k)).await?;
        self.inner.release(k, f).await
    }
    async fn renew(&self, k: &RecordKey, f: Fence, l: Duration) -> Result<Timestamp, StoreError> {
        self.hook.before(Op::Renew, Some(k)).await?;
        self.inner.renew(k, f, l).await
    }
    async fn journal(&self, k: &RecordKey, f: Fence, s: &str, v: &str) -> Result<(), StoreError> {
        self.hook.before(Op::Journal, Some(k)).await?;
        self.inner.journal(k, f, s, v).await
    }
    async fn mark_unknown(&self, k: &RecordKey, f: Fence, e: &str) -> Result<(), StoreError> {
        self.hook.before(Op::MarkUnknown, Some(k)).await?;
        self.inner.mark_unknown(k, f, e).await
    }
    async fn get(&self, k: &RecordKey) -> Result<Option<Record>, StoreError> {
        self.hook.before(Op::Get, Some(k)).await?;
        self.inner.get(k).await
    }
    async fn list(&self, f: ListFilter) -> Result<Vec<Record>, StoreError> {
        self.hook.before(Op::List, None).await?;
        self.inner.list(f).await
    }
    async fn resolve(&self, k: &RecordKey, o: &Outcome, t: Duration) -> Result<Record, StoreError> {
        self.hook.before(Op::Resolve, Some(k)).await?;
        self.inner.resolve(k, o, t).await
    }
    async fn settle_unknown(
        &self,
        k: &RecordKey,
        f: Fence,
        o: Option<&Outcome>,
        t: Duration,
    ) -> Result<bool, StoreError> {
        self.hook.before(Op::SettleUnknown, Some(k)).await?;
        self.inner.settle_unknown(k, f, o, t).await
    }
    async fn force_release(&self, k: &RecordKey) -> Result<bool, StoreError> {
        self.hook.before(Op::ForceRelease, Some(k)).await?;
        self.inner.force_release(k).await
    }
    async fn purge_expired(&self, l: &PurgeFilter) -> Result<usize, StoreError> {
        self.hook.before(Op::PurgeExpired, None).await?;
        self.inner.purge_expired(l).await
    }
    async fn now(&self) -> Result<Timestamp, StoreError> {
        self.hook.before(Op::Now, None).await?;
        self.inner.now().await
    }
    async fn approval_text(&self, k: &RecordKey) -> Result<Option<String>, StoreError> {
        self.hook.before(Op::Approvals, Some(k)).await?;
        self.inner.approval_text(k).await
    }
    async fn swap_approval(
        &self,
        k: &RecordKey,
        expected: Option<&str>,
        entry: &PendingApproval,
        text: &str,
    ) -> Result<bool, StoreError> {
        self.hook.before(Op::Approvals, Some(k)).await?;
        self.inner.swap_approval(k, expected, entry, text).await
    }
    async fn remove_approval(&self, k: &RecordKey, expected: &str) -> Result<bool, StoreError> {
        self.hook.before(Op::Approvals, Some(k)).await?;
        self.inner.remove_approval(k, expected).await
    }
    async fn approval_texts(
        &self,
        f: &ApprovalFilter,
    ) -> Result<Vec<(RecordKey, String)>, StoreError> {
        self.hook.before(Op::Approvals, None).await?;
        self.inner.approval_texts(f).await
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
}
