//! The store conformance suite: the contract of [`Store`](crate::Store), as executable cases.
//!
//! Every store idem ships runs it; a user's own store can too:
//!
//! ```no_run
//! use std::sync::Arc;
//! use idem::store::conformance::{self, Subject};
//! use idem::store::memory::MemoryStore;
//!
//! # async fn run() {
//! conformance::run_all("memory", || async { Subject::real_time(Arc::new(MemoryStore::new())) }).await;
//! # }
//! ```
//!
//! Cases that need time to pass call [`Subject::pass`]: a store on a controllable clock
//! advances it, a store on a server's clock sleeps for real (the leases used are short).
//!
//! Cases that need a second instance of the store on the same data (two processes racing for
//! one key, a worker starting cold) open one through the subject: build it with
//! [`Subject::reopenable`] to say how. A store that cannot be opened twice (the memory store)
//! runs those cases on its one instance, and skips their cold starts.

//!
//! The cases live by theme: `holders.rs` (claims, orphans, fences, stale writes),
//! `outcomes.rs` (what replays, what is refused), `operators.rs` (listing, settling, purging),
//! `tenants.rs`, `instances.rs` (two instances on the same data, cold starts), `approvals.rs`,
//! `runs.rs` (run accounts), `budgets.rs` (budgets' compare-and-swap); `fixtures.rs` holds what
//! they share.
//!
//! A store of one's own is checked against what idem's stores refuse to record (an oversized
//! outcome, an operator's outcome that is not JSON) when it runs behind their
//! [`Limits`](crate::store::layer::Limits) layer, as theirs do:
//! `Subject::real_time(Arc::new(Limits::default().layer(my_store)))`.

use std::future::Future;
use std::pin::Pin;

mod approvals;
mod budgets;
mod fixtures;
mod holders;
mod instances;
mod operators;
mod outcomes;
mod runs;
mod subject;
mod tenants;

pub use subject::Subject;

type CaseFn = fn(Subject) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// Every case, by name.
pub const CASES: &[(&str, CaseFn)] = &[
    ("claim_race_has_one_winner", |s| {
        Box::pin(holders::claim_race_has_one_winner(s))
    }),
    ("takeover_increments_fence", |s| {
        Box::pin(holders::takeover_increments_fence(s))
    }),
    ("a_record_keeps_the_contract_it_was_made_under", |s| {
        Box::pin(holders::a_record_keeps_the_contract_it_was_made_under(s))
    }),
    (
        "an_orphan_made_under_a_stricter_class_is_not_taken_over",
        |s| Box::pin(holders::an_orphan_made_under_a_stricter_class_is_not_taken_over(s)),
    ),
    ("orphan_becomes_unknown", |s| {
        Box::pin(holders::orphan_becomes_unknown(s))
    }),
    ("stale_complete_is_refused", |s| {
        Box::pin(holders::stale_complete_is_refused(s))
    }),
    ("stale_release_changes_nothing", |s| {
        Box::pin(holders::stale_release_changes_nothing(s))
    }),
    ("expired_lease_cannot_be_renewed", |s| {
        Box::pin(holders::expired_lease_cannot_be_renewed(s))
    }),
    ("journal_survives_takeover", |s| {
        Box::pin(holders::journal_survives_takeover(s))
    }),
    ("fingerprint_is_kept", |s| {
        Box::pin(outcomes::fingerprint_is_kept(s))
    }),
    ("outputs_round_trip_exactly", |s| {
        Box::pin(outcomes::outputs_round_trip_exactly(s))
    }),
    ("oversized_output_is_refused", |s| {
        Box::pin(outcomes::oversized_output_is_refused(s))
    }),
    ("completed_records_expire", |s| {
        Box::pin(outcomes::completed_records_expire(s))
    }),
    ("purge_is_bounded", |s| {
        Box::pin(operators::purge_is_bounded(s))
    }),
    ("operator_list_resolve_release", |s| {
        Box::pin(operators::operator_list_resolve_release(s))
    }),
    ("fence_moves_on_within_one_millisecond", |s| {
        Box::pin(holders::fence_moves_on_within_one_millisecond(s))
    }),
    ("fence_is_not_reused_after_release", |s| {
        Box::pin(holders::fence_is_not_reused_after_release(s))
    }),
    ("unknown_is_settled_once", |s| {
        Box::pin(operators::unknown_is_settled_once(s))
    }),
    ("an_outcome_that_is_not_json_is_refused", |s| {
        Box::pin(outcomes::an_outcome_that_is_not_json_is_refused(s))
    }),
    ("orphan_with_other_arguments_is_not_taken_over", |s| {
        Box::pin(holders::orphan_with_other_arguments_is_not_taken_over(s))
    }),
    ("approval_request_is_kept_while_it_stands", |s| {
        Box::pin(approvals::a_request_is_kept_while_it_stands(s))
    }),
    ("approval_decision_is_made_once", |s| {
        Box::pin(approvals::a_decision_is_made_once(s))
    }),
    ("pending_approvals_are_listed_by_tenant_and_tool", |s| {
        Box::pin(approvals::pending_approvals_are_listed_by_tenant_and_tool(
            s,
        ))
    }),
    ("expired_approvals_are_purged_after_their_retention", |s| {
        Box::pin(approvals::expired_approvals_are_purged_after_their_retention(s))
    }),
    ("tenant_is_kept_and_read_back", |s| {
        Box::pin(tenants::tenant_is_kept_and_read_back(s))
    }),
    ("a_listing_pages_by_its_cursor", |s| {
        Box::pin(tenants::a_listing_pages_by_its_cursor(s))
    }),
    ("list_by_tenant_returns_only_that_tenant", |s| {
        Box::pin(tenants::list_by_tenant_returns_only_that_tenant(s))
    }),
    ("purge_by_tenant_leaves_other_tenants", |s| {
        Box::pin(tenants::purge_by_tenant_leaves_other_tenants(s))
    }),
    ("unknown_is_purged_only_after_its_retention", |s| {
        Box::pin(operators::unknown_is_purged_only_after_its_retention(s))
    }),
    ("in_progress_is_never_purged", |s| {
        Box::pin(operators::in_progress_is_never_purged(s))
    }),
    ("a_live_claim_is_never_taken_for_an_orphan", |s| {
        Box::pin(holders::a_live_claim_is_never_taken_for_an_orphan(s))
    }),
    ("two_instances_race_and_one_claim_wins", |s| {
        Box::pin(instances::two_instances_race_and_one_claim_wins(s))
    }),
    ("an_orphan_of_a_tool_that_compensates_is_taken_over", |s| {
        Box::pin(holders::an_orphan_of_a_tool_that_compensates_is_taken_over(
            s,
        ))
    }),
    ("run_entries_come_back_in_order_and_apart", |s| {
        Box::pin(runs::run_entries_come_back_in_order_and_apart(s))
    }),
    ("concurrent_run_entries_all_land", |s| {
        Box::pin(runs::concurrent_run_entries_all_land(s))
    }),
    ("expired_run_entries_are_not_returned", |s| {
        Box::pin(runs::expired_run_entries_are_not_returned(s))
    }),
    ("a_budget_is_swapped_only_from_what_is_there", |s| {
        Box::pin(budgets::a_budget_is_swapped_only_from_what_is_there(s))
    }),
    ("budgets_expire_on_the_store_clock", |s| {
        Box::pin(budgets::budgets_expire_on_the_store_clock(s))
    }),
    ("budget_scopes_are_kept_apart", |s| {
        Box::pin(budgets::budget_scopes_are_kept_apart(s))
    }),
    ("concurrent_budget_swaps_lose_no_update", |s| {
        Box::pin(budgets::concurrent_budget_swaps_lose_no_update(s))
    }),
    (
        "a_completed_record_keeps_its_fingerprint_across_a_cold_start",
        |s| Box::pin(instances::a_completed_record_keeps_its_fingerprint_across_a_cold_start(s)),
    ),
];

/// How many cases run at once: each has a subject of its own (its own store, file, schema or
/// prefix, and clock), so they cannot meet; a few at once overlap their waits on real time.
const CONCURRENT_CASES: usize = 4;

/// Run every case, each on a fresh subject from `make`, a few at once. Panics naming every
/// failing case and why it failed.
pub async fn run_all<F, Fut>(store_name: &str, make: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Subject>,
{
    let mut failures = Vec::new();
    let mut running = std::collections::VecDeque::new();
    let mut finished = Vec::new();
    for (name, case) in CASES {
        if running.len() >= CONCURRENT_CASES
            && let Some(oldest) = running.pop_front()
        {
            finished.push(settle(oldest).await);
        }
        let subject = make().await;
        running.push_back((*name, tokio::spawn(case(subject))));
    }
    while let Some(case) = running.pop_front() {
        finished.push(settle(case).await);
    }
    failures.extend(finished.into_iter().flatten());
    if !failures.is_empty() {
        panic!(
            "store `{store_name}` failed {} of {} conformance cases:\n{}",
            failures.len(),
            CASES.len(),
            failures.join("\n")
        );
    }
}

/// A case's failure, if it failed: its name and why.
async fn settle((name, handle): (&str, tokio::task::JoinHandle<()>)) -> Option<String> {
    let e = handle.await.err()?;
    let why = e
        .try_into_panic()
        .ok()
        .and_then(|p| {
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        })
        .unwrap_or_else(|| "cancelled".into());
    Some(format!("`{name}`: {why}"))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::store::memory::{ManualClock, MemoryStore};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn memory_store_conforms_on_a_manual_clock() {
        run_all("memory", || async {
            let clock = Arc::new(ManualClock::new());
            Subject::manual(
                Arc::new(MemoryStore::new().with_clock(clock.clone())),
                clock,
            )
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn memory_store_conforms_in_real_time() {
        run_all("memory", || async {
            Subject::real_time(Arc::new(MemoryStore::new()))
        })
        .await;
    }
}
