//! The [`Store`] impl of the Redis backend: each state change is its script's arguments and
//! the reading of its reply (what runs it is in `commands.rs`); the operator listings walk
//! the prefix with `SCAN`; pending approvals are one string each, listed by an index set;
//! budgets are one string each, named by a digest of their scope.

use std::time::Duration;

use async_trait::async_trait;
use redis::Value;

use super::codec::{decode_reply_record, millis, server_time, text};
use super::connection::Resend;
use super::keys::SCAN_COUNT;
use super::{EVICTION_GRACE, RedisBackend};
use crate::class::OrphanPolicy;
use crate::contract::Contract;
use crate::key::RecordKey;
use crate::record::{Fence, Outcome, Record, Timestamp, UnknownCause};
use crate::store::approvals::{ApprovalFilter, PendingApproval};
use crate::store::codec::outcome_json;
use crate::store::machine;
use crate::store::{Claim, ClaimRequest, ListFilter, PurgeFilter, Store, StoreError};

#[async_trait]
impl Store for RedisBackend {
    async fn claim(&self, request: &ClaimRequest) -> Result<Claim, StoreError> {
        let key = &request.key;
        let lease = millis(request.lease).to_string();
        let policy = match request.orphans {
            OrphanPolicy::TakeOver => "take_over",
            OrphanPolicy::MarkUnknown => "mark_unknown",
        };
        let (has_args, args) = match &request.arguments {
            Some(a) => ("1", a.as_str()),
            None => ("0", ""),
        };
        let fingerprint = request.fingerprint.to_hex();
        let contract = request.contract.as_deref().map(Contract::to_json);
        let (has_contract, contract) = match &contract {
            Some(c) => ("1", c.as_str()),
            None => ("0", ""),
        };
        let (status, rest, unconfirmed) = self
            .exec(
                &self.scripts.claim,
                key,
                &[
                    key.as_str().as_bytes(),
                    request.tool.as_bytes(),
                    fingerprint.as_bytes(),
                    lease.as_bytes(),
                    policy.as_bytes(),
                    has_args.as_bytes(),
                    args.as_bytes(),
                    request.tenant.as_bytes(),
                    self.unknown_retention_ms().to_string().as_bytes(),
                    self.retention_ms().to_string().as_bytes(),
                    UnknownCause::Orphaned.recorded().as_bytes(),
                    has_contract.as_bytes(),
                    contract.as_bytes(),
                ],
                true,
            )
            .await?;
        match (status.as_str(), rest.as_slice()) {
            ("acquired", [fence, takeover, record]) => {
                let fence = text(fence)
                    .and_then(|f| f.parse::<Fence>().ok())
                    .ok_or_else(|| StoreError::corrupt(key, "claim returned no fence"))?;
                let takeover = text(takeover).as_deref() == Some("1");
                if let Some(u) = unconfirmed {
                    return Err(self.give_back(key, fence, takeover, &u).await);
                }
                let record = decode_reply_record(key, record)?
                    .ok_or_else(|| StoreError::corrupt(key, "claimed record is missing"))?;
                Ok(Claim::Acquired {
                    fence,
                    steps: record.steps,
                    takeover,
                })
            }
            ("existing" | "marked_unknown", [record]) => {
                if let Some(u) = unconfirmed.filter(|_| status == "marked_unknown") {
                    return Err(u.error(
                        key,
                        "the orphan turned Unknown",
                        "it stands there, and is lost if the primary fails over before it \
                         replicates",
                    ));
                }
                decode_reply_record(key, record)?
                    .map(Claim::Existing)
                    .ok_or_else(|| StoreError::corrupt(key, "existing record is missing"))
            }
            _ => Err(unexpected(key, &status)),
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
        let (status, _) = self
            .run(
                &self.scripts.complete,
                key,
                "the outcome",
                &[
                    fence.to_string().as_bytes(),
                    outcome.as_bytes(),
                    millis(ttl).to_string().as_bytes(),
                    millis(EVICTION_GRACE).to_string().as_bytes(),
                    self.retention_ms().to_string().as_bytes(),
                ],
            )
            .await?;
        held(key, fence, &status)
    }

    async fn release(&self, key: &RecordKey, fence: Fence) -> Result<bool, StoreError> {
        let (status, _) = self
            .run(
                &self.scripts.release,
                key,
                "the release",
                &[
                    fence.to_string().as_bytes(),
                    self.retention_ms().to_string().as_bytes(),
                ],
            )
            .await?;
        changed(key, &status)
    }

    async fn renew(
        &self,
        key: &RecordKey,
        fence: Fence,
        lease: Duration,
    ) -> Result<Timestamp, StoreError> {
        let (status, rest) = self
            .run(
                &self.scripts.renew,
                key,
                "the renewed lease",
                &[
                    fence.to_string().as_bytes(),
                    millis(lease).to_string().as_bytes(),
                ],
            )
            .await?;
        match (status.as_str(), rest.as_slice()) {
            ("ok", [until]) => text(until)
                .and_then(|u| u.parse().ok())
                .map(Timestamp)
                .ok_or_else(|| StoreError::corrupt(key, "renew returned no lease end")),
            ("fenced", _) => Err(StoreError::fenced(key, fence)),
            _ => Err(unexpected(key, &status)),
        }
    }

    async fn journal(
        &self,
        key: &RecordKey,
        fence: Fence,
        step: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        let (status, _) = self
            .run(
                &self.scripts.journal,
                key,
                "the journaled step",
                &[
                    fence.to_string().as_bytes(),
                    step.as_bytes(),
                    value.as_bytes(),
                ],
            )
            .await?;
        held(key, fence, &status)
    }

    async fn mark_unknown(
        &self,
        key: &RecordKey,
        fence: Fence,
        error: &str,
    ) -> Result<(), StoreError> {
        let (status, _) = self
            .run(
                &self.scripts.mark_unknown,
                key,
                "the Unknown state",
                &[
                    fence.to_string().as_bytes(),
                    error.as_bytes(),
                    self.unknown_retention_ms().to_string().as_bytes(),
                    self.retention_ms().to_string().as_bytes(),
                ],
            )
            .await?;
        held(key, fence, &status)
    }

    async fn get(&self, key: &RecordKey) -> Result<Option<Record>, StoreError> {
        let mut records = self.read(&[(self.keys(key), key.clone())]).await?;
        Ok(records
            .pop()
            .and_then(|(now, r)| r.filter(|r| machine::is_live(r, now))))
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<Record>, StoreError> {
        let mut out = Vec::new();
        let mut walk = self.walk().await?;
        while let Some(keys) = self.next_page(&mut walk).await? {
            let records = self.read(&keys).await?;
            out.extend(records.into_iter().filter_map(|(now, r)| {
                r.filter(|r| {
                    filter.admits(r.state.kind(), &r.tenant)
                        && filter.after_cursor(r)
                        && machine::is_live(r, now)
                })
            }));
        }
        // SCAN may return a key more than once.
        crate::store::sort_listed(&mut out);
        out.dedup_by(|a, b| a.key == b.key);
        out.truncate(filter.limit);
        Ok(out)
    }

    async fn resolve(
        &self,
        key: &RecordKey,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<Record, StoreError> {
        let outcome = outcome_json(key, outcome)?;
        let (status, rest) = self
            .run(
                &self.scripts.resolve,
                key,
                "the resolved outcome",
                &[
                    outcome.as_bytes(),
                    millis(ttl).to_string().as_bytes(),
                    millis(EVICTION_GRACE).to_string().as_bytes(),
                    self.retention_ms().to_string().as_bytes(),
                ],
            )
            .await?;
        match (status.as_str(), rest.as_slice()) {
            ("ok", [record]) => decode_reply_record(key, record)?
                .ok_or_else(|| StoreError::corrupt(key, "resolved record is missing")),
            ("not_found", _) => Err(StoreError::NotFound(key.clone())),
            ("wrong_state", _) => Err(StoreError::settled(key, "resolve")),
            _ => Err(unexpected(key, &status)),
        }
    }

    async fn settle_unknown(
        &self,
        key: &RecordKey,
        fence: Fence,
        outcome: Option<&Outcome>,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let encoded = match outcome {
            Some(o) => outcome_json(key, o)?,
            None => String::new(),
        };
        let (status, _) = self
            .run(
                &self.scripts.settle_unknown,
                key,
                "the settlement",
                &[
                    fence.to_string().as_bytes(),
                    encoded.as_bytes(),
                    millis(ttl).to_string().as_bytes(),
                    millis(EVICTION_GRACE).to_string().as_bytes(),
                    self.retention_ms().to_string().as_bytes(),
                ],
            )
            .await?;
        changed(key, &status)
    }

    async fn force_release(&self, key: &RecordKey) -> Result<bool, StoreError> {
        let (status, _) = self
            .run(
                &self.scripts.force_release,
                key,
                "the release",
                &[self.retention_ms().to_string().as_bytes()],
            )
            .await?;
        match status.as_str() {
            "ok" => Ok(true),
            "not_found" => Err(StoreError::NotFound(key.clone())),
            "wrong_state" => Err(StoreError::settled(key, "release")),
            _ => Err(unexpected(key, &status)),
        }
    }

    async fn purge_expired(&self, filter: &PurgeFilter) -> Result<usize, StoreError> {
        let retention = millis(filter.unknown_retention).to_string();
        let fence_retention = self.retention_ms().to_string();
        let (has_tenant, tenant) = match &filter.tenant {
            Some(t) => ("1", t.as_str()),
            None => ("0", ""),
        };
        let mut purged = 0;
        let mut walk = self.walk().await?;
        while purged < filter.limit {
            let Some(keys) = self.next_page(&mut walk).await? else {
                break;
            };
            if !keys.is_empty() {
                // Read first so only candidates cost a script call; the script decides again.
                let records = self.read(&keys).await?;
                for (now, record) in records {
                    let Some(record) = record else { continue };
                    if purged >= filter.limit {
                        break;
                    }
                    if !machine::is_purgeable(&record, filter, now) {
                        continue;
                    }
                    let (status, _) = self
                        .run(
                            &self.scripts.purge,
                            &record.key,
                            "the purge",
                            &[
                                retention.as_bytes(),
                                fence_retention.as_bytes(),
                                has_tenant.as_bytes(),
                                tenant.as_bytes(),
                            ],
                        )
                        .await?;
                    if status == "ok" {
                        purged += 1;
                    }
                }
            }
        }
        Ok(purged)
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        let time: Value = self
            .conn
            .call(Resend::AfterDrop, |mut conn| async move {
                redis::cmd("TIME").query_async(&mut conn).await
            })
            .await?;
        server_time(&time).ok_or_else(|| StoreError::Unavailable("Redis TIME gave no time".into()))
    }

    async fn approval_text(&self, key: &RecordKey) -> Result<Option<String>, StoreError> {
        self.read_approval(key).await
    }

    async fn swap_approval(
        &self,
        key: &RecordKey,
        expected: Option<&str>,
        _: &PendingApproval,
        text: &str,
    ) -> Result<bool, StoreError> {
        let (has_expected, expected) = match expected {
            Some(e) => ("1", e),
            None => ("0", ""),
        };
        self.index_approval(key).await?;
        let approval = self.keys(key).approval;
        let (status, _) = self
            .run_on(
                &self.scripts.swap_approval,
                key,
                &[&approval],
                "the pending approval",
                &[
                    has_expected.as_bytes(),
                    expected.as_bytes(),
                    text.as_bytes(),
                ],
            )
            .await?;
        let put = changed(key, &status)?;
        if put {
            // Again after the swap: a removal running between the first index write and the
            // swap may have taken the key out of the index (it saw no entry yet).
            self.index_approval(key).await?;
        }
        Ok(put)
    }

    async fn remove_approval(&self, key: &RecordKey, expected: &str) -> Result<bool, StoreError> {
        let approval = self.keys(key).approval;
        let (status, _) = self
            .run_on(
                &self.scripts.remove_approval,
                key,
                &[&approval],
                "the pending approval",
                &[expected.as_bytes()],
            )
            .await?;
        let removed = changed(key, &status)?;
        if removed {
            self.unindex_approval(key).await?;
        }
        Ok(removed)
    }

    /// Every entry in the index: Redis keeps no index by tenant or tool, so the filter is
    /// left to the caller.
    async fn approval_texts(
        &self,
        _: &ApprovalFilter,
    ) -> Result<Vec<(RecordKey, String)>, StoreError> {
        let keys = self.approval_keys().await?;
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(SCAN_COUNT) {
            out.extend(self.read_approvals(chunk).await?);
        }
        Ok(out)
    }

    async fn append_run_entry(
        &self,
        tenant: &str,
        run_id: &str,
        text: &str,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        self.append_run(tenant, run_id, text, ttl).await
    }

    async fn run_entries(&self, tenant: &str, run_id: &str) -> Result<Vec<String>, StoreError> {
        self.read_run(tenant, run_id).await
    }

    async fn budget_text(&self, scope: &str) -> Result<Option<String>, StoreError> {
        let name = super::keys::budget(&self.prefix, scope);
        let name = name.as_str();
        let value: Value = self
            .conn
            .call(Resend::AfterDrop, move |mut conn| async move {
                redis::cmd("GET").arg(name).query_async(&mut conn).await
            })
            .await?;
        match value {
            Value::Nil => Ok(None),
            other => text(&other).map(Some).ok_or_else(|| {
                StoreError::Unavailable(format!("the budget {name} is not UTF-8 text"))
            }),
        }
    }

    async fn swap_budget(
        &self,
        scope: &str,
        expected: Option<&str>,
        text: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let (has_expected, expected) = match expected {
            Some(e) => ("1", e),
            None => ("0", ""),
        };
        let name = super::keys::budget(&self.prefix, scope);
        // Errors name the key by its digest, never by the scope (which may be an argument).
        let named = RecordKey::from_stored(name.as_str());
        let ttl = millis(ttl).max(1).to_string();
        let (status, _) = self
            .run_on(
                &self.scripts.swap_budget,
                &named,
                &[&name],
                "the budget",
                &[
                    has_expected.as_bytes(),
                    expected.as_bytes(),
                    text.as_bytes(),
                    ttl.as_bytes(),
                ],
            )
            .await?;
        changed(&named, &status)
    }
}

fn unexpected(key: &RecordKey, status: &str) -> StoreError {
    StoreError::corrupt(key, format!("unexpected script status {status:?}"))
}

/// A holder's write: done, or the holder was fenced out.
fn held(key: &RecordKey, fence: Fence, status: &str) -> Result<(), StoreError> {
    match status {
        "ok" => Ok(()),
        "fenced" => Err(StoreError::fenced(key, fence)),
        _ => Err(unexpected(key, status)),
    }
}

/// A write that may find nothing to do: whether it changed the record.
fn changed(key: &RecordKey, status: &str) -> Result<bool, StoreError> {
    match status {
        "ok" => Ok(true),
        "unchanged" => Ok(false),
        _ => Err(unexpected(key, status)),
    }
}
