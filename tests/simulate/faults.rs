//! The store of a simulation: the real in-memory store behind a wrapper that, as the seed
//! says, fails an operation before it reaches the store, loses the reply of one that
//! committed, or delays it (other hosts run meanwhile). It can also carry a planted defect,
//! for the tests that prove the simulator catches one.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use idem::Store;
use idem::key::RecordKey;
use idem::store::approvals::{ApprovalFilter, PendingApproval};
use idem::store::{
    Claim, ClaimRequest, Fence, ListFilter, Outcome, PurgeFilter, Record, RecordState, StoreError,
    Timestamp,
};

use crate::world::Sim;

/// A defect planted in the store, for the simulator's own tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Defect {
    None,
    /// A claim that meets a live holder hands the key out again as new, under the holder's
    /// own fence (the lease and fence checks skipped): two holders run at once.
    TakeLiveClaims,
    /// A new claim's write is lost, and the claim reported acquired all the same.
    LoseClaims,
}

#[derive(Debug)]
pub struct FaultStore {
    inner: Arc<dyn Store>,
    sim: Sim,
    defect: Defect,
}

/// What the seed does to one operation.
enum Fault {
    None,
    /// Fail before the store sees it.
    Before,
    /// Run it, then lose the reply.
    LostReply,
}

impl FaultStore {
    pub fn new(inner: Arc<dyn Store>, sim: Sim, defect: Defect) -> FaultStore {
        FaultStore { inner, sim, defect }
    }

    /// Decide the fault of an operation (a write may lose its reply), after a delay the seed
    /// may add. Outside the simulation's thread (the lease heartbeat), nothing.
    async fn fault(&self, write: bool) -> Fault {
        if !turmoil::in_simulation() {
            return Fault::None;
        }
        let roll = self.sim.roll();
        if (6..14).contains(&roll) {
            tokio::time::sleep(self.sim.up_to(Duration::from_millis(300))).await;
        }
        match roll {
            0..3 => Fault::Before,
            3..6 if write => Fault::LostReply,
            _ => Fault::None,
        }
    }

    /// The claim as the planted defect reports it.
    async fn planted(&self, r: &ClaimRequest, claim: Claim) -> Claim {
        match (self.defect, claim) {
            (Defect::TakeLiveClaims, Claim::Existing(record))
                if matches!(record.state, RecordState::InProgress { .. })
                    && record.fingerprint == r.fingerprint =>
            {
                Claim::Acquired {
                    fence: record.fence,
                    steps: record.steps,
                    takeover: false,
                }
            }
            (
                Defect::LoseClaims,
                Claim::Acquired {
                    fence,
                    steps,
                    takeover: false,
                },
            ) if self.sim.roll() < 50 => {
                let _ = self.inner.force_release(&r.key).await;
                Claim::Acquired {
                    fence,
                    steps,
                    takeover: false,
                }
            }
            (_, claim) => claim,
        }
    }

    async fn around<T>(
        &self,
        write: bool,
        op: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let unavailable = |what: &str| StoreError::Unavailable(format!("simulated: {what}"));
        match self.fault(write).await {
            Fault::Before => Err(unavailable("the store did not answer")),
            Fault::LostReply => {
                let _ = op.await;
                Err(unavailable("the reply was lost after the store committed"))
            }
            Fault::None => op.await,
        }
    }
}

#[async_trait]
impl Store for FaultStore {
    async fn claim(&self, r: &ClaimRequest) -> Result<Claim, StoreError> {
        let claim = self.around(true, self.inner.claim(r)).await?;
        let claim = self.planted(r, claim).await;
        if let Claim::Acquired { fence, .. } = &claim {
            self.sim.fenced(r.key.as_str(), *fence);
        }
        Ok(claim)
    }
    async fn complete(
        &self,
        k: &RecordKey,
        f: Fence,
        o: &Outcome,
        t: Duration,
    ) -> Result<(), StoreError> {
        self.around(true, self.inner.complete(k, f, o, t)).await
    }
    async fn release(&self, k: &RecordKey, f: Fence) -> Result<bool, StoreError> {
        self.around(true, self.inner.release(k, f)).await
    }
    async fn renew(&self, k: &RecordKey, f: Fence, l: Duration) -> Result<Timestamp, StoreError> {
        self.around(true, self.inner.renew(k, f, l)).await
    }
    async fn journal(&self, k: &RecordKey, f: Fence, s: &str, v: &str) -> Result<(), StoreError> {
        self.around(true, self.inner.journal(k, f, s, v)).await
    }
    async fn mark_unknown(&self, k: &RecordKey, f: Fence, e: &str) -> Result<(), StoreError> {
        self.around(true, self.inner.mark_unknown(k, f, e)).await
    }
    async fn get(&self, k: &RecordKey) -> Result<Option<Record>, StoreError> {
        self.around(false, self.inner.get(k)).await
    }
    async fn list(&self, f: ListFilter) -> Result<Vec<Record>, StoreError> {
        self.around(false, self.inner.list(f)).await
    }
    async fn resolve(&self, k: &RecordKey, o: &Outcome, t: Duration) -> Result<Record, StoreError> {
        self.inner.resolve(k, o, t).await
    }
    async fn settle_unknown(
        &self,
        k: &RecordKey,
        f: Fence,
        o: Option<&Outcome>,
        t: Duration,
    ) -> Result<bool, StoreError> {
        self.around(true, self.inner.settle_unknown(k, f, o, t))
            .await
    }
    async fn force_release(&self, k: &RecordKey) -> Result<bool, StoreError> {
        self.inner.force_release(k).await
    }
    async fn purge_expired(&self, l: &PurgeFilter) -> Result<usize, StoreError> {
        self.inner.purge_expired(l).await
    }
    async fn now(&self) -> Result<Timestamp, StoreError> {
        self.around(false, self.inner.now()).await
    }
    async fn approval_text(&self, k: &RecordKey) -> Result<Option<String>, StoreError> {
        self.inner.approval_text(k).await
    }
    async fn swap_approval(
        &self,
        k: &RecordKey,
        expected: Option<&str>,
        entry: &PendingApproval,
        text: &str,
    ) -> Result<bool, StoreError> {
        self.inner.swap_approval(k, expected, entry, text).await
    }
    async fn remove_approval(&self, k: &RecordKey, expected: &str) -> Result<bool, StoreError> {
        self.inner.remove_approval(k, expected).await
    }
    async fn approval_texts(
        &self,
        f: &ApprovalFilter,
    ) -> Result<Vec<(RecordKey, String)>, StoreError> {
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
