//! Budgets: how much of a limit the calls of one scope (a run, a tenant over a window, a
//! destination account) have taken, so that no two workers ever both take its last unit.
//!
//! A store keeps one JSON text per scope and offers two primitives
//! ([`Store::budget_text`], [`Store::swap_budget`]). Everything else is written once, here:
//! taking a share and giving it back are a load, a pure decision ([`decide_take`],
//! [`decide_give_back`]) and a compare-and-swap, retried while another writer changed the
//! text in between. Each share is held under its holder's name (a call's record key), so a
//! replay, a duplicate or a retry of the same call takes nothing more: taking is idempotent
//! per holder, and so is giving back.
//!
//! A budget with a window counts only the shares taken within it (a sliding window on the
//! store's clock); older shares are dropped when the text is next written.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::record::Timestamp;
use crate::store::{Store, StoreError};

/// How many times a take or a give-back loads and swaps before it reports the budget as too
/// contended (each lost race means another writer's change went in: progress was made).
const SWAPS: usize = 64;

/// One budget's shares by holder, as kept in the store.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// The format's version (1).
    pub v: u32,
    /// Each holder's share: its amount and when it was taken (ms on the store's clock).
    pub shares: BTreeMap<String, Share>,
}

/// One holder's share of a budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Share {
    /// How much it took.
    pub amount: u64,
    /// When (the store's clock).
    pub at: Timestamp,
}

impl Budget {
    /// The sum of the shares taken at or after `since` (all of them without a window).
    pub fn used(&self, since: Option<Timestamp>) -> u64 {
        self.shares
            .values()
            .filter(|s| since.is_none_or(|since| s.at >= since))
            .fold(0u64, |sum, s| sum.saturating_add(s.amount))
    }

    fn read(text: Option<&str>, scope: &str) -> Result<Budget, StoreError> {
        match text {
            None => Ok(Budget {
                v: 1,
                shares: BTreeMap::new(),
            }),
            Some(text) => serde_json::from_str(text).map_err(|e| {
                StoreError::Unavailable(format!(
                    "the budget `{scope}` holds text this version cannot read ({e}): it was written by another idem version or by hand"
                ))
            }),
        }
    }

    fn text(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// A share to take of a budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Take<'a> {
    /// The budget's scope: what it counts (the caller names it; e.g. tenant, run and limit).
    pub scope: &'a str,
    /// Who takes it: the call's record key, so that the same call never takes twice.
    pub holder: &'a str,
    /// How much (1 for a count of calls).
    pub amount: u64,
    /// The most the budget's shares may sum to.
    pub max: u64,
    /// A sliding window: only shares taken within it count (`None`: every share, for as long
    /// as the budget is kept).
    pub window: Option<Duration>,
    /// How long the budget is kept after this write, at least (the run's retention; a
    /// window's length).
    pub keep: Duration,
    /// Whether the share may pass the maximum (a person approved the call over it): it is
    /// taken, and counts, whatever is left.
    pub may_exceed: bool,
}

/// What a take found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// The share was taken now; `used` counts it.
    Granted {
        /// What the budget's shares sum to now.
        used: u64,
        /// What is left of it.
        left: u64,
    },
    /// The holder held a share already (a replay, a duplicate, a retry): nothing more taken.
    Held {
        /// What the budget's shares sum to.
        used: u64,
        /// What is left of it.
        left: u64,
    },
    /// The share would pass the budget's maximum: nothing was taken.
    Exceeded {
        /// What the budget's shares sum to.
        used: u64,
        /// What is left of it (less than the amount asked).
        left: u64,
    },
}

/// Decide a take against `budget` at `now`: the answer, and the budget to write (`None`:
/// nothing to write). Shares that fell out of the window are dropped from what is written.
pub fn decide_take(budget: &Budget, take: &Take<'_>, now: Timestamp) -> (Taken, Option<Budget>) {
    let since = take
        .window
        .map(|w| Timestamp(now.as_millis().saturating_sub(w.as_millis() as u64)));
    let used = budget.used(since);
    let left = take.max.saturating_sub(used);
    if let Some(share) = budget.shares.get(take.holder)
        && since.is_none_or(|since| share.at >= since)
    {
        return (Taken::Held { used, left }, None);
    }
    if take.amount > left && !take.may_exceed {
        return (Taken::Exceeded { used, left }, None);
    }
    let mut next = budget.clone();
    next.v = 1;
    if let Some(since) = since {
        next.shares.retain(|_, s| s.at >= since);
    }
    next.shares.insert(
        take.holder.to_owned(),
        Share {
            amount: take.amount,
            at: now,
        },
    );
    let used = used.saturating_add(take.amount);
    (
        Taken::Granted {
            used,
            left: take.max.saturating_sub(used),
        },
        Some(next),
    )
}

/// Decide giving `holder`'s share back: the budget to write, or `None` if it holds none.
pub fn decide_give_back(budget: &Budget, holder: &str) -> Option<Budget> {
    let mut next = budget.clone();
    next.shares.remove(holder)?;
    Some(next)
}

/// Take `take.amount` of the budget `take.scope` for `take.holder`, atomically against every
/// other taker: two takers can never both take its last unit.
pub async fn take<S: Store + ?Sized>(store: &S, take: &Take<'_>) -> Result<Taken, StoreError> {
    for _ in 0..SWAPS {
        let text = store.budget_text(take.scope).await?;
        let budget = Budget::read(text.as_deref(), take.scope)?;
        let now = store.now().await?;
        let (taken, next) = decide_take(&budget, take, now);
        let Some(next) = next else {
            return Ok(taken);
        };
        if store
            .swap_budget(take.scope, text.as_deref(), &next.text(), take.keep)
            .await?
        {
            return Ok(taken);
        }
    }
    Err(contended(take.scope))
}

/// Give `holder`'s share of the budget `scope` back (its call applied nothing, or was
/// undone). Returns whether it held one.
pub async fn give_back<S: Store + ?Sized>(
    store: &S,
    scope: &str,
    holder: &str,
    keep: Duration,
) -> Result<bool, StoreError> {
    for _ in 0..SWAPS {
        let text = store.budget_text(scope).await?;
        let budget = Budget::read(text.as_deref(), scope)?;
        let Some(next) = decide_give_back(&budget, holder) else {
            return Ok(false);
        };
        if store
            .swap_budget(scope, text.as_deref(), &next.text(), keep)
            .await?
        {
            return Ok(true);
        }
    }
    Err(contended(scope))
}

/// The budget `scope` as kept (empty if nothing was taken of it, or it expired).
pub async fn read<S: Store + ?Sized>(store: &S, scope: &str) -> Result<Budget, StoreError> {
    let text = store.budget_text(scope).await?;
    Budget::read(text.as_deref(), scope)
}

fn contended(scope: &str) -> StoreError {
    StoreError::Unavailable(format!(
        "the budget `{scope}` kept changing: {SWAPS} attempts to update it lost the race"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take<'a>(holder: &'a str, amount: u64, window: Option<u64>) -> Take<'a> {
        Take {
            scope: "s",
            holder,
            amount,
            max: 10,
            window: window.map(Duration::from_millis),
            keep: Duration::from_secs(60),
            may_exceed: false,
        }
    }

    fn with(shares: &[(&str, u64, u64)]) -> Budget {
        Budget {
            v: 1,
            shares: shares
                .iter()
                .map(|(h, amount, at)| {
                    (
                        h.to_string(),
                        Share {
                            amount: *amount,
                            at: Timestamp(*at),
                        },
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn takes_decided_as_a_table() {
        let now = Timestamp(1_000);
        // (budget, take, answer, shares written)
        let cases: Vec<(Budget, Take<'_>, Taken, Option<Vec<&str>>)> = vec![
            // An empty budget grants.
            (
                with(&[]),
                take("a", 4, None),
                Taken::Granted { used: 4, left: 6 },
                Some(vec!["a"]),
            ),
            // Exactly the last unit is granted.
            (
                with(&[("a", 9, 0)]),
                take("b", 1, None),
                Taken::Granted { used: 10, left: 0 },
                Some(vec!["a", "b"]),
            ),
            // One more than is left is refused, nothing written.
            (
                with(&[("a", 9, 0)]),
                take("b", 2, None),
                Taken::Exceeded { used: 9, left: 1 },
                None,
            ),
            // The same holder takes nothing more, even over the maximum.
            (
                with(&[("a", 10, 0)]),
                take("a", 10, None),
                Taken::Held { used: 10, left: 0 },
                None,
            ),
            // A window counts only its own shares, and drops the older ones when written.
            (
                with(&[("old", 9, 100), ("new", 1, 900)]),
                take("b", 5, Some(500)),
                Taken::Granted { used: 6, left: 4 },
                Some(vec!["b", "new"]),
            ),
            // A share a person approved over the maximum is taken, and counts.
            (
                with(&[("a", 9, 0)]),
                Take {
                    may_exceed: true,
                    ..take("b", 5, None)
                },
                Taken::Granted { used: 14, left: 0 },
                Some(vec!["a", "b"]),
            ),
            // A holder whose share fell out of the window takes again.
            (
                with(&[("a", 3, 100)]),
                take("a", 3, Some(500)),
                Taken::Granted { used: 3, left: 7 },
                Some(vec!["a"]),
            ),
        ];
        for (i, (budget, t, answer, written)) in cases.into_iter().enumerate() {
            let (got, next) = decide_take(&budget, &t, now);
            assert_eq!(got, answer, "case {i}");
            let holders = next.map(|b| b.shares.keys().cloned().collect::<Vec<_>>());
            assert_eq!(
                holders,
                written.map(|w| w.iter().map(|h| h.to_string()).collect()),
                "case {i}"
            );
        }
    }

    #[test]
    fn a_share_given_back_frees_its_amount_once() {
        let budget = with(&[("a", 4, 0), ("b", 6, 0)]);
        let next = decide_give_back(&budget, "a").expect("a held a share");
        assert_eq!(next.used(None), 6);
        assert_eq!(decide_give_back(&next, "a"), None);
    }

    #[test]
    fn a_budget_reads_back_as_written_and_refuses_what_it_cannot_read() {
        let budget = with(&[("k", 2, 7)]);
        let text = budget.text();
        assert_eq!(text, r#"{"v":1,"shares":{"k":{"amount":2,"at":7}}}"#);
        assert_eq!(Budget::read(Some(&text), "s").unwrap(), budget);
        let e = Budget::read(Some("{\"shares\": 3}"), "s").unwrap_err();
        assert!(e.to_string().contains("the budget `s` holds text"), "{e}");
    }
}
