//! The seam itself: a [`Layer`] runs code around each operation of a store, and
//! [`Layered`] is a store with a layer around it (the operations it sees are in
//! `operation.rs`).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::operation::Operation;
use crate::key::RecordKey;
use crate::record::{Fence, Outcome, Record, Timestamp};
use crate::store::approvals::{ApprovalFilter, PendingApproval};
use crate::store::{Claim, ClaimRequest, ListFilter, PurgeFilter, Store, StoreError};

/// The future of one store operation, as every [`Store`] method returns it.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Code run around every operation of a store: it sees the [`Operation`], and decides
/// whether and how the rest runs (`next` starts it).
///
/// A layer may refuse an operation (return an error without calling `next`: the store is
/// never asked), or wrap the future `next` returns (a span, a timer, a fault for a test); it
/// cannot change an operation's inputs. See the [module documentation](super) for an
/// example.
pub trait Layer: Send + Sync + fmt::Debug {
    /// Run `next`, the rest of the stack for `operation`, or refuse it.
    fn around<'a, T: Send + 'static>(
        &'a self,
        operation: &Operation<'_>,
        next: impl FnOnce() -> StoreFuture<'a, T>,
    ) -> StoreFuture<'a, T>;

    /// `store` with this layer around it.
    ///
    /// ```
    /// use idem::store::layer::{Layer, Trace};
    /// use idem::store::memory::MemoryStore;
    ///
    /// let store = Trace.layer(MemoryStore::new());
    /// # let _ = store;
    /// ```
    fn layer<S: Store>(self, store: S) -> Layered<S, Self>
    where
        Self: Sized,
    {
        Layered {
            inner: store,
            layer: self,
        }
    }
}

/// A store with a [`Layer`] around it ([`Layer::layer`] makes one): a [`Store`] itself, so
/// layers stack.
///
/// ```
/// use idem::store::layer::{Layer, Trace};
/// use idem::store::memory::MemoryStore;
///
/// // A memory store is limited already: tracing outside the limits, a refused outcome shows
/// // in the trace too.
/// let store = Trace.layer(MemoryStore::new());
/// # let _ = store;
/// ```
#[derive(Debug, Clone)]
pub struct Layered<S, L> {
    pub(crate) inner: S,
    pub(crate) layer: L,
}

impl<S, L> Layered<S, L> {
    /// The store inside.
    ///
    /// ```
    /// use idem::store::layer::{Layer, Trace};
    /// use idem::store::memory::MemoryStore;
    ///
    /// let store = Trace.layer(MemoryStore::new());
    /// assert!(store.get_ref().is_empty());
    /// ```
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The layer around it.
    ///
    /// ```
    /// use idem::store::layer::{Layer, Limits};
    /// use idem::store::memory::MemoryStore;
    ///
    /// let store = Limits::new(64).layer(MemoryStore::new());
    /// assert_eq!(store.get_layer().max_outcome_bytes(), 64);
    /// ```
    pub fn get_layer(&self) -> &L {
        &self.layer
    }

    /// The store inside, without the layer.
    ///
    /// ```
    /// use idem::store::layer::{Layer, Trace};
    /// use idem::store::memory::MemoryStore;
    ///
    /// let store = Trace.layer(MemoryStore::new()).into_inner();
    /// # let _ = store;
    /// ```
    pub fn into_inner(self) -> S {
        self.inner
    }
}

// Written out rather than with `#[async_trait]`, whose `async fn` would box a second future
// around the inner store's: each method hands the layer the inner call unstarted, and returns
// what the layer returns. The signatures are the ones `#[async_trait]` gives the trait.
impl<S: Store, L: Layer> Store for Layered<S, L> {
    fn claim<'s, 'r, 'f>(&'s self, request: &'r ClaimRequest) -> StoreFuture<'f, Claim>
    where
        's: 'f,
        'r: 'f,
        Self: 'f,
    {
        let op = Operation::Claim(request);
        self.layer.around(&op, || self.inner.claim(request))
    }

    fn complete<'s, 'k, 'o, 'f>(
        &'s self,
        key: &'k RecordKey,
        fence: Fence,
        outcome: &'o Outcome,
        ttl: Duration,
    ) -> StoreFuture<'f, ()>
    where
        's: 'f,
        'k: 'f,
        'o: 'f,
        Self: 'f,
    {
        let op = Operation::Complete {
            key,
            fence,
            outcome,
            ttl,
        };
        let next = || self.inner.complete(key, fence, outcome, ttl);
        self.layer.around(&op, next)
    }

    fn release<'s, 'k, 'f>(&'s self, key: &'k RecordKey, fence: Fence) -> StoreFuture<'f, bool>
    where
        's: 'f,
        'k: 'f,
        Self: 'f,
    {
        let op = Operation::Release { key, fence };
        self.layer.around(&op, || self.inner.release(key, fence))
    }

    fn renew<'s, 'k, 'f>(
        &'s self,
        key: &'k RecordKey,
        fence: Fence,
        lease: Duration,
    ) -> StoreFuture<'f, Timestamp>
    where
        's: 'f,
        'k: 'f,
        Self: 'f,
    {
        let op = Operation::Renew { key, fence, lease };
        self.layer
            .around(&op, || self.inner.renew(key, fence, lease))
    }

    fn journal<'s, 'k, 'n, 'v, 'f>(
        &'s self,
        key: &'k RecordKey,
        fence: Fence,
        step: &'n str,
        value: &'v str,
    ) -> StoreFuture<'f, ()>
    where
        's: 'f,
        'k: 'f,
        'n: 'f,
        'v: 'f,
        Self: 'f,
    {
        let op = Operation::Journal {
            key,
            fence,
            step,
            value,
        };
        let next = || self.inner.journal(key, fence, step, value);
        self.layer.around(&op, next)
    }

    fn mark_unknown<'s, 'k, 'e, 'f>(
        &'s self,
        key: &'k RecordKey,
        fence: Fence,
        error: &'e str,
    ) -> StoreFuture<'f, ()>
    where
        's: 'f,
        'k: 'f,
        'e: 'f,
        Self: 'f,
    {
        let op = Operation::MarkUnknown { key, fence, error };
        let next = || self.inner.mark_unknown(key, fence, error);
        self.layer.around(&op, next)
    }

    fn get<'s, 'k, 'f>(&'s self, key: &'k RecordKey) -> StoreFuture<'f, Option<Record>>
    where
        's: 'f,
        'k: 'f,
        Self: 'f,
    {
        let op = Operation::Get { key };
        self.layer.around(&op, || self.inner.get(key))
    }

    fn list<'s, 'f>(&'s self, filter: ListFilter) -> StoreFuture<'f, Vec<Record>>
    where
        's: 'f,
        Self: 'f,
    {
        // The inner call takes the filter; the layer sees a copy (an operator's call, rare).
        let seen = filter.clone();
        let op = Operation::List(&seen);
        self.layer.around(&op, || self.inner.list(filter))
    }

    fn resolve<'s, 'k, 'o, 'f>(
        &'s self,
        key: &'k RecordKey,
        outcome: &'o Outcome,
        ttl: Duration,
    ) -> StoreFuture<'f, Record>
    where
        's: 'f,
        'k: 'f,
        'o: 'f,
        Self: 'f,
    {
        let op = Operation::Resolve { key, outcome, ttl };
        self.layer
            .around(&op, || self.inner.resolve(key, outcome, ttl))
    }

    fn settle_unknown<'s, 'k, 'o, 'f>(
        &'s self,
        key: &'k RecordKey,
        fence: Fence,
        outcome: Option<&'o Outcome>,
        ttl: Duration,
    ) -> StoreFuture<'f, bool>
    where
        's: 'f,
        'k: 'f,
        'o: 'f,
        Self: 'f,
    {
        let op = Operation::SettleUnknown {
            key,
            fence,
            outcome,
            ttl,
        };
        let next = || self.inner.settle_unknown(key, fence, outcome, ttl);
        self.layer.around(&op, next)
    }

    fn force_release<'s, 'k, 'f>(&'s self, key: &'k RecordKey) -> StoreFuture<'f, bool>
    where
        's: 'f,
        'k: 'f,
        Self: 'f,
    {
        let op = Operation::ForceRelease { key };
        self.layer.around(&op, || self.inner.force_release(key))
    }

    fn purge_expired<'s, 'p, 'f>(&'s self, filter: &'p PurgeFilter) -> StoreFuture<'f, usize>
    where
        's: 'f,
        'p: 'f,
        Self: 'f,
    {
        let op = Operation::PurgeExpired(filter);
        self.layer.around(&op, || self.inner.purge_expired(filter))
    }

    fn now<'s, 'f>(&'s self) -> StoreFuture<'f, Timestamp>
    where
        's: 'f,
        Self: 'f,
    {
        self.layer.around(&Operation::Now, || self.inner.now())
    }

    fn approval_text<'s, 'k, 'f>(&'s self, key: &'k RecordKey) -> StoreFuture<'f, Option<String>>
    where
        's: 'f,
        'k: 'f,
        Self: 'f,
    {
        let op = Operation::ApprovalText { key };
        self.layer.around(&op, || self.inner.approval_text(key))
    }

    fn swap_approval<'s, 'k, 'x, 'e, 't, 'f>(
        &'s self,
        key: &'k RecordKey,
        expected: Option<&'x str>,
        entry: &'e PendingApproval,
        text: &'t str,
    ) -> StoreFuture<'f, bool>
    where
        's: 'f,
        'k: 'f,
        'x: 'f,
        'e: 'f,
        't: 'f,
        Self: 'f,
    {
        let op = Operation::SwapApproval { key, entry };
        let next = || self.inner.swap_approval(key, expected, entry, text);
        self.layer.around(&op, next)
    }

    fn remove_approval<'s, 'k, 'x, 'f>(
        &'s self,
        key: &'k RecordKey,
        expected: &'x str,
    ) -> StoreFuture<'f, bool>
    where
        's: 'f,
        'k: 'f,
        'x: 'f,
        Self: 'f,
    {
        let op = Operation::RemoveApproval { key };
        self.layer
            .around(&op, || self.inner.remove_approval(key, expected))
    }

    fn approval_texts<'s, 'a, 'f>(
        &'s self,
        filter: &'a ApprovalFilter,
    ) -> StoreFuture<'f, Vec<(RecordKey, String)>>
    where
        's: 'f,
        'a: 'f,
        Self: 'f,
    {
        let op = Operation::ApprovalTexts(filter);
        self.layer.around(&op, || self.inner.approval_texts(filter))
    }

    fn append_run_entry<'s, 'a, 'b, 'c, 'f>(
        &'s self,
        tenant: &'a str,
        run_id: &'b str,
        text: &'c str,
        ttl: Duration,
    ) -> StoreFuture<'f, ()>
    where
        's: 'f,
        'a: 'f,
        'b: 'f,
        'c: 'f,
        Self: 'f,
    {
        let op = Operation::AppendRunEntry {
            tenant,
            run_id,
            text,
            ttl,
        };
        let next = || self.inner.append_run_entry(tenant, run_id, text, ttl);
        self.layer.around(&op, next)
    }

    fn run_entries<'s, 'a, 'b, 'f>(
        &'s self,
        tenant: &'a str,
        run_id: &'b str,
    ) -> StoreFuture<'f, Vec<String>>
    where
        's: 'f,
        'a: 'f,
        'b: 'f,
        Self: 'f,
    {
        let op = Operation::RunEntries { tenant, run_id };
        self.layer
            .around(&op, || self.inner.run_entries(tenant, run_id))
    }

    fn budget_text<'s, 'a, 'f>(&'s self, scope: &'a str) -> StoreFuture<'f, Option<String>>
    where
        's: 'f,
        'a: 'f,
        Self: 'f,
    {
        let op = Operation::BudgetText { scope };
        self.layer.around(&op, || self.inner.budget_text(scope))
    }

    fn swap_budget<'s, 'a, 'x, 't, 'f>(
        &'s self,
        scope: &'a str,
        expected: Option<&'x str>,
        text: &'t str,
        ttl: Duration,
    ) -> StoreFuture<'f, bool>
    where
        's: 'f,
        'a: 'f,
        'x: 'f,
        't: 'f,
        Self: 'f,
    {
        let op = Operation::SwapBudget { scope, text, ttl };
        let next = || self.inner.swap_budget(scope, expected, text, ttl);
        self.layer.around(&op, next)
    }
}
