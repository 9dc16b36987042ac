//! The approve stage: an irreversible call runs only with an approval signed by one of the
//! dispatcher's approval keys for exactly this call, unexpired on the store's clock
//! (ARCHITECTURE.md, "Approvals"; the checks are `crate::approval`'s).

use idem_core::{IdempotencyKey, Record, RecordState};
use serde_json::Value;

use super::call::{Dispatched, RunContext};
use super::error::DispatchError;
use super::key::Keyed;
use super::{Dispatcher, replay};
use crate::approval::{ApprovalRequest, Binding};
use crate::tool::ToolDef;

impl Dispatcher {
    /// `Ok(None)`: go on (approved, or the class needs no approval). `Ok(Some(_))`: the
    /// call's completed outcome, replayed without an approval (a replay causes no effect).
    /// Otherwise [`DispatchError::ApprovalRequired`] with what to approve.
    pub(super) async fn approve(
        &self,
        tool: &ToolDef,
        run: &RunContext,
        keyed: &Keyed,
        args: &Value,
    ) -> Result<Option<Dispatched>, DispatchError> {
        if !tool.class.requires_approval() {
            return Ok(None);
        }
        let key = keyed
            .keys
            .as_ref()
            .map_or("", |(_, downstream)| downstream.as_str());
        // Only approvals naming this call are read: a run may carry approvals of others.
        // The first refusal of one is reported if nothing replays.
        let mut refused = None;
        if run.approvals.iter().any(|a| a.names(&tool.name, key)) {
            // Expiry is the store's clock's to tell, as every other deadline.
            let now = self
                .store
                .now()
                .await
                .map_err(|e| super::error::store_error(tool, e))?;
            let binding = Binding {
                namespace: &self.namespace,
                tenant: &run.tenant,
                tool: &tool.name,
                key,
                fingerprint: keyed.fingerprint,
            };
            for approval in &run.approvals {
                if !approval.names(&tool.name, key) {
                    continue;
                }
                let longest = self.max_approval_validity;
                match approval.check(&self.approval_keys, &binding, longest, now) {
                    Ok(()) => return Ok(None),
                    Err(refusal) => refused = refused.or(Some(refusal)),
                }
            }
        }
        // A run replayed from a checkpoint without its approvals (or with expired ones) gets
        // the recorded outcome.
        // Only a completed record with these very arguments is replayed; anything that could
        // execute needs the approval. A store that cannot answer leaves it required.
        if let Some((record_key, downstream)) = &keyed.keys {
            let recorded = self.store.get(record_key).await.ok().flatten();
            if let Some(Record {
                fingerprint,
                state: RecordState::Completed { outcome, .. },
                ..
            }) = recorded
                && fingerprint == keyed.fingerprint
            {
                return replay(tool, record_key, downstream, outcome).map(Some);
            }
        }
        if let Some(refusal) = refused {
            return Err(DispatchError::ApprovalRefused {
                tool: tool.name.to_string(),
                key: IdempotencyKey::new(key),
                refusal,
            });
        }
        let arguments = match &keyed.sealed {
            Some(sealed) => sealed.clone(),
            None => Value::clone(args),
        };
        Err(DispatchError::ApprovalRequired {
            request: Box::new(ApprovalRequest {
                namespace: self.namespace.clone(),
                tenant: run.tenant.clone(),
                tool: tool.name.to_string(),
                key: IdempotencyKey::new(key),
                fingerprint: keyed.fingerprint,
                arguments,
            }),
        })
    }
}
