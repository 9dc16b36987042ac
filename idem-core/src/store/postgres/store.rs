//! The [`Store`] impl of the PostgreSQL backend: each operation is one statement (two for a
//! settlement, chosen by its outcome, and for a swap of a pending approval, chosen by
//! whether an entry is expected), on the database's clock.

use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::tokio_postgres::Row;

use super::PostgresBackend;
use super::codec::{decode, fence_param, millis, timestamp};
use super::statements::COLUMN_COUNT;
use crate::class::OrphanPolicy;
use crate::contract::Contract;
use crate::key::RecordKey;
use crate::record::{Fence, Outcome, Record, StateKind, Timestamp, UnknownCause};
use crate::store::approvals::{ApprovalFilter, PendingApproval};
use crate::store::codec::{outcome_json, signed_millis, state_kind, state_name};
use crate::store::{Claim, ClaimRequest, ListFilter, PurgeFilter, Store, StoreError};

/// How often an operator operation is retried when the record changed under it between the
/// statement's snapshot and its write.
const RACE_RETRIES: usize = 8;

#[async_trait]
impl Store for PostgresBackend {
    async fn claim(&self, request: &ClaimRequest) -> Result<Claim, StoreError> {
        let take_over = matches!(request.orphans, OrphanPolicy::TakeOver);
        let contract = request.contract.as_deref().map(Contract::to_json);
        let rows = self
            .db
            .query(
                &self.sql.claim,
                &[
                    &request.key.as_str(),
                    &request.tool,
                    &request.fingerprint.to_hex(),
                    &millis(request.lease),
                    &take_over,
                    &request.arguments,
                    &UnknownCause::Orphaned.recorded(),
                    &request.tenant,
                    &contract,
                ],
            )
            .await?;
        let row = single(rows, &request.key)?;
        let record = decode(&row, 0, &request.key)?;
        let action: String = row
            .try_get(COLUMN_COUNT)
            .map_err(|e| StoreError::corrupt(&request.key, format!("last_claim: {e}")))?;
        match action.as_str() {
            "inserted" | "reclaimed" => Ok(Claim::Acquired {
                fence: record.fence,
                steps: Vec::new(),
                takeover: false,
            }),
            "taken_over" => Ok(Claim::Acquired {
                fence: record.fence,
                steps: record.steps,
                takeover: true,
            }),
            "marked_unknown" | "existing" => Ok(Claim::Existing(record)),
            other => Err(StoreError::corrupt(
                &request.key,
                format!("unexpected claim action {other:?}"),
            )),
        }
    }

    async fn complete(
        &self,
        key: &RecordKey,
        fence: Fence,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let outcome = outcome_json(key, outcome)?;
        let fence_param = fence_param(key, fence)?;
        let changed = self
            .db
            .execute(
                &self.sql.complete,
                &[&key.as_str(), &fence_param, &outcome, &millis(ttl)],
            )
            .await?;
        held(changed, key, fence)
    }

    async fn release(&self, key: &RecordKey, fence: Fence) -> Result<bool, StoreError> {
        let Ok(fence_param) = i64::try_from(fence) else {
            return Ok(false);
        };
        let deleted = self
            .db
            .execute(&self.sql.release, &[&key.as_str(), &fence_param])
            .await?;
        Ok(deleted > 0)
    }

    async fn renew(
        &self,
        key: &RecordKey,
        fence: Fence,
        lease: Duration,
    ) -> Result<Timestamp, StoreError> {
        let fence_param = fence_param(key, fence)?;
        let rows = self
            .db
            .query(
                &self.sql.renew,
                &[&key.as_str(), &fence_param, &millis(lease)],
            )
            .await?;
        let Some(row) = rows.into_iter().next() else {
            return Err(StoreError::fenced(key, fence));
        };
        let until: i64 = row
            .try_get(0)
            .map_err(|e| StoreError::corrupt(key, format!("lease_until: {e}")))?;
        timestamp(key, "lease_until", until)
    }

    async fn journal(
        &self,
        key: &RecordKey,
        fence: Fence,
        step: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        let fence_param = fence_param(key, fence)?;
        let changed = self
            .db
            .execute(
                &self.sql.journal,
                &[&key.as_str(), &fence_param, &step, &value],
            )
            .await?;
        held(changed, key, fence)
    }

    async fn mark_unknown(
        &self,
        key: &RecordKey,
        fence: Fence,
        error: &str,
    ) -> Result<(), StoreError> {
        let fence_param = fence_param(key, fence)?;
        let changed = self
            .db
            .execute(
                &self.sql.mark_unknown,
                &[&key.as_str(), &fence_param, &error],
            )
            .await?;
        held(changed, key, fence)
    }

    async fn get(&self, key: &RecordKey) -> Result<Option<Record>, StoreError> {
        let rows = self.db.query(&self.sql.get, &[&key.as_str()]).await?;
        rows.first().map(|row| decode(row, 0, key)).transpose()
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<Record>, StoreError> {
        let state = filter.state.map(state_name);
        let limit = i64::try_from(filter.limit).unwrap_or(i64::MAX);
        let after = filter.after.as_ref().map(|c| signed_millis(c.created_at));
        let after_key = filter.after.as_ref().map(|c| c.key.as_str());
        let rows = match (&filter.tenant, filter.state) {
            (None, _) => {
                self.db
                    .query(&self.sql.list, &[&state, &limit, &after, &after_key])
                    .await?
            }
            (Some(tenant), Some(StateKind::Completed)) => {
                self.db
                    .query(
                        &self.sql.list_tenant_completed,
                        &[tenant, &limit, &after, &after_key],
                    )
                    .await?
            }
            (Some(tenant), _) => {
                self.db
                    .query(
                        &self.sql.list_tenant_open,
                        &[tenant, &state, &limit, &after, &after_key],
                    )
                    .await?
            }
        };
        let unknown_key = RecordKey::from_stored("<unreadable key>");
        rows.iter()
            .map(|row| decode(row, 0, &unknown_key))
            .collect()
    }

    async fn resolve(
        &self,
        key: &RecordKey,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<Record, StoreError> {
        let encoded = outcome_json(key, outcome)?;
        let ttl = millis(ttl);
        for _ in 0..RACE_RETRIES {
            let rows = self
                .db
                .query(&self.sql.resolve, &[&key.as_str(), &encoded, &ttl])
                .await?;
            let row = single(rows, key)?;
            let resolved: Option<String> = row
                .try_get(1)
                .map_err(|e| StoreError::corrupt(key, format!("key: {e}")))?;
            if resolved.is_some() {
                return decode(&row, 1, key);
            }
            unsettled_refusal(&row, key, "resolve")?;
        }
        Err(contended(key))
    }

    async fn settle_unknown(
        &self,
        key: &RecordKey,
        fence: Fence,
        outcome: Option<&Outcome>,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let fence_param = fence_param(key, fence)?;
        let changed = match outcome {
            Some(o) => {
                let encoded = outcome_json(key, o)?;
                let ttl = millis(ttl);
                self.db
                    .execute(
                        &self.sql.settle_complete,
                        &[&key.as_str(), &fence_param, &encoded, &ttl],
                    )
                    .await?
            }
            None => {
                self.db
                    .execute(&self.sql.settle_release, &[&key.as_str(), &fence_param])
                    .await?
            }
        };
        Ok(changed == 1)
    }

    async fn force_release(&self, key: &RecordKey) -> Result<bool, StoreError> {
        for _ in 0..RACE_RETRIES {
            let rows = self
                .db
                .query(&self.sql.force_release, &[&key.as_str()])
                .await?;
            let row = single(rows, key)?;
            let released: Option<String> = row
                .try_get(1)
                .map_err(|e| StoreError::corrupt(key, format!("key: {e}")))?;
            if released.is_some() {
                return Ok(true);
            }
            unsettled_refusal(&row, key, "release")?;
        }
        Err(contended(key))
    }

    async fn purge_expired(&self, filter: &PurgeFilter) -> Result<usize, StoreError> {
        if filter.limit == 0 {
            return Ok(0);
        }
        let limit = i64::try_from(filter.limit).unwrap_or(i64::MAX);
        let retention = millis(filter.unknown_retention);
        let purged = self
            .db
            .execute(&self.sql.purge, &[&limit, &retention, &filter.tenant])
            .await?;
        // Run accounts past their time go too (they are not records: not counted), and
        // expired budgets, of no tenant: gone for every reader already.
        self.db
            .execute(&self.sql.purge_run_entries, &[&filter.tenant])
            .await?;
        self.db.execute(&self.sql.purge_budgets, &[]).await?;
        Ok(usize::try_from(purged).unwrap_or(usize::MAX))
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        let rows = self.db.query(&self.sql.now, &[]).await?;
        let ms: i64 = rows
            .first()
            .ok_or_else(|| StoreError::Unavailable("the clock query returned no row".into()))?
            .try_get(0)
            .map_err(|e| StoreError::Unavailable(format!("unreadable database clock: {e}")))?;
        u64::try_from(ms).map(Timestamp).map_err(|_| {
            StoreError::Unavailable(format!("the database clock reads {ms} ms before the epoch"))
        })
    }

    async fn approval_text(&self, key: &RecordKey) -> Result<Option<String>, StoreError> {
        let rows = self
            .db
            .query(&self.sql.approval_text, &[&key.as_str()])
            .await?;
        rows.first()
            .map(|row| {
                row.try_get(0)
                    .map_err(|e| StoreError::corrupt(key, format!("pending approval: {e}")))
            })
            .transpose()
    }

    async fn swap_approval(
        &self,
        key: &RecordKey,
        expected: Option<&str>,
        entry: &PendingApproval,
        text: &str,
    ) -> Result<bool, StoreError> {
        let changed = match expected {
            None => {
                self.db
                    .execute(
                        &self.sql.insert_approval,
                        &[&key.as_str(), &entry.tenant, &entry.tool, &text],
                    )
                    .await?
            }
            Some(expected) => {
                self.db
                    .execute(
                        &self.sql.update_approval,
                        &[&key.as_str(), &entry.tenant, &entry.tool, &text, &expected],
                    )
                    .await?
            }
        };
        Ok(changed == 1)
    }

    async fn remove_approval(&self, key: &RecordKey, expected: &str) -> Result<bool, StoreError> {
        let deleted = self
            .db
            .execute(&self.sql.delete_approval, &[&key.as_str(), &expected])
            .await?;
        Ok(deleted == 1)
    }

    async fn approval_texts(
        &self,
        filter: &ApprovalFilter,
    ) -> Result<Vec<(RecordKey, String)>, StoreError> {
        let rows = match &filter.tenant {
            Some(tenant) => {
                self.db
                    .query(&self.sql.approval_texts_of_tenant, &[tenant, &filter.tool])
                    .await?
            }
            None => {
                self.db
                    .query(&self.sql.approval_texts, &[&filter.tool])
                    .await?
            }
        };
        rows.iter()
            .map(|row| {
                let key: String = row.try_get(0).map_err(|e| {
                    StoreError::corrupt(
                        &RecordKey::from_stored("<unreadable key>"),
                        format!("pending approval key: {e}"),
                    )
                })?;
                let key = RecordKey::from_stored(key);
                let text: String = row
                    .try_get(1)
                    .map_err(|e| StoreError::corrupt(&key, format!("pending approval: {e}")))?;
                Ok((key, text))
            })
            .collect()
    }

    async fn append_run_entry(
        &self,
        tenant: &str,
        run_id: &str,
        text: &str,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let ttl = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        self.db
            .execute(&self.sql.append_run_entry, &[&tenant, &run_id, &ttl, &text])
            .await?;
        Ok(())
    }

    async fn run_entries(&self, tenant: &str, run_id: &str) -> Result<Vec<String>, StoreError> {
        let rows = self
            .db
            .query(&self.sql.run_entries, &[&tenant, &run_id])
            .await?;
        rows.iter()
            .map(|row| {
                row.try_get(0).map_err(|e| {
                    StoreError::Unavailable(format!("unreadable run account entry: {e}"))
                })
            })
            .collect()
    }

    async fn budget_text(&self, scope: &str) -> Result<Option<String>, StoreError> {
        let rows = self
            .db
            .query(&self.sql.budget_text, &[&scope.as_bytes()])
            .await?;
        rows.first()
            .map(|row| {
                row.try_get(0)
                    .map_err(|e| StoreError::Unavailable(format!("unreadable budget: {e}")))
            })
            .transpose()
    }

    async fn swap_budget(
        &self,
        scope: &str,
        expected: Option<&str>,
        text: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let (scope, ttl) = (scope.as_bytes(), millis(ttl));
        let changed = match expected {
            None => {
                self.db
                    .execute(&self.sql.insert_budget, &[&scope, &text, &ttl])
                    .await?
            }
            Some(expected) => {
                self.db
                    .execute(&self.sql.update_budget, &[&scope, &text, &ttl, &expected])
                    .await?
            }
        };
        Ok(changed == 1)
    }
}

/// After an operator statement wrote nothing: the refusal its snapshot explains, or `Ok` if
/// the record changed under it and the statement should run again.
fn unsettled_refusal(row: &Row, key: &RecordKey, action: &'static str) -> Result<(), StoreError> {
    let seen: Option<String> = row
        .try_get(0)
        .map_err(|e| StoreError::corrupt(key, format!("state: {e}")))?;
    let Some(seen) = seen else {
        return Err(StoreError::NotFound(key.clone()));
    };
    match state_kind(&seen) {
        Some(StateKind::Completed) => Err(StoreError::settled(key, action)),
        Some(StateKind::InProgress | StateKind::Unknown) => Ok(()),
        None => Err(StoreError::corrupt(key, format!("unknown state {seen:?}"))),
    }
}

fn contended(key: &RecordKey) -> StoreError {
    StoreError::Unavailable(format!(
        "record {key} kept changing during an operator operation; try again"
    ))
}

/// A holder write changed one row, or the holder was fenced out.
fn held(changed: u64, key: &RecordKey, fence: Fence) -> Result<(), StoreError> {
    if changed == 0 {
        return Err(StoreError::fenced(key, fence));
    }
    Ok(())
}

fn single(rows: Vec<Row>, key: &RecordKey) -> Result<Row, StoreError> {
    rows.into_iter()
        .next()
        .ok_or_else(|| StoreError::Unavailable(format!("PostgreSQL returned no row for key {key}")))
}
