//! The store of a simulation: the real store behind the tests' hooked store
//! (`support/hooked_store.rs`) with a hook that, as the seed says, fails an operation before
//! it reaches the store, loses the reply of a write that committed, or delays it (other hosts
//! run meanwhile), and notes every fence a claim is handed. It can also carry a planted
//! defect, for the tests that prove the simulator catches one.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use idem::Store;
use idem::key::RecordKey;
use idem::record::RecordState;
use idem::store::{Claim, ClaimRequest, StoreError};

use crate::hooked_store::{Hook, Hooked, Op};
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

/// The simulation's hook around the real store (`store`, which the planted defects reach
/// directly).
#[derive(Debug)]
pub struct Faults {
    store: Arc<dyn Store>,
    sim: Sim,
    defect: Defect,
}

/// The store of a simulation: `store` with the seed's faults (and `defect`) around it.
pub fn faulty(store: Arc<dyn Store>, sim: Sim, defect: Defect) -> Hooked<Faults> {
    let faults = Faults {
        store: store.clone(),
        sim,
        defect,
    };
    Hooked::new(store, faults)
}

/// Whether the seed may fail `op`, and whether it writes (a write may lose its reply). The
/// operators' and the approvals' operations run without faults.
fn faulted(op: Op) -> Option<bool> {
    match op {
        Op::Claim
        | Op::Complete
        | Op::Release
        | Op::Renew
        | Op::Journal
        | Op::MarkUnknown
        | Op::SettleUnknown => Some(true),
        Op::Get | Op::List | Op::Now => Some(false),
        _ => None,
    }
}

fn unavailable(what: &str) -> StoreError {
    StoreError::Unavailable(format!("simulated: {what}"))
}

#[async_trait]
impl Hook for Faults {
    /// A delay the seed may add, then perhaps an error: the store never sees the operation.
    /// Outside the simulation's thread (the lease heartbeat), nothing.
    async fn before(&self, op: Op, _key: Option<&RecordKey>) -> Result<(), StoreError> {
        if faulted(op).is_none() || !turmoil::in_simulation() {
            return Ok(());
        }
        let roll = self.sim.roll();
        if (6..14).contains(&roll) {
            tokio::time::sleep(self.sim.up_to(Duration::from_millis(300))).await;
        }
        match roll {
            0..3 => Err(unavailable("the store did not answer")),
            _ => Ok(()),
        }
    }

    /// A write the store committed whose reply the seed loses.
    async fn after(&self, op: Op, _key: Option<&RecordKey>) -> Result<(), StoreError> {
        if faulted(op) != Some(true) || !turmoil::in_simulation() {
            return Ok(());
        }
        match self.sim.roll() {
            0..3 => Err(unavailable("the reply was lost after the store committed")),
            _ => Ok(()),
        }
    }

    /// The claim as the planted defect reports it; the fence it hands out is noted.
    async fn answer_claim(&self, r: &ClaimRequest, claim: Claim) -> Claim {
        let claim = match (self.defect, claim) {
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
                let _ = self.store.force_release(&r.key).await;
                Claim::Acquired {
                    fence,
                    steps,
                    takeover: false,
                }
            }
            (_, claim) => claim,
        };
        if let Claim::Acquired { fence, .. } = &claim {
            self.sim.fenced(r.key.as_str(), *fence);
        }
        claim
    }
}
