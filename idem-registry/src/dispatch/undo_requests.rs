//! Undos a person asked for where the tools are not (the command line, the inbox): kept in
//! the store until the agent's dispatcher carries them out
//! ([`Dispatcher::undo_requested`], which [`Dispatcher::recover_every`] runs on each pass).
//!
//! The requests are one JSON list under one budget scope of the store (`Store::budget_text`
//! and `Store::swap_budget`: a text swapped whole, which every store has), so asking and
//! carrying out are a load and a compare-and-swap, retried while another writer changed it.
//! A run is asked for at most once while its request stands.

use std::time::Duration;

use idem_core::{Store, StoreError, Timestamp};
use serde::{Deserialize, Serialize};

use super::Dispatcher;
use super::undo_run::{RunUndo, UndoOutcome, UndoRunError};
use crate::tool::UndoOptions;

/// The scope the requests are kept under (a budget's scope is a longer JSON array: never
/// this one).
const SCOPE: &str = "[\"idem:undo-requests\"]";

/// How long a request not carried out is kept: 30 days.
const KEEP: Duration = Duration::from_secs(30 * 24 * 3600);

/// How many times asking loads and swaps before it reports the list as too contended.
const SWAPS: usize = 64;

/// A person's request that a run be undone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct UndoRequest {
    /// The tenant.
    pub tenant: String,
    /// The run.
    pub run_id: String,
    /// Who asked.
    pub by: String,
    /// When (the store's clock).
    pub at: Timestamp,
}

/// The requests standing in `store`, oldest first.
pub async fn undo_requests(store: &dyn Store) -> Result<Vec<UndoRequest>, StoreError> {
    Ok(load(store).await?.1)
}

async fn load(store: &dyn Store) -> Result<(Option<String>, Vec<UndoRequest>), StoreError> {
    let text = store.budget_text(SCOPE).await?;
    let list = match text.as_deref() {
        None => Vec::new(),
        Some(t) => serde_json::from_str(t).map_err(|e| {
            StoreError::Unavailable(format!(
                "the run undo requests hold text this version cannot read ({e})"
            ))
        })?,
    };
    Ok((text, list))
}

/// Change the list as `change` says (it returns whether it changed anything), by
/// compare-and-swap.
async fn swap(
    store: &dyn Store,
    change: impl Fn(&mut Vec<UndoRequest>) -> bool,
) -> Result<(), StoreError> {
    for _ in 0..SWAPS {
        let (text, mut list) = load(store).await?;
        if !change(&mut list) {
            return Ok(());
        }
        let new = serde_json::to_string(&list).unwrap_or_else(|_| "[]".to_owned());
        if store
            .swap_budget(SCOPE, text.as_deref(), &new, KEEP)
            .await?
        {
            return Ok(());
        }
    }
    Err(StoreError::Unavailable(
        "the run undo requests changed under every attempt to write them".into(),
    ))
}

/// Ask for `tenant`'s run `run_id` to be undone, as `by` (nothing more if it is asked for
/// already).
pub async fn request(
    store: &dyn Store,
    tenant: &str,
    run_id: &str,
    by: &str,
) -> Result<(), StoreError> {
    let at = store.now().await?;
    swap(store, |list| {
        if list
            .iter()
            .any(|r| r.tenant == tenant && r.run_id == run_id)
        {
            return false;
        }
        list.push(UndoRequest {
            tenant: tenant.to_owned(),
            run_id: run_id.to_owned(),
            by: by.to_owned(),
            at,
        });
        true
    })
    .await
}

impl Dispatcher {
    /// Carry out the run undos people asked for ([`undo_requests`]): each run undone as
    /// [`Dispatcher::undo_run`] does, and its request dropped once the undo ended (undone,
    /// or failed and so left for a person: an undo that fails is a case of its own). A run
    /// another host is undoing now stays asked for. Returns each request with what became
    /// of it.
    pub async fn undo_requested(
        &self,
    ) -> Result<Vec<(UndoRequest, Result<RunUndo, UndoRunError>)>, StoreError> {
        let mut done = Vec::new();
        for request in undo_requests(&*self.store).await? {
            let result = self
                .undo_run(
                    &request.tenant,
                    &request.run_id,
                    &UndoOptions::all().by(request.by.as_str()),
                )
                .await;
            let ended = match &result {
                Ok(undo) => !undo
                    .calls
                    .iter()
                    .any(|c| c.outcome == UndoOutcome::InProgress),
                Err(UndoRunError::NoAccounts { .. }) => false,
                Err(UndoRunError::Store { .. }) => false,
            };
            if ended {
                let (tenant, run_id) = (request.tenant.clone(), request.run_id.clone());
                swap(&*self.store, |list| {
                    let before = list.len();
                    list.retain(|r| r.tenant != tenant || r.run_id != run_id);
                    list.len() != before
                })
                .await?;
            }
            done.push((request, result));
        }
        Ok(done)
    }

    /// [`Dispatcher::undo_requested`], each outcome logged (what `recover_every` runs).
    pub(super) async fn undo_requested_logged(&self) {
        match self.undo_requested().await {
            Ok(done) => {
                for (request, result) in done {
                    match result {
                        Ok(undo) => {
                            tracing::info!(tenant = %request.tenant, run = %request.run_id, by = %request.by, "{undo}")
                        }
                        Err(e) => {
                            tracing::warn!(tenant = %request.tenant, run = %request.run_id, "a run undo asked for could not be carried out: {e}")
                        }
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "the run undos asked for could not be read"),
        }
    }
}
