//! The approve stage: an irreversible call runs only with an approval of exactly this key
//! and these arguments (ARCHITECTURE.md, "Approvals").

use idem_core::{IdempotencyKey, Record, RecordState};
use serde_json::Value;

use super::call::{Dispatched, RunContext};
use super::error::DispatchError;
use super::key::Keyed;
use super::{Dispatcher, replay};
use crate::approval::ApprovalRequest;
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
        // Compared in the order that rejects a foreign approval soonest; nothing is copied
        // unless a request has to be built.
        let approved = run.approvals.iter().any(|a| {
            a.fingerprint == keyed.fingerprint && a.key.as_str() == key && a.tool == tool.name
        });
        if approved {
            return Ok(None);
        }
        // A run replayed from a checkpoint without its approvals gets the recorded outcome.
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
        let arguments = match &keyed.sealed {
            Some(sealed) => sealed.clone(),
            None => Value::clone(args),
        };
        Err(DispatchError::ApprovalRequired {
            request: Box::new(ApprovalRequest {
                tool: tool.name.to_string(),
                key: IdempotencyKey::new(key),
                fingerprint: keyed.fingerprint,
                arguments,
            }),
        })
    }
}
