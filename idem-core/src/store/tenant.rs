//! Operator operations confined to one tenant: what a support tool for one customer's
//! records uses, so that it can neither see nor settle another tenant's calls.
//!
//! Listing and purging filter by the tenant in the store. Operations by key read the record
//! first and refuse one of another tenant as if it did not exist: a record key is derived
//! from its tenant (ARCHITECTURE.md, "Keys"), so the tenant under a key never changes and the check
//! cannot be raced.

use std::sync::Arc;
use std::time::Duration;

use crate::key::RecordKey;
use crate::record::{Outcome, Record};
use crate::store::{ListFilter, PurgeFilter, Store, StoreError};

/// A store seen through one tenant's operator operations.
///
/// ```
/// use std::sync::Arc;
/// use idem::store::{memory::MemoryStore, tenant::TenantStore};
/// use idem::store::ListFilter;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let store = Arc::new(MemoryStore::new());
/// let acme = TenantStore::new(store, "acme");
/// let stuck = acme.list(ListFilter::default()).await.unwrap();
/// assert!(stuck.is_empty());
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct TenantStore {
    store: Arc<dyn Store>,
    tenant: String,
}

impl TenantStore {
    /// `store`'s records of `tenant` only.
    pub fn new(store: Arc<dyn Store>, tenant: impl Into<String>) -> Self {
        TenantStore {
            store,
            tenant: tenant.into(),
        }
    }

    /// The tenant.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// [`Store::list`], of this tenant's records (any tenant in `filter` is replaced).
    pub async fn list(&self, filter: ListFilter) -> Result<Vec<Record>, StoreError> {
        self.store
            .list(ListFilter {
                tenant: Some(self.tenant.clone()),
                ..filter
            })
            .await
    }

    /// [`Store::get`]: `None` for a record of another tenant.
    pub async fn get(&self, key: &RecordKey) -> Result<Option<Record>, StoreError> {
        Ok(self
            .store
            .get(key)
            .await?
            .filter(|r| r.tenant == self.tenant))
    }

    /// [`Store::resolve`], if the record is this tenant's ([`StoreError::NotFound`] if not).
    pub async fn resolve(
        &self,
        key: &RecordKey,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<Record, StoreError> {
        self.own(key).await?;
        self.store.resolve(key, outcome, ttl).await
    }

    /// [`Store::force_release`], if the record is this tenant's ([`StoreError::NotFound`] if
    /// not).
    pub async fn force_release(&self, key: &RecordKey) -> Result<bool, StoreError> {
        self.own(key).await?;
        self.store.force_release(key).await
    }

    /// [`Store::purge_expired`], of this tenant's records (any tenant in `filter` is
    /// replaced).
    pub async fn purge_expired(&self, filter: &PurgeFilter) -> Result<usize, StoreError> {
        self.store
            .purge_expired(&PurgeFilter {
                tenant: Some(self.tenant.clone()),
                ..filter.clone()
            })
            .await
    }

    async fn own(&self, key: &RecordKey) -> Result<(), StoreError> {
        match self.get(key).await? {
            Some(_) => Ok(()),
            None => Err(StoreError::NotFound(key.clone())),
        }
    }
}
